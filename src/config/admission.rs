//! The `[admission]` table's check against the topology; its keys are rows of `defs`.

use super::{ConfigError, Origin};
use crate::admission::AdmissionConfig;
use crate::topology::Topology;

impl AdmissionConfig {
    /// `full_duplex_nodes` must be lower-tier memory nodes.
    /// `origin`: where `full_duplex_nodes` was given.
    pub(super) fn check_against(
        &self,
        topology: &Topology,
        origin: Origin,
    ) -> Result<(), ConfigError> {
        for &n in &self.full_duplex_nodes {
            if !topology.is_lower_tier(n) {
                let lower: Vec<String> = topology
                    .lower_tier_nodes()
                    .iter()
                    .map(|n| n.to_string())
                    .collect();
                return Err(ConfigError::Invalid {
                    origin,
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
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, SettingArgs};
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
        let args = SettingArgs::parse_from([
            "--split-thp",
            "--split-coverage-pct",
            "90",
            "--full-duplex-node",
            "0",
        ])
        .unwrap();
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
