//! `pghot-sim`, the policy lab: the pghot series' workload shapes with ground truth, on a simulated
//! two-tier memory, driving pghotd's real per-sample path (`Ingest`/`Recorder`, `HotTable`), its
//! real migrator (`Migrator` with a [`memory::SimMover`]) and its period controller, in
//! simulated time.
//!
//! Time advances in 10 ms ticks. Each tick the workload's access rate follows from the mean
//! latency of where its pages are (slow 320 ns: the series' no-tiering B0; fully placed, one
//! latency per kernel of the series, see [`CostModel`]), the IBS-like sampler takes
//! `tag_efficiency * rate / period` samples (scaled), each an access
//! drawn from the workload's distribution, and hands them to the recorder; every 100 ms the
//! migrator processes its queue; every second the controller (period `auto`) sets the period.
//! The daemon's CPU is modelled per sample and per page moved or queried ([`CostModel`]) and
//! reported as the full-size equivalent (scaled cost times the scale).
//!
//! Everything is deterministic for a seed: one SplitMix64 stream per run, no wall clock.
//!
//! The pointer chase is calibrated to the pghot series' table (issue 22): its free constants
//! were fitted once to that table, and [`seed`] holds the series' figures that
//! `pghot-sim --compare pointer-chase` prints next to the model's.
//!
//! [`thp`] is a second, smaller lab: the rig's THP shapes (issue 24) against pghotd's THP
//! admission (`pghot-sim --thp-matrix`).

pub mod baselines;
pub mod memory;
pub mod seed;
pub mod thp;
pub mod workload;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use baselines::{Damon, Numab2, Tick, unit};
use memory::{FAST, Memory, PID, SLOW, SharedMemory, SimFree, SimMover, vaddr_of};
use pghot_workload::rng::SplitMix64;
use pghotd::hotness::HotnessConfig;
use pghotd::hotness::candidate::CandidateReceiver;
use pghotd::ingest::Recorder;
use pghotd::migrator::capacity::HeatAge;
use pghotd::migrator::ratelimit::{Clock, RateLimits};
use pghotd::migrator::{Migrator, MigratorConfig};
use pghotd::pipeline::{Pipeline, PipelineConfig};
use pghotd::sample::{AccessOp, DataSource, Sample, SourceKind};
use pghotd::sampler::SampleSink;
use pghotd::sampler::adaptive::{AdaptiveConfig, IntervalSignals, PeriodController};
use pghotd::scope::Scope;
use pghotd::stats::{Counter, Stats};
use pghotd::topology::{Node, Topology};
use workload::{Shape, Workload};

const TICK_S: f64 = 0.01;

/// The most rows a run's timeline holds; a run that would have more gets wider rows.
pub const MAX_TIMELINE_ROWS: u64 = 10_000;
const MIGRATE_EVERY_S: f64 = 0.1;
const CONTROL_EVERY_S: f64 = 1.0;
const GIB: f64 = (1u64 << 30) as f64;
const PAGE_BYTES: f64 = 4096.0;

/// The sampling period of a pghotd run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeriodSetting {
    Fixed(u64),
    /// The adaptive controller under `cpu_budget_pct`.
    Auto {
        cpu_budget_pct: f64,
    },
}

/// pghotd's settings in a run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PghotdPolicy {
    pub period: PeriodSetting,
    pub freq_threshold: u16,
    pub promote_window_ms: u32,
    pub demote: bool,
    /// The daemon's `heat_halflife_ms`, `hot_share_pct` and `demote_below_floor_pct`.
    pub heat_halflife_ms: u32,
    pub hot_share_pct: u8,
    pub demote_below_floor_pct: u8,
}

/// `pghot-sim --promote-window-ms` when not given: the daemon's default `promote_window_ms`
/// (it was 60 s until issue 22's bar 2 was met, which hid how far the daemon's own 5 s window
/// was from it: 68.6 % of the pointer chase's hot set at threshold 2; BENCHMARKS.md).
pub fn default_promote_window_ms() -> u32 {
    HotnessConfig::default().promote_window_ms
}

impl PghotdPolicy {
    /// `pghot-sim`'s defaults with `period`: the daemon's `freq_threshold` (2) and
    /// `promote_window_ms` (5 s), no demotion.
    pub fn sim_defaults(period: PeriodSetting) -> PghotdPolicy {
        PghotdPolicy {
            period,
            freq_threshold: HotnessConfig::default().freq_threshold,
            promote_window_ms: default_promote_window_ms(),
            demote: false,
            heat_halflife_ms: HotnessConfig::default().heat_halflife_ms,
            hot_share_pct: HotnessConfig::default().hot_share_pct,
            demote_below_floor_pct: HotnessConfig::default().demote_below_floor_pct,
        }
    }
}

/// Who promotes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// No promotion.
    Baseline,
    /// Model of the kernel's NUMA-balancing tiering.
    Numab2,
    /// Model of DAMON `migrate_hot` with a quota.
    Damon,
    Pghotd(PghotdPolicy),
}

