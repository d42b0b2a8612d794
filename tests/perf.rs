//! The per-CPU perf sampler for real: `pghotd --source pagefault` watching a child process
//! (`pghot-workload`) fault in a fresh buffer; its perf fds and a stop and restart on one
//! config. Needs root or CAP_PERFMON, as CI has.

mod util;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use pghotd::sampler::trace::parse_line;
use serde_json::Value;

use util::{counters, pghotd, run, workload, workload_buffer_and_pid};

/// Waits until the daemon's log says that sampling runs, and keeps draining its stderr.
fn wait_for_sampling(child: &mut std::process::Child) -> std::thread::JoinHandle<String> {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("sampling on cpu") {
                let _ = tx.send(());
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    if rx.recv_timeout(Duration::from_secs(20)).is_err() {
        let _ = child.kill();
        panic!("pghotd did not start sampling:\n{}", reader.join().unwrap());
    }
    reader
}

#[test]
fn pagefault_source_sees_a_child_fault_in_its_buffer_and_the_counters_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let (rec, stats) = (dir.path().join("rec.trace"), dir.path().join("stats.json"));
    let mut daemon = pghotd()
        .args([
            "--source",
            "pagefault",
            "--dry-run",
            "--perf-ring-pages",
            "512",
        ])
        .arg("--record")
        .arg(&rec)
        .arg("--stats-json")
        .arg(&stats)
        .args(["--duration", "60", "--log", "info"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning pghotd");
    let log = wait_for_sampling(&mut daemon);

    // 16 MiB placed on node 0: the placement touches each of its 4096 pages once.
    let out = run(
        workload().args([
            "--size-mb",
            "16",
            "--pattern",
            "uniform",
            "--node",
            "0",
            "--duration",
            "0.2",
        ]),
        true,
    );
    let ((lo, hi), child) = workload_buffer_and_pid(&String::from_utf8_lossy(&out.stdout));

    // Let the sampler drain, then stop the daemon the way systemd would.
    std::thread::sleep(Duration::from_millis(500));
    let pid = nix::unistd::Pid::from_raw(daemon.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGTERM).unwrap();
    let started = Instant::now();
    let status = daemon.wait().unwrap();
    let log = log.join().unwrap();
    assert!(status.success(), "pghotd failed:\n{log}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "slow stop:\n{log}"
    );

    let text = std::fs::read_to_string(&rec).unwrap();
    let samples: Vec<_> = text
        .lines()
        .filter_map(|l| parse_line(l).unwrap())
        .collect();
    let pages: HashSet<u64> = samples
        .iter()
        .filter(|s| s.pid == child && (lo..hi).contains(&s.vaddr))
        .map(|s| s.vaddr >> 12)
        .collect();
    let c = counters(&stats);
    let get = |name: &str| c[name].as_u64().unwrap_or_else(|| panic!("{name}"));
    let lost = get("pghot_source_lost_records");
    assert!(
        pages.len() as u64 + lost >= 4096 - 1 && pages.len() >= 2048,
        "saw {} of the child's 4096 buffer pages, {lost} records lost:\n{log}",
        pages.len()
    );
    // Every sample the daemon got is in the recording and in the counters.
    assert_eq!(get("source_pagefault_samples"), samples.len() as u64);
    assert_eq!(
        get("hwhint_total_events"),
        samples.len() as u64 + lost + get("perf_bad_records")
    );
    assert_eq!(
        get("hwhint_total_events"),
        get("hwhint_useful_events") + get("hwhint_dropped_events")
    );
    assert!(
        get("pghot_drop_out_of_scope") > 0,
        "pghotd's own faults are out of scope"
    );
}

#[test]
fn hardware_sources_fail_at_once_naming_the_missing_pmu() {
    // This machine is a VM without a PMU: neither ibs_op nor cpu is in sysfs.
    for (source, pmu) in [("ibs", "ibs_op"), ("pebs", "cpu")] {
        let started = Instant::now();
        let out = util::run_code(
            pghotd().args(["--source", source, "--dry-run", "--duration", "5"]),
            3,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("opening PMU {pmu}: ")),
            "{source}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{source} failed slowly"
        );
    }
}

#[test]
fn auto_falls_back_to_page_faults_and_says_why() {
    let out = run(
        pghotd().args(["--dry-run", "--duration", "0.5", "--log", "info"]),
        true,
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("source auto chose pagefault"), "{log}");
    for why in ["ibs: ", "pebs: ", "damon: watches selected processes"] {
        assert!(log.contains(why), "no reason for {why}\n{log}");
    }
}

#[test]
fn an_unprivileged_user_is_told_per_cpu_why_and_what_to_do() {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap();
    if paranoid.trim().parse::<i32>().unwrap() <= 0 {
        eprintln!("skipped: perf_event_paranoid <= 0 lets anyone sample system-wide");
        return;
    }
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_pghotd"))
        .args(["--source", "pagefault", "--dry-run", "--duration", "1"])
        .arg("--socket")
        .arg(std::env::temp_dir().join(format!("pghotd-nobody-{}.sock", std::process::id())));
    let out = util::run_code(&mut cmd, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("neither CAP_PERFMON nor CAP_SYS_ADMIN"),
        "{err}"
    );
    assert!(err.contains("pagefault could not open on any CPU"), "{err}");
    assert!(
        err.contains("cpu 0: opening page-faults: Permission denied (os error 13)"),
        "{err}"
    );
    assert!(
        err.contains("kernel.perf_event_paranoid <= 0 (it is"),
        "{err}"
    );
}

/// How many of `pid`'s fds are perf events (links to `anon_inode:[perf_event]`).
fn perf_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy() == "anon_inode:[perf_event]")
        .count()
}

