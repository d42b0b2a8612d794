//! Sample storm: the daemon's sample path, migrators and control socket under a flood of
//! samples over more distinct pages than `max_tracked_pages`.
//!
//! Built from the library's `pipeline` as the daemon builds it: the QEMU 3-node topology snapshot, one
//! `HotTable`, an `Ingest` with the daemon's candidate queues, one dry-run migrator thread
//! per lower-tier node (`SysMover`, the real clock and rate limits), and the real control
//! plane and server on a socket in a temporary directory. What differs is the source:
//!
//! - `direct` (default): `STORM_THREADS` threads each generate samples and hand them, 32 at a
//!   time as a perf CPU thread does (`record_batch`), to their own
//!   `Recorder` inline, as a `pghot-smp/N` thread does after decoding: the fastest honest path.
//! - `text`: one writer thread formats pghot-trace lines with `TraceWriter` into a FIFO that a
//!   `TraceSource` on another thread reads, parses and records: the `--source trace:` path.
//!
//! Samples are loads served from extension memory on node 2 by 64 processes (one in 16 with
//! a kernel address, dropped and counted by the recorder), uniform over
//! `STORM_PAGES` distinct pages (default 4 Mi) against `STORM_TRACKED` tracked (default 1 Mi);
//! the sample clock advances 500 ns per sample per thread. Meanwhile a client asks `status`
//! every 10 ms and `stats` every 100 ms on one connection, and the resident set is read every
//! 100 ms. At the end the counters must add up: every sample sent is in
//! `hwhint_total_events`, that is `hwhint_useful_events` + `hwhint_dropped_events`, and every
//! candidate was refused by a full queue or processed by a migrator.
//!
//! `cargo bench --bench storm [-- text]`; `STORM_SECS` (default 60).

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pghotd::config::Config;
use pghotd::control::server::{Access, ControlServer, bind};
use pghotd::control::{ControlParts, ControlPlane, ReloadFrom};
use pghotd::hotness::HotTable;
use pghotd::ingest::Ingest;
use pghotd::migrator::ratelimit::{MonotonicClock, RateLimits};
use pghotd::migrator::{MigratorConfig, MigratorEvent, MigratorHandle};
use pghotd::movepages::SysMover;
use pghotd::pipeline::{Pipeline, PipelineConfig};
use pghotd::sample::{AccessOp, DataSource, Sample, SourceKind};
use pghotd::sampler::SampleSink;
use pghotd::sampler::Source;
use pghotd::sampler::trace::{TraceSource, TraceWriter};
use pghotd::scope::Scope;
use pghotd::stats::{Counter, Stats};
use pghotd::stop::StopToken;
use pghotd::topology::{SysfsRoot, Topology};
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};

const TOPOLOGY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sysfs/qemu-3node"
);
const PIDS: u64 = 64;
const BASE_VADDR: u64 = 0x7f00_0000_0000;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Sample `i` of a generator: a load of one of `pages` pages, spread over [`PIDS`] processes.
fn sample(rng: &mut SplitMix64, pages: u64, time_ns: u64, cpu: u32) -> Sample {
    let r = rng.next_u64();
    let page = r % pages;
    let pid = 1000 + (page % PIDS) as u32;
    // One sample in 16 names a kernel address, which the recorder drops and counts.
    let kernel = if r >> 60 == 0 { 1 << 63 } else { 0 };
    Sample {
        time_ns,
        cpu,
        pid,
        tid: pid,
        vaddr: kernel | (BASE_VADDR + (page / PIDS) * 4096),
        paddr: None,
        op: AccessOp::Load,
        served_from: DataSource::ExtMem,
        node: Some(2),
        latency: None,
        source: SourceKind::Trace,
    }
}

