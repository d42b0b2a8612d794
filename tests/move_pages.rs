//! The real pipeline against a real child process: a trace of the child's own pages replayed
//! through `pghotd` with the real move_pages(2), every counter checked.
//!
//! This machine has one NUMA node, so the trace claims the child's pages sit on node 2 of the
//! QEMU topology snapshot (`--sysfs-root`). The kernel's answers are real: its query finds the
//! touched pages on node 0 (top tier: `pgpromote_already_toptier`), untouched ones not present,
//! an unmapped address faulting, and a process that has exited gone. Cross-node moves are
//! proven in the QEMU rig. A SIGTERM while the migrator works on such a process ends the run
//! within a second with every candidate in one outcome counter.

mod util;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "PGHOT_TEST_CHILD";
const PAGE: u64 = 4096;

/// Run as the child (re-executed test binary): allocate `$PGHOT_TEST_CHILD` + 64 pages, touch
/// the first `$PGHOT_TEST_CHILD`, print the buffer's page-aligned address, and wait until stdin
/// closes.
#[test]
fn child_process_main() {
    let Some(touched) = std::env::var(CHILD_ENV)
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return;
    };
    // calloc-backed: pages not written stay unpopulated.
    let buf = vec![0u8; ((touched + 64) * PAGE) as usize];
    let base = (buf.as_ptr() as u64).next_multiple_of(PAGE);
    for i in 0..touched {
        let p = (base + i * PAGE) as *mut u8;
        // SAFETY: p lies inside `buf` (base + touched pages < start + touched + 64 pages),
        // which is alive and only written through this pointer while the test holds it.
        unsafe { p.write_volatile(1) };
    }
    println!("\n{base:#x}");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(buf);
}

struct Child {
    child: std::process::Child,
    base: u64,
    /// Kept open so the child's test harness can still print its result.
    _stdout: BufReader<std::process::ChildStdout>,
}

// The caller waits for the child once the replay is done.
#[allow(clippy::zombie_processes)]
fn spawn_child(touched: u64) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, touched.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
        // libtest may print "test child_process_main ... " on the same line.
        if let Some(hex) = line.split_whitespace().find_map(|w| w.strip_prefix("0x")) {
            let base = u64::from_str_radix(hex, 16).unwrap();
            return Child {
                child,
                base,
                _stdout: out,
            };
        }
    }
}

fn exited_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn replay_of_a_live_process_reaches_the_kernel_and_accounts_every_page() {
    let mut child = spawn_child(8);
    let pid = child.child.id();
    let gone = exited_pid();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("child.trace");
    let stats = dir.path().join("stats.json");

    let mut t = String::from("# pghot-trace v1\n");
    let mut time = 1_000_000_000u64;
    let mut line = |pid: u32, vaddr: u64, node: &str, src: &str| {
        time += 1000;
        t.push_str(&format!(
            "{time} 1 {pid} {pid} {vaddr:#x} - L {src} {node}\n"
        ));
    };
    // Touched pages 0..4: each sampled twice on "node 2" -> 4 candidates, found on node 0.
    for _ in 0..2 {
        for i in 0..4 {
            line(pid, child.base + i * PAGE, "2", "extmem");
        }
    }
    // Untouched page 40 of the buffer: not present.
    line(pid, child.base + 40 * PAGE, "2", "extmem");
    line(pid, child.base + 40 * PAGE, "2", "extmem");
    // Nothing mapped at 0x10000 (below mmap_min_addr): the kernel reports -EFAULT.
    line(pid, 0x10000, "2", "extmem");
    line(pid, 0x10000, "2", "extmem");
    // A process that has exited: ESRCH for its page.
    line(gone, 0x7f00_0000_0000, "2", "extmem");
    line(gone, 0x7f00_0000_0000, "2", "extmem");
    // Top-tier accesses: counted, never candidates.
    line(pid, child.base + 5 * PAGE, "0", "dram");
    // Outside the managed scope.
    line(4_000_000, 0x7f00_0000_0000, "2", "extmem");
    // One page sampled once: below freq_threshold 2.
    line(pid, child.base + 6 * PAGE, "2", "extmem");
    // No node in the sample: pghotd asks the kernel. A touched page is found on node 0 (top
    // tier); an untouched one is unknown to the kernel and dropped.
    line(pid, child.base + 7 * PAGE, "-", "unknown");
    line(pid, child.base + 41 * PAGE, "-", "unknown");
    t.push_str("this line is malformed\n");
    std::fs::write(&trace, t).unwrap();

    let out = util::run(
        util::replay(&trace)
            .args(["--pid", &pid.to_string(), "--pid", &gone.to_string()])
            .arg("--stats-json")
            .arg(&stats),
        true,
    );
    drop(child.child.stdin.take());
    child.child.wait().unwrap();

    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(":21: skipped malformed line"), "{stderr}");
    let c = util::counters(&stats);
    util::assert_counters(
        &c,
        &[
            ("hwhint_total_events", 19),
            ("hwhint_useful_events", 17),
            ("hwhint_dropped_events", 2),
            ("pghot_drop_out_of_scope", 1),
            ("pghot_drop_unknown_node", 1),
            ("pghot_node_queries", 1),
            ("hwhint_dram_accesses", 2),
            ("hwhint_extmem_accesses", 15),
            ("pghot_recorded_accesses", 15),
            ("source_trace_samples", 19),
            ("trace_bad_lines", 1),
            ("pgpromote_candidate", 7),
            ("pgpromote_already_toptier", 4),
            ("pgpromote_fail_not_present", 1),
            ("pgpromote_fail_fault", 1),
            ("pgpromote_fail_no_process", 1),
            // The exited process's candidate: its pagemap is gone, so its folio is unknown.
            ("folio_size_unknown", 1),
        ],
    );
    // One query per (pid) group, no move: nothing was on a lower tier.
    assert_eq!(c["migrator_move_pages_calls"].as_u64(), Some(2));
}

