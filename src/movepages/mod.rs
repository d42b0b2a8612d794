//! The move_pages(2) seam: the real syscall, or a scripted fake in tests; and the mapping of
//! every kernel answer to one counted outcome per page.

mod sys;

use nix::errno::Errno;

use crate::stats::Counter;

/// Status value the kernel never writes: marks entries it left unwritten.
pub const STATUS_UNWRITTEN: i32 = i32::MIN;

/// move_pages(2) as the migrator needs it.
pub trait Mover: Send {
    /// `nodes` `None` queries where pages are. Returns the syscall's non-negative result.
    fn move_pages(
        &mut self,
        pid: u32,
        pages: &[u64],
        nodes: Option<&[i32]>,
        status: &mut [i32],
    ) -> Result<usize, Errno>;
}

/// The real syscall. `SysMover::default()` moves only pages the target maps alone
/// (MPOL_MF_MOVE); [`SysMover::moving_shared`] can move shared pages too.
#[derive(Debug, Default, Clone, Copy)]
pub struct SysMover {
    move_all: bool,
}

impl SysMover {
    /// With `move_all`, moves use MPOL_MF_MOVE_ALL: pages other processes also map (a
    /// database's shared buffers, a forked server's heap) move too, for every process that
    /// maps them. The kernel then requires CAP_SYS_NICE of the caller for every move call
    /// (EPERM otherwise: `pgpromote_fail_permission`). Queries are unaffected.
    pub fn moving_shared(move_all: bool) -> SysMover {
        SysMover { move_all }
    }
}

impl Mover for SysMover {
    fn move_pages(
        &mut self,
        pid: u32,
        pages: &[u64],
        nodes: Option<&[i32]>,
        status: &mut [i32],
    ) -> Result<usize, Errno> {
        sys::move_pages(pid, pages, nodes, status, self.move_all)
    }
}

/// CAP_SYS_NICE in `capabilities(7)` numbering.
const CAP_SYS_NICE: u32 = 23;

/// Says up front when `move_shared` cannot work: MPOL_MF_MOVE_ALL without CAP_SYS_NICE in the
/// effective set fails every move call with EPERM (`kernel_move_pages()` in mm/migrate.c checks
/// it before anything else). `None` when the capability is there or the status is unreadable.
pub fn move_all_warning() -> Option<String> {
    let status: procfs::process::Status = crate::safefs::read_proc(
        std::path::Path::new("/proc/self/status"),
        crate::safefs::limit::STATUS,
    )
    .ok()?;
    (status.capeff >> CAP_SYS_NICE & 1 == 0).then(|| {
        "move_shared = true, but this process lacks CAP_SYS_NICE: every move will fail with \
         EPERM (pgpromote_fail_permission); grant CAP_SYS_NICE or set move_shared = false"
            .to_string()
    })
}

/// Whether move_pages(2) can be called at all, asked once at start with an empty query of
/// pghotd's own process. That call touches nothing: with `pid` 0 `kernel_move_pages()`
/// (mm/migrate.c) skips the ptrace and LSM checks of another process, and with no pages
/// `do_pages_stat()` returns 0. So EPERM can only come from a seccomp filter in front of the
/// kernel (the default profiles of Docker, containerd and podman deny move_pages whatever the
/// capabilities: packaging/README.md, "Container"), and ENOSYS from a kernel built without
/// CONFIG_MIGRATION. `Err` holds the operator's message.
pub fn check_callable() -> Result<(), String> {
    match sys::move_pages(0, &[], None, &mut [], false) {
        Ok(_) => Ok(()),
        Err(Errno::EPERM) => {
            let mode = crate::safefs::read_proc::<procfs::process::Status>(
                std::path::Path::new("/proc/self/status"),
                crate::safefs::limit::STATUS,
            )
            .ok()
            .and_then(|s| s.seccomp);
            let filtered = match mode {
                Some(2) => {
                    "this process runs under a seccomp filter (/proc/self/status: Seccomp: 2)"
                }
                _ => "a seccomp filter or security module refuses it",
            };
            Err(format!(
                "move_pages(2) is refused (EPERM) even for pghotd's own process: {filtered}. \
                 Container runtimes' default seccomp profiles deny it: run the container with \
                 packaging/container/seccomp.json (or set dry_run = true to only watch)"
            ))
        }
        Err(Errno::ENOSYS) => Err(
            "move_pages(2) is not implemented by this kernel (ENOSYS: built without \
             CONFIG_MIGRATION, or a seccomp filter answers ENOSYS); pghotd can only watch \
             (dry_run = true)"
                .to_string(),
        ),
        Err(e) => Err(format!(
            "move_pages(2) failed on an empty query of pghotd's own process: {e}"
        )),
    }
}

