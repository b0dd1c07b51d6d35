//! Mounting and lazily unmounting a pseudo file system (debugfs for the fair_server knobs), the
//! file-system calls the apply stage needs beyond std. File locks are [`crate::lock`]'s.

use std::io;
use std::path::Path;

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
    fn unmounting_a_plain_directory_is_an_error() {
        let e = unmount_detach(&std::env::temp_dir()).unwrap_err();
        assert!(matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EPERM)), "{e}");
    }
}
