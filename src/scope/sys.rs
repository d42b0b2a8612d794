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
///
/// EPERM also means alive: the kernel finds the task first (ESRCH when it has exited) and
/// only then checks the permission to signal it (`kill_pid_info_type()` ->
/// `group_send_sig_info()` -> `check_kill_permission()` in kernel/signal.c). pghotd runs
/// without CAP_KILL (the unit's CapabilityBoundingSet), so every process of another user
/// answers EPERM; taking that for an error refused every promotion of such processes.
pub fn pidfd_alive(pidfd: &OwnedFd) -> Result<(), Errno> {
    match pidfd_signal0(pidfd) {
        Err(Errno::EPERM) => Ok(()),
        other => other,
    }
}

/// pidfd_send_signal(2) with signal 0, its answer as the kernel gave it.
fn pidfd_signal0(pidfd: &OwnedFd) -> Result<(), Errno> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// As the service runs it: root without CAP_KILL, watching a process of another user.
    #[test]
    fn another_users_process_is_alive_without_cap_kill_and_gone_once_reaped() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root (a process of another user)");
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        let fd = pidfd_open(child.id()).unwrap();
        // Capabilities are per thread: drop CAP_KILL in a thread of its own.
        let (raw, alive, fd) = std::thread::spawn(move || {
            caps::drop(None, caps::CapSet::Effective, caps::Capability::CAP_KILL).unwrap();
            (pidfd_signal0(&fd), pidfd_alive(&fd), fd)
        })
        .join()
        .unwrap();
        assert_eq!(
            raw,
            Err(Errno::EPERM),
            "the kernel refuses the signal without CAP_KILL"
        );
        assert_eq!(alive, Ok(()), "...and the process is alive");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(pidfd_alive(&fd), Err(Errno::ESRCH));
    }
}
