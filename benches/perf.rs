//! Perf parse-path benchmark: samples per second per core from a ring buffer filled with
//! synthetic records, through the per-CPU sampler's reader (`CpuReader`), the same code the
//! `pghot-smp/N` threads run.
//!
//! Rows (one thread each: a sampler thread owns one CPU's ring):
//!
//! - `ibs decode`: IBS op records with the RAW MSR dump (136 bytes each, as the kernel writes
//!   them for `ibs_op`), parsed and classified (`ibs::classify`) into a sink that only counts.
//! - `ibs decode+table`: the same into the daemon's real sink (`Recorder`: filters, physical
//!   address -> node, classification, the 1 Mi-page hotness table, candidate queue). Every
//!   sample is a load served from extension memory on node 2 (the lower tier of the QEMU
//!   topology snapshot), spread uniformly over 1 Mi pages.
//! - `ibs decode, 25% dropped`: a quarter of the records are L1/L2 hits or kernel-mode, as
//!   IBS delivers them without l3missonly; dropped records cost a counter, not a table update.
//! - `pagefault decode`: the page-fault source's 40-byte records into the counting sink.
//!
//! The writer refills the ring between timed drains, so only the reader is timed, in thread CPU
//! time (the figure is per core; a busy machine must not inflate it). Each row is run three
//! times and the best is reported. Run with `cargo bench --bench perf`;
//! `PERF_BENCH_SAMPLES=<n>` sets the samples per run (default 8 M).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use pghotd::hotness::candidate::candidate_queue;
use pghotd::hotness::{HotTable, HotnessConfig};
use pghotd::ingest::Ingest;
use pghotd::sample::Sample;
use pghotd::sampler::SampleSink;
use pghotd::sampler::hwplan::{ibs_decoding_plan, ibs_raw};
use pghotd::sampler::ibs::CpuModel;
use pghotd::sampler::pagefault::{PageFaultConfig, plan as pagefault_plan};
use pghotd::sampler::perf::record::{SampleRecord, build};
use pghotd::sampler::perf::ring::{Ring, RingWriter};
use pghotd::sampler::perf::{CpuReader, PerfPlan};
use pghotd::scope::Scope;
use pghotd::stats::{Counter, Stats};
use pghotd::topology::{SysfsRoot, Topology};
use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};

const DEFAULT_SAMPLES: usize = 8_000_000;
const RUNS: usize = 3;
const RING_BYTES: usize = 1 << 20;
const PAGES: u64 = 1 << 20;
const PID: u32 = 4242;
const BASE_VADDR: u64 = 0x7f00_0000_0000;
/// Node 2 of the QEMU snapshot: physical 0x80000000-0xc0000000 (256 Ki pages).
const NODE2_PHYS: u64 = 0x8000_0000;
const NODE2_PAGES: u64 = 1 << 18;
const TOPOLOGY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sysfs/qemu-3node"
);
/// Zen4 caps: AVAIL, OPSAM, OPCNT, ZEN4 extensions.
const CAPS: u32 = 1 | 1 << 2 | 1 << 4 | 1 << 11;
const OP_VALID: u64 = 1 << 17 | 1 << 18;
/// IbsOpData3 of a load that missed L2, with valid linear and physical addresses, 300 cycles.
const CXL_LOAD: u64 = 1 | 1 << 7 | 1 << 17 | 1 << 18 | 1 << 20 | 300 << 32;
/// IbsOpData3 of an L1 hit.
const L1_HIT: u64 = 1 | 1 << 17 | 1 << 18;
/// IbsOpData2 with DataSrc 8 (extension memory).
const EXT_MEM: u64 = 1 << 6;

/// A sink that only counts, to time the reader alone.
#[derive(Default)]
struct Counting {
    samples: u64,
    dropped: u64,
}

impl SampleSink for Counting {
    fn record(&mut self, sample: &Sample) {
        self.samples += 1;
        black_box(sample);
    }
    fn count(&mut self, _: Counter, n: u64) {
        self.dropped += n;
    }
}

/// One IBS record: a load of page `page`, or (when `dropped`) an L1 hit or a kernel sample.
fn ibs_record(plan: &PerfPlan, page: u64, time: u64, drop_kind: Option<bool>) -> Vec<u8> {
    let vaddr = BASE_VADDR + page * 4096 + 0x40;
    let paddr = NODE2_PHYS + (page % NODE2_PAGES) * 4096 + 0x40;
    let data3 = if drop_kind == Some(false) {
        L1_HIT
    } else {
        CXL_LOAD
    };
    let raw = ibs_raw(CAPS, [OP_VALID, 0x40_1000, 0, EXT_MEM, data3, vaddr, paddr]);
    let rec = SampleRecord {
        // cpumode user (2), or kernel (1) for the kernel-mode drops.
        misc: if drop_kind == Some(true) { 1 } else { 2 },
        ip: 0x40_1000,
        pid: PID,
        tid: PID,
        time,
        addr: vaddr,
        cpu: 0,
        raw: Some(&raw),
        weight: 300,
        data_src: 0,
        phys_addr: paddr,
        ..build::empty()
    };
    build::sample(plan.format, &rec)
}

fn pagefault_record(plan: &PerfPlan, page: u64, time: u64) -> Vec<u8> {
    let rec = SampleRecord {
        pid: PID,
        tid: PID,
        time,
        addr: BASE_VADDR + page * 4096,
        ..build::empty()
    };
    build::sample(plan.format, &rec)
}

