//! Stopping worker threads: a shared stop token that wakes whoever waits on it.
//!
//! A thread waits on the token alone with [`wait_until`] (a condition variable), or on a file
//! descriptor and the token together with [`wait_fd`] (poll(2) on the descriptor and the token's
//! eventfd, which becomes readable at [`StopToken::stop`]). Either way an idle thread sleeps
//! until it has something to do: it does not wake to look at a flag. An earlier version slept
//! in 100 ms slices; on the Debian rig's TCG guest, where a wake-up costs tens of times what it
//! costs on hardware, those wake-ups alone kept several idle threads busy (BENCHMARKS.md,
//! "pghotd's idle cost"). Both waits mark the calling thread waiting for the watchdog
//! ([`crate::heartbeat`]) while they block.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use parking_lot::{Condvar, Mutex};

/// Without an eventfd (creating one failed: out of descriptors), a wait on a descriptor looks at
/// the flag this often instead.
const FALLBACK_SLICE: Duration = Duration::from_millis(100);

/// A stop request shared between the daemon and its worker threads.
#[derive(Debug, Clone)]
pub struct StopToken(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    stopped: AtomicBool,
    lock: Mutex<()>,
    changed: Condvar,
    /// Readable once stopped; `None` if the eventfd could not be created.
    wake: Option<EventFd>,
}

impl Default for StopToken {
    fn default() -> Self {
        let wake = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK);
        if let Err(e) = &wake {
            tracing::warn!(
                "eventfd for a stop token: {e}; threads waiting on a descriptor will look for a \
                 stop every {FALLBACK_SLICE:?} instead"
            );
        }
        StopToken(Arc::new(Inner {
            stopped: AtomicBool::new(false),
            lock: Mutex::new(()),
            changed: Condvar::new(),
            wake: wake.ok(),
        }))
    }
}

impl StopToken {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn stop(&self) {
        self.0.stopped.store(true, Ordering::Release);
        {
            // Under the lock: a waiter checks the flag and starts waiting under it, so the
            // notification cannot fall between the two.
            let _held = self.0.lock.lock();
            self.0.changed.notify_all();
        }
        if let Some(wake) = &self.0.wake {
            // Never drained, so it stays readable; EAGAIN (counter full) cannot happen at 1.
            let _ = wake.write(1);
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(Ordering::Acquire)
    }

    /// A descriptor that becomes readable at [`stop`](Self::stop), to poll beside others.
    pub fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        self.0.wake.as_ref().map(AsFd::as_fd)
    }
}

/// Sleeps until `deadline`; false if a stop came first (or had already come).
pub fn wait_until(deadline: Instant, stop: &StopToken) -> bool {
    let inner = &stop.0;
    let mut held = inner.lock.lock();
    loop {
        if stop.is_stopped() {
            return false;
        }
        if Instant::now() >= deadline {
            return true;
        }
        let _waiting = crate::heartbeat::waiting();
        inner.changed.wait_until(&mut held, deadline);
    }
}

/// How a [`wait_fd`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The descriptor is readable, hung up or in error: a read will not block.
    Ready,
    Stopped,
    TimedOut,
}

/// Waits until `fd` is readable, `stop` is raised, or `timeout` has passed (`None`: no limit).
pub fn wait_fd(
    fd: BorrowedFd<'_>,
    stop: &StopToken,
    timeout: Option<Duration>,
) -> Result<Woken, Errno> {
    wait_any(&[fd], stop, timeout)
}

/// Waits until one of `fds` is readable (or hung up: a pidfd whose process exited), `stop` is
/// raised, or `timeout` has passed (`None`: no limit).
pub fn wait_any(
    fds: &[BorrowedFd<'_>],
    stop: &StopToken,
    timeout: Option<Duration>,
) -> Result<Woken, Errno> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        if stop.is_stopped() {
            return Ok(Woken::Stopped);
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Ok(Woken::TimedOut);
        }
        let slice = match (left, stop.wake_fd()) {
            (left, Some(_)) => left,
            (Some(left), None) => Some(left.min(FALLBACK_SLICE)),
            (None, None) => Some(FALLBACK_SLICE),
        };
        let mut polled_fds: Vec<PollFd> = fds
            .iter()
            .map(|&fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        if let Some(wake) = stop.wake_fd() {
            polled_fds.push(PollFd::new(wake, PollFlags::POLLIN));
        }
        let polled = {
            let _waiting = crate::heartbeat::waiting();
            poll(&mut polled_fds, poll_timeout(slice))
        };
        match polled {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        if polled_fds[..fds.len()]
            .iter()
            .any(|p| p.revents().is_some_and(|r| !r.is_empty()))
        {
            return Ok(Woken::Ready);
        }
    }
}

/// Whether a read of `fd` would return at once (data, hang-up or error), without waiting.
pub fn readable_now(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// `None` waits forever; a duration is rounded up to whole milliseconds (a deadline a fraction
/// of a millisecond away must not become a busy loop) and capped at poll's limit.
fn poll_timeout(slice: Option<Duration>) -> PollTimeout {
    match slice {
        None => PollTimeout::NONE,
        Some(d) => {
            let ms = i32::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_stop_wakes_a_long_sleep_at_once() {
        let stop = StopToken::new();
        let waiter = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let slept = wait_until(started + Duration::from_secs(60), &stop);
                (slept, started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        stop.stop();
        let (slept, took) = waiter.join().unwrap();
        assert!(!slept, "a stopped wait reports the stop");
        assert!(
            took < Duration::from_secs(10),
            "woken by the stop, not the deadline: {took:?}"
        );
        // Once stopped, a wait returns at once.
        assert!(!wait_until(Instant::now() + Duration::from_secs(60), &stop));
    }

    #[test]
    fn a_deadline_passes_without_a_stop() {
        let stop = StopToken::new();
        let started = Instant::now();
        assert!(wait_until(started + Duration::from_millis(30), &stop));
        assert!(started.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_descriptor_wait_ends_on_data_on_a_stop_and_on_its_timeout() {
        let stop = StopToken::new();
        assert!(stop.wake_fd().is_some(), "this machine can make an eventfd");
        let (mut tx, rx) = UnixStream::pair().unwrap();
        assert_eq!(
            wait_fd(rx.as_fd(), &stop, Some(Duration::from_millis(20))),
            Ok(Woken::TimedOut)
        );
        tx.write_all(b"x").unwrap();
        assert_eq!(wait_fd(rx.as_fd(), &stop, None), Ok(Woken::Ready));

        let (_tx, quiet) = UnixStream::pair().unwrap();
        let waiter = {
            let stop = stop.clone();
            std::thread::spawn(move || wait_fd(quiet.as_fd(), &stop, None))
        };
        std::thread::sleep(Duration::from_millis(50));
        stop.stop();
        assert_eq!(waiter.join().unwrap(), Ok(Woken::Stopped));
    }

    #[test]
    fn a_hung_up_descriptor_is_ready() {
        // The reader then reads 0 (end of input) instead of waiting for ever.
        let (tx, rx) = UnixStream::pair().unwrap();
        drop(tx);
        assert_eq!(
            wait_fd(rx.as_fd(), &StopToken::new(), None),
            Ok(Woken::Ready)
        );
    }
}
