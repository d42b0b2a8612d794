//! Log lines as journald, a terminal-less stderr and a log shipper each need them: priorities
//! and no timestamp or colour under the journal, no colour without a terminal, JSON on request,
//! and the filter taken from PGHOTD_LOG when --log is not given.

mod util;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs a short dry-run replay with stderr going to a file; returns its lines.
fn log_lines(configure: impl FnOnce(&mut Command, &Path)) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let file = std::fs::File::create(&log).unwrap();
    let trace = util::workspace_root().join("tests/fixtures/traces/two-procs-hotset.trace");
    let mut cmd = util::replay(&trace);
    cmd.arg("--dry-run")
        .env_remove("JOURNAL_STREAM")
        .env_remove("PGHOTD_LOG")
        .stdout(Stdio::null())
        .stderr(file);
    configure(&mut cmd, &log);
    let status = cmd.status().unwrap();
    assert!(status.success(), "{status}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.is_empty(), "no log lines");
    text.lines().map(str::to_string).collect()
}

#[test]
fn under_the_journal_lines_carry_priorities_and_no_timestamp_or_colour() {
    let lines = log_lines(|cmd, log| {
        // systemd.exec(5): JOURNAL_STREAM is "DEVICE:INODE" of the stream stderr is connected to.
        let meta = std::fs::metadata(log).unwrap();
        cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
    });
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
