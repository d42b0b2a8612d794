//! Wiring: builds every stage before any thread starts, runs sources -> table -> migrators,
//! and waits on one event channel for the end (sources done, signal, duration, failure).
//!
//! Threads: `pghot-src/N` per source, `pghot-mig/nodeN` per lower-tier node, `pghot-signals`,
//! and the control plane's `pghot-ctl` (plus `pghot-ctl/conn` per connection) and
//! `pghot-metrics` (see `control`).
//! The main thread never touches samples; it only waits and shuts down.

use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, select};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::admission::Admission;
use crate::admission::gate::AdmissionGate;
use crate::admission::thp::SysThp;
use crate::config::{Config, ConfigError};
use crate::conflicts::{ConflictPolicy, Conflicts, Probe, RECHECK_EVERY};
use crate::control::metrics::MetricsServer;
use crate::control::server::{Access, ControlServer};
use crate::control::{ControlError, ControlParts, ControlPlane, ReloadFrom};
use crate::hotness::HotTable;
use crate::ingest::Ingest;
use crate::migrator::ratelimit::{MonotonicClock, RateLimits};
use crate::migrator::{MigratorEvent, MigratorHandle};
use crate::movepages::SysMover;
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::sampler::adaptive::{AdaptiveConfig, PeriodController};
use crate::sampler::perf::adaptive_loop;
use crate::sampler::perf::period::PeriodControl;
use crate::sampler::trace::TraceWriter;
use crate::sampler::{Source, SourceError};
use crate::scope::Scope;
use crate::scope::guard::GuardedMover;
use crate::scope::{ProcFs, ScopeError, ScopeTracker};
use crate::stats::{Counter, Stats, StatsSnapshot};
use crate::stop::StopToken;
use crate::topology::{NodeId, SysfsRoot, Topology, TopologyError};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// move_pages(2) cannot be called at all (a seccomp filter, a kernel without migration).
    #[error("{0}")]
    MovePagesUnusable(String),
    #[error("reading the NUMA topology: {0}")]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("no sample source given; use --source trace:PATH or enabled_sources in the config")]
    NoSources,
    #[error("creating recording {}: {source}", path.display())]
    Record {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("opening --stats-json {}: {source}", path.display())]
    StatsOpen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing stats to {}: {source}", path.display())]
    StatsWrite {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting thread {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    #[error("installing signal handlers: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Scope(#[from] ScopeError),
    #[error("{failed} source(s) failed; see the log")]
    SourcesFailed { failed: usize },
    #[error(
        "conflicts = \"refuse\" ({origin}) and something else moves pages between tiers too: \
         {}; remove it, or set conflicts = \"warn\" to run beside it",
        crate::conflicts::listed(found)
    )]
    Conflicts {
        found: Vec<pghot_protocol::Conflict>,
        origin: crate::config::Origin,
    },
}

/// Options of one run that are not tunables.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Write all counters here at exit (the file is opened, through `safefs::create_private`,
    /// at start).
    pub stats_json: Option<PathBuf>,
    /// Write every received sample here as a pghot-trace v1 file.
    pub record: Option<PathBuf>,
    /// What SIGHUP and `pghotctl reload` re-read.
    pub reload: ReloadFrom,
}

/// Why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    SourcesEnded,
    Signal,
    Duration,
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub reason: StopReason,
    pub stats: StatsSnapshot,
    pub elapsed: Duration,
}

enum Event {
    SourceEnded {
        index: usize,
        result: Result<(), SourceError>,
    },
    Signal(i32),
}

/// A running source thread.
struct SourceThread {
    describe: String,
    thread: std::thread::JoinHandle<()>,
}