/// Latency and CPU costs of the model.
///
/// Latency is linear in the share of accesses the fast tier serves, between a fully-placed and
/// a slow (nothing placed) latency. The pghot series measured on two kernels and says its
/// cross-kernel latencies differ: its base kernel (B0, N2, D3) reached 119 ns fully placed
/// (D3, and N2's first interval), while its pghot kernel (H10, H5) reached 92 ns with only
/// 73 % of the hot set placed, which no placement-weighted latency above 92 ns allows. So the
/// model has one fully-placed latency per kernel: `base_fast_ns` for the baseline, NUMAB2 and
/// DAMON, `fast_ns` for the pghot rows, and pghotd (the same IBS-sampled promotion, compared
/// with the H rows on their kernel).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CostModel {
    /// Effective latency with every access served by the fast tier, on the pghot series' pghot
    /// kernel (cache hits of the chase included). Fitted with the pointer chase's skew to rows
    /// H10 and H5 (215 and 92 ns); see `workload::PC_HOT_EXPONENT`.
    pub fast_ns: f64,
    /// The same on the series' base kernel: row D3's 119 ns (DAMON had the whole hot set
    /// placed), which is also N2's first interval.
    pub base_fast_ns: f64,
    /// Nothing placed: the series' B0 (320 ns), on either kernel.
    pub slow_ns: f64,
    /// Daemon CPU per sample: ring read, parse, the ingest path (measured ~120 ns, see
    /// BENCHMARKS.md) and its share of wake-ups.
    pub sample_cpu_ns: f64,
    /// Daemon CPU (system time in move_pages) per 4 KiB page moved.
    pub migrate_cpu_ns: f64,
    /// Per page queried (move_pages with no nodes).
    pub query_cpu_ns: f64,
    /// Multiplies every latency: 1 but for NUMAB2 ([`baselines::NUMAB_STEADY_TAX`]).
    pub latency_factor: f64,
}

/// The series' kmigrated: its CPU over 240 s was 20 s (H10, 1.29 M pages promoted) and 38 s
/// (H5, 3.15 M pages). Solved for a fixed share plus a per-page cost, by hand from those two
/// rows: 18 s / 1.86 M pages = 9.68 us per page, and (20 s - 1.29 M x 9.68 us) / 240 s =
/// 3.13 % of a core for its 100 ms scans. Used for the rows that stand for the series' H10
/// and H5 (`Report::kmigrated_cpu_pct`); pghotd's own CPU is `CostModel`'s.
pub const KMIGRATED_PAGE_NS: f64 = 9_680.0;
pub const KMIGRATED_FIXED_PCT: f64 = 3.13;

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            fast_ns: 30.0,
            base_fast_ns: 119.0,
            slow_ns: 320.0,
            sample_cpu_ns: 500.0,
            migrate_cpu_ns: 2500.0,
            query_cpu_ns: 200.0,
            latency_factor: 1.0,
        }
    }
}

impl CostModel {
    fn latency_ns(&self, fast_share: f64) -> f64 {
        (fast_share * self.fast_ns + (1.0 - fast_share) * self.slow_ns) * self.latency_factor
    }

    /// The model as seen by `policy`: its kernel's fully-placed latency.
    fn for_policy(&self, policy: &Policy) -> CostModel {
        match policy {
            Policy::Pghotd(_) => *self,
            Policy::Baseline | Policy::Damon => CostModel {
                fast_ns: self.base_fast_ns,
                ..*self
            },
            Policy::Numab2 => CostModel {
                fast_ns: self.base_fast_ns,
                latency_factor: self.latency_factor * (1.0 + baselines::NUMAB_STEADY_TAX),
                ..*self
            },
        }
    }
}

/// One run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimParams {
    pub label: String,
    pub shape: Shape,
    /// Divisor of every size.
    pub scale: f64,
    pub seed: u64,
    pub duration_s: f64,
    pub policy: Policy,
    pub costs: CostModel,
    pub report_every_s: f64,
}

/// A point of the timeline.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    pub t_s: f64,
    pub coverage_pct: f64,
    pub over_promotion_pct: f64,
    pub promoted_mb: f64,
    pub period: Option<u64>,
    pub cpu_pct: Option<f64>,
    pub latency_ns: f64,
}

/// What a run measured. Sizes and CPU are full-size equivalents.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    pub label: String,
    pub workload: &'static str,
    pub scale: f64,
    pub seed: u64,
    pub duration_s: f64,
    /// Hot pages on the fast tier, % of the hot set, at the end.
    pub coverage_pct: f64,
    /// Non-hot pages on the fast tier, % of the hot set, at the end.
    pub over_promotion_pct: f64,
    /// The pghot series' "over": (fast-tier pages - hot set) / hot set, may be negative.
    pub placement_over_pct: f64,
    pub fast_gb: f64,
    pub promoted_mb: f64,
    pub demoted_mb: f64,
    pub time_to_90_s: Option<f64>,
    pub time_to_99_s: Option<f64>,
    /// Mean daemon CPU over the run, % of one core (None: the cost is not in one thread).
    pub cpu_pct: Option<f64>,
    /// Highest CPU of any report window.
    pub cpu_peak_pct: Option<f64>,
    /// Mean access latency over the last 25 % of the run (the pghot series' "lat").
    pub latency_ns: f64,
    /// The workload's access rate over the last 25 % against no tiering (slow latency
    /// everywhere): the model's stand-in for the series' throughput ratios (TEPS, ops/s).
    pub speedup: f64,
    pub samples: u64,
    pub period_final: Option<u64>,
    /// Most of the fast tier ever in use, % of its capacity.
    pub fast_peak_used_pct: f64,
    /// The fast tier never went past its watermark (2 % kept free).
    pub watermark_kept: bool,
    pub hint_faults: Option<u64>,
    /// NUMAB2: PTEs made PROT_NONE by the scanner (numa_pte_updates), full size.
    pub pte_updates: Option<u64>,
    /// NUMAB2: promotions before the timed window (the series' load phase), full-size GB.
    pub lead_in_gb: Option<f64>,
    /// DAMON: bytes the scheme migrated (sz_applied), full-size GB; quota windows that ran
    /// out (qt_exceeds); regions at the end.
    pub damon_applied_gb: Option<f64>,
    pub damon_quota_exceeds: Option<u64>,
    pub damon_regions: Option<u64>,
    /// pghotd runs: what the series' kmigrated would have spent promoting the same pages,
    /// % of one core (see [`KMIGRATED_PAGE_NS`]).
    pub kmigrated_cpu_pct: Option<f64>,
    /// Seconds from each hot-set shift to 95 % coverage (None: not reached before the next).
    pub recovery_95_s: Vec<Option<f64>>,
    pub timeline: Vec<Row>,
}

