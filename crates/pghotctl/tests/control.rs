//! The control plane through the real binaries: protocol over the socket, permissions with a
//! non-root peer, the read-only socket, config set / reload / SIGHUP, pause, metrics scraped
//! over loopback, record then replay, `pghotctl top` driven in tmux, and what `--help`
//! promises run in the forms it documents (every exit status of `pghotctl --help` from its
//! situation, `top --once`/`--json`, pghotd's `--control-socket ''` and `trace:-`).

#[path = "../../../tests/util/mod.rs"]
mod util;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A dry-run pghotd reading a FIFO, with its own socket, stopped when dropped.
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
    fifo: Option<std::fs::File>,
}

impl Daemon {
    fn start(extra: &[&str]) -> Daemon {
        Daemon::start_on(&util::qemu_3node(), extra)
    }

    /// On a sysfs tree of the test's own.
    fn start_on(sysfs: &Path, extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("ctl.sock");
        let fifo = dir.path().join("samples.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let child = util::pghotd_bare()
            .arg("--source")
            .arg(format!("trace:{}", fifo.display()))
            .args(["--dry-run", "--sysfs-root"])
            .arg(sysfs)
            .arg("--socket")
            .arg(&socket)
            .arg("--stats-json")
            .arg(dir.path().join("stats.json"))
            .args(extra)
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("pghotd.log")).unwrap(),
            ))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "no socket; log:\n{}",
                log_of(dir.path())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Keep a writer open so the source does not end between feeds.
        let w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        Daemon {
            child,
            dir,
            socket,
            fifo: Some(w),
        }
    }

    fn feed(&mut self, text: &str) {
        let w = self.fifo.as_mut().unwrap();
        w.write_all(text.as_bytes()).unwrap();
        w.flush().unwrap();
    }

    fn ctl(&self) -> Command {
        util::pghotctl(&self.socket)
    }

    fn log(&self) -> String {
        log_of(self.dir.path())
    }

    /// Closes the FIFO so the source ends; waits for the exit.
    fn finish(mut self) -> serde_json::Map<String, serde_json::Value> {
        self.fifo = None;
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}; log:\n{}", self.log());
        util::counters(&self.dir.path().join("stats.json"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("pghotd.log")).unwrap_or_default()
}

/// `pages` pages of `pid` on the lower tier, `times` samples each, 10 ms apart in sample time.
fn trace(pid: u32, pages: u64, times: u64) -> String {
    let mut t = String::new();
    let mut time = 5_000_000_000u64;
    for _ in 0..times {
        for page in 0..pages {
            time += 10_000_000 / pages.max(1);
            t.push_str(&format!(
                "{time} 0 {pid} {pid} {:#x} - L extmem 2\n",
                0x7f00_0000_0000u64 + page * 4096
            ));
        }
    }
    t
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(util::run(cmd, true).stdout).unwrap()
}

