//! The check before each move: is the pid still in scope, and still the process that was
//! sampled?
//!
//! move_pages(2) takes a pid, not a pidfd, so the check pins the process with a pidfd first:
//!
//! 1. `pidfd_open(pid)`: refers to whatever process holds the number now;
//! 2. `/proc/PID/stat` start time must equal the identity the scope tracker recorded;
//! 3. `pidfd_send_signal(pidfd, 0)` must succeed: the pidfd's process had not exited after
//!    step 2, and a pid number is not reused while its process lives, so the start time read
//!    in step 2 was that process's;
//! 4. move_pages(pid).
//!
//! Between 3 and 4 the process could still exit and its number be handed out again; with
//! cyclic pid allocation that takes `pid_max` (up to 4194304) forks within one syscall, which
//! is why the remaining window is accepted rather than closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;

use super::{ProcFs, Scope, sys};
use crate::movepages::Mover;
use crate::stats::{Counter, Stats};

/// A [`Mover`] that checks scope and identity before every move; queries pass straight
/// through (they read, and need no guard).
pub struct GuardedMover<M> {
    inner: M,
    scope: Arc<Scope>,
    stats: Arc<Stats>,
    proc: ProcFs,
}

/// Logged once per process: pidfd_open needs Linux 5.3.
static NO_PIDFD_WARNED: AtomicBool = AtomicBool::new(false);

impl<M: Mover> GuardedMover<M> {
    pub fn new(inner: M, scope: Arc<Scope>, stats: Arc<Stats>) -> Self {
        GuardedMover {
            inner,
            scope,
            stats,
            proc: ProcFs::default(),
        }
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Checks `pid` as the module doc describes; the returned pidfd (when the kernel has
    /// pidfds) must be held across the move. Refusals map to the errno the migrator already
    /// accounts: EPERM (out of scope), ESRCH (gone, reused or not yet seen).
    fn verify(&self, pid: u32) -> Result<Option<std::os::fd::OwnedFd>, Errno> {
        if !self.scope.contains(pid) {
            self.stats.add(Counter::ScopeRefusedOutOfScope, 1);
            return Err(Errno::EPERM);
        }
        let Some(expected) = self.scope.identity(pid) else {
            // Not seen alive by the tracker (yet): a kernel thread, a process born since the
            // last refresh, or one that exited. Nothing says it is the sampled process.
            self.stats.add(Counter::ScopeRefusedUnverified, 1);
            return Err(Errno::ESRCH);
        };
        let pidfd = match sys::pidfd_open(pid) {
            Ok(fd) => Some(fd),
            // Kernels before 5.3 (commit 32fcb426ec00): the start time alone decides.
            Err(Errno::ENOSYS) => {
                if !NO_PIDFD_WARNED.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "pidfd_open is not available; pid reuse is checked by start time only"
                    );
                }
                None
            }
            Err(e) => return Err(e),
        };
        match self.proc.stat(pid) {
            Some(now) if now.identity == expected => {}
            Some(_) => {
                self.stats.add(Counter::ScopeRefusedPidReused, 1);
                tracing::debug!(pid, "pid reused since it was sampled: not moved");
                return Err(Errno::ESRCH);
            }
            None => return Err(Errno::ESRCH),
        }
        if let Some(fd) = &pidfd {
            sys::pidfd_alive(fd)?;
        }
        Ok(pidfd)
    }
}

impl<M: Mover> Mover for GuardedMover<M> {
    fn move_pages(
        &mut self,
        pid: u32,
        pages: &[u64],
        nodes: Option<&[i32]>,
        status: &mut [i32],
    ) -> Result<usize, Errno> {
        if nodes.is_some() {
            let _pinned = self.verify(pid)?;
            return self.inner.move_pages(pid, pages, nodes, status);
        }
        self.inner.move_pages(pid, pages, None, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::movepages::fake::FakeMover;
    use crate::scope::Identity;
    use crate::scope::tests::sleeper;

    #[test]
    fn only_verified_in_scope_pids_reach_the_mover() {
        let (mut inside, mut reused, mut outside) = (sleeper(), sleeper(), sleeper());
        let proc = ProcFs::default();
        let scope = Arc::new(Scope::of_pids([inside.id(), reused.id(), 4_194_000], 1));
        scope.set_identity(proc.stat(inside.id()).unwrap().identity);
        // The tracker saw another process under this number: the live one must not move.
        let mut stale = proc.stat(reused.id()).unwrap().identity;
        stale.start_ticks = stale.start_ticks.wrapping_sub(1);
        scope.set_identity(stale);
        let stats = Arc::new(Stats::new());
        let fake = FakeMover::default();
        let mut mover = GuardedMover::new(fake.clone(), Arc::clone(&scope), Arc::clone(&stats));
        let mut status = [0i32; 1];
        let mut try_move = |pid: u32| mover.move_pages(pid, &[0x1000], Some(&[0]), &mut status);
        assert_eq!(try_move(inside.id()), Ok(0));
        assert_eq!(try_move(reused.id()), Err(Errno::ESRCH));
        assert_eq!(try_move(outside.id()), Err(Errno::EPERM));
        assert_eq!(
            try_move(4_194_000),
            Err(Errno::ESRCH),
            "in scope, never seen"
        );
        // Queries are not moves: they pass.
        let mut q = GuardedMover::new(fake.clone(), Arc::clone(&scope), Arc::clone(&stats));
        q.move_pages(outside.id(), &[0x1000], None, &mut [0])
            .unwrap();
        let calls = fake.0.lock().calls.clone();
        assert_eq!(
            calls,
            vec![(inside.id(), 1, true), (outside.id(), 1, false)],
            "the only move is the verified in-scope pid's"
        );
        assert_eq!(stats.get(Counter::ScopeRefusedPidReused), 1);
        assert_eq!(stats.get(Counter::ScopeRefusedOutOfScope), 1);
        assert_eq!(stats.get(Counter::ScopeRefusedUnverified), 1);
        for c in [&mut inside, &mut reused, &mut outside] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    #[test]
    fn an_exited_process_is_refused_even_with_its_identity_recorded() {
        let mut child = sleeper();
        let pid = child.id();
        let identity: Identity = ProcFs::default().stat(pid).unwrap().identity;
        child.kill().unwrap();
        child.wait().unwrap();
        let scope = Arc::new(Scope::of_pids([pid], 1));
        scope.set_identity(identity);
        let fake = FakeMover::default();
        let mut mover = GuardedMover::new(fake.clone(), scope, Arc::new(Stats::new()));
        let got = mover.move_pages(pid, &[0x1000], Some(&[0]), &mut [0]);
        assert_eq!(got, Err(Errno::ESRCH));
        assert!(fake.0.lock().calls.is_empty());
    }
}
