//! Admission's validated settings (`[admission]` in the config file, parsed in
//! `config/admission.rs`).

use super::split::SplitParams;
use crate::topology::NodeId;

/// Validated admission settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    pub split: bool,
    pub split_flat_entropy_pct: u8,
    pub split_coverage_pct: u8,
    pub split_heat_density_pct: u8,
    pub split_min_samples: u32,
    pub split_contention_mbps: u64,
    /// Events one sample stands for in the bandwidth estimate; `None`: what the source says
    /// (the perf sources' sampling period, live), else 1.
    pub sample_period: Option<u64>,
    pub full_duplex_nodes: Vec<NodeId>,
    pub duplex_dominant_pct: u8,
    pub duplex_write_heavy_pct: u8,
    pub duplex_filter_kib: u32,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            split: false,
            split_flat_entropy_pct: 95,
            split_coverage_pct: 80,
            split_heat_density_pct: 75,
            split_min_samples: 64,
            split_contention_mbps: 0,
            sample_period: None,
            full_duplex_nodes: Vec::new(),
            duplex_dominant_pct: 70,
            duplex_write_heavy_pct: 50,
            duplex_filter_kib: 256,
        }
    }
}

impl AdmissionConfig {
    /// Whether any admission filter is on.
    pub fn is_active(&self) -> bool {
        self.split || !self.full_duplex_nodes.is_empty()
    }

    pub fn split_params(&self) -> SplitParams {
        SplitParams {
            flat_entropy: f64::from(self.split_flat_entropy_pct) / 100.0,
            coverage: f64::from(self.split_coverage_pct) / 100.0,
            density: f64::from(self.split_heat_density_pct) / 100.0,
            min_samples: u64::from(self.split_min_samples),
        }
    }
}
