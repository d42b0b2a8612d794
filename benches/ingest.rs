//! Hotness-table ingest benchmark: nanoseconds per sample with 1 and 2 sampler threads sharing
//! one table of 1 Mi (2^20) tracked pages, and what the table costs per tracked page.
//!
//! Rows, each run with 1 and 2 threads (each thread has its own sample stream and, for the
//! recorder rows, its own `Recorder`; all threads share one table):
//!
//! - `table 1Mi`: `HotTable::record`, uniform over 1 Mi pages, `max_tracked_pages` 1 Mi.
//! - `table 4Mi`: the same over 4 Mi pages: about 3/4 of the samples miss and insert, so
//!   eviction runs all the time.
//! - `dashmap 1Mi`, `dashmap 4Mi`: the same loads on a `dashmap::DashMap` doing the same
//!   per-entry work (see `DashTable` for what it does not do), to compare the hand-written
//!   table with the crate the design names.
//! - `recorder lower`: the full per-sample path (`Recorder`: filters, node classification,
//!   table, candidate queue) over 1 Mi pages, every sample on node 2 (the lower tier).
//! - `recorder lower batch`: the same handed over 32 samples at a time (`record_batch`, as the
//!   perf sources do), which prefetches the table slot of the sample 4 ahead.
//! - `recorder mixed`: the same with half the samples on node 0 (top tier: `HotTable::touch`).
//! - `recorder lower +split`: `recorder lower` with THP splitting on: each sample also counts
//!   into its process's subpage histogram and node 2's traffic; `+split+duplex` also makes node
//!   2 full-duplex, so each sample updates one of the two 256 KiB Bloom filters.
//! - `diag ...`: reference rows that explain the others: the 1 Mi pages in a table with room
//!   to spare (no eviction), the recorder path with no candidates (`freq_threshold` = max), one
//!   atomic add per sample on a random word of a table-sized array (misses overlapped), and a
//!   pointer chase through the same amount of memory (one miss's full latency). A last line
//!   measures what a candidate `try_send` costs when it has to wake the parked receiver, and
//!   another what one `hot_share_pct` heat-floor pass (one slice) of a 1 Mi table takes, full
//!   and holding 64 Ki pages (a sixteenth; Redis in the Debian rig touches 57,000).
//!
//! Every table is pre-filled with each page once and then warmed up with one untimed pass of
//! the samples, so the timed runs see the steady state. Samples are generated before timing
//! (splitmix64), one `Vec` per thread; the sample clock advances 1 us per sample per thread
//! (each thread is a 1 M samples/s source, so each page is sampled about once a second: heat
//! decays, promotion windows rarely expire). Each row is timed three times, each run later on
//! the sample clock, and the best run is reported.
//!
//! Run with `cargo bench --bench ingest` (release build). `INGEST_SAMPLES=<n>` sets the samples
//! per thread per run (default 20 M); `cargo bench --bench ingest -- recorder` runs only the
//! rows whose name contains `recorder`.

// In a directory of its own, which Cargo does not take for another bench target.
#[path = "ingest/dash.rs"]
mod dash;
#[path = "ingest/floor.rs"]
mod floor;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use pghotd::admission::{Admission, AdmissionConfig};
use pghotd::hotness::candidate::candidate_queue;
use pghotd::hotness::{Access, Entry, HotTable, HotnessConfig, PageKey, Recorded};
use pghotd::ingest::Ingest;
use pghotd::sample::{AccessOp, DataSource, Sample, SourceKind};
use pghotd::sampler::SampleSink;
use pghotd::scope::Scope;
use pghotd::stats::{Counter, Stats};
use pghotd::topology::{NodeId, SysfsRoot, Topology};

use dash::DashTable;

const MI: u64 = 1 << 20;
/// `max_tracked_pages` of every row but one diagnostic.
const TRACKED: usize = 1 << 20;
const DEFAULT_SAMPLES: usize = 20_000_000;
const RUNS: usize = 3;
/// Sample-clock step between two samples of one thread.
const STEP_NS: u64 = 1_000;
/// Time of the pre-fill samples; the warm-up pass starts one second later.
const PREFILL_NS: u64 = 1_000_000_000;
const PID: u32 = 4242;
const BASE_VADDR: u64 = 0x7f00_0000_0000;
const LOWER_NODE: NodeId = 2;
const TOP_NODE: NodeId = 0;
/// The daemon's default candidate queue length: `max(migrate_batch * 8, 4096)`.
const QUEUE_LEN: usize = 4096;
/// The daemon's default `migrate_batch`: the queue wakes its migrator at this many candidates.
const MIGRATE_BATCH: usize = 512;
const TOPOLOGY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sysfs/qemu-3node"
);