/// Resident set size now and at its peak, in KiB, from /proc/self/status.
fn rss_kib() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Asks `status` every 10 ms and `stats` every 100 ms until `done`; returns each latency.
fn control_client(socket: &std::path::Path, done: &AtomicBool) -> (Vec<Duration>, Vec<Duration>) {
    let stream = UnixStream::connect(socket).expect("connecting to the control socket");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    let (mut status, mut stats) = (Vec::new(), Vec::new());
    let mut line = String::new();
    let mut i = 0u64;
    while !done.load(Ordering::Relaxed) {
        let req = if i % 10 == 9 { "stats" } else { "status" };
        let started = Instant::now();
        writer
            .write_all(format!("{{\"v\":1,\"req\":\"{req}\"}}\n").as_bytes())
            .expect("request");
        line.clear();
        reader.read_line(&mut line).expect("answer");
        let took = started.elapsed();
        assert!(line.starts_with("{\"ok\""), "{line}");
        if req == "stats" {
            stats.push(took);
        } else {
            status.push(took);
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    (status, stats)
}

fn main() {
    let mode = std::env::args()
        .skip(1)
        .find(|a| a == "text" || a == "direct")
        .unwrap_or_else(|| "direct".into());
    let secs = env_or("STORM_SECS", 60);
    let pages = env_or("STORM_PAGES", 4 << 20);
    let tracked = env_or("STORM_TRACKED", 1 << 20) as usize;
    let threads = env_or("STORM_THREADS", 2);

    let dir = tempfile::tempdir().expect("temporary directory");
    let socket = dir.path().join("storm.sock");
    let daemon = Daemon::start(&mode, tracked, &socket);

    let done = Arc::new(AtomicBool::new(false));
    let (rss_base, _) = rss_kib();
    eprintln!(
        "storm: {mode}, {secs} s, {pages} distinct pages, {tracked} tracked, rss {rss_base} KiB"
    );
    let peak = std::thread::scope(|s| {
        let client = s.spawn(|| control_client(&socket, &done));
        let rss = s.spawn(|| {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib().0);
                std::thread::sleep(Duration::from_millis(100));
            }
            peak
        });
        let started = Instant::now();
        let deadline = started + Duration::from_secs(secs);
        let sent: u64 = if mode == "text" {
            send_text(
                &daemon.ingest,
                &dir.path().join("storm.fifo"),
                pages,
                deadline,
            )
        } else {
            send_direct(&daemon.ingest, threads, pages, deadline)
        };
        let elapsed = started.elapsed();
        done.store(true, Ordering::Relaxed);
        let (status, stats_lat) = client.join().expect("client");
        let peak = rss.join().expect("rss sampler");
        print_rates(&mode, sent, elapsed, status, stats_lat);
        (sent, peak)
    });
    let (stats, table) = daemon.stop();

    let (sent, peak_sampled) = peak;
    let (_, hwm) = rss_kib();
    println!(
        "rss: {rss_base} KiB before, peak {peak_sampled} KiB sampled, VmHWM {hwm} KiB; table \
         capacity {tracked} pages"
    );
    if !accounting_is_exact(&stats, &table, sent) {
        std::process::exit(1);
    }
}

/// The daemon's parts under the storm, built by `pipeline` as the daemon builds them.
struct Daemon {
    stats: Arc<Stats>,
    table: Arc<HotTable>,
    ingest: Arc<Ingest>,
    migrators: Vec<MigratorHandle>,
    server: ControlServer,
}

impl Daemon {
    /// The table, the ingest with its candidate queues, one dry-run migrator thread per
    /// lower-tier node, and the control server on `socket`.
    fn start(mode: &str, tracked: usize, socket: &Path) -> Daemon {
        let topology =
            Arc::new(Topology::read(SysfsRoot::new(TOPOLOGY)).expect("topology fixture"));
        let config = Config {
            max_tracked_pages: tracked,
            migrator: MigratorConfig {
                dry_run: true,
                ..MigratorConfig::default()
            },
            ..Config::default()
        };
        let settings = PipelineConfig {
            max_tracked_pages: tracked,
            policy: config.policy,
            target_nid: None,
            migrator: config.migrator,
        };
        let scope = Arc::new(Scope::everything(std::process::id()));
        let mut pipeline = Pipeline::builder(settings, Arc::clone(&topology), scope).build();
        let limits = RateLimits::default();
        let clock = MonotonicClock::default();
        let paused = Arc::new(AtomicBool::new(false));
        let migrators: Vec<MigratorHandle> = pipeline
            .take_queues()
            .into_iter()
            .map(|(node, rx)| {
                let m = pipeline
                    .migrator(node, SysMover::default(), clock.clone(), limits.clone())
                    .with_pause(Arc::clone(&paused));
                MigratorHandle::spawn(m, rx).expect("spawning a migrator")
            })
            .collect();
        let (stats, table, ingest) = (
            Arc::clone(&pipeline.stats),
            Arc::clone(&pipeline.table),
            Arc::clone(&pipeline.ingest),
        );

        let plane = Arc::new(ControlPlane::new(ControlParts {
            config: config.clone(),
            reload: ReloadFrom::default(),
            stats: Arc::clone(&stats),
            table: Arc::clone(&table),
            ingest: Arc::clone(&ingest),
            topology: Arc::clone(&topology),
            migrators: migrators.iter().map(MigratorHandle::events).collect(),
            limits,
            clock,
            paused,
            sources: vec![format!("storm {mode}")],
            stop: StopToken::new(),
            conflicts: Default::default(),
        }));
        let listener = bind(socket, Access::Full).expect("binding the control socket");
        let server = ControlServer::spawn(listener, socket.to_path_buf(), plane, Access::Full)
            .expect("control server");
        Daemon {
            stats,
            table,
            ingest,
            migrators,
            server,
        }
    }

