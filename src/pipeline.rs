//! The data path, built in one place: the hotness table, one candidate queue per lower-tier
//! node, the per-sample [`Ingest`], and the migrators that drain the queues. The daemon, the
//! storm bench (`benches/storm.rs`) and the simulator (`crates/pghot-sim`) build it here, so
//! what they measure is what the daemon runs.
//!
//! The pipeline owns no threads: the caller wraps each [`Pipeline::migrator`] in a
//! `MigratorHandle` (the daemon, the bench) or steps it inline (the simulator).

use std::io::BufWriter;
use std::sync::Arc;

use crate::admission::Admission;
use crate::hotness::candidate::{CandidateReceiver, candidate_queue};
use crate::hotness::{HotTable, HotnessConfig};
use crate::ingest::Ingest;
use crate::migrator::ratelimit::{Clock, RateLimits};
use crate::migrator::{Migrator, MigratorConfig};
use crate::movepages::Mover;
use crate::sampler::trace::TraceWriter;
use crate::scope::Scope;
use crate::stats::Stats;
use crate::topology::{NodeId, Topology};

/// The settings the data path is built from.
#[derive(Debug, Clone, Copy)]
pub struct PipelineConfig {
    /// Pages the hotness table tracks at most.
    pub max_tracked_pages: usize,
    pub policy: HotnessConfig,
    /// Where promoted pages go; `None`: the top-tier node nearest the accessing CPU.
    pub target_nid: Option<NodeId>,
    pub migrator: MigratorConfig,
}

/// Capacity of a migrator's candidate queue: eight batches, and never fewer than 4096, so a
/// burst of crossings while the migrator is busy is queued rather than counted as
/// `pgpromote_queue_full`.
pub fn queue_capacity(migrate_batch: usize) -> usize {
    (migrate_batch * 8).max(4096)
}

/// Collects what the per-sample path needs beyond the settings; [`PipelineBuilder::build`]
/// makes the [`Pipeline`].
pub struct PipelineBuilder {
    settings: PipelineConfig,
    topology: Arc<Topology>,
    scope: Arc<Scope>,
    record: Option<TraceWriter<BufWriter<std::fs::File>>>,
    admission: Option<Arc<Admission>>,
}

impl PipelineBuilder {
    /// Writes every received sample to `writer` (`--record`).
    pub fn record_to(mut self, writer: TraceWriter<BufWriter<std::fs::File>>) -> Self {
        self.record = Some(writer);
        self
    }

    /// Puts migration admission between the table and the migrators.
    pub fn admission(mut self, admission: Option<Arc<Admission>>) -> Self {
        self.admission = admission;
        self
    }

    pub fn build(self) -> Pipeline {
        let PipelineBuilder {
            settings,
            topology,
            scope,
            record,
            admission,
        } = self;
        let stats = Arc::new(Stats::new());
        let table = Arc::new(HotTable::new(settings.max_tracked_pages, settings.policy));
        let batch = settings.migrator.migrate_batch;
        let (mut senders, mut receivers) = (Vec::new(), Vec::new());
        for node in topology.lower_tier_nodes() {
            let (tx, rx) = candidate_queue(queue_capacity(batch), batch);
            senders.push((node, tx));
            receivers.push((node, rx));
        }
        let mut ingest = Ingest::new(
            Arc::clone(&table),
            Arc::clone(&stats),
            Arc::clone(&topology),
            scope,
            settings.target_nid,
            senders,
        );
        if let Some(writer) = record {
            ingest = ingest.record_to(writer);
        }
        if let Some(a) = &admission {
            ingest = ingest.with_admission(Arc::clone(a));
        }
        Pipeline {
            settings,
            topology,
            stats,
            table,
            ingest: Arc::new(ingest),
            admission,
            receivers,
        }
    }
}

/// The built data path. Sources record into `ingest` (it makes one sink per source thread);
/// each queue in [`Pipeline::take_queues`] feeds the migrator of its node.
pub struct Pipeline {
    pub settings: PipelineConfig,
    pub topology: Arc<Topology>,
    pub stats: Arc<Stats>,
    pub table: Arc<HotTable>,
    pub ingest: Arc<Ingest>,
    pub admission: Option<Arc<Admission>>,
    receivers: Vec<(NodeId, CandidateReceiver)>,
}

impl Pipeline {
    pub fn builder(
        settings: PipelineConfig,
        topology: Arc<Topology>,
        scope: Arc<Scope>,
    ) -> PipelineBuilder {
        PipelineBuilder {
            settings,
            topology,
            scope,
            record: None,
            admission: None,
        }
    }

    /// The receiving end of each lower-tier node's candidate queue (empty after the first
    /// call).
    pub fn take_queues(&mut self) -> Vec<(NodeId, CandidateReceiver)> {
        std::mem::take(&mut self.receivers)
    }

    /// The migrator of `node`, on this pipeline's table, topology and counters, charging the
    /// per-process counts that `ingest` keeps. `limits` is shared by every migrator (the rate
    /// limit is per destination node, whoever moves to it).
    pub fn migrator<M: Mover, C: Clock>(
        &self,
        node: NodeId,
        mover: M,
        clock: C,
        limits: RateLimits,
    ) -> Migrator<M, C> {
        Migrator::new(
            node,
            self.settings.migrator,
            mover,
            clock,
            Arc::clone(&self.table),
            Arc::clone(&self.topology),
            Arc::clone(&self.stats),
            limits,
        )
        .with_pid_stats(Arc::clone(self.ingest.pid_stats()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::SysfsRoot;

    fn qemu_3node() -> Arc<Topology> {
        let root = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sysfs/qemu-3node"
        );
        Arc::new(Topology::read(SysfsRoot::new(root)).unwrap())
    }

    #[test]
    fn one_queue_per_lower_tier_node_sized_by_the_batch() {
        // The fixture: nodes 0 and 1 DRAM with CPUs, node 2 CPU-less in a lower tier.
        let settings = PipelineConfig {
            max_tracked_pages: 4096,
            policy: HotnessConfig::default(),
            target_nid: None,
            migrator: MigratorConfig::default(),
        };
        let scope = Arc::new(Scope::everything(std::process::id()));
        let mut p = Pipeline::builder(settings, qemu_3node(), scope).build();
        let queues = p.take_queues();
        assert_eq!(queues.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![2]);
        assert!(p.take_queues().is_empty());
        assert!(p.admission.is_none());
        // 512 per batch: eight batches are 4096; 1024 per batch: 8192.
        assert_eq!(queue_capacity(512), 4096);
        assert_eq!(queue_capacity(1024), 8192);
        assert_eq!(queue_capacity(1), 4096);
    }
}