/// What a row measures.
#[derive(Clone, Copy)]
enum Kind {
    /// `HotTable::record` on a table of `tracked` pages.
    Table { tracked: usize },
    /// `DashTable::record` (a `DashMap` doing the same per-entry work) bounded at `tracked`.
    Dash { tracked: usize },
    /// The `Recorder` path; `top_percent` of the samples on node 0.
    Recorder {
        top_percent: u64,
        freq_threshold: u16,
        /// 32 samples per `record_batch` call (as the perf sources hand them over: table slots
        /// prefetched ahead).
        batched: bool,
        /// Migration admission: `Split` feeds each sample to its process's subpage histogram
        /// and node 2's traffic counts; `Duplex` also to one of node 2's two Bloom filters.
        admission: Option<AdmissionRow>,
    },
    /// One atomic add per sample on a random word of an array as large as a 1 Mi table:
    /// independent misses, which the CPU overlaps.
    Floor,
    /// One dependent load per sample (a pointer chase) over an array as large as a 1 Mi
    /// table: the latency of one miss, nothing overlapped.
    Latency,
}

#[derive(Clone, Copy)]
enum AdmissionRow {
    Split,
    SplitDuplex,
}

struct Spec {
    name: &'static str,
    pages: u64,
    kind: Kind,
}

const SPECS: [Spec; 13] = [
    Spec {
        name: "table 1Mi",
        pages: MI,
        kind: Kind::Table { tracked: TRACKED },
    },
    Spec {
        name: "table 4Mi",
        pages: 4 * MI,
        kind: Kind::Table { tracked: TRACKED },
    },
    Spec {
        name: "dashmap 1Mi",
        pages: MI,
        kind: Kind::Dash { tracked: TRACKED },
    },
    Spec {
        name: "dashmap 4Mi",
        pages: 4 * MI,
        kind: Kind::Dash { tracked: TRACKED },
    },
    Spec {
        name: "recorder lower",
        pages: MI,
        kind: Kind::Recorder {
            top_percent: 0,
            freq_threshold: 2,
            admission: None,
            batched: false,
        },
    },
    Spec {
        name: "recorder lower batch",
        pages: MI,
        kind: Kind::Recorder {
            top_percent: 0,
            freq_threshold: 2,
            admission: None,
            batched: true,
        },
    },
    Spec {
        name: "recorder mixed",
        pages: MI,
        kind: Kind::Recorder {
            top_percent: 50,
            freq_threshold: 2,
            admission: None,
            batched: false,
        },
    },
    Spec {
        name: "recorder lower +split",
        pages: MI,
        kind: Kind::Recorder {
            top_percent: 0,
            freq_threshold: 2,
            admission: Some(AdmissionRow::Split),
            batched: false,
        },
    },
    Spec {
        name: "recorder lower +split+duplex",
        pages: MI,
        kind: Kind::Recorder {
            top_percent: 0,
            freq_threshold: 2,
            admission: Some(AdmissionRow::SplitDuplex),
            batched: false,
        },
    },
    Spec {
        name: "diag table no-evict",
        pages: MI,
        kind: Kind::Table {
            tracked: TRACKED + TRACKED / 4,
        },
    },
    Spec {
        name: "diag recorder no-cand",
        pages: MI,
        kind: Kind::Recorder {
            top_percent: 0,
            freq_threshold: u16::MAX,
            admission: None,
            batched: false,
        },
    },
    Spec {
        name: "diag floor",
        pages: MI,
        kind: Kind::Floor,
    },
    Spec {
        name: "diag latency",
        pages: MI,
        kind: Kind::Latency,
    },
];

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        finalize(self.0)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// splitmix64's finalizer.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn vaddr(page: u64) -> u64 {
    BASE_VADDR + page * 4096
}

