//! The daemon against hostile paths and clients, through the real binary: paths planted where
//! it binds or writes (a regular file, a directory, a FIFO, a symlink, a dangling symlink, a
//! hard link), `--duration` values past what a `Duration` or an `Instant` holds, control
//! clients that hold every connection and send nothing or half a line, and metrics clients that
//! send nothing or trickle a byte every 1.5 s. Nothing may be deleted or overwritten, nothing
//! may hang, root must still be answered, and SIGTERM must still stop the daemon within 3 s.
//! Every wait here is bounded; the file runs in well under a minute.

mod util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `cmd` with its stderr in `log`, waited for at most `limit` (then killed). Returns the exit
/// status (None if it had to be killed), the time taken and the log.
fn run_bounded(
    cmd: &mut Command,
    log: &Path,
    limit: Duration,
) -> (Option<ExitStatus>, Duration, String) {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut child, limit);
    let took = started.elapsed();
    (
        status,
        took,
        std::fs::read_to_string(log).unwrap_or_default(),
    )
}

fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A FIFO source nobody writes to: the daemon runs until stopped.
fn idle_fifo(dir: &Path) -> PathBuf {
    let fifo = dir.join("samples.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    fifo
}

/// `pghotd` on the QEMU topology reading `source`, in a dry run, with `socket`.
fn pghotd(source: &Path, socket: &Path) -> Command {
    let mut cmd = util::pghotd_bare();
    cmd.arg("--source")
        .arg(format!("trace:{}", source.display()))
        .args(["--dry-run", "--sysfs-root"])
        .arg(util::qemu_3node())
        .arg("--socket")
        .arg(socket);
    cmd
}

/// A running daemon on an idle FIFO, killed if the test does not stop it.
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Daemon {
    fn start(extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("ctl.sock");
        let fifo = idle_fifo(dir.path());
        let child = pghotd(&fifo, &socket)
            .args(extra)
            .stderr(std::fs::File::create(dir.path().join("pghotd.log")).unwrap())
            .spawn()
            .unwrap();
        let mut d = Daemon { child, dir, socket };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut probe = UnixStream::connect(&d.socket);
        while probe.is_err() {
            if let Some(status) = d.child.try_wait().unwrap() {
                panic!(
                    "pghotd exited ({status}) before its socket answered:\n{}",
                    d.log()
                );
            }
            assert!(Instant::now() < deadline, "no socket; log:\n{}", d.log());
            std::thread::sleep(Duration::from_millis(20));
            probe = UnixStream::connect(&d.socket);
        }
        // The probe holds a connection slot until the daemon has seen it close: wait for the
        // daemon's end of it, so a test that fills the slots finds all of them free.
        let mut probe = probe.unwrap();
        probe.shutdown(std::net::Shutdown::Write).unwrap();
        probe
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _ = probe.read_to_end(&mut Vec::new());
        d
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pghotd.log")).unwrap_or_default()
    }

    /// SIGTERM, and the time until the process is gone (at most 10 s, then it is killed).
    fn sigterm(mut self) -> (Option<ExitStatus>, Duration) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let sent = Instant::now();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = wait_bounded(&mut self.child, Duration::from_secs(10));
        (status, sent.elapsed())
    }
}

/// Waits until something accepts on `addr`: the daemon binds its control socket before its
/// metrics port, so the control socket answering does not mean the port is bound yet.
fn wait_for_tcp(addr: &str, d: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "no metrics port; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What is at a path, to compare before and after: its type, target and contents.
fn snapshot(path: &Path) -> String {
    match std::fs::symlink_metadata(path) {
        Err(e) => format!("absent ({})", e.kind()),
        Ok(m) if m.file_type().is_symlink() => {
            format!("symlink to {}", std::fs::read_link(path).unwrap().display())
        }
        Ok(m) if m.is_file() => format!("file {:?}", std::fs::read_to_string(path).unwrap()),
        Ok(m) if m.is_dir() => "directory".into(),
        Ok(m) if m.file_type().is_fifo() => "fifo".into(),
        Ok(m) if m.file_type().is_socket() => "socket".into(),
        Ok(_) => "other".into(),
    }
}

/// Paths an unprivileged user could plant in a world-writable directory, each with the files
/// it could point at. Returns (name, path, paths to watch).
fn planted(dir: &Path) -> Vec<(&'static str, PathBuf, Vec<PathBuf>)> {
    let precious = dir.join("precious");
    std::fs::write(&precious, "root's secret\n").unwrap();
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.join("regular.txt");
    std::fs::write(&file, "data\n").unwrap();
    let sub = dir.join("a-directory");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("inside"), "kept\n").unwrap();
    let fifo = dir.join("a.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let link = dir.join("link-to-precious");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    let dangling = dir.join("dangling");
    let target = dir.join("would-be-created");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    vec![
        ("regular file", file.clone(), vec![file]),
        (
            "directory",
            sub.clone(),
            vec![sub.clone(), sub.join("inside")],
        ),
        ("FIFO", fifo.clone(), vec![fifo]),
        ("symlink", link.clone(), vec![link, precious.clone()]),
        ("dangling symlink", dangling.clone(), vec![dangling, target]),
    ]
}

#[test]
fn a_control_socket_path_that_is_not_a_socket_is_an_error_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("empty.trace");
    std::fs::write(&trace, "# pghot-trace v1\n").unwrap();
    for (name, path, watch) in planted(dir.path()) {
        let before: Vec<String> = watch.iter().map(|p| snapshot(p)).collect();
        let (status, _, err) = run_bounded(
            &mut pghotd(&trace, &path),
            &dir.path().join("log"),
            Duration::from_secs(10),
        );
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{name}: {err}");
        assert!(
            err.contains(&path.display().to_string()) && err.contains("not a socket"),
            "{name}: {err}"
        );
        let after: Vec<String> = watch.iter().map(|p| snapshot(p)).collect();
        assert_eq!(before, after, "{name}: changed by pghotd");
    }
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("empty.trace");
    std::fs::write(&trace, "# pghot-trace v1\n").unwrap();
    let socket = dir.path().join("ctl.sock");
    let live = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let (status, _, err) = run_bounded(
        &mut pghotd(&trace, &socket),
        &dir.path().join("log"),
        Duration::from_secs(10),
    );
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{err}");
    assert!(err.contains("another pghotd is listening"), "{err}");
    assert_eq!(snapshot(&socket), "socket");
    drop(live); // the file stays: a stale socket
    let (status, _, err) = run_bounded(
        &mut pghotd(&trace, &socket),
        &dir.path().join("log"),
        Duration::from_secs(10),
    );
    assert!(status.is_some_and(|s| s.success()), "{err}");
    assert!(err.contains("replacing stale control socket"), "{err}");
}