/// Pre-built records, cycled through: generating them is not what is measured.
fn records(n: usize, make: impl Fn(u64, u64, &mut SplitMix64) -> Vec<u8>) -> Vec<Vec<u8>> {
    let mut rng = SplitMix64::seed_from_u64(0x5eed);
    (0..n as u64)
        .map(|i| {
            let page = rng.next_u64() % PAGES;
            make(page, 1_000_000_000 + i * 1000, &mut rng)
        })
        .collect()
}

/// This thread's CPU time: the figure is per core, and other processes on the machine must not
/// inflate it (wall time would count the time this thread waited for a CPU).
fn thread_cpu_time() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .expect("CLOCK_THREAD_CPUTIME_ID")
}

/// Times `samples` records through `reader` into `sink`, refilling the ring between drains.
fn time_drains(
    plan: &PerfPlan,
    records: &[Vec<u8>],
    samples: usize,
    sink: &mut dyn SampleSink,
) -> Duration {
    let mut ring = Ring::in_memory(RING_BYTES).expect("in-memory ring");
    let mut reader = CpuReader::new(plan, 0);
    let (mut done, mut pushed, mut busy) = (0, 0, Duration::ZERO);
    while done < samples {
        {
            let writer = RingWriter::new(&ring);
            while pushed < samples && writer.push(&records[pushed % records.len()]) {
                pushed += 1;
            }
        }
        let started = thread_cpu_time();
        done += reader.drain_ring(&mut ring, sink);
        busy += thread_cpu_time().saturating_sub(started);
    }
    busy
}

struct Row {
    name: &'static str,
    ns_per_sample: f64,
    bytes_per_record: usize,
    dropped_pct: f64,
}

fn best_of(mut run: impl FnMut() -> (Duration, f64), samples: usize) -> (f64, f64) {
    let mut best = f64::MAX;
    let mut dropped = 0.0;
    for _ in 0..RUNS {
        let (busy, d) = run();
        best = best.min(busy.as_nanos() as f64 / samples as f64);
        dropped = d;
    }
    (best, dropped)
}

fn counting_row(name: &'static str, plan: &PerfPlan, records: &[Vec<u8>], samples: usize) -> Row {
    let (ns, dropped) = best_of(
        || {
            let mut sink = Counting::default();
            let busy = time_drains(plan, records, samples, &mut sink);
            let pct = 100.0 * sink.dropped as f64 / (sink.samples + sink.dropped).max(1) as f64;
            (busy, pct)
        },
        samples,
    );
    Row {
        name,
        ns_per_sample: ns,
        bytes_per_record: records[0].len(),
        dropped_pct: dropped,
    }
}

fn table_row(plan: &PerfPlan, records: &[Vec<u8>], samples: usize) -> Row {
    let topology = Arc::new(Topology::read(SysfsRoot::new(TOPOLOGY)).expect("fixture topology"));
    let (ns, dropped) = best_of(
        || {
            let table = Arc::new(HotTable::new(PAGES as usize, HotnessConfig::default()));
            let stats = Arc::new(Stats::new());
            // No migrator: once the queue is full, candidates are counted as queue_full, as
            // they would be with a migrator that cannot keep up.
            let (tx, _rx) = candidate_queue(4096, 512);
            let scope = Arc::new(Scope::everything(std::process::id()));
            let ingest = Arc::new(Ingest::new(
                table,
                Arc::clone(&stats),
                Arc::clone(&topology),
                scope,
                None,
                vec![(2, tx)],
            ));
            let mut recorder = ingest.recorder();
            let busy = time_drains(plan, records, samples, &mut recorder);
            drop(recorder);
            let recorded = stats.get(Counter::PghotRecordedAccesses);
            assert!(recorded as usize >= samples * 9 / 10, "recorded {recorded}");
            (busy, 0.0)
        },
        samples,
    );
    Row {
        name: "ibs decode+table",
        ns_per_sample: ns,
        bytes_per_record: records[0].len(),
        dropped_pct: dropped,
    }
}

fn main() {
    let samples = std::env::var("PERF_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SAMPLES);
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let ibs = ibs_decoding_plan(CpuModel::UNKNOWN);
    let pf = pagefault_plan(&PageFaultConfig::default());
    let pool = 1 << 16;
    let ibs_all = records(pool, |page, t, _| ibs_record(&ibs, page, t, None));
    let ibs_mixed = records(pool, |page, t, rng| {
        let drop_kind = match rng.next_u64() % 8 {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        };
        ibs_record(&ibs, page, t, drop_kind)
    });
    let pf_records = records(pool, |page, t, _| pagefault_record(&pf, page, t));

    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let mut rows = Vec::new();
    if wanted("ibs decode") {
        rows.push(counting_row("ibs decode", &ibs, &ibs_all, samples));
    }
    if wanted("ibs decode+table") {
        rows.push(table_row(&ibs, &ibs_all, samples));
    }
    if wanted("ibs decode, 25% dropped") {
        rows.push(counting_row(
            "ibs decode, 25% dropped",
            &ibs,
            &ibs_mixed,
            samples,
        ));
    }
    if wanted("pagefault decode") {
        rows.push(counting_row("pagefault decode", &pf, &pf_records, samples));
    }
    println!(
        "perf parse path, 1 thread, {} M records per run, best of {RUNS}",
        samples / 1_000_000
    );
    println!(
        "{:<26} {:>8} {:>10} {:>14} {:>9}",
        "row", "bytes", "ns/sample", "M samples/s", "dropped"
    );
    for r in rows {
        println!(
            "{:<26} {:>8} {:>10.1} {:>14.2} {:>8.1}%",
            r.name,
            r.bytes_per_record,
            r.ns_per_sample,
            1000.0 / r.ns_per_sample,
            r.dropped_pct
        );
    }
}
