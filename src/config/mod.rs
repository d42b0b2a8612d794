//! Configuration: TOML file, then CLI flags, validated into one [`Config`].
//!
//! Two levels, as in ripgrep's low/high args: [`RawConfig`] is what the file says (serde, unknown
//! keys rejected, every field optional, each value with its span so errors can name the line);
//! [`Config`] is validated, with defaults filled in. Every file key is also a CLI flag of the
//! same name (underscores become dashes); a flag wins over the file. Keys mirror the pghot
//! kernel's `vm.pghot_*` tunables.
//!
//! An explicit `--config` that does not exist is an error; the default path
//! `/etc/pghotd/pghotd.toml` missing means built-in defaults. Either way the daemon logs what
//! it loaded.

mod scope;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

pub mod admission;

use crate::admission::AdmissionConfig;
use crate::hotness::HotPolicy;
use crate::migrator::MigratorConfig;
use crate::sampler::SourceSpec;
use crate::sampler::damon::DamonConfig;
use crate::sampler::ibs::IbsTunables;
use crate::sampler::pagefault::PageFaultTunables;
use crate::sampler::pebs::PebsTunables;
use crate::sampler::perf::PerfSettings;
use crate::sampler::softdirty::SoftDirtyConfig;
use crate::topology::NodeId;
use admission::{AdmissionArgs, RawAdmission};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/pghotd/pghotd.toml";
pub const DEFAULT_RUN_DIR: &str = "/run/pghotd";

pub use pghot_protocol::DEFAULT_CONTROL_SOCKET;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{origin}: {key} = {value} is out of range; allowed {min}..={max}")]
    Range {
        origin: Origin,
        key: &'static str,
        value: String,
        min: i64,
        max: i64,
    },
    #[error("{origin}: {key}: {detail}")]
    Invalid {
        origin: Origin,
        key: &'static str,
        detail: String,
    },
}

/// Where a value came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    File {
        path: PathBuf,
        line: usize,
    },
    Flag(&'static str),
    /// `pghotctl config set` (the control socket).
    Control,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "config {} line {line}", path.display()),
            Origin::Flag(flag) => write!(f, "flag --{flag}"),
            Origin::Control => write!(f, "config set"),
        }
    }
}

/// The file as written. Every field optional; unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub enabled_sources: Option<Spanned<Vec<String>>>,
    pub target_nid: Option<Spanned<i64>>,
    pub freq_threshold: Option<Spanned<i64>>,
    pub promote_window_ms: Option<Spanned<i64>>,
    #[serde(rename = "promote_rate_limit_MBps")]
    pub promote_rate_limit_mbps: Option<Spanned<i64>>,
    pub promote_min_free_pct: Option<Spanned<i64>>,
    pub migrate_interval_ms: Option<Spanned<i64>>,
    pub migrate_batch: Option<Spanned<i64>>,
    pub max_tracked_pages: Option<Spanned<i64>>,
    pub heat_halflife_ms: Option<Spanned<i64>>,
    pub pids: Option<Spanned<Vec<i64>>>,
    pub dry_run: Option<Spanned<bool>>,
    pub demote: Option<Spanned<bool>>,
    pub demote_free_pct: Option<Spanned<i64>>,
    pub sysfs_root: Option<Spanned<String>>,
    pub perf: Option<RawPerf>,
    pub pagefault: Option<RawPageFault>,
    pub ibs: Option<RawIbs>,
    pub pebs: Option<RawPebs>,
    pub softdirty_interval_ms: Option<Spanned<i64>>,
    pub softdirty_scan_budget_pages: Option<Spanned<i64>>,
    pub damon_sample_us: Option<Spanned<i64>>,
    pub damon_aggr_us: Option<Spanned<i64>>,
    pub damon_min_regions: Option<Spanned<i64>>,
    pub damon_max_regions: Option<Spanned<i64>>,
    pub damon_max_samples: Option<Spanned<i64>>,
    pub control_socket: Option<Spanned<String>>,
    pub metrics_listen: Option<Spanned<String>>,
    pub cgroups: Option<Spanned<Vec<String>>>,
    pub comm: Option<Spanned<String>>,
    pub pid_namespace_of: Option<Spanned<i64>>,
    pub scope_refresh_ms: Option<Spanned<i64>>,
    pub admission: Option<RawAdmission>,
}

/// `[perf]`: the per-CPU ring buffers of every perf source.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPerf {
    pub ring_pages: Option<Spanned<i64>>,
}

/// `[ibs]`: AMD IBS op sampling.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIbs {
    pub period: Option<Spanned<PeriodValue>>,
    /// With `period = "auto"`: the daemon CPU the adaptive period may use, % of one core.
    pub cpu_budget_pct: Option<Spanned<i64>>,
    pub count_ops: Option<Spanned<bool>>,
    pub l3miss_only: Option<Spanned<bool>>,
    pub ldlat: Option<Spanned<i64>>,
    pub user_only: Option<Spanned<bool>>,
}

/// A sampling period as written: a number, or `"auto"` (the adaptive controller).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PeriodValue {
    Fixed(i64),
    Word(String),
}

impl std::str::FromStr for PeriodValue {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(s.parse::<i64>()
            .map(PeriodValue::Fixed)
            .unwrap_or_else(|_| PeriodValue::Word(s.to_string())))
    }
}

/// `[pebs]`: Intel PEBS memory sampling.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPebs {
    pub period: Option<Spanned<i64>>,
    pub ldlat: Option<Spanned<i64>>,
    pub stores: Option<Spanned<bool>>,
}

/// `[pagefault]`: the page-fault source.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPageFault {
    pub period: Option<Spanned<i64>>,
}

