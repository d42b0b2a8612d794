//! Shared harness for the integration tests: run `pghotd`, `pghotctl` and `pghot-workload`,
//! show everything on failure. The root package's tests use it as `mod util`; the tools'
//! tests (crates/pghotctl/tests, crates/pghot-workload/tests) include this same file with
//! `#[path]`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root: the nearest directory above the including package that holds the
/// shared fixtures (the root package itself, or two levels above a crate under crates/).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("tests/fixtures/sysfs").is_dir())
        .expect("tests/fixtures/sysfs above this package")
        .to_path_buf()
}

/// The 3-node QEMU sysfs snapshot: nodes 0-1 DRAM with a CPU each, node 2 CPU-less lower tier.
pub fn qemu_3node() -> PathBuf {
    workspace_root().join("tests/fixtures/sysfs/qemu-3node")
}

/// A binary of any workspace member. Cargo names only the test's own package's binaries
/// (`CARGO_BIN_EXE_*`), so the others are found beside the test executable
/// (target/PROFILE/deps/TEST -> target/PROFILE/NAME). `cargo test` at the root builds every
/// member's binaries first: the members with integration tests get their binaries built.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/PROFILE/deps");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo test` at the workspace root, which builds every member",
        path.display()
    );
    path
}

/// `pghotd` with a control socket of its own (tests run in parallel; the default
/// /run/pghotd/pghotd.sock would be shared).
pub fn pghotd() -> Command {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let socket = std::env::temp_dir().join(format!("pghotd-test-{}-{n}.sock", std::process::id()));
    let mut cmd = pghotd_bare();
    cmd.arg("--socket").arg(socket);
    cmd
}

/// `pghotd` replaying `trace` on the QEMU 3-node topology (two DRAM nodes, one lower tier).
pub fn replay(trace: &Path) -> Command {
    let mut cmd = pghotd();
    cmd.arg("--source")
        .arg(format!("trace:{}", trace.display()))
        .arg("--sysfs-root")
        .arg(qemu_3node());
    cmd
}

/// A loopback `ADDR:PORT` nobody listens on now, for `--metrics-listen`.
pub fn free_loopback_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// `pghotd` without arguments.
pub fn pghotd_bare() -> Command {
    let mut cmd = Command::new(workspace_bin("pghotd"));
    cmd.env_remove("RUST_LOG");
    cmd
}

pub fn pghotctl(socket: &Path) -> Command {
    let mut cmd = Command::new(workspace_bin("pghotctl"));
    cmd.arg("--socket").arg(socket);
    cmd
}

pub fn workload() -> Command {
    Command::new(workspace_bin("pghot-workload"))
}

/// Runs a command and returns its output, panicking with cmd/stdout/stderr if `expect_ok`
/// does not match its success.
pub fn run(cmd: &mut Command, expect_ok: bool) -> Output {
    let out = cmd.output().expect("spawning the command");
    if out.status.success() != expect_ok {
        fail(cmd, &out, if expect_ok { "success" } else { "failure" });
    }
    out
}

/// Runs a command and returns its output, panicking unless it exits with `code`.
pub fn run_code(cmd: &mut Command, code: i32) -> Output {
    let out = cmd.output().expect("spawning the command");
    if out.status.code() != Some(code) {
        fail(cmd, &out, &format!("exit code {code}"));
    }
    out
}

fn fail(cmd: &Command, out: &Output, want: &str) -> ! {
    panic!(
        "\ncommand: {cmd:?}\nstatus: {} (want {want})\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The buffer range `pghot-workload` prints on its `start:` line, and its pid.
pub fn workload_buffer_and_pid(stdout: &str) -> ((u64, u64), u32) {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let range = stdout
        .lines()
        .find(|l| l.starts_with("start:"))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("buffer="))
        })
        .and_then(|r| r.split_once('-'))
        .map(|(a, b)| (hex(a), hex(b)))
        .expect("start line with buffer=LO-HI");
    let result: serde_json::Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|j| serde_json::from_str(j).unwrap())
        .expect("RESULT line");
    (range, result["pid"].as_u64().unwrap() as u32)
}

/// Counters from a `--stats-json` file.
pub fn counters(path: &Path) -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(path).expect("stats json written");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("stats json parses");
    doc["counters"]
        .as_object()
        .expect("counters object")
        .clone()
}

/// Asserts the named counters and that every other `pgpromote_*`/`pghot_drop_*` counter is 0.
pub fn assert_counters(got: &serde_json::Map<String, serde_json::Value>, want: &[(&str, u64)]) {
    let mut problems = Vec::new();
    for (name, value) in got {
        let value = value.as_u64().unwrap_or(u64::MAX);
        match want.iter().find(|(n, _)| n == name) {
            Some(&(_, w)) if w != value => problems.push(format!("{name}: got {value}, want {w}")),
            None if value != 0 && !name.starts_with("migrator_") => {
                problems.push(format!("{name}: got {value}, want 0"))
            }
            _ => {}
        }
    }
    for (name, _) in want {
        if !got.contains_key(*name) {
            problems.push(format!("{name}: missing"));
        }
    }
    assert!(
        problems.is_empty(),
        "counter mismatches:\n{}\nall: {got:#?}",
        problems.join("\n")
    );
}

/// Whether `tool` is on PATH. Absent: prints a loud skip notice and returns false, unless
/// PGHOTD_REQUIRE_TOOLS=1 (set by CI), where a missing tool fails the test.
pub fn tool_present(tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()));
    if !found {
        assert!(
            std::env::var_os("PGHOTD_REQUIRE_TOOLS").is_none_or(|v| v != "1"),
            "{tool} is not on PATH and PGHOTD_REQUIRE_TOOLS=1: install it (see .ci/run)"
        );
        eprintln!("\n*** SKIPPED: {tool} is not on PATH; this test did not run ***\n");
    }
    found
}

/// `text` read by the Prometheus Python client's OpenMetrics parser (tests/openmetrics/parse.py):
/// its families, each `{"name", "type", "unit", "help", "samples": [{"name", "labels",
/// "value"}]}`. Not valid OpenMetrics, or no parser, fails the test: the parser is the
/// reference this output is checked against, so a missing one is never a skip (.ci/run installs
/// python3-prometheus-client). The interpreter is `PGHOTD_PYTHON`, else /usr/bin/python3, the
/// one Debian's package installs the module for (a python3 earlier on PATH, such as pyenv's,
/// may not have it).
pub fn openmetrics(text: &str) -> Vec<serde_json::Value> {
    use std::io::Write as _;
    let python = std::env::var_os("PGHOTD_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let debian = PathBuf::from("/usr/bin/python3");
            if debian.is_file() {
                debian
            } else {
                PathBuf::from("python3")
            }
        });
    let script = workspace_root().join("tests/openmetrics/parse.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "running {} for the OpenMetrics parser: {e}; install python3-prometheus-client",
                python.display()
            )
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{} {}: {}\n--- the text ---\n{text}",
        python.display(),
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("parse.py prints JSON")
}