fn key(page: u64) -> PageKey {
    PageKey::new(PID, vaddr(page)).expect("page key in range")
}

fn op(bits: u64) -> AccessOp {
    // One store per four accesses.
    if bits & 3 == 0 {
        AccessOp::Store
    } else {
        AccessOp::Load
    }
}

/// Time of sample `i` of the warm-up pass.
fn time_ns(i: u64) -> u64 {
    PREFILL_NS * 2 + i * STEP_NS
}

fn accesses(seed: u64, pages: u64, n: usize) -> Vec<Access> {
    let mut rng = Rng(seed);
    (0..n as u64)
        .map(|i| Access {
            key: key(rng.below(pages)),
            time_ns: time_ns(i),
            node: LOWER_NODE,
            op: op(rng.next()),
        })
        .collect()
}

fn sample(page: u64, time_ns: u64, cpu: u32, node: NodeId, op: AccessOp) -> Sample {
    Sample {
        time_ns,
        cpu,
        pid: PID,
        tid: PID + cpu,
        vaddr: vaddr(page) + 64,
        paddr: None,
        op,
        served_from: if node == LOWER_NODE {
            DataSource::ExtMem
        } else {
            DataSource::LocalDram
        },
        node: Some(node),
        latency: Some(300),
        source: SourceKind::Trace,
    }
}

/// Samples of thread `cpu`; `top_percent` of them on the top-tier node.
fn sample_stream(seed: u64, pages: u64, n: usize, cpu: u32, top_percent: u64) -> Vec<Sample> {
    let mut rng = Rng(seed);
    (0..n as u64)
        .map(|i| {
            let page = rng.below(pages);
            let bits = rng.next();
            let node = if bits % 100 < top_percent {
                TOP_NODE
            } else {
                LOWER_NODE
            };
            sample(page, time_ns(i), cpu, node, op(bits >> 8))
        })
        .collect()
}

/// Moves every buffer's samples one run later on the sample clock.
fn advance<T>(buffers: &mut [Vec<T>], time: impl Fn(&mut T) -> &mut u64) {
    for buffer in buffers.iter_mut() {
        let span = buffer.len() as u64 * STEP_NS;
        for item in buffer.iter_mut() {
            *time(item) += span;
        }
    }
}

/// Runs `work(thread)` on `threads` threads released together; returns the wall time from the
/// first thread's start to the last thread's end.
fn timed<F: Fn(usize) + Sync>(threads: usize, work: F) -> Duration {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    work(t);
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    let start = spans.iter().map(|s| s.0).min().expect("one thread");
    let end = spans.iter().map(|s| s.1).max().expect("one thread");
    end - start
}

/// What one run did besides taking time.
#[derive(Default, Clone, Copy)]
struct Counts {
    candidates: u64,
    queue_full: u64,
    evicted: u64,
}

/// The best of `RUNS` timed runs, with what it did.
struct Row {
    name: &'static str,
    pages: u64,
    /// `max_tracked_pages`; 0 for the floor.
    tracked_max: usize,
    threads: usize,
    samples: usize,
    best: Duration,
    worst: Duration,
    /// Of the best run.
    counts: Counts,
    /// Pages tracked at the end.
    tracked: usize,
}

impl Row {
    fn new(spec: &Spec, tracked_max: usize, threads: usize, samples: usize) -> Row {
        Row {
            name: spec.name,
            pages: spec.pages,
            tracked_max,
            threads,
            samples,
            best: Duration::MAX,
            worst: Duration::ZERO,
            counts: Counts::default(),
            tracked: 0,
        }
    }

    fn add_run(&mut self, wall: Duration, counts: Counts) {
        self.worst = self.worst.max(wall);
        if wall < self.best {
            self.best = wall;
            self.counts = counts;
        }
    }

    fn ns_per_sample(&self, wall: Duration) -> f64 {
        wall.as_nanos() as f64 / self.samples as f64
    }

    fn msamples_per_s(&self) -> f64 {
        (self.samples * self.threads) as f64 / self.best.as_secs_f64() / 1e6
    }

    fn per_sample(&self, n: u64) -> f64 {
        n as f64 / (self.samples * self.threads) as f64
    }
}