/// The same keys as CLI flags (all optional; a given flag overrides the file).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct TunableArgs {
    /// Sample source; repeat for several: trace:PATH (PATH may be a FIFO or - for stdin),
    /// damon (needs --pid) or softdirty (needs --pid, --cgroup or --comm).
    #[arg(long = "source", value_name = "SPEC")]
    pub enabled_sources: Vec<String>,
    /// Promote to this node instead of the top-tier node nearest the accessing CPU.
    #[arg(long, value_name = "NODE")]
    pub target_nid: Option<i64>,
    /// Samples within the window that make a lower-tier page a candidate [default: 2].
    #[arg(long, value_name = "N")]
    pub freq_threshold: Option<i64>,
    /// A page's count restarts when its previous sample is older than this [default: 5000].
    #[arg(long, value_name = "MS")]
    pub promote_window_ms: Option<i64>,
    /// Promotion rate limit per destination node, MiB/s [default: 65536].
    #[arg(long = "promote-rate-limit-MBps", value_name = "MBPS")]
    pub promote_rate_limit_mbps: Option<i64>,
    /// Keep this percentage of a destination node's memory free [default: 2].
    #[arg(long, value_name = "PCT")]
    pub promote_min_free_pct: Option<i64>,
    /// Migrators wake at least this often [default: 100].
    #[arg(long, value_name = "MS")]
    pub migrate_interval_ms: Option<i64>,
    /// Migrators also wake when this many candidates wait [default: 512].
    #[arg(long, value_name = "N")]
    pub migrate_batch: Option<i64>,
    /// Most pages the hotness table tracks (32 bytes each) [default: 1048576].
    #[arg(long, value_name = "N")]
    pub max_tracked_pages: Option<i64>,
    /// Heat used to rank pages halves every this many ms [default: 1000].
    #[arg(long, value_name = "MS")]
    pub heat_halflife_ms: Option<i64>,
    /// Manage only this process; repeat for several [default: every process].
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<i64>,
    /// Decide and count, but move nothing; trace pids need not exist.
    #[arg(long)]
    pub dry_run: bool,
    /// Move the coldest pages pghotd promoted back to the lower tier when a fast node falls
    /// under demote_free_pct free [default: off].
    #[arg(long)]
    pub demote: bool,
    /// Low watermark for demotion, % of a fast node's memory kept free [default: 5].
    #[arg(long, value_name = "PCT")]
    pub demote_free_pct: Option<i64>,
    /// Read the topology from this copy of /sys (e.g. a snapshot of the box a trace came from).
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,
    /// Data pages of each CPU's perf ring buffer, a power of two [default: 64].
    #[arg(long = "perf-ring-pages", value_name = "PAGES")]
    pub perf_ring_pages: Option<i64>,
    /// The pagefault source samples one of every N faults per CPU [default: 1].
    #[arg(long = "pagefault-period", value_name = "N")]
    pub pagefault_period: Option<i64>,
    /// IBS: ops (or cycles) between samples, rounded down to a multiple of 16, or "auto" to
    /// adapt it to the daemon's CPU budget [default: 10000].
    #[arg(long = "ibs-period", value_name = "N|auto")]
    pub ibs_period: Option<PeriodValue>,
    /// IBS with --ibs-period auto: daemon CPU allowed, % of one core [default: 5].
    #[arg(long = "ibs-cpu-budget-pct", value_name = "PCT")]
    pub ibs_cpu_budget_pct: Option<i64>,
    /// IBS: count dispatched ops (true) or cycles (false) [default: true].
    #[arg(long = "ibs-count-ops", value_name = "BOOL")]
    pub ibs_count_ops: Option<bool>,
    /// IBS: keep only ops that missed L3 (Zen4+) [default: on where the PMU has it].
    #[arg(long = "ibs-l3miss-only", value_name = "BOOL")]
    pub ibs_l3miss_only: Option<bool>,
    /// IBS: load-latency threshold in cycles, 128..=2048 (Zen5, Linux 6.15+) [default: off].
    #[arg(long = "ibs-ldlat", value_name = "CYCLES")]
    pub ibs_ldlat: Option<i64>,
    /// IBS: user-space samples only [default: true].
    #[arg(long = "ibs-user-only", value_name = "BOOL")]
    pub ibs_user_only: Option<bool>,
    /// PEBS: qualifying loads or stores between samples [default: 2000].
    #[arg(long = "pebs-period", value_name = "N")]
    pub pebs_period: Option<i64>,
    /// PEBS: load-latency threshold in cycles [default: 30].
    #[arg(long = "pebs-ldlat", value_name = "CYCLES")]
    pub pebs_ldlat: Option<i64>,
    /// PEBS: also sample stores (mem-stores) [default: true].
    #[arg(long = "pebs-stores", value_name = "BOOL")]
    pub pebs_stores: Option<bool>,
    /// softdirty: time between passes over the pids [default: 1000].
    #[arg(long, value_name = "MS")]
    pub softdirty_interval_ms: Option<i64>,
    /// softdirty: most pagemap entries read per second [default: 1048576].
    #[arg(long, value_name = "PAGES")]
    pub softdirty_scan_budget_pages: Option<i64>,
    /// damon: sampling interval [default: 5000].
    #[arg(long, value_name = "US")]
    pub damon_sample_us: Option<i64>,
    /// damon: aggregation interval, also the snapshot interval [default: 100000].
    #[arg(long, value_name = "US")]
    pub damon_aggr_us: Option<i64>,
    /// damon: fewest monitoring regions [default: 10].
    #[arg(long, value_name = "N")]
    pub damon_min_regions: Option<i64>,
    /// damon: most monitoring regions [default: 1000].
    #[arg(long, value_name = "N")]
    pub damon_max_regions: Option<i64>,
    /// damon: most samples one snapshot emits [default: 16384].
    #[arg(long, value_name = "N")]
    pub damon_max_samples: Option<i64>,
    /// Control socket for pghotctl; an empty path turns it off [default: /run/pghotd/pghotd.sock].
    #[arg(long = "control-socket", visible_alias = "socket", value_name = "PATH")]
    pub control_socket: Option<PathBuf>,
    /// Serve OpenMetrics on this address, e.g. 127.0.0.1:9464 [default: off].
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<String>,
    /// Manage the processes of this cgroup (v2 or v1 directory) and its descendants, followed
    /// as they come and go; repeat for several; relative paths are under /sys/fs/cgroup.
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<PathBuf>,
    /// Manage only processes whose command name (/proc/PID/comm) matches this regex.
    #[arg(long, value_name = "REGEX")]
    pub comm: Option<String>,
    /// Read --pid values inside the pid namespace of this process (e.g. a container's).
    #[arg(long, value_name = "PID")]
    pub pid_namespace_of: Option<i64>,
    /// How often the managed set is re-read from /proc and the cgroups [default: 1000].
    #[arg(long, value_name = "MS")]
    pub scope_refresh_ms: Option<i64>,
    #[command(flatten)]
    pub admission: AdmissionArgs,
}

/// Validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub sources: Vec<SourceSpec>,
    pub target_nid: Option<NodeId>,
    pub policy: HotPolicy,
    pub migrator: MigratorConfig,
    pub max_tracked_pages: usize,
    pub pids: Vec<u32>,
    pub sysfs_root: PathBuf,
    pub perf: PerfSettings,
    pub pagefault: PageFaultTunables,
    pub ibs: IbsTunables,
    /// `ibs.period = "auto"`: the adaptive controller sets the period live.
    pub ibs_period_auto: bool,
    pub ibs_cpu_budget_pct: u8,
    pub pebs: PebsTunables,
    pub damon: DamonConfig,
    pub softdirty: SoftDirtyConfig,
    /// Where state that must outlive a crash goes (not a key: tests change it).
    pub run_dir: PathBuf,
    /// `None`: no control socket.
    pub control_socket: Option<PathBuf>,
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Cgroup directories whose processes are managed (see `scope`).
    pub cgroups: Vec<PathBuf>,
    /// Command-name regex, checked when loaded.
    pub comm: Option<String>,
    pub pid_namespace_of: Option<u32>,
    pub scope_refresh_ms: u32,
    /// The file that was loaded, if any.
    pub loaded_from: Option<PathBuf>,
    /// `[admission]`: THP splitting and duplex-aware admission.
    pub admission: AdmissionConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sources: vec![SourceSpec::Auto],
            target_nid: None,
            policy: HotPolicy::default(),
            migrator: MigratorConfig::default(),
            max_tracked_pages: 1 << 20,
            pids: Vec::new(),
            sysfs_root: PathBuf::from("/sys"),
            perf: PerfSettings::default(),
            pagefault: PageFaultTunables::default(),
            ibs: IbsTunables::default(),
            ibs_period_auto: false,
            ibs_cpu_budget_pct: 5,
            pebs: PebsTunables::default(),
            damon: DamonConfig::default(),
            softdirty: SoftDirtyConfig::default(),
            run_dir: PathBuf::from(DEFAULT_RUN_DIR),
            control_socket: Some(PathBuf::from(DEFAULT_CONTROL_SOCKET)),
            metrics_listen: None,
            cgroups: Vec::new(),
            comm: None,
            pid_namespace_of: None,
            scope_refresh_ms: 1000,
            loaded_from: None,
            admission: AdmissionConfig::default(),
        }
    }
}

/// Line (1-based) of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Validates a number against its allowed range.
pub(crate) fn ranged(
    origin: &Origin,
    key: &'static str,
    value: i64,
    min: i64,
    max: i64,
) -> Result<i64, ConfigError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::Range {
            origin: origin.clone(),
            key,
            value: value.to_string(),
            min,
            max,
        })
    }
}

/// Allowed ranges, shared by the file and the flags.
pub mod limits {
    pub const FREQ_THRESHOLD: (i64, i64) = (1, u16::MAX as i64);
    pub const PROMOTE_WINDOW_MS: (i64, i64) = (1, 3_600_000);
    pub const PROMOTE_RATE_LIMIT_MBPS: (i64, i64) = (1, 1 << 30);
    pub const PROMOTE_MIN_FREE_PCT: (i64, i64) = (0, 50);
    pub const DEMOTE_FREE_PCT: (i64, i64) = (1, 60);
    pub const MIGRATE_INTERVAL_MS: (i64, i64) = (1, 60_000);
    pub const MIGRATE_BATCH: (i64, i64) = (1, 65_536);
    pub const MAX_TRACKED_PAGES: (i64, i64) = (1024, 1 << 32);
    pub const HEAT_HALFLIFE_MS: (i64, i64) = (1, 3_600_000);
    pub const NODE: (i64, i64) = (0, 1023);
    pub const PID: (i64, i64) = (1, (1 << 22) - 1);
    pub const PERF_RING_PAGES: (i64, i64) = (1, 1 << 14);
    pub const PAGEFAULT_PERIOD: (i64, i64) = (1, 1 << 30);
    /// The op PMU's minimum; the maximum is the extended-count one (0x7FFFFF0), checked
    /// against the PMU's caps when the source opens.
    pub const IBS_PERIOD: (i64, i64) = (0x90, 0x7ff_fff0);
    pub const IBS_LDLAT: (i64, i64) = (128, 2048);
    pub const CPU_BUDGET_PCT: (i64, i64) = (1, 100);
    pub const PEBS_PERIOD: (i64, i64) = (1, 1 << 30);
    /// The `ldlat` format field is 16 bits wide (config1:0-15).
    pub const PEBS_LDLAT: (i64, i64) = (1, u16::MAX as i64);
    pub const SOFTDIRTY_INTERVAL_MS: (i64, i64) = (10, 60_000);
    pub const SOFTDIRTY_SCAN_BUDGET_PAGES: (i64, i64) = (1024, 1 << 32);
    pub const DAMON_SAMPLE_US: (i64, i64) = (100, 500_000);
    /// A snapshot blocks for one aggregation interval; at most half a second keeps a stop
    /// within the daemon's one-second wait, so the kdamond is always turned off.
    pub const DAMON_AGGR_US: (i64, i64) = (1000, 500_000);
    /// DAMON itself needs at least 3 regions.
    pub const DAMON_REGIONS: (i64, i64) = (3, 1_000_000);
    pub const DAMON_MAX_SAMPLES: (i64, i64) = (1, 1 << 22);
    pub const SCOPE_REFRESH_MS: (i64, i64) = (10, 600_000);
}

/// One setting with where it came from.
struct Setting<T> {
    value: T,
    origin: Origin,
}

impl Config {
    /// What the sources need to know when they open.
    pub fn open_context(&self) -> crate::sampler::OpenContext {
        crate::sampler::OpenContext {
            pids: self.pids.clone(),
            sysfs_root: self.sysfs_root.clone(),
            perf: self.perf,
            pagefault: self.pagefault,
            ibs: self.ibs,
            ibs_period_control: None,
            pebs: self.pebs,
            run_dir: self.run_dir.clone(),
            damon: self.damon,
            softdirty: self.softdirty,
            followed_scope: None,
        }
    }