#[test]
fn stats_json_paths_that_could_redirect_root_fail_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = idle_fifo(dir.path());
    let mut cases = planted(dir.path());
    let target = dir.path().join("hard-target");
    std::fs::write(&target, "keep me\n").unwrap();
    let hard = dir.path().join("hard-link");
    std::fs::hard_link(&target, &hard).unwrap();
    cases.push(("hard link", hard, vec![target]));
    for (name, path, watch) in cases {
        if name == "regular file" {
            continue; // ours to overwrite
        }
        let before: Vec<String> = watch.iter().map(|p| snapshot(p)).collect();
        // The source never ends and the duration is long: only a check at start ends this run
        // within a second (a FIFO at the path used to hang the exit for good).
        let (status, took, err) = run_bounded(
            pghotd(&fifo, &dir.path().join("ctl.sock"))
                .args(["--duration", "5", "--stats-json"])
                .arg(&path),
            &dir.path().join("log"),
            Duration::from_secs(10),
        );
        assert!(
            status.is_some_and(|s| !s.success()),
            "{name}: {status:?}: {err}"
        );
        assert!(
            took < Duration::from_secs(3),
            "{name}: took {took:?}: {err}"
        );
        assert!(
            err.contains("--stats-json") && err.contains(&path.display().to_string()),
            "{name}: {err}"
        );
        let after: Vec<String> = watch.iter().map(|p| snapshot(p)).collect();
        assert_eq!(before, after, "{name}: changed by pghotd");
    }
}

#[test]
fn durations_a_duration_cannot_hold_are_usage_errors_and_huge_ones_mean_no_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = idle_fifo(dir.path());
    for value in ["1e300", "2e19", "inf", "NaN", "-1", "0"] {
        let (status, took, err) = run_bounded(
            pghotd(&fifo, &dir.path().join("ctl.sock")).arg(format!("--duration={value}")),
            &dir.path().join("log"),
            Duration::from_secs(10),
        );
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{value}: {err}");
        assert!(took < Duration::from_secs(3), "{value}: {took:?}");
        assert!(
            err.contains("--duration") && !err.contains("panicked"),
            "{value}: {err}"
        );
    }
    // 1e19 s fits a Duration but not an Instant: it runs until told to stop.
    let d = Daemon::start(&["--duration", "1e19"]);
    std::thread::sleep(Duration::from_millis(300));
    let log = d.log();
    let (status, took) = d.sigterm();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// Runs `f` on a thread whose credentials are uid/gid 65534 (the raw syscalls change only the
/// calling thread, unlike glibc's wrappers), so SO_PEERCRED shows the daemon a non-root peer.
fn as_nobody<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: plain syscalls with integer arguments; they change this thread only.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<u32>()),
                0
            );
            assert_eq!(libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534), 0);
        }
        f()
    })
    .join()
    .unwrap()
}