/// The simulated monotonic clock of the migrator's token buckets.
#[derive(Debug, Clone, Default)]
struct SimClock(Arc<AtomicU64>);

impl SimClock {
    fn set(&self, t_s: f64) {
        self.0.store((t_s * 1e9) as u64, Ordering::Relaxed);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// pghotd's promotion reserve on the fast node, as `MigratorConfig::default()`.
const PROMOTE_MIN_FREE_PCT: u64 = 2;

/// The daemon's `window_samples` at `scale`. The table widens its window to hold that many
/// recorded samples (`hotness::window`), and the scaled run records 1/scale of the full-size
/// samples over 1/scale of the pages, so the full-size count would hold `scale` times the
/// sample time: 16384 at 1/64 widened the window to 225 s where the daemon keeps its floor
/// (the pointer chase records >= 4000 lower-tier samples a second at full size, 16384 of them
/// in under 5 s). Divided like the pages, the window in seconds is the full-size daemon's.
/// 0 (widening off) stays 0.
fn scaled_window_samples(full_size: u32, scale: f64) -> u32 {
    if full_size == 0 {
        return 0;
    }
    ((f64::from(full_size) / scale).round() as u32).max(1)
}

/// pghotd's real code, wired as the daemon wires it, with one sampler thread's recorder.
struct PghotdEngine {
    recorder: Recorder,
    queue: CandidateReceiver,
    migrator: Migrator<SimMover, SimClock>,
    clock: SimClock,
    stats: Arc<Stats>,
    controller: Option<PeriodController>,
    period: u64,
    carry: f64,
    samples: u64,
    next_migrate_s: f64,
    /// The migrator's heat histogram's age, on the simulated clock.
    heat: HeatAge,
    next_control_s: f64,
    /// Samples, candidates, lower-tier samples and CPU seconds at the last control step.
    last_control: (u64, u64, u64, f64),
}

impl PghotdEngine {
    fn new(policy: &PghotdPolicy, mem: &SharedMemory, pages: usize, scale: f64) -> Self {
        let fast_kb = mem.lock().fast_capacity_pages * 4;
        let node = |id, cpus: Vec<u32>, mem_total_kb, top| Node {
            id,
            cpus,
            mem_total_kb,
            tier: Some(if top { 4 } else { 22 }),
            top_tier: top,
        };
        let topology = Arc::new(Topology::synthetic(
            vec![
                node(FAST, (0..4).collect(), fast_kb, true),
                node(SLOW, vec![], pages as u64 * 4, false),
            ],
            vec![vec![10, 50], vec![50, 10]],
        ));
        let config = MigratorConfig {
            // The full-size default, scaled like everything else.
            promote_rate_limit_mbps: ((65536.0 / scale) as u64).max(1),
            demote: policy.demote,
            ..MigratorConfig::default()
        };
        let settings = PipelineConfig {
            max_tracked_pages: pages.max(1024),
            policy: HotnessConfig {
                freq_threshold: policy.freq_threshold,
                promote_window_ms: policy.promote_window_ms,
                window_samples: scaled_window_samples(
                    HotnessConfig::default().window_samples,
                    scale,
                ),
                heat_halflife_ms: policy.heat_halflife_ms,
                hot_share_pct: policy.hot_share_pct,
                demote_below_floor_pct: policy.demote_below_floor_pct,
                // hot_share_room_mb stays off: the simulated policies have no such knob.
                ..HotnessConfig::default()
            },
            target_nid: Some(FAST),
            migrator: config,
        };
        let scope = Arc::new(Scope::everything(std::process::id()));
        let mut pipeline = Pipeline::builder(settings, topology, scope).build();
        let (_, rx) = pipeline
            .take_queues()
            .pop()
            .expect("the simulated slow node's queue");
        let clock = SimClock::default();
        let stats = Arc::clone(&pipeline.stats);
        let migrator = pipeline
            .migrator(
                SLOW,
                SimMover(Arc::clone(mem)),
                clock.clone(),
                RateLimits::default(),
            )
            .with_free_memory(Arc::new(SimFree(Arc::clone(mem))))
            // Its full-size cost, like the rate limit's: the scaled memory has 1/scale the pages.
            .with_audit_pages(
                ((pghotd::migrator::audit::AUDIT_PAGES as f64 / scale).ceil() as usize).max(1),
            );
        let (controller, period) = match policy.period {
            PeriodSetting::Fixed(p) => (None, p.max(1)),
            PeriodSetting::Auto { cpu_budget_pct } => {
                let c = PeriodController::new(AdaptiveConfig::ibs(cpu_budget_pct));
                let p = c.period();
                (Some(c), p)
            }
        };
        PghotdEngine {
            recorder: pipeline.ingest.recorder(),
            queue: rx,
            migrator,
            clock,
            stats,
            controller,
            period,
            carry: 0.0,
            samples: 0,
            next_migrate_s: MIGRATE_EVERY_S,
            heat: HeatAge::default(),
            next_control_s: CONTROL_EVERY_S,
            last_control: (0, 0, 0, 0.0),
        }
    }

    fn tick(&mut self, t_s: f64, rate: f64, ctx: &mut RunCtx<'_>) {
        let want =
            ctx.workload.spec.tag_efficiency * rate * TICK_S / self.period as f64 / ctx.scale
                + self.carry;
        let n = want as u64;
        self.carry = want - n as f64;
        {
            let mem = ctx.mem.lock();
            let t0_ns = ((t_s - TICK_S) * 1e9) as u64;
            for i in 0..n {
                let page = ctx.workload.draw(ctx.rng, t_s);
                let node = mem.node_of(page);
                let sample = Sample {
                    time_ns: t0_ns + i * (TICK_S * 1e9) as u64 / n.max(1),
                    cpu: (i % 4) as u32,
                    pid: PID,
                    tid: PID,
                    vaddr: vaddr_of(page),
                    paddr: None,
                    op: if unit(ctx.rng) < 0.3 {
                        AccessOp::Store
                    } else {
                        AccessOp::Load
                    },
                    served_from: if node == FAST {
                        DataSource::LocalDram
                    } else {
                        DataSource::ExtMem
                    },
                    node: Some(node),
                    latency: None,
                    source: SourceKind::Trace,
                };
                self.recorder.record(&sample);
            }
        }
        self.samples += n;
        if t_s + 1e-9 >= self.next_migrate_s {
            self.next_migrate_s += MIGRATE_EVERY_S;
            self.clock.set(t_s);
            let mut batch = Vec::new();
            while let Some(c) = self.queue.try_recv() {
                batch.push(c);
            }
            // The daemon's thread ages the heat histogram by the time that passed before each
            // batch (`migrator/thread.rs`); the simulated clock does the same.
            let halvings = self.heat.halvings(Duration::from_secs_f64(t_s + 1e-9));
            self.migrator.age_heat(halvings);
            self.migrator.process(&mut batch);
            self.migrator.maintain();
        }
        if t_s + 1e-9 >= self.next_control_s {
            self.next_control_s += CONTROL_EVERY_S;
            self.recorder.flush();
            let candidates = self.stats.get(Counter::PgpromoteCandidate);
            let lower = self.stats.get(Counter::HwhintExtmemAccesses);
            let cpu_s = self.cpu_s(ctx.mem, ctx.scale, &ctx.costs);
            let (samples0, candidates0, lower0, cpu0) = self.last_control;
            self.last_control = (self.samples, candidates, lower, cpu_s);
            let full = |n: u64| (n as f64 * ctx.scale) as u64;
            if let Some(c) = self.controller.as_mut() {
                self.period = c.update(&IntervalSignals {
                    elapsed: Duration::from_secs_f64(CONTROL_EVERY_S),
                    cpu_time: Duration::from_secs_f64((cpu_s - cpu0).max(0.0)),
                    samples: full(self.samples - samples0),
                    new_candidates: full(candidates - candidates0),
                    lower_tier_samples: full(lower - lower0),
                });
            }
        }
    }

    /// Cumulative daemon CPU, full-size seconds.
    fn cpu_s(&self, mem: &SharedMemory, scale: f64, c: &CostModel) -> f64 {
        let mem = mem.lock();
        let ns = self.samples as f64 * c.sample_cpu_ns
            + (mem.moved_to_fast + mem.moved_to_slow) as f64 * c.migrate_cpu_ns
            + mem.queried as f64 * c.query_cpu_ns;
        ns * scale / 1e9
    }
}

enum Engine {
    Baseline,
    Numab2(Numab2),
    Damon(Damon),
    Pghotd(Box<PghotdEngine>),
}

struct RunCtx<'a> {
    workload: &'a Workload,
    mem: &'a SharedMemory,
    rng: &'a mut SplitMix64,
    scale: f64,
    costs: CostModel,
}

impl Engine {
    fn new(policy: &Policy, mem: &SharedMemory, pages: usize, scale: f64) -> Engine {
        match policy {
            Policy::Baseline => Engine::Baseline,
            Policy::Numab2 => Engine::Numab2(Numab2::new(scale, pages)),
            Policy::Damon => Engine::Damon(Damon::new(pages, scale)),
            Policy::Pghotd(policy) => {
                Engine::Pghotd(Box::new(PghotdEngine::new(policy, mem, pages, scale)))
            }
        }
    }

