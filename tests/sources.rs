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

/// The kdamond the tracepoint test reads: one it configured itself, or, where every kdamond
/// runs someone else's work (a host's DAMON-based reclaim, say) and none can be added (the
/// kernel refuses `nr_kdamonds` while any runs), a running paddr one watched as it is. The
/// test then only opens a perf event on its thread and reads its configuration: it writes
/// nothing of it, so the owner's work goes on unchanged.
struct TracedKdamond {
    k: u32,
    /// `Some(made)` when the test configured it (and created it, if `made`) and has not yet
    /// released it; `None` watched (or released).
    own: std::cell::Cell<Option<bool>>,
    sample_us: u64,
    aggr_us: u64,
    max_regions: u64,
    /// The physical range its regions must lie in.
    range: (u64, u64),
}

impl TracedKdamond {
    /// A free kdamond configured for paddr over the largest RAM range (5 ms samples, 100 ms
    /// aggregations, 10..=1000 regions) and turned on; else a running paddr kdamond with one
    /// target, watched; `Err` says why neither.
    fn claim(
        admin: &pghotd::sampler::damon::sysfs::Admin,
        ram: (u64, u64),
    ) -> Result<TracedKdamond, String> {
        let nr: u32 = admin
            .read("nr_kdamonds")
            .map_err(|e| e.to_string())?
            .parse()
            .map_err(|e| format!("nr_kdamonds: {e}"))?;
        let (k, made) = match admin.find_free() {
            Ok(Some(k)) => (k, false),
            Ok(None) => {
                admin.write("nr_kdamonds", "1").map_err(|e| e.to_string())?;
                (0, true)
            }
            Err(busy) => return Self::watch(admin, nr, ram).map_err(|w| format!("{busy}; {w}")),
        };
        let claimed = TracedKdamond {
            k,
            own: std::cell::Cell::new(Some(made)),
            sample_us: 5000,
            aggr_us: 100_000,
            max_regions: 1000,
            range: ram,
        };
        // From here on every way out frees what the claim wrote, so that a kdamond made or
        // half configured here is not left behind.
        let nr_contexts = admin
            .write(&format!("{k}/contexts/nr_contexts"), "1")
            .map_err(|e| e.to_string());
        let avail = admin
            .read(&format!("{k}/contexts/0/avail_operations"))
            .unwrap_or_default();
        if nr_contexts.is_ok() && !avail.split_whitespace().any(|o| o == "paddr") {
            claimed
                .release(admin)
                .map_err(|e| format!("releasing kdamond {k}: {e}"))?;
            return Err(format!("no paddr operations ({avail})"));
        }
        if let Err(e) = nr_contexts.and_then(|()| claimed.configure(admin, ram)) {
            let _ = claimed.release(admin);
            panic!("configuring kdamond {k}: {e}");
        }
        Ok(claimed)
    }

    /// Its one context: paddr over `ram` at the test's intervals, then turned on.
    fn configure(
        &self,
        admin: &pghotd::sampler::damon::sysfs::Admin,
        ram: (u64, u64),
    ) -> Result<(), String> {
        let ctx = format!("{}/contexts/0", self.k);
        for (rel, value) in [
            ("operations", "paddr".to_string()),
            ("monitoring_attrs/intervals/sample_us", "5000".into()),
            ("monitoring_attrs/intervals/aggr_us", "100000".into()),
            ("monitoring_attrs/nr_regions/max", "1000".into()),
            ("monitoring_attrs/nr_regions/min", "10".into()),
            ("targets/nr_targets", "1".into()),
            ("targets/0/regions/nr_regions", "1".into()),
            ("targets/0/regions/0/start", ram.0.to_string()),
            ("targets/0/regions/0/end", ram.1.to_string()),
        ] {
            admin
                .write(&format!("{ctx}/{rel}"), &value)
                .map_err(|e| e.to_string())?;
        }
        admin
            .write(&format!("{}/state", self.k), "on")
            .map_err(|e| e.to_string())
    }

