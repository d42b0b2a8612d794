//! `pghotctl`: talks to a running pghotd over its control socket.
//!
//! Every way it can fail has its own exit status ([`EXIT_STATUS`], printed by `--help` and
//! the man page's EXIT STATUS). A closed stdout (`| head`) is success.

mod view;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use pghot_protocol::NodeId;
use pghot_protocol::client::{Client, ClientError};
use pghot_protocol::{
    DEFAULT_TOP_PIDS, ErrorKind, MigrateReport, ReloadReport, Request, Snapshot, StatusReport,
};
use pghotd::generate::ManSections;

/// Watches and steers a running pghotd.
#[derive(Debug, Parser)]
#[command(name = "pghotctl", version, after_help = MAN.exit_status_help())]
struct Cli {
    /// The daemon's control socket.
    #[arg(long, global = true, value_name = "PATH", default_value = pghot_protocol::DEFAULT_CONTROL_SOCKET)]
    socket: PathBuf,
    /// Print the daemon's JSON answer instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sources in use and why, targets, tiers and nodes, uptime, paused or not.
    Status,
    /// Every counter (names as in `pghotd --stats-json`), with rates under --watch.
    Stats {
        /// Print again every SECS seconds with per-second rates.
        #[arg(long, value_name = "SECS")]
        watch: Option<f64>,
        /// Also list the per-process counters.
        #[arg(long)]
        pids: bool,
    },
    /// Live view: rates, node fill, processes, hottest ranges (q quits, p asks before it
    /// pauses promotion, ? for keys).
    Top {
        /// Refresh interval; with --once, the time between the two snapshots its rates come
        /// from.
        #[arg(long, value_name = "SECS", default_value = "1")]
        interval: f64,
        /// Print the 80x24 text frame once, as `top -b -n1`, and exit (rates over --interval).
        #[arg(long)]
        once: bool,
        /// With --once or --json: the hottest ranges of this process instead of the process
        /// list.
        #[arg(long, value_name = "PID")]
        pid: Option<u32>,
    },
    /// Read or change tunables.
    Config {
        #[command(subcommand)]
        op: ConfigOp,
    },
    /// Stop promoting (candidates are still counted, as pgpromote_paused).
    Pause,
    /// Promote again.
    Resume,
    /// Re-read the config file given at start (like SIGHUP).
    Reload,
    /// Move every page of a process on the --from nodes to --to, rate-limited like promotions.
    Migrate {
        #[arg(long)]
        pid: u32,
        /// Source nodes, comma-separated (e.g. 2,3).
        #[arg(long, value_delimiter = ',', required = true)]
        from: Vec<NodeId>,
        #[arg(long)]
        to: NodeId,
    },
    /// Record the samples pghotd receives into a pghot-trace v1 file (replay it with
    /// `pghotd --source trace:FILE --dry-run`).
    Record {
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Stop after this many seconds [default: until Ctrl-C].
        #[arg(long, value_name = "SECS")]
        duration: Option<f64>,
    },
    /// Print the man page or a shell completion script (used to build packages).
    #[command(hide = true)]
    Generate { kind: pghotd::generate::Generated },
}

#[derive(Debug, Subcommand)]
enum ConfigOp {
    /// Print one key, or all.
    Get { key: Option<String> },
    /// Set a runtime tunable; validated like the config file.
    Set { key: String, value: String },
}

/// pghotd answered the request with an error (a value out of range, a key that needs a
/// restart, a recording already running, ...).
const EXIT_DAEMON: u8 = 1;
/// clap's own status for a command line it refuses; pghotctl's checks of values use it too.
const EXIT_USAGE: u8 = 2;
const EXIT_NOT_RUNNING: u8 = 3;
const EXIT_NO_ACCESS: u8 = 4;
const EXIT_READ_ONLY: u8 = 5;
const EXIT_CONNECTION: u8 = 6;
const EXIT_LOCAL_IO: u8 = 7;

/// Every exit status and when it comes (`--help` and the man page), and the files it uses.
const MAN: ManSections = ManSections {
    exit_status: EXIT_STATUS,
    files: &[(
        pghot_protocol::DEFAULT_CONTROL_SOCKET,
        "pghotd's control socket (mode 0660, group pghot), unless --socket names another",
    )],
};

