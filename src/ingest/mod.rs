//! The per-sample path: filter, classify, record, and hand candidates to the migrators.
//!
//! [`Ingest`] is built once and shared; each source thread gets its own [`Recorder`] (a
//! [`SampleSink`]) that keeps its counts locally and folds them into the registry every
//! [`FLUSH_EVERY`] samples, before and after a batch once 100 ms of sample time has passed, and
//! when it is dropped. No allocation per sample. Samples without a node are held back and
//! resolved in batches (see `resolve`).
//!
//! Locks, which the path never holds two of at once: a sample normally takes one, the mutex of
//! the hotness shard its page hashes to (`HotTable::record` or `touch`). It takes that shard's
//! lock again, one after the other, when it carries no node and the recorder's cache has none
//! (`HotTable::get` in `known_node`), and when its candidate is refused or has no target
//! (`HotTable::unqueue`). Other locks: the `--record` writer's mutex (every sample, while
//! `--record` is on), the tap's mutex (every sample while `pghotctl record` runs; otherwise one
//! relaxed load), admission's histogram map when the pid changes from the previous sample's
//! (THP splitting on), and per fold the per-process map's mutex (also when the recorder's
//! 64-process list fills) and admission's traffic windows; the shared counters are atomics.
//! Candidates go into crossbeam's bounded channel: `try_send` claims a slot with a
//! compare-and-swap and takes no lock, since the migrator never blocks on that channel (it waits
//! on a separate wake-up channel); once `migrate_batch` candidates wait, the `try_send` on the
//! wake-up channel locks crossbeam's internal mutex to wake the parked migrator.

use std::io::BufWriter;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use parking_lot::Mutex;

mod resolve;

use crate::admission::{Admission, LocalAdmission};
use crate::hotness::candidate::{Candidate, CandidateSender};
use crate::hotness::window::WindowTuner;
use crate::hotness::{Access, HotTable, PAGE_SIZE, PageKey, Recorded};
use crate::movepages::{Mover, SysMover};
use crate::pidstats::{LocalPids, PidStats};
use crate::sample::{DataSource, Sample};
use crate::sampler::trace::TraceWriter;
use crate::sampler::{SampleSink, SinkFactory};
use crate::scope::Scope;
use crate::stats::{Counter, LocalCounts, Stats};
use crate::topology::{NodeId, Topology};
use resolve::{NodeResolver, Resolved};

/// Samples a recorder handles between folds into the shared registry.
pub const FLUSH_EVERY: u32 = 1024;

/// Sample time after which a recorder folds its counts even with fewer samples.
const FLUSH_AFTER_NS: u64 = 100_000_000;

/// Addresses with the top bit set are kernel addresses on x86_64 and arm64.
const KERNEL_ADDRESS_BIT: u64 = 1 << 63;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeClass {
    Absent,
    Top,
    Lower,
}

/// Shared state of the per-sample path.
pub struct Ingest {
    table: Arc<HotTable>,
    stats: Arc<Stats>,
    topology: Arc<Topology>,
    scope: Arc<Scope>,
    /// `target_nid`, or -1 for "nearest top-tier node to the accessing CPU".
    target_nid: AtomicI32,
    /// Tier of each node id, for an O(1) check per sample.
    node_class: Vec<NodeClass>,
    /// Nearest top-tier node of each CPU's node.
    cpu_target: Vec<Option<NodeId>>,
    /// Nearest top-tier node of each lower-tier node, when the CPU is unknown.
    node_target: Vec<Option<NodeId>>,
    /// Candidate queue of each lower-tier node's migrator, by node id.
    queues: Vec<Option<CandidateSender>>,
    record_to: Option<Mutex<TraceWriter<BufWriter<std::fs::File>>>>,
    record_failed: AtomicBool,
    /// Per-process counters, folded in with the local counts.
    pids: Arc<PidStats>,
    /// A `pghotctl record` stream: checked with one relaxed load per sample, locked only
    /// while a recording runs.
    tap_on: AtomicBool,
    tap: Mutex<Option<Sender<Sample>>>,
    /// Makes each recorder's move_pages query handle.
    node_lookup: Box<dyn Fn() -> Box<dyn Mover> + Send + Sync>,
    /// Migration admission's per-sample inputs (subpage histograms, R/W filters, traffic).
    admission: Option<Arc<Admission>>,
    /// The rate of recorded samples, for the table's window (`hotness::window`).
    window_tuner: Mutex<WindowTuner>,
}

