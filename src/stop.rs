//! Stopping worker threads: a shared stop token and a sleep that wakes for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a waiting thread sleeps between looks at its stop token.
const STOP_SLICE: Duration = Duration::from_millis(100);

/// A stop request shared between the daemon and its worker threads.
#[derive(Debug, Clone, Default)]
pub struct StopToken(Arc<AtomicBool>);

impl StopToken {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Sleeps until `deadline` in slices of at most 100 ms; false if a stop came first.
pub fn wait_until(deadline: Instant, stop: &StopToken) -> bool {
    loop {
        if stop.is_stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(STOP_SLICE));
    }
}