/// Runs the daemon to completion: read the machine, open the sources, build the pipeline, start
/// the threads, wait for the end, shut down.
pub fn run(config: &Config, opts: &RunOptions) -> Result<RunSummary, DaemonError> {
    let started = Instant::now();
    // First: from here on SIGHUP, SIGTERM and SIGINT are caught (and queued until their thread
    // runs). The control socket is bound below and accepts connections at once; a client that
    // sees it and sends SIGHUP (a reload) must not find the default action, which ends the
    // process.
    let signals = Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(DaemonError::Signals)?;
    let (topology, tracker) = read_machine(config)?;
    let scope = Arc::clone(tracker.scope());
    // Before the sources open: a refused start claims no kdamond and opens no perf event.
    let watchers = Watchers {
        conflicts: check_conflicts(config)?,
        tracker,
    };
    // Everything that can fail on a bad setting or a busy resource is done before the first
    // worker thread starts: the sources open, the recording file, the sockets.
    let sources = open_sources(config, &watchers.tracker)?;
    let stats_file = open_stats_json(opts)?;
    let pipeline = build_pipeline(config, &topology, &scope, opts)?;
    let listeners = Listeners::bind(config)?;
    let running = start(
        config, opts, pipeline, sources, listeners, watchers, signals,
    )?;

    // A duration past what an Instant can hold is no deadline in practice.
    let deadline = opts.duration.and_then(|d| started.checked_add(d));
    let (reason, failed, still_running) = wait_for_end(&running.events, &running.sources, deadline);
    crate::service::stopping(match reason {
        StopReason::SourcesEnded => "every source ended",
        StopReason::Signal => "signal",
        StopReason::Duration => "duration reached",
    });
    let (pipeline, failed) = running.shut_down(reason, failed, still_running);
    finish(config, stats_file, &pipeline, reason, started, failed)
}

/// What the background threads keep watching: the scope's processes and competing promoters.
struct Watchers {
    tracker: ScopeTracker,
    conflicts: Arc<Conflicts>,
}

/// The first look for competing promoters: each is logged (once) with its remedy, or, with
/// `conflicts = "refuse"`, ends the start.
fn check_conflicts(config: &Config) -> Result<Arc<Conflicts>, DaemonError> {
    let found = Probe::system(&config.sysfs_root).find();
    if config.conflicts == ConflictPolicy::Refuse && !found.is_empty() {
        return Err(DaemonError::Conflicts {
            found,
            origin: config.origins.of("conflicts"),
        });
    }
    let conflicts = Arc::new(Conflicts::default());
    conflicts.update(found);
    Ok(conflicts)
}

/// `--stats-json`, opened now so a bad path (a planted symlink, a FIFO, a directory, another
/// user's file) fails the start rather than the exit, and written at exit.
fn open_stats_json(opts: &RunOptions) -> Result<Option<(PathBuf, std::fs::File)>, DaemonError> {
    let Some(path) = &opts.stats_json else {
        return Ok(None);
    };
    // Not File::create: the path may be in /tmp, where a symlink could redirect root.
    let file = crate::safefs::create_private(path).map_err(|source| DaemonError::StatsOpen {
        path: path.clone(),
        source,
    })?;
    Ok(Some((path.clone(), file)))
}

/// Reads the NUMA topology and checks the config against it; takes the first look at the
/// scope, so the first samples and moves see it.
fn read_machine(config: &Config) -> Result<(Arc<Topology>, ScopeTracker), DaemonError> {
    let topology = Arc::new(Topology::read(SysfsRoot::new(&config.sysfs_root))?);
    config.check_against(&topology)?;
    tracing::info!(
        "topology from {}: {}",
        config.sysfs_root.display(),
        topology.summary()
    );
    if config.sources.is_empty() {
        return Err(DaemonError::NoSources);
    }
    let selector = config.scope_selector().map_err(|e| {
        DaemonError::Config(ConfigError::Invalid {
            origin: config.origins.of("comm"),
            key: "comm",
            detail: e.to_string(),
        })
    })?;
    let mut tracker = ScopeTracker::new(selector, ProcFs::default())?;
    let first = tracker.refresh()?;
    tracing::info!(
        "scope: {}{}",
        tracker.selector().describe(),
        if tracker.selector().is_everything() {
            String::new()
        } else {
            format!(" ({} process(es) now)", first.members.len())
        }
    );
    if topology.lower_tier_nodes().is_empty() {
        tracing::warn!("no lower-tier memory node: samples are counted but nothing is promoted");
    }
    Ok((topology, tracker))
}

/// The opened sources, and the adaptive IBS period's controller when `ibs.period = "auto"`.
struct OpenedSources {
    sources: Vec<Box<dyn Source>>,
    adaptive: Option<(PeriodController, PeriodControl)>,
}