    /// The first running kdamond with one paddr context of one target, its settings read.
    fn watch(
        admin: &pghotd::sampler::damon::sysfs::Admin,
        nr: u32,
        ram: (u64, u64),
    ) -> Result<TracedKdamond, String> {
        let num = |rel: &str| -> Option<u64> { admin.read(rel).ok()?.parse().ok() };
        for k in 0..nr {
            let ctx = format!("{k}/contexts/0");
            if admin.read(&format!("{k}/state")).ok().as_deref() != Some("on")
                || num(&format!("{k}/contexts/nr_contexts")) != Some(1)
                || admin.read(&format!("{ctx}/operations")).ok().as_deref() != Some("paddr")
                || num(&format!("{ctx}/targets/nr_targets")) != Some(1)
            {
                continue;
            }
            let attr = |name: &str| num(&format!("{ctx}/monitoring_attrs/{name}"));
            let (Some(sample_us), Some(aggr_us), Some(max_regions)) = (
                attr("intervals/sample_us"),
                attr("intervals/aggr_us"),
                attr("nr_regions/max"),
            ) else {
                continue;
            };
            // Its regions' span, or, with none given, the largest RAM range, which
            // mm/damon/paddr.c monitors by default (damon_set_region_biggest_system_ram_default).
            let regions = format!("{ctx}/targets/0/regions");
            let given = num(&format!("{regions}/nr_regions")).unwrap_or(0);
            let range = (0..given)
                .filter_map(|i| {
                    Some((
                        num(&format!("{regions}/{i}/start"))?,
                        num(&format!("{regions}/{i}/end"))?,
                    ))
                })
                .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
                .unwrap_or(ram);
            // Four and a half aggregations must fit in the test's minute.
            if sample_us == 0 || aggr_us < sample_us || aggr_us > 13_000_000 {
                continue;
            }
            return Ok(TracedKdamond {
                k,
                own: std::cell::Cell::new(None),
                sample_us,
                aggr_us,
                max_regions,
                range,
            });
        }
        Err("no running paddr kdamond of one target, aggregating within 13 s, to watch".into())
    }

    /// How long to read: 15 aggregations of its own, four and a half of one watched (the
    /// first may be cut by the start), and at least 1.5 s.
    fn window(&self) -> Duration {
        let aggr = Duration::from_micros(self.aggr_us);
        match self.own.get() {
            Some(_) => (aggr * 15).max(Duration::from_millis(1500)),
            None => (aggr * 9 / 2).max(Duration::from_millis(1500)),
        }
    }

    /// Turns its own kdamond off and frees it (and the kdamond, if it made it); a watched one,
    /// or one already released, is left as it is.
    fn release(&self, admin: &pghotd::sampler::damon::sysfs::Admin) -> Result<(), String> {
        let Some(made) = self.own.take() else {
            return Ok(());
        };
        // "off" fails when the kdamond never started; freeing its context must not.
        let _ = admin.write(&format!("{}/state", self.k), "off");
        admin
            .write(&format!("{}/contexts/nr_contexts", self.k), "0")
            .map_err(|e| e.to_string())?;
        if made {
            admin.write("nr_kdamonds", "0").map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// A claimed [`TracedKdamond`] that is released when dropped: a panic between the claim and
/// the assertions (its thread's pid unreadable, the busy thread panicking) must not leave the
/// test's own kdamond running on the host.
struct ClaimGuard<'a> {
    admin: &'a pghotd::sampler::damon::sysfs::Admin,
    kd: TracedKdamond,
}

impl ClaimGuard<'_> {
    fn release(&self) -> Result<(), String> {
        self.kd.release(self.admin)
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            eprintln!("releasing kdamond {}: {e}", self.kd.k);
        }
    }
}

