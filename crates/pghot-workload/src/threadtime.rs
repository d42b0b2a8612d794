//! Where a worker thread's wall time went during the access phase: on a CPU, waiting for one
//! (runqueue), or blocked (sleeping: on a page under migration, a lock, a fault).
//!
//! A promoter that runs beside the workload costs it time in all three ways, and the access
//! rate alone cannot tell them apart; the rig reports the split per scenario. Read from
//! `/proc/thread-self/schedstat` (run and runqueue ns, CONFIG_SCHED_INFO) and the
//! `voluntary_ctxt_switches` line of `/proc/thread-self/status`, both parsed by the `procfs`
//! crate (`Schedstat`, `Status`). A tool's own files about its own threads: read whole.

use procfs::FromRead;
use procfs::process::{Schedstat, Status};
use serde::Serialize;

/// A thread's scheduler counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadTimes {
    pub run_ns: u64,
    pub runqueue_ns: u64,
    pub voluntary_switches: u64,
}

impl ThreadTimes {
    /// The calling thread's counters; `None` where the kernel does not provide them.
    pub fn of_current_thread() -> Option<ThreadTimes> {
        let schedstat = Schedstat::from_file("/proc/thread-self/schedstat").ok()?;
        let status = Status::from_file("/proc/thread-self/status").ok()?;
        ThreadTimes::of(&schedstat, &status)
    }

    /// From the text of `schedstat` ("run_ns runqueue_ns timeslices") and `status`.
    pub fn parse(schedstat: &str, status: &str) -> Option<ThreadTimes> {
        ThreadTimes::of(
            &Schedstat::from_read(schedstat.as_bytes()).ok()?,
            &Status::from_read(status.as_bytes()).ok()?,
        )
    }

    fn of(schedstat: &Schedstat, status: &Status) -> Option<ThreadTimes> {
        Some(ThreadTimes {
            run_ns: schedstat.sum_exec_runtime,
            runqueue_ns: schedstat.run_delay,
            voluntary_switches: status.voluntary_ctxt_switches?,
        })
    }

    /// What changed since `earlier`.
    pub fn since(self, earlier: ThreadTimes) -> ThreadTimes {
        ThreadTimes {
            run_ns: self.run_ns.saturating_sub(earlier.run_ns),
            runqueue_ns: self.runqueue_ns.saturating_sub(earlier.runqueue_ns),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
        }
    }
}

/// The workers' time over the access phase, summed over threads, for the RESULT line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkerTimes {
    /// On a CPU (user and kernel).
    pub run_s: f64,
    /// Runnable, waiting for a CPU.
    pub runqueue_s: f64,
    /// Neither: asleep. `threads x elapsed - run - runqueue`.
    pub blocked_s: f64,
    /// Times a worker went to sleep.
    pub voluntary_switches: u64,
}

impl WorkerTimes {
    /// Sums per-thread deltas; `None` if any thread's counters were unavailable.
    pub fn sum(per_thread: &[Option<ThreadTimes>], elapsed_s: f64) -> Option<WorkerTimes> {
        let mut total = ThreadTimes::default();
        for t in per_thread {
            let t = (*t)?;
            total.run_ns += t.run_ns;
            total.runqueue_ns += t.runqueue_ns;
            total.voluntary_switches += t.voluntary_switches;
        }
        let run_s = total.run_ns as f64 / 1e9;
        let runqueue_s = total.runqueue_ns as f64 / 1e9;
        let wall_s = elapsed_s * per_thread.len() as f64;
        Some(WorkerTimes {
            run_s: round(run_s, 3),
            runqueue_s: round(runqueue_s, 3),
            blocked_s: round((wall_s - run_s - runqueue_s).max(0.0), 3),
            voluntary_switches: total.voluntary_switches,
        })
    }
}

/// Rounds to `digits` decimals, for readable JSON.
pub fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker thread's whole `status` (Linux 6.x), the switch counts given.
    const STATUS: &str = "Name:\tpghot-wl/0\nUmask:\t0022\nState:\tR (running)\n\
        Tgid:\t900\nNgid:\t0\nPid:\t901\nPPid:\t1\nTracerPid:\t0\nUid:\t0\t0\t0\t0\n\
        Gid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t0 \nNStgid:\t900\nNSpid:\t901\n\
        NSpgid:\t900\nNSsid:\t1\nThreads:\t5\nSigQ:\t0/63360\nSigPnd:\t0000000000000000\n\
        ShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n\
        SigCgt:\t0000000000000000\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
        CapEff:\t000001ffffffffff\nvoluntary_ctxt_switches:\t155\n\
        nonvoluntary_ctxt_switches:\t110\n";

    #[test]
    fn parses_the_kernel_formats() {
        let t = ThreadTimes::parse("1429546710 150104075 265\n", STATUS).unwrap();
        assert_eq!(
            t,
            ThreadTimes {
                run_ns: 1_429_546_710,
                runqueue_ns: 150_104_075,
                voluntary_switches: 155,
            }
        );
        assert_eq!(ThreadTimes::parse("", STATUS), None);
        assert_eq!(ThreadTimes::parse("12 x 3", STATUS), None);
        assert_eq!(ThreadTimes::parse("1 2 3", "Name:\tx\n"), None);
    }

    #[test]
    fn blocked_is_what_is_left_of_the_wall_time() {
        let a = ThreadTimes {
            run_ns: 700_000_000,
            runqueue_ns: 100_000_000,
            voluntary_switches: 10,
        };
        let b = ThreadTimes {
            run_ns: 900_000_000,
            runqueue_ns: 0,
            voluntary_switches: 2,
        };
        let w = WorkerTimes::sum(&[Some(a), Some(b)], 1.0).unwrap();
        assert_eq!(w.run_s, 1.6);
        assert_eq!(w.runqueue_s, 0.1);
        assert_eq!(w.blocked_s, 0.3);
        assert_eq!(w.voluntary_switches, 12);
        assert_eq!(WorkerTimes::sum(&[Some(a), None], 1.0), None);
        let later = ThreadTimes {
            run_ns: 800_000_000,
            runqueue_ns: 150_000_000,
            voluntary_switches: 15,
        };
        assert_eq!(
            later.since(a),
            ThreadTimes {
                run_ns: 100_000_000,
                runqueue_ns: 50_000_000,
                voluntary_switches: 5,
            }
        );
    }

    #[test]
    fn reads_this_thread() {
        // Linux with CONFIG_SCHED_INFO (every distribution kernel, and CI's); run time grows.
        let a = ThreadTimes::of_current_thread().expect("/proc/thread-self/schedstat");
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = ThreadTimes::of_current_thread().unwrap();
        assert!(b.run_ns > a.run_ns);
    }
}