impl Ingest {
    pub fn new(
        table: Arc<HotTable>,
        stats: Arc<Stats>,
        topology: Arc<Topology>,
        scope: Arc<Scope>,
        target_nid: Option<NodeId>,
        queues: Vec<(NodeId, CandidateSender)>,
    ) -> Ingest {
        let max_node = topology.nodes().iter().map(|n| n.id).max().unwrap_or(0);
        let mut node_class = vec![NodeClass::Absent; usize::from(max_node) + 1];
        let mut node_target = vec![None; node_class.len()];
        for node in topology.nodes() {
            node_class[usize::from(node.id)] = if topology.is_lower_tier(node.id) {
                NodeClass::Lower
            } else {
                NodeClass::Top
            };
            node_target[usize::from(node.id)] = topology
                .nodes()
                .iter()
                .filter(|n| n.top_tier && n.has_memory())
                .filter_map(|n| Some((topology.distance(node.id, n.id)?, n.id)))
                .min()
                .map(|(_, id)| id);
        }
        let cpu_target = (0..topology.cpu_slots() as u32)
            .map(|cpu| topology.promotion_target(cpu, None))
            .collect();
        let mut by_node = vec![None; node_class.len()];
        for (node, tx) in queues {
            if let Some(slot) = by_node.get_mut(usize::from(node)) {
                *slot = Some(tx);
            }
        }
        Ingest {
            table,
            stats,
            topology,
            scope,
            target_nid: AtomicI32::new(target_nid.map_or(-1, i32::from)),
            node_class,
            cpu_target,
            node_target,
            queues: by_node,
            record_to: None,
            record_failed: AtomicBool::new(false),
            pids: Arc::new(PidStats::default()),
            tap_on: AtomicBool::new(false),
            tap: Mutex::new(None),
            node_lookup: Box::new(|| Box::new(SysMover::default())),
            admission: None,
            window_tuner: Mutex::new(WindowTuner::default()),
        }
    }

    /// At a recorder's flush (its counts are in `stats`): measures the rate of recorded
    /// lower-tier samples on the sample clock and hands it to the table.
    fn measure_rate(&self, now_ns: u64) {
        let recorded = self.stats.get(Counter::PghotRecordedAccesses);
        let rate = self.window_tuner.lock().observe(recorded, now_ns);
        if let Some(per_s) = rate {
            let before = self.table.effective_window_ms();
            let floor_before = self.table.heat_floor();
            self.table.set_recorded_rate(per_s);
            let after = self.table.effective_window_ms();
            log_heat_floor(floor_before, self.table.heat_floor());
            if after != before && (after > before * 2 || before > after * 2) {
                tracing::info!(
                    "{per_s:.0} lower-tier samples/s: the promotion window is now {after} ms \
                     (promote_window_ms, widened to hold window_samples, or a page's next \
                     sample at that rate)"
                );
            }
        }
    }

    /// Also writes every received sample to `writer` (pghot-trace v1), before filtering.
    pub fn record_to(mut self, writer: TraceWriter<BufWriter<std::fs::File>>) -> Ingest {
        self.record_to = Some(Mutex::new(writer));
        self
    }

    /// Feeds lower-tier samples to migration admission.
    pub fn with_admission(mut self, admission: Arc<Admission>) -> Ingest {
        self.admission = Some(admission);
        self
    }

    pub fn admission(&self) -> Option<&Arc<Admission>> {
        self.admission.as_ref()
    }

    pub fn set_target_nid(&self, target: Option<NodeId>) {
        self.target_nid
            .store(target.map_or(-1, i32::from), Ordering::Relaxed);
    }

    pub fn pid_stats(&self) -> &Arc<PidStats> {
        &self.pids
    }

    /// Candidates waiting in each lower-tier node's queue.
    pub fn queue_depths(&self) -> Vec<(NodeId, usize)> {
        self.queues
            .iter()
            .enumerate()
            .filter_map(|(node, q)| Some((NodeId::try_from(node).ok()?, q.as_ref()?.len())))
            .collect()
    }

    /// Starts copying every received sample into a channel of `capacity` samples (full:
    /// the sample is counted in `record_dropped_samples`, never waited for). One at a time:
    /// `None` while another recording runs.
    pub fn start_tap(&self, capacity: usize) -> Option<Receiver<Sample>> {
        let mut tap = self.tap.lock();
        if tap.is_some() {
            return None;
        }
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        *tap = Some(tx);
        self.tap_on.store(true, Ordering::Release);
        Some(rx)
    }