const EXIT_STATUS: &[(u8, &str)] = &[
    (0, "done (also when stdout closes early, as with | head)"),
    (
        EXIT_DAEMON,
        "pghotd answered with an error: a value out of range, a key that needs a restart, \
         a recording already running, too many connections",
    ),
    (EXIT_USAGE, "the command line is wrong"),
    (
        EXIT_NOT_RUNNING,
        "no pghotd listens on the socket (no such file, or nobody accepts)",
    ),
    (
        EXIT_NO_ACCESS,
        "the socket exists but may not be opened: root and group pghot only",
    ),
    (
        EXIT_READ_ONLY,
        "pghotd refused a change: it needs root or group pghot, on the control socket (the \
         read-only socket refuses every change)",
    ),
    (
        EXIT_CONNECTION,
        "the connection failed midway: closed, an I/O error, or an answer pghotctl cannot read",
    ),
    (
        EXIT_LOCAL_IO,
        "a local file, stdout or the terminal failed (record --output, top's screen)",
    ),
];

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::BrokenPipe
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("pghotctl: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(e) = e.downcast_ref::<ClientError>() {
        return match e {
            ClientError::Daemon(body) if body.kind == ErrorKind::PermissionDenied => EXIT_READ_ONLY,
            ClientError::Daemon(_) => EXIT_DAEMON,
            ClientError::NotRunning { .. } => EXIT_NOT_RUNNING,
            ClientError::Permission { .. } => EXIT_NO_ACCESS,
            ClientError::Connect { .. }
            | ClientError::Io { .. }
            | ClientError::Closed { .. }
            | ClientError::Protocol(_) => EXIT_CONNECTION,
        };
    }
    if e.downcast_ref::<UsageError>().is_some() {
        EXIT_USAGE
    } else if e.downcast_ref::<LocalError>().is_some()
        || e.downcast_ref::<std::io::Error>().is_some()
    {
        // A local file, the terminal, or stdout (a closed stdout was success already).
        EXIT_LOCAL_IO
    } else {
        // An answer that parsed as JSON but not as the report pghotctl expects.
        EXIT_CONNECTION
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

/// A local file or the terminal failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
struct LocalError {
    what: String,
    source: std::io::Error,
}

fn local(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalError {
    let what = what.into();
    move |source| LocalError { what, source }
}

/// Whole, so that a closed stdout is an `io::Error` (success for `| head`) and any other
/// failure to write it is a local one.
fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(())
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Status => status(cli),
        Command::Stats { watch, pids } => stats(cli, *watch, *pids),
        Command::Top {
            interval,
            once,
            pid,
        } => top(cli, *interval, *once, *pid),
        Command::Config { op } => config(cli, op),
        Command::Pause => pause(cli, Request::Pause),
        Command::Resume => pause(cli, Request::Resume),
        Command::Reload => reload(cli),
        Command::Migrate { pid, from, to } => migrate(cli, *pid, from, *to),
        Command::Record { output, duration } => record(cli, output, *duration),
        Command::Generate { kind } => {
            use clap::CommandFactory;
            let out = &mut std::io::stdout().lock();
            pghotd::generate::write(*kind, Cli::command(), "1", &MAN, out)?;
            Ok(())
        }
    }
}

fn status(cli: &Cli) -> anyhow::Result<()> {
    let mut client = Client::connect(&cli.socket)?;
    let v = client.request(&Request::Status)?;
    if cli.json {
        return print_json(&v);
    }
    let s: StatusReport = serde_json::from_value(v)?;
    print_status(&s)?;
    // The damon figure is an extra: a daemon that cannot answer the counters request still
    // had its status shown, and the command succeeds on that.
    if let Ok(snap) = client.call::<Snapshot>(&COUNTERS_ONLY) {
        let regions = snap.counter("damon_accessed_regions");
        let pages = snap.counter("damon_accessed_region_pages");
        if let Some(line) = damon_granularity(regions, pages) {
            writeln!(std::io::stdout().lock(), "{line}")?;
        }
    }
    Ok(())
}

/// How coarse the damon source's view is, once it has seen an accessed region: the mean
/// accessed region (`damon_accessed_region_pages / damon_accessed_regions`, since start). Every
/// page of a region gets the same credit, so this is the finest pghotd can place with DAMON.
fn damon_granularity(regions: u64, pages: u64) -> Option<String> {
    let mean = pages.checked_div(regions)?;
    Some(format!(
        "damon regions: {regions} accessed, {mean} pages ({} KiB) each on average: the finest \
         it places (hot pages scattered within that go with their cold neighbours)",
        mean * pghotd::hotness::PAGE_SIZE / 1024
    ))
}

