//! The move_pages(2) syscall boundary: the only `unsafe` of the migrator.

use nix::errno::Errno;

/// MPOL_MF_MOVE: move pages mapped only by the target; a page mapped by more than one process
/// gets -EACCES (`pgpromote_fail_shared`).
pub const MPOL_MF_MOVE: libc::c_int = 1 << 1;

/// MPOL_MF_MOVE_ALL: move shared pages too (`move_shared = true`). The kernel refuses the whole
/// call with EPERM unless the caller has CAP_SYS_NICE (`kernel_move_pages()`).
pub const MPOL_MF_MOVE_ALL: libc::c_int = 1 << 2;

/// move_pages(2). `nodes` `None` is query mode (flags 0); otherwise MPOL_MF_MOVE, or
/// MPOL_MF_MOVE_ALL when `move_all`. Returns the syscall's non-negative result: 0, or the number
/// of pages not migrated.
///
/// See `man 2 move_pages` and `kernel_move_pages()`, `do_pages_move()` and `do_pages_stat()` in
/// `mm/migrate.c`.
pub fn move_pages(
    pid: u32,
    pages: &[u64],
    nodes: Option<&[i32]>,
    status: &mut [i32],
    move_all: bool,
) -> Result<usize, Errno> {
    assert_eq!(pages.len(), status.len(), "one status per page");
    if let Some(nodes) = nodes {
        assert_eq!(pages.len(), nodes.len(), "one node per page");
    }
    let pid = libc::pid_t::try_from(pid).map_err(|_| Errno::ESRCH)?;
    let (nodes_ptr, flags) = match nodes {
        Some(n) if move_all => (n.as_ptr(), MPOL_MF_MOVE_ALL),
        Some(n) => (n.as_ptr(), MPOL_MF_MOVE),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: `pages`, `nodes` (when given) and `status` are live slices of exactly
    // `pages.len()` elements (asserted above); the kernel reads `count` u64 addresses (void *
    // is 64-bit on the supported targets) and i32 nodes, and writes at most `count` i32
    // statuses. It keeps no reference to them after the call returns.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            flags,
        )
    };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as usize)
    }
}