/// Polls `stats --json` until `pred` holds.
fn wait_counters(d: &Daemon, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: serde_json::Value =
            serde_json::from_str(&stdout(d.ctl().args(["stats", "--json"]))).unwrap();
        if pred(&v["counters"]) {
            return v;
        }
        assert!(Instant::now() < deadline, "counters never matched: {v:#}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn protocol_round_trip_with_bad_requests_on_one_connection() {
    let d = Daemon::start(&[]);
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut big = vec![b'x'; 70 * 1024];
    big.push(b'\n');
    s.write_all(b"not json\n{\"v\":1,\"req\":\"fly\"}\n{\"v\":9,\"req\":\"stats\"}\n")
        .unwrap();
    s.write_all(&big).unwrap();
    s.write_all(b"\xff\xfe\n{\"v\":1,\"req\":\"config_get\",\"key\":\"freq_threshold\"}\n")
        .unwrap();
    let mut r = BufReader::new(s);
    let mut answers = Vec::new();
    for _ in 0..6 {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        answers.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
    }
    let kinds: Vec<&str> = answers[..5]
        .iter()
        .map(|a| a["error"]["kind"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        kinds,
        [
            "bad_request",
            "unknown_request",
            "unsupported_version",
            "too_large",
            "bad_request"
        ]
    );
    assert!(
        answers[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown request 'fly'")
    );
    assert!(
        answers[3]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("64 KiB")
    );
    assert_eq!(answers[5]["ok"]["freq_threshold"], 2);
    // The daemon is unharmed and counted it all.
    let v = wait_counters(&d, |c| c["control_errors"] == 5);
    assert!(v["counters"]["control_requests"].as_u64().unwrap() >= 6);
    // `stats --json` has the `--stats-json` shape.
    assert!(v["counters"]["hwhint_total_events"].is_u64());
}

#[test]
fn a_non_root_peer_may_read_but_not_change() {
    let d = Daemon::start(&[]);
    let meta = std::fs::metadata(&d.socket).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    let as_nobody = |args: &[&str]| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_pghotctl"))
            .arg("--socket")
            .arg(&d.socket)
            .args(args);
        cmd
    };
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // 0660 root:root: nobody cannot even connect, and is told why.
    let out = util::run_code(&mut as_nobody(&["status"]), exit_for("may not be opened"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("permission denied") && err.contains("pghot"),
        "{err}"
    );
    // With the socket opened to everyone, reads work and changes are refused by SO_PEERCRED.
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = util::run(&mut as_nobody(&["status"]), true);
    assert!(String::from_utf8_lossy(&out.stdout).contains("promotion: running"));
    for args in [
        &["pause"][..],
        &["config", "set", "freq_threshold", "3"],
        &["reload"],
        &["record", "-o", "/dev/null", "--duration", "1"],
    ] {
        let out = util::run_code(&mut as_nobody(args), exit_for("refused a change"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("needs root or membership in group pghot (you are uid 65534)"),
            "{args:?}: {err}"
        );
    }
    assert!(stdout(d.ctl().arg("status")).contains("promotion: running"));
}

/// `pghotctl --help`'s exit status table: (status, meaning), each status on its own line.
fn documented_statuses() -> Vec<(i32, String)> {
    let out = util::run(
        Command::new(env!("CARGO_BIN_EXE_pghotctl")).arg("--help"),
        true,
    );
    let help = String::from_utf8(out.stdout).unwrap();
    let table = help
        .split_once("Exit status:\n")
        .expect("an exit status table")
        .1;
    table
        .lines()
        .filter_map(|l| {
            let (code, meaning) = l.trim().split_once("  ")?;
            Some((code.parse().ok()?, meaning.to_string()))
        })
        .collect()
}

/// The exit status `pghotctl --help` documents for the situation whose text contains `what`.
fn exit_for(what: &str) -> i32 {
    let table = documented_statuses();
    let found: Vec<i32> = table
        .iter()
        .filter(|(_, m)| m.contains(what))
        .map(|(c, _)| *c)
        .collect();
    assert_eq!(found.len(), 1, "{what:?} in {table:?}");
    found[0]
}

#[test]
fn the_read_only_socket_answers_reads_and_refuses_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro.sock");
    let ro_arg = ro.to_str().unwrap().to_string();
    let d = Daemon::start(&["--readonly-socket", &ro_arg]);
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    // The read-only socket is bound just after the control socket that `start` waited for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::metadata(&ro).is_ok_and(|m| m.file_type().is_socket()) {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never bound",
            ro.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let meta = std::fs::metadata(&ro).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    // Group pghot-monitor where it exists, else root's.
    let monitor = std::fs::read_to_string("/etc/group")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"pghot-monitor")).then(|| f[2].parse::<u32>().unwrap())
        });
    assert_eq!(meta.gid(), monitor.unwrap_or(0));
    let on_ro = |args: &[&str]| {
        let mut cmd = util::pghotctl(&ro);
        cmd.args(args);
        cmd
    };
    assert!(stdout(&mut on_ro(&["status"])).contains(&format!("read-only socket: {ro_arg}")));
    assert!(stdout(&mut on_ro(&["stats"])).contains("pgpromote_candidate"));
    assert!(stdout(&mut on_ro(&["config", "get", "freq_threshold"])).contains("= 2"));
    util::run(&mut on_ro(&["top", "--json"]), true);
    // Root through the read-only socket: still refused, with the way to the other socket.
    let refused = exit_for("refused a change");
    for args in [
        &["pause"][..],
        &["resume"],
        &["config", "set", "freq_threshold", "3"],
        &["reload"],
        &["record", "-o", "/dev/null", "--duration", "1"],
        &["migrate", "--pid", "1", "--from", "2", "--to", "0"],
    ] {
        let out = util::run_code(&mut on_ro(args), refused);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("this is its read-only socket"),
            "{args:?}: {err}"
        );
    }
    // Nor does opening it to everyone grant a change.
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut nobody = Command::new("setpriv");
    nobody
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_pghotctl"))
        .arg("--socket")
        .arg(&ro);
    util::run_code(nobody.arg("pause"), refused);
    assert!(stdout(d.ctl().arg("status")).contains("promotion: running"));
    // The control socket itself still changes things for root.
    assert!(stdout(d.ctl().arg("pause")).contains("promotion paused"));
    assert!(stdout(&mut on_ro(&["status"])).contains("promotion: paused"));
    d.finish();
    assert!(!ro.exists(), "the read-only socket is removed at exit");
}