fn top(cli: &Cli, interval: f64, once: bool, pid: Option<u32>) -> anyhow::Result<()> {
    let request = Request::Top {
        pid,
        limit: DEFAULT_TOP_PIDS,
    };
    if cli.json {
        let v = Client::connect(&cli.socket)?.request(&request)?;
        return print_json(&v);
    }
    let interval = positive_secs(interval, "--interval")?;
    if once {
        // Two snapshots --interval apart, so the frame shows rates, as top's first frame does.
        let mut client = Client::connect(&cli.socket)?;
        let first: Snapshot = client.call(&request)?;
        std::thread::sleep(interval);
        let second: Snapshot = client.call(&request)?;
        let frame = view::text_frame(first, second, pid, 80, 24);
        let mut out = std::io::stdout().lock();
        out.write_all(frame.as_bytes())?;
        return Ok(out.flush()?);
    }
    // Fail early, before the terminal switches, when the daemon is not there.
    Client::connect(&cli.socket)?;
    let mut daemon = LiveDaemon {
        path: cli.socket.clone(),
        client: None,
    };
    crate::view::term::run(&mut daemon, interval).map_err(|e| local("terminal")(e).into())
}

fn config(cli: &Cli, op: &ConfigOp) -> anyhow::Result<()> {
    let mut client = Client::connect(&cli.socket)?;
    match op {
        ConfigOp::Get { key } => {
            let v = client.request(&Request::ConfigGet { key: key.clone() })?;
            if cli.json {
                return print_json(&v);
            }
            let mut out = std::io::stdout().lock();
            for (k, v) in v.as_object().into_iter().flatten() {
                writeln!(out, "{k} = {v}")?;
            }
            Ok(())
        }
        ConfigOp::Set { key, value } => {
            let v = client.request(&Request::ConfigSet {
                key: key.clone(),
                value: value.clone(),
            })?;
            if cli.json {
                return print_json(&v);
            }
            let r: ReloadReport = serde_json::from_value(v)?;
            if r.applied.is_empty() {
                println!("{key}: unchanged");
            } else {
                println!("{key} = {value}: applied");
            }
            Ok(())
        }
    }
}

/// `pause` or `resume`, by `req`.
fn pause(cli: &Cli, req: Request) -> anyhow::Result<()> {
    let v = Client::connect(&cli.socket)?.request(&req)?;
    if cli.json {
        return print_json(&v);
    }
    let paused = v["paused"].as_bool().unwrap_or(false);
    println!("promotion {}", if paused { "paused" } else { "running" });
    Ok(())
}

fn reload(cli: &Cli) -> anyhow::Result<()> {
    let v = Client::connect(&cli.socket)?.request(&Request::Reload)?;
    if cli.json {
        return print_json(&v);
    }
    let r: ReloadReport = serde_json::from_value(v)?;
    println!(
        "reloaded {}",
        r.file
            .as_deref()
            .unwrap_or("(no config file; defaults and flags)")
    );
    println!("  applied: {}", list(&r.applied));
    println!(
        "  needs restart (running value kept): {}",
        list(&r.needs_restart)
    );
    Ok(())
}

fn migrate(cli: &Cli, pid: u32, from: &[NodeId], to: NodeId) -> anyhow::Result<()> {
    let v = Client::connect(&cli.socket)?.request(&Request::Migrate {
        pid,
        from: from.to_vec(),
        to,
    })?;
    if cli.json {
        return print_json(&v);
    }
    let r: MigrateReport = serde_json::from_value(v)?;
    println!(
        "pid {}: {} of {} pages moved to node {} ({:.1} MiB), {} failed, {:.2}s ({:.2}s waiting for the rate limit){}",
        r.pid,
        r.moved_pages,
        r.pages_found,
        r.to,
        r.moved_bytes as f64 / f64::from(1 << 20),
        r.failed_pages,
        r.elapsed_s,
        r.ratelimit_wait_s,
        r.stopped
            .map_or(String::new(), |s| format!("; stopped early: {s}"))
    );
    Ok(())
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn positive_secs(secs: f64, flag: &str) -> anyhow::Result<Duration> {
    if secs.is_finite() && secs > 0.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(UsageError(format!(
            "{flag} {secs}: must be a positive number of seconds"
        ))
        .into())
    }
}

