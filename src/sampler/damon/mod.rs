//! `--source damon`: the kernel's DAMON watches the managed pids; pghotd turns its region
//! snapshots into samples.
//!
//! `sysfs` claims and configures a kdamond (vaddr ops, one `stat` scheme per pid with an
//! explicit access pattern: any size and age, `nr_accesses` >= 1). Each loop asks for a
//! snapshot with `update_schemes_tried_regions`, which returns after the next aggregation
//! interval, so there is one snapshot per `damon_aggr_us`.
//!
//! The credit rule ([`credit`]): a region of P pages whose `nr_accesses` is n, of at most
//! N = aggr_us / sample_us, has the access rate r = min(n / N, 1). Per snapshot it gets
//! P x r x s credits (s <= 1, below), rounded up or down at random in proportion to the
//! fraction, placed on evenly spaced pages of the region from an offset that changes every
//! snapshot. So each page of the region is credited r x s times per snapshot on average, and
//! each credit is one load [`Sample`]: the table's threshold and window apply unchanged. A
//! region with n = 0 gets nothing.
//!
//! Volume bound: a snapshot emits at most `damon_max_samples` samples. When the credits of
//! all regions of all pids add up to more, s = cap / total scales every region alike (hotter
//! regions keep their lead) and the credits not given are counted in
//! `damon_credits_capped`. Without it, a hot 256 MiB region (65536 pages) would be 655360
//! samples a second at the default 100 ms aggregation.
//!
//! Failures: DAMON's sysfs answers EBUSY while its lock is held, and the kdamond's own
//! callbacks take that lock every sampling interval, so a snapshot request (or a restart) can
//! fail for a moment, the more often the busier the machine. Such a failure, or a kdamond that
//! stopped while a managed pid still runs, is counted in `damon_retries` and tried again after
//! a pause; the source fails, naming the last error, only when DAMON has failed for
//! [`RETRY_FOR`] in a row. It ends without error when every managed pid has exited.

pub mod aggregated;
pub mod sysfs;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aggregated::{AggregatedEvent, Assembler};
use sysfs::{Admin, Kdamond, KdamondSpec, Region};

use super::procpid::{self, ManagedPids, Watched};
use super::{OpenContext, Source, SourceError};
use crate::sample::{AccessOp, SourceKind};
use crate::sampler::SinkFactory;
use crate::sampler::pace::{self, DrainPace};
use crate::stats::Counter;
use crate::stop::StopToken;

const PAGE_SIZE: u64 = 4096;

/// How often vaddr re-reads the targets' mappings: the sysfs default (60 s) would miss a
/// buffer mapped after the start for a minute.
const UPDATE_US: u64 = 1_000_000;

/// Tunables of the DAMON source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DamonConfig {
    pub sample_us: u32,
    /// Also the snapshot interval.
    pub aggr_us: u32,
    pub min_regions: u32,
    pub max_regions: u32,
    /// Most samples one snapshot emits.
    pub max_samples: u32,
}

impl Default for DamonConfig {
    fn default() -> Self {
        // DAMON's own defaults, and a cap of 64 MiB of pages per snapshot.
        DamonConfig {
            sample_us: 5000,
            aggr_us: 100_000,
            min_regions: 10,
            max_regions: 1000,
            max_samples: 16384,
        }
    }
}

impl DamonConfig {
    /// The highest `nr_accesses` a region can have (sampling intervals per aggregation).
    pub fn max_nr_accesses(&self) -> u32 {
        (self.aggr_us / self.sample_us.max(1)).max(1)
    }
}

/// splitmix64: cheap, well-mixed, deterministic.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A uniform number in [0, 1) from a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The credits all regions would get before the cap: sum of pages x rate.
pub fn expected_credits(regions: &[Region], max_nr: u32) -> f64 {
    regions
        .iter()
        .map(|r| region_pages(r) as f64 * rate(r, max_nr))
        .sum()
}

/// Snapshots after which DAMON's regions have formed (it starts from `min_regions` and splits
/// and merges every aggregation): when pghotd says how large they are ([`region_size_note`]).
pub const SETTLED_SNAPSHOTS: u64 = 10;

/// The regions with an access seen (`nr_accesses` above 0), and the pages they span.
pub fn accessed_extent<'a>(regions: impl IntoIterator<Item = &'a Region>) -> (u64, u64) {
    regions
        .into_iter()
        .filter(|r| r.nr_accesses > 0)
        .fold((0, 0), |(n, pages), r| (n + 1, pages + region_pages(r)))
}