    /// Loads `path` (an explicit `--config` must exist; the default path may be absent), then
    /// applies the flags.
    pub fn load(path: Option<&Path>, args: &TunableArgs) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                config.apply_file(&path, &text)?;
                config.loaded_from = Some(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {}
            Err(source) => return Err(ConfigError::Read { path, source }),
        }
        config.apply_args(args)?;
        Ok(config)
    }

    /// Applies a TOML document's settings.
    pub fn apply_file(&mut self, path: &Path, text: &str) -> Result<(), ConfigError> {
        self.apply_toml(text, path, |line| Origin::File {
            path: path.to_path_buf(),
            line,
        })
    }

    /// The configuration with one more setting, `key = value` in TOML, validated exactly as
    /// if it were a line of the config file (same keys, types and ranges).
    pub fn with_setting(&self, key: &str, value: &str) -> Result<Config, ConfigError> {
        let mut next = self.clone();
        // A bare word that is not TOML (`auto`, a path) is taken as a string.
        let text = format!("{key} = {value}");
        let text = if toml::from_str::<toml::Table>(&text).is_ok() {
            text
        } else {
            format!("{key} = {}", toml::Value::String(value.to_string()))
        };
        next.apply_toml(&text, Path::new("config set"), |_| Origin::Control)?;
        Ok(next)
    }

    fn apply_toml(
        &mut self,
        text: &str,
        path: &Path,
        origin: impl Fn(usize) -> Origin,
    ) -> Result<(), ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let at = |span: std::ops::Range<usize>| origin(line_of(text, span.start));
        fn setting<T>(
            v: Option<Spanned<T>>,
            at: &impl Fn(std::ops::Range<usize>) -> Origin,
        ) -> Option<Setting<T>> {
            v.map(|s| {
                let origin = at(s.span());
                Setting {
                    value: s.into_inner(),
                    origin,
                }
            })
        }
        self.apply(Settings {
            sources: setting(raw.enabled_sources, &at),
            target_nid: setting(raw.target_nid, &at),
            freq_threshold: setting(raw.freq_threshold, &at),
            promote_window_ms: setting(raw.promote_window_ms, &at),
            promote_rate_limit_mbps: setting(raw.promote_rate_limit_mbps, &at),
            promote_min_free_pct: setting(raw.promote_min_free_pct, &at),
            migrate_interval_ms: setting(raw.migrate_interval_ms, &at),
            migrate_batch: setting(raw.migrate_batch, &at),
            max_tracked_pages: setting(raw.max_tracked_pages, &at),
            heat_halflife_ms: setting(raw.heat_halflife_ms, &at),
            pids: setting(raw.pids, &at),
            dry_run: setting(raw.dry_run, &at),
            demote: setting(raw.demote, &at),
            demote_free_pct: setting(raw.demote_free_pct, &at),
            sysfs_root: setting(raw.sysfs_root, &at).map(|s| Setting {
                value: PathBuf::from(s.value),
                origin: s.origin,
            }),
            perf_ring_pages: setting(raw.perf.and_then(|t| t.ring_pages), &at),
            pagefault_period: setting(raw.pagefault.and_then(|t| t.period), &at),
            ibs_period: setting(raw.ibs.as_ref().and_then(|t| t.period.clone()), &at),
            ibs_cpu_budget_pct: setting(
                raw.ibs.as_ref().and_then(|t| t.cpu_budget_pct.clone()),
                &at,
            ),
            ibs_count_ops: setting(raw.ibs.as_ref().and_then(|t| t.count_ops.clone()), &at),
            ibs_l3miss_only: setting(raw.ibs.as_ref().and_then(|t| t.l3miss_only.clone()), &at),
            ibs_ldlat: setting(raw.ibs.as_ref().and_then(|t| t.ldlat.clone()), &at),
            ibs_user_only: setting(raw.ibs.as_ref().and_then(|t| t.user_only.clone()), &at),
            pebs_period: setting(raw.pebs.as_ref().and_then(|t| t.period.clone()), &at),
            pebs_ldlat: setting(raw.pebs.as_ref().and_then(|t| t.ldlat.clone()), &at),
            pebs_stores: setting(raw.pebs.as_ref().and_then(|t| t.stores.clone()), &at),
            softdirty_interval_ms: setting(raw.softdirty_interval_ms, &at),
            softdirty_scan_budget_pages: setting(raw.softdirty_scan_budget_pages, &at),
            damon_sample_us: setting(raw.damon_sample_us, &at),
            damon_aggr_us: setting(raw.damon_aggr_us, &at),
            damon_min_regions: setting(raw.damon_min_regions, &at),
            damon_max_regions: setting(raw.damon_max_regions, &at),
            damon_max_samples: setting(raw.damon_max_samples, &at),
            control_socket: setting(raw.control_socket, &at).map(|s| Setting {
                value: PathBuf::from(s.value),
                origin: s.origin,
            }),
            metrics_listen: setting(raw.metrics_listen, &at),
            cgroups: setting(raw.cgroups, &at),
            comm: setting(raw.comm, &at),
            pid_namespace_of: setting(raw.pid_namespace_of, &at),
            scope_refresh_ms: setting(raw.scope_refresh_ms, &at),
        })?;
        self.admission.apply_raw(raw.admission, &at)
    }

    /// Applies the flags that were given.
    pub fn apply_args(&mut self, args: &TunableArgs) -> Result<(), ConfigError> {
        fn flag<T>(v: Option<T>, name: &'static str) -> Option<Setting<T>> {
            v.map(|value| Setting {
                value,
                origin: Origin::Flag(name),
            })
        }
        self.apply(Settings {
            sources: flag(
                Some(args.enabled_sources.clone()).filter(|v| !v.is_empty()),
                "source",
            ),
            target_nid: flag(args.target_nid, "target-nid"),
            freq_threshold: flag(args.freq_threshold, "freq-threshold"),
            promote_window_ms: flag(args.promote_window_ms, "promote-window-ms"),
            promote_rate_limit_mbps: flag(args.promote_rate_limit_mbps, "promote-rate-limit-MBps"),
            promote_min_free_pct: flag(args.promote_min_free_pct, "promote-min-free-pct"),
            migrate_interval_ms: flag(args.migrate_interval_ms, "migrate-interval-ms"),
            migrate_batch: flag(args.migrate_batch, "migrate-batch"),
            max_tracked_pages: flag(args.max_tracked_pages, "max-tracked-pages"),
            heat_halflife_ms: flag(args.heat_halflife_ms, "heat-halflife-ms"),
            pids: flag(Some(args.pids.clone()).filter(|v| !v.is_empty()), "pid"),
            dry_run: flag(args.dry_run.then_some(true), "dry-run"),
            demote: flag(args.demote.then_some(true), "demote"),
            demote_free_pct: flag(args.demote_free_pct, "demote-free-pct"),
            sysfs_root: flag(args.sysfs_root.clone(), "sysfs-root"),
            perf_ring_pages: flag(args.perf_ring_pages, "perf-ring-pages"),
            pagefault_period: flag(args.pagefault_period, "pagefault-period"),
            ibs_period: flag(args.ibs_period.clone(), "ibs-period"),
            ibs_cpu_budget_pct: flag(args.ibs_cpu_budget_pct, "ibs-cpu-budget-pct"),
            ibs_count_ops: flag(args.ibs_count_ops, "ibs-count-ops"),
            ibs_l3miss_only: flag(args.ibs_l3miss_only, "ibs-l3miss-only"),
            ibs_ldlat: flag(args.ibs_ldlat, "ibs-ldlat"),
            ibs_user_only: flag(args.ibs_user_only, "ibs-user-only"),
            pebs_period: flag(args.pebs_period, "pebs-period"),
            pebs_ldlat: flag(args.pebs_ldlat, "pebs-ldlat"),
            pebs_stores: flag(args.pebs_stores, "pebs-stores"),
            softdirty_interval_ms: flag(args.softdirty_interval_ms, "softdirty-interval-ms"),
            softdirty_scan_budget_pages: flag(
                args.softdirty_scan_budget_pages,
                "softdirty-scan-budget-pages",
            ),
            damon_sample_us: flag(args.damon_sample_us, "damon-sample-us"),
            damon_aggr_us: flag(args.damon_aggr_us, "damon-aggr-us"),
            damon_min_regions: flag(args.damon_min_regions, "damon-min-regions"),
            damon_max_regions: flag(args.damon_max_regions, "damon-max-regions"),
            damon_max_samples: flag(args.damon_max_samples, "damon-max-samples"),
            control_socket: flag(args.control_socket.clone(), "control-socket"),
            metrics_listen: flag(args.metrics_listen.clone(), "metrics-listen"),
            cgroups: flag(
                Some(
                    args.cgroups
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect(),
                )
                .filter(|v: &Vec<String>| !v.is_empty()),
                "cgroup",
            ),
            comm: flag(args.comm.clone(), "comm"),
            pid_namespace_of: flag(args.pid_namespace_of, "pid-namespace-of"),
            scope_refresh_ms: flag(args.scope_refresh_ms, "scope-refresh-ms"),
        })?;
        self.admission.apply_args(&args.admission)
    }

    fn apply(&mut self, s: Settings) -> Result<(), ConfigError> {
        use limits::*;
        let num = |s: &Option<Setting<i64>>,
                   key,
                   (min, max): (i64, i64)|
         -> Result<Option<i64>, ConfigError> {
            s.as_ref()
                .map(|s| ranged(&s.origin, key, s.value, min, max))
                .transpose()
        };
        if let Some(v) = &s.sources {
            let mut specs = Vec::new();
            for spec in &v.value {
                specs.push(SourceSpec::parse(spec).map_err(|e| ConfigError::Invalid {
                    origin: v.origin.clone(),
                    key: "enabled_sources",
                    detail: e.to_string(),
                })?);
            }
            self.sources = specs;
        }
        if let Some(n) = num(&s.target_nid, "target_nid", NODE)? {
            self.target_nid = Some(n as NodeId);
        }
        if let Some(n) = num(&s.freq_threshold, "freq_threshold", FREQ_THRESHOLD)? {
            self.policy.freq_threshold = n as u16;
        }
        if let Some(n) = num(&s.promote_window_ms, "promote_window_ms", PROMOTE_WINDOW_MS)? {
            self.policy.promote_window_ms = n as u32;
        }
        if let Some(n) = num(&s.heat_halflife_ms, "heat_halflife_ms", HEAT_HALFLIFE_MS)? {
            self.policy.heat_halflife_ms = n as u32;
        }
        if let Some(n) = num(
            &s.promote_rate_limit_mbps,
            "promote_rate_limit_MBps",
            PROMOTE_RATE_LIMIT_MBPS,
        )? {
            self.migrator.promote_rate_limit_mbps = n as u64;
        }
        if let Some(n) = num(
            &s.promote_min_free_pct,
            "promote_min_free_pct",
            PROMOTE_MIN_FREE_PCT,
        )? {
            self.migrator.promote_min_free_pct = n as u8;
        }
        if let Some(n) = num(
            &s.migrate_interval_ms,
            "migrate_interval_ms",
            MIGRATE_INTERVAL_MS,
        )? {
            self.migrator.migrate_interval_ms = n as u32;
        }
        if let Some(n) = num(&s.migrate_batch, "migrate_batch", MIGRATE_BATCH)? {
            self.migrator.migrate_batch = n as usize;
        }
        if let Some(n) = num(&s.max_tracked_pages, "max_tracked_pages", MAX_TRACKED_PAGES)? {
            self.max_tracked_pages = n as usize;
        }
        if let Some(v) = &s.pids {
            let mut pids = Vec::with_capacity(v.value.len());
            for &pid in &v.value {
                pids.push(ranged(&v.origin, "pids", pid, PID.0, PID.1)? as u32);
            }
            self.pids = pids;
        }
        self.apply_sources(&s)?;
        self.apply_scope(&s)?;
        if let Some(v) = &s.dry_run {
            self.migrator.dry_run = v.value;
        }
        if let Some(v) = &s.demote {
            self.migrator.demote = v.value;
        }
        if let Some(n) = num(&s.demote_free_pct, "demote_free_pct", DEMOTE_FREE_PCT)? {
            self.migrator.demote_free_pct = n as u8;
        }
        // Checked where either side was set: an earlier origin passed this check already.
        let set_here = s
            .demote_free_pct
            .as_ref()
            .map(|v| &v.origin)
            .or(s.demote.as_ref().map(|v| &v.origin))
            .or(s.promote_min_free_pct.as_ref().map(|v| &v.origin));
        if let Some(origin) = set_here
            && self.migrator.demote
            && self.migrator.demote_free_pct <= self.migrator.promote_min_free_pct
        {
            return Err(ConfigError::Invalid {
                origin: origin.clone(),
                key: "demote_free_pct",
                detail: format!(
                    "{} must be above promote_min_free_pct ({}): demotion frees what promotion \
                     keeps in reserve",
                    self.migrator.demote_free_pct, self.migrator.promote_min_free_pct
                ),
            });
        }
        if let Some(v) = &s.perf_ring_pages {
            let pages = ranged(
                &v.origin,
                "perf.ring_pages",
                v.value,
                PERF_RING_PAGES.0,
                PERF_RING_PAGES.1,
            )?;
            if !(pages as u64).is_power_of_two() {
                return Err(ConfigError::Invalid {
                    origin: v.origin.clone(),
                    key: "perf.ring_pages",
                    detail: format!("{pages} is not a power of two (perf rings are 2^n pages)"),
                });
            }
            self.perf.ring_pages = pages as usize;
        }
        if let Some(n) = num(&s.pagefault_period, "pagefault.period", PAGEFAULT_PERIOD)? {
            self.pagefault.period = n as u64;
        }
        self.apply_hardware(&s)?;
        if let Some(v) = s.sysfs_root {
            if !v.value.is_dir() {
                return Err(ConfigError::Invalid {
                    origin: v.origin,
                    key: "sysfs_root",
                    detail: format!("{} is not a directory", v.value.display()),
                });
            }
            self.sysfs_root = v.value;
        }
        if let Some(v) = s.control_socket {
            self.control_socket = (!v.value.as_os_str().is_empty()).then_some(v.value);
        }
        if let Some(v) = s.metrics_listen {
            self.metrics_listen = match v.value.as_str() {
                "" => None,
                addr => Some(addr.parse().map_err(|_| ConfigError::Invalid {
                    origin: v.origin,
                    key: "metrics_listen",
                    detail: format!("'{addr}' is not ADDR:PORT (e.g. 127.0.0.1:9464)"),
                })?),
            };
        }
        Ok(())
    }

    /// The software sources' tunables, with their cross checks (sample <= aggregation,
    /// min <= max regions) against what is already set.
    fn apply_sources(&mut self, s: &Settings) -> Result<(), ConfigError> {
        use limits::*;
        let num = |s: &Option<Setting<i64>>, key, (min, max): (i64, i64)| {
            s.as_ref()
                .map(|s| ranged(&s.origin, key, s.value, min, max))
                .transpose()
        };
        if let Some(n) = num(
            &s.softdirty_interval_ms,
            "softdirty_interval_ms",
            SOFTDIRTY_INTERVAL_MS,
        )? {
            self.softdirty.interval_ms = n as u32;
        }
        if let Some(n) = num(
            &s.softdirty_scan_budget_pages,
            "softdirty_scan_budget_pages",
            SOFTDIRTY_SCAN_BUDGET_PAGES,
        )? {
            self.softdirty.scan_budget_pages = n as u64;
        }
        let mut damon = self.damon;
        if let Some(n) = num(&s.damon_sample_us, "damon_sample_us", DAMON_SAMPLE_US)? {
            damon.sample_us = n as u32;
        }
        if let Some(n) = num(&s.damon_aggr_us, "damon_aggr_us", DAMON_AGGR_US)? {
            damon.aggr_us = n as u32;
        }
        if let Some(n) = num(&s.damon_min_regions, "damon_min_regions", DAMON_REGIONS)? {
            damon.min_regions = n as u32;
        }
        if let Some(n) = num(&s.damon_max_regions, "damon_max_regions", DAMON_REGIONS)? {
            damon.max_regions = n as u32;
        }
        if let Some(n) = num(&s.damon_max_samples, "damon_max_samples", DAMON_MAX_SAMPLES)? {
            damon.max_samples = n as u32;
        }
        let origin = |a: &Option<Setting<i64>>, b: &Option<Setting<i64>>| {
            a.as_ref().or(b.as_ref()).map(|s| s.origin.clone())
        };
        if damon.sample_us > damon.aggr_us
            && let Some(origin) = origin(&s.damon_sample_us, &s.damon_aggr_us)
        {
            return Err(ConfigError::Invalid {
                origin,
                key: "damon_sample_us",
                detail: format!(
                    "the sampling interval ({} us) must not exceed the aggregation interval ({} us)",
                    damon.sample_us, damon.aggr_us
                ),
            });
        }
        if damon.min_regions > damon.max_regions
            && let Some(origin) = origin(&s.damon_min_regions, &s.damon_max_regions)
        {
            return Err(ConfigError::Invalid {
                origin,
                key: "damon_min_regions",
                detail: format!(
                    "damon_min_regions ({}) must not exceed damon_max_regions ({})",
                    damon.min_regions, damon.max_regions
                ),
            });
        }
        self.damon = damon;
        Ok(())
    }

    /// The `[ibs]` and `[pebs]` tunables. What the PMU supports (a period's upper bound with
    /// OPCNTEXT, l3missonly, ldlat) is checked against sysfs when the source opens.
    fn apply_hardware(&mut self, s: &Settings) -> Result<(), ConfigError> {
        use limits::*;
        let num = |s: &Option<Setting<i64>>, key, (min, max): (i64, i64)| {
            s.as_ref()
                .map(|s| ranged(&s.origin, key, s.value, min, max))
                .transpose()
        };
        let flag = |s: &Option<Setting<bool>>| s.as_ref().map(|s| s.value);
        if let Some(v) = &s.ibs_period {
            match &v.value {
                PeriodValue::Fixed(n) => {
                    let n = ranged(&v.origin, "ibs.period", *n, IBS_PERIOD.0, IBS_PERIOD.1)?;
                    self.ibs.period = n as u64;
                    self.ibs_period_auto = false;
                }
                PeriodValue::Word(w) if w == "auto" => self.ibs_period_auto = true,
                PeriodValue::Word(w) => {
                    return Err(ConfigError::Invalid {
                        origin: v.origin.clone(),
                        key: "ibs.period",
                        detail: format!(
                            "'{w}' is neither a number ({}..={}) nor \"auto\"",
                            IBS_PERIOD.0, IBS_PERIOD.1
                        ),
                    });
                }
            }
        }
        if let Some(n) = num(&s.ibs_cpu_budget_pct, "ibs.cpu_budget_pct", CPU_BUDGET_PCT)? {
            self.ibs_cpu_budget_pct = n as u8;
        }
        if let Some(n) = num(&s.ibs_ldlat, "ibs.ldlat", IBS_LDLAT)? {
            self.ibs.ldlat = Some(n as u32);
        }
        if let Some(v) = flag(&s.ibs_count_ops) {
            self.ibs.count_ops = v;
        }
        if let Some(v) = flag(&s.ibs_l3miss_only) {
            self.ibs.l3miss_only = Some(v);
        }
        if let Some(v) = flag(&s.ibs_user_only) {
            self.ibs.user_only = v;
        }
        if let Some(n) = num(&s.pebs_period, "pebs.period", PEBS_PERIOD)? {
            self.pebs.period = n as u64;
        }
        if let Some(n) = num(&s.pebs_ldlat, "pebs.ldlat", PEBS_LDLAT)? {
            self.pebs.ldlat = n as u32;
        }
        if let Some(v) = flag(&s.pebs_stores) {
            self.pebs.stores = v;
        }
        Ok(())
    }

    /// Every key with its current value, as `config get` shows it (file names and units).
    pub fn values(&self) -> Vec<(&'static str, serde_json::Value)> {
        use serde_json::json;
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let mut values = vec![
            (
                "enabled_sources",
                json!(
                    self.sources
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                ),
            ),
            ("target_nid", json!(self.target_nid)),
            ("freq_threshold", json!(self.policy.freq_threshold)),
            ("promote_window_ms", json!(self.policy.promote_window_ms)),
            (
                "promote_rate_limit_MBps",
                json!(self.migrator.promote_rate_limit_mbps),
            ),
            (
                "promote_min_free_pct",
                json!(self.migrator.promote_min_free_pct),
            ),
            (
                "migrate_interval_ms",
                json!(self.migrator.migrate_interval_ms),
            ),
            ("migrate_batch", json!(self.migrator.migrate_batch)),
            ("max_tracked_pages", json!(self.max_tracked_pages)),
            ("heat_halflife_ms", json!(self.policy.heat_halflife_ms)),
            ("pids", json!(self.pids)),
            ("dry_run", json!(self.migrator.dry_run)),
            ("demote", json!(self.migrator.demote)),
            ("demote_free_pct", json!(self.migrator.demote_free_pct)),
            ("sysfs_root", json!(self.sysfs_root.display().to_string())),
            ("perf.ring_pages", json!(self.perf.ring_pages)),
            ("pagefault.period", json!(self.pagefault.period)),
            (
                "ibs.period",
                if self.ibs_period_auto {
                    json!("auto")
                } else {
                    json!(self.ibs.period)
                },
            ),
            ("ibs.cpu_budget_pct", json!(self.ibs_cpu_budget_pct)),
            ("ibs.count_ops", json!(self.ibs.count_ops)),
            ("ibs.l3miss_only", json!(self.ibs.l3miss_only)),
            ("ibs.ldlat", json!(self.ibs.ldlat)),
            ("ibs.user_only", json!(self.ibs.user_only)),
            ("pebs.period", json!(self.pebs.period)),
            ("pebs.ldlat", json!(self.pebs.ldlat)),
            ("pebs.stores", json!(self.pebs.stores)),
            ("softdirty_interval_ms", json!(self.softdirty.interval_ms)),
            (
                "softdirty_scan_budget_pages",
                json!(self.softdirty.scan_budget_pages),
            ),
            ("damon_sample_us", json!(self.damon.sample_us)),
            ("damon_aggr_us", json!(self.damon.aggr_us)),
            ("damon_min_regions", json!(self.damon.min_regions)),
            ("damon_max_regions", json!(self.damon.max_regions)),
            ("damon_max_samples", json!(self.damon.max_samples)),
            ("control_socket", json!(path(&self.control_socket))),
            (
                "metrics_listen",
                json!(self.metrics_listen.map(|a| a.to_string())),
            ),
            (
                "cgroups",
                json!(
                    self.cgroups
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                ),
            ),
            ("comm", json!(self.comm)),
            ("pid_namespace_of", json!(self.pid_namespace_of)),
            ("scope_refresh_ms", json!(self.scope_refresh_ms)),
        ];
        values.extend(self.admission.values());
        values
    }

    /// Checks what needs the topology: `target_nid` must be a top-tier memory node.
    pub fn check_against(&self, topology: &crate::topology::Topology) -> Result<(), ConfigError> {
        self.admission.check_against(topology)?;
        if let Some(nid) = self.target_nid {
            let ok = topology
                .node(nid)
                .is_some_and(|n| n.top_tier && n.has_memory());
            if !ok {
                let top: Vec<String> = topology
                    .nodes()
                    .iter()
                    .filter(|n| n.top_tier && n.has_memory())
                    .map(|n| n.id.to_string())
                    .collect();
                return Err(ConfigError::Invalid {
                    origin: Origin::Flag("target-nid"),
                    key: "target_nid",
                    detail: format!(
                        "node {nid} is not a top-tier memory node here (top tier: {})",
                        top.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Settings from one origin, before validation.
struct Settings {
    sources: Option<Setting<Vec<String>>>,
    target_nid: Option<Setting<i64>>,
    freq_threshold: Option<Setting<i64>>,
    promote_window_ms: Option<Setting<i64>>,
    promote_rate_limit_mbps: Option<Setting<i64>>,
    promote_min_free_pct: Option<Setting<i64>>,
    migrate_interval_ms: Option<Setting<i64>>,
    migrate_batch: Option<Setting<i64>>,
    max_tracked_pages: Option<Setting<i64>>,
    heat_halflife_ms: Option<Setting<i64>>,
    pids: Option<Setting<Vec<i64>>>,
    dry_run: Option<Setting<bool>>,
    demote: Option<Setting<bool>>,
    demote_free_pct: Option<Setting<i64>>,
    sysfs_root: Option<Setting<PathBuf>>,
    perf_ring_pages: Option<Setting<i64>>,
    pagefault_period: Option<Setting<i64>>,
    ibs_period: Option<Setting<PeriodValue>>,
    ibs_cpu_budget_pct: Option<Setting<i64>>,
    ibs_count_ops: Option<Setting<bool>>,
    ibs_l3miss_only: Option<Setting<bool>>,
    ibs_ldlat: Option<Setting<i64>>,
    ibs_user_only: Option<Setting<bool>>,
    pebs_period: Option<Setting<i64>>,
    pebs_ldlat: Option<Setting<i64>>,
    pebs_stores: Option<Setting<bool>>,
    softdirty_interval_ms: Option<Setting<i64>>,
    softdirty_scan_budget_pages: Option<Setting<i64>>,
    damon_sample_us: Option<Setting<i64>>,
    damon_aggr_us: Option<Setting<i64>>,
    damon_min_regions: Option<Setting<i64>>,
    damon_max_regions: Option<Setting<i64>>,
    damon_max_samples: Option<Setting<i64>>,
    control_socket: Option<Setting<PathBuf>>,
    metrics_listen: Option<Setting<String>>,
    cgroups: Option<Setting<Vec<String>>>,
    comm: Option<Setting<String>>,
    pid_namespace_of: Option<Setting<i64>>,
    scope_refresh_ms: Option<Setting<i64>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn from_file(text: &str) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        c.apply_file(Path::new("/etc/pghotd/pghotd.toml"), text)?;
        Ok(c)
    }

    #[test]
    fn demote_is_off_by_default_and_its_watermark_sits_above_the_promotion_reserve() {
        let c = Config::default();
        assert!(!c.migrator.demote);
        let c = Config::default()
            .with_setting("demote", "true")
            .and_then(|c| c.with_setting("demote_free_pct", "8"))
            .unwrap();
        assert!(c.migrator.demote);
        assert_eq!(c.migrator.demote_free_pct, 8);
        let err = c
            .with_setting("demote_free_pct", "2")
            .unwrap_err()
            .to_string();
        assert!(err.contains("demote_free_pct"), "{err}");
        assert!(err.contains("above promote_min_free_pct (2)"), "{err}");
        let err = Config::default()
            .with_setting("demote_free_pct", "0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("1") && err.contains("60"), "{err}");
    }

    #[test]
    fn defaults_match_the_seed() {
        let c = Config::default();
        assert_eq!(c.policy.freq_threshold, 2);
        assert_eq!(c.policy.promote_window_ms, 5000);
        assert_eq!(c.migrator.promote_rate_limit_mbps, 65536);
        assert_eq!(c.migrator.migrate_interval_ms, 100);
        assert_eq!(c.migrator.migrate_batch, 512);
    }

    #[test]
    fn file_keys_are_applied() {
        let c = from_file(
            "enabled_sources = [\"trace:/tmp/a\", \"trace:-\"]\ntarget_nid = 1\nfreq_threshold = 1\n\
             promote_window_ms = 3000\npromote_rate_limit_MBps = 100\nmigrate_batch = 64\n\
             pids = [10, 20]\ndry_run = true\n",
        )
        .unwrap();
        assert_eq!(c.sources.len(), 2);
        assert_eq!(c.target_nid, Some(1));
        assert_eq!(c.policy.freq_threshold, 1);
        assert_eq!(c.policy.promote_window_ms, 3000);
        assert_eq!(c.migrator.promote_rate_limit_mbps, 100);
        assert_eq!(c.migrator.migrate_batch, 64);
        assert_eq!(c.pids, vec![10, 20]);
        assert!(c.migrator.dry_run);
    }

    #[test]
    fn out_of_range_values_name_key_line_and_range() {
        let err = from_file("# comment\nfreq_threshold = 2\nmigrate_batch = 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config /etc/pghotd/pghotd.toml line 3: migrate_batch = 0 is out of range; allowed 1..=65536"
        );
        let err = from_file("pids = [1, -5]").unwrap_err().to_string();
        assert!(err.contains("line 1: pids = -5 is out of range"), "{err}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_errors_with_a_line() {
        let err = from_file("freq_threshold = 2\nfreq_treshold = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("unknown field `freq_treshold`"), "{err}");
        let err = from_file("migrate_batch = \"many\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 1"), "{err}");
        let err = from_file("enabled_sources = [\"ibz\"]")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("enabled_sources: unknown source 'ibz'"),
            "{err}"
        );
    }

    #[test]
    fn ibs_period_is_a_number_or_auto() {
        let c = from_file("[ibs]\nperiod = \"auto\"\ncpu_budget_pct = 3\n").unwrap();
        assert!(c.ibs_period_auto);
        assert_eq!(c.ibs_cpu_budget_pct, 3);
        let c = from_file("[ibs]\nperiod = 20000\n").unwrap();
        assert_eq!((c.ibs_period_auto, c.ibs.period), (false, 20000));
        let err = from_file("[ibs]\nperiod = \"fast\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 2: ibs.period: 'fast' is neither a number"),
            "{err}"
        );
        let err = from_file("[ibs]\nperiod = 16\n").unwrap_err().to_string();
        assert!(
            err.contains("ibs.period = 16 is out of range; allowed 144..="),
            "{err}"
        );
        let args = TunableArgs {
            ibs_period: Some("auto".parse().unwrap()),
            ..TunableArgs::default()
        };
        let mut c = Config::default();
        c.apply_args(&args).unwrap();
        assert!(c.ibs_period_auto);
    }

    #[test]
    fn perf_tables_are_read_and_checked() {
        let c = from_file("[perf]\nring_pages = 256\n[pagefault]\nperiod = 4\n").unwrap();
        assert_eq!((c.perf.ring_pages, c.pagefault.period), (256, 4));
        let err = from_file("freq_threshold = 2\n[perf]\nring_pages = 100\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 3: perf.ring_pages: 100 is not a power of two"),
            "{err}"
        );
        let err = from_file("[pagefault]\nperiod = 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pagefault.period = 0 is out of range"),
            "{err}"
        );
        let err = from_file("[perf]\nring_page = 2\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `ring_page`"), "{err}");
    }

    #[test]
    fn flags_override_the_file_and_are_validated() {
        let mut c = from_file("freq_threshold = 5\n").unwrap();
        let args = TunableArgs {
            freq_threshold: Some(3),
            ..TunableArgs::default()
        };
        c.apply_args(&args).unwrap();
        assert_eq!(c.policy.freq_threshold, 3);
        let args = TunableArgs {
            promote_window_ms: Some(0),
            ..TunableArgs::default()
        };
        let err = c.apply_args(&args).unwrap_err().to_string();
        assert_eq!(
            err,
            "flag --promote-window-ms: promote_window_ms = 0 is out of range; allowed 1..=3600000"
        );
    }

    #[test]
    fn software_source_keys_are_applied_and_checked() {
        let c = from_file(
            "enabled_sources = [\"damon\", \"softdirty\"]\nsoftdirty_interval_ms = 500\n\
             softdirty_scan_budget_pages = 4096\ndamon_sample_us = 1000\ndamon_aggr_us = 50000\n\
             damon_min_regions = 5\ndamon_max_regions = 50\ndamon_max_samples = 100\n",
        )
        .unwrap();
        assert_eq!(c.sources, vec![SourceSpec::Damon, SourceSpec::SoftDirty]);
        assert_eq!(c.softdirty.interval_ms, 500);
        assert_eq!(c.softdirty.scan_budget_pages, 4096);
        assert_eq!(c.damon.sample_us, 1000);
        assert_eq!(c.damon.aggr_us, 50000);
        assert_eq!(c.damon.min_regions, 5);
        assert_eq!(c.damon.max_regions, 50);
        assert_eq!(c.damon.max_samples, 100);
        let err = from_file("damon_aggr_us = 600000\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 1: damon_aggr_us = 600000 is out of range; allowed 1000..=500000"),
            "{err}"
        );
        let err = from_file("damon_sample_us = 20000\ndamon_aggr_us = 10000\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 1: damon_sample_us: the sampling interval (20000 us)"),
            "{err}"
        );
        // A flag that breaks the file's setting is named.
        let mut c = from_file("damon_min_regions = 100\n").unwrap();
        let args = TunableArgs {
            damon_max_regions: Some(50),
            ..TunableArgs::default()
        };
        let err = c.apply_args(&args).unwrap_err().to_string();
        assert_eq!(
            err,
            "flag --damon-max-regions: damon_min_regions: damon_min_regions (100) must not exceed damon_max_regions (50)"
        );
        let err = from_file("softdirty_interval_ms = 5\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("softdirty_interval_ms = 5 is out of range"),
            "{err}"
        );
    }

    #[test]
    fn config_set_validates_like_the_file() {
        let c = Config::default();
        let next = c.with_setting("freq_threshold", "3").unwrap();
        assert_eq!(next.policy.freq_threshold, 3);
        let err = c
            .with_setting("freq_threshold", "0")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config set: freq_threshold = 0 is out of range; allowed 1..=65535"
        );
        let err = c
            .with_setting("freq_treshold", "3")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `freq_treshold`"), "{err}");
        let err = c
            .with_setting("migrate_batch", "many")
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid type: string \"many\""), "{err}");
        let err = c
            .with_setting("metrics_listen", "nowhere")
            .unwrap_err()
            .to_string();
        assert!(err.contains("'nowhere' is not ADDR:PORT"), "{err}");
        let next = c.with_setting("metrics_listen", "127.0.0.1:9464").unwrap();
        assert_eq!(next.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
        let next = c.with_setting("control_socket", "\"\"").unwrap();
        assert_eq!(next.control_socket, None);
        let next = c.with_setting("perf.ring_pages", "128").unwrap();
        assert_eq!(next.perf.ring_pages, 128);
    }

    #[test]
    fn an_explicit_missing_config_is_an_error_the_default_is_not() {
        let err = Config::load(
            Some(Path::new("/nonexistent/p.toml")),
            &TunableArgs::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("reading config /nonexistent/p.toml"),
            "{err}"
        );
    }
}
