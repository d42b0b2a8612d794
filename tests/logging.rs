//! Log lines as journald, a terminal-less stderr and a log shipper each need them: priorities
//! and no timestamp or colour under the journal, no colour without a terminal, JSON on request,
//! the filter taken from PGHOTD_LOG, then RUST_LOG, when --log is not given; and the reason
//! pghotd stops written in the same form as its log.

mod util;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `cmd` with stderr going to a file, expecting exit `code`; returns its lines.
fn stderr_lines(
    mut cmd: Command,
    code: i32,
    configure: impl FnOnce(&mut Command, &Path),
) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let file = std::fs::File::create(&log).unwrap();
    cmd.env_remove("JOURNAL_STREAM")
        .env_remove("PGHOTD_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file);
    configure(&mut cmd, &log);
    let status = cmd.status().unwrap();
    assert_eq!(status.code(), Some(code), "{status}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.is_empty(), "no log lines");
    text.lines().map(str::to_string).collect()
}

/// A short dry-run replay's log lines.
fn log_lines(configure: impl FnOnce(&mut Command, &Path)) -> Vec<String> {
    let trace = util::workspace_root().join("tests/fixtures/traces/two-procs-hotset.trace");
    let mut cmd = util::replay(&trace);
    cmd.arg("--dry-run");
    stderr_lines(cmd, 0, configure)
}

/// Runs as systemd starts a service whose stderr is the journal: systemd.exec(5) sets
/// JOURNAL_STREAM to "DEVICE:INODE" of that stream.
fn as_journal(cmd: &mut Command, log: &Path) {
    let meta = std::fs::metadata(log).unwrap();
    cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
}

#[test]
fn under_the_journal_lines_carry_priorities_and_no_timestamp_or_colour() {
    let lines = log_lines(as_journal);
    for line in &lines {
        // sd-daemon(3): "<6>" is LOG_INFO, "<4>" LOG_WARNING, "<3>" LOG_ERR.
        let prio = line.get(..3).unwrap_or_default();
        assert!(["<3>", "<4>", "<6>", "<7>"].contains(&prio), "{line}");
        assert!(!line.contains('\u{1b}'), "escape code in {line:?}");
        // The default text format starts with an RFC 3339 time (2026-...); the journal keeps its own.
        assert!(!line[3..].starts_with("20"), "timestamp in {line:?}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<6>") && l.contains("config"))
    );
}

#[test]
fn a_journal_stream_naming_another_file_is_ignored_and_a_file_gets_no_colour() {
    let lines = log_lines(|cmd, _| {
        // Inherited from a parent whose stderr was the journal: it names another file.
        cmd.env("JOURNAL_STREAM", "1:1");
    });
    for line in &lines {
        assert!(!line.starts_with('<'), "{line}");
        assert!(!line.contains('\u{1b}'), "escape code in {line:?}");
        assert!(line.starts_with("20"), "no timestamp in {line:?}");
    }
}

#[test]
fn json_lines_and_the_filter_from_pghotd_log() {
    let lines = log_lines(|cmd, _| {
        cmd.args(["--log-format", "json"]);
    });
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
    // PGHOTD_LOG=warn: the info lines of a clean run are gone.
    let dir = tempfile::tempdir().unwrap();
    let trace = util::workspace_root().join("tests/fixtures/traces/two-procs-hotset.trace");
    let out = util::run(
        util::replay(&trace)
            .arg("--dry-run")
            .env("PGHOTD_LOG", "warn")
            .current_dir(dir.path()),
        true,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("INFO"), "{err}");
    // An explicit --log wins over the environment.
    let out = util::run(
        util::replay(&trace)
            .args(["--dry-run", "--log", "info"])
            .env("PGHOTD_LOG", "warn"),
        true,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("INFO"));
}

/// The lines of a start refused for a value out of range (exit 2).
fn fatal_lines(configure: impl FnOnce(&mut Command, &Path)) -> Vec<String> {
    let mut cmd = util::pghotd();
    cmd.args(["--source", "trace:-", "--freq-threshold", "0"]);
    stderr_lines(cmd, 2, configure)
}

#[test]
fn why_pghotd_stops_is_an_error_priority_line_under_the_journal_and_json_for_shippers() {
    let lines = fatal_lines(as_journal);
    // Every line has a priority (journald files a bare line at info); the reason at LOG_ERR.
    assert!(lines.iter().all(|l| l.starts_with('<')), "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<3>pghotd: ") && l.contains("freq_threshold")),
        "{lines:#?}"
    );
    let lines = fatal_lines(|cmd, _| {
        cmd.args(["--log-format", "json"]);
    });
    let last: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(last["level"], "ERROR");
    assert!(
        last["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("freq_threshold"),
        "{last}"
    );
    for line in &lines {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    // As text, the plain line scripts read.
    let lines = fatal_lines(|_, _| {});
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("pghotd: ") && l.contains("freq_threshold")),
        "{lines:#?}"
    );
}

#[test]
fn rust_log_is_the_filter_when_neither_log_nor_pghotd_log_is_given() {
    let trace = util::workspace_root().join("tests/fixtures/traces/two-procs-hotset.trace");
    let out = util::run(
        util::replay(&trace)
            .arg("--dry-run")
            .env_remove("PGHOTD_LOG")
            .env("RUST_LOG", "warn"),
        true,
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("INFO"));
    // PGHOTD_LOG wins over RUST_LOG.
    let out = util::run(
        util::replay(&trace)
            .arg("--dry-run")
            .env("PGHOTD_LOG", "info")
            .env("RUST_LOG", "warn"),
        true,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("INFO"));
}
