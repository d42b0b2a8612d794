//! Configuration: TOML file, then CLI flags, validated into one [`Config`].
//!
//! Every setting is one row of the table in [`defs`] (key, type and range, where the value
//! lives, flag, help, docs, whether it changes at runtime); the file parser ([`file`]), the
//! flags ([`flags`]), `config get`/`set` ([`Config::values`], [`Config::with_setting`],
//! [`Config::set_runtime`]), `--check-config`, the README's tables and pghotd.toml(5)
//! ([`docs`]) all read it. Values are validated into the settings structs their stages own
//! (`MigratorConfig`, `HotnessConfig`, `AdmissionConfig`, the samplers' tunables); those stages
//! never see this module. Keys mirror the pghot kernel's `vm.pghot_*` tunables; a flag wins
//! over the file.
//!
//! An explicit `--config` that does not exist is an error; the default path
//! `/etc/pghotd/pghotd.toml` missing means built-in defaults. Either way the daemon logs what
//! it loaded.

mod admission;
mod apply;
pub mod defs;
pub mod docs;
mod file;
mod flags;
mod machine;
mod scope;
pub mod setting;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use crate::admission::AdmissionConfig;
use crate::conflicts::ConflictPolicy;
use crate::cpushare::CpuPolicy;
use crate::hotness::HotnessConfig;
use crate::migrator::MigratorConfig;
use crate::sampler::SourceSpec;
use crate::sampler::damon::DamonConfig;
use crate::sampler::ibs::IbsConfig;
use crate::sampler::pagefault::PageFaultConfig;
use crate::sampler::pebs::PebsConfig;
use crate::sampler::perf::PerfConfig;
use crate::sampler::softdirty::SoftDirtyConfig;
use crate::topology::NodeId;

pub use apply::Given;
pub use defs::SETTINGS;
pub use flags::SettingArgs;
pub use setting::{Kind, Setting, Written};

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
    #[error(
        "config {} is longer than {MAX_CONFIG_BYTES} bytes (1 MiB), the most pghotd reads; not read",
        path.display()
    )]
    TooLarge { path: PathBuf },
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
    #[error("{origin}: unknown key '{key}' (pghotctl config get lists them)")]
    UnknownKey { origin: Origin, key: String },
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
    /// Nobody gave the value: the stage's default.
    Default,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "config {} line {line}", path.display()),
            Origin::Flag(flag) => write!(f, "flag --{flag}"),
            Origin::Control => write!(f, "config set"),
            Origin::Default => write!(f, "built-in default"),
        }
    }
}

/// Validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub sources: Vec<SourceSpec>,
    pub target_nid: Option<NodeId>,
    pub policy: HotnessConfig,
    pub migrator: MigratorConfig,
    pub max_tracked_pages: usize,
    pub pids: Vec<u32>,
    pub sysfs_root: PathBuf,
    pub perf: PerfConfig,
    pub pagefault: PageFaultConfig,
    pub ibs: IbsConfig,
    /// `ibs.period = "auto"`: the adaptive controller sets the period live.
    pub ibs_period_auto: bool,
    pub ibs_cpu_budget_pct: u8,
    pub pebs: PebsConfig,
    pub damon: DamonConfig,
    pub softdirty: SoftDirtyConfig,
    /// Where state that must outlive a crash goes (not a key: tests change it).
    pub run_dir: PathBuf,
    /// `None`: no control socket.
    pub control_socket: Option<PathBuf>,
    /// A second socket that serves only reading requests (`None`: off).
    pub readonly_socket: Option<PathBuf>,
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
    /// What a competing promoter found at start does (`conflicts`).
    pub conflicts: ConflictPolicy,
    /// How the worker threads share the CPU with the managed programs (`cpu_policy`).
    pub cpu_policy: CpuPolicy,
    /// Where each given value came from, for the checks that run later.
    pub origins: Origins,
}