    pub fn stop_tap(&self) {
        self.tap_on.store(false, Ordering::Release);
        *self.tap.lock() = None;
    }

    #[cold]
    fn tap(&self, s: &Sample) {
        let tap = self.tap.lock();
        if let Some(tx) = tap.as_ref() {
            match tx.try_send(*s) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => self.stats.add(Counter::RecordDroppedSamples, 1),
                // The reader went away; the control thread stops the tap.
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }

    /// The processes pghotd may touch.
    pub fn scope(&self) -> &Arc<Scope> {
        &self.scope
    }

    pub fn table(&self) -> &Arc<HotTable> {
        &self.table
    }

    pub fn topology(&self) -> &Arc<Topology> {
        &self.topology
    }

    /// A sink for one source thread.
    pub fn recorder(self: &Arc<Self>) -> Recorder {
        Recorder {
            ingest: Arc::clone(self),
            local: LocalCounts::default(),
            local_pids: LocalPids::default(),
            pending: 0,
            flushed_ns: 0,
            resolver: NodeResolver::new((self.node_lookup)()),
            resolved: Vec::with_capacity(resolve::RESOLVE_BATCH),
            admission: self.admission.as_ref().map(|a| a.local()),
        }
    }

    /// Replaces how recorders ask the kernel for the node of a page (tests use a fake).
    pub fn with_node_lookup(
        mut self,
        lookup: impl Fn() -> Box<dyn Mover> + Send + Sync + 'static,
    ) -> Ingest {
        self.node_lookup = Box::new(lookup);
        self
    }

    /// Flushes the `--record` trace, if any.
    pub fn flush_recording(&self) -> std::io::Result<()> {
        match &self.record_to {
            Some(w) => w.lock().flush(),
            None => Ok(()),
        }
    }

    #[inline]
    fn class(&self, node: NodeId) -> NodeClass {
        self.node_class
            .get(usize::from(node))
            .copied()
            .unwrap_or(NodeClass::Absent)
    }

    fn target_for(&self, cpu: u32, from: NodeId) -> Option<NodeId> {
        let fixed = self.target_nid.load(Ordering::Relaxed);
        if let Ok(target) = NodeId::try_from(fixed) {
            return Some(target);
        }
        self.cpu_target
            .get(cpu as usize)
            .copied()
            .flatten()
            .or_else(|| self.node_target.get(usize::from(from)).copied().flatten())
    }
}

/// One source thread's sink.
pub struct Recorder {
    ingest: Arc<Ingest>,
    local: LocalCounts,
    local_pids: LocalPids,
    pending: u32,
    /// Sample time of the last fold.
    flushed_ns: u64,
    resolver: NodeResolver,
    resolved: Vec<Resolved>,
    admission: Option<LocalAdmission>,
}

impl Recorder {
    #[inline]
    fn drop_sample(&mut self, reason: Counter) {
        self.local.bump(reason);
        self.local.bump(Counter::HwhintDroppedEvents);
    }

    /// Folds the local counts into the registry.
    pub fn flush(&mut self) {
        self.ingest.stats.absorb(&mut self.local);
        self.local_pids.fold_into(&self.ingest.pids);
        if let (Some(local), Some(shared)) = (&mut self.admission, &self.ingest.admission) {
            local.flush(shared);
        }
        self.pending = 0;
        // Samples handled are the source thread's progress, for the watchdog.
        crate::heartbeat::beat();
    }

    /// Resolves every deferred sample and flushes: call when the source has ended.
    pub fn finish(&mut self) {
        if self.resolver.has_deferred() {
            self.resolve_deferred();
        }
        self.flush();
    }

    fn offer(&mut self, candidate: Candidate) {
        let queue = self
            .ingest
            .queues
            .get(usize::from(candidate.from_node))
            .and_then(Option::as_ref);
        // Refused: the page stays eligible and is offered again on its next access.
        let refused = match queue.map(|q| q.offer(candidate)) {
            Some(Ok(())) => None,
            Some(Err(refused)) => Some(refused.counter),
            None => Some(Counter::PgpromoteQueueFull),
        };
        match refused {
            // The page is about to move: do not trust a cached node for it.
            None => self.resolver.forget(candidate.key),
            Some(counter) => {
                self.local.bump(counter);
                self.ingest.table.unqueue(candidate.key);
            }
        }
    }