    /// Lets the migrators drain, stops them and the control server.
    fn stop(self) -> (Arc<Stats>, Arc<HotTable>) {
        for m in &self.migrators {
            m.send(MigratorEvent::Finish);
        }
        for m in self.migrators {
            m.join(Duration::from_secs(10));
        }
        self.server.shutdown();
        (self.stats, self.table)
    }
}

/// The `--source trace:` path: a writer formats samples into a FIFO that a `TraceSource`
/// reads, parses and records, until `deadline`. Returns the samples sent.
fn send_text(ingest: &Arc<Ingest>, fifo: &Path, pages: u64, deadline: Instant) -> u64 {
    nix::unistd::mkfifo(fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let mut source =
        TraceSource::open(fifo.to_str().expect("utf-8 path")).expect("opening the FIFO");
    std::thread::scope(|s| {
        let reader = s.spawn(move || source.run(ingest, &StopToken::new()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(fifo)
            .expect("opening the FIFO for writing");
        let mut out = TraceWriter::new(BufWriter::with_capacity(1 << 16, file)).expect("header");
        let mut rng = SplitMix64::seed_from_u64(1);
        let mut n = 0u64;
        while Instant::now() < deadline {
            for _ in 0..4096 {
                let s = sample(&mut rng, pages, 1_000_000_000 + n * 500, 0);
                out.write_sample(&s).expect("writing the FIFO");
                n += 1;
            }
        }
        drop(out);
        reader.join().expect("reader thread").expect("trace source");
        n
    })
}

/// The perf path: `threads` threads each record samples into their own `Recorder`, 32 at a
/// time, until `deadline`. Returns the samples sent.
fn send_direct(ingest: &Arc<Ingest>, threads: u64, pages: u64, deadline: Instant) -> u64 {
    std::thread::scope(|s| {
        let producers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut recorder = ingest.recorder();
                    let mut rng = SplitMix64::seed_from_u64(t + 1);
                    let mut n = 0u64;
                    // Handed over 32 at a time, as a perf source's CPU thread does.
                    let mut batch = Vec::with_capacity(32);
                    while Instant::now() < deadline {
                        for _ in 0..4096 {
                            let time = 1_000_000_000 + n * 500;
                            batch.push(sample(&mut rng, pages, time, t as u32));
                            if batch.len() == 32 {
                                recorder.record_batch(&batch);
                                batch.clear();
                            }
                            n += 1;
                        }
                    }
                    recorder.record_batch(&batch);
                    n
                })
            })
            .collect();
        producers
            .into_iter()
            .map(|p| p.join().expect("producer"))
            .sum()
    })
}

/// Prints the sample rate and the control requests' latencies.
fn print_rates(
    mode: &str,
    sent: u64,
    elapsed: Duration,
    mut status: Vec<Duration>,
    mut stats_lat: Vec<Duration>,
) {
    status.sort();
    stats_lat.sort();
    println!(
        "mode {mode}: {sent} samples in {:.2} s = {:.2} M samples/s",
        elapsed.as_secs_f64(),
        sent as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!(
        "control status: {} requests, p50 {:?}, p99 {:?}, max {:?}",
        status.len(),
        percentile(&status, 0.5),
        percentile(&status, 0.99),
        status.last().copied().unwrap_or_default()
    );
    println!(
        "control stats: {} requests, p50 {:?}, p99 {:?}, max {:?}",
        stats_lat.len(),
        percentile(&stats_lat, 0.5),
        percentile(&stats_lat, 0.99),
        stats_lat.last().copied().unwrap_or_default()
    );
}

/// Prints the counters; true when they add up: every sample sent is counted, as useful or
/// dropped, and every candidate ended in exactly one outcome.
fn accounting_is_exact(stats: &Stats, table: &HotTable, sent: u64) -> bool {
    let total = stats.get(Counter::HwhintTotalEvents);
    let useful = stats.get(Counter::HwhintUsefulEvents);
    let dropped = stats.get(Counter::HwhintDroppedEvents);
    println!(
        "counters: sent {sent}, hwhint_total_events {total}, useful {useful}, dropped \
         {dropped}, recorded {}, evicted {}, candidates {}, queue_full {}, promoted (dry run) {}",
        stats.get(Counter::PghotRecordedAccesses),
        table.evicted(),
        stats.get(Counter::PgpromoteCandidate),
        stats.get(Counter::PgpromoteQueueFull),
        stats.get(Counter::PgpromoteSuccess),
    );
    // Every candidate ended in exactly one outcome (refused by a full queue, or processed).
    let handled: u64 = Counter::PROMOTION_OUTCOMES
        .iter()
        .map(|&c| stats.get(c))
        .sum();
    let exact = total == sent
        && useful + dropped == total
        && handled == stats.get(Counter::PgpromoteCandidate);
    println!("accounting: {}", if exact { "exact" } else { "MISMATCH" });
    exact
}