/// Where each value given so far came from (the last origin per key), so a check that runs
/// after parsing (against the topology, the machine's memory) names the file and line, the
/// flag or the control request. Not part of the configuration's value: two configurations with
/// the same values are equal wherever their values came from.
#[derive(Debug, Clone, Default)]
pub struct Origins(Vec<(&'static str, Origin)>);

impl Origins {
    fn set(&mut self, key: &'static str, origin: Origin) {
        self.0.retain(|(k, _)| *k != key);
        self.0.push((key, origin));
    }

    /// The origin of `key`'s value: [`Origin::Default`] when nobody gave one.
    pub fn of(&self, key: &str) -> Origin {
        self.0
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(Origin::Default, |(_, o)| o.clone())
    }
}

impl PartialEq for Origins {
    fn eq(&self, _: &Origins) -> bool {
        true
    }
}

impl Eq for Origins {}

impl Default for Config {
    fn default() -> Self {
        Config {
            sources: vec![SourceSpec::Auto],
            target_nid: None,
            policy: HotnessConfig::default(),
            migrator: MigratorConfig::default(),
            max_tracked_pages: 1 << 20,
            pids: Vec::new(),
            sysfs_root: PathBuf::from("/sys"),
            perf: PerfConfig::default(),
            pagefault: PageFaultConfig::default(),
            ibs: IbsConfig::default(),
            ibs_period_auto: false,
            // Issue 22: the pghot series' H5 spent 16 % of a core (kmigrated: 38 s in its 240 s
            // pointer chase), the most its bar allows pghotd. At 16 % the auto period places
            // 99 % of the 16 GB hot set within those 240 s at freq_threshold 2 in `pghot-sim`
            // (15 %: 98.6-98.7 %; BENCHMARKS.md), spending 93 % of it while the hot set is being
            // found and backing off once it is covered.
            ibs_cpu_budget_pct: 16,
            pebs: PebsConfig::default(),
            damon: DamonConfig::default(),
            softdirty: SoftDirtyConfig::default(),
            run_dir: PathBuf::from(DEFAULT_RUN_DIR),
            control_socket: Some(PathBuf::from(DEFAULT_CONTROL_SOCKET)),
            readonly_socket: None,
            metrics_listen: None,
            cgroups: Vec::new(),
            comm: None,
            pid_namespace_of: None,
            scope_refresh_ms: 1000,
            loaded_from: None,
            admission: AdmissionConfig::default(),
            conflicts: ConflictPolicy::default(),
            cpu_policy: CpuPolicy::default(),
            origins: Origins::default(),
        }
    }
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
    pub fn load(path: Option<&Path>, args: &SettingArgs) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        match read_config(&path) {
            Ok(text) => {
                config.apply_file(&path, &text)?;
                config.loaded_from = Some(path);
            }
            Err(ConfigError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && !explicit => {}
            Err(e) => return Err(e),
        }
        config.apply_args(args)?;
        Ok(config)
    }

    /// Applies a TOML document's settings.
    pub fn apply_file(&mut self, path: &Path, text: &str) -> Result<(), ConfigError> {
        let given = file::parse(text, path, |line| Origin::File {
            path: path.to_path_buf(),
            line,
        })?;
        self.apply(&given)
    }

    /// The configuration with one more setting, `key` set to `value`: one TOML value (never
    /// a document: see [`file::parse_value`]) validated as the config file's would be (same
    /// keys, types and ranges).
    pub fn with_setting(&self, key: &str, value: &str) -> Result<Config, ConfigError> {
        let Some(setting) = setting(key) else {
            return Err(ConfigError::UnknownKey {
                origin: Origin::Control,
                key: key.to_string(),
            });
        };
        let written = file::parse_value(setting, value).map_err(|detail| ConfigError::Invalid {
            origin: Origin::Control,
            key: setting.key,
            detail,
        })?;
        let mut next = self.clone();
        next.apply(&[Given {
            setting,
            value: written,
            origin: Origin::Control,
        }])?;
        Ok(next)
    }

    /// Every key with its current value, as `config get` shows it (file names and units);
    /// null where a key is unset.
    pub fn values(&self) -> Vec<(&'static str, serde_json::Value)> {
        SETTINGS
            .iter()
            .map(|s| {
                let value = (s.field.get)(self).map_or(serde_json::Value::Null, |v| v.to_json());
                (s.key, value)
            })
            .collect()
    }

    /// Takes from `next` the settings that may change while the daemon runs (`config set`, a
    /// reload); the others keep their running value and, where `next` differs, are reported.
    pub fn set_runtime(&mut self, next: &Config) -> RuntimeChange {
        let mut change = RuntimeChange::default();
        for s in SETTINGS {
            if (s.field.get)(self) == (s.field.get)(next) {
                continue;
            }
            if s.runtime {
                (s.field.copy)(next, self);
                self.origins.set(s.key, next.origins.of(s.key));
                change.applied.push(s.key);
            } else {
                change.needs_restart.push(s.key);
            }
        }
        change
    }

    /// Checks what needs the topology: `target_nid` must be a top-tier memory node.
    pub fn check_against(&self, topology: &crate::topology::Topology) -> Result<(), ConfigError> {
        self.admission
            .check_against(topology, self.origins.of("admission.full_duplex_nodes"))?;
        self.check_table_fits(machine::mem_total_bytes()?)?;
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
                    origin: self.origins.of("target_nid"),
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

/// The most a config file may hold. A few hundred bytes is usual; the bound keeps a mistaken
/// path (a log, a disk image) from being read whole into a root daemon's memory, at start or
/// on every reload.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Reads a config file: a regular file (a FIFO, a device or a directory is refused at once,
/// never waited on: see [`crate::safefs::read_bounded`]) of at most [`MAX_CONFIG_BYTES`], in
/// UTF-8.
fn read_config(path: &Path) -> Result<String, ConfigError> {
    let bytes = crate::safefs::read_bounded(path, MAX_CONFIG_BYTES).map_err(|source| {
        if source.kind() == std::io::ErrorKind::InvalidData {
            ConfigError::TooLarge {
                path: path.to_path_buf(),
            }
        } else {
            ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    String::from_utf8(bytes).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
    })
}

/// What [`Config::set_runtime`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RuntimeChange {
    pub applied: Vec<&'static str>,
    pub needs_restart: Vec<&'static str>,
}

/// The setting of `key` (dotted for a table's keys: `ibs.period`).
pub fn setting(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.key == key)
}

/// The keys `config set` may change while the daemon runs.
pub fn runtime_keys() -> impl Iterator<Item = &'static str> {
    SETTINGS.iter().filter(|s| s.runtime).map(|s| s.key)
}