/// The record operation the table rows time: `HotTable`'s, or the `DashMap` variant's.
trait Table: Sync {
    fn create(tracked: usize) -> Self;
    fn record(&self, access: &Access) -> Recorded;
    fn evicted(&self) -> u64;
    fn len(&self) -> usize;
}

impl Table for HotTable {
    fn create(tracked: usize) -> HotTable {
        HotTable::new(tracked, HotnessConfig::default())
    }

    fn record(&self, access: &Access) -> Recorded {
        HotTable::record(self, access)
    }

    fn evicted(&self) -> u64 {
        HotTable::evicted(self)
    }

    fn len(&self) -> usize {
        HotTable::len(self)
    }
}

impl Table for DashTable {
    fn create(tracked: usize) -> DashTable {
        DashTable::new(tracked, HotnessConfig::default())
    }

    fn record(&self, access: &Access) -> Recorded {
        DashTable::record(self, access)
    }

    fn evicted(&self) -> u64 {
        DashTable::evicted(self)
    }

    fn len(&self) -> usize {
        DashTable::len(self)
    }
}

fn table_row<T: Table>(spec: &Spec, tracked_max: usize, threads: usize, samples: usize) -> Row {
    let mut row = Row::new(spec, tracked_max, threads, samples);
    let table = T::create(tracked_max);
    for page in 0..spec.pages {
        table.record(&Access {
            key: key(page),
            time_ns: PREFILL_NS,
            node: LOWER_NODE,
            op: AccessOp::Load,
        });
    }
    let mut buffers: Vec<Vec<Access>> = (0..threads)
        .map(|t| accesses(0x5eed + t as u64, spec.pages, samples))
        .collect();
    // Run 0 is the warm-up.
    for run in 0..=RUNS {
        if run > 0 {
            advance(&mut buffers, |a| &mut a.time_ns);
        }
        let candidates = AtomicU64::new(0);
        let evicted = table.evicted();
        let wall = timed(threads, |t| {
            let mut n = 0u64;
            for access in &buffers[t] {
                if table.record(black_box(access)) == Recorded::Candidate {
                    n += 1;
                }
            }
            candidates.fetch_add(n, Ordering::Relaxed);
        });
        if run > 0 {
            let counts = Counts {
                candidates: candidates.into_inner(),
                queue_full: 0,
                evicted: table.evicted() - evicted,
            };
            row.add_run(wall, counts);
        }
    }
    row.tracked = table.len();
    row
}