/// What pghotd says once DAMON's regions have settled: the mean accessed region, the finest
/// the damon source can place, since every page of a region gets the same credit (issue 19:
/// say so rather than promote whole regions silently). `None` before any accessed region.
pub fn region_size_note(accessed: u64, pages: u64) -> Option<String> {
    let mean = pages.checked_div(accessed)?;
    Some(format!(
        "damon: the accessed regions average {mean} pages ({} KiB): every page of a region \
         gets the same credit, so hot pages scattered among cold ones within that are \
         promoted with them (softdirty, or a PMU source, places written or sampled pages one \
         by one); pghotctl status keeps the figure",
        mean * PAGE_SIZE / 1024
    ))
}

fn region_pages(r: &Region) -> u64 {
    r.end.div_ceil(PAGE_SIZE) - r.start / PAGE_SIZE
}

fn rate(r: &Region, max_nr: u32) -> f64 {
    (f64::from(r.nr_accesses) / f64::from(max_nr.max(1))).min(1.0)
}

/// Appends the credited page addresses of `regions` to `out`, at `scale` (see the module doc);
/// `seed` changes every snapshot. Never appends more than `limit` addresses.
pub fn credit(
    regions: &[Region],
    max_nr: u32,
    scale: f64,
    seed: u64,
    limit: usize,
    out: &mut Vec<u64>,
) {
    for r in regions {
        if out.len() >= limit {
            return;
        }
        let pages = region_pages(r);
        let x = pages as f64 * rate(r, max_nr) * scale.clamp(0.0, 1.0);
        let h = mix(seed ^ mix(r.start));
        let mut k = x.floor() as u64 + u64::from(unit(h) < x.fract());
        k = k.min(pages).min((limit - out.len()) as u64);
        if k == 0 {
            continue;
        }
        let spacing = pages as f64 / k as f64;
        let offset = unit(mix(h)) * spacing;
        let first = r.start / PAGE_SIZE;
        for i in 0..k {
            let page = ((offset + i as f64 * spacing) as u64).min(pages - 1);
            out.push((first + page) * PAGE_SIZE);
        }
    }
}

/// Most processes one kdamond watches: one target and one scheme each, and every snapshot
/// reads every scheme's regions. Beyond it, a followed scope's lowest pids are watched.
pub const MAX_TARGETS: usize = 64;

/// How often a followed scope's membership is compared with the kdamond's targets: a change
/// restarts the kdamond, whose regions then take a few aggregation intervals to form.
const RETARGET_EVERY: Duration = Duration::from_secs(1);

/// The DAMON source over explicit pids (it ends when they have all exited) or a followed
/// scope (the kdamond is re-targeted as processes join and leave; an empty scope idles).
pub struct DamonSource {
    watched: Watched,
    config: DamonConfig,
    admin: Admin,
    run_dir: PathBuf,
    /// Where tracefs is looked for (`aggregated`).
    sysfs_root: PathBuf,
    /// How long DAMON may keep failing before the source does ([`RETRY_FOR`]).
    retry_for: Duration,
}

impl DamonSource {
    /// Checks the selection and DAMON's sysfs interface; the kdamond is claimed when the
    /// source runs.
    pub fn open(ctx: &OpenContext) -> Result<Self, SourceError> {
        let watched = Watched::from_context("damon", ctx)?;
        let admin = Admin::open(&ctx.sysfs_root)?;
        // Fail at start, not in the source thread, when every kdamond is someone else's.
        sysfs::recover(&admin, &ctx.run_dir)?;
        admin.find_free()?;
        Ok(DamonSource {
            watched,
            config: ctx.damon,
            admin,
            run_dir: ctx.run_dir.clone(),
            sysfs_root: ctx.sysfs_root.clone(),
            retry_for: RETRY_FOR,
        })
    }

    fn spec(&self, pids: &[u32]) -> KdamondSpec {
        let c = self.config;
        KdamondSpec {
            pids: pids.to_vec(),
            sample_us: u64::from(c.sample_us),
            aggr_us: u64::from(c.aggr_us),
            update_us: UPDATE_US.max(u64::from(c.aggr_us)),
            min_regions: u64::from(c.min_regions),
            max_regions: u64::from(c.max_regions),
        }
    }
}

/// Who the kdamond should watch now.
enum Want {
    /// These pids (sorted, at most [`MAX_TARGETS`]).
    Pids(Vec<u32>),
    /// Nobody for now: a followed scope with no members.
    Idle,
    /// Every explicit pid has exited: the source ends.
    Done,
}

/// The processes to watch, tracked across snapshots.
enum Selection {
    Explicit(ManagedPids),
    Followed {
        scope: Arc<crate::scope::Scope>,
        /// When the scope was last compared with the targets.
        checked: Option<Instant>,
        /// Whether "more members than MAX_TARGETS" was logged.
        warned: bool,
    },
}

