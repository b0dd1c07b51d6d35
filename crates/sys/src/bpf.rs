//! The two bpf(2) commands rtslice's tracer issues outside libbpf-rs's safe API: switching on
//! run-time statistics of BPF programs (what `kernel.bpf_stats_enabled=1` does, held only as long as
//! the returned fd, so nothing global is left to restore) and reading a program's run counters.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::error::{Result, SysError};

const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_ENABLE_STATS: libc::c_long = 32;

/// Byte offsets in the kernel's `struct bpf_prog_info` (uapi/linux/bpf.h, stable ABI; the tracer's
/// tests compare them with libbpf-sys's generated struct).
pub mod prog_info_layout {
    pub const RUN_TIME_NS: usize = 192;
    pub const RUN_CNT: usize = 200;
    pub const RECURSION_MISSES: usize = 208;
    /// Room for the struct as of Linux 6.x (it ends at 228 bytes); a newer kernel copies no more
    /// than we offer, an older one leaves the tail zero.
    pub const SIZE: usize = 232;
}

/// Turns on run-time statistics (BPF_STATS_RUN_TIME) for as long as the returned fd is open.
pub fn enable_run_time_stats() -> Result<OwnedFd> {
    // union bpf_attr for BPF_ENABLE_STATS: { __u32 type; } with BPF_STATS_RUN_TIME = 0.
    let attr = [0u64; 2];
    // No crate wraps bpf(2) safely.
    // SAFETY: attr is 16 readable bytes and we pass that size; the kernel only reads it.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_ENABLE_STATS, attr.as_ptr(), 16u32) };
    if fd < 0 {
        return Err(SysError::call("bpf(BPF_ENABLE_STATS, BPF_STATS_RUN_TIME)")(std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this fd; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A BPF program's counters: run time and runs (counted only while run-time statistics are on) and
/// runs the kernel skipped because the program was already running on that CPU (lost events).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgRunStats {
    pub run_time_ns: u64,
    pub run_cnt: u64,
    pub recursion_misses: u64,
}

/// Reads the counters of the BPF program behind `prog` (BPF_OBJ_GET_INFO_BY_FD).
pub fn prog_run_stats(prog: BorrowedFd<'_>) -> Result<ProgRunStats> {
    use prog_info_layout as at;
    let mut info = [0u8; at::SIZE];
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let attr = InfoAttr { bpf_fd: prog.as_raw_fd() as u32, info_len: at::SIZE as u32, info: info.as_mut_ptr() as u64 };
    // SAFETY: attr is a valid bpf_attr prefix of the size passed; `info` is SIZE writable bytes, the
    // length attr declares, and outlives the call; the kernel writes at most that.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_GET_INFO_BY_FD, &attr as *const InfoAttr, std::mem::size_of::<InfoAttr>() as u32) };
    if rc != 0 {
        return Err(SysError::call("bpf(BPF_OBJ_GET_INFO_BY_FD)")(std::io::Error::last_os_error()));
    }
    let word = |at: usize| u64::from_ne_bytes(info[at..at + 8].try_into().expect("8 bytes"));
    Ok(ProgRunStats { run_time_ns: word(at::RUN_TIME_NS), run_cnt: word(at::RUN_CNT), recursion_misses: word(at::RECURSION_MISSES) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn stats_fd_as_root_and_a_clear_error_on_a_non_bpf_fd() {
        if crate::process::is_root() {
            let fd = enable_run_time_stats().expect("root may enable BPF run-time stats");
            drop(fd);
        }
        let not_bpf = std::fs::File::open("/proc/self/stat").unwrap();
        let e = prog_run_stats(not_bpf.as_fd()).unwrap_err();
        assert!(e.to_string().contains("BPF_OBJ_GET_INFO_BY_FD"), "{e}");
    }
}
