//! `pghotd` as users run it: batch replay, FIFO and stdin sources, signals, recording, and the
//! errors for bad input.

mod util;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A trace of pages on the lower tier (node 2) of the QEMU snapshot: `hot` pages sampled
/// `times` times each, for pids that need not exist.
fn lower_tier_trace(pids: &[u32], hot: u64, times: u64) -> String {
    let mut t = String::from("# pghot-trace v1\n");
    let mut time = 5_000_000_000u64;
    for round in 0..times {
        for &pid in pids {
            for page in 0..hot {
                time += 100;
                let cpu = page % 2;
                t.push_str(&format!(
                    "{time} {cpu} {pid} {pid} {:#x} - {} extmem 2 {}\n",
                    0x7f00_0000_0000u64 + page * 4096,
                    if round % 2 == 0 { "L" } else { "S" },
                    200 + page
                ));
            }
        }
    }
    t
}

fn replay(
    args: &[&str],
    trace: &str,
) -> (
    std::process::Output,
    serde_json::Map<String, serde_json::Value>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.trace");
    std::fs::write(&path, trace).unwrap();
    let stats = dir.path().join("stats.json");
    let out = util::run(
        util::replay(&path)
            .arg("--stats-json")
            .arg(&stats)
            .args(args),
        true,
    );
    let c = util::counters(&stats);
    (out, c)
}

#[test]
fn dry_run_replay_promotes_what_crosses_the_threshold() {
    // 2 pids x 50 pages x 3 samples; threshold 2 -> 100 candidates, all "promoted".
    let (_, c) = replay(
        &["--dry-run"],
        &lower_tier_trace(&[900_001, 900_002], 50, 3),
    );
    util::assert_counters(
        &c,
        &[
            ("hwhint_total_events", 300),
            ("hwhint_useful_events", 300),
            ("hwhint_extmem_accesses", 300),
            ("pghot_recorded_accesses", 300),
            ("source_trace_samples", 300),
            ("pgpromote_candidate", 100),
            ("pgpromote_success", 100),
            // cpu0 pages go to node0, cpu1 pages to node1 (nearest top-tier node).
            ("pgpromote_success_node0", 50),
            ("pgpromote_success_node1", 50),
            ("pgpromote_bytes_node0", 50 * 4096),
            ("pgpromote_bytes_node1", 50 * 4096),
            // Pids 900001/900002 do not exist: no pagemap, so every candidate is charged at
            // 4 KiB without its folio's size.
            ("folio_size_unknown", 100),
        ],
    );
}

#[test]
fn tunables_from_flags_change_the_outcome() {
    // Threshold 4 is never reached with 3 samples; with target 0 and a 1 MB/s limit, only 256
    // of 300 pages fit the first second's budget.
    let (_, c) = replay(
        &["--dry-run", "--freq-threshold", "4"],
        &lower_tier_trace(&[900_001], 50, 3),
    );
    assert_eq!(c["pgpromote_candidate"], 0);
    let (_, c) = replay(
        &[
            "--dry-run",
            "--freq-threshold",
            "1",
            "--target-nid",
            "0",
            "--promote-rate-limit-MBps",
            "1",
        ],
        &lower_tier_trace(&[900_001], 300, 1),
    );
    assert_eq!(c["pgpromote_candidate"], 300);
    assert_eq!(c["pgpromote_success_node0"], 256);
    assert_eq!(c["pgpromote_ratelimited"], 44);
}

#[test]
fn only_managed_pids_are_recorded() {
    let (_, c) = replay(
        &["--dry-run", "--pid", "900002"],
        &lower_tier_trace(&[900_001, 900_002], 10, 2),
    );
    assert_eq!(c["pghot_drop_out_of_scope"], 20);
    assert_eq!(c["pgpromote_success"], 10);
}

#[test]
fn several_sources_feed_one_table() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    // The same 20 pages of one pid, one sample each per source: only together do they reach
    // the threshold of 2.
    std::fs::write(&a, lower_tier_trace(&[900_001], 20, 1)).unwrap();
    std::fs::write(&b, lower_tier_trace(&[900_001], 20, 1)).unwrap();
    let stats = dir.path().join("stats.json");
    util::run(
        util::pghotd()
            .arg("--source")
            .arg(format!("trace:{}", a.display()))
            .arg("--source")
            .arg(format!("trace:{}", b.display()))
            .args(["--dry-run", "--sysfs-root"])
            .arg(util::qemu_3node())
            .arg("--stats-json")
            .arg(&stats),
        true,
    );
    let c = util::counters(&stats);
    assert_eq!(c["source_trace_samples"], 40);
    assert_eq!(c["pghot_recorded_accesses"], 40);
    assert_eq!(c["pgpromote_candidate"], 20);
    assert_eq!(c["pgpromote_success"], 20);
}

#[test]
fn stdin_source_replays_until_eof() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let mut child = util::pghotd()
        .args(["--source", "trace:-", "--dry-run", "--sysfs-root"])
        .arg(util::qemu_3node())
        .arg("--stats-json")
        .arg(&stats)
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lower_tier_trace(&[900_001], 20, 2).as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(util::counters(&stats)["pgpromote_success"], 20);
}