/// Opens every source before any thread starts, so a bad path fails the start cleanly.
fn open_sources(config: &Config, tracker: &ScopeTracker) -> Result<OpenedSources, DaemonError> {
    let mut open_ctx = config.open_context();
    let ns = crate::scope::own_pid_namespace_link();
    if tracker.selector().followable(ns.as_deref()) {
        open_ctx.followed_scope = Some(Arc::clone(tracker.scope()));
    }
    // `ibs.period = "auto"`: the IBS samplers start at the controller's period and follow it.
    let adaptive = config.ibs_period_auto.then(|| {
        let controller =
            PeriodController::new(AdaptiveConfig::ibs(f64::from(config.ibs_cpu_budget_pct)));
        let control = PeriodControl::new(controller.period());
        open_ctx.ibs_period_control = Some(control.clone());
        (controller, control)
    });
    let sources = config
        .sources
        .iter()
        .map(|spec| spec.open(&open_ctx))
        .collect::<Result<_, _>>()?;
    Ok(OpenedSources { sources, adaptive })
}

/// The table, queues and per-sample path, with the recording file and admission.
fn build_pipeline(
    config: &Config,
    topology: &Arc<Topology>,
    scope: &Arc<Scope>,
    opts: &RunOptions,
) -> Result<Pipeline, DaemonError> {
    let settings = PipelineConfig {
        max_tracked_pages: config.max_tracked_pages,
        policy: config.policy,
        target_nid: config.target_nid,
        migrator: config.migrator,
    };
    let mut builder = Pipeline::builder(settings, Arc::clone(topology), Arc::clone(scope))
        .admission(admission(config, topology));
    if let Some(path) = &opts.record {
        let record_err = |source| DaemonError::Record {
            path: path.clone(),
            source,
        };
        // Not File::create: the path may be in /tmp, where a symlink could redirect root.
        let file = crate::safefs::create_private(path).map_err(record_err)?;
        builder = builder.record_to(TraceWriter::new(BufWriter::new(file)).map_err(record_err)?);
    }
    let pipeline = builder.build();
    place_table(&pipeline.table, topology);
    Ok(pipeline)
}

/// Puts the hotness table on the top tier before the first sample touches it (see
/// [`crate::placement`]); where that fails the table is used where its pages fall.
fn place_table(table: &HotTable, topology: &Topology) {
    let top: Vec<NodeId> = topology
        .nodes()
        .iter()
        .filter(|n| n.top_tier && n.has_memory())
        .map(|n| n.id)
        .collect();
    let mib = table.memory_bytes() >> 20;
    match table.place_on(&top) {
        Ok(()) => {
            tracing::info!(nodes = ?top, "hotness table: {mib} MiB allocated, preferring the top tier")
        }
        Err(e) => tracing::warn!(
            nodes = ?top,
            "hotness table: could not place its {mib} MiB on the top tier ({e}); its pages are allocated where first touched"
        ),
    }
}

/// The control sockets (read-write, read-only) and the metrics port, bound before any thread
/// starts so that one in use fails the start cleanly.
struct Listeners {
    control: Vec<(std::os::unix::net::UnixListener, PathBuf, Access)>,
    metrics: Option<std::net::TcpListener>,
}

impl Listeners {
    fn bind(config: &Config) -> Result<Listeners, DaemonError> {
        let mut control = Vec::new();
        for (path, access) in [
            (&config.control_socket, Access::Full),
            (&config.readonly_socket, Access::ReadOnly),
        ] {
            if let Some(path) = path {
                let listener = crate::control::server::bind(path, access)?;
                control.push((listener, path.clone(), access));
            }
        }
        let metrics = match config.metrics_listen {
            Some(addr) => Some(crate::control::metrics::bind(addr)?),
            None => None,
        };
        Ok(Listeners { control, metrics })
    }
}