    /// The filters that need no node: pid, address, scope.
    #[inline]
    fn filter(&mut self, s: &Sample) -> Option<PageKey> {
        let reason = if s.pid == 0 {
            Counter::DropPidZero
        } else if s.vaddr == 0 {
            Counter::DropNoAddress
        } else if s.vaddr & KERNEL_ADDRESS_BIT != 0 {
            Counter::DropKernelAddress
        } else {
            match PageKey::new(s.pid, s.vaddr) {
                None => Counter::DropAddressRange,
                Some(_) if !self.ingest.scope.contains(s.pid) => Counter::DropOutOfScope,
                Some(key) => return Some(key),
            }
        };
        self.drop_sample(reason);
        None
    }

    /// The page's node as far as pghotd knows without asking the kernel: the sample's own, or
    /// else the one pghotd believes (counted: the migrators audit such beliefs).
    #[inline]
    fn known_node(&mut self, s: &Sample, key: PageKey) -> Option<NodeId> {
        let ingest = &*self.ingest;
        let seen = s
            .paddr
            .and_then(|p| ingest.topology.physmap().node_of(p))
            .or(s.node);
        if seen.is_some() {
            return seen;
        }
        let believed = self
            .resolver
            .cached(key, s.time_ns)
            .or_else(|| ingest.table.get(key).map(|e| e.node()));
        if believed.is_some() {
            self.local.bump(Counter::PghotBelievedNodeSamples);
        }
        believed
    }

    fn resolve_deferred(&mut self) {
        let mut resolved = std::mem::take(&mut self.resolved);
        let before = self.resolver.queries();
        self.resolver.resolve(&mut resolved);
        self.local
            .add(Counter::PghotNodeQueries, self.resolver.queries() - before);
        for r in resolved.drain(..) {
            match r.node {
                Some(node) => self.process(&r.sample, r.key, node),
                None => self.drop_sample(Counter::DropUnknownNode),
            }
        }
        self.resolved = resolved;
    }

    /// Classifies and records a sample whose node is known.
    #[inline]
    fn process(&mut self, s: &Sample, key: PageKey, node: NodeId) {
        let ingest = &*self.ingest;
        let class = ingest.class(node);
        if class == NodeClass::Absent {
            return self.drop_sample(Counter::DropBadNode);
        }
        self.local.bump(Counter::HwhintUsefulEvents);
        self.local.bump(match s.served_from {
            src if src.is_cache() => Counter::HwhintCacheAccesses,
            DataSource::LocalDram | DataSource::RemoteDram => Counter::HwhintDramAccesses,
            DataSource::ExtMem => Counter::HwhintExtmemAccesses,
            _ if class == NodeClass::Lower => Counter::HwhintExtmemAccesses,
            _ => Counter::HwhintDramAccesses,
        });
        // A cache hit says nothing about the cost of the page's placement.
        if s.served_from.is_cache() {
            return;
        }
        let access = Access {
            key,
            time_ns: s.time_ns,
            node,
            op: s.op,
        };
        if class == NodeClass::Top {
            ingest.table.touch(&access);
            return;
        }
        self.local.bump(Counter::PghotRecordedAccesses);
        if let (Some(local), Some(shared)) = (&mut self.admission, &ingest.admission) {
            local.observe(shared, s, key, node);
        }
        // The target first: with hot_share_room_mb the heat floor depends on it.
        let target = ingest.target_for(s.cpu, node);
        let recorded = ingest.table.record_bound_for(&access, target);
        let pid_counts = self.local_pids.entry(s.pid, &ingest.pids);
        pid_counts.recorded += 1;
        if recorded == Recorded::Candidate {
            pid_counts.candidates += 1;
            self.local.bump(Counter::PgpromoteCandidate);
            let ingest = &*self.ingest;
            match target {
                Some(to_node) if to_node != node => self.offer(Candidate {
                    key,
                    from_node: node,
                    to_node,
                    bytes: PAGE_SIZE,
                    source: s.source,
                }),
                _ => {
                    self.local.bump(Counter::PgpromoteNoTarget);
                    ingest.table.unqueue(key);
                }
            }
        }
    }

    /// Folds the local counts in and measures the recorded rate, as of sample time `time_ns`.
    fn fold_at(&mut self, time_ns: u64) {
        self.flush();
        self.flushed_ns = time_ns;
        self.ingest.measure_rate(time_ns);
    }

    /// Folds once [`FLUSH_AFTER_NS`] of sample time has passed since the last fold, so that
    /// `pghotctl top` sees a slow source move; the sample's own clock costs no syscall.
    fn fold_if_due(&mut self, time_ns: u64) {
        if time_ns > self.flushed_ns + FLUSH_AFTER_NS {
            self.fold_at(time_ns);
        }
    }