#[test]
fn sigterm_releases_the_perf_fds_and_a_restart_runs_on_the_same_config() {
    let cpus = pghotd::sampler::perf::online_cpus(&pghotd::topology::SysfsRoot::new("/sys"))
        .unwrap()
        .len();
    let dir = tempfile::tempdir().unwrap();
    let (config, socket, stats) = (
        dir.path().join("pghotd.toml"),
        dir.path().join("ctl.sock"),
        dir.path().join("stats.json"),
    );
    std::fs::write(
        &config,
        format!(
            "enabled_sources = [\"pagefault\"]\ndry_run = true\nfreq_threshold = 3\n\
             control_socket = {:?}\n[pagefault]\nperiod = 4\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    for run in 1..=2 {
        let mut daemon = util::pghotd_bare()
            .arg("--config")
            .arg(&config)
            .arg("--stats-json")
            .arg(&stats)
            .args(["--log", "info"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning pghotd");
        let log = wait_for_sampling(&mut daemon);
        // One page-fault event per online CPU, and the config's settings in force.
        assert_eq!(perf_fds(daemon.id()), cpus, "run {run}");
        let got = util::run(
            util::pghotctl(&socket).args(["--json", "config", "get", "freq_threshold"]),
            true,
        );
        let got: Value = serde_json::from_slice(&got.stdout).unwrap();
        assert_eq!(got["freq_threshold"], 3, "run {run}: {got}");
        // Still exactly one per CPU after a few drains.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(perf_fds(daemon.id()), cpus, "run {run}");

        let sent = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(daemon.id() as i32),
            nix::sys::signal::SIGTERM,
        )
        .unwrap();
        let status = daemon.wait().unwrap();
        let took = sent.elapsed();
        let log = log.join().unwrap();
        assert!(status.success(), "run {run}: {status}\n{log}");
        assert!(
            took < Duration::from_secs(1),
            "run {run}: stopped in {took:?}\n{log}"
        );
        assert!(
            log.contains(&format!("config loaded from {}", config.display())),
            "run {run}:\n{log}"
        );
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        assert_eq!(doc["stop_reason"], "signal", "run {run}");
    }
}