fn recorder_row(
    spec: &Spec,
    top_percent: u64,
    freq_threshold: u16,
    admission: Option<AdmissionRow>,
    batched: bool,
    threads: usize,
    samples: usize,
) -> Row {
    let mut row = Row::new(spec, TRACKED, threads, samples);
    let policy = HotnessConfig {
        freq_threshold,
        ..HotnessConfig::default()
    };
    let table = Arc::new(HotTable::new(TRACKED, policy));
    let stats = Arc::new(Stats::new());
    let topology = Arc::new(Topology::read(SysfsRoot::new(TOPOLOGY)).expect("fixture topology"));
    assert!(topology.is_lower_tier(LOWER_NODE) && !topology.is_lower_tier(TOP_NODE));
    // The migrator's stand-in: waits for the queue's batch wake-up (or 100 ms) like the
    // migrator, takes every candidate at once, promotes nothing.
    let (tx, rx) = candidate_queue(QUEUE_LEN, MIGRATE_BATCH);
    let done = Arc::new(AtomicBool::new(false));
    let drain = {
        let done = Arc::clone(&done);
        thread::spawn(move || {
            let mut received = 0usize;
            loop {
                let finished = done.load(Ordering::Acquire);
                rx.wait_wake(Duration::from_millis(100));
                while rx.try_recv().is_some() {
                    received += 1;
                }
                if finished {
                    return received;
                }
            }
        })
    };
    let scope = Arc::new(Scope::everything(std::process::id()));
    let mut ingest = Ingest::new(
        Arc::clone(&table),
        Arc::clone(&stats),
        topology,
        scope,
        None,
        vec![(LOWER_NODE, tx)],
    );
    if let Some(row) = admission {
        let config = AdmissionConfig {
            split: true,
            full_duplex_nodes: match row {
                AdmissionRow::Split => vec![],
                AdmissionRow::SplitDuplex => vec![LOWER_NODE],
            },
            ..AdmissionConfig::default()
        };
        ingest = ingest.with_admission(Arc::new(Admission::new(config, LOWER_NODE)));
    }
    let ingest = Arc::new(ingest);
    {
        // One lower-tier sample per page: tracked, below the threshold.
        let mut recorder = ingest.recorder();
        for page in 0..spec.pages {
            recorder.record(&sample(page, PREFILL_NS, 0, LOWER_NODE, AccessOp::Load));
        }
    }
    let mut buffers: Vec<Vec<Sample>> = (0..threads)
        .map(|t| {
            let seed = 0xc0ffee + t as u64;
            sample_stream(seed, spec.pages, samples, t as u32, top_percent)
        })
        .collect();
    for run in 0..=RUNS {
        if run > 0 {
            advance(&mut buffers, |s| &mut s.time_ns);
        }
        let candidates = stats.get(Counter::PgpromoteCandidate);
        let queue_full = stats.get(Counter::PgpromoteQueueFull);
        let evicted = table.evicted();
        let wall = timed(threads, |t| {
            let mut recorder = ingest.recorder();
            if batched {
                for chunk in buffers[t].chunks(32) {
                    recorder.record_batch(black_box(chunk));
                }
            } else {
                for s in &buffers[t] {
                    recorder.record(black_box(s));
                }
            }
        });
        if run > 0 {
            let counts = Counts {
                candidates: stats.get(Counter::PgpromoteCandidate) - candidates,
                queue_full: stats.get(Counter::PgpromoteQueueFull) - queue_full,
                evicted: table.evicted() - evicted,
            };
            row.add_run(wall, counts);
        }
    }
    let expected = spec.pages + ((RUNS + 1) * threads * samples) as u64;
    assert_eq!(stats.get(Counter::HwhintTotalEvents), expected);
    assert_eq!(stats.get(Counter::HwhintDroppedEvents), 0);
    row.tracked = table.len();
    drop(ingest);
    done.store(true, Ordering::Release);
    let received = drain.join().expect("drain thread panicked") as u64;
    let offered = stats.get(Counter::PgpromoteCandidate) - stats.get(Counter::PgpromoteQueueFull);
    assert_eq!(received, offered, "every queued candidate was drained");
    row
}

/// Bytes of a table of `tracked` pages.
fn table_bytes(tracked: usize) -> usize {
    HotTable::new(tracked, HotnessConfig::default()).memory_bytes()
}

