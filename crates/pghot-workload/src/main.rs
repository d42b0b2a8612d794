//! `pghot-workload`: a test workload with a known hot set on a chosen node, reporting how much
//! of it sits on fast memory over time. Wiring only; the work lives in `pghot_workload`.
//!
//! Output on stdout: `placement:` and `start:` lines, one `t=...` line per `--report-ms`, and a
//! final `RESULT {json}` line. Exit codes: 0 done, 1 runtime failure, 2 bad input (flags, a node
//! that is not a memory node, an mbind or `--emit-samples` path that fails).
//!
//! Built to run statically linked in a busybox initramfs: it reads only /proc and /sys.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use pghot_workload::{self as workload, EmitOptions, Options, Pattern};

/// Accesses a buffer placed on one NUMA node with a known hot set, and reports how much of the
/// hot set sits on top-tier nodes as it runs.
#[derive(Debug, Parser)]
#[command(name = "pghot-workload", version)]
struct Cli {
    /// Buffer size in MiB.
    #[arg(long, value_name = "MIB")]
    size_mb: u64,
    /// Hot-set size in MiB (not used by `uniform`, where every page is hot).
    #[arg(
        long,
        value_name = "MIB",
        required_if_eq_any([
            ("pattern", "hot-scattered"),
            ("pattern", "hot-block"),
            ("pattern", "zipf"),
            ("pattern", "chase"),
            ("pattern", "hot-clusters"),
            ("pattern", "runs-64k"),
            ("pattern", "runs-128k"),
            ("pattern", "runs-256k"),
        ])
    )]
    hot_mb: Option<u64>,
    /// Access pattern.
    #[arg(long, value_enum)]
    pattern: Pattern,
    /// NUMA node the buffer is first placed on (bound, touched, then unbound).
    #[arg(long, value_name = "NODE", default_value_t = 2)]
    node: u16,
    /// Seconds of accesses (fractions allowed).
    #[arg(long, value_name = "SECS", default_value_t = 20.0)]
    duration: f64,
    /// Worker threads, each with its own random stream.
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// Percent of accesses that are stores (0..=100).
    #[arg(long, value_name = "PCT", default_value_t = 30,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    write_pct: u8,
    /// Seed of the hot-set choice and the access streams.
    #[arg(long, value_name = "SEED", default_value_t = 1)]
    seed: u64,
    /// Milliseconds between progress lines.
    #[arg(long, value_name = "MS", default_value_t = 250)]
    report_ms: u64,
    /// Allow transparent huge pages (MADV_HUGEPAGE); by default MADV_NOHUGEPAGE keeps 4 KiB pages.
    #[arg(long)]
    thp: bool,
    /// Write one of every --sample-period accesses per worker as a pghot-trace v1 line to this
    /// file or FIFO (a FIFO's open waits for a reader). A writer thread formats the lines; a
    /// sample carries the time and CPU its worker read at the start of its chunk of 1024
    /// accesses.
    #[arg(long, value_name = "PATH", requires = "sample_period")]
    emit_samples: Option<PathBuf>,
    /// Accesses per emitted sample, per worker.
    #[arg(long, value_name = "N", requires = "emit_samples")]
    sample_period: Option<u64>,
    /// Move the hot set every SECS seconds (fractions allowed) to where the next seed puts it,
    /// at the first report after each shift is due; the figures are then those of the hot set
    /// in place, and time to 90/95/99 % counts from the last shift. At most 100 places a run.
    #[arg(long, value_name = "SECS")]
    shift_s: Option<f64>,
}

const EXIT_USAGE: u8 = workload::EXIT_USAGE;

fn options(cli: Cli) -> Result<Options, String> {
    if !cli.duration.is_finite() || cli.duration <= 0.0 || cli.duration > 1e9 {
        return Err(format!(
            "--duration {}: must be more than 0 seconds",
            cli.duration
        ));
    }
    if let Some(s) = cli.shift_s
        && (!s.is_finite() || s <= 0.0 || s > 1e9)
    {
        return Err(format!("--shift-s {s}: must be more than 0 seconds"));
    }
    Ok(Options {
        shift: cli.shift_s.map(Duration::from_secs_f64),
        pattern: cli.pattern,
        size_mb: cli.size_mb,
        hot_mb: cli.hot_mb.unwrap_or(0),
        node: cli.node,
        duration: Duration::from_secs_f64(cli.duration),
        threads: cli.threads,
        write_pct: cli.write_pct,
        seed: cli.seed,
        report_every: Duration::from_millis(cli.report_ms),
        thp: cli.thp,
        emit: cli
            .emit_samples
            .zip(cli.sample_period)
            .map(|(path, period)| EmitOptions { path, period }),
        sysfs_root: PathBuf::from("/sys"),
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: clap's message (its first paragraph) without the usage block after it.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|line| !line.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = message.join(" ");
            eprintln!(
                "pghot-workload: {}",
                message.strip_prefix("error: ").unwrap_or(&message)
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let opts = match options(cli) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("pghot-workload: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut stdout = std::io::stdout().lock();
    match workload::run(&opts, &mut stdout) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pghot-workload: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
