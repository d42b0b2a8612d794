//! pghot-trace v1 cost per line: `TraceWriter::write_sample` (what `--record` and
//! pghot-workload's emulated samples pay) and `parse_line` (what the trace source pays).
//!
//! Run with `cargo bench --bench trace`; prints a table. `TRACE_LINES=<n>` sets lines per run.

use std::hint::black_box;
use std::time::Instant;

use pghotd::sample::{AccessOp, DataSource, Sample, SourceKind};
use pghotd::sampler::trace::{TraceWriter, parse_line};

const RUNS: usize = 3;

/// Samples shaped like pghot-workload's: no paddr, node or latency; varying time and address.
fn samples(n: usize) -> Vec<Sample> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n as u64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Sample {
                time_ns: 3_406_969_560_139 + i * 250,
                cpu: (x & 1) as u32,
                pid: 8381,
                tid: 8386,
                vaddr: 0x7f0d_0000_0000 + (x & 0xfff_ffc0),
                paddr: None,
                op: if x & 2 == 0 {
                    AccessOp::Load
                } else {
                    AccessOp::Store
                },
                served_from: DataSource::Unknown,
                node: None,
                latency: None,
                source: SourceKind::Trace,
            }
        })
        .collect()
}

fn best_ns_per(n: usize, mut f: impl FnMut()) -> f64 {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n: usize = std::env::var("TRACE_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let input = samples(n);
    let mut text = Vec::new();
    let write_ns = best_ns_per(n, || {
        let mut w = TraceWriter::new(Vec::with_capacity(n * 48)).expect("writing to memory");
        for s in &input {
            w.write_sample(s).expect("writing to memory");
        }
        text = w.into_inner();
    });
    let text = String::from_utf8(text).expect("the writer writes ASCII");
    let lines: Vec<&str> = text.lines().collect();
    let mut parsed = 0usize;
    let parse_ns = best_ns_per(lines.len(), || {
        parsed = lines
            .iter()
            .filter_map(|l| parse_line(l).expect("writer output parses"))
            .fold(0, |n, s| {
                black_box(s);
                n + 1
            });
    });
    assert_eq!(parsed, n, "every written sample parses back");
    println!(
        "pghot-trace v1, {n} lines of {} bytes on average, best of {RUNS} runs",
        text.len() / n
    );
    println!();
    println!("| operation                  | ns/line |");
    println!("|----------------------------|---------|");
    println!("| TraceWriter::write_sample  | {write_ns:7.1} |");
    println!("| parse_line                 | {parse_ns:7.1} |");
}