    /// One tick of the policy under test: pghotd through its real code, the others through
    /// their models on the locked memory.
    fn tick(&mut self, t_s: f64, rate: f64, ctx: &mut RunCtx<'_>, reserve_pages: u64) {
        if let Engine::Pghotd(e) = self {
            e.tick(t_s, rate, ctx);
            return;
        }
        let mut tick = Tick {
            dt_s: TICK_S,
            access_rate: rate,
            scale: ctx.scale,
            mem: &mut ctx.mem.lock(),
            rng: ctx.rng,
            reserve_pages,
        };
        match self {
            Engine::Numab2(m) => m.tick(&mut tick),
            Engine::Damon(m) => m.tick(&mut tick),
            Engine::Baseline | Engine::Pghotd(_) => {}
        }
    }
}

/// What a run measures tick by tick, for the [`Report`].
#[derive(Default)]
struct Progress {
    /// When coverage first reached 90 % and 99 %.
    time_to: [Option<f64>; 2],
    timeline: Vec<Row>,
    /// Per shift of the hot set, how long coverage took to get back to 95 %.
    recovery: Vec<Option<f64>>,
    shift_at: Option<f64>,
    /// Latency summed over the last quarter of the run, and the ticks summed.
    lat_sum: f64,
    lat_n: u64,
    cpu_peak: Option<f64>,
    /// Cumulative CPU at the last timeline row.
    cpu_last: f64,
}

impl Progress {
    /// The workload's hot set moved at `t_s`.
    fn shifted(&mut self, t_s: f64) {
        self.recovery.push(None);
        self.shift_at = Some(t_s);
    }