impl Selection {
    fn new(watched: &Watched) -> Selection {
        match watched {
            Watched::Pids(pids) => Selection::Explicit(ManagedPids::new("damon", pids)),
            Watched::Scope(scope) => Selection::Followed {
                scope: Arc::clone(scope),
                checked: None,
                warned: false,
            },
        }
    }

    /// Who to watch, or `None` when a followed scope is not due for a look (`targets` stay).
    fn want(&mut self, sink: &mut dyn crate::sampler::SampleSink, targets: &[u32]) -> Option<Want> {
        match self {
            Selection::Explicit(pids) => {
                pids.reap(sink);
                Some(if pids.is_empty() {
                    Want::Done
                } else {
                    Want::Pids(pids.pids().to_vec())
                })
            }
            Selection::Followed {
                scope,
                checked,
                warned,
            } => {
                let now = Instant::now();
                if checked.is_some_and(|t| now.duration_since(t) < RETARGET_EVERY)
                    && !targets.is_empty()
                {
                    return None;
                }
                *checked = Some(now);
                // The tracker drops exited processes at its own pace; a dead pid cannot be a
                // DAMON target.
                let mut members = scope.members();
                members.retain(|&p| procpid::pid_alive(p));
                if members.len() > MAX_TARGETS {
                    if !*warned {
                        tracing::warn!(
                            "damon: {} processes in scope; one kdamond watches the {MAX_TARGETS} \
                             lowest pids",
                            members.len()
                        );
                        *warned = true;
                    }
                    members.truncate(MAX_TARGETS);
                }
                Some(if members.is_empty() {
                    Want::Idle
                } else {
                    Want::Pids(members)
                })
            }
        }
    }
}

impl Source for DamonSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Damon
    }

    fn describe(&self) -> String {
        let c = self.config;
        format!(
            "damon ({}, sample {} us, aggr {} us, regions {}..{}, at most {} samples per snapshot)",
            self.watched.describe(),
            c.sample_us,
            c.aggr_us,
            c.min_regions,
            c.max_regions,
            c.max_samples
        )
    }

    fn run(&mut self, sinks: &dyn SinkFactory, stop: &StopToken) -> Result<(), SourceError> {
        let mut sink = sinks.sink();
        let mut selection = Selection::new(&self.watched);
        // Claimed (and configured, which checks vaddr support) at once, even for a scope that
        // is empty yet; started and re-targeted as the selection changes. `targets` is what
        // it watches now (empty: off).
        let mut kdamond = Kdamond::claim(self.admin.clone(), &self.run_dir, &self.spec(&[]))?;
        let mut targets: Vec<u32> = Vec::new();
        let mut failures = Failures::new(self.retry_for, self.config.aggr_us);
        let mut snapshots = Snapshots::new(self.config);
        let mut reader = RegionReader::new(&self.sysfs_root, self.config);
        while !stop.is_stopped() {
            // A snapshot per turn is the thread's progress, for the watchdog.
            crate::heartbeat::beat();
            match selection.want(sink.as_mut(), &targets) {
                None => {}
                Some(Want::Done) => {
                    tracing::info!("damon: every managed pid has exited; source ends");
                    break;
                }
                Some(Want::Idle) if !targets.is_empty() => {
                    tracing::info!("damon: no process in scope; kdamond off until one comes");
                    if let Err(e) = kdamond.stop() {
                        failures.failed(sink.as_mut(), stop, e, "turning the kdamond off")?;
                        continue;
                    }
                    targets.clear();
                }
                Some(Want::Idle) => {}
                Some(Want::Pids(want)) if want != targets => {
                    if let Err(e) = kdamond.retarget(&self.spec(&want)) {
                        targets.clear();
                        // A pid that exits between the look and the start fails the start:
                        // look again. EBUSY (DAMON's sysfs lock held) is tried again; anything
                        // else is DAMON's refusal.
                        if !want.iter().all(|&p| procpid::pid_alive(p)) {
                            tracing::debug!("damon: a target exited while starting: {e}");
                        } else if is_transient(&e) {
                            failures.failed(sink.as_mut(), stop, e, "starting the kdamond")?;
                        } else {
                            return Err(e);
                        }
                        continue;
                    }
                    tracing::info!(
                        "damon: kdamond {} (thread pid {}) watches pids {want:?}",
                        kdamond.index(),
                        kdamond
                            .thread_pid()
                            .map_or_else(|| "-".to_string(), |p| p.to_string()),
                    );
                    targets = want;
                    // A new kdamond thread: the tracepoint is opened on it at the next turn.
                    reader.restarted();
                }
                Some(Want::Pids(_)) => {}
            }
            if targets.is_empty() {
                // Idle (an empty scope): look again at the next membership check.
                crate::stop::wait_until(Instant::now() + RETARGET_EVERY, stop);
                continue;
            }
            let taken = reader.take(&kdamond, &targets, &mut snapshots, sink.as_mut(), stop);
            let Err(e) = taken else {
                if taken.is_ok_and(|whole| whole > 0) {
                    failures.succeeded();
                }
                continue;
            };
            if stop.is_stopped() {
                break;
            }
            if kdamond.is_on() {
                // The kdamond runs: a busy lock or a snapshot torn by load, not an end.
                failures.failed(sink.as_mut(), stop, e, "taking a snapshot")?;
                continue;
            }
            // A vaddr kdamond stops by itself once every target is gone: look at the selection
            // again (explicit pids end the source, a scope re-targets).
            tracing::debug!("damon: kdamond {} stopped: {e}", kdamond.index());
            targets.clear();
            if matches!(selection, Selection::Explicit(_))
                && let Some(Want::Pids(left)) = selection.want(sink.as_mut(), &targets)
            {
                // Stopped under live pids: restarted at the next pass, within the budget.
                let what = format!("kdamond stopped while pids {left:?} still run");
                failures.failed(sink.as_mut(), stop, e, &what)?;
            }
        }
        kdamond.release()
    }
}

