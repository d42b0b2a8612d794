//! The `[admission]` table of the config file and its `--split-*`/`--duplex-*` flags.
//!
//! ```toml
//! [admission]
//! split = true                  # split THPs to the hot mTHP size before promoting
//! split_flat_entropy_pct = 95   # normalized entropy at or above which a histogram is flat
//! split_coverage_pct = 80       # P: share of samples the hot subpages hold
//! split_heat_density_pct = 75   # tau: share of hot subpages a chosen subfolio needs
//! split_min_samples = 64        # samples a histogram needs before it is trusted
//! split_contention_MBps = 0     # split only at or above this slow-tier bandwidth (0: always)
//! sample_period = 100           # accesses one sample stands for (bandwidth estimate);
//!                               # unset: the perf sources' own period, 1 for the others
//! full_duplex_nodes = [2]       # lower-tier nodes on a full-duplex link (CXL)
//! duplex_dominant_pct = 70      # share of loads (stores) that makes traffic read (write) dominant
//! duplex_write_heavy_pct = 50   # write ratio at or above which a page is write-heavy
//! duplex_filter_KiB = 256       # size of each of the two Bloom filters
//! ```

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Origin, ranged};
use crate::admission::AdmissionConfig;
use crate::topology::{NodeId, Topology};

impl AdmissionConfig {
    /// `full_duplex_nodes` must be lower-tier memory nodes.
    pub fn check_against(&self, topology: &Topology) -> Result<(), ConfigError> {
        for &n in &self.full_duplex_nodes {
            if !topology.is_lower_tier(n) {
                let lower: Vec<String> = topology
                    .lower_tier_nodes()
                    .iter()
                    .map(|n| n.to_string())
                    .collect();
                return Err(ConfigError::Invalid {
                    origin: Origin::Flag("full-duplex-node"),
                    key: "admission.full_duplex_nodes",
                    detail: format!(
                        "node {n} is not a lower-tier memory node here (lower tier: {})",
                        if lower.is_empty() {
                            "none".to_string()
                        } else {
                            lower.join(", ")
                        }
                    ),
                });
            }
        }
        Ok(())
    }

    /// Every key with its value, as `config get` shows them.
    pub fn values(&self) -> Vec<(&'static str, serde_json::Value)> {
        use serde_json::json;
        vec![
            ("admission.split", json!(self.split)),
            (
                "admission.split_flat_entropy_pct",
                json!(self.split_flat_entropy_pct),
            ),
            (
                "admission.split_coverage_pct",
                json!(self.split_coverage_pct),
            ),
            (
                "admission.split_heat_density_pct",
                json!(self.split_heat_density_pct),
            ),
            ("admission.split_min_samples", json!(self.split_min_samples)),
            (
                "admission.split_contention_MBps",
                json!(self.split_contention_mbps),
            ),
            ("admission.sample_period", json!(self.sample_period)),
            ("admission.full_duplex_nodes", json!(self.full_duplex_nodes)),
            (
                "admission.duplex_dominant_pct",
                json!(self.duplex_dominant_pct),
            ),
            (
                "admission.duplex_write_heavy_pct",
                json!(self.duplex_write_heavy_pct),
            ),
            ("admission.duplex_filter_KiB", json!(self.duplex_filter_kib)),
        ]
    }
}

/// `[admission]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmission {
    pub split: Option<Spanned<bool>>,
    pub split_flat_entropy_pct: Option<Spanned<i64>>,
    pub split_coverage_pct: Option<Spanned<i64>>,
    pub split_heat_density_pct: Option<Spanned<i64>>,
    pub split_min_samples: Option<Spanned<i64>>,
    #[serde(rename = "split_contention_MBps")]
    pub split_contention_mbps: Option<Spanned<i64>>,
    pub sample_period: Option<Spanned<i64>>,
    pub full_duplex_nodes: Option<Spanned<Vec<i64>>>,
    pub duplex_dominant_pct: Option<Spanned<i64>>,
    pub duplex_write_heavy_pct: Option<Spanned<i64>>,
    #[serde(rename = "duplex_filter_KiB")]
    pub duplex_filter_kib: Option<Spanned<i64>>,
}