/// pghotd's reader of DAMON's `damon_aggregated` tracepoint on a real kdamond. This host's
/// kernel has no vaddr operations, so the kdamond watches physical memory (paddr), its own
/// over the largest RAM range, or a running one someone else configured (see
/// [`TracedKdamond`]), while a thread keeps 64 MiB busy; the record layout, the per-task event
/// on the kernel thread and the grouping into aggregations are the kernel's, as with vaddr.
/// Expected by hand: about one whole aggregation per aggregation interval, none torn, no more
/// records than nr_regions/max an aggregation, every accessed region inside the monitored
/// range, disjoint and in order, with at most aggr / sample sampling intervals seen accessed
/// (mm/damon/core.c `kdamond_reset_aggregated` emits each region's `nr_accesses`, counted
/// once a sampling interval).
#[test]
fn damons_aggregated_tracepoint_on_a_real_kdamond_reads_whole_aggregations() {
    use pghotd::sampler::damon::aggregated::{self, AggregatedEvent, Assembler};
    use pghotd::sampler::damon::sysfs::Admin;

    let _kdamonds = KDAMONDS.lock().unwrap_or_else(|e| e.into_inner());
    let k_root = Path::new("/sys/kernel/mm/damon/admin/kdamonds");
    let tracefs = Path::new("/sys/kernel/tracing/events/damon/damon_aggregated/id");
    let ready = match (Admin::open(Path::new("/sys")), largest_ram_range()) {
        _ if !tracefs.is_file() => Err("tracefs is not mounted at /sys/kernel/tracing".into()),
        (Ok(admin), Some(ram)) => TracedKdamond::claim(&admin, ram).map(|kd| (admin, kd)),
        (Err(e), _) => Err(e.to_string()),
        (_, None) => Err("no System RAM range in /proc/iomem (not root?)".into()),
    };
    let (admin, kd) = match ready {
        Ok(ready) => ready,
        Err(why) => {
            // CI mounts tracefs (.ci/run) on a kernel with DAMON: there this must run.
            assert!(
                std::env::var_os("PGHOTD_REQUIRE_TOOLS").is_none_or(|v| v != "1"),
                "needs root, DAMON's sysfs with a free or a running paddr kdamond, and tracefs \
                 at /sys/kernel/tracing (PGHOTD_REQUIRE_TOOLS=1): {why}"
            );
            eprintln!("\n*** SKIPPED: {why}; this test did not run ***\n");
            return;
        }
    };
    let claim = ClaimGuard { admin: &admin, kd };
    let kd = &claim.kd;
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
    let tid: u32 = std::fs::read_to_string(k_root.join(format!("{}/pid", kd.k)))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let opened = AggregatedEvent::open(
        Path::new("/sys"),
        tid,
        aggregated::ring_pages(kd.max_regions as u32, kd.aggr_us as u32),
    );
    let mut wholes = Vec::new();
    let (mut records, mut lost) = (0, 0);
    let mut asm = Assembler::new(1);
    let window = kd.window();
    let result = opened.map(|mut event| {
        let started = std::time::Instant::now();
        while started.elapsed() < window {
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
    let watched = kd.own.get().is_none();
    claim.release().unwrap();
    result.unwrap();
    // Expected: window / aggr aggregations; at most half of them lost to a loaded host's
    // scheduling, and up to a quarter more plus two (the last 200 ms sleep runs past the
    // window, and the kdamond's intervals are its own, not the window's).
    let expected = window.as_micros() as f64 / kd.aggr_us as f64;
    let fits = (expected * 0.5).floor().max(1.0) as usize..=(expected * 1.25).ceil() as usize + 2;
    assert!(
        fits.contains(&wholes.len()),
        "{} whole aggregations in {window:?} at {} us each (watched: {watched}), {records} \
         records; expected {fits:?}",
        wholes.len(),
        kd.aggr_us
    );
    assert_eq!((asm.torn, asm.foreign, lost), (0, 0, 0));
    // Each whole aggregation is at least one record, and at most nr_regions/max plus the
    // partial aggregations at either end of the window.
    assert!(
        (wholes.len() as u64..=(wholes.len() as u64 + 2) * kd.max_regions)
            .contains(&(records as u64)),
        "{records} records"
    );
    let (lo, hi) = kd.range;
    let most = kd.aggr_us / kd.sample_us;
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
            assert!((1..=most).contains(&u64::from(r.nr_accesses)), "{r:?}");
        }
    }
    assert!(
        accessed > 0,
        "no accessed region in {} aggregations",
        wholes.len()
    );
    eprintln!(
        "kdamond {} ({}): {} whole aggregations, {records} records, {accessed} accessed regions",
        kd.k,
        if watched { "watched" } else { "its own" },
        wholes.len()
    );
}

/// The tracepoint test's claim on a tree laid out as DAMON's sysfs (Documentation/admin-guide/
/// mm/damon/usage.rst) with one free kdamond, as a host without its own DAMON work has: the claim
/// configures paddr over the range and turns it on, and a panic before the test's own release
/// still leaves the kdamond off with no context, through [`ClaimGuard`]'s drop. (This host runs
/// its own kdamond, so the real test watches that one and never claims.)
#[test]
fn the_tracepoint_tests_own_kdamond_is_released_when_the_test_panics() {
    use pghotd::sampler::damon::sysfs::Admin;

    let dir = tempfile::tempdir().unwrap();
    let k = dir.path().join("kernel/mm/damon/admin/kdamonds");
    let ctx = k.join("0/contexts/0");
    for sub in [
        "monitoring_attrs/intervals",
        "monitoring_attrs/nr_regions",
        "targets/0/regions/0",
    ] {
        std::fs::create_dir_all(ctx.join(sub)).unwrap();
    }
    for (path, text) in [
        (k.join("nr_kdamonds"), "1"),
        (k.join("0/state"), "off"),
        (k.join("0/contexts/nr_contexts"), "0"),
        (ctx.join("avail_operations"), "vaddr fvaddr paddr"),
    ] {
        std::fs::write(path, text).unwrap();
    }
    for rel in [
        "operations",
        "monitoring_attrs/intervals/sample_us",
        "monitoring_attrs/intervals/aggr_us",
        "monitoring_attrs/nr_regions/max",
        "monitoring_attrs/nr_regions/min",
        "targets/nr_targets",
        "targets/0/regions/nr_regions",
        "targets/0/regions/0/start",
        "targets/0/regions/0/end",
    ] {
        std::fs::write(ctx.join(rel), "").unwrap();
    }
    // sysfs attributes are replaced whole by each write; these plain files are not (the writes
    // do not truncate), so read only what the last write put first.
    let read = |rel: &str, len: usize| {
        let text = std::fs::read_to_string(k.join(rel)).unwrap();
        text[..len.min(text.len())].to_string()
    };
    let admin = Admin::open(dir.path()).unwrap();
    let ram = (0x1_0000_0000, 0x2_0000_0000);
    let kd = TracedKdamond::claim(&admin, ram).unwrap();
    assert_eq!(
        kd.own.get(),
        Some(false),
        "an existing free kdamond, not one made"
    );
    assert_eq!(read("0/state", 2), "on");
    assert_eq!(read("0/contexts/nr_contexts", 1), "1");
    assert_eq!(read("0/contexts/0/operations", 5), "paddr");
    assert_eq!(
        read("0/contexts/0/targets/0/regions/0/start", 10),
        "4294967296"
    );
    assert_eq!(
        read("0/contexts/0/targets/0/regions/0/end", 10),
        "8589934592"
    );

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _claim = ClaimGuard { admin: &admin, kd };
        panic!("the busy thread panicked");
    }));
    assert!(panicked.is_err());
    assert_eq!(read("0/state", 3), "off");
    assert_eq!(read("0/contexts/nr_contexts", 1), "0");
    // It existed before the claim, so it is not removed.
    assert_eq!(read("nr_kdamonds", 1), "1");
}