    /// Everything [`SampleSink::record`] does but the fold by time.
    #[inline]
    fn record_one(&mut self, s: &Sample) {
        self.local.bump(Counter::HwhintTotalEvents);
        self.local.bump_source(s.source);
        self.pending += 1;
        if self.pending >= FLUSH_EVERY {
            self.fold_at(s.time_ns);
        }
        if let Some(writer) = &self.ingest.record_to
            && !self.ingest.record_failed.load(Ordering::Relaxed)
            && let Err(e) = writer.lock().write_sample(s)
        {
            self.ingest.record_failed.store(true, Ordering::Relaxed);
            tracing::error!("writing the sample recording failed, recording stops: {e}");
        }
        if self.ingest.tap_on.load(Ordering::Relaxed) {
            self.ingest.tap(s);
        }
        let Some(key) = self.filter(s) else {
            return;
        };
        self.local_pids.entry(s.pid, &self.ingest.pids).samples += 1;
        match self.known_node(s, key) {
            Some(node) => self.process(s, key, node),
            None => {
                if self.resolver.defer(s, key) {
                    self.resolve_deferred();
                }
            }
        }
    }
}

impl SampleSink for Recorder {
    #[inline]
    fn record(&mut self, s: &Sample) {
        self.record_one(s);
        self.fold_if_due(s.time_ns);
    }

    /// The fold by time comes at most twice a batch, before its first sample and after its
    /// last: a source that drains a trickle once a second hands over a second of sample time
    /// at once, and folding per 100 ms of it folded ten times a wake-up for nothing anyone
    /// could see in between (each fold adds every counter touched, the per-process counts and
    /// admission's traffic into shared state). The fold before the first sample starts the
    /// recorded rate's span where the samples start (`measure_rate`): folded only at its end,
    /// a first batch started it there, and a floor the rate draws waited a span longer.
    fn record_batch(&mut self, samples: &[Sample]) {
        if let Some(first) = samples.first() {
            self.fold_if_due(first.time_ns);
        }
        // Far enough ahead for a miss to arrive, near enough that the line is still cached.
        const AHEAD: usize = 4;
        let table = Arc::clone(&self.ingest.table);
        let prefetch = |s: &Sample| {
            if let Some(key) = PageKey::new(s.pid, s.vaddr) {
                table.prefetch(key);
            }
        };
        samples.iter().take(AHEAD).for_each(prefetch);
        for (i, s) in samples.iter().enumerate() {
            if let Some(ahead) = samples.get(i + AHEAD) {
                prefetch(ahead);
            }
            self.record_one(s);
        }
        if let Some(last) = samples.last() {
            self.fold_if_due(last.time_ns);
        }
    }

    fn count(&mut self, counter: Counter, n: u64) {
        // Per-thread like the samples' own counts: a hardware source drops a sample in four
        // for being a cache hit, and shared atomics per drop would bounce between CPUs.
        if counter.is_source_drop() {
            // Events the source dropped (or never saw): count them in and out so that
            // total = useful + dropped holds.
            self.local.add(Counter::HwhintTotalEvents, n);
            self.local.add(Counter::HwhintDroppedEvents, n);
        }
        self.local.add(counter, n);
        self.pending += 1;
        if self.pending >= FLUSH_EVERY {
            self.flush();
        }
    }

    fn end_batch(&mut self) {
        if self.resolver.has_deferred() {
            self.resolve_deferred();
        }
        self.flush();
    }