/// True for the errors DAMON's sysfs gives for a moment: EBUSY while the kdamond (whose
/// callbacks take `damon_sysfs_lock` every sampling interval) or another writer holds the lock,
/// EAGAIN, EINTR.
fn is_transient(e: &SourceError) -> bool {
    matches!(e, SourceError::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)))
}

/// How long DAMON requests may keep failing while the managed pids run before the source
/// gives up (at least ten aggregation intervals).
const RETRY_FOR: Duration = Duration::from_secs(10);

/// The first pause after a failure; it doubles up to [`RETRY_PAUSE_MAX`].
const RETRY_PAUSE: Duration = Duration::from_millis(20);
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Consecutive failures to get a snapshot while the kdamond should be watching live pids: each
/// is counted and tried again after a pause; the source fails, naming the last error, only when
/// they have lasted [`RETRY_FOR`].
struct Failures {
    budget: Duration,
    /// When the current run of failures began, and how many it has had.
    streak: Option<(Instant, u32)>,
}

impl Failures {
    fn new(retry_for: Duration, aggr_us: u32) -> Failures {
        Failures {
            budget: retry_for.max(Duration::from_micros(u64::from(aggr_us)) * 10),
            streak: None,
        }
    }

    /// Counts a failure of `what`: pauses before the next try, or returns the error once the
    /// failures have lasted the budget.
    fn failed(
        &mut self,
        sink: &mut dyn crate::sampler::SampleSink,
        stop: &StopToken,
        e: SourceError,
        what: &str,
    ) -> Result<(), SourceError> {
        let now = Instant::now();
        let (since, count) = self.streak.get_or_insert((now, 0));
        *count += 1;
        let lasted = now.duration_since(*since);
        if lasted >= self.budget {
            return Err(SourceError::Damon(format!(
                "{what}: {e}; DAMON failed {count} times in a row over {:.1} s, giving up",
                lasted.as_secs_f64()
            )));
        }
        sink.count(Counter::DamonRetries, 1);
        if *count == 1 {
            tracing::warn!(
                "damon: {what}: {e}; trying again for up to {} s",
                self.budget.as_secs()
            );
        } else {
            tracing::debug!("damon: {what} (try {count}): {e}");
        }
        let pause = RETRY_PAUSE
            .saturating_mul(1 << (*count - 1).min(6))
            .min(RETRY_PAUSE_MAX);
        crate::stop::wait_until(now + pause, stop);
        Ok(())
    }

    fn succeeded(&mut self) {
        if let Some((since, count)) = self.streak.take() {
            tracing::info!(
                "damon: snapshots again after {count} failed tries over {:.1} s",
                since.elapsed().as_secs_f64()
            );
        }
    }
}

/// How long the tracepoint may bring no whole aggregation while the kdamond runs before the
/// source reads `tried_regions` instead: a kernel that takes the event but never writes it
/// must not leave pghotd blind. Ten aggregation intervals, and at least two seconds.
fn trace_stall(config: DamonConfig) -> Duration {
    (Duration::from_micros(u64::from(config.aggr_us)) * 10).max(Duration::from_secs(2))
}

/// Reads DAMON's regions from the kdamond's `damon_aggregated` tracepoint while it can
/// ([`aggregated`]), else through `tried_regions` snapshots; emits each aggregation's samples.
struct RegionReader {
    sysfs_root: PathBuf,
    ring_pages: usize,
    stall: Duration,
    traced: Option<Traced>,
    /// Why the tracepoint is not used; `tried_regions` from then on.
    refused: Option<String>,
}