fn print_status(s: &StatusReport) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "pghotd {} (pid {}), up {:.0}s",
        s.version, s.pid, s.uptime_s
    )?;
    writeln!(
        out,
        "promotion: {}{}",
        if s.paused { "paused" } else { "running" },
        if s.dry_run {
            " (dry run: nothing is moved)"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "config: {}",
        s.config_file
            .as_deref()
            .unwrap_or("none (defaults and flags)")
    )?;
    writeln!(
        out,
        "sources: {} (from {})",
        list(&s.sources),
        s.sources_from
    )?;
    writeln!(out, "target: {}", s.target)?;
    writeln!(out, "nodes:")?;
    for n in &s.nodes {
        writeln!(
            out,
            "  node{} {:<5} cpus {:<3} mem {} MiB, free {}{}",
            n.node,
            n.tier,
            n.cpus,
            n.mem_total_kb / 1024,
            n.mem_free_kb
                .map_or("?".into(), |f| format!("{} MiB", f / 1024)),
            n.queue_depth
                .map_or(String::new(), |q| format!(", queue {q}"))
        )?;
    }
    writeln!(out, "socket: {}", s.socket)?;
    if let Some(ro) = &s.readonly_socket {
        writeln!(out, "read-only socket: {ro}")?;
    }
    writeln!(
        out,
        "metrics: {}",
        s.metrics_listen.as_deref().unwrap_or("off")
    )?;
    if s.conflicts.is_empty() {
        writeln!(out, "competing promoters: none found")?;
    } else {
        writeln!(out, "competing promoters (they move the same pages):")?;
        for c in &s.conflicts {
            writeln!(out, "  {}", c.detail)?;
            writeln!(out, "    remedy: {}", c.remedy)?;
        }
    }
    Ok(())
}

/// Counters and gauges without the per-process rows: the daemon then skips its pass over the
/// hotness table (a read of every slot), which only those rows need.
const COUNTERS_ONLY: Request = Request::Top {
    pid: None,
    limit: 0,
};

fn stats(cli: &Cli, watch: Option<f64>, pids: bool) -> anyhow::Result<()> {
    let mut client = Client::connect(&cli.socket)?;
    let Some(watch) = watch else {
        // `--json` prints the whole snapshot, process rows included.
        let request = if pids || cli.json {
            Request::Stats
        } else {
            COUNTERS_ONLY
        };
        let v = client.request(&request)?;
        if cli.json {
            return print_json(&v);
        }
        let snap: Snapshot = serde_json::from_value(v)?;
        return print_stats(&snap, None, pids);
    };
    let every = positive_secs(watch, "--watch")?;
    let mut prev: Option<Snapshot> = None;
    loop {
        let started = Instant::now();
        // The JSON lines carry counters and rates only.
        let snap: Snapshot = client.call(if pids {
            &Request::Stats
        } else {
            &COUNTERS_ONLY
        })?;
        if cli.json {
            // One JSON object per line: the counters and their rates since the last line.
            let rates = prev.as_ref().map(|p| rates(p, &snap));
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(
                &mut out,
                &serde_json::json!({
                    "counters": snap.counters, "rates": rates, "uptime_s": snap.uptime_s,
                }),
            )?;
            writeln!(out)?;
            out.flush()?;
        } else {
            print_stats(&snap, prev.as_ref(), pids)?;
        }
        prev = Some(snap);
        std::thread::sleep(every.saturating_sub(started.elapsed()));
    }
}

fn rates(prev: &Snapshot, cur: &Snapshot) -> std::collections::BTreeMap<String, f64> {
    let dt = (cur.uptime_s - prev.uptime_s).max(1e-9);
    cur.counters
        .iter()
        .map(|(k, &v)| (k.clone(), v.saturating_sub(prev.counter(k)) as f64 / dt))
        .collect()
}

