//! `pghotd`: the tiering daemon. Wiring only; the work lives in the library.
//!
//! Exit codes ([`MAN`]: `--help` and pghotd(8) print them): 0 done, 1 runtime failure, 2 bad
//! configuration or usage, 3 the kernel or machine lacks what pghotd needs, or
//! (`conflicts = "refuse"`) something else promotes too.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use pghot_protocol::ConflictKind;
use pghotd::config::{Config, SettingArgs};
use pghotd::conflicts::{ConflictPolicy, Probe};
use pghotd::daemon::{self, DaemonError, RunOptions};
use pghotd::generate::ManSections;
use pghotd::logging::{self, LogFormat};

/// Promotes the pages processes touch most while they sit on a slow memory tier.
#[derive(Debug, Parser)]
#[command(name = "pghotd", version, about, after_help = MAN.exit_status_help())]
struct Cli {
    /// Config file [default: /etc/pghotd/pghotd.toml, if present].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Validate the configuration (and the topology it names), print it, and exit.
    #[arg(long)]
    check_config: bool,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Write every counter as JSON to this file at exit.
    #[arg(long, value_name = "PATH")]
    stats_json: Option<PathBuf>,
    /// Record every received sample to this file in the pghot-trace v1 format.
    #[arg(long, value_name = "PATH")]
    record: Option<PathBuf>,
    /// Log filter (error, warn, info, debug, trace, or a tracing directive) [default:
    /// $PGHOTD_LOG, else $RUST_LOG, else info].
    #[arg(long, value_name = "FILTER")]
    log: Option<String>,
    /// Log line format: auto is journald when stderr is the journal's stream (no timestamp,
    /// syslog priority prefixes), else text (coloured only on a terminal).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t)]
    log_format: LogFormat,
    /// Print the man page or a shell completion script and exit (used to build packages).
    #[arg(long, value_name = "KIND", hide = true)]
    generate: Option<pghotd::generate::Generated>,
    #[command(flatten)]
    tunables: SettingArgs,
}

const EXIT_RUNTIME: u8 = 1;
const EXIT_CONFIG: u8 = 2;
const EXIT_UNSUPPORTED: u8 = 3;

/// pghotd(8)'s EXIT STATUS (also after `--help`'s options) and FILES.
const MAN: ManSections = ManSections {
    exit_status: &[
        (
            0,
            "done: every source ended, --duration passed, or SIGTERM/SIGINT (after draining)",
        ),
        (
            EXIT_RUNTIME,
            "a failure while running (a thread could not start, a source or migrator failed)",
        ),
        (
            EXIT_CONFIG,
            "bad configuration or usage: a flag, the config file, a source's settings, the \
             control socket's path; restarting cannot help (the unit's \
             RestartPreventExitStatus)",
        ),
        (
            EXIT_UNSUPPORTED,
            "the kernel or machine lacks what pghotd needs (a PMU, DAMON, the topology, a \
             move_pages(2) that a seccomp filter lets through), or conflicts = \"refuse\" \
             found another promoter",
        ),
    ],
    files: &[
        (
            "/etc/pghotd/pghotd.toml",
            "the configuration read when --config is not given, if present; see pghotd.toml(5)",
        ),
        (
            pghot_protocol::DEFAULT_CONTROL_SOCKET,
            "the control socket (control_socket), mode 0660, group pghot",
        ),
        (
            "/run/pghotd/damon-kdamond-K",
            "which kdamond the damon source claimed, so a restart after a crash releases it",
        ),
        (
            "/usr/lib/systemd/system/pghotd.service",
            "the systemd unit; /usr/lib/sysusers.d/pghotd.conf creates the groups pghot and \
             pghot-monitor",
        ),
    ],
};