fn floor_row(spec: &Spec, threads: usize, samples: usize) -> Row {
    // Passes over the samples per run, so that a run still takes over a second.
    const PASSES: usize = 5;
    let mut row = Row::new(spec, 0, threads, samples * PASSES);
    let words: Vec<AtomicU64> = (0..table_bytes(TRACKED) / 8)
        .map(|_| AtomicU64::new(0))
        .collect();
    let slot = |a: &Access| {
        let hash = finalize(a.key.vaddr());
        ((u128::from(hash) * words.len() as u128) >> 64) as usize
    };
    let buffers: Vec<Vec<Access>> = (0..threads)
        .map(|t| accesses(0x5eed + t as u64, spec.pages, samples))
        .collect();
    for run in 0..=RUNS {
        let wall = timed(threads, |t| {
            for _ in 0..PASSES {
                for access in &buffers[t] {
                    words[slot(black_box(access))].fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        if run > 0 {
            row.add_run(wall, Counts::default());
        }
    }
    row
}

fn latency_row(spec: &Spec, threads: usize, samples: usize) -> Row {
    let mut row = Row::new(spec, 0, threads, samples);
    // One cycle through every 64-byte line in random order (Sattolo's shuffle); each line's
    // first word holds the index of the next line's first word.
    const WORDS_PER_LINE: usize = 8;
    let lines = table_bytes(TRACKED) / 64;
    let mut order: Vec<usize> = (0..lines).collect();
    let mut rng = Rng(0x1a7e);
    for i in (1..lines).rev() {
        order.swap(i, rng.below(i as u64) as usize);
    }
    let mut next = vec![0usize; lines * WORDS_PER_LINE];
    for (i, &line) in order.iter().enumerate() {
        next[line * WORDS_PER_LINE] = order[(i + 1) % lines] * WORDS_PER_LINE;
    }
    for run in 0..=RUNS {
        let wall = timed(threads, |t| {
            let mut at = order[t * lines / 2] * WORDS_PER_LINE;
            for _ in 0..samples {
                at = next[at];
            }
            black_box(at);
        });
        if run > 0 {
            row.add_run(wall, Counts::default());
        }
    }
    row
}

/// Nanoseconds a `try_send` costs its sender when the receiver is parked in `recv`, as the
/// migrator is between candidates.
fn wake_cost() -> f64 {
    const SENDS: u32 = 20_000;
    const GAP: Duration = Duration::from_micros(20);
    let (tx, rx) = crossbeam_channel::bounded::<u32>(QUEUE_LEN);
    let receiver = thread::spawn(move || rx.iter().count());
    let mut sending = Duration::ZERO;
    for i in 0..SENDS {
        // Give the receiver time to drain the queue and park again.
        let idle = Instant::now();
        while idle.elapsed() < GAP {
            std::hint::spin_loop();
        }
        let start = Instant::now();
        tx.try_send(i).expect("queue has room");
        sending += start.elapsed();
    }
    drop(tx);
    receiver.join().expect("receiver panicked");
    sending.as_nanos() as f64 / f64::from(SENDS)
}

fn run(spec: &Spec, threads: usize, samples: usize) -> Row {
    match spec.kind {
        Kind::Table { tracked } => table_row::<HotTable>(spec, tracked, threads, samples),
        Kind::Dash { tracked } => table_row::<DashTable>(spec, tracked, threads, samples),
        Kind::Recorder {
            top_percent,
            freq_threshold,
            admission,
            batched,
        } => recorder_row(
            spec,
            top_percent,
            freq_threshold,
            admission,
            batched,
            threads,
            samples,
        ),
        Kind::Floor => floor_row(spec, threads, samples),
        Kind::Latency => latency_row(spec, threads, samples),
    }
}

/// A `/proc/self/status` field in kB (0 if unreadable).
fn proc_status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse().ok()
        })
        .unwrap_or(0)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// VmRSS growth from creating a 1 Mi table and recording each of its pages once; with the
/// `DashTable`, also its computed `memory_bytes()` (before anything is removed).
fn resident_table_bytes<T: Table>(computed: impl Fn(&T) -> usize) -> (u64, usize) {
    let before = proc_status_kb("VmRSS");
    let table = T::create(TRACKED);
    for page in 0..MI {
        table.record(&Access {
            key: key(page),
            time_ns: PREFILL_NS,
            node: LOWER_NODE,
            op: AccessOp::Load,
        });
    }
    let after = proc_status_kb("VmRSS");
    let bytes = computed(&table);
    drop(table);
    (after.saturating_sub(before) * 1024, bytes)
}

/// `1Mi`, `1.25Mi`; `-` for 0.
fn in_mi(n: u64) -> String {
    match n {
        0 => "-".to_string(),
        n if n % MI == 0 => format!("{}Mi", n / MI),
        n => format!("{:.2}Mi", n as f64 / MI as f64),
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "| row                   | pages | max tracked | thr | ns/sample | worst run | \
         Msamples/s | cand/sample | queue_full | evicted/sample | tracked |"
    );
    println!(
        "|-----------------------|-------|-------------|-----|-----------|-----------|\
         ------------|-------------|------------|----------------|---------|"
    );
    for r in rows {
        let floor = r.tracked_max == 0;
        let or_dash = |s: String| if floor { "-".to_string() } else { s };
        println!(
            "| {:<21} | {:>5} | {:>11} | {:>3} | {:>9.1} | {:>9.1} | {:>10.2} | {:>11} | \
             {:>10} | {:>14} | {:>7} |",
            r.name,
            in_mi(r.pages),
            in_mi(r.tracked_max as u64),
            r.threads,
            r.ns_per_sample(r.best),
            r.ns_per_sample(r.worst),
            r.msamples_per_s(),
            or_dash(format!("{:.4}", r.per_sample(r.counts.candidates))),
            or_dash(r.counts.queue_full.to_string()),
            or_dash(format!("{:.4}", r.per_sample(r.counts.evicted))),
            or_dash(r.tracked.to_string()),
        );
    }
}

fn main() {
    let samples = std::env::var("INGEST_SAMPLES")
        .ok()
        .map(|v| v.parse().expect("INGEST_SAMPLES: a number of samples"))
        .unwrap_or(DEFAULT_SAMPLES);
    // `cargo bench` passes `--bench`; other arguments select rows by name.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |spec: &&Spec| filters.is_empty() || filters.iter().any(|f| spec.name.contains(f));
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    // Before anything else is allocated, so the allocator cannot reuse freed memory. Each
    // table's shards are mmap-sized allocations, returned to the kernel when it is dropped.
    let (resident, _) = resident_table_bytes::<HotTable>(HotTable::memory_bytes);
    let (dash_resident, dash_bytes) = resident_table_bytes::<DashTable>(DashTable::memory_bytes);

    println!("pghotd hotness ingest benchmark");
    println!(
        "{samples} samples per thread per run, warm-up pass + best of {RUNS} runs, \
         {cpus} CPUs available"
    );
    println!(
        "{:?}; sample clock +{STEP_NS} ns per sample per thread",
        HotnessConfig::default()
    );
    println!(
        "recorder rows: node 2 candidate queue = bounded({QUEUE_LEN}) emptied by a drain \
         thread (counts, no mark_promoted); try_send failures counted as queue_full"
    );
    println!();

    let started = Instant::now();
    let mut rows = Vec::new();
    for spec in SPECS.iter().filter(wanted) {
        for threads in [1, 2] {
            // Progress (with wall-clock seconds, to match against other load on the machine).
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            eprintln!(
                "[{:6.1} s, unix {now}] {} with {threads} thread(s)",
                started.elapsed().as_secs_f64(),
                spec.name
            );
            rows.push(run(spec, threads, samples));
        }
    }
    print_table(&rows);
    println!();
    println!(
        "ns/sample = best wall time / samples per thread (per-thread cost); Msamples/s = all \
         threads' samples / best wall time (aggregate)"
    );
    for tracked in [TRACKED, TRACKED + TRACKED / 4] {
        let bytes = table_bytes(tracked);
        println!(
            "table of {} pages: {bytes} bytes = {:.2} bytes per tracked page ({} byte entries)",
            in_mi(tracked as u64),
            bytes as f64 / tracked as f64,
            std::mem::size_of::<Entry>(),
        );
    }
    println!(
        "candidate hand-off: a try_send that wakes a parked receiver costs the sender {:.0} ns",
        wake_cost()
    );
    println!(
        "hot_share_pct: one heat-floor pass (once per 5 s of sample time; one of {} slices) \
         of a 1Mi table takes {:.3} ms full, {:.3} ms holding 64Ki pages",
        pghotd::hotness::share::SLICES,
        floor::heat_floor_pass_ms(TRACKED, TRACKED),
        floor::heat_floor_pass_ms(TRACKED, TRACKED / 16)
    );
    println!(
        "resident memory of a pre-filled 1Mi table: {:.1} MiB (VmRSS growth) = {:.2} bytes per \
         tracked page",
        mib(resident),
        resident as f64 / TRACKED as f64
    );
    println!(
        "dashmap table of 1Mi pages: {dash_bytes} bytes = {:.2} bytes per tracked page (buckets \
         x ({} byte pair + 1 control byte) + 128-byte lock per shard); pre-filled: {:.1} MiB \
         resident (VmRSS growth) = {:.2} bytes per tracked page",
        dash_bytes as f64 / TRACKED as f64,
        dash::PAIR_BYTES,
        mib(dash_resident),
        dash_resident as f64 / TRACKED as f64
    );
    println!(
        "peak RSS (VmHWM): {:.1} MiB, of which up to {:.1} MiB are the pre-generated samples \
         (2 threads x {samples} x {} byte Sample)",
        mib(proc_status_kb("VmHWM") * 1024),
        mib((2 * samples * std::mem::size_of::<Sample>()) as u64),
        std::mem::size_of::<Sample>(),
    );
}