/// The watching threads by name (`None`: not started, e.g. no sd_notify socket).
type Background = Vec<(&'static str, Option<std::thread::JoinHandle<()>>)>;

/// Every thread of a running daemon, and what stops them.
struct Running {
    pipeline: Pipeline,
    events: Receiver<Event>,
    sources: Vec<SourceThread>,
    migrators: Vec<MigratorHandle>,
    /// Stops the sources (and the period controller).
    stop: StopToken,
    /// Stops the scope refresher and the sd_notify status thread.
    background_stop: StopToken,
    background: Background,
    signals: signal_hook::iterator::Handle,
    control: Vec<ControlServer>,
    metrics: Option<MetricsServer>,
}

/// Starts every thread: signals first (a SIGTERM during startup is not lost), then the
/// migrators, the sources, the control plane and its sockets, the scope refresher, the
/// conflicts check and the sd_notify status.
fn start(
    config: &Config,
    opts: &RunOptions,
    pipeline: Pipeline,
    opened: OpenedSources,
    listeners: Listeners,
    watchers: Watchers,
    signals: Signals,
) -> Result<Running, DaemonError> {
    let Watchers { tracker, conflicts } = watchers;
    let (events_tx, events) = crossbeam_channel::unbounded::<Event>();
    let plane_slot: Arc<OnceLock<Arc<ControlPlane>>> = Arc::new(OnceLock::new());
    let signals = start_signals(signals, events_tx.clone(), Arc::clone(&plane_slot))?;
    let limits = RateLimits::default();
    // One clock for every user of the buckets (their refill compares its readings).
    let clock = MonotonicClock::default();
    let paused = Arc::new(AtomicBool::new(false));
    let mut pipeline = pipeline;
    // Before the first worker thread starts: each follows `cpu_policy` from its start.
    let stats = Arc::clone(&pipeline.stats);
    crate::cpushare::install(config.cpu_policy, move |_thread, _wait| {
        stats.add(Counter::PghotCpuRaises, 1);
    });
    let migrators = start_migrators(config, &mut pipeline, &limits, &clock, &paused)?;

    let stop = StopToken::new();
    if let Some((controller, control)) = opened.adaptive {
        let (stats, stop) = (Arc::clone(&pipeline.stats), stop.clone());
        spawn("pghot-period".into(), move || {
            adaptive_loop::run(controller, control, stats, stop);
        })?;
    }
    let sources = start_sources(opened.sources, &pipeline.ingest, events_tx, &stop)?;

    let plane = Arc::new(ControlPlane::new(ControlParts {
        config: config.clone(),
        reload: opts.reload.clone(),
        stats: Arc::clone(&pipeline.stats),
        table: Arc::clone(&pipeline.table),
        ingest: Arc::clone(&pipeline.ingest),
        topology: Arc::clone(&pipeline.topology),
        migrators: migrators.iter().map(MigratorHandle::events).collect(),
        limits,
        clock,
        paused,
        sources: sources.iter().map(|t| t.describe.clone()).collect(),
        stop: stop.clone(),
        conflicts: Arc::clone(&conflicts),
    }));
    let _ = plane_slot.set(Arc::clone(&plane));
    let (control, metrics) = start_control(listeners, &plane)?;
    tracing::info!(
        "running: {} source(s), {} migrator(s){}",
        sources.len(),
        migrators.len(),
        if config.migrator.dry_run {
            ", dry run"
        } else {
            ""
        }
    );

    let status = crate::service::StatusLine {
        sources: sources.len(),
        migrators: migrators.len(),
        scope: tracker.selector().describe(),
        dry_run: config.migrator.dry_run,
    };
    let (background_stop, background) = start_background(
        config,
        tracker,
        conflicts,
        status,
        Arc::clone(&pipeline.stats),
    )?;
    Ok(Running {
        pipeline,
        events,
        sources,
        migrators,
        stop,
        background_stop,
        background,
        signals,
        control,
        metrics,
    })
}

/// The threads that watch rather than work: the scope refresher, the conflicts check and the
/// sd_notify status, and the token that stops them.
fn start_background(
    config: &Config,
    tracker: ScopeTracker,
    conflicts: Arc<Conflicts>,
    status: crate::service::StatusLine,
    stats: Arc<Stats>,
) -> Result<(StopToken, Background), DaemonError> {
    let background_stop = StopToken::new();
    let scope_thread = tracker.spawn(
        Duration::from_millis(u64::from(config.scope_refresh_ms)),
        background_stop.clone(),
    )?;
    let conflicts_thread = crate::conflicts::spawn_watch(
        Probe::system(&config.sysfs_root),
        conflicts,
        RECHECK_EVERY,
        background_stop.clone(),
    )
    .map_err(|source| DaemonError::Spawn {
        name: "pghot-conflicts".into(),
        source,
    })?;
    let notify_thread =
        crate::service::ready(status, stats, background_stop.clone()).map_err(|source| {
            DaemonError::Spawn {
                name: "pghot-notify".into(),
                source,
            }
        })?;
    let background = vec![
        ("pghot-scope", Some(scope_thread)),
        ("pghot-conflicts", Some(conflicts_thread)),
        ("pghot-notify", notify_thread),
    ];
    Ok((background_stop, background))
}

/// Turns SIGTERM and SIGINT into events; SIGHUP reloads the config through the control plane
/// once it exists.
fn start_signals(
    mut signals: Signals,
    events: Sender<Event>,
    plane_slot: Arc<OnceLock<Arc<ControlPlane>>>,
) -> Result<signal_hook::iterator::Handle, DaemonError> {
    let handle = signals.handle();
    spawn("pghot-signals".into(), move || {
        for signal in signals.forever() {
            if signal == SIGHUP {
                match plane_slot.get() {
                    Some(plane) => plane.reload_logged(),
                    None => tracing::warn!("SIGHUP during startup: not reloaded"),
                }
                continue;
            }
            if events.send(Event::Signal(signal)).is_err() {
                break;
            }
        }
    })?;
    Ok(handle)
}

/// One migrator thread per lower-tier node, moving through the scope's guard.
fn start_migrators(
    config: &Config,
    pipeline: &mut Pipeline,
    limits: &RateLimits,
    clock: &MonotonicClock,
    paused: &Arc<AtomicBool>,
) -> Result<Vec<MigratorHandle>, DaemonError> {
    if !config.migrator.dry_run {
        crate::movepages::check_callable().map_err(DaemonError::MovePagesUnusable)?;
    }
    if config.migrator.move_shared
        && !config.migrator.dry_run
        && let Some(warning) = crate::movepages::move_all_warning()
    {
        tracing::warn!("{warning}");
    }
    let scope = Arc::clone(pipeline.ingest.scope());
    let mut migrators = Vec::new();
    for (node, rx) in pipeline.take_queues() {
        let mover = GuardedMover::new(
            SysMover::moving_shared(config.migrator.move_shared),
            Arc::clone(&scope),
            Arc::clone(&pipeline.stats),
        );
        let migrator = pipeline
            .migrator(node, mover, clock.clone(), limits.clone())
            .with_pause(Arc::clone(paused))
            .with_folios(Box::new(SysThp::system()));
        let migrator = match &pipeline.admission {
            Some(a) => migrator.with_admission(Box::new(AdmissionGate::new(
                Arc::clone(a),
                SysThp::system(),
                config.migrator.dry_run,
            ))),
            None => migrator,
        };
        migrators.push(MigratorHandle::spawn(migrator, rx).map_err(|source| {
            DaemonError::Spawn {
                name: format!("pghot-mig/node{node}"),
                source,
            }
        })?);
    }
    Ok(migrators)
}

/// One `pghot-src/N` thread per source, each reporting its end on `events`.
fn start_sources(
    sources: Vec<Box<dyn Source>>,
    ingest: &Arc<Ingest>,
    events: Sender<Event>,
    stop: &StopToken,
) -> Result<Vec<SourceThread>, DaemonError> {
    let mut threads = Vec::new();
    for (index, mut source) in sources.into_iter().enumerate() {
        let describe = source.describe();
        let sinks = Arc::clone(ingest);
        let tx = events.clone();
        let stop = stop.clone();
        let thread = spawn(format!("pghot-src/{index}"), move || {
            let _beat = crate::heartbeat::attach(format!("pghot-src/{index}"));
            // Each sink resolves its deferred samples and flushes its counts when dropped.
            let result = source.run(&sinks, &stop);
            let _ = tx.send(Event::SourceEnded { index, result });
        })?;
        tracing::info!("source {index}: {describe}");
        threads.push(SourceThread { describe, thread });
    }
    Ok(threads)
}

/// The control socket's and the metrics port's threads, on the listeners bound at start.
fn start_control(
    listeners: Listeners,
    plane: &Arc<ControlPlane>,
) -> Result<(Vec<ControlServer>, Option<MetricsServer>), DaemonError> {
    let spawn_err = |name: &str| {
        let name = name.to_string();
        move |source| DaemonError::Spawn { name, source }
    };
    let mut control = Vec::new();
    for (listener, path, access) in listeners.control {
        let what = match access {
            Access::Full => "control socket",
            Access::ReadOnly => "read-only control socket",
        };
        tracing::info!("{what} {}", path.display());
        control.push(
            ControlServer::spawn(listener, path, Arc::clone(plane), access)
                .map_err(spawn_err("pghot-ctl"))?,
        );
    }
    let metrics = match listeners.metrics {
        Some(listener) => {
            tracing::info!("metrics on http://{:?}/metrics", listener.local_addr().ok());
            Some(
                MetricsServer::spawn(listener, Arc::clone(plane))
                    .map_err(spawn_err("pghot-metrics"))?,
            )
        }
        None => None,
    };
    Ok((control, metrics))
}

impl Running {
    /// Stops the sources first (no new candidates), then the migrators, then everything else.
    /// Returns the pipeline, for the final counts, and how many sources failed in all.
    fn shut_down(self, reason: StopReason, failed: usize, running: usize) -> (Pipeline, usize) {
        self.stop.stop();
        let drain = reason == StopReason::SourcesEnded;
        for m in &self.migrators {
            m.send(if drain {
                MigratorEvent::Finish
            } else {
                MigratorEvent::Stop
            });
        }
        let failed = failed + wait_for_sources(&self.events, &self.sources, running);
        if !drain {
            // No source offers any more: stopped migrators count the last arrivals and exit.
            for m in &self.migrators {
                m.send(MigratorEvent::Close);
            }
        }
        for t in self.sources {
            // Those that reported their end are exiting; one that did not is left detached.
            if t.thread.is_finished() && t.thread.join().is_err() {
                tracing::error!("source thread {} panicked", t.describe);
            }
        }
        wait_for_migrators(self.migrators, &self.events, drain);
        self.background_stop.stop();
        for (name, t) in self.background {
            if let Some(t) = t
                && t.join().is_err()
            {
                tracing::error!("thread {name} panicked");
            }
        }
        self.signals.close();
        for c in self.control {
            c.shutdown();
        }
        if let Some(m) = self.metrics {
            m.shutdown();
        }
        (self.pipeline, failed)
    }
}

/// Flushes the recording, writes `--stats-json`, and turns failed sources into the error.
fn finish(
    config: &Config,
    stats_file: Option<(PathBuf, std::fs::File)>,
    pipeline: &Pipeline,
    reason: StopReason,
    started: Instant,
    failed: usize,
) -> Result<RunSummary, DaemonError> {
    if let Err(e) = pipeline.ingest.flush_recording() {
        tracing::error!("flushing the recording: {e}");
    }
    pipeline
        .stats
        .add(Counter::PghotEvictedPages, pipeline.table.evicted());
    let summary = RunSummary {
        reason,
        stats: pipeline.stats.snapshot(),
        elapsed: started.elapsed(),
    };
    if let Some((path, file)) = stats_file {
        write_stats_json(file, &summary, config, pipeline.table.len())
            .map_err(|source| DaemonError::StatsWrite { path, source })?;
    }
    if failed > 0 {
        return Err(DaemonError::SourcesFailed { failed });
    }
    Ok(summary)
}

/// Migration admission, when `[admission]` turns a filter on. Splitting that cannot work here
/// is logged now and counted per THP later (`thp_split_fail_unavailable`).
fn admission(config: &Config, topology: &Topology) -> Option<Arc<Admission>> {
    let cfg = &config.admission;
    if !cfg.is_active() {
        return None;
    }
    let max_node = topology.nodes().iter().map(|n| n.id).max().unwrap_or(0);
    let split_path = SysThp::system().split_path().to_path_buf();
    if cfg.split && !config.migrator.dry_run && !split_path.exists() {
        tracing::warn!(
            "THP splitting is on but {} does not exist (debugfs not mounted, or a kernel \
             without CONFIG_DEBUG_FS): THPs will be promoted whole",
            split_path.display()
        );
    }
    tracing::info!(
        "admission: split {} (contention >= {} MB/s, flat H >= {}%, coverage {}%, density \
         {}%), full-duplex nodes {:?}",
        if cfg.split { "on" } else { "off" },
        cfg.split_contention_mbps,
        cfg.split_flat_entropy_pct,
        cfg.split_coverage_pct,
        cfg.split_heat_density_pct,
        cfg.full_duplex_nodes
    );
    Some(Arc::new(Admission::new(cfg.clone(), max_node)))
}

fn spawn(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, DaemonError> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(f)
        .map_err(|source| DaemonError::Spawn { name, source })
}

/// Waits until every source has ended, a signal arrives or the deadline passes. Returns why,
/// how many sources failed, and how many still run.
fn wait_for_end(
    events: &Receiver<Event>,
    threads: &[SourceThread],
    deadline: Option<Instant>,
) -> (StopReason, usize, usize) {
    let mut running = threads.len();
    let mut failed = 0;
    loop {
        let event = match deadline {
            Some(d) => match events.recv_deadline(d) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => return (StopReason::Duration, failed, running),
                Err(RecvTimeoutError::Disconnected) => {
                    return (StopReason::SourcesEnded, failed, 0);
                }
            },
            None => match events.recv() {
                Ok(e) => e,
                Err(_) => return (StopReason::SourcesEnded, failed, 0),
            },
        };
        match event {
            Event::SourceEnded { index, result } => {
                failed += usize::from(!source_ended(threads, index, result));
                running -= 1;
                if running == 0 {
                    return (StopReason::SourcesEnded, failed, 0);
                }
            }
            Event::Signal(signal) => {
                tracing::info!("signal {signal}: stopping");
                return (StopReason::Signal, failed, running);
            }
        }
    }
}

