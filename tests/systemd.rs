//! The systemd unit and the notify protocol: `systemd-analyze verify` accepts the unit, its
//! offline security exposure stays at its recorded level, and pghotd sends READY=1 with a
//! STATUS= line, then STOPPING=1, to `NOTIFY_SOCKET`, and WATCHDOG=1 pings when systemd asks
//! for them (`WATCHDOG_USEC`, `WATCHDOG_PID`).
//!
//! Without systemd-analyze the unit checks skip loudly; CI sets PGHOTD_REQUIRE_TOOLS=1, which
//! turns a missing tool into a failure.

mod util;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn unit_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/pghotd.service")
}

/// The unit with ExecStart pointing at the binary under test (verify checks it exists).
fn unit_for_test(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(unit_source()).unwrap();
    let path = dir.join("pghotd.service");
    std::fs::write(
        &path,
        text.replace(
            "/usr/bin/pghotd ",
            &format!("{} ", env!("CARGO_BIN_EXE_pghotd")),
        ),
    )
    .unwrap();
    path
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    if !util::tool_present("systemd-analyze") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_test(dir.path());
    // The man pages are checked after the package installs them (tests/packaging.rs).
    let out = util::run(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&unit),
        true,
    );
    // verify exits 0 for some warnings; any output is a finding.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.trim().is_empty(), "systemd-analyze verify: {stderr}");
}

/// Recorded in packaging/README.md; lower is better. A change that raises it must say why.
const EXPOSURE_RECORDED: f64 = 3.0;

#[test]
fn the_unit_security_exposure_stays_at_the_recorded_level() {
    if !util::tool_present("systemd-analyze") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_test(dir.path());
    let out = util::run(
        Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(&unit),
        true,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for pghotd.service:").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no overall exposure in:\n{text}"));
    assert!(
        exposure <= EXPOSURE_RECORDED,
        "exposure {exposure} > recorded {EXPOSURE_RECORDED}:\n{text}"
    );
}

#[test]
fn pghotd_notifies_ready_with_status_then_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&socket).unwrap();
    listener
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let trace = dir.path().join("t.trace");
    std::fs::write(&trace, "1000 0 4242 4242 0x7f0000001000 - L extmem 2\n").unwrap();
    let out = util::run(
        util::pghotd()
            .env("NOTIFY_SOCKET", &socket)
            .arg("--source")
            .arg(format!("trace:{}", trace.display()))
            .arg("--sysfs-root")
            .arg(util::qemu_3node())
            .args(["--pid", "4242", "--dry-run"]),
        true,
    );
    let mut messages = Vec::new();
    let mut buf = [0u8; 4096];
    while messages.len() < 2 {
        let n = listener.recv(&mut buf).unwrap_or_else(|e| {
            panic!(
                "waiting for notifications (got {messages:?}): {e}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let ready = &messages[0];
    assert!(ready.lines().any(|l| l == "READY=1"), "{messages:?}");
    let status = ready
        .lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or_else(|| panic!("no STATUS= with READY: {messages:?}"));
    assert!(
        status.starts_with("1 source(s), 1 migrator(s), dry run; scope: pids [4242];"),
        "{status}"
    );
    let last = messages.last().unwrap();
    assert!(last.lines().any(|l| l == "STOPPING=1"), "{messages:?}");
    assert!(
        last.contains("STATUS=stopping: every source ended"),
        "{messages:?}"
    );
}

/// Reads datagrams until `enough` says so or `within` passes; returns them all.
fn collect(
    listener: &UnixDatagram,
    within: Duration,
    enough: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = std::time::Instant::now() + within;
    let mut messages = Vec::new();
    let mut buf = [0u8; 4096];
    while !enough(&messages) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        listener.set_read_timeout(Some(left)).unwrap();
        match listener.recv(&mut buf) {
            Ok(n) => messages.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => break,
        }
    }
    messages
}

fn pings(messages: &[String]) -> usize {
    messages
        .iter()
        .filter(|m| m.lines().any(|l| l == "WATCHDOG=1"))
        .count()
}

/// pghotd replaying stdin (held open by the test) with the watchdog at `usec`.
fn supervised_pghotd(socket: &Path, usec: &str, pid: Option<&str>) -> std::process::Child {
    let mut cmd = util::pghotd();
    cmd.env("NOTIFY_SOCKET", socket)
        .env("WATCHDOG_USEC", usec)
        .env_remove("WATCHDOG_PID")
        .args(["--source", "trace:-", "--sysfs-root"])
        .arg(util::qemu_3node())
        .args(["--pid", "4242", "--dry-run"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if let Some(pid) = pid {
        cmd.env("WATCHDOG_PID", pid);
    }
    cmd.spawn().unwrap()
}

/// Ends the run (end of stdin ends the only source) and returns pghotd's stderr.
fn finish(mut child: std::process::Child) -> String {
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "pghotd: {:?}\n{stderr}", out.status);
    stderr
}

#[test]
fn pghotd_pings_the_watchdog_while_its_threads_are_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&socket).unwrap();
    // 0.4 s: a ping every 0.2 s.
    let mut child = supervised_pghotd(&socket, "400000", None);
    {
        // Samples flowing through the source thread, and idle migrators, are both healthy.
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        stdin
            .write_all(b"1000 0 4242 4242 0x7f0000001000 - L extmem 2\n")
            .unwrap();
        stdin.flush().unwrap();
    }
    let messages = collect(&listener, Duration::from_secs(20), |m| pings(m) >= 5);
    let stderr = finish(child);
    assert!(
        pings(&messages) >= 5,
        "five WATCHDOG=1 pings: {messages:?}\nstderr: {stderr}"
    );
    assert!(
        messages[0].lines().any(|l| l == "READY=1"),
        "READY=1 first: {messages:?}"
    );
    assert!(stderr.contains("systemd watchdog: 400ms"), "{stderr}");
    assert!(!stderr.contains("without progress"), "{stderr}");
}

#[test]
fn pghotd_leaves_a_watchdog_meant_for_another_process_alone() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&socket).unwrap();
    // WATCHDOG_PID names pid 1, not pghotd (sd_watchdog_enabled(3)).
    let child = supervised_pghotd(&socket, "200000", Some("1"));
    let messages = collect(&listener, Duration::from_secs(2), |_| false);
    finish(child);
    assert!(
        messages.iter().any(|m| m.lines().any(|l| l == "READY=1")),
        "{messages:?}"
    );
    assert_eq!(pings(&messages), 0, "{messages:?}");
}