/// The tracepoint open on the current kdamond thread.
struct Traced {
    event: AggregatedEvent,
    asm: Assembler,
    pace: DrainPace,
    /// When the last whole aggregation came (or the event was opened).
    last_whole: Instant,
    /// Torn aggregations and foreign records already counted.
    counted: (u64, u64),
}

impl RegionReader {
    fn new(sysfs_root: &Path, config: DamonConfig) -> RegionReader {
        RegionReader {
            sysfs_root: sysfs_root.to_path_buf(),
            ring_pages: aggregated::ring_pages(config.max_regions, config.aggr_us),
            stall: trace_stall(config),
            traced: None,
            refused: None,
        }
    }

    /// The kdamond was (re)started: its thread is a new one.
    fn restarted(&mut self) {
        self.traced = None;
    }

    /// Reads the next aggregation or aggregations of `targets` and emits their samples;
    /// returns how many were whole. An error is the kdamond's: a snapshot refused, or the
    /// kdamond stopped.
    fn take(
        &mut self,
        kdamond: &Kdamond,
        targets: &[u32],
        snapshots: &mut Snapshots,
        sink: &mut dyn crate::sampler::SampleSink,
        stop: &StopToken,
    ) -> Result<u64, SourceError> {
        if self.traced.is_none() && self.refused.is_none() {
            self.open(kdamond, targets.len());
        }
        let Some(traced) = &mut self.traced else {
            kdamond.update_snapshot()?;
            snapshots.read(kdamond, targets.len(), sink)?;
            snapshots.emit(targets, sink);
            return Ok(1);
        };
        let whole = traced.take(targets, snapshots, sink, stop);
        if whole > 0 || traced.last_whole.elapsed() < self.stall {
            return Ok(whole);
        }
        if !kdamond.is_on() {
            return Err(SourceError::Damon(format!(
                "kdamond {} is off: no aggregation from its tracepoint",
                kdamond.index()
            )));
        }
        let why = format!(
            "no whole aggregation from the damon_aggregated tracepoint in {:.1} s while \
             kdamond {} runs",
            self.stall.as_secs_f64(),
            kdamond.index()
        );
        tracing::warn!("damon: {why}; reading tried_regions instead");
        self.traced = None;
        self.refused = Some(why);
        Ok(0)
    }

    /// Opens the tracepoint on the kdamond's thread, or settles on `tried_regions`, saying
    /// which and why.
    fn open(&mut self, kdamond: &Kdamond, targets: usize) {
        // Not running yet: a snapshot through sysfs this turn, the tracepoint at the next.
        let Some(tid) = kdamond.thread_pid() else {
            return;
        };
        match AggregatedEvent::open(&self.sysfs_root, tid, self.ring_pages) {
            Ok(event) => {
                tracing::info!(
                    "damon: reading kdamond {}'s regions from its damon_aggregated tracepoint \
                     (thread {tid}, a {} KiB ring)",
                    kdamond.index(),
                    self.ring_pages * crate::sampler::perf::ring::page_size() / 1024
                );
                self.traced = Some(Traced {
                    event,
                    asm: Assembler::new(targets),
                    pace: DrainPace::new(pace::PAGE_BYTES / aggregated::RECORD_BYTES),
                    last_whole: Instant::now(),
                    counted: (0, 0),
                });
            }
            Err(why) => {
                tracing::info!(
                    "damon: reading tried_regions snapshots, which cost the kdamond and pghotd \
                     far more than the damon_aggregated tracepoint: {why}"
                );
                self.refused = Some(why);
            }
        }
    }
}

impl Traced {
    /// Waits for records (the ring's watermark, the pace's wait, or a stop), drains them and
    /// emits every whole aggregation; returns how many there were.
    fn take(
        &mut self,
        targets: &[u32],
        snapshots: &mut Snapshots,
        sink: &mut dyn crate::sampler::SampleSink,
        stop: &StopToken,
    ) -> u64 {
        let waited_from = Instant::now();
        if let Err(e) = crate::stop::wait_fd(self.event.fd(), stop, Some(self.pace.wait())) {
            tracing::debug!("damon: polling the tracepoint: {e}");
            crate::stop::wait_until(waited_from + self.pace.wait(), stop);
        }
        let mut whole = 0;
        let drained = self.event.drain(&mut self.asm, |asm| {
            snapshots.take(asm, sink);
            snapshots.emit(targets, sink);
            whole += 1;
        });
        // A hung-up fd (the kdamond exited) polls ready at once: never spin on it.
        if drained.records == 0 && waited_from.elapsed() < self.pace.wait() {
            crate::stop::wait_until(waited_from + self.pace.wait(), stop);
        }
        self.pace.drained(drained.records, waited_from.elapsed());
        sink.count(Counter::SourceLostRecords, drained.lost);
        sink.count(Counter::PerfBadRecords, drained.bad);
        let (torn, foreign) = (self.asm.torn, self.asm.foreign);
        sink.count(Counter::DamonTornAggregations, torn - self.counted.0);
        sink.count(Counter::PerfBadRecords, foreign - self.counted.1);
        self.counted = (torn, foreign);
        if whole > 0 {
            self.last_whole = Instant::now();
        }
        whole
    }
}