/// Logs a source's end; false if it failed.
fn source_ended(threads: &[SourceThread], index: usize, result: Result<(), SourceError>) -> bool {
    let name = &threads[index].describe;
    match result {
        Ok(()) => {
            tracing::info!("source {index} ({name}) ended");
            true
        }
        Err(e) => {
            tracing::error!("source {index} ({name}) failed: {e}");
            false
        }
    }
}

/// After a stop, waits up to a second for the `running` sources to report their end (they
/// check the stop token every 100 ms). Returns how many of them failed.
fn wait_for_sources(events: &Receiver<Event>, threads: &[SourceThread], running: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(1);
    let (mut left, mut failed) = (running, 0);
    while left > 0 {
        match events.recv_deadline(deadline) {
            Ok(Event::SourceEnded { index, result }) => {
                failed += usize::from(!source_ended(threads, index, result));
                left -= 1;
            }
            // Already stopping: a second signal changes nothing.
            Ok(Event::Signal(_)) => {}
            Err(_) => {
                tracing::warn!("{left} source(s) did not stop within a second");
                break;
            }
        }
    }
    failed
}

/// Waits for the migrators; a signal during a drain turns it into a stop, which they must
/// finish within a second.
fn wait_for_migrators(migrators: Vec<MigratorHandle>, events: &Receiver<Event>, draining: bool) {
    let mut deadline = (!draining).then(|| Instant::now() + Duration::from_secs(1));
    let never = crossbeam_channel::never();
    let mut events_open = true;
    for m in &migrators {
        loop {
            // A drain has no deadline: it ends when the queues are empty.
            let timeout = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let events = if events_open { events } else { &never };
            select! {
                // Disconnects when the migrator thread exits.
                recv(m.done()) -> _ => break,
                recv(events) -> event => match event {
                    Ok(Event::Signal(signal)) if deadline.is_none() => {
                        tracing::info!("signal {signal} during drain: abandoning queued candidates");
                        // The sources have ended already: nothing more can arrive.
                        for m in &migrators {
                            m.send(MigratorEvent::Stop);
                            m.send(MigratorEvent::Close);
                        }
                        deadline = Some(Instant::now() + Duration::from_secs(1));
                    }
                    Ok(_) => {}
                    Err(_) => events_open = false,
                },
                default(timeout) => if deadline.is_some() { break },
            }
        }
    }
    for m in migrators {
        m.join(Duration::ZERO);
    }
}

fn write_stats_json(
    mut file: std::fs::File,
    summary: &RunSummary,
    config: &Config,
    tracked_pages: usize,
) -> std::io::Result<()> {
    let doc = serde_json::json!({
        "counters": summary.stats.counters,
        "stop_reason": summary.reason,
        "elapsed_s": summary.elapsed.as_secs_f64(),
        "dry_run": config.migrator.dry_run,
        "tracked_pages": tracked_pages,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?;
    use std::io::Write;
    file.write_all((text + "\n").as_bytes())?;
    file.flush()
}
