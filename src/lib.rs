//! pghotd: promotes the pages processes touch most while they sit on a slow memory tier.
//!
//! Data flow, one direction: [`sampler`] sources produce [`sample::Sample`]s; the per-sample
//! path in [`ingest`] filters them and records them in the [`hotness`] table, which turns hot
//! pages into [`hotness::candidate::Candidate`]s; one [`migrator`] per lower-tier node promotes
//! them through [`movepages`]. [`admission`] sits between candidates and moves (TierBPF's THP
//! splitting and duplex-aware admission). [`topology`] says which nodes are slow and where pages
//! should go; [`config`] reads the settings; [`stats`] counts everything under the pghot
//! kernel's counter names; [`scope`] says which processes may be touched; [`control`] is the
//! operator's socket and metrics; [`daemon`] wires it together.
//!
//! The modules form layers, each importing only from layers below it; ARCHITECTURE.md draws
//! them and `tests/layers.rs` checks them. The tools (`pghotctl`, `pghot-workload`,
//! `pghot-sim`, the fuzz targets) are crates of their own under `crates/`.

pub mod admission;
pub mod clock;
pub mod config;
pub mod conflicts;
pub mod control;
pub mod cpushare;
pub mod daemon;
pub mod generate;
pub mod heartbeat;
pub mod hotness;
pub mod ingest;
pub mod logging;
pub mod migrator;
pub mod movepages;
pub mod pidstats;
pub mod pipeline;
pub mod placement;
pub mod safefs;
pub mod sample;
pub mod sampler;
pub mod scope;
pub mod service;
pub mod stats;
pub mod stop;
pub mod topology;
