//! The loop that runs the adaptive period (`ibs.period = "auto"`): once a second it reads what
//! the daemon spent and found, asks the controller (`sampler::adaptive`) for the next period,
//! and publishes it through the [`PeriodControl`] every CPU sampler applies after its next drain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};

use super::period::PeriodControl;
use crate::sampler::adaptive::{IntervalSignals, PeriodController};
use crate::stats::{Counter, Stats};
use crate::stop::StopToken;

/// Length of one controller interval.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// User + system CPU time of the whole daemon (every thread, migration included).
fn daemon_cpu_time() -> Duration {
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|u| {
            let tv = |t: nix::sys::time::TimeVal| {
                Duration::new(t.tv_sec().max(0) as u64, (t.tv_usec().max(0) as u32) * 1000)
            };
            tv(u.user_time()) + tv(u.system_time())
        })
        .unwrap_or_default()
}

/// The counters the controller reads, as one reading.
#[derive(Clone, Copy)]
struct Reading {
    at: Instant,
    cpu: Duration,
    samples: u64,
    candidates: u64,
    lower_tier: u64,
}

impl Reading {
    fn take(stats: &Stats, cpu_time: &dyn Fn() -> Duration) -> Reading {
        Reading {
            at: Instant::now(),
            cpu: cpu_time(),
            samples: stats.get(Counter::HwhintTotalEvents),
            candidates: stats.get(Counter::PgpromoteCandidate),
            lower_tier: stats.get(Counter::HwhintExtmemAccesses),
        }
    }

    fn since(&self, before: &Reading) -> IntervalSignals {
        IntervalSignals {
            elapsed: self.at.duration_since(before.at),
            cpu_time: self.cpu.saturating_sub(before.cpu),
            samples: self.samples.saturating_sub(before.samples),
            new_candidates: self.candidates.saturating_sub(before.candidates),
            lower_tier_samples: self.lower_tier.saturating_sub(before.lower_tier),
        }
    }
}

/// Runs the controller until `stop`; each change of period is logged at debug level.
pub fn run(
    controller: PeriodController,
    control: PeriodControl,
    stats: Arc<Stats>,
    stop: StopToken,
) {
    run_with(controller, control, &stats, &stop, &daemon_cpu_time);
}

/// [`run`] with the daemon's CPU clock given (tests run inside a busy test process).
fn run_with(
    mut controller: PeriodController,
    control: PeriodControl,
    stats: &Stats,
    stop: &StopToken,
    cpu_time: &dyn Fn() -> Duration,
) {
    let mut before = Reading::take(stats, cpu_time);
    while !stop.is_stopped() {
        // Short sleeps so a stop is seen within 100 ms.
        let deadline = before.at + INTERVAL;
        while Instant::now() < deadline && !stop.is_stopped() {
            std::thread::sleep(Duration::from_millis(100).min(deadline - Instant::now()));
        }
        let now = Reading::take(stats, cpu_time);
        let signals = now.since(&before);
        let old = controller.period();
        let next = controller.update(&signals);
        if next != old {
            tracing::debug!(
                "adaptive period {old} -> {next} ({} samples, {} candidates, cpu {:.1}%)",
                signals.samples,
                signals.new_candidates,
                signals.cpu_time.as_secs_f64() / signals.elapsed.as_secs_f64().max(1e-9) * 100.0
            );
        }
        control.set(next);
        before = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::adaptive::AdaptiveConfig;

    #[test]
    fn the_loop_publishes_a_legal_period_and_stops_promptly() {
        let controller = PeriodController::new(AdaptiveConfig::ibs(5.0));
        let control = PeriodControl::new(controller.period());
        let stats = Arc::new(Stats::new());
        let stop = StopToken::new();
        let runner = {
            let (control, stats, stop) = (control.clone(), Arc::clone(&stats), stop.clone());
            // A daemon using 1 % of a core: well under the 5 % budget.
            let started = Instant::now();
            let cpu = move || started.elapsed() / 100;
            std::thread::spawn(move || run_with(controller, control, &stats, &stop, &cpu))
        };
        // Two intervals with samples that keep producing candidates on the slow tier.
        for _ in 0..22 {
            stats.add(Counter::HwhintTotalEvents, 1000);
            stats.add(Counter::HwhintExtmemAccesses, 900);
            stats.add(Counter::PgpromoteCandidate, 200);
            std::thread::sleep(Duration::from_millis(100));
        }
        let started = Instant::now();
        stop.stop();
        runner.join().unwrap();
        assert!(started.elapsed() < Duration::from_millis(500));
        let period = control.get();
        assert!(period.is_multiple_of(16) && period >= 0x90, "{period}");
        assert!(
            period < 10_000,
            "candidates keep coming at little CPU: {period}"
        );
    }
}
