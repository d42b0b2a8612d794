//! The pidfd syscalls: the only `unsafe` of the scope module.
//!
//! libc exposes the syscall numbers but no wrappers (glibc added them in 2.36), and nix has
//! none, so they are called directly.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

/// pidfd_open(2): a file descriptor that refers to the process `pid` is now (Linux 5.3).
pub fn pidfd_open(pid: u32) -> Result<OwnedFd, Errno> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| Errno::ESRCH)?;
    // SAFETY: pidfd_open takes a pid and a flags word by value and touches no memory of ours;
    // see `man 2 pidfd_open`.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
    if ret < 0 {
        return Err(Errno::last());
    }
    let fd = RawFd::try_from(ret).map_err(|_| Errno::EBADF)?;
    // SAFETY: on success the kernel returned a new file descriptor that nothing else owns;
    // OwnedFd takes it over and closes it once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// pidfd_send_signal(2) with signal 0: Ok while the process behind `pidfd` has not exited
/// (ESRCH once it has, even if its pid number was reused since).
pub fn pidfd_alive(pidfd: &OwnedFd) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    // SAFETY: the fd is open for the duration of the call (borrowed from an OwnedFd); signal
    // 0 sends nothing, info is NULL as the man page allows, flags are 0; see
    // `man 2 pidfd_send_signal`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0 as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        )
    };
    if ret < 0 { Err(Errno::last()) } else { Ok(()) }
}
