//! The real pipeline against a real child process: a trace of the child's own pages replayed
//! through `pghotd` with the real move_pages(2), every counter checked.
//!
//! This machine has one NUMA node, so the trace claims the child's pages sit on node 2 of the
//! QEMU topology snapshot (`--sysfs-root`). The kernel's answers are real: its query finds the
//! touched pages on node 0 (top tier: `pgpromote_already_toptier`), untouched ones not present,
//! an unmapped address faulting, and a process that has exited gone. Cross-node moves are
//! proven in the QEMU rig.

mod util;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "PGHOT_TEST_CHILD";
const PAGE: u64 = 4096;

/// Run as the child (re-executed test binary): allocate 16 pages, touch the first 8, print the
/// buffer's page-aligned address, and wait until stdin closes.
#[test]
fn child_process_main() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    // calloc-backed: pages not written stay unpopulated.
    let buf = vec![0u8; 64 * PAGE as usize];
    let base = (buf.as_ptr() as u64).next_multiple_of(PAGE);
    for i in 0..8 {
        let p = (base + i * PAGE) as *mut u8;
        // SAFETY: p lies inside `buf` (base + 8 pages < start + 64 pages), which is alive and
        // only written through this pointer while the test holds it.
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
fn spawn_child() -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
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
    let mut child = spawn_child();
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
        util::pghotd()
            .arg("--source")
            .arg(format!("trace:{}", trace.display()))
            .arg("--sysfs-root")
            .arg(util::qemu_3node())
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
        ],
    );
    // One query per (pid) group, no move: nothing was on a lower tier.
    assert_eq!(c["migrator_move_pages_calls"].as_u64(), Some(2));
}