#[test]
fn config_set_reload_sighup_and_pause() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pghotd.toml");
    std::fs::write(&config, "freq_threshold = 2\n").unwrap();
    let mut d = Daemon::start(&["--config", config.to_str().unwrap()]);
    stdout(d.ctl().args(["config", "set", "freq_threshold", "3"]));
    assert_eq!(
        stdout(d.ctl().args(["config", "get", "freq_threshold"])),
        "freq_threshold = 3\n"
    );
    let out = util::run_code(d.ctl().args(["config", "set", "migrate_batch", "0"]), 1);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("config set: migrate_batch = 0 is out of range; allowed 1..=65536")
    );
    let out = util::run_code(
        d.ctl().args(["config", "set", "max_tracked_pages", "4096"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot change while pghotd runs"));
    let out = util::run_code(d.ctl().args(["config", "set", "target_nid", "2"]), 1);
    // The request is the origin, not a flag the daemon was never given.
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("config set: target_nid: node 2 is not a top-tier memory node")
    );

    // SIGHUP re-reads the file: the file's value replaces the one set at runtime.
    std::fs::write(&config, "freq_threshold = 4\n").unwrap();
    let pid = nix::unistd::Pid::from_raw(d.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while stdout(d.ctl().args(["config", "get", "freq_threshold"])) != "freq_threshold = 4\n" {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A restart-only key is reported; an invalid file changes nothing and says where.
    std::fs::write(&config, "freq_threshold = 5\nmax_tracked_pages = 4096\n").unwrap();
    let out = stdout(d.ctl().arg("reload"));
    assert!(out.contains("applied: freq_threshold"), "{out}");
    assert!(
        out.contains("needs restart (running value kept): max_tracked_pages"),
        "{out}"
    );
    std::fs::write(&config, "freq_threshold = 6\nmigrate_batch = 0\n").unwrap();
    let out = util::run_code(d.ctl().arg("reload"), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2: migrate_batch = 0 is out of range"),
        "{err}"
    );
    assert!(err.contains("running configuration is unchanged"), "{err}");
    assert_eq!(
        stdout(d.ctl().args(["config", "get", "freq_threshold"])),
        "freq_threshold = 5\n"
    );

    // Paused: candidates are counted, nothing is promoted; resumed: promotion goes on.
    stdout(d.ctl().args(["config", "set", "freq_threshold", "2"]));
    assert_eq!(stdout(d.ctl().arg("pause")), "promotion paused\n");
    assert!(stdout(d.ctl().arg("status")).contains("promotion: paused"));
    d.feed(&trace(900_001, 10, 2));
    let v = wait_counters(&d, |c| c["pgpromote_paused"] == 10);
    assert_eq!(v["counters"]["pgpromote_success"], 0);
    assert_eq!(v["paused"], true);
    stdout(d.ctl().arg("resume"));
    d.feed(&trace(900_001, 10, 1));
    wait_counters(&d, |c| c["pgpromote_success"] == 10);
    let c = d.finish();
    assert_eq!(c["pgpromote_candidate"], 20);
}

#[test]
fn stats_shows_the_heat_floor_and_leaves_process_rows_to_pids() {
    // One shard (1024 pages), so each floor pass reads every page; an hour's half-life, so
    // heat is the sample count.
    let mut d = Daemon::start(&[
        "--max-tracked-pages",
        "1024",
        "--heat-halflife-ms",
        "3600000",
        "--hot-share-pct",
        "80",
    ]);
    // By hand: 10 pages of 3 samples and one of 1 (31): 80 % is 24.8, inside the 3-sample
    // pages, so the floor is among their ranks (3 samples and under one more, by each page's
    // key). The last sample, 7 s of sample time on, ends a 5 s span and the floor is drawn.
    d.feed(&trace(900_001, 10, 3));
    d.feed("12000000000 0 900001 900001 0x7f0000100000 - L extmem 2\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    let floor = loop {
        let v: serde_json::Value =
            serde_json::from_str(&stdout(d.ctl().args(["stats", "--json"]))).unwrap();
        // The floor is drawn when the span ends, as the last sample is being recorded.
        let floor = v["heat_floor_samples"].as_f64();
        if let Some(floor) = floor.filter(|_| v["pids"][0]["tracked_pages"] == 11) {
            break floor;
        }
        assert!(Instant::now() < deadline, "no floor over 11 pages: {v:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!((3.0..4.0).contains(&floor), "{floor}");
    let text = stdout(d.ctl().arg("stats"));
    let shown: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("heat_floor_samples"))
        .collect();
    assert_eq!(
        shown,
        [format!(
            "heat_floor_samples                        {floor:.3}"
        )]
    );
    assert!(!text.contains("900001"), "{text}");
    let with_rows = stdout(d.ctl().args(["stats", "--pids"]));
    assert!(with_rows.contains("900001"), "{with_rows}");
}

#[test]
fn config_set_takes_one_value_not_a_document() {
    let d = Daemon::start(&[]);
    for value in [
        "3\npromote_rate_limit_MBps = 1",
        "3\n[ibs]\nperiod = 200",
        "3 # comment",
    ] {
        let out = util::run_code(d.ctl().args(["config", "set", "freq_threshold", value]), 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("config set: freq_threshold: ") && err.contains("is not one TOML value"),
            "{value:?}: {err}"
        );
        assert!(!err.contains("config config"), "{err}");
    }
    assert_eq!(
        stdout(d.ctl().args(["config", "get", "promote_rate_limit_MBps"])),
        "promote_rate_limit_MBps = 65536\n"
    );
    assert_eq!(
        stdout(d.ctl().args(["config", "get", "freq_threshold"])),
        "freq_threshold = 2\n"
    );
    let c = d.finish();
    assert_eq!(c["control_errors"], 3);
}

/// One sample: name, labels, value.
type MetricSample = (String, Vec<(String, String)>, f64);

/// The samples of an OpenMetrics text as the Prometheus Python client's parser reads it (which
/// fails the test on anything it does not accept).
fn parse_openmetrics(text: &str) -> Vec<MetricSample> {
    util::openmetrics(text)
        .iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .map(|s| {
            let labels = s["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            let name = s["name"].as_str().unwrap().to_string();
            (name, labels, s["value"].as_f64().unwrap())
        })
        .collect()
}

#[test]
fn metrics_are_scraped_over_loopback_and_parse_as_openmetrics() {
    let addr = util::free_loopback_addr();
    let mut d = Daemon::start(&["--metrics-listen", &addr]);
    d.feed(&trace(900_001, 20, 3));
    // Recorders fold their counts every 1024 samples or 100 ms of sample time: a later
    // sample (of another process) makes the first 60 visible.
    d.feed("9000000000 0 900009 900009 0x7f0000000000 - L extmem 2\n");
    wait_counters(&d, |c| {
        c["pgpromote_success"] == 20 && c["hwhint_total_events"] == 61
    });
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    let samples = parse_openmetrics(body);
    let get = |name: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .find(|s| {
                s.0 == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.1.iter().any(|(a, b)| a == k && b == v))
            })
            .map(|s| s.2)
    };
    // Every counter of the registry is there, where its definition says, with the value
    // `stats` shows.
    let stats: serde_json::Value =
        serde_json::from_str(&stdout(d.ctl().args(["stats", "--json"]))).unwrap();
    use pghotd::stats::{Counter, Metric, Unit, family_name};
    for &c in Counter::ALL {
        let (name, unit, label) = match c.metric() {
            Metric::Own { name, unit, label } => (name, unit, label),
            Metric::Of(f, v) => (f.name, f.unit, Some((f.label, v))),
        };
        let labels: Vec<(&str, &str)> = label.into_iter().collect();
        let got = get(&format!("{}_total", family_name(name, unit)), &labels);
        // `stats --json` is itself a control request, made after the scrape.
        if matches!(c, Counter::ControlRequests | Counter::ControlErrors) {
            assert!(got.is_some(), "{} missing", c.name());
            continue;
        }
        let held = stats["counters"][c.name()].as_f64().unwrap();
        let want = if unit == Unit::Nanoseconds {
            held / 1e9
        } else {
            held
        };
        assert_eq!(got, Some(want), "{}", c.name());
    }
    assert_eq!(
        get("pghotd_promote_outcomes_total", &[("outcome", "success")]),
        Some(20.0)
    );
    assert_eq!(
        get("pghotd_promoted_pages_total", &[("node", "0")]),
        Some(20.0)
    );
    assert_eq!(
        get("pghotd_source_samples_total", &[("source", "trace")]),
        Some(61.0)
    );
    assert_eq!(
        get("pghotd_pid_samples_total", &[("pid", "900001")]),
        Some(60.0)
    );
    assert_eq!(get("pghotd_queue_depth", &[("node", "2")]), Some(0.0));
    assert!(get("pghotd_tracked_pages", &[]).is_some());
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /nope HTTP/1.0\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
}

/// The QEMU fixture with reclaim demotion on and a kdamond running `migrate_hot`.
fn sysfs_with_competitors(dir: &Path) -> PathBuf {
    let root = dir.join("sys");
    util::run(
        Command::new("cp")
            .arg("-R")
            .arg(util::qemu_3node())
            .arg(&root),
        true,
    );
    let files = [
        ("kernel/mm/numa/demotion_enabled", "true\n"),
        ("kernel/mm/damon/admin/kdamonds/nr_kdamonds", "1\n"),
        ("kernel/mm/damon/admin/kdamonds/0/state", "on\n"),
        (
            "kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/0/action",
            "migrate_hot\n",
        ),
    ];
    for (rel, text) in files {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    root
}

#[test]
fn issue_20_competing_promoters_show_in_status_and_metrics_and_refuse_exits_3() {
    let tree = tempfile::tempdir().unwrap();
    let sysfs = sysfs_with_competitors(tree.path());
    let addr = util::free_loopback_addr();
    let d = Daemon::start_on(&sysfs, &["--metrics-listen", &addr]);
    let status = stdout(d.ctl().arg("status"));
    assert!(
        status.contains("competing promoters (they move the same pages):")
            && status.contains("demotion_enabled is true")
            && status.contains("DAMON kdamond 0 runs a migrate_hot scheme")
            && status.contains("remedy: echo off > "),
        "{status}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(d.ctl().args(["status", "--json"]))).unwrap();
    let kinds: Vec<&str> = json["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"demotion") && kinds.contains(&"damon"),
        "{json}"
    );
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    let samples = parse_openmetrics(body);
    let conflicts = |kind: &str| {
        samples
            .iter()
            .find(|s| {
                s.0 == "pghotd_conflicts" && s.1.iter().any(|(k, v)| k == "kind" && v == kind)
            })
            .map(|s| s.2)
    };
    assert_eq!(conflicts("demotion"), Some(1.0));
    assert_eq!(conflicts("damon"), Some(1.0));
    // Every kind has a sample, 0 when absent (this machine may have any).
    assert!(conflicts("numa_balancing").is_some());
    // Logged once, at warn, with the remedy.
    let log = d.log();
    assert_eq!(
        log.matches("competing promoter: DAMON kdamond 0").count(),
        1,
        "{log}"
    );
    assert!(log.contains("Remedy: echo false > "), "{log}");
    drop(d);

    // conflicts = "refuse": exit 3 at start, naming the setting and what was found.
    let out = util::run_code(
        util::pghotd()
            .args(["--source", "trace:-", "--dry-run", "--conflicts", "refuse"])
            .arg("--sysfs-root")
            .arg(&sysfs)
            .stdin(Stdio::null()),
        3,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("conflicts = \"refuse\" (flag --conflicts)")
            && err.contains("demotion_enabled is true")
            && err.contains("migrate_hot"),
        "{err}"
    );
    // --check-config shows them, and refuses as the start would.
    let out = util::run(
        util::pghotd()
            .args(["--check-config", "--source", "trace:-"])
            .arg("--sysfs-root")
            .arg(&sysfs),
        true,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("competing promoter: DAMON kdamond 0 runs a migrate_hot"),
        "{text}"
    );
    util::run_code(
        util::pghotd()
            .args([
                "--check-config",
                "--source",
                "trace:-",
                "--conflicts",
                "refuse",
            ])
            .arg("--sysfs-root")
            .arg(&sysfs),
        3,
    );
}

#[test]
fn record_then_replay_gives_the_same_candidates() {
    let mut d = Daemon::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rec.trace");
    let recorder = d
        .ctl()
        .args(["record", "-o"])
        .arg(&file)
        .args(["--duration", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The tap is on once the daemon logs it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !d.log().contains("record started") {
        assert!(
            Instant::now() < deadline,
            "record did not start:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut t = trace(900_001, 40, 3);
    t.push_str(&trace(900_002, 25, 2));
    d.feed(&t);
    let out = recorder.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("170 samples written"));
    let live = d.finish();
    assert_eq!(live["pgpromote_candidate"], 65);

    let stats = dir.path().join("replay.json");
    util::run(
        util::pghotd()
            .arg("--source")
            .arg(format!("trace:{}", file.display()))
            .args(["--dry-run", "--sysfs-root"])
            .arg(util::qemu_3node())
            .arg("--stats-json")
            .arg(&stats),
        true,
    );
    let replayed = util::counters(&stats);
    assert_eq!(replayed["pgpromote_candidate"], live["pgpromote_candidate"]);
    assert_eq!(replayed["hwhint_total_events"], live["hwhint_total_events"]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# pghot-trace v1"), "{}", &text[..80]);
    assert!(
        text.contains("# pghotd record: 170 samples, 0 dropped"),
        "{text}"
    );
}

#[test]
fn migrate_checks_nodes_and_walks_a_live_process() {
    let d = Daemon::start(&[]);
    let out = util::run_code(
        d.ctl()
            .args(["migrate", "--pid", "1", "--from", "2", "--to", "2"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--to node 2 is also in --from"));
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    // This machine has no node 2: nothing to move, but the walk and the answer are real.
    let out = stdout(
        d.ctl()
            .args(["migrate", "--pid"])
            .arg(sleeper.id().to_string())
            .args(["--from", "2", "--to", "0"]),
    );
    assert!(out.contains("0 of 0 pages moved to node 0"), "{out}");
    sleeper.kill().unwrap();
    let _ = sleeper.wait();
    let out = util::run_code(
        d.ctl()
            .args(["migrate", "--pid", "4194000", "--from", "2", "--to", "0"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("is pid 4194000 running?"));
}

#[test]
fn clear_errors_without_a_daemon_and_for_a_socket_in_use() {
    let out = util::run_code(
        util::pghotctl(Path::new("/nonexistent/pghotd.sock")).arg("status"),
        exit_for("no pghotd listens"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no pghotd is listening on /nonexistent/pghotd.sock"),
        "{err}"
    );
    assert!(err.contains("--socket PATH"), "{err}");
    let d = Daemon::start(&[]);
    let out = util::run_code(
        util::pghotd_bare()
            .args(["--source", "trace:-", "--socket"])
            .arg(&d.socket)
            .arg("--sysfs-root")
            .arg(util::qemu_3node()),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another pghotd is listening on"), "{err}");
}

#[test]
fn top_runs_in_tmux_against_a_live_daemon() {
    let mut d = Daemon::start(&[]);
    d.feed(&trace(900_001, 30, 4));
    wait_counters(&d, |c| c["pgpromote_success"] == 30);
    let server = format!("pghotd-test-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .arg("-L")
            .arg(&server)
            .args(args)
            .output()
            .unwrap()
    };
    let cmd = format!(
        "{} --socket {} top",
        env!("CARGO_BIN_EXE_pghotctl"),
        d.socket.display()
    );
    let out = tmux(&[
        "new-session",
        "-d",
        "-x",
        "80",
        "-y",
        "24",
        "-s",
        "top",
        &cmd,
    ]);
    assert!(out.status.success(), "{out:?}");
    let screen = |want: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let out = tmux(&["capture-pane", "-p", "-t", "top"]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.contains(want) {
                return text;
            }
            if Instant::now() > deadline {
                let _ = tmux(&["kill-server"]);
                panic!("screen never showed {want:?}:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let text = screen("processes by samples/s");
    assert!(text.contains("PROMOTING"), "{text}");
    assert!(text.contains("900001"), "{text}");
    assert!(text.contains("node2   lower"), "{text}");
    assert!(text.contains("q quit  s sort"), "{text}");
    tmux(&["send-keys", "-t", "top", "s"]);
    screen("processes by hot ");
    tmux(&["send-keys", "-t", "top", "?"]);
    screen("pause promotion (asks first)");
    tmux(&["send-keys", "-t", "top", "Escape"]);
    // p asks; anything but y keeps promoting.
    tmux(&["send-keys", "-t", "top", "p"]);
    screen("pause promotion? y pauses");
    tmux(&["send-keys", "-t", "top", "n"]);
    let text = screen("promotion not paused");
    assert!(text.contains("PROMOTING"), "{text}");
    assert!(stdout(d.ctl().arg("status")).contains("promotion: running"));
    tmux(&["send-keys", "-t", "top", "p"]);
    screen("pause promotion? y pauses");
    tmux(&["send-keys", "-t", "top", "y"]);
    screen("PAUSED");
    tmux(&["send-keys", "-t", "top", "Enter"]);
    screen("hottest ranges of 900001");
    tmux(&["send-keys", "-t", "top", "q"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while tmux(&["has-session", "-t", "top"]).status.success() {
        assert!(Instant::now() < deadline, "top did not quit on q");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = tmux(&["kill-server"]);
    assert!(stdout(d.ctl().arg("status")).contains("promotion: paused"));
}

#[test]
fn migrate_refuses_a_process_outside_the_scope() {
    let mut inside = Command::new("sleep").arg("30").spawn().unwrap();
    let mut outside = Command::new("sleep").arg("30").spawn().unwrap();
    let d = Daemon::start(&["--pid", &inside.id().to_string()]);
    let out = util::run_code(
        d.ctl()
            .args(["migrate", "--pid"])
            .arg(outside.id().to_string())
            .args(["--from", "2", "--to", "0"]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "pid {} is outside the processes pghotd manages",
            outside.id()
        )),
        "{err}"
    );
    for child in [&mut inside, &mut outside] {
        child.kill().unwrap();
        let _ = child.wait();
    }
}

#[test]
fn every_documented_exit_status_comes_from_its_situation() {
    let codes: Vec<i32> = documented_statuses().iter().map(|(c, _)| *c).collect();
    assert_eq!(codes, (0..=7).collect::<Vec<_>>(), "one line per status");
    let d = Daemon::start(&[]);
    let ctl = || util::pghotctl(&d.socket);

    util::run_code(ctl().arg("status"), exit_for("done"));
    util::run_code(
        ctl().args(["config", "set", "migrate_batch", "0"]),
        exit_for("answered with an error"),
    );
    let usage = exit_for("command line is wrong");
    util::run_code(ctl().arg("no-such-command"), usage);
    util::run_code(ctl().args(["top", "--once", "--interval", "0"]), usage);
    util::run_code(
        util::pghotctl(Path::new("/nonexistent/pghotd.sock")).arg("status"),
        exit_for("no pghotd listens"),
    );
    // Access and refusals as a non-root user: the socket is 0660 root's.
    let dir = tempfile::tempdir().unwrap();
    let as_nobody = |socket: &Path, args: &[&str]| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_pghotctl"))
            .arg("--socket")
            .arg(socket)
            .args(args);
        cmd
    };
    use std::os::unix::fs::PermissionsExt;
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    open(d.socket.parent().unwrap(), 0o755).unwrap();
    util::run_code(
        &mut as_nobody(&d.socket, &["status"]),
        exit_for("may not be opened"),
    );
    open(&d.socket, 0o666).unwrap();
    util::run_code(
        &mut as_nobody(&d.socket, &["pause"]),
        exit_for("refused a change"),
    );
    // A "daemon" that accepts and hangs up without answering.
    let mute = dir.path().join("mute.sock");
    let listener = UnixListener::bind(&mute).unwrap();
    let hangup = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        drop(s);
    });
    util::run_code(
        util::pghotctl(&mute).arg("status"),
        exit_for("connection failed midway"),
    );
    hangup.join().unwrap();
    util::run_code(
        ctl().args(["record", "--duration", "1", "-o", "/nonexistent/dir/trace"]),
        exit_for("local file"),
    );
    // stdout that cannot be written (a full disk); a closed one is success (`| head`).
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    util::run_code(ctl().arg("status").stdout(full), exit_for("stdout or"));
}

#[test]
fn top_once_prints_one_80x24_frame_and_top_json_prints_json() {
    let d = Daemon::start(&[]);
    let text = String::from_utf8(
        util::run(
            util::pghotctl(&d.socket).args(["top", "--once", "--interval", "0.3"]),
            true,
        )
        .stdout,
    )
    .unwrap();
    assert_eq!(text.lines().count(), 24, "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    assert!(text.contains("PROMOTING"), "{text}");
    assert!(text.contains("processes by samples/s"), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("pghotctl top --once: rates over 0."),
        "{text}"
    );
    for args in [&["top", "--json"][..], &["top", "--once", "--json"]] {
        let out = util::run(util::pghotctl(&d.socket).args(args), true);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["counters"].is_object(), "{args:?}: {v}");
        assert_eq!(v["paused"], false);
    }
}

#[test]
fn pghotd_runs_without_a_socket_for_an_empty_path_and_reads_stdin_for_dash() {
    let out = util::run(util::pghotd_bare().arg("--help"), true);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("an empty path turns it off"), "{text}");
    assert!(text.contains("- for stdin"), "{text}");
    for form in [
        &["--control-socket", ""][..],
        &["--control-socket="],
        &["--socket", ""],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let stats = dir.path().join("stats.json");
        let mut child = util::pghotd_bare()
            .args(form)
            .args(["--source", "trace:-", "--dry-run", "--log", "info"])
            .arg("--sysfs-root")
            .arg(util::qemu_3node())
            .arg("--stats-json")
            .arg(&stats)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "# pghot-trace v1").unwrap();
        for t in 0..3u64 {
            writeln!(
                stdin,
                "{} 0 4242 4242 0x7f0000001000 - L extmem 2",
                1_000_000 + t
            )
            .unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{form:?}: {log}");
        assert!(!log.contains("control socket"), "{form:?}: {log}");
        let c = util::counters(&stats);
        assert_eq!(
            c["source_trace_samples"].as_u64(),
            Some(3),
            "{form:?}: {log}"
        );
    }
}