    /// Coverage milestones, recovery after a shift, and the last quarter's latency, after
    /// tick `tick` of `ticks`. Returns the coverage.
    fn observe(&mut self, m: &Memory, tick: u64, ticks: u64, t_s: f64, costs: &CostModel) -> f64 {
        let coverage = m.coverage_pct();
        for (slot, bar) in self.time_to.iter_mut().zip([90.0, 99.0]) {
            if slot.is_none() && coverage >= bar {
                *slot = Some(t_s);
            }
        }
        if let (Some(at), Some(last)) = (self.shift_at, self.recovery.last_mut())
            && last.is_none()
            && coverage >= 95.0
        {
            *last = Some(t_s - at);
        }
        if tick * 4 > ticks * 3 {
            self.lat_sum += costs.latency_ns(m.fast_access_share());
            self.lat_n += 1;
        }
        coverage
    }

    /// Adds a timeline row; `window_s` is the time since the last one.
    fn row(&mut self, t_s: f64, coverage: f64, engine: &Engine, ctx: &RunCtx<'_>, window_s: f64) {
        let (mem, scale, costs) = (ctx.mem, ctx.scale, &ctx.costs);
        let cpu = cpu_of(engine, mem, scale, costs);
        let window_cpu = cpu.map(|c| (c - self.cpu_last) * 100.0 / window_s);
        self.cpu_last = cpu.unwrap_or(0.0);
        if let Some(w) = window_cpu {
            self.cpu_peak = Some(self.cpu_peak.map_or(w, |p: f64| p.max(w)));
        }
        let m = mem.lock();
        self.timeline.push(Row {
            t_s,
            coverage_pct: coverage,
            over_promotion_pct: m.over_promotion_pct(),
            promoted_mb: m.moved_to_fast as f64 * scale * PAGE_BYTES / (1 << 20) as f64,
            period: period_of(engine),
            cpu_pct: window_cpu,
            latency_ns: costs.latency_ns(m.fast_access_share()),
        });
    }
}

/// Runs one simulation.
pub fn run(p: &SimParams) -> Report {
    let p = &SimParams {
        costs: p.costs.for_policy(&p.policy),
        ..p.clone()
    };
    let scale = p.scale.max(1.0);
    let mut workload = Workload::new(p.shape, scale, p.seed);
    let fast_pages = (workload.spec.fast_gib * GIB / PAGE_BYTES / scale) as u64;
    let reserve_pages = fast_pages * PROMOTE_MIN_FREE_PCT / 100;
    let mem: SharedMemory = Arc::new(Mutex::new(Memory::new(workload.pages(), fast_pages)));
    {
        let (hot, weight) = workload.truth();
        mem.lock().set_truth(hot, weight);
    }
    let mut rng = SplitMix64::stream(p.seed, 1);
    let mut engine = Engine::new(&p.policy, &mem, workload.pages(), scale);
    if let Engine::Numab2(n) = &mut engine {
        // The series' load phase: NUMAB2 was already scanning before the timed window.
        let mut t_s = 0.0;
        while t_s < baselines::NUMAB_LEAD_IN_S {
            t_s += TICK_S;
            let latency = p.costs.latency_ns(mem.lock().fast_access_share());
            let mut tick = Tick {
                dt_s: TICK_S,
                access_rate: workload.access_rate(latency),
                scale,
                mem: &mut mem.lock(),
                rng: &mut rng,
                reserve_pages,
            };
            n.tick(&mut tick);
        }
        let mut m = mem.lock();
        n.end_lead_in(m.moved_to_fast);
        m.moved_to_fast = 0;
    }
    let ticks = (p.duration_s / TICK_S).round() as u64;
    // At most MAX_TIMELINE_ROWS rows, however long the run: wider rows past that.
    let report_every = ((p.report_every_s / TICK_S).round() as u64)
        .max(ticks.div_ceil(MAX_TIMELINE_ROWS))
        .max(1);
    let mut progress = Progress::default();
    for tick in 1..=ticks {
        let t_s = tick as f64 * TICK_S;
        if workload.advance(t_s) {
            let (hot, weight) = workload.truth();
            mem.lock().set_truth(hot, weight);
            progress.shifted(t_s);
        }
        let latency = p.costs.latency_ns(mem.lock().fast_access_share());
        let rate = workload.access_rate(latency);
        let mut ctx = RunCtx {
            workload: &workload,
            mem: &mem,
            rng: &mut rng,
            scale,
            costs: p.costs,
        };
        engine.tick(t_s, rate, &mut ctx, reserve_pages);
        let coverage = progress.observe(&mem.lock(), tick, ticks, t_s, &p.costs);
        if tick % report_every == 0 {
            progress.row(t_s, coverage, &engine, &ctx, report_every as f64 * TICK_S);
        }
    }
    report(p, scale, reserve_pages, &workload, &engine, &mem, progress)
}

/// The report at the end of a run.
fn report(
    p: &SimParams,
    scale: f64,
    reserve_pages: u64,
    workload: &Workload,
    engine: &Engine,
    mem: &SharedMemory,
    progress: Progress,
) -> Report {
    let cpu = cpu_of(engine, mem, scale, &p.costs);
    let m = mem.lock();
    let hot_pages = workload.hot_pages() as f64;
    let to_full_mb = scale * PAGE_BYTES / (1 << 20) as f64;
    Report {
        label: p.label.clone(),
        workload: p.shape.name(),
        scale,
        seed: p.seed,
        duration_s: p.duration_s,
        coverage_pct: m.coverage_pct(),
        over_promotion_pct: m.over_promotion_pct(),
        placement_over_pct: (m.fast_used() as f64 - hot_pages) * 100.0 / hot_pages.max(1.0),
        fast_gb: m.fast_used() as f64 * scale * PAGE_BYTES / GIB,
        promoted_mb: m.moved_to_fast as f64 * to_full_mb,
        demoted_mb: m.moved_to_slow as f64 * to_full_mb,
        time_to_90_s: progress.time_to[0],
        time_to_99_s: progress.time_to[1],
        cpu_pct: cpu.map(|c| c * 100.0 / p.duration_s.max(TICK_S)),
        cpu_peak_pct: progress.cpu_peak,
        latency_ns: progress.lat_sum / progress.lat_n.max(1) as f64,
        speedup: {
            let compute = workload.spec.compute_ns;
            let lat = progress.lat_sum / progress.lat_n.max(1) as f64;
            (compute + p.costs.slow_ns) / (compute + lat).max(1e-9)
        },
        samples: match engine {
            Engine::Pghotd(e) => (e.samples as f64 * scale) as u64,
            _ => 0,
        },
        period_final: period_of(engine),
        fast_peak_used_pct: m.peak_fast_used as f64 * 100.0 / m.fast_capacity_pages.max(1) as f64,
        watermark_kept: m.peak_fast_used <= m.fast_capacity_pages - reserve_pages,
        hint_faults: match engine {
            Engine::Numab2(n) => Some((n.hint_faults * scale) as u64),
            _ => None,
        },
        pte_updates: match engine {
            Engine::Numab2(n) => Some((n.pte_updates as f64 * scale) as u64),
            _ => None,
        },
        lead_in_gb: match engine {
            Engine::Numab2(n) => Some(n.lead_in_pages as f64 * scale * PAGE_BYTES / GIB),
            _ => None,
        },
        damon_applied_gb: match engine {
            Engine::Damon(d) => Some(d.applied_pages as f64 * scale * PAGE_BYTES / GIB),
            _ => None,
        },
        damon_quota_exceeds: match engine {
            Engine::Damon(d) => Some(d.quota_exceeds),
            _ => None,
        },
        damon_regions: match engine {
            Engine::Damon(d) => Some(d.regions() as u64),
            _ => None,
        },
        kmigrated_cpu_pct: match engine {
            Engine::Pghotd(_) => Some(
                KMIGRATED_FIXED_PCT
                    + m.moved_to_fast as f64 * scale * KMIGRATED_PAGE_NS
                        / 1e7
                        / p.duration_s.max(TICK_S),
            ),
            _ => None,
        },
        recovery_95_s: progress.recovery,
        timeline: progress.timeline,
    }
}

fn period_of(engine: &Engine) -> Option<u64> {
    match engine {
        Engine::Pghotd(e) => Some(e.period),
        _ => None,
    }
}

/// Cumulative CPU of the promoter thread, full-size seconds; None when NUMAB2 spreads it over
/// the application's threads.
fn cpu_of(engine: &Engine, mem: &SharedMemory, scale: f64, costs: &CostModel) -> Option<f64> {
    match engine {
        Engine::Baseline => Some(0.0),
        Engine::Numab2(_) => None,
        Engine::Damon(d) => {
            let m = mem.lock();
            // One accessed-bit check (rmap walk, PTE young test) ~ 1 us; the checks do not
            // scale with the footprint, the moves do.
            let moves_ns = m.moved_to_fast as f64 * costs.migrate_cpu_ns * scale;
            Some((d.checks as f64 * 1000.0 + moves_ns) / 1e9)
        }
        Engine::Pghotd(e) => Some(e.cpu_s(mem, scale, costs)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small enough for debug builds: 1/1024 of the pghot series' sizes.
    fn params(shape: Shape, policy: Policy, duration_s: f64) -> SimParams {
        SimParams {
            label: String::new(),
            shape,
            scale: 1024.0,
            seed: 7,
            duration_s,
            policy,
            costs: CostModel::default(),
            report_every_s: 10.0,
        }
    }

    fn pghotd(period: PeriodSetting, freq_threshold: u16, demote: bool) -> Policy {
        Policy::Pghotd(PghotdPolicy {
            period,
            freq_threshold,
            promote_window_ms: 5000,
            demote,
            ..PghotdPolicy::sim_defaults(period)
        })
    }

    const AUTO: PeriodSetting = PeriodSetting::Auto {
        cpu_budget_pct: 5.0,
    };

    #[test]
    fn window_samples_scale_like_the_samples() {
        assert_eq!(scaled_window_samples(16384, 1.0), 16384);
        assert_eq!(scaled_window_samples(16384, 64.0), 256);
        assert_eq!(scaled_window_samples(16384, 1e6), 1);
        assert_eq!(scaled_window_samples(0, 64.0), 0, "widening off stays off");
    }

    #[test]
    fn runs_are_deterministic_per_seed() {
        let p = params(Shape::Graph, pghotd(AUTO, 1, false), 20.0);
        let a = run(&p);
        assert_eq!(a, run(&p));
        assert!(a.samples > 0 && a.promoted_mb > 0.0);
        let other = run(&SimParams { seed: 8, ..p });
        assert_ne!(a.timeline, other.timeline);
    }

    #[test]
    fn the_timeline_is_bounded_however_long_the_run() {
        // 20000 rows asked for (every tick of 200 s): 10000 given, evenly spread.
        let p = SimParams {
            report_every_s: TICK_S,
            ..params(Shape::Uniform, Policy::Baseline, 200.0)
        };
        let r = run(&p);
        assert_eq!(r.timeline.len() as u64, MAX_TIMELINE_ROWS);
        assert!((r.timeline[1].t_s - r.timeline[0].t_s - 2.0 * TICK_S).abs() < 1e-9);
    }

    #[test]
    fn the_baseline_promotes_nothing_and_pays_slow_latency() {
        let r = run(&params(Shape::Uniform, Policy::Baseline, 5.0));
        assert_eq!((r.coverage_pct, r.promoted_mb), (0.0, 0.0));
        assert!((r.latency_ns - 320.0).abs() < 1e-9);
    }

    /// At the daemon's default budget. (At 5 % it no longer does since issue 22's calibration:
    /// the series' p5008 sped the chase up so much that its own events grew 4.2x, and the
    /// model's p5008 now spends ~7 % of a core.)
    #[test]
    fn pointer_chase_auto_reaches_99_percent_before_period_5008_within_budget() {
        let budget = f64::from(::pghotd::config::Config::default().ibs_cpu_budget_pct);
        let auto = PeriodSetting::Auto {
            cpu_budget_pct: budget,
        };
        let auto = run(&params(Shape::PointerChase, pghotd(auto, 1, false), 700.0));
        let fixed = run(&params(
            Shape::PointerChase,
            pghotd(PeriodSetting::Fixed(5008), 1, false),
            700.0,
        ));
        let t99 = auto.time_to_99_s.expect("auto reaches 99 %");
        assert!(
            fixed.time_to_99_s.is_none_or(|f| t99 < f),
            "{t99} vs {fixed:?}"
        );
        assert!(
            auto.over_promotion_pct <= 2.0,
            "{}",
            auto.over_promotion_pct
        );
        assert!(
            auto.cpu_peak_pct.unwrap() <= budget,
            "{:?}",
            auto.cpu_peak_pct
        );
    }

    #[test]
    fn zipf_auto_covers_three_times_what_period_10000_does() {
        let auto = run(&params(Shape::Zipf, pghotd(AUTO, 1, false), 240.0));
        let fixed = run(&params(
            Shape::Zipf,
            pghotd(PeriodSetting::Fixed(10_000), 1, false),
            240.0,
        ));
        assert!(
            auto.coverage_pct >= 3.0 * fixed.coverage_pct,
            "{} vs {}",
            auto.coverage_pct,
            fixed.coverage_pct
        );
    }

    #[test]
    fn a_shifted_hot_set_recovers_only_with_demotion_and_never_past_the_watermark() {
        // At 1/64, the scale of BENCHMARKS.md: coarser scales hide what held recovery back
        // (a 96-page fast tier at 1/1024 never left the heat cut much to do).
        let with = run(&SimParams {
            scale: 64.0,
            ..params(Shape::Shifting, pghotd(AUTO, 1, true), 135.0)
        });
        assert_eq!(with.recovery_95_s.len(), 2);
        for r in &with.recovery_95_s {
            // The bar: two promotion windows (10 s at pghotd's default 5 s), at the
            // default 5 % budget (BENCHMARKS.md: 7.0-8.9 s over seeds 1-8).
            assert!(r.is_some_and(|s| s <= 10.0), "{:?}", with.recovery_95_s);
        }
        assert!(with.watermark_kept && with.demoted_mb > 0.0);
        let without = run(&params(Shape::Shifting, pghotd(AUTO, 1, false), 170.0));
        assert!(without.recovery_95_s.iter().all(Option::is_none));
        assert!(without.watermark_kept);
    }

    #[test]
    fn numab2_and_damon_models_show_the_seeds_shape() {
        let numab = run(&params(Shape::PointerChase, Policy::Numab2, 240.0));
        let damon = run(&params(Shape::PointerChase, Policy::Damon, 240.0));
        // NUMAB2 places the hot set and nothing else; DAMON moves whole regions of the hot
        // span, cold pages included.
        assert!(
            numab.coverage_pct > 95.0 && numab.over_promotion_pct < 1.0,
            "{numab:?}"
        );
        assert!(damon.over_promotion_pct > 20.0, "{damon:?}");
        assert!(numab.hint_faults.unwrap() > 0 && numab.cpu_pct.is_none());
        assert!(numab.pte_updates.unwrap() > numab.hint_faults.unwrap());
    }

    /// The pghot series' pointer-chase table, written out by hand from its reply
    /// "Tiered-memory promotion: baseline vs NUMA-balancing vs DAMON vs pghot hwhints (IBS)"
    /// (/work/shared/seeds/000_ac3da8caf57278cd.txt), against the model at the scale of
    /// BENCHMARKS.md. Issue 22's bar: the figures the model was fitted to within 25 %, the
    /// counters it was not fitted to within a factor of 2.
    #[test]
    fn the_pointer_chase_reproduces_the_seeds_table() {
        let at64 = |policy| {
            run(&SimParams {
                scale: 64.0,
                seed: 1,
                ..params(Shape::PointerChase, policy, 240.0)
            })
        };
        let fixed = |p| pghotd(PeriodSetting::Fixed(p), 1, false);
        let b0 = at64(Policy::Baseline);
        let n2 = at64(Policy::Numab2);
        let d3 = at64(Policy::Damon);
        let h10 = at64(fixed(10_000));
        let h5 = at64(fixed(5008));
        let within = |what: &str, model: f64, seed: f64, bar: f64| {
            let ratio = model / seed;
            assert!(
                ratio >= 1.0 / bar && ratio <= bar,
                "{what}: model {model} vs the series' {seed}"
            );
        };
        let fitted = |what: &str, model: f64, seed: f64| {
            assert!(
                (model / seed - 1.0).abs() <= 0.25,
                "{what}: model {model} vs the series' {seed}"
            );
        };
        // lat (ns) and node0 (GB) of each row.
        fitted("B0 lat", b0.latency_ns, 320.0);
        assert_eq!(b0.fast_gb, 0.0);
        fitted("N2 lat", n2.latency_ns, 143.0);
        fitted("N2 node0", n2.fast_gb, 16.0);
        fitted("D3 lat", d3.latency_ns, 119.0);
        fitted("D3 node0", d3.fast_gb, 23.9);
        fitted("H10 lat", h10.latency_ns, 215.0);
        fitted("H10 node0", h10.fast_gb, 4.9);
        fitted("H5 lat", h5.latency_ns, 92.0);
        fitted("H5 node0", h5.fast_gb, 11.6);
        // km 20 s and 38 s over 240 s (the kmigrated cost was solved from these two).
        fitted("H10 km", h10.kmigrated_cpu_pct.unwrap(), 20.0 / 2.4);
        fitted("H5 km", h5.kmigrated_cpu_pct.unwrap(), 38.0 / 2.4);
        // The supporting counters, not fitted.
        within(
            "N2 hint faults",
            n2.hint_faults.unwrap() as f64,
            3.73e6,
            2.0,
        );
        within(
            "N2 pte updates",
            n2.pte_updates.unwrap() as f64,
            12.9e6,
            2.0,
        );
        within("N2 promoted", n2.promoted_mb / 1024.0, 14.6, 2.0);
        within("D3 sz_applied", d3.damon_applied_gb.unwrap(), 24.7, 2.0);
        within(
            "D3 qt_exceeds",
            d3.damon_quota_exceeds.unwrap() as f64,
            229.0,
            2.0,
        );
        within("D3 kd", d3.cpu_pct.unwrap(), 13.0 / 2.4, 2.0);
        let regions = d3.damon_regions.unwrap() as f64;
        assert!((21.0 / 2.0..=71.0 * 2.0).contains(&regions), "{regions}");
        within("H10 events", h10.samples as f64, 1.40e6, 2.0);
        within("H5 events", h5.samples as f64, 5.91e6, 2.0);
        // pgpromote_success, pages.
        within("H10 promoted", h10.promoted_mb * 256.0, 1.29e6, 2.0);
        within("H5 promoted", h5.promoted_mb * 256.0, 3.15e6, 2.0);
    }

    /// Issue 22's second bar, as its text gives it: "`pghot-sim --workload pointer-chase
    /// --period auto --json` at its defaults (240 s): coverage >= 99 %, over-promotion <= 2 %,
    /// latency below every seed row, `cpu_pct` <= 16" (16 % of a core: H5's kmigrated, "at
    /// no more promoter CPU than the seed's H5"). The seed rows' latencies are those of
    /// [`seed::POINTER_CHASE`], the series' pointer-chase table its module comment cites.
    /// Returns what the run misses.
    fn bar2_misses(r: &Report) -> Vec<String> {
        const COVERAGE_PCT: f64 = 99.0;
        const OVER_PCT: f64 = 2.0;
        const CPU_PCT: f64 = 16.0;
        let seed_latencies: Vec<f64> = seed::POINTER_CHASE
            .iter()
            .filter(|f| f.metric == seed::Metric::LatencyNs)
            .map(|f| f.value)
            .collect();
        assert_eq!(seed_latencies.len(), 5, "B0, N2, D3, H10, H5");
        let lowest = seed_latencies.iter().copied().fold(f64::INFINITY, f64::min);
        let mut misses = Vec::new();
        if r.coverage_pct < COVERAGE_PCT {
            misses.push(format!("coverage {} % < {COVERAGE_PCT}", r.coverage_pct));
        }
        if r.over_promotion_pct > OVER_PCT {
            misses.push(format!("over {} % > {OVER_PCT}", r.over_promotion_pct));
        }
        if r.latency_ns >= lowest {
            misses.push(format!("latency {} ns >= {lowest}", r.latency_ns));
        }
        let cpu = r.cpu_pct.expect("pghotd's CPU");
        if cpu > CPU_PCT {
            misses.push(format!("cpu {cpu} % > {CPU_PCT}"));
        }
        misses
    }

    /// `pghot-sim --workload pointer-chase --period auto` with `policy`, at the simulator's
    /// other defaults (1/64, seed 1, 240 s, the daemon's budget).
    fn auto_at_cli_defaults(policy: impl Fn(PeriodSetting) -> PghotdPolicy) -> Report {
        let budget = f64::from(::pghotd::config::Config::default().ibs_cpu_budget_pct);
        let auto = PeriodSetting::Auto {
            cpu_budget_pct: budget,
        };
        run(&SimParams {
            scale: 64.0,
            seed: 1,
            ..params(Shape::PointerChase, Policy::Pghotd(policy(auto)), 240.0)
        })
    }

    /// Issue 22's second bar with the series' freq_threshold 1 (its H rows' setting) and
    /// otherwise the defaults; the highest 10 s window stays under 16 % too.
    #[test]
    fn pghotd_auto_is_ahead_of_every_seed_row_in_240_s_at_threshold_1() {
        let r = auto_at_cli_defaults(|period| PghotdPolicy {
            freq_threshold: 1,
            ..PghotdPolicy::sim_defaults(period)
        });
        assert_eq!(bar2_misses(&r), Vec::<String>::new());
        assert!(r.cpu_peak_pct.unwrap() <= 16.0, "{:?}", r.cpu_peak_pct);
    }

    /// Issue 22's second bar at the simulator's defaults, which are the daemon's
    /// (freq_threshold 2, promote_window_ms 5000, window_samples, the default budget).
    /// BENCHMARKS.md, issue 22's section, has the figures on seeds 1-3.
    #[test]
    fn pghotd_auto_is_ahead_of_every_seed_row_in_240_s_at_the_defaults() {
        let r = auto_at_cli_defaults(PghotdPolicy::sim_defaults);
        assert_eq!(bar2_misses(&r), Vec::<String>::new());
        assert_eq!(
            PghotdPolicy::sim_defaults(PeriodSetting::Fixed(1)).promote_window_ms,
            5000,
            "the daemon's documented promote_window_ms (README)"
        );
    }
}
