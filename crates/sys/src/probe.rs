//! What the running kernel offers, asked directly: the online CPU count and whether hardware
//! performance counters can be opened (`rtslice doctor`).

use std::io;

/// Online CPUs according to `sysconf(_SC_NPROCESSORS_ONLN)`, at least 1. Prefer the CPU list in
/// /sys/devices/system/cpu/online where it is readable: this is the fallback for when it is not.
pub fn online_cpu_count() -> u32 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN) {
        Ok(Some(n)) if n > 0 => n as u32,
        _ => 1,
    }
}

/// Opens (disabled) and closes a CPU-cycles hardware counter for this process: `Ok` when the machine
/// has a PMU the kernel exposes, the kernel's error otherwise (ENOENT/EOPNOTSUPP in VMs without one).
pub fn hardware_counters() -> io::Result<()> {
    // perf_event_attr VER0 is 64 bytes; only type (HARDWARE = 0), size, config (CPU_CYCLES = 0) and
    // the flags word (disabled = 1) are set. No crate wraps perf_event_open(2).
    #[repr(C)]
    struct Attr {
        type_: u32,
        size: u32,
        config: u64,
        rest: [u64; 6],
    }
    let mut attr = Attr { type_: 0, size: 64, config: 0, rest: [0; 6] };
    attr.rest[2] = 1;
    // SAFETY: `attr` is a valid, initialized perf_event_attr prefix whose `size` field matches its
    // size; the kernel only reads it. pid 0/cpu -1/group -1/flags 0 are plain integers.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &mut attr as *mut Attr, 0, -1, -1, 0u64) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it; OwnedFd closes it.
    drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_probes_answer() {
        assert!(online_cpu_count() >= 1);
        assert_eq!(online_cpu_count() as usize, std::fs::read_to_string("/sys/devices/system/cpu/online").map(|s| {
            s.trim().split(',').map(|r| match r.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                None => 1,
            }).sum()
        }).unwrap_or(online_cpu_count() as usize));
        // Either answer is legitimate; an error must carry the kernel's errno, never a made-up one.
        if let Err(e) = hardware_counters() {
            assert!(e.raw_os_error().is_some(), "{e}");
        }
    }
}