/// The regions of the last snapshot, one list per target, and how they become samples.
struct Snapshots {
    max_nr: u32,
    cap: usize,
    regions: Vec<Vec<Region>>,
    pages: Vec<u64>,
    /// Credits the regions would get before the cap.
    total: f64,
    taken: u64,
    /// Accessed regions, and their pages, over the snapshots until the note is logged.
    accessed: (u64, u64),
}

impl Snapshots {
    fn new(config: DamonConfig) -> Snapshots {
        let cap = config.max_samples as usize;
        Snapshots {
            max_nr: config.max_nr_accesses(),
            cap,
            regions: Vec::new(),
            pages: Vec::with_capacity(cap),
            total: 0.0,
            taken: 0,
            accessed: (0, 0),
        }
    }

    /// Reads every target's regions of the snapshot the kdamond just took.
    fn read(
        &mut self,
        kdamond: &Kdamond,
        targets: usize,
        sink: &mut dyn crate::sampler::SampleSink,
    ) -> Result<(), SourceError> {
        self.regions.resize_with(targets, Vec::new);
        for (i, r) in self.regions.iter_mut().enumerate() {
            kdamond.read_regions(i, r)?;
        }
        self.account(sink);
        Ok(())
    }

    /// Takes the regions of a whole aggregation from the tracepoint's assembler.
    fn take(&mut self, asm: &mut Assembler, sink: &mut dyn crate::sampler::SampleSink) {
        asm.take(&mut self.regions);
        self.account(sink);
    }

    /// Counts the snapshot just read and sums the credits its regions would get.
    fn account(&mut self, sink: &mut dyn crate::sampler::SampleSink) {
        self.total = self
            .regions
            .iter()
            .map(|r| expected_credits(r, self.max_nr))
            .sum();
        self.taken += 1;
        sink.count(Counter::DamonSnapshots, 1);
        let seen = self.regions.iter().map(Vec::len).sum::<usize>();
        sink.count(Counter::DamonRegionsSeen, seen as u64);
        let (accessed, pages) = accessed_extent(self.regions.iter().flatten());
        sink.count(Counter::DamonAccessedRegions, accessed);
        sink.count(Counter::DamonAccessedRegionPages, pages);
        if self.taken <= SETTLED_SNAPSHOTS {
            self.accessed = (self.accessed.0 + accessed, self.accessed.1 + pages);
            if self.taken == SETTLED_SNAPSHOTS
                && let Some(note) = region_size_note(self.accessed.0, self.accessed.1)
            {
                tracing::info!("{note}");
            }
        }
    }

