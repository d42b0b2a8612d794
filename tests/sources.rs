//! The software sources (`--source softdirty`, `--source damon`) against live processes.
//!
//! Each test takes the path this kernel allows: with soft-dirty tracking (CONFIG_MEM_SOFT_DIRTY)
//! pghotd must see the workload's writes; without it, it must refuse with exit 3 naming the
//! option. DAMON likewise, and whatever happens, kdamonds pghotd did not create must be exactly
//! as they were (the CI host runs one of its own). The QEMU rig runs both sources for real.

mod util;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A workload on node 0 writing a 16 MiB buffer for `secs`; killed when dropped.
struct Workload(Child);

impl Workload {
    fn start(secs: &str) -> Workload {
        Workload::start_as(util::workload(), secs)
    }

    /// The workload run as `cmd` (e.g. a copy under another name, for a `--comm` scope).
    fn start_as(mut cmd: Command, secs: &str) -> Workload {
        let child = cmd
            .args([
                "--size-mb",
                "16",
                "--hot-mb",
                "4",
                "--pattern",
                "hot-scattered",
            ])
            .args([
                "--node",
                "0",
                "--write-pct",
                "50",
                "--report-ms",
                "500",
                "--duration",
                secs,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning pghot-workload");
        // Let it map and touch its buffer.
        std::thread::sleep(Duration::from_millis(500));
        Workload(child)
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pghotd_with(source: &str, pid: &str, stats: &Path, extra: &[&str]) -> Command {
    let mut cmd = util::pghotd();
    cmd.args([
        "--source",
        source,
        "--pid",
        pid,
        "--dry-run",
        "--stats-json",
    ])
    .arg(stats)
    .args(["--sysfs-root"])
    .arg(util::qemu_3node())
    .args(extra);
    cmd
}

#[test]
fn software_sources_need_selected_processes() {
    for (source, needs) in [
        (
            "softdirty",
            "softdirty watches processes, not the whole system: it needs explicit pids (--pid), \
             a cgroup (--cgroup) or a command regex (--comm)",
        ),
        (
            "damon",
            "damon watches processes, not the whole system: it needs explicit pids (--pid), a \
             cgroup (--cgroup) or a command regex (--comm)",
        ),
    ] {
        let out = util::run_code(
            util::pghotd().args(["--source", source, "--dry-run", "--duration", "1"]),
            2,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needs), "{err}");
    }
    // A command regex is a selection both follow: it gets past the selection check to the
    // kernel's. This host's kernel has neither CONFIG_MEM_SOFT_DIRTY nor CONFIG_DAMON_VADDR:
    // exit 3, naming the option; where they exist, an empty scope idles until --duration.
    for (source, option) in [
        ("softdirty", "CONFIG_MEM_SOFT_DIRTY"),
        ("damon", "CONFIG_DAMON"),
    ] {
        let out = util::pghotd()
            .args(["--source", source, "--comm", "^no-such-comm$", "--dry-run"])
            .args(["--duration", "1"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("watches processes"), "{source}: {err}");
        match out.status.code() {
            Some(0) => {}
            Some(3) => assert!(err.contains(option), "{source}: {err}"),
            // DAMON: every kdamond is someone else's.
            _ if source == "damon" => assert!(err.contains("no free kdamond"), "{err}"),
            code => panic!("{source}: exit {code:?}: {err}"),
        }
    }
}

/// pghotd's arguments: softdirty over the processes named `comm`, a pass every 200 ms for 2 s,
/// counters to `stats`.
fn softdirty_of_comm(cmd: &mut Command, comm: &str, stats: &Path) {
    cmd.args(["--source", "softdirty", "--comm", comm, "--dry-run"])
        .args([
            "--softdirty-interval-ms",
            "200",
            "--duration",
            "2",
            "--stats-json",
        ])
        .arg(stats)
        .arg("--sysfs-root")
        .arg(util::qemu_3node());
}

#[test]
fn softdirty_follows_a_command_regex() {
    let dir = tempfile::tempdir().unwrap();
    // A copy under a name of its own: other tests run workloads in parallel, and a followed
    // scope takes every process whose name matches.
    let exe = dir.path().join("pghot-sd-comm");
    std::fs::copy(util::workspace_bin("pghot-workload"), &exe).unwrap();
    let stats = dir.path().join("stats.json");
    let _wl = Workload::start_as(Command::new(&exe), "4");
    let mut cmd = util::pghotd();
    softdirty_of_comm(&mut cmd, "^pghot-sd-comm$", &stats);
    if pghotd::sampler::softdirty::check_support().is_err() {
        let out = util::run_code(&mut cmd, 3);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("it needs CONFIG_MEM_SOFT_DIRTY"), "{err}");
        return;
    }
    let out = util::run(&mut cmd, true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the processes in scope"), "{err}");
    let c = util::counters(&stats);
    let get = |k: &str| c.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    assert!(get("softdirty_scans") >= 5, "{c:#?}");
    assert!(get("softdirty_dirty_pages") >= 1024, "{c:#?}");
}

/// The service runs as root without CAP_DAC_OVERRIDE (systemd/pghotd.service leaves it out
/// unless granted): another user's process in a followed scope has /proc files pghotd may not
/// open (clear_refs 0200, pagemap 0400). It is skipped and counted; pghotd keeps running.
#[test]
fn softdirty_skips_processes_it_may_not_open_and_keeps_running() {
    if !nix::unistd::geteuid().is_root() || pghotd::sampler::softdirty::check_support().is_err() {
        eprintln!("skipped: needs root (a process of another user) and soft-dirty tracking");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("pghot-sd-other");
    std::fs::copy(util::workspace_bin("pghot-workload"), &exe).unwrap();
    let mut as_nobody = Command::new(&exe);
    as_nobody.uid(65534).gid(65534);
    let _wl = Workload::start_as(as_nobody, "4");
    let stats = dir.path().join("stats.json");
    // setpriv (util-linux): the bounding set of the unit, minus nothing else pghotd needs.
    let mut cmd = Command::new("setpriv");
    cmd.args(["--bounding-set", "-dac_override,-dac_read_search", "--"])
        .arg(util::workspace_bin("pghotd"));
    softdirty_of_comm(&mut cmd, "^pghot-sd-other$", &stats);
    let out = util::run(&mut cmd, true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("need CAP_DAC_OVERRIDE"), "{err}");
    assert_eq!(
        err.matches("softdirty: skipping pid").count(),
        1,
        "said once: {err}"
    );
    let c = util::counters(&stats);
    let get = |k: &str| c.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    assert!(
        get("softdirty_denied") >= 5,
        "a pass every 200 ms for 2 s: {c:#?}"
    );
    assert_eq!(get("source_softdirty_samples"), 0, "{c:#?}");
}

#[test]
fn a_pid_that_does_not_exist_is_named() {
    let out = util::run_code(
        util::pghotd().args(["--source", "softdirty", "--pid", "4194000", "--dry-run"]),
        2,
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pid 4194000 does not exist"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn softdirty_sees_the_workloads_writes_or_names_the_missing_option() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let wl = Workload::start("4");
    let mut cmd = pghotd_with(
        "softdirty",
        &wl.pid(),
        &stats,
        &["--softdirty-interval-ms", "200", "--duration", "2"],
    );
    if pghotd::sampler::softdirty::check_support().is_err() {
        let out = util::run_code(&mut cmd, 3);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("it needs CONFIG_MEM_SOFT_DIRTY"), "{err}");
        return;
    }
    util::run(&mut cmd, true);
    let c = util::counters(&stats);
    let get = |k: &str| c.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    // 16 MiB = 4096 pages scanned per pass at least; the 1024-page hot set is written.
    assert!(get("softdirty_scans") >= 5, "{c:#?}");
    assert!(get("softdirty_pages_scanned") >= 5 * 4096, "{c:#?}");
    assert!(get("softdirty_dirty_pages") >= 1024, "{c:#?}");
    assert!(get("softdirty_scan_ns") > 0, "{c:#?}");
    assert_eq!(
        get("source_softdirty_samples"),
        get("softdirty_dirty_pages")
    );
    // Node 0 is a top-tier node of the fixture: counted, nothing to promote.
    assert!(get("hwhint_dram_accesses") >= 1024, "{c:#?}");
    assert_eq!(get("pgpromote_candidate"), 0, "{c:#?}");
}

#[test]
fn softdirty_ends_when_its_pid_exits() {
    if pghotd::sampler::softdirty::check_support().is_err() {
        return; // covered by the test above
    }
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let wl = Workload::start("1");
    util::run(
        &mut pghotd_with(
            "softdirty",
            &wl.pid(),
            &stats,
            &["--softdirty-interval-ms", "100", "--duration", "20"],
        ),
        true,
    );
    let c = util::counters(&stats);
    assert_eq!(c["source_pid_exits"], 1, "{c:#?}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(doc["stop_reason"], "sources_ended");
}

/// Held by each test that claims a kdamond: the tests of this file run in parallel, and one
/// must not find the other's kdamond in the middle of its before-and-after comparison.
static KDAMONDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Every kdamond's state, pid and configuration summary, to compare before and after.
fn kdamonds() -> Vec<String> {
    let root = Path::new("/sys/kernel/mm/damon/admin/kdamonds");
    let read = |rel: &str| {
        std::fs::read_to_string(root.join(rel))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|e| format!("<{e}>"))
    };
    let n: u32 = read("nr_kdamonds").parse().unwrap_or(0);
    (0..n)
        .map(|k| {
            let c = format!("{k}/contexts/0");
            format!(
                "{k}: state {} pid {} contexts {} ops {} targets {} schemes {} action {}",
                read(&format!("{k}/state")),
                read(&format!("{k}/pid")),
                read(&format!("{k}/contexts/nr_contexts")),
                read(&format!("{c}/operations")),
                read(&format!("{c}/targets/nr_targets")),
                read(&format!("{c}/schemes/nr_schemes")),
                read(&format!("{c}/schemes/0/action")),
            )
        })
        .collect()
}

#[test]
fn damon_runs_or_refuses_and_never_touches_other_kdamonds() {
    let _kdamonds = KDAMONDS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let wl = Workload::start("4");
    let before = kdamonds();
    let out = pghotd_with("damon", &wl.pid(), &stats, &["--duration", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Ours is gone again, and everyone else's is as it was (a running kdamond keeps its pid).
    let after = kdamonds();
    let others_before: Vec<&String> = before
        .iter()
        .filter(|k| !k.contains("contexts 0"))
        .collect();
    let others_after: Vec<&String> = after.iter().filter(|k| !k.contains("contexts 0")).collect();
    assert_eq!(others_before, others_after, "pghotd stderr:\n{err}");
    match out.status.code() {
        Some(0) => {
            let c = util::counters(&stats);
            assert!(c["damon_snapshots"].as_u64().unwrap_or(0) >= 5, "{c:#?}");
            assert!(c["damon_regions_seen"].as_u64().unwrap_or(0) >= 1, "{c:#?}");
            assert!(
                c["source_damon_samples"].as_u64().unwrap_or(0) >= 1,
                "{c:#?}"
            );
        }
        // No DAMON, or no vaddr ops in this kernel.
        Some(3) => assert!(err.contains("CONFIG_DAMON"), "{err}"),
        // Every kdamond belongs to someone else.
        _ => assert!(
            err.contains("no free kdamond") && err.contains("pghotd will not"),
            "{err}"
        ),
    }
}

/// A copy of the captured 3-node sysfs tree with DAMON's admin directory added, root's files at
/// the kernel's modes (mm/damon/sysfs.c's attributes are 0600, its directories 0755), every
/// directory on the way searchable by anyone.
fn sysfs_with_damon(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let root = dir.join("sysfs");
    let status = Command::new("cp")
        .arg("-r")
        .arg(util::qemu_3node())
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success());
    let kdamonds = root.join("kernel/mm/damon/admin/kdamonds");
    std::fs::create_dir_all(&kdamonds).unwrap();
    let nr = kdamonds.join("nr_kdamonds");
    std::fs::write(&nr, "0\n").unwrap();
    std::fs::set_permissions(&nr, std::fs::Permissions::from_mode(0o600)).unwrap();
    let status = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::set_permissions(&nr, std::fs::Permissions::from_mode(0o600)).unwrap();
    nr
}

#[test]
fn damon_that_pghotd_may_not_write_is_refused_at_the_open_and_auto_passes_it_over() {
    let dir = tempfile::tempdir().unwrap();
    let nr = sysfs_with_damon(dir.path());
    let sysfs = dir.path().join("sysfs");
    // nobody, with no capability, cannot write root's 0600 attribute: DAMON is unusable, and
    // saying so at the open lets `auto` go on to the next source rather than fail once running.
    let pid = std::process::id().to_string();
    for (source, code) in [("damon", Some(2)), ("auto", None)] {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_pghotd"))
            .args([
                "--source",
                source,
                "--pid",
                &pid,
                "--dry-run",
                "--log",
                "debug",
            ])
            .args(["--duration", "0.5", "--sysfs-root"])
            .arg(&sysfs)
            .arg("--socket")
            .arg(dir.path().join(format!("{source}.sock")));
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let why = format!("{} is not writable (Permission denied", nr.display());
        assert!(err.contains(&why), "{source}: {err}");
        if let Some(code) = code {
            assert_eq!(out.status.code(), Some(code), "{source}: {err}");
        } else {
            assert!(!err.contains("source auto chose damon"), "{err}");
        }
    }
}

/// The largest "System RAM" range in /proc/iomem (root sees the real addresses), `[start, end)`.
fn largest_ram_range() -> Option<(u64, u64)> {
    std::fs::read_to_string("/proc/iomem")
        .ok()?
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(": System RAM"))
        .filter_map(|l| {
            let (a, b) = l.split(' ').next()?.split_once('-')?;
            let (a, b) = (
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            );
            (a < b).then_some((a, b + 1))
        })
        .max_by_key(|(a, b)| b - a)
}

/// pghotd's reader of DAMON's `damon_aggregated` tracepoint on a real kdamond. This host's
/// kernel has no vaddr operations, so the kdamond watches physical memory (paddr) over the
/// largest RAM range while a thread keeps 64 MiB busy; the record layout, the per-task event on
/// the kernel thread and the grouping into aggregations are the kernel's, as with vaddr.
/// Expected by hand: about one whole aggregation per 100 ms aggregation interval, none torn,
/// no more records than 1000 regions (nr_regions/max) an aggregation, every accessed region
/// inside the range, disjoint and in order, with at most aggr / sample = 20 sampling intervals
/// seen accessed.
#[test]
fn damons_aggregated_tracepoint_on_a_real_kdamond_reads_whole_aggregations() {
    use pghotd::sampler::damon::aggregated::{self, AggregatedEvent, Assembler};
    use pghotd::sampler::damon::sysfs::Admin;

    let _kdamonds = KDAMONDS.lock().unwrap_or_else(|e| e.into_inner());
    let k_root = Path::new("/sys/kernel/mm/damon/admin/kdamonds");
    let tracefs = Path::new("/sys/kernel/tracing/events/damon/damon_aggregated/id");
    let admin = Admin::open(Path::new("/sys")).ok();
    // A free kdamond, or the first one made where there are none (and unmade after).
    let free = admin.as_ref().and_then(|a| match a.find_free() {
        Ok(Some(k)) => Some((k, false)),
        Ok(None) => a.write("nr_kdamonds", "1").ok().map(|()| (0, true)),
        Err(_) => None,
    });
    let (Some(admin), Some((k, made)), true, Some((lo, hi))) =
        (admin, free, tracefs.is_file(), largest_ram_range())
    else {
        // CI mounts tracefs (.ci/run) on a kernel with DAMON: there this must run.
        assert!(
            std::env::var_os("PGHOTD_REQUIRE_TOOLS").is_none_or(|v| v != "1"),
            "needs root, DAMON's sysfs with a free kdamond, and tracefs mounted at \
             /sys/kernel/tracing, and PGHOTD_REQUIRE_TOOLS=1"
        );
        eprintln!(
            "\n*** SKIPPED: needs root, DAMON's sysfs with a free kdamond, and tracefs mounted \
             at /sys/kernel/tracing; this test did not run ***\n"
        );
        return;
    };
    let ctx = format!("{k}/contexts/0");
    let avail = {
        admin
            .write(&format!("{k}/contexts/nr_contexts"), "1")
            .unwrap();
        admin.read(&format!("{ctx}/avail_operations")).unwrap()
    };
    if !avail.split_whitespace().any(|o| o == "paddr") {
        admin
            .write(&format!("{k}/contexts/nr_contexts"), "0")
            .unwrap();
        if made {
            admin.write("nr_kdamonds", "0").unwrap();
        }
        eprintln!("skipped: no paddr operations ({avail})");
        return;
    }
    for (rel, value) in [
        (format!("{ctx}/operations"), "paddr".to_string()),
        (
            format!("{ctx}/monitoring_attrs/intervals/sample_us"),
            "5000".into(),
        ),
        (
            format!("{ctx}/monitoring_attrs/intervals/aggr_us"),
            "100000".into(),
        ),
        (
            format!("{ctx}/monitoring_attrs/nr_regions/max"),
            "1000".into(),
        ),
        (
            format!("{ctx}/monitoring_attrs/nr_regions/min"),
            "10".into(),
        ),
        (format!("{ctx}/targets/nr_targets"), "1".into()),
        (format!("{ctx}/targets/0/regions/nr_regions"), "1".into()),
        (format!("{ctx}/targets/0/regions/0/start"), lo.to_string()),
        (format!("{ctx}/targets/0/regions/0/end"), hi.to_string()),
        (format!("{k}/state"), "on".into()),
    ] {
        admin.write(&rel, &value).unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 20];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for i in (0..buf.len()).step_by(4096) {
                    buf[i] = buf[i].wrapping_add(1);
                }
            }
            std::hint::black_box(&buf);
        })
    };
    let tid: u32 = std::fs::read_to_string(k_root.join(format!("{k}/pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let opened = AggregatedEvent::open(
        Path::new("/sys"),
        tid,
        aggregated::ring_pages(1000, 100_000),
    );
    let mut wholes = Vec::new();
    let (mut records, mut lost) = (0, 0);
    let mut asm = Assembler::new(1);
    let result = opened.map(|mut event| {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(1500) {
            std::thread::sleep(Duration::from_millis(200));
            let got = event.drain(&mut asm, |a| {
                let mut out = Vec::new();
                a.take(&mut out);
                wholes.push(out);
            });
            records += got.records;
            lost += got.lost;
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.join().unwrap();
    admin.write(&format!("{k}/state"), "off").unwrap();
    admin
        .write(&format!("{k}/contexts/nr_contexts"), "0")
        .unwrap();
    if made {
        admin.write("nr_kdamonds", "0").unwrap();
    }
    result.unwrap();
    assert!(
        (8..=20).contains(&wholes.len()),
        "{} whole aggregations in 1.5 s, {records} records",
        wholes.len()
    );
    assert_eq!((asm.torn, asm.foreign, lost), (0, 0, 0));
    // Each whole aggregation is at least one record, and at most nr_regions/max (1000) plus
    // the partial aggregations at either end of the window.
    assert!(
        (wholes.len()..=(wholes.len() + 2) * 1000).contains(&records),
        "{records} records"
    );
    let mut accessed = 0;
    for whole in &wholes {
        assert_eq!(whole.len(), 1);
        let regions = &whole[0];
        accessed += regions.len();
        for pair in regions.windows(2) {
            assert!(pair[0].end <= pair[1].start, "{pair:?}");
        }
        for r in regions {
            assert!(
                lo <= r.start && r.start < r.end && r.end <= hi,
                "{r:?} in {lo:#x}-{hi:#x}"
            );
            assert!((1..=20).contains(&r.nr_accesses), "{r:?}");
        }
    }
    assert!(
        accessed > 0,
        "no accessed region in {} aggregations",
        wholes.len()
    );
    eprintln!(
        "{} whole aggregations, {records} records, {accessed} accessed regions",
        wholes.len()
    );
}