fn print_stats(snap: &Snapshot, prev: Option<&Snapshot>, pids: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let rates = prev.map(|p| rates(p, snap));
    if prev.is_some() {
        writeln!(out, "--- up {:.1}s", snap.uptime_s)?;
    }
    for (name, value) in &snap.counters {
        match &rates {
            Some(r) => writeln!(
                out,
                "{name:<32} {value:>14} {:>12.1}/s",
                r.get(name).unwrap_or(&0.0)
            )?,
            None => writeln!(out, "{name:<32} {value:>14}")?,
        }
    }
    // A gauge, after the counters and without a rate.
    if let Some(floor) = snap.heat_floor_samples {
        writeln!(out, "{:<32} {floor:>14.3}", "heat_floor_samples")?;
    }
    if let Some(short) = snap.fast_nodes_short {
        writeln!(out, "{:<32} {short:>14}", "fast_nodes_short")?;
    }
    if pids {
        writeln!(
            out,
            "\n{:>7} {:<16} {:>10} {:>9} {:>10} {:>8} {:>8} {:>14} {:>6}",
            "pid",
            "comm",
            "samples",
            "recorded",
            "candidates",
            "hot",
            "hot_slow",
            "promoted_bytes",
            "fail"
        )?;
        for p in &snap.pids {
            writeln!(
                out,
                "{:>7} {:<16} {:>10} {:>9} {:>10} {:>8} {:>8} {:>14} {:>6}",
                p.pid,
                p.comm,
                p.counts.samples,
                p.counts.recorded,
                p.counts.candidates,
                p.hot,
                p.hot_slow,
                p.counts.promoted_bytes,
                p.counts.fail
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

fn record(cli: &Cli, output: &Path, duration: Option<f64>) -> anyhow::Result<()> {
    if let Some(d) = duration {
        positive_secs(d, "--duration")?;
    }
    let mut client = Client::connect(&cli.socket)?;
    client.request(&Request::Record {
        duration_s: duration,
    })?;
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(output).map_err(local(format!("creating {}", output.display())))?,
    );
    let mut reader = client.into_reader();
    let mut samples = 0u64;
    let mut line = String::new();
    loop {
        line.clear();
        // The daemon ends the stream (duration, or it stops); Ctrl-C ends pghotctl, and the
        // buffered lines are lost with it, so --duration is the way to a complete file.
        let n = reader.read_line(&mut line).map_err(|err| ClientError::Io {
            path: cli.socket.clone(),
            err,
        })?;
        if n == 0 {
            break;
        }
        if !line.starts_with('#') {
            samples += 1;
        }
        file.write_all(line.as_bytes())
            .map_err(local(format!("writing {}", output.display())))?;
    }
    file.flush()
        .map_err(local(format!("writing {}", output.display())))?;
    eprintln!(
        "pghotctl: {samples} samples written to {}",
        output.display()
    );
    Ok(())
}

/// The view's daemon: one connection, re-made when it breaks.
struct LiveDaemon {
    path: PathBuf,
    client: Option<Client>,
}

impl LiveDaemon {
    fn call(&mut self, req: &Request) -> Result<serde_json::Value, String> {
        let client = match self.client.as_mut() {
            Some(c) => c,
            None => self
                .client
                .insert(Client::connect(&self.path).map_err(first_line)?),
        };
        match client.request(req) {
            Ok(v) => Ok(v),
            Err(ClientError::Daemon(e)) => Err(e.message),
            Err(e) => {
                self.client = None;
                Err(first_line(e))
            }
        }
    }
}

/// The error without its hint paragraph, for the view's one line.
fn first_line(e: ClientError) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

impl crate::view::term::Daemon for LiveDaemon {
    fn snapshot(&mut self, ranges_of: Option<u32>) -> Result<Snapshot, String> {
        let v = self.call(&Request::Top {
            pid: ranges_of,
            limit: DEFAULT_TOP_PIDS,
        })?;
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    fn set_paused(&mut self, paused: bool) -> Result<bool, String> {
        let v = self.call(if paused {
            &Request::Pause
        } else {
            &Request::Resume
        })?;
        Ok(v["paused"].as_bool().unwrap_or(paused))
    }
}

#[cfg(test)]
mod tests {
    use super::damon_granularity;

    #[test]
    fn status_says_how_coarse_damon_regions_are() {
        // No accessed region yet (or no damon source): nothing to say.
        assert_eq!(damon_granularity(0, 0), None);
        // 3 regions over 300 pages: 100 pages, 400 KiB.
        assert!(
            damon_granularity(3, 300)
                .unwrap()
                .starts_with("damon regions: 3 accessed, 100 pages (400 KiB) each on average: ")
        );
        // 2 regions over 1280 pages: 640 pages, 2560 KiB.
        assert!(
            damon_granularity(2, 1280)
                .unwrap()
                .contains("640 pages (2560 KiB)")
        );
    }
}