    /// Turns the regions read into samples of `targets` (see the module doc).
    fn emit(&mut self, targets: &[u32], sink: &mut dyn crate::sampler::SampleSink) {
        let cap = self.cap;
        let scale = if self.total > cap as f64 {
            sink.count(
                Counter::DamonCreditsCapped,
                (self.total - cap as f64) as u64,
            );
            cap as f64 / self.total
        } else {
            1.0
        };
        let mut emitted = 0;
        for (r, &pid) in self.regions.iter().zip(targets) {
            if r.is_empty() {
                continue;
            }
            self.pages.clear();
            let seed = mix(self.taken ^ (u64::from(pid) << 32));
            credit(r, self.max_nr, scale, seed, cap - emitted, &mut self.pages);
            emitted += self.pages.len();
            procpid::emit_pages(sink, pid, &self.pages, AccessOp::Load, SourceKind::Damon);
        }
        sink.end_batch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::collect::Collector;
    use sysfs::fixture;

    /// A DAMON source over this test process, on a fake sysfs tree with one kdamond whose
    /// scheme reports one fully accessed 16-page region.
    fn source_on_fixture(sysfs: &std::path::Path) -> DamonSource {
        fixture::tree(sysfs, 1, 1);
        fixture::region(sysfs, 0, 0, 0, (0x10000, 0x20000, 20));
        let ctx = OpenContext {
            pids: vec![std::process::id()],
            sysfs_root: sysfs.to_path_buf(),
            perf: Default::default(),
            pagefault: Default::default(),
            ibs: Default::default(),
            ibs_period_control: None,
            pebs: Default::default(),
            run_dir: sysfs.join("run"),
            damon: DamonConfig::default(),
            softdirty: Default::default(),
            followed_scope: None,
        };
        DamonSource::open(&ctx).unwrap()
    }

    /// Runs `source` until it has taken `snapshots` snapshots (then stops it) or it ends by
    /// itself; its result.
    fn run_until(
        source: &mut DamonSource,
        sink: &Collector,
        snapshots: u64,
    ) -> Result<(), SourceError> {
        let stop = StopToken::new();
        std::thread::scope(|s| {
            let run = s.spawn(|| source.run(sink, &stop));
            let deadline = Instant::now() + Duration::from_secs(20);
            while !run.is_finished()
                && sink.shared.lock().count_of(Counter::DamonSnapshots) < snapshots
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.stop();
            run.join().unwrap()
        })
    }

    #[test]
    fn a_busy_damon_sysfs_is_tried_again_rather_than_ending_the_source() {
        // DAMON's `state` file answers EBUSY when its sysfs lock is held, which the kdamond's
        // own callbacks take every sampling interval: the more so under load. The source used
        // to fail on the first one ("pghotd stopped after 8.3 s with stop_reason:
        // sources_ended", exit status 1) while the workload ran on.
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        let mut source = source_on_fixture(sysfs);
        let snap = "update_schemes_tried_regions";
        fixture::fail_writes(sysfs, "0/state", "on", 1, libc::EBUSY);
        fixture::fail_writes(sysfs, "0/state", snap, 3, libc::EBUSY);
        let sink = Collector::default();
        let result = run_until(&mut source, &sink, 5);
        let got = sink.take();
        result.unwrap();
        assert_eq!(fixture::pending_faults(sysfs, "0/state"), 0);
        assert_eq!(got.count_of(Counter::DamonRetries), 4);
        assert!(got.count_of(Counter::DamonSnapshots) >= 5);
        // The snapshots after the retries became samples of the region.
        assert!(
            got.samples
                .iter()
                .any(|s| s.pid == std::process::id() && (0x10000..0x20000).contains(&s.vaddr)),
            "{} samples",
            got.samples.len()
        );
        // Released on the stop.
        assert!(!sysfs.join("run/damon-kdamond-0").exists());
    }

    #[test]
    fn every_snapshot_counts_its_accessed_regions_and_their_pages() {
        let dir = tempfile::tempdir().unwrap();
        let mut source = source_on_fixture(dir.path());
        let sink = Collector::default();
        run_until(&mut source, &sink, 3).unwrap();
        let got = sink.take();
        let snapshots = got.count_of(Counter::DamonSnapshots);
        assert!(snapshots >= 3);
        // The fixture's one region, 0x10000..0x20000 with nr_accesses 20: 16 pages, accessed.
        assert_eq!(got.count_of(Counter::DamonAccessedRegions), snapshots);
        assert_eq!(
            got.count_of(Counter::DamonAccessedRegionPages),
            16 * snapshots
        );
    }

    #[test]
    fn a_kdamond_that_stops_while_its_pids_run_is_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        let mut source = source_on_fixture(sysfs);
        // Twice the snapshot request finds the kdamond gone (its state reads "off").
        let off = Some("off");
        let snap = "update_schemes_tried_regions";
        fixture::fail_writes_then(sysfs, "0/state", snap, (2, libc::EINVAL), off);
        let sink = Collector::default();
        let result = run_until(&mut source, &sink, 5);
        let got = sink.take();
        result.unwrap();
        assert_eq!(fixture::pending_faults(sysfs, "0/state"), 0);
        assert_eq!(got.count_of(Counter::DamonRetries), 2);
        assert!(got.count_of(Counter::DamonSnapshots) >= 5);
        assert_eq!(got.count_of(Counter::SourcePidExits), 0);
    }

