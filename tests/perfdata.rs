//! `--source perfdata:FILE` on files the real `perf` writes here: `perf record -e page-faults -c 1
//! -d` of `pghot-workload` touching a buffer of known pages, replayed in a dry run, against what
//! `perf script` lists for the same file. Needs perf (Debian package `linux-perf`) and root or
//! CAP_PERFMON, as CI has; the fixture test in `src/sampler/perfdata/tests.rs` covers the
//! reader without them.

mod util;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use pghotd::sampler::trace::parse_line;
use util::{counters, pghotd, run, workload_buffer_and_pid};

/// `perf script`'s sample lines of `event` in `data`.
fn perf_script_lines(data: &Path, event: &str) -> usize {
    let out = run(
        Command::new("perf")
            .arg("script")
            .arg("-i")
            .arg(data)
            .args(["-F", "event,pid,addr"]),
        true,
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .any(|w| w.trim_end_matches(':') == event)
        })
        .count()
}

#[test]
fn a_perf_record_of_a_known_buffer_replays_exactly_what_perf_script_lists() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pf.data");
    // 4 MiB placed on node 0: the placement touches each of its 1024 pages once.
    let out = run(
        Command::new("perf")
            .args(["record", "-e", "page-faults", "-c", "1", "-d", "-o"])
            .arg(&data)
            .arg("--")
            .arg(util::workspace_bin("pghot-workload"))
            .args(["--size-mb", "4", "--pattern", "uniform", "--node", "0"])
            .args(["--duration", "0.1"]),
        true,
    );
    let ((lo, hi), child) = workload_buffer_and_pid(&String::from_utf8_lossy(&out.stdout));
    let listed = perf_script_lines(&data, "page-faults");
    assert!(listed >= 1024, "perf script lists {listed} samples");

    let (rec, stats) = (dir.path().join("rec.trace"), dir.path().join("stats.json"));
    let replay = run(
        pghotd()
            .arg("--source")
            .arg(format!("perfdata:{}", data.display()))
            .arg("--dry-run")
            .arg("--record")
            .arg(&rec)
            .arg("--stats-json")
            .arg(&stats)
            .args(["--log", "info"]),
        true,
    );
    let log = String::from_utf8_lossy(&replay.stderr);
    assert!(log.contains("done (SourcesEnded)"), "{log}");

    let c = counters(&stats);
    let get = |name: &str| c[name].as_u64().unwrap_or_else(|| panic!("{name}"));
    assert_eq!(get("source_pagefault_samples"), listed as u64, "{log}");
    for none in [
        "perf_bad_records",
        "hwhint_invalid_samples",
        "perfdata_skipped_samples",
        "pghot_source_lost_records",
    ] {
        assert_eq!(get(none), 0, "{none}:\n{log}");
    }
    let text = std::fs::read_to_string(&rec).unwrap();
    let samples: Vec<_> = text
        .lines()
        .filter_map(|l| parse_line(l).unwrap())
        .collect();
    assert_eq!(samples.len(), listed);
    let pages: HashSet<u64> = samples
        .iter()
        .filter(|s| s.pid == child && (lo..hi).contains(&s.vaddr))
        .map(|s| s.vaddr >> 12)
        .collect();
    let want: HashSet<u64> = (lo >> 12..hi.div_ceil(4096)).collect();
    assert_eq!(
        want.difference(&pages).count(),
        0,
        "buffer pages never sampled"
    );
}

#[test]
fn a_file_that_is_not_perf_data_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not.data");
    std::fs::write(&path, vec![b'x'; 200]).unwrap();
    let out = run(
        pghotd()
            .arg("--source")
            .arg(format!("perfdata:{}", path.display()))
            .arg("--dry-run"),
        false,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&path.display().to_string()) && err.contains("not a perf.data file"),
        "{err}"
    );
}
