//! What the control requests do: read snapshots, change tunables, pause, reload, migrate.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::migrate::{self, MigrateOptions};
use crate::config::{Config, SettingArgs};
use crate::conflicts::Conflicts;
use crate::hotness::HotTable;
use crate::ingest::Ingest;
use crate::migrator::MigratorEvent;
use crate::migrator::ratelimit::{MonotonicClock, RateLimits};
use crate::movepages::SysMover;
use crate::pidstats::PidCounts;
use crate::scope::guard::GuardedMover;
use crate::stats::{Counter, Stats};
use crate::stop::StopToken;
use crate::topology::{NodeId, Topology};
use pghot_protocol::{
    ErrorBody, ErrorKind, NodeRow, PidRow, RangeRow, RangesView, ReloadReport, Request, Snapshot,
    StatusReport,
};

/// Where a reload reads from: the `--config` given at start (or the default path) and the
/// flags, which win over the file as they did at start.
#[derive(Debug, Clone, Default)]
pub struct ReloadFrom {
    pub config_path: Option<PathBuf>,
    pub args: SettingArgs,
}

/// Everything the control plane reads or steers, built by the daemon.
pub struct ControlParts {
    pub config: Config,
    pub reload: ReloadFrom,
    pub stats: Arc<Stats>,
    pub table: Arc<HotTable>,
    pub ingest: Arc<Ingest>,
    pub topology: Arc<Topology>,
    pub migrators: Vec<Sender<MigratorEvent>>,
    pub limits: RateLimits,
    pub clock: MonotonicClock,
    pub paused: Arc<AtomicBool>,
    pub sources: Vec<String>,
    pub stop: StopToken,
    /// Competing promoters found at the last check.
    pub conflicts: Arc<Conflicts>,
}

pub struct ControlPlane {
    started: Instant,
    parts: ControlParts,
    /// The running configuration; also serializes changes.
    config: Mutex<Config>,
    proc_root: PathBuf,
}

fn failed(kind: ErrorKind, e: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(kind, e.to_string())
}