    #[test]
    fn damon_refusing_for_longer_than_the_budget_fails_the_source_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path();
        let mut source = source_on_fixture(sysfs);
        // Ten aggregation intervals, the least budget.
        source.retry_for = Duration::ZERO;
        fixture::fail_writes(sysfs, "0/state", "on", u32::MAX, libc::EBUSY);
        let sink = Collector::default();
        let started = Instant::now();
        let err = run_until(&mut source, &sink, 1).unwrap_err().to_string();
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert!(
            err.contains("starting the kdamond")
                && err.contains("busy")
                && err.contains("giving up"),
            "{err}"
        );
        assert!(!sysfs.join("run/damon-kdamond-0").exists());
    }

    fn region(start_page: u64, pages: u64, nr_accesses: u32) -> Region {
        Region {
            start: start_page * PAGE_SIZE,
            end: (start_page + pages) * PAGE_SIZE,
            nr_accesses,
        }
    }

    #[test]
    fn max_nr_accesses_is_samples_per_aggregation() {
        assert_eq!(DamonConfig::default().max_nr_accesses(), 20);
    }

    #[test]
    fn idle_regions_get_nothing_and_full_rate_regions_every_page() {
        let regions = [region(0, 100, 0), region(1000, 64, 20), region(5000, 8, 40)];
        let mut out = Vec::new();
        credit(&regions, 20, 1.0, 7, usize::MAX, &mut out);
        let want: Vec<u64> = (1000..1064)
            .chain(5000..5008)
            .map(|p| p * PAGE_SIZE)
            .collect();
        assert_eq!(out, want);
        assert_eq!(expected_credits(&regions, 20), 72.0);
    }

    #[test]
    fn accessed_regions_are_measured_and_their_mean_said() {
        let region = |start: u64, pages: u64, nr_accesses| Region {
            start,
            end: start + pages * 4096,
            nr_accesses,
        };
        // Two accessed regions of 256 and 1024 pages (1280 pages, 640 on average) and an idle
        // one of 4096 pages that does not count.
        let regions = [
            region(0x1000_0000, 256, 3),
            region(0x2000_0000, 4096, 0),
            region(0x3000_0000, 1024, 20),
        ];
        assert_eq!(accessed_extent(&regions), (2, 1280));
        let note = region_size_note(2, 1280).unwrap();
        assert!(note.contains("average 640 pages (2560 KiB)"), "{note}");
        // No accessed region: nothing to say.
        assert_eq!(region_size_note(0, 0), None);
    }

    #[test]
    fn credits_follow_the_access_rate_on_average_and_cover_the_region() {
        // A quarter rate: 1000 pages x 5/20 = 250 credits per snapshot, spread evenly.
        let regions = [region(0, 1000, 5)];
        let mut hits = vec![0u32; 1000];
        let snapshots = 400;
        for seed in 0..snapshots {
            let mut out = Vec::new();
            credit(&regions, 20, 1.0, mix(seed), usize::MAX, &mut out);
            assert_eq!(out.len(), 250);
            let mut sorted = out.clone();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                out.len(),
                "a page credited twice in one snapshot"
            );
            for a in out {
                hits[(a / PAGE_SIZE) as usize] += 1;
            }
        }
        // Every page close to 0.25 x 400 = 100 credits.
        let (min, max) = (hits.iter().min().unwrap(), hits.iter().max().unwrap());
        assert!(*min >= 60 && *max <= 140, "uneven credits: {min}..{max}");
    }

    #[test]
    fn fractional_credits_round_in_proportion() {
        // 3 pages at 1/20: 0.15 credits per snapshot, so about 15 in 100 snapshots.
        let regions = [region(10, 3, 1)];
        let total: usize = (0..1000)
            .map(|seed| {
                let mut out = Vec::new();
                credit(&regions, 20, 1.0, mix(seed), usize::MAX, &mut out);
                out.len()
            })
            .sum();
        assert!(
            (100..=200).contains(&total),
            "{total} credits in 1000 snapshots"
        );
    }

    #[test]
    fn the_cap_scales_every_region_alike_and_is_never_exceeded() {
        // 65536 hot pages and 4096 at half rate: 67584 credits, capped to 16384.
        let regions = [region(0, 65536, 20), region(100_000, 4096, 10)];
        let total = expected_credits(&regions, 20);
        assert_eq!(total, 67584.0);
        let scale = 16384.0 / total;
        let mut out = Vec::new();
        credit(&regions, 20, scale, 3, 16384, &mut out);
        assert!(out.len() <= 16384 && out.len() >= 16380, "{}", out.len());
        let cold = out.iter().filter(|&&a| a >= 100_000 * PAGE_SIZE).count();
        // The half-rate region keeps its share: 2048 x scale.
        let want = 2048.0 * scale;
        assert!((cold as f64 - want).abs() <= 1.0, "{cold} vs {want}");
        let mut limited = Vec::new();
        credit(&regions, 20, 1.0, 3, 100, &mut limited);
        assert_eq!(limited.len(), 100);
    }

    #[test]
    fn unaligned_regions_stay_inside_their_pages() {
        let r = Region {
            start: 0x1800,
            end: 0x3800,
            nr_accesses: 20,
        };
        let mut out = Vec::new();
        credit(&[r], 20, 1.0, 1, usize::MAX, &mut out);
        assert_eq!(out, vec![0x1000, 0x2000, 0x3000]);
    }
}