fn exit_code(err: &DaemonError) -> u8 {
    match err {
        DaemonError::Source(e) if e.is_unsupported() => EXIT_UNSUPPORTED,
        DaemonError::Config(_)
        | DaemonError::NoSources
        | DaemonError::Source(_)
        | DaemonError::Control(_) => EXIT_CONFIG,
        DaemonError::Topology(_)
        | DaemonError::Conflicts { .. }
        | DaemonError::MovePagesUnusable(_) => EXIT_UNSUPPORTED,
        _ => EXIT_RUNTIME,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(kind) = cli.generate {
        use clap::CommandFactory;
        let mut out = std::io::stdout().lock();
        return match pghotd::generate::write(kind, Cli::command(), "8", &MAN, &mut out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("pghotd: --generate: {e}");
                ExitCode::from(EXIT_RUNTIME)
            }
        };
    }
    let filter = cli.log.clone().unwrap_or_else(logging::default_filter);
    if let Err(e) = logging::init(&filter, cli.log_format) {
        eprintln!("pghotd: --log {filter}: {e}");
        return ExitCode::from(EXIT_CONFIG);
    }

    let config = match Config::load(cli.config.as_deref(), &cli.tunables) {
        Ok(c) => c,
        Err(e) => {
            logging::fatal(&e);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match &config.loaded_from {
        Some(path) => tracing::info!("config loaded from {}", path.display()),
        None => tracing::info!("no config file; built-in defaults and flags"),
    }
    if cli.check_config {
        return check_config(&config);
    }
    // try_from: `Duration::from_secs_f64` panics past what a Duration holds (1e300, 2e19).
    let duration = match cli.duration {
        Some(secs) => match Duration::try_from_secs_f64(secs) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                logging::fatal(&format_args!(
                    "--duration {secs}: must be a positive number of seconds, at most {}",
                    Duration::MAX.as_secs()
                ));
                return ExitCode::from(EXIT_CONFIG);
            }
        },
        None => None,
    };
    let opts = RunOptions {
        duration,
        stats_json: cli.stats_json,
        record: cli.record,
        reload: pghotd::control::ReloadFrom {
            config_path: cli.config.clone(),
            args: cli.tunables.clone(),
        },
    };
    match daemon::run(&config, &opts) {
        Ok(summary) => {
            let c = &summary.stats;
            tracing::info!(
                "done ({:?}) in {:.2}s: {} samples, {} recorded, {} candidates, {} promoted",
                summary.reason,
                summary.elapsed.as_secs_f64(),
                c.get("hwhint_total_events"),
                c.get("pghot_recorded_accesses"),
                c.get("pgpromote_candidate"),
                c.get("pgpromote_success"),
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            // As text, the log's own timestamped line too; the other formats' line is the log's.
            if logging::chosen() == LogFormat::Text {
                tracing::error!("{e}");
            }
            logging::fatal(&e);
            ExitCode::from(exit_code(&e))
        }
    }
}

fn check_config(config: &Config) -> ExitCode {
    let topology = match pghotd::topology::Topology::read(pghotd::topology::SysfsRoot::new(
        &config.sysfs_root,
    )) {
        Ok(t) => t,
        Err(e) => {
            logging::fatal(&format_args!("reading the NUMA topology: {e}"));
            return ExitCode::from(EXIT_UNSUPPORTED);
        }
    };
    if let Err(e) = config.check_against(&topology) {
        logging::fatal(&e);
        return ExitCode::from(EXIT_CONFIG);
    }
    let conflicts = Probe::system(&config.sysfs_root).find();
    // The pghotd already running is what a check before a restart or reload finds: shown, not
    // refused.
    let refused: Vec<_> = conflicts
        .iter()
        .filter(|c| c.kind != ConflictKind::Pghotd)
        .cloned()
        .collect();
    if config.conflicts == ConflictPolicy::Refuse && !refused.is_empty() {
        let e = DaemonError::Conflicts {
            found: refused,
            origin: config.origins.of("conflicts"),
        };
        logging::fatal(&e);
        return ExitCode::from(exit_code(&e));
    }
    let open_ctx = config.open_context();
    let mut opened = Vec::new();
    for spec in &config.sources {
        match spec.open(&open_ctx) {
            Ok(source) => opened.push(source),
            Err(e) => {
                logging::fatal(&e);
                return ExitCode::from(if e.is_unsupported() {
                    EXIT_UNSUPPORTED
                } else {
                    EXIT_CONFIG
                });
            }
        }
    }
    let overrides = effective_overrides(&opened, &open_ctx);
    println!("config ok");
    match &config.loaded_from {
        Some(p) => println!("  file: {}", p.display()),
        None => println!("  file: none (defaults)"),
    }
    let sources: Vec<String> = config.sources.iter().map(|s| s.to_string()).collect();
    println!(
        "  sources: {}",
        if sources.is_empty() {
            "none".into()
        } else {
            sources.join(", ")
        }
    );
    for source in &opened {
        println!("  opened: {}", source.describe());
    }
    println!("  topology: {}", topology.summary());
    if conflicts.is_empty() {
        println!("  competing promoters: none found");
    }
    for c in &conflicts {
        println!("  competing promoter: {} (remedy: {})", c.detail, c.remedy);
    }
    // Every setting as `config get` names it, with the value in effect.
    for (key, value) in config.values() {
        match value {
            serde_json::Value::Null => match pghotd::config::setting(key).and_then(|s| s.default) {
                Some(words) => println!("  {key} = (unset: {words})"),
                None => println!("  {key} = (unset)"),
            },
            value => println!("  {key} = {value}"),
        }
        if let Some((_, note)) = overrides.iter().find(|(k, _)| *k == key) {
            println!("    ({note})");
        }
    }
    ExitCode::SUCCESS
}

/// Settings the kernel will not apply as written, for the sources that were opened: (key, what
/// takes effect instead). Today `ibs.l3miss_only`, which ibs.ldlat overrides on Linux 6.15+.
fn effective_overrides(
    opened: &[Box<dyn pghotd::sampler::Source>],
    ctx: &pghotd::sampler::OpenContext,
) -> Vec<(&'static str, String)> {
    use pghotd::sample::SourceKind;
    if !opened.iter().any(|s| s.kind() == SourceKind::Ibs) {
        return Vec::new();
    }
    let root = pghotd::topology::SysfsRoot::new(&ctx.sysfs_root);
    // The source opened with these settings a moment ago, so this only fails if sysfs changed.
    match pghotd::sampler::hwplan::ibs_config(&root, &ctx.ibs) {
        Ok((_, effective)) => effective
            .l3miss_override()
            .map(|note| ("ibs.l3miss_only", note))
            .into_iter()
            .collect(),
        Err(_) => Vec::new(),
    }
}