/// The same settings as flags.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct AdmissionArgs {
    /// Split THPs to the hot mTHP size before promoting (TierBPF); needs debugfs.
    #[arg(long = "split-thp")]
    pub split: bool,
    /// Normalized entropy (percent) at or above which THPs are promoted whole [default: 95].
    #[arg(long, value_name = "PCT")]
    pub split_flat_entropy_pct: Option<i64>,
    /// Share of samples the hot subpages hold (percent) [default: 80].
    #[arg(long, value_name = "PCT")]
    pub split_coverage_pct: Option<i64>,
    /// Share of hot subpages a chosen subfolio needs (percent) [default: 75].
    #[arg(long, value_name = "PCT")]
    pub split_heat_density_pct: Option<i64>,
    /// Samples a process's histogram needs before it decides [default: 64].
    #[arg(long, value_name = "N")]
    pub split_min_samples: Option<i64>,
    /// Split only while the slow node's estimated bandwidth reaches this; 0 is always
    /// [default: 0].
    #[arg(long = "split-contention-MBps", value_name = "MBPS")]
    pub split_contention_mbps: Option<i64>,
    /// Accesses one sample stands for, for the bandwidth estimate [default: the perf
    /// sources' own sampling period, followed live; 1 for the other sources].
    #[arg(long = "admission-sample-period", value_name = "N")]
    pub sample_period: Option<i64>,
    /// A lower-tier node on a full-duplex link (CXL); repeat for several.
    #[arg(long = "full-duplex-node", value_name = "NODE")]
    pub full_duplex_nodes: Vec<i64>,
    /// Share of loads (stores) that makes a node's traffic read (write) dominant [default: 70].
    #[arg(long, value_name = "PCT")]
    pub duplex_dominant_pct: Option<i64>,
    /// Write ratio (percent) at or above which a page is write-heavy [default: 50].
    #[arg(long, value_name = "PCT")]
    pub duplex_write_heavy_pct: Option<i64>,
    /// Size of each of the two Bloom filters, KiB [default: 256].
    #[arg(long = "duplex-filter-KiB", value_name = "KIB")]
    pub duplex_filter_kib: Option<i64>,
}

pub mod limits {
    pub const PCT: (i64, i64) = (1, 100);
    /// Below 50 % "dominant" would call both directions dominant at once.
    pub const DOMINANT_PCT: (i64, i64) = (51, 100);
    pub const MIN_SAMPLES: (i64, i64) = (1, 1 << 30);
    pub const CONTENTION_MBPS: (i64, i64) = (0, 1 << 30);
    pub const SAMPLE_PERIOD: (i64, i64) = (1, 1 << 32);
    pub const FILTER_KIB: (i64, i64) = (1, 1 << 20);
    pub const NODE: (i64, i64) = (0, 1023);
}

/// One value and where it came from.
struct Value<T> {
    value: T,
    origin: Origin,
}

impl AdmissionConfig {
    /// Applies the file's `[admission]` table; `at` turns a span into an origin.
    pub fn apply_raw(
        &mut self,
        raw: Option<RawAdmission>,
        at: &dyn Fn(Range<usize>) -> Origin,
    ) -> Result<(), ConfigError> {
        let Some(raw) = raw else {
            return Ok(());
        };
        fn v<T>(s: Option<Spanned<T>>, at: &dyn Fn(Range<usize>) -> Origin) -> Option<Value<T>> {
            s.map(|s| Value {
                origin: at(s.span()),
                value: s.into_inner(),
            })
        }
        self.apply(Values {
            split: v(raw.split, at),
            flat: v(raw.split_flat_entropy_pct, at),
            coverage: v(raw.split_coverage_pct, at),
            density: v(raw.split_heat_density_pct, at),
            min_samples: v(raw.split_min_samples, at),
            contention: v(raw.split_contention_mbps, at),
            sample_period: v(raw.sample_period, at),
            full_duplex: v(raw.full_duplex_nodes, at),
            dominant: v(raw.duplex_dominant_pct, at),
            write_heavy: v(raw.duplex_write_heavy_pct, at),
            filter_kib: v(raw.duplex_filter_kib, at),
        })
    }

    /// Applies the flags that were given.
    pub fn apply_args(&mut self, args: &AdmissionArgs) -> Result<(), ConfigError> {
        fn f<T>(v: Option<T>, name: &'static str) -> Option<Value<T>> {
            v.map(|value| Value {
                value,
                origin: Origin::Flag(name),
            })
        }
        self.apply(Values {
            split: f(args.split.then_some(true), "split-thp"),
            flat: f(args.split_flat_entropy_pct, "split-flat-entropy-pct"),
            coverage: f(args.split_coverage_pct, "split-coverage-pct"),
            density: f(args.split_heat_density_pct, "split-heat-density-pct"),
            min_samples: f(args.split_min_samples, "split-min-samples"),
            contention: f(args.split_contention_mbps, "split-contention-MBps"),
            sample_period: f(args.sample_period, "admission-sample-period"),
            full_duplex: f(
                Some(args.full_duplex_nodes.clone()).filter(|v| !v.is_empty()),
                "full-duplex-node",
            ),
            dominant: f(args.duplex_dominant_pct, "duplex-dominant-pct"),
            write_heavy: f(args.duplex_write_heavy_pct, "duplex-write-heavy-pct"),
            filter_kib: f(args.duplex_filter_kib, "duplex-filter-KiB"),
        })
    }

