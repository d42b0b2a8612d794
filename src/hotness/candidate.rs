//! Candidates: pages that crossed the hotness threshold, and the bounded queue that carries them
//! from the sampler threads to the migrator of their node.
//!
//! Full queue: the sender gets the candidate back and counts `pgpromote_queue_full`; the page is
//! un-queued in the table so its next sample offers it again.

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::PageKey;
use crate::sample::SourceKind;
use crate::stats::Counter;
use crate::topology::NodeId;

/// A page that crossed the threshold, on its way to the migrator of its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub key: PageKey,
    pub from_node: NodeId,
    pub to_node: NodeId,
    /// Bytes the move is charged at: 4 KiB when made (the folio is not known on the sample
    /// path); the migrator, or admission, sets the size of the folio move_pages will move.
    pub bytes: u64,
    pub source: SourceKind,
}

/// Creates a migrator's candidate queue: `capacity` candidates, a wake-up when the first
/// candidate enters an empty queue (its hold starts then, see `migrator/thread.rs`) and another
/// once `wake_at` of them wait (they are moved at once). Senders do not wake the migrator per
/// candidate (a futex wake costs the sampler microseconds): at most twice per drain.
pub fn candidate_queue(capacity: usize, wake_at: usize) -> (CandidateSender, CandidateReceiver) {
    let (tx, rx) = crossbeam_channel::bounded(capacity);
    // One pending wake-up is enough: the migrator drains everything when it runs.
    let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
    (
        CandidateSender {
            tx,
            wake: wake_tx,
            wake_at: wake_at.clamp(1, capacity.max(1)),
        },
        CandidateReceiver {
            rx,
            wake: wake_rx,
            wake_at: wake_at.clamp(1, capacity.max(1)),
        },
    )
}

/// A candidate [`CandidateSender::offer`] could not queue, and the outcome it is counted as.
#[derive(Debug)]
pub struct Refused {
    pub candidate: Candidate,
    /// `pgpromote_queue_full`, or `pgpromote_abandoned` once the migrator has stopped.
    pub counter: Counter,
}

/// The sampler side of a candidate queue.
#[derive(Debug, Clone)]
pub struct CandidateSender {
    tx: Sender<Candidate>,
    wake: Sender<()>,
    wake_at: usize,
}

impl CandidateSender {
    /// Queues a candidate; gives it back, with the counter it ends in, when the queue is full
    /// or its migrator has stopped (a shutdown: sources record until they see the stop).
    #[inline]
    pub fn offer(&self, candidate: Candidate) -> Result<(), Refused> {
        match self.tx.try_send(candidate) {
            Ok(()) => {
                // Two senders racing into an empty queue may both see 2 waiting: the migrator
                // then finds the candidates at its next upkeep wake instead (see
                // `MigratorConfig::migrate_interval_ms`), later but not lost.
                let waiting = self.tx.len();
                if waiting == 1 || waiting >= self.wake_at {
                    // Full means a wake-up is already pending.
                    let _ = self.wake.try_send(());
                }
                Ok(())
            }
            Err(TrySendError::Full(candidate)) => Err(Refused {
                candidate,
                counter: Counter::PgpromoteQueueFull,
            }),
            Err(TrySendError::Disconnected(candidate)) => Err(Refused {
                candidate,
                counter: Counter::PgpromoteAbandoned,
            }),
        }
    }

    /// Candidates waiting (for the control plane's queue-depth gauge).
    pub fn len(&self) -> usize {
        self.tx.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tx.is_empty()
    }
}

/// The migrator side of a candidate queue.
#[derive(Debug)]
pub struct CandidateReceiver {
    rx: Receiver<Candidate>,
    wake: Receiver<()>,
    wake_at: usize,
}

impl CandidateReceiver {
    /// The next queued candidate, if any.
    pub fn try_recv(&self) -> Option<Candidate> {
        self.rx.try_recv().ok()
    }

    pub fn len(&self) -> usize {
        self.rx.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// Whether a whole batch waits (the wake-up at `wake_at`, not the first candidate's).
    pub fn batch_waiting(&self) -> bool {
        self.rx.len() >= self.wake_at
    }

    /// The wake-up channel, for a migrator that waits on it beside other events (`select!`).
    pub fn wake_channel(&self) -> &Receiver<()> {
        &self.wake
    }

    /// Empties the queue without handing the candidates out; returns how many there were.
    pub fn discard_all(&self) -> usize {
        self.rx.try_iter().count()
    }

    /// Waits up to `timeout` for a wake-up: a first candidate, or `wake_at` waiting.
    pub fn wait_wake(&self, timeout: Duration) -> bool {
        self.wake.recv_timeout(timeout).is_ok()
    }
}