#[test]
fn root_is_answered_while_32_idle_clients_hold_the_control_socket() {
    let d = Daemon::start(&[]);
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let socket = d.socket.clone();
    // 32 members of the socket's group: half connect and send nothing, half send half a
    // request and stall.
    let held: Vec<OwnedFd> = as_nobody(move || {
        (0..32)
            .map(|i| {
                let mut s = UnixStream::connect(&socket).unwrap();
                if i % 2 == 1 {
                    let _ = s.write_all(b"{\"v\":1,\"req\":");
                }
                OwnedFd::from(s)
            })
            .collect()
    });
    std::thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    let out = util::run(util::pghotctl(&d.socket).arg("status"), true);
    let answered = asked.elapsed();
    assert!(String::from_utf8_lossy(&out.stdout).contains("promotion: running"));
    assert!(
        answered < Duration::from_secs(2),
        "status took {answered:?}"
    );
    // Exactly the clients beyond the ordinary slots were told `busy` (and closed); the others
    // hold a slot each (a slot still held by someone else would make this 17). The daemon
    // accepts in order, so by the time root's later connection was answered every `busy`
    // line was written: a short read timeout tells the two kinds apart.
    let told_busy = held
        .iter()
        .filter(|fd| {
            let mut s = UnixStream::from((*fd).try_clone().unwrap());
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text.contains("busy")
        })
        .count();
    assert_eq!(told_busy, 32 - pghotd::control::server::MAX_CONNECTIONS);
    // A non-root newcomer finds the ordinary slots taken.
    let socket = d.socket.clone();
    let busy = as_nobody(move || {
        let mut s = UnixStream::connect(&socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    });
    assert!(busy.contains("busy"), "{busy}");
    let log = d.log();
    let (status, took) = d.sigterm();
    drop(held);
    eprintln!(
        "control: status answered in {answered:?}; SIGTERM exit in {took:?} with 32 idle clients"
    );
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
}

/// One scrape: the status line and the time it took, or why it failed.
fn scrape(addr: &str) -> Result<(String, Duration), String> {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| format!("after {:?}: {e}", started.elapsed()))?;
    if !text.ends_with("# EOF\n") {
        return Err(format!("incomplete answer: {text:?}"));
    }
    Ok((
        text.lines().next().unwrap_or("").to_string(),
        started.elapsed(),
    ))
}

#[test]
fn scrapes_and_sigterm_are_prompt_while_slow_and_idle_metrics_clients_connect() {
    let addr = util::free_loopback_addr();
    let d = Daemon::start(&["--metrics-listen", &addr]);
    wait_for_tcp(&addr, &d);
    // 20 clients that send a byte of their request every 1.5 s (each byte used to restart a
    // 2 s read timeout), and 20 that connect and send nothing: more than the connection cap.
    let slow: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let idle: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut slow = slow;
            let request = b"GET /metrics HTTP/1.1\r\n\r\n";
            for i in 0.. {
                for s in &mut slow {
                    let _ = s.write_all(&request[i % request.len()..][..1]);
                }
                for _ in 0..15 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    // Scrapes right away, as the first deadlines pass, and after them.
    let mut latencies = Vec::new();
    for wait in [200, 1_800, 1_500] {
        std::thread::sleep(Duration::from_millis(wait));
        let (status, took) = scrape(&addr).unwrap_or_else(|e| panic!("scrape: {e}\n{}", d.log()));
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(took < Duration::from_secs(2), "scrape took {took:?}");
        latencies.push(took);
    }
    // A client that sent half a request was closed at its head deadline (2 s after accept).
    let mut half = TcpStream::connect(&addr).unwrap();
    half.write_all(b"GET /metr").unwrap();
    half.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = half.read_to_end(&mut rest);
    let closed = started.elapsed();
    assert!(
        closed >= Duration::from_millis(1500) && closed < Duration::from_secs(4),
        "half a request held {closed:?}"
    );
    let log = d.log();
    let (status, took) = d.sigterm();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickle.join().unwrap();
    drop(idle);
    eprintln!(
        "metrics: scrapes in {latencies:?} with 20 slow + 20 idle clients; SIGTERM exit in {took:?}"
    );
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
}

#[test]
fn metrics_answers_bad_and_oversized_heads_and_keeps_serving() {
    let addr = util::free_loopback_addr();
    let d = Daemon::start(&["--metrics-listen", &addr]);
    wait_for_tcp(&addr, &d);
    let ask = |bytes: &[u8]| {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        let mut text = Vec::new();
        let _ = s.read_to_end(&mut text);
        String::from_utf8_lossy(&text)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(ask(b"\x00\xff garbage\r\n\r\n"), "HTTP/1.1 400 Bad Request");
    assert_eq!(
        ask(b"DELETE /metrics HTTP/1.1\r\n\r\n"),
        "HTTP/1.1 405 Method Not Allowed"
    );
    assert_eq!(ask(b"GET /nope HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
    let long = [b"GET /".as_slice(), &[b'a'; 9000]].concat();
    assert_eq!(ask(&long), "HTTP/1.1 431 Request Header Fields Too Large");
    // Connect and close at once, without a byte.
    drop(TcpStream::connect(&addr).unwrap());
    assert_eq!(scrape(&addr).unwrap().0, "HTTP/1.1 200 OK");
    let (status, _) = d.sigterm();
    assert!(status.is_some_and(|s| s.success()));
}