/// The counter for a negative per-page status.
pub fn page_failure(status: i32) -> Counter {
    match Errno::from_raw(-status) {
        Errno::ENOENT => Counter::PgpromoteFailNotPresent,
        Errno::EFAULT => Counter::PgpromoteFailFault,
        Errno::EACCES => Counter::PgpromoteFailShared,
        Errno::EBUSY => Counter::PgpromoteFailBusy,
        Errno::ENOMEM => Counter::PgpromoteFailNomem,
        _ => Counter::PgpromoteFailOther,
    }
}

/// The counter for a whole-call error.
pub fn call_failure(errno: Errno) -> Counter {
    match errno {
        Errno::ESRCH => Counter::PgpromoteFailNoProcess,
        Errno::ENOMEM => Counter::PgpromoteFailNomem,
        Errno::EACCES => Counter::PgpromoteFailNotAllowed,
        Errno::ENODEV => Counter::PgpromoteFailNoNode,
        Errno::EPERM => Counter::PgpromoteFailPermission,
        _ => Counter::PgpromoteFailOther,
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A mover over a fake address space, with scripted whole-call failures.

    use super::*;
    use std::collections::{HashMap, VecDeque};
    use std::sync::Arc;

    use parking_lot::Mutex;

    /// What a scripted move call does instead of succeeding.
    #[derive(Debug, Clone, Copy)]
    pub(crate) enum Script {
        /// Fail the whole call with this errno after moving the first `moved` pages.
        Fail { moved: usize, errno: Errno },
        /// Move the first `moved` pages, then stop: positive return, the rest unwritten.
        Partial { moved: usize },
        /// Every `every`-th page of the call gets `status` (a negative errno) and stays put:
        /// a page that became busy or vanished between the query and the move.
        PageStatus { every: usize, status: i32 },
    }

    #[derive(Default)]
    pub(crate) struct FakeMemory {
        /// (pid, page) -> node or negative errno status.
        pub(crate) pages: HashMap<(u32, u64), i32>,
        pub(crate) gone: Vec<u32>,
        pub(crate) script: VecDeque<Script>,
        pub(crate) calls: Vec<(u32, usize, bool)>,
        /// The `nodes` array of each move call, in call order.
        pub(crate) move_nodes: Vec<Vec<i32>>,
    }

    #[derive(Clone, Default)]
    pub(crate) struct FakeMover(pub(crate) Arc<Mutex<FakeMemory>>);

    impl Mover for FakeMover {
        fn move_pages(
            &mut self,
            pid: u32,
            pages: &[u64],
            nodes: Option<&[i32]>,
            status: &mut [i32],
        ) -> Result<usize, Errno> {
            let mut mem = self.0.lock();
            mem.calls.push((pid, pages.len(), nodes.is_some()));
            if mem.gone.contains(&pid) {
                return Err(Errno::ESRCH);
            }
            if let Some(nodes) = nodes {
                mem.move_nodes.push(nodes.to_vec());
            }
            let Some(nodes) = nodes else {
                for (s, p) in status.iter_mut().zip(pages) {
                    *s = *mem.pages.get(&(pid, *p)).unwrap_or(&-libc::ENOENT);
                }
                return Ok(0);
            };
            let mut page_status = None;
            let (limit, result) = match mem.script.pop_front() {
                None => (pages.len(), Ok(0)),
                Some(Script::Fail { moved, errno }) => (moved.min(pages.len()), Err(errno)),
                Some(Script::Partial { moved }) => {
                    let moved = moved.min(pages.len());
                    (moved, Ok(pages.len() - moved))
                }
                Some(Script::PageStatus {
                    every,
                    status: errno,
                }) => {
                    page_status = Some((every.max(1), errno));
                    (pages.len(), Ok(0))
                }
            };
            for (i, (p, n)) in pages.iter().zip(nodes).enumerate().take(limit) {
                if let Some((every, errno)) = page_status
                    && i % every == 0
                {
                    status[i] = errno;
                    continue;
                }
                let cur = mem.pages.get(&(pid, *p)).copied().unwrap_or(-libc::ENOENT);
                status[i] = if cur < 0 {
                    cur
                } else {
                    mem.pages.insert((pid, *p), *n);
                    *n
                };
            }
            // The kernel leaves the failed batch's and later entries unwritten, and on a
            // whole-call error writes nothing it has not finished.
            if result.is_err() {
                for s in status.iter_mut() {
                    *s = STATUS_UNWRITTEN;
                }
            }
            result
        }
    }
}
