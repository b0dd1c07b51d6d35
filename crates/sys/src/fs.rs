//! File-system calls the apply stage needs beyond std: an advisory lock that fails fast instead of
//! waiting, and mounting/unmounting a pseudo file system (debugfs for the fair_server knobs).

use std::fs::File;
use std::io;
use std::path::Path;

/// Takes an exclusive `flock(2)` on `file` without waiting: `Ok(false)` when another open file
/// description holds it. The lock is released when `file` is closed.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Mounts a pseudo file system of type `fstype` (source "none") at `target`.
pub fn mount_pseudo(fstype: &str, target: &Path) -> io::Result<()> {
    rustix::mount::mount("none", target, fstype, rustix::mount::MountFlags::empty(), None)?;
    Ok(())
}

/// Lazily unmounts `target` (MNT_DETACH: users of the mount keep it until they let go). EINVAL (not
/// a mount point any more) is reported like any other error; callers decide whether it matters.
pub fn unmount_detach(target: &Path) -> io::Result<()> {
    rustix::mount::unmount(target, rustix::mount::UnmountFlags::DETACH)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_is_exclusive_between_open_files() {
        let path = std::env::temp_dir().join(format!("rtslice-sys-lock-{}", std::process::id()));
        let a = File::create(&path).unwrap();
        let b = File::open(&path).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        drop(a);
        assert!(try_lock_exclusive(&b).unwrap());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn unmounting_a_plain_directory_is_an_error() {
        let e = unmount_detach(&std::env::temp_dir()).unwrap_err();
        assert!(matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EPERM)), "{e}");
    }
}
