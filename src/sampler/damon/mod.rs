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

pub mod sysfs;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sysfs::{Admin, Kdamond, KdamondSpec, Region};

use super::procpid::{self, ManagedPids, Watched};
use super::{OpenContext, Source, SourceError};
use crate::sample::{AccessOp, SourceKind};
use crate::sampler::SinkFactory;
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
        let max_nr = self.config.max_nr_accesses();
        let cap = self.config.max_samples as usize;
        let mut regions: Vec<Vec<Region>> = Vec::new();
        let mut pages = Vec::with_capacity(cap);
        let mut snapshot: u64 = 0;
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
                    kdamond.stop()?;
                    targets.clear();
                }
                Some(Want::Idle) => {}
                Some(Want::Pids(want)) if want != targets => {
                    if let Err(e) = kdamond.retarget(&self.spec(&want)) {
                        // A pid that exits between the look and the start fails the start:
                        // look again. Anything else is DAMON's refusal.
                        if want.iter().all(|&p| procpid::pid_alive(p)) {
                            return Err(e);
                        }
                        tracing::debug!("damon: a target exited while starting: {e}");
                        targets.clear();
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
                    regions.resize_with(targets.len(), Vec::new);
                }
                Some(Want::Pids(_)) => {}
            }
            if targets.is_empty() {
                // Idle (an empty scope): look again at the next membership check.
                crate::stop::wait_until(Instant::now() + RETARGET_EVERY, stop);
                continue;
            }
            if let Err(e) = kdamond.update_snapshot() {
                if stop.is_stopped() {
                    break;
                }
                if !kdamond.is_on() {
                    // A vaddr kdamond stops by itself once every target is gone: look at the
                    // selection again (explicit pids end the source, a scope re-targets).
                    tracing::debug!("damon: kdamond {} stopped: {e}", kdamond.index());
                    targets.clear();
                    if matches!(selection, Selection::Explicit(_)) {
                        if let Some(Want::Pids(left)) = selection.want(sink.as_mut(), &targets) {
                            return Err(SourceError::Damon(format!(
                                "kdamond {} stopped while pids {left:?} still run: {e}",
                                kdamond.index()
                            )));
                        }
                        break;
                    }
                    continue;
                }
                return Err(e);
            }
            snapshot += 1;
            sink.count(Counter::DamonSnapshots, 1);
            let mut total = 0.0;
            for (i, r) in regions.iter_mut().enumerate() {
                kdamond.read_regions(i, r)?;
                sink.count(Counter::DamonRegionsSeen, r.len() as u64);
                total += expected_credits(r, max_nr);
            }
            let scale = if total > cap as f64 {
                sink.count(Counter::DamonCreditsCapped, (total - cap as f64) as u64);
                cap as f64 / total
            } else {
                1.0
            };
            let mut emitted = 0;
            for (r, &pid) in regions.iter().zip(&targets) {
                if r.is_empty() {
                    continue;
                }
                pages.clear();
                let seed = mix(snapshot ^ (u64::from(pid) << 32));
                credit(r, max_nr, scale, seed, cap - emitted, &mut pages);
                emitted += pages.len();
                procpid::emit_pages(
                    sink.as_mut(),
                    pid,
                    &pages,
                    AccessOp::Load,
                    SourceKind::Damon,
                );
            }
            sink.end_batch();
        }
        kdamond.release()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