    fn set_sample_period(&mut self, period: u64) {
        if let (Some(local), Some(shared)) = (&mut self.admission, &self.ingest.admission) {
            // Samples already counted stand for the old period.
            local.flush(shared);
            local.set_source_period(period);
        }
    }
}

impl SinkFactory for Arc<Ingest> {
    fn sink(&self) -> Box<dyn SampleSink + Send> {
        Box::new(self.recorder())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Says when the heat a `hot_share_pct` candidate needs first exists or moves by half or more.
fn log_heat_floor(before: Option<f64>, after: Option<f64>) {
    let Some(after) = after else {
        return;
    };
    let moved = match before {
        Some(b) => after > b * 1.5 || b > after * 1.5,
        None => true,
    };
    if after > 0.0 && moved {
        tracing::info!(
            "hot_share_pct: a candidate now needs a heat of {after:.2} samples (the coldest of \
             the hottest tracked pages holding the share)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotness::HotnessConfig;
    use crate::hotness::candidate::CandidateReceiver;
    use crate::movepages::fake::FakeMover;
    use crate::sample::AccessOp;
    use crate::sample::SourceKind;
    use crate::topology::SysfsRoot;

    fn topology() -> Arc<Topology> {
        let root = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sysfs/qemu-3node"
        );
        Arc::new(Topology::read(SysfsRoot::new(root)).unwrap())
    }

    fn setup(
        scope_pids: &[u32],
        target: Option<NodeId>,
        queue: usize,
    ) -> (Arc<Ingest>, Arc<Stats>, CandidateReceiver) {
        let (ingest, stats, rx) = unshared(scope_pids, target, queue);
        (Arc::new(ingest), stats, rx)
    }

    fn unshared(
        scope_pids: &[u32],
        target: Option<NodeId>,
        queue: usize,
    ) -> (Ingest, Arc<Stats>, CandidateReceiver) {
        let stats = Arc::new(Stats::new());
        let policy = HotnessConfig {
            freq_threshold: 2,
            ..HotnessConfig::default()
        };
        let (tx, rx) = crate::hotness::candidate::candidate_queue(queue, 1);
        let lookup = FakeMover::default();
        lookup.0.lock().pages.insert((100, 0x7000), 2);
        let ingest = Ingest::new(
            Arc::new(HotTable::new(4096, policy)),
            Arc::clone(&stats),
            topology(),
            Arc::new(if scope_pids.is_empty() {
                Scope::everything(1)
            } else {
                Scope::of_pids(scope_pids.iter().copied(), 1)
            }),
            target,
            vec![(2, tx)],
        )
        .with_node_lookup(move || Box::new(lookup.clone()));
        (ingest, stats, rx)
    }

    fn sample(pid: u32, vaddr: u64, node: Option<NodeId>, src: DataSource) -> Sample {
        Sample {
            time_ns: 1_000_000,
            cpu: 1,
            pid,
            tid: pid,
            vaddr,
            paddr: None,
            op: AccessOp::Load,
            served_from: src,
            node,
            latency: None,
            source: SourceKind::Trace,
        }
    }

    /// MB/s admission estimates on node 2 after 100 samples a second for two seconds, with the
    /// recorder told `period` by its source and `configured` in the config.
    fn estimated_mb_per_s(period: Option<u64>, configured: Option<u64>) -> f64 {
        let (ingest, _stats, _rx) = unshared(&[100], None, 1024);
        let admission = Arc::new(crate::admission::Admission::new(
            crate::admission::AdmissionConfig {
                sample_period: configured,
                ..Default::default()
            },
            3,
        ));
        let ingest = Arc::new(ingest.with_admission(Arc::clone(&admission)));
        let mut r = ingest.recorder();
        if let Some(p) = period {
            r.set_sample_period(p);
        }
        for i in 0..201u64 {
            let mut s = sample(100, 0x10_0000 + i * 4096, Some(2), DataSource::ExtMem);
            s.time_ns = 1_000_000 + i * 10_000_000;
            r.record(&s);
        }
        r.flush();
        admission.traffic(2).unwrap().mb_per_s
    }

    #[test]
    fn admission_counts_each_sample_as_its_sources_period_unless_configured() {
        // 100 samples/s x 64 B = 6400 B/s per event a sample stands for.
        let per_event = 100.0 * 64.0 / (1 << 20) as f64;
        let near =
            |got: f64, events: f64| (got - per_event * events).abs() < 0.01 * per_event * events;
        let alone = estimated_mb_per_s(None, None);
        assert!(near(alone, 1.0), "{alone}");
        let ibs = estimated_mb_per_s(Some(10_000), None);
        assert!(near(ibs, 10_000.0), "{ibs}");
        let configured = estimated_mb_per_s(Some(10_000), Some(100));
        assert!(near(configured, 100.0), "{configured}");
    }

    #[test]
    fn filters_count_each_drop_reason() {
        let (ingest, stats, _rx) = setup(&[100], None, 16);
        let mut r = ingest.recorder();
        let ext = DataSource::ExtMem;
        r.record(&sample(0, 0x1000, Some(2), ext));
        r.record(&sample(100, 0, Some(2), ext));
        r.record(&sample(100, 0xffff_8000_0000_1000, Some(2), ext));
        r.record(&sample(100, 1 << 53, Some(2), ext));
        r.record(&sample(200, 0x1000, Some(2), ext)); // not managed
        r.record(&sample(1, 0x1000, Some(2), ext)); // pghotd itself
        r.record(&sample(100, 0x1000, None, ext)); // the kernel does not know it either
        r.record(&sample(100, 0x1000, Some(7), ext));
        r.record(&sample(100, 0x1000, Some(2), ext)); // useful
        drop(r);
        let s = stats.snapshot();
        assert_eq!(s.get("pghot_drop_pid_zero"), 1);
        assert_eq!(s.get("pghot_drop_no_address"), 1);
        assert_eq!(s.get("pghot_drop_kernel_address"), 1);
        assert_eq!(s.get("pghot_drop_address_range"), 1);
        assert_eq!(s.get("pghot_drop_out_of_scope"), 2);
        assert_eq!(s.get("pghot_drop_unknown_node"), 1);
        assert_eq!(s.get("pghot_drop_bad_node"), 1);
        assert_eq!(s.get("hwhint_total_events"), 9);
        assert_eq!(s.get("hwhint_dropped_events"), 8);
        assert_eq!(s.get("hwhint_useful_events"), 1);
        assert_eq!(s.get("source_trace_samples"), 9);
        assert_eq!(s.get("pghot_node_queries"), 1);
    }

    #[test]
    fn lost_records_count_in_and_out() {
        let (ingest, stats, _rx) = setup(&[], None, 16);
        let mut r = ingest.recorder();
        r.count(Counter::SourceLostRecords, 5);
        r.record(&sample(100, 0x1000, Some(0), DataSource::LocalDram));
        drop(r);
        let s = stats.snapshot();
        assert_eq!(s.get("pghot_source_lost_records"), 5);
        assert_eq!(s.get("hwhint_total_events"), 6);
        assert_eq!(s.get("hwhint_dropped_events"), 5);
        assert_eq!(s.get("hwhint_useful_events"), 1);
    }

    #[test]
    fn samples_without_a_node_are_resolved_by_the_kernel() {
        let (ingest, stats, rx) = setup(&[], None, 16);
        let mut r = ingest.recorder();
        // 0x7000 is on node 2 in the fake; two samples make it a candidate once resolved.
        r.record(&sample(100, 0x7000, None, DataSource::Unknown));
        r.record(&sample(100, 0x7040, None, DataSource::Unknown));
        assert!(rx.is_empty(), "held back until the batch is resolved");
        r.finish();
        assert_eq!(rx.try_recv().unwrap().key.vaddr(), 0x7000);
        // Now tracked: its node comes from the table, no new query.
        r.record(&sample(100, 0x7000, None, DataSource::Unknown));
        r.finish();
        let s = stats.snapshot();
        assert_eq!(s.get("pghot_node_queries"), 1);
        // The third took the node pghotd knew, unchecked: one for the migrators' audit.
        assert_eq!(s.get("pghot_believed_node_samples"), 1);
        assert_eq!(s.get("pghot_recorded_accesses"), 3);
        assert_eq!(s.get("hwhint_extmem_accesses"), 3);
    }

    #[test]
    fn classification_and_tiers() {
        let (ingest, stats, rx) = setup(&[], None, 16);
        let mut r = ingest.recorder();
        r.record(&sample(100, 0x1000, Some(0), DataSource::LocalDram));
        r.record(&sample(100, 0x2000, Some(2), DataSource::ExtMem));
        r.record(&sample(100, 0x3000, Some(2), DataSource::L2)); // cache hit: not recorded
        r.record(&sample(100, 0x4000, Some(2), DataSource::Unknown)); // tier decides
        r.record(&sample(100, 0x5000, Some(1), DataSource::Unknown));
        drop(r);
        let s = stats.snapshot();
        assert_eq!(s.get("hwhint_dram_accesses"), 2);
        assert_eq!(s.get("hwhint_extmem_accesses"), 2);
        assert_eq!(s.get("hwhint_cache_accesses"), 1);
        assert_eq!(s.get("pghot_recorded_accesses"), 2);
        assert_eq!(
            s.get("pghot_believed_node_samples"),
            0,
            "each showed its node"
        );
        assert_eq!(ingest.table().len(), 2, "top-tier pages are not tracked");
        assert!(rx.is_empty());
    }

    #[test]
    fn physical_address_decides_the_node_over_the_sample_node() {
        let (ingest, stats, _rx) = setup(&[], None, 16);
        let node2_start = ingest
            .topology()
            .physmap()
            .ranges()
            .iter()
            .find(|r| r.2 == 2)
            .unwrap()
            .0;
        let mut r = ingest.recorder();
        let mut s = sample(100, 0x1000, Some(0), DataSource::Unknown);
        s.paddr = Some(node2_start + 0x5000);
        r.record(&s);
        drop(r);
        assert_eq!(stats.snapshot().get("pghot_recorded_accesses"), 1);
    }

    #[test]
    fn candidates_go_to_the_nearest_top_node_of_the_cpu_or_the_target() {
        let (ingest, stats, rx) = setup(&[], None, 16);
        let mut r = ingest.recorder();
        let mut s = sample(100, 0x1000, Some(2), DataSource::ExtMem);
        s.cpu = 1;
        r.record(&s);
        r.record(&s);
        let c = rx.try_recv().unwrap();
        assert_eq!((c.from_node, c.to_node, c.key.vaddr()), (2, 1, 0x1000));
        ingest.set_target_nid(Some(0));
        s.vaddr = 0x2000;
        r.record(&s);
        r.record(&s);
        assert_eq!(rx.try_recv().unwrap().to_node, 0);
        drop(r);
        assert_eq!(stats.snapshot().get("pgpromote_candidate"), 2);
    }

    #[test]
    fn a_full_queue_is_counted_and_the_page_stays_eligible() {
        let (ingest, stats, rx) = setup(&[], None, 1);
        let mut r = ingest.recorder();
        for page in 1..=3u64 {
            let s = sample(100, page << 12, Some(2), DataSource::ExtMem);
            r.record(&s);
            r.record(&s);
        }
        r.flush();
        assert_eq!(stats.get(Counter::PgpromoteCandidate), 3);
        assert_eq!(stats.get(Counter::PgpromoteQueueFull), 2);
        rx.try_recv().unwrap();
        // Page 2 is offered again on its next access.
        r.record(&sample(100, 2 << 12, Some(2), DataSource::ExtMem));
        assert_eq!(rx.try_recv().unwrap().key.vaddr(), 2 << 12);
    }

    #[test]
    fn recording_writes_every_received_sample() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.trace");
        let (ingest, _stats, _rx) = setup(&[], None, 16);
        let ingest = Arc::into_inner(ingest).unwrap();
        let file = std::fs::File::create(&path).unwrap();
        let ingest = Arc::new(ingest.record_to(TraceWriter::new(BufWriter::new(file)).unwrap()));
        let mut r = ingest.recorder();
        let kept = sample(100, 0x1000, Some(2), DataSource::ExtMem);
        let dropped = sample(0, 0x1000, Some(2), DataSource::ExtMem);
        r.record(&kept);
        r.record(&dropped);
        ingest.flush_recording().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed: Vec<Sample> = text
            .lines()
            .filter_map(|l| crate::sampler::trace::parse_line(l).unwrap())
            .collect();
        assert_eq!(parsed, vec![kept, dropped]);
    }

    #[test]
    fn a_batch_records_exactly_what_single_samples_record() {
        // Pages on both tiers, repeats (candidates), a pid 0 and a kernel address (drops).
        let samples: Vec<Sample> = (0..200u64)
            .map(|i| {
                let node = if i % 3 == 0 { 0 } else { 2 };
                let pid = if i == 50 { 0 } else { 100 + (i % 4) as u32 };
                let vaddr = if i == 60 {
                    1 << 63
                } else {
                    0x10_0000 + (i % 37) * 4096
                };
                Sample {
                    time_ns: 1_000_000 + i * 1000,
                    ..sample(pid, vaddr, Some(node), DataSource::Unknown)
                }
            })
            .collect();
        let run = |batched: bool| {
            let (ingest, stats, rx) = setup(&[], None, 4096);
            {
                let mut r = ingest.recorder();
                if batched {
                    for chunk in samples.chunks(32) {
                        r.record_batch(chunk);
                    }
                } else {
                    samples.iter().for_each(|s| r.record(s));
                }
            }
            let mut candidates = Vec::new();
            while let Some(c) = rx.try_recv() {
                candidates.push((c.key, c.from_node));
            }
            let table: Vec<_> = (0..37u64)
                .flat_map(|p| (100..104).map(move |pid| (pid, p)))
                .filter_map(|(pid, p)| PageKey::new(pid, 0x10_0000 + p * 4096))
                .map(|k| ingest.table().get(k).map(|e| e.count))
                .collect();
            (stats.snapshot().counters, candidates, table)
        };
        assert_eq!(run(true), run(false));
    }
}
