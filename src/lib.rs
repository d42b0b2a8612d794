//! pghotd: promotes the pages processes touch most while they sit on a slow memory tier.
//!
//! Data flow, one direction: [`sampler`] sources produce [`sampler::Sample`]s; the
//! [`hotness`] table turns them into [`hotness::ingest::Candidate`]s; one [`migrator`] per
//! lower-tier node promotes them with move_pages(2). [`topology`] says which nodes are slow and
//! where pages should go; [`config`] holds the tunables; [`stats`] counts everything under the
//! pghot kernel's counter names; [`daemon`] wires it together; [`control`] is the operator's
//! socket and metrics, [`scope`] which processes may be touched, [`view`] the `pghotctl top`
//! terminal view. [`admission`] sits between candidates and moves (TierBPF's THP splitting and
//! duplex-aware admission).

pub mod admission;
pub mod clock;
pub mod config;
pub mod control;
pub mod daemon;
pub mod fuzz;
pub mod generate;
pub mod hotness;
pub mod ingest;
pub mod migrator;
pub mod movepages;
pub mod pidstats;
pub mod safefs;
pub mod sample;
pub mod sampler;
pub mod scope;
pub mod service;
pub mod sim;
pub mod stats;
pub mod stop;
pub mod topology;
pub mod view;
pub mod workload;