/// A FIFO in `dir` and a dry-run `pghotd` reading it, writing stats to `dir/stats.json`.
fn on_fifo(dir: &std::path::Path) -> (std::path::PathBuf, Command) {
    let fifo = dir.join("samples.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut cmd = util::pghotd();
    cmd.arg("--source")
        .arg(format!("trace:{}", fifo.display()))
        .args(["--dry-run", "--sysfs-root"])
        .arg(util::qemu_3node())
        .arg("--stats-json")
        .arg(dir.join("stats.json"));
    (fifo, cmd)
}

#[test]
fn fifo_source_ends_when_the_writer_closes_and_record_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let recording = dir.path().join("rec.trace");
    let (fifo, mut cmd) = on_fifo(dir.path());
    let child = cmd
        .arg("--record")
        .arg(&recording)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Two writers in turn: the source only ends when the last one has closed.
    let trace = lower_tier_trace(&[900_001], 30, 2);
    let (first, second) = trace.split_at(trace.len() / 2);
    let split = first.rfind('\n').unwrap() + 1;
    let (first, second) = (&trace[..split], format!("{}{second}", &first[split..]));
    {
        let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        w.write_all(first.as_bytes()).unwrap();
        let mut w2 = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        drop(w);
        w2.write_all(second.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let live = util::counters(&stats);
    assert_eq!(live["pgpromote_success"], 30);
    assert_eq!(live["hwhint_total_events"], 60);

    // The recording replays to the same counters.
    let text = std::fs::read_to_string(&recording).unwrap();
    let (_, replayed) = replay(&["--dry-run"], &text);
    assert_eq!(replayed, live);
}

#[test]
fn sigterm_stops_within_a_second_and_flushes_counters() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let (fifo, mut cmd) = on_fifo(dir.path());
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    // Feed some samples and keep the FIFO open so the source never ends by itself.
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    w.write_all(lower_tier_trace(&[900_001], 10, 2).as_bytes())
        .unwrap();
    w.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let sent = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    drop(w);
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(1), "stopped in {took:?}");
    let c = util::counters(&stats);
    assert_eq!(c["hwhint_total_events"], 20);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(doc["stop_reason"], "signal");
}

#[test]
fn duration_ends_a_run_on_an_idle_source() {
    let dir = tempfile::tempdir().unwrap();
    let (_fifo, mut cmd) = on_fifo(dir.path());
    let started = Instant::now();
    util::run(cmd.args(["--duration", "0.3"]), true);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

fn stderr_of(cmd: &mut Command, code: i32) -> String {
    let out = util::run(cmd, false);
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pghotd.toml");
    std::fs::write(&config, "freq_threshold = 2\nmigrate_batch = 0\n").unwrap();
    let err = stderr_of(
        util::pghotd()
            .arg("--config")
            .arg(&config)
            .arg("--check-config"),
        2,
    );
    assert!(
        err.contains("line 2: migrate_batch = 0 is out of range; allowed 1..=65536"),
        "{err}"
    );

    std::fs::write(&config, "freq_treshold = 2\n").unwrap();
    let err = stderr_of(
        util::pghotd()
            .arg("--config")
            .arg(&config)
            .arg("--check-config"),
        2,
    );
    assert!(err.contains("unknown field `freq_treshold`"), "{err}");

    let err = stderr_of(util::pghotd().args(["--config", "/nonexistent.toml"]), 2);
    assert!(err.contains("reading config /nonexistent.toml"), "{err}");

    let err = stderr_of(
        util::pghotd().args(["--source", "trace:/nonexistent.trace"]),
        2,
    );
    assert!(err.contains("opening trace /nonexistent.trace"), "{err}");

    let err = stderr_of(util::pghotd().args(["--source", "ibs:x"]), 2);
    assert!(err.contains("unknown source 'ibs:x'"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("none.toml");
    std::fs::write(&empty, "enabled_sources = []\n").unwrap();
    let err = stderr_of(
        util::pghotd()
            .arg("--config")
            .arg(&empty)
            .arg("--sysfs-root")
            .arg(util::qemu_3node()),
        2,
    );
    assert!(err.contains("no sample source given"), "{err}");

    // Node 2 is the lower tier of the snapshot: not a valid promotion target.
    let err = stderr_of(
        util::pghotd()
            .args(["--target-nid", "2", "--check-config", "--sysfs-root"])
            .arg(util::qemu_3node()),
        2,
    );
    assert!(
        err.contains("node 2 is not a top-tier memory node here (top tier: 0, 1)"),
        "{err}"
    );

    let err = stderr_of(
        util::pghotd().args(["--duration", "0", "--source", "trace:-"]),
        2,
    );
    assert!(err.contains("--duration"), "{err}");
}

#[test]
fn check_config_reports_what_it_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pghotd.toml");
    std::fs::write(
        &config,
        "enabled_sources = [\"trace:-\"]\nfreq_threshold = 1\ntarget_nid = 1\n",
    )
    .unwrap();
    let out = util::run(
        util::pghotd()
            .arg("--config")
            .arg(&config)
            .args(["--check-config", "--sysfs-root"])
            .arg(util::qemu_3node()),
        true,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("file: {}", config.display())),
        "{text}"
    );
    assert!(text.contains("sources: trace:-"), "{text}");
    assert!(text.contains("node2 lower tier 67"), "{text}");
    // Every setting in effect, one per line, as `pghotctl config get` names it.
    assert!(text.contains("\n  freq_threshold = 1\n"), "{text}");
    assert!(text.contains("\n  target_nid = 1\n"), "{text}");
    assert!(text.contains("\n  migrate_batch = 512\n"), "{text}");
    assert!(
        text.contains("\n  ibs.l3miss_only = (unset: on where the PMU has it)\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  admission.duplex_filter_KiB = 256\n"),
        "{text}"
    );
}