    fn apply(&mut self, s: Values) -> Result<(), ConfigError> {
        use limits::*;
        let num = |v: &Option<Value<i64>>, key, (min, max): (i64, i64)| {
            v.as_ref()
                .map(|v| ranged(&v.origin, key, v.value, min, max))
                .transpose()
        };
        // Validate everything before changing anything, so an error leaves self as it was.
        let flat = num(&s.flat, "admission.split_flat_entropy_pct", PCT)?;
        let coverage = num(&s.coverage, "admission.split_coverage_pct", PCT)?;
        let density = num(&s.density, "admission.split_heat_density_pct", PCT)?;
        let min_samples = num(&s.min_samples, "admission.split_min_samples", MIN_SAMPLES)?;
        let contention = num(
            &s.contention,
            "admission.split_contention_MBps",
            CONTENTION_MBPS,
        )?;
        let period = num(&s.sample_period, "admission.sample_period", SAMPLE_PERIOD)?;
        let dominant = num(&s.dominant, "admission.duplex_dominant_pct", DOMINANT_PCT)?;
        let write_heavy = num(&s.write_heavy, "admission.duplex_write_heavy_pct", PCT)?;
        let filter_kib = num(&s.filter_kib, "admission.duplex_filter_KiB", FILTER_KIB)?;
        let full_duplex = match &s.full_duplex {
            Some(v) => Some(
                v.value
                    .iter()
                    .map(|&n| {
                        ranged(&v.origin, "admission.full_duplex_nodes", n, NODE.0, NODE.1)
                            .map(|n| n as NodeId)
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        if let Some(v) = s.split {
            self.split = v.value;
        }
        // Ranges above keep every cast lossless.
        if let Some(n) = flat {
            self.split_flat_entropy_pct = n as u8;
        }
        if let Some(n) = coverage {
            self.split_coverage_pct = n as u8;
        }
        if let Some(n) = density {
            self.split_heat_density_pct = n as u8;
        }
        if let Some(n) = min_samples {
            self.split_min_samples = n as u32;
        }
        if let Some(n) = contention {
            self.split_contention_mbps = n as u64;
        }
        if let Some(n) = period {
            self.sample_period = Some(n as u64);
        }
        if let Some(n) = dominant {
            self.duplex_dominant_pct = n as u8;
        }
        if let Some(n) = write_heavy {
            self.duplex_write_heavy_pct = n as u8;
        }
        if let Some(n) = filter_kib {
            self.duplex_filter_kib = n as u32;
        }
        if let Some(nodes) = full_duplex {
            self.full_duplex_nodes = nodes;
        }
        Ok(())
    }
}

struct Values {
    split: Option<Value<bool>>,
    flat: Option<Value<i64>>,
    coverage: Option<Value<i64>>,
    density: Option<Value<i64>>,
    min_samples: Option<Value<i64>>,
    contention: Option<Value<i64>>,
    sample_period: Option<Value<i64>>,
    full_duplex: Option<Value<Vec<i64>>>,
    dominant: Option<Value<i64>>,
    write_heavy: Option<Value<i64>>,
    filter_kib: Option<Value<i64>>,
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, TunableArgs};
    use std::path::Path;

    fn from_file(text: &str) -> Result<Config, crate::config::ConfigError> {
        let mut c = Config::default();
        c.apply_file(Path::new("/etc/pghotd/pghotd.toml"), text)?;
        Ok(c)
    }

    #[test]
    fn the_admission_table_is_read_and_checked_with_its_line() {
        let c = from_file(
            "freq_threshold = 2\n[admission]\nsplit = true\nsplit_heat_density_pct = 60\n\
             split_contention_MBps = 500\nfull_duplex_nodes = [2]\nduplex_filter_KiB = 64\n",
        )
        .unwrap();
        let a = &c.admission;
        assert!(a.split && a.is_active());
        assert_eq!(a.split_params().density, 0.6);
        assert_eq!(a.split_contention_mbps, 500);
        assert_eq!(
            (a.full_duplex_nodes.clone(), a.duplex_filter_kib),
            (vec![2], 64)
        );
        let err = from_file("[admission]\nsplit = true\nsplit_coverage_pct = 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config /etc/pghotd/pghotd.toml line 3: admission.split_coverage_pct = 0 is out of \
             range; allowed 1..=100"
        );
        let err = from_file("[admission]\nsplitt = true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `splitt`"), "{err}");
        let err = from_file("[admission]\nduplex_dominant_pct = 50\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("allowed 51..=100"), "{err}");
    }

    #[test]
    fn flags_override_and_full_duplex_nodes_must_be_lower_tier() {
        let mut c = from_file("[admission]\nsplit_coverage_pct = 70\n").unwrap();
        let mut args = TunableArgs::default();
        args.admission.split = true;
        args.admission.split_coverage_pct = Some(90);
        args.admission.full_duplex_nodes = vec![0];
        c.apply_args(&args).unwrap();
        assert!(c.admission.split);
        assert_eq!(c.admission.split_coverage_pct, 90);
        let root = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sysfs/qemu-3node"
        );
        let topo = crate::topology::Topology::read(crate::topology::SysfsRoot::new(root)).unwrap();
        let err = c.check_against(&topo).unwrap_err().to_string();
        assert!(
            err.contains("node 0 is not a lower-tier memory node here (lower tier: 2)"),
            "{err}"
        );
        // `config set` takes dotted keys and validates them like the file.
        let next = c.with_setting("admission.split_min_samples", "10").unwrap();
        assert_eq!(next.admission.split_min_samples, 10);
        assert!(c.with_setting("admission.split_min_samples", "0").is_err());
    }
}
