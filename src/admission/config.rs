//! Admission's validated settings (`[admission]` in the config file, parsed in
//! `config/admission.rs`).

use super::split::SplitParams;
use crate::topology::NodeId;

/// Which subpage histogram a THP's split decision runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SplitHistogram {
    /// The process's histogram, folded over all its THPs by subpage offset (TierBPF §5.1.1).
    Folded,
    /// The THP's own map from the hotness table's per-page counts; a THP whose own samples are
    /// too thin waits for more.
    PerFolio,
    /// The THP's own map where its samples suffice, else the folded histogram when that one
    /// splits and the THP's own samples fit it (see `per_folio`).
    #[default]
    Auto,
}

impl SplitHistogram {
    pub fn name(self) -> &'static str {
        match self {
            SplitHistogram::Folded => "folded",
            SplitHistogram::PerFolio => "per_folio",
            SplitHistogram::Auto => "auto",
        }
    }

    pub fn parse(word: &str) -> Result<SplitHistogram, String> {
        match word {
            "folded" => Ok(SplitHistogram::Folded),
            "per_folio" => Ok(SplitHistogram::PerFolio),
            "auto" => Ok(SplitHistogram::Auto),
            other => Err(format!(
                "'{other}' is not \"folded\", \"per_folio\" or \"auto\""
            )),
        }
    }
}

/// Validated admission settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    pub split: bool,
    pub split_flat_entropy_pct: u8,
    pub split_coverage_pct: u8,
    pub split_heat_density_pct: u8,
    pub split_min_samples: u32,
    pub split_contention_mbps: u64,
    /// Which histogram a THP's split decision reads (issue 24).
    pub split_histogram: SplitHistogram,
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
            split_histogram: SplitHistogram::Auto,
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