impl ControlPlane {
    pub fn new(parts: ControlParts) -> ControlPlane {
        ControlPlane {
            started: Instant::now(),
            config: Mutex::new(parts.config.clone()),
            parts,
            proc_root: PathBuf::from("/proc"),
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.parts.stats
    }

    pub fn ingest(&self) -> &Arc<Ingest> {
        &self.parts.ingest
    }

    pub fn stop_token(&self) -> &StopToken {
        &self.parts.stop
    }

    pub fn is_paused(&self) -> bool {
        self.parts.paused.load(Ordering::Relaxed)
    }

    /// Answers every request but `record` (which streams; see `server`).
    pub fn handle(&self, req: &Request) -> Result<serde_json::Value, ErrorBody> {
        let json = |v: Result<serde_json::Value, serde_json::Error>| {
            v.map_err(|e| failed(ErrorKind::Failed, format!("encoding the answer: {e}")))
        };
        match req {
            Request::Status => json(serde_json::to_value(self.status())),
            Request::Stats => json(serde_json::to_value(self.snapshot(usize::MAX, None))),
            Request::Top { pid, limit } => json(serde_json::to_value(self.snapshot(*limit, *pid))),
            Request::ConfigGet { key } => self.config_get(key.as_deref()),
            Request::ConfigSet { key, value } => {
                json(serde_json::to_value(self.config_set(key, value)?))
            }
            Request::Pause => Ok(serde_json::json!({ "paused": self.set_paused(true) })),
            Request::Resume => Ok(serde_json::json!({ "paused": self.set_paused(false) })),
            Request::Reload => json(serde_json::to_value(self.reload()?)),
            Request::Migrate { pid, from, to } => {
                let report = self.migrate(*pid, from, *to)?;
                json(serde_json::to_value(report))
            }
            Request::Record { .. } => Err(failed(
                ErrorKind::BadRequest,
                "record streams; the server handles it",
            )),
        }
    }

    fn node_rows(&self) -> Vec<NodeRow> {
        let topo = &self.parts.topology;
        let depths: HashMap<NodeId, usize> = self.parts.ingest.queue_depths().into_iter().collect();
        topo.nodes()
            .iter()
            .filter(|n| n.has_memory())
            .map(|n| NodeRow {
                node: n.id,
                tier: if topo.is_lower_tier(n.id) {
                    "lower"
                } else {
                    "top"
                }
                .into(),
                cpus: n.cpus.len(),
                mem_total_kb: n.mem_total_kb,
                mem_free_kb: topo.free_kb(n.id).ok(),
                queue_depth: depths.get(&n.id).copied(),
            })
            .collect()
    }

    pub fn status(&self) -> StatusReport {
        let config = self.config.lock().clone();
        let sources_from = if self.parts.reload.args.gives("enabled_sources") {
            "--source flags".to_string()
        } else {
            match &config.loaded_from {
                Some(p) => format!("enabled_sources in {}", p.display()),
                None => "none given".to_string(),
            }
        };
        StatusReport {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            paused: self.is_paused(),
            dry_run: config.migrator.dry_run,
            config_file: config.loaded_from.as_ref().map(|p| p.display().to_string()),
            sources: self.parts.sources.clone(),
            sources_from,
            target: match config.target_nid {
                Some(n) => format!("node {n} (target_nid)"),
                None => "the top-tier node nearest the accessing CPU".into(),
            },
            topology: self.parts.topology.summary(),
            nodes: self.node_rows(),
            socket: config
                .control_socket
                .as_ref()
                .map_or("off".into(), |p| p.display().to_string()),
            readonly_socket: config
                .readonly_socket
                .as_ref()
                .map(|p| p.display().to_string()),
            metrics_listen: config.metrics_listen.map(|a| a.to_string()),
            conflicts: self.parts.conflicts.current(),
        }
    }

    /// The figures of `stats` (`limit` = all, no ranges) and `top`.
    pub fn snapshot(&self, limit: usize, ranges_of: Option<u32>) -> Snapshot {
        let config = self.config.lock().clone();
        let table = &self.parts.table;
        let topo = &self.parts.topology;
        let threshold = f64::from(table.policy().freq_threshold);
        // One pass over the table for the per-process page figures (and one pid's pages). With
        // no process rows and no ranges asked for (`top` with limit 0: counters and gauges
        // only) there is nothing to show them in, and the pass, which reads every slot (seconds
        // in the rig's TCG guest, where pghotctl ran it between rounds), is skipped; processes
        // known only from the table then go uncounted in `pids_omitted`.
        let mut pages: HashMap<u32, (u64, u64, u64)> = HashMap::new();
        let mut range_pages: Vec<(u64, f64, NodeId)> = Vec::new();
        let walk = limit > 0 || ranges_of.is_some();
        let shards = if walk { 0..table.shard_count() } else { 0..0 };
        table.for_each_page_in(shards, |e, heat| {
            let pid = e.key().pid();
            let slow = topo.is_lower_tier(e.node());
            let p = pages.entry(pid).or_default();
            p.0 += 1;
            if heat >= threshold {
                p.1 += 1;
                p.2 += u64::from(slow);
            }
            if ranges_of == Some(pid) {
                range_pages.push((e.key().vaddr(), heat, e.node()));
            }
        });
        let counts = self.parts.ingest.pid_stats().snapshot();
        let mut pids: Vec<PidRow> = counts
            .iter()
            .map(|&(pid, counts)| (pid, counts))
            .chain(
                // Processes in the table whose counters were evicted.
                pages
                    .keys()
                    .filter(|p| counts.binary_search_by_key(*p, |c| c.0).is_err())
                    .map(|&p| (p, PidCounts::default())),
            )
            .map(|(pid, counts)| {
                let (tracked, hot, hot_slow) = pages.get(&pid).copied().unwrap_or_default();
                PidRow {
                    pid,
                    comm: String::new(),
                    counts,
                    tracked_pages: tracked,
                    hot,
                    hot_slow,
                }
            })
            .collect();
        pids.sort_unstable_by(|a, b| {
            b.counts
                .samples
                .cmp(&a.counts.samples)
                .then(a.pid.cmp(&b.pid))
        });
        let omitted = pids.len().saturating_sub(limit);
        pids.truncate(limit);
        for row in &mut pids {
            row.comm = self.comm(row.pid);
        }
        let ranges = ranges_of.map(|pid| RangesView {
            pid,
            comm: self.comm(pid),
            ranges: hottest_ranges(range_pages, topo, 20),
        });
        Snapshot {
            counters: self.counters(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            paused: self.is_paused(),
            dry_run: config.migrator.dry_run,
            sources: self.parts.sources.clone(),
            promote_rate_limit_mbps: config.migrator.promote_rate_limit_mbps,
            tracked_pages: table.len() as u64,
            max_tracked_pages: table.max_tracked_pages() as u64,
            heat_floor_samples: table.heat_floor_standing(),
            fast_nodes_short: (table.policy().hot_share_room_mb > 0)
                .then(|| table.short_nodes().count_ones()),
            nodes: self.node_rows(),
            pids,
            pids_omitted: omitted,
            ranges,
            admission: self
                .parts
                .ingest
                .admission()
                .map(|a| a.view(&topo.lower_tier_nodes())),
            conflicts: self.parts.conflicts.current(),
        }
    }

    /// The registry as `--stats-json` writes it, with evictions brought up to date.
    fn counters(&self) -> std::collections::BTreeMap<String, u64> {
        let mut snap = self.parts.stats.snapshot();
        // Evictions are summed from the table at exit by the daemon; show the live figure.
        snap.counters.insert(
            Counter::PghotEvictedPages.name().to_string(),
            self.parts.table.evicted(),
        );
        snap.counters
    }

    fn comm(&self, pid: u32) -> String {
        crate::scope::proc::read_comm(&self.proc_root.join(pid.to_string()).join("comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default()
    }

    fn config_get(&self, key: Option<&str>) -> Result<serde_json::Value, ErrorBody> {
        let values = self.config.lock().values();
        match key {
            None => Ok(serde_json::Value::Object(
                values
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            )),
            Some(key) => values
                .into_iter()
                .find(|(k, _)| *k == key)
                .map(|(k, v)| serde_json::json!({ k: v }))
                .ok_or_else(|| {
                    failed(
                        ErrorKind::InvalidValue,
                        format!("unknown key '{key}' (pghotctl config get lists them)"),
                    )
                }),
        }
    }

    /// Validates `key = value` as the config file would, then applies it.
    pub fn config_set(&self, key: &str, value: &str) -> Result<ReloadReport, ErrorBody> {
        let mut running = self.config.lock();
        let next = running
            .with_setting(key, value)
            .map_err(|e| failed(ErrorKind::InvalidValue, e))?;
        if !crate::config::setting(key).is_some_and(|s| s.runtime) {
            let runtime: Vec<&str> = crate::config::runtime_keys().collect();
            return Err(failed(
                ErrorKind::NeedsRestart,
                format!(
                    "{key} cannot change while pghotd runs; set it in the config file and restart \
                     (runtime keys: {})",
                    runtime.join(", ")
                ),
            ));
        }
        next.check_against(&self.parts.topology)
            .map_err(|e| failed(ErrorKind::InvalidValue, e))?;
        let report = self.apply(&mut running, next);
        tracing::info!("config set {key} = {}", value.escape_debug());
        Ok(report)
    }

    /// Re-reads the config file; an invalid one leaves the running config as it is.
    pub fn reload(&self) -> Result<ReloadReport, ErrorBody> {
        let mut running = self.config.lock();
        let from = &self.parts.reload;
        let path = from
            .config_path
            .as_deref()
            .or(running.loaded_from.as_deref());
        let next = Config::load(path, &from.args)
            .and_then(|c| c.check_against(&self.parts.topology).map(|()| c))
            .map_err(|e| {
                failed(
                    ErrorKind::Failed,
                    format!("reload: {e}; the running configuration is unchanged"),
                )
            })?;
        let report = self.apply(&mut running, next);
        Ok(report)
    }

    /// Applies the runtime keys of `next`; keys that need a restart keep their running value
    /// and are reported.
    fn apply(&self, running: &mut Config, next: Config) -> ReloadReport {
        let change = running.set_runtime(&next);
        let report = ReloadReport {
            file: next.loaded_from.as_ref().map(|p| p.display().to_string()),
            applied: change.applied.iter().map(|k| k.to_string()).collect(),
            needs_restart: change.needs_restart.iter().map(|k| k.to_string()).collect(),
        };
        // The stages that take runtime keys get their whole settings again; what did not
        // change is the same value.
        self.parts.table.set_policy(running.policy);
        self.parts.ingest.set_target_nid(running.target_nid);
        crate::cpushare::set_policy(running.cpu_policy);
        for m in &self.parts.migrators {
            // A migrator that has exited has nothing to reconfigure.
            let _ = m.send(MigratorEvent::Reconfigure(running.migrator));
        }
        if !report.needs_restart.is_empty() {
            tracing::warn!(
                "changed keys need a restart and keep their running values: {}",
                report.needs_restart.join(", ")
            );
        }
        report
    }

    /// Pauses or resumes promotion; returns the new state.
    pub fn set_paused(&self, paused: bool) -> bool {
        let was = self.parts.paused.swap(paused, Ordering::Relaxed);
        if was != paused {
            tracing::info!("promotion {}", if paused { "paused" } else { "resumed" });
        }
        paused
    }

    fn migrate(
        &self,
        pid: u32,
        from: &[NodeId],
        to: NodeId,
    ) -> Result<pghot_protocol::MigrateReport, ErrorBody> {
        let (rate, move_shared) = {
            let config = self.config.lock();
            (
                config.migrator.promote_rate_limit_mbps,
                config.migrator.move_shared,
            )
        };
        let opts = MigrateOptions {
            pid,
            from: from.to_vec(),
            to,
            rate_bytes_per_s: rate.saturating_mul(1 << 20),
            proc_root: self.proc_root.clone(),
        };
        migrate::check(&opts, &self.parts.topology)
            .map_err(|e| failed(ErrorKind::InvalidValue, e))?;
        // An operator's move obeys the same scope as promotion, and each chunk is checked
        // against pid reuse like every other move.
        let scope = Arc::clone(self.parts.ingest.scope());
        if !scope.contains(pid) {
            return Err(failed(
                ErrorKind::InvalidValue,
                format!(
                    "pid {pid} is outside the processes pghotd manages; widen pids, cgroups \
                     or comm in the config first (see pghotctl status)"
                ),
            ));
        }
        tracing::info!("migrate pid {pid} from {from:?} to node {to}: starting");
        let mut mover = GuardedMover::new(
            SysMover::moving_shared(move_shared),
            scope,
            Arc::clone(&self.parts.stats),
        );
        let report = migrate::run(
            &opts,
            &mut mover,
            &self.parts.limits,
            &self.parts.clock,
            &self.parts.stats,
            &self.parts.stop,
        )
        .map_err(|e| failed(ErrorKind::Failed, e))?;
        tracing::info!(
            "migrate pid {pid}: {} of {} pages moved, {} failed",
            report.moved_pages,
            report.pages_found,
            report.failed_pages
        );
        Ok(report)
    }

    /// The daemon handles SIGHUP here: reload and log the outcome.
    pub fn reload_logged(&self) {
        match self.reload() {
            Ok(r) => tracing::info!(
                "SIGHUP: reloaded {}: applied [{}], needs restart [{}]",
                r.file.as_deref().unwrap_or("(no file)"),
                r.applied.join(", "),
                r.needs_restart.join(", ")
            ),
            Err(e) => tracing::error!("SIGHUP: {}", e.message),
        }
    }
}

/// Merges a process's tracked pages into runs of adjacent pages and returns the `n` hottest.
pub fn hottest_ranges(
    mut pages: Vec<(u64, f64, NodeId)>,
    topo: &Topology,
    n: usize,
) -> Vec<RangeRow> {
    pages.sort_unstable_by_key(|p| p.0);
    let mut ranges: Vec<RangeRow> = Vec::new();
    for (vaddr, heat, node) in pages {
        let slow = u64::from(topo.is_lower_tier(node));
        match ranges.last_mut() {
            Some(r) if r.end == vaddr => {
                r.end += crate::hotness::PAGE_SIZE;
                r.pages += 1;
                r.heat += heat;
                r.slow_pages += slow;
                if r.node != Some(node) {
                    r.node = None;
                }
            }
            _ => ranges.push(RangeRow {
                start: vaddr,
                end: vaddr + crate::hotness::PAGE_SIZE,
                pages: 1,
                heat,
                node: Some(node),
                slow_pages: slow,
            }),
        }
    }
    ranges.sort_by(|a, b| b.heat.total_cmp(&a.heat).then(a.start.cmp(&b.start)));
    ranges.truncate(n);
    ranges
}