/// `pages` pages of `pid` from `first` on, two samples each on the lower tier (node 2 of the
/// snapshot), in pghot-trace v1.
fn lower_tier_pairs(pid: u32, base: u64, first: u64, pages: u64) -> String {
    let mut t = String::new();
    for round in 0..2 {
        for page in first..first + pages {
            let time = 1_000_000_000 + (round * 100_000 + page) * 1000;
            t.push_str(&format!(
                "{time} 0 {pid} {pid} {:#x} - L extmem 2\n",
                base + page * PAGE
            ));
        }
    }
    t
}

#[test]
fn sigterm_while_the_migrator_works_on_a_live_process_accounts_every_candidate() {
    // The migrator wakes when BATCH candidates wait and drains everything queued; its
    // interval is too long to come during the test, so fewer than BATCH just wait.
    const BATCH: u64 = 4096;
    const QUEUED: u64 = 300;
    const STREAMED: u64 = 1000;
    let mut child = spawn_child(BATCH + QUEUED + STREAMED);
    let pid = child.child.id();
    let dir = tempfile::tempdir().unwrap();
    let (fifo, socket, stats) = (
        dir.path().join("samples.fifo"),
        dir.path().join("ctl.sock"),
        dir.path().join("stats.json"),
    );
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut daemon = util::pghotd_bare()
        .arg("--source")
        .arg(format!("trace:{}", fifo.display()))
        .arg("--sysfs-root")
        .arg(util::qemu_3node())
        .args(["--pid", &pid.to_string()])
        .args(["--migrate-batch", &BATCH.to_string()])
        .args(["--migrate-interval-ms", "60000"])
        .arg("--socket")
        .arg(&socket)
        .arg("--stats-json")
        .arg(&stats)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    // One full batch goes through the real move_pages query (the pages are on node 0, a top
    // tier). The migrator's counters are live; the recorders' are folded every 1024 samples.
    w.write_all(lower_tier_pairs(pid, child.base, 0, BATCH).as_bytes())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = util::run(util::pghotctl(&socket).args(["stats", "--json"]), true);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if v["counters"]["pgpromote_already_toptier"].as_u64() == Some(BATCH) {
            break;
        }
        assert!(Instant::now() < deadline, "the batch never ran: {v:#}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // These wait in the queue.
    w.write_all(lower_tier_pairs(pid, child.base, BATCH, QUEUED).as_bytes())
        .unwrap();
    // And samples keep arriving while the signal lands.
    let streamer = std::thread::spawn(move || {
        for page in BATCH + QUEUED..BATCH + QUEUED + STREAMED {
            if w.write_all(lower_tier_pairs(pid, child.base, page, 1).as_bytes())
                .is_err()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = daemon.wait().unwrap();
    let took = sent.elapsed();
    streamer.join().unwrap();
    let mut log = String::new();
    daemon
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    drop(child.child.stdin.take());
    child.child.wait().unwrap();
    assert!(status.success(), "{status}\n{log}");
    assert!(took < Duration::from_secs(1), "stopped in {took:?}\n{log}");

    let c = util::counters(&stats);
    let get = |name: &str| c.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
    // Every candidate ends in exactly one outcome (see `Counter::PgpromoteCandidate`).
    let outcomes: u64 = c
        .iter()
        .filter(|(name, _)| {
            name.starts_with("pgpromote_")
                && !name.starts_with("pgpromote_success_node")
                && !name.starts_with("pgpromote_bytes_node")
                && *name != "pgpromote_candidate"
        })
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert_eq!(outcomes, get("pgpromote_candidate"), "{c:#?}\n{log}");
    // The batch that ran, and the queued rest plus what streamed in before the source stopped
    // abandoned: nothing else.
    assert_eq!(get("pgpromote_already_toptier"), BATCH, "{c:#?}");
    let abandoned = get("pgpromote_abandoned");
    assert!(
        (QUEUED..QUEUED + STREAMED).contains(&abandoned),
        "{abandoned} abandoned: {c:#?}"
    );
    assert_eq!(get("pgpromote_candidate"), BATCH + abandoned, "{c:#?}");
    // Every sample read was recorded (2 per page): none lost on the way out.
    assert_eq!(
        get("pghot_recorded_accesses"),
        2 * get("pgpromote_candidate"),
        "{c:#?}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(doc["stop_reason"], "signal");
}
