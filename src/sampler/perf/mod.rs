//! The per-CPU perf sampler shared by every perf-based source (IBS, PEBS, page faults).
//!
//! A source describes itself as a [`PerfPlan`]: the events to open on each CPU (system-wide,
//! pid -1), the `sample_type` they share, and a [`SampleDecoder`] that turns a sample record into
//! a [`Sample`] or a counted drop reason. [`PerfSource`] opens the plan on every online CPU before
//! any thread starts, then runs one thread `pghot-smp/N` per CPU: poll the ring, drain it in
//! batches, parse, decode, and hand samples to that thread's own sink. No channel and no shared
//! lock on the sample path.
//!
//! Loss is counted, never hidden: PERF_RECORD_LOST and LOST_SAMPLES go to
//! `pghot_source_lost_records` (and so into `hwhint_dropped_events`), throttling to
//! `perf_throttle_events`/`perf_unthrottle_events` with a log line. CPUs that go offline lose
//! their events in the kernel (`perf_event_exit_cpu_context()` in `kernel/events/core.c`; nothing
//! re-adds them when the CPU returns), so the run loop watches
//! `devices/system/cpu/online` and closes and reopens samplers as CPUs leave and return. A CPU
//! whose fd errors in poll(2) loses its sampler (logged) until the online set next changes.

pub mod adaptive_loop;
mod open;
pub(crate) use open::hint;
pub mod period;
pub mod record;
pub mod ring;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use self::open::CpuEvents;
use self::period::PeriodControl;
use self::record::{Record, SampleFormat, SampleRecord};
use super::hwsample::Notes;
use super::pace::{self, DrainPace};
use super::{Source, SourceError};
use crate::sample::{AccessOp, Sample, SourceKind};
use crate::sampler::{SampleSink, SinkFactory};
use crate::stats::Counter;
use crate::stop::StopToken;
use crate::topology::SysfsRoot;
use crate::topology::sysfs::parse_list;

/// How often the run loop looks for CPUs that came or went.
const HOTPLUG_POLL: Duration = Duration::from_millis(500);
/// How long the run loop sleeps between its looks at the CPU threads.
const DRAIN_INTERVAL_MS: u16 = 100;
/// Malformed records logged per CPU before going quiet (all are counted).
const LOGGED_BAD_RECORDS: u64 = 5;

/// One event to open on every CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// For errors and logs: `ibs_op`, `mem-loads`, `page-faults`.
    pub name: String,
    pub pmu_type: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    pub period: u64,
    pub precise_ip: u8,
    /// Ask the kernel to drop kernel-mode samples; IBS before Linux 6.14 refuses this (the
    /// decoder then drops them itself).
    pub exclude_kernel: bool,
    /// Opened with `period`; a non-sampling event (PEBS's mem-loads-aux) only leads a group.
    pub sampling: bool,
    pub group: Group,
}

/// How an event joins the others of its CPU. All of them write into one ring either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Alone,
    Leader,
    /// Joins the nearest preceding `Leader`.
    Member,
}

/// The events to open on a set of CPUs (hybrid parts have one class per core type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventClass {
    /// `None`: every CPU.
    pub cpus: Option<Vec<u32>>,
    pub events: Vec<EventSpec>,
}

/// Turns one sample record into a [`Sample`], or names the counter of why it was dropped.
pub trait SampleDecoder: Send + Sync {
    /// `event` is the index in the plan of the event that wrote the record. `out` arrives with
    /// the generic fields (time, cpu, pid, tid, source) filled and `vaddr` set to the record's
    /// `addr`. `notes` collects what the decoder tolerated (a newer layout), counted whatever
    /// the outcome.
    fn decode(
        &self,
        rec: &SampleRecord<'_>,
        event: usize,
        out: &mut Sample,
        notes: &mut Notes,
    ) -> Result<(), Counter>;
}

/// What a perf source opens and how it reads what comes back.
pub struct PerfPlan {
    pub kind: SourceKind,
    pub classes: Vec<EventClass>,
    pub format: SampleFormat,
    pub decoder: Box<dyn SampleDecoder>,
}

impl PerfPlan {
    /// The events to open on `cpu`; `None` when no class covers it (an E-core without PEBS).
    pub fn events_for(&self, cpu: u32) -> Option<&[EventSpec]> {
        self.classes
            .iter()
            .find(|c| c.cpus.as_ref().is_none_or(|cpus| cpus.contains(&cpu)))
            .map(|c| c.events.as_slice())
    }
}

/// Settings of the per-CPU machinery, whatever the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfConfig {
    /// Data pages per CPU ring (a power of two).
    pub ring_pages: usize,
}

impl Default for PerfConfig {
    fn default() -> Self {
        // 64 pages = 256 KiB per CPU: at 72-byte samples, 3600 records, i.e. >300 ms of a
        // busy CPU at 10k samples/s, far more than the 100 ms drain interval.
        Self { ring_pages: 64 }
    }
}

/// Why a perf source could not start.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("reading the online CPUs ({path}): {detail}")]
    OnlineCpus { path: String, detail: String },
    #[error("{0}")]
    FdBudget(String),
    #[error("{kind} could not open on any CPU:\n  {}", errors.join("\n  "))]
    NoCpu {
        kind: &'static str,
        errors: Vec<String>,
    },
}

/// A perf-based source: one sampler thread per online CPU.
pub struct PerfSource {
    plan: Arc<PerfPlan>,
    settings: PerfConfig,
    sysfs: SysfsRoot,
    /// Opened at startup, handed to their threads by `run`.
    opened: Vec<CpuEvents>,
    describe: String,
    /// Live period changes (`ibs.period = "auto"`), if any.
    period: Option<PeriodControl>,
}

impl PerfSource {
    /// Opens the plan on every online CPU now, so that startup fails with one clear error. A
    /// CPU that cannot be opened while others can is logged and retried by the hotplug watch.
    pub fn open(
        plan: PerfPlan,
        settings: PerfConfig,
        sysfs: SysfsRoot,
        describe: String,
    ) -> Result<PerfSource, PerfError> {
        let cpus: Vec<u32> = online_cpus(&sysfs)?
            .into_iter()
            .filter(|&c| plan.events_for(c).is_some())
            .collect();
        let fds: usize = cpus
            .iter()
            .filter_map(|&c| plan.events_for(c))
            .map(<[EventSpec]>::len)
            .sum();
        open::ensure_fd_budget(fds as u64).map_err(PerfError::FdBudget)?;
        if let Some(warning) = open::privilege_warning() {
            tracing::warn!("{}: {warning}", plan.kind.name());
        }
        let mut opened = Vec::new();
        let mut errors = Vec::new();
        for &cpu in &cpus {
            match open::open_cpu(&plan, cpu, settings.ring_pages) {
                Ok(events) => opened.push(events),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if opened.is_empty() {
            return Err(PerfError::NoCpu {
                kind: plan.kind.name(),
                errors,
            });
        }
        for e in &errors {
            tracing::warn!(
                "{}: {e}; will retry when the CPU list changes",
                plan.kind.name()
            );
        }
        Ok(PerfSource {
            plan: Arc::new(plan),
            settings,
            sysfs,
            opened,
            describe,
            period: None,
        })
    }

    /// Lets `control` change the sampling period while the source runs: each CPU thread
    /// applies a new value at its next drain (within about 100 ms).
    pub fn with_period_control(mut self, control: PeriodControl) -> PerfSource {
        self.period = Some(control);
        self
    }
}

/// A running CPU thread.
struct CpuThread<'scope> {
    stop: StopToken,
    thread: std::thread::ScopedJoinHandle<'scope, ()>,
}

impl Source for PerfSource {
    fn kind(&self) -> SourceKind {
        self.plan.kind
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn run(&mut self, sinks: &dyn SinkFactory, stop: &StopToken) -> Result<(), SourceError> {
        let plan = &*self.plan;
        let settings = self.settings;
        let sysfs = &self.sysfs;
        let period = self.period.as_ref();
        let opened = std::mem::take(&mut self.opened);
        std::thread::scope(|scope| {
            let mut running: BTreeMap<u32, CpuThread<'_>> = BTreeMap::new();
            for events in opened {
                let cpu = events.cpu;
                if let Some(t) = start_cpu(scope, events, plan, sinks, stop, period) {
                    running.insert(cpu, t);
                }
            }
            tracing::info!(
                "{}: sampling on cpu {}",
                plan.kind.name(),
                cpu_list(running.keys())
            );
            let mut last_online: Option<Vec<u32>> = None;
            let mut next_check = Instant::now() + HOTPLUG_POLL;
            while !stop.is_stopped() {
                {
                    let _waiting = crate::heartbeat::waiting();
                    std::thread::sleep(Duration::from_millis(u64::from(DRAIN_INTERVAL_MS)));
                }
                if Instant::now() < next_check {
                    continue;
                }
                next_check = Instant::now() + HOTPLUG_POLL;
                let online = match online_cpus(sysfs) {
                    Ok(cpus) => cpus,
                    Err(e) => {
                        tracing::warn!("{e}");
                        continue;
                    }
                };
                // A CPU that failed to open is retried only when the online set changes.
                let changed = last_online.as_ref() != Some(&online);
                let gone: Vec<u32> = running
                    .keys()
                    .copied()
                    .filter(|c| !online.contains(c))
                    .collect();
                for cpu in gone {
                    if let Some(t) = running.remove(&cpu) {
                        t.stop.stop();
                        let _ = t.thread.join();
                        tracing::info!("{}: cpu {cpu} went offline", plan.kind.name());
                    }
                }
                // An online CPU whose sampler gave up (its fd errored) is reopened like one
                // that failed to open: when the online set changes.
                let ended: Vec<u32> = running
                    .iter()
                    .filter(|(_, t)| t.thread.is_finished())
                    .map(|(&cpu, _)| cpu)
                    .collect();
                if stop.is_stopped() {
                    // They ended because of the stop, which is set before any of them sees it.
                    break;
                }
                for cpu in ended {
                    if let Some(t) = running.remove(&cpu) {
                        let _ = t.thread.join();
                        tracing::warn!("{}: cpu {cpu} is not sampled any more", plan.kind.name());
                    }
                }
                if changed {
                    let new: Vec<u32> = online
                        .iter()
                        .copied()
                        .filter(|c| !running.contains_key(c) && plan.events_for(*c).is_some())
                        .collect();
                    for cpu in new {
                        match open::open_cpu(plan, cpu, settings.ring_pages) {
                            Ok(events) => {
                                if let Some(t) = start_cpu(scope, events, plan, sinks, stop, period)
                                {
                                    running.insert(cpu, t);
                                    tracing::info!("{}: cpu {cpu} came online", plan.kind.name());
                                }
                            }
                            Err(e) => tracing::warn!("{}: {e}", plan.kind.name()),
                        }
                    }
                }
                last_online = Some(online);
            }
            for t in running.into_values() {
                t.stop.stop();
                let _ = t.thread.join();
            }
        });
        Ok(())
    }
}

/// Starts the sampler thread of one CPU with a sink of its own.
fn start_cpu<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    events: CpuEvents,
    plan: &'env PerfPlan,
    sinks: &'env dyn SinkFactory,
    stop: &StopToken,
    period: Option<&'env PeriodControl>,
) -> Option<CpuThread<'scope>> {
    let cpu = events.cpu;
    // Its own token, so that a CPU going offline wakes its thread's poll at once.
    let cpu_stop = StopToken::new();
    let mut sink = sinks.sink();
    let (flag, global) = (cpu_stop.clone(), stop.clone());
    let spawned = std::thread::Builder::new()
        .name(format!("pghot-smp/{cpu}"))
        .spawn_scoped(scope, move || {
            let _beat = crate::heartbeat::attach(format!("pghot-smp/{cpu}"));
            run_cpu(events, plan, &mut *sink, &global, &flag, period);
        });
    match spawned {
        Ok(thread) => Some(CpuThread {
            stop: cpu_stop,
            thread,
        }),
        Err(e) => {
            tracing::error!("starting the sampler thread of cpu {cpu}: {e}");
            None
        }
    }
}

/// One CPU's loop: wait for the ring to fill (or for the pace's wait, 100 ms to 1 s), drain it,
/// until asked to stop.
fn run_cpu(
    mut events: CpuEvents,
    plan: &PerfPlan,
    sink: &mut dyn SampleSink,
    stop: &StopToken,
    cpu_stop: &StopToken,
    period: Option<&PeriodControl>,
) {
    let mut reader = CpuReader::new(plan, events.cpu);
    // What the events were opened with; a control that says otherwise is applied below.
    let mut applied = plan
        .events_for(events.cpu)
        .and_then(|specs| specs.iter().find(|e| e.sampling))
        .map_or(0, |e| e.period);
    sink.set_sample_period(applied);
    // The ring wakes poll(2) at its watermark (open.rs); short of that, the thread drains when
    // the pace says (a stream that only trickles is left to gather, up to a second) or when
    // pghotd stops or the CPU goes offline (the stop tokens' descriptors).
    let mut pace = DrainPace::new(pace::PAGE_OF_RECORDS);
    let mut drained_at = Instant::now();
    loop {
        let stopping = stop.is_stopped() || cpu_stop.is_stopped();
        let mut fds = vec![PollFd::new(events.fd(), PollFlags::POLLIN)];
        for wake in [stop.wake_fd(), cpu_stop.wake_fd()].into_iter().flatten() {
            fds.push(PollFd::new(wake, PollFlags::POLLIN));
        }
        let after = if stopping {
            AfterPoll::Drain
        } else {
            let timeout = u16::try_from(pace.wait().as_millis()).unwrap_or(u16::MAX);
            let polled = {
                let _waiting = crate::heartbeat::waiting();
                poll(&mut fds, PollTimeout::from(timeout))
            };
            after_poll(polled, fds[0].revents())
        };
        drop(fds);
        // What the ring holds is read either way.
        let records = reader.drain(&mut events, sink);
        let now = Instant::now();
        pace.drained(records, now - drained_at);
        drained_at = now;
        if let AfterPoll::Stop(why) = after {
            tracing::error!(
                "cpu {}: {why}; its sampler stops (reopened when the CPU list changes)",
                events.cpu
            );
            break;
        }
        if stopping {
            break;
        }
        if let Some(wanted) = period.map(PeriodControl::get)
            && wanted != applied
        {
            if let Err(e) = events.set_period(wanted) {
                tracing::warn!("cpu {}: setting the period to {wanted}: {e}", events.cpu);
            }
            // Tried once per change: a period the PMU refuses is not retried every drain.
            applied = wanted;
            sink.set_sample_period(applied);
        }
    }
}

/// What a CPU thread does after poll(2).
#[derive(Debug, PartialEq, Eq)]
enum AfterPoll {
    Drain,
    /// Why the CPU's sampler gives up.
    Stop(String),
}

/// A timeout, a wake-up or EINTR: drain. A failed poll, or an fd the kernel flags as broken
/// (POLLERR, POLLHUP, POLLNVAL: poll(2) would return at once again, forever, and the thread
/// would spin): stop this CPU's sampler.
fn after_poll(polled: nix::Result<i32>, revents: Option<PollFlags>) -> AfterPoll {
    let broken = PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL;
    match polled {
        Err(nix::errno::Errno::EINTR) => AfterPoll::Drain,
        Err(e) => AfterPoll::Stop(format!("polling the perf ring: {e}")),
        Ok(_) => match revents.map(|r| r & broken) {
            Some(bad) if !bad.is_empty() => {
                AfterPoll::Stop(format!("the perf event fd reported {bad:?}"))
            }
            _ => AfterPoll::Drain,
        },
    }
}

/// Parses and decodes one CPU's records into its sink.
pub struct CpuReader<'a> {
    plan: &'a PerfPlan,
    /// Where the records come from, for logs: `cpu 3`, or a perf.data file.
    origin: String,
    bad_records: u64,
    throttles: u64,
    /// Decoded samples handed to the sink together (`SampleSink::record_batch`), so that it
    /// can prefetch the table slots of the next ones while it records one.
    batch: Vec<Sample>,
}

/// Samples per `record_batch` call.
const BATCH: usize = 32;

impl<'a> CpuReader<'a> {
    pub fn new(plan: &'a PerfPlan, cpu: u32) -> Self {
        Self::with_origin(plan, format!("cpu {cpu}"))
    }

    /// A reader of records from `origin` (a perf.data file's name), not a CPU's ring.
    pub fn with_origin(plan: &'a PerfPlan, origin: String) -> Self {
        Self {
            plan,
            origin,
            bad_records: 0,
            throttles: 0,
            batch: Vec::with_capacity(BATCH),
        }
    }

    fn hand_over(&mut self, sink: &mut dyn SampleSink) {
        if !self.batch.is_empty() {
            sink.record_batch(&self.batch);
            self.batch.clear();
        }
    }

    /// Drains the CPU's ring; returns the records read (0 after a malformed record).
    fn drain(&mut self, events: &mut CpuEvents, sink: &mut dyn SampleSink) -> usize {
        let ids = &events.ids;
        let slot_of = |id: u64| open::slot_of(ids, id);
        let plan = self.plan;
        let read = match events
            .ring
            .drain(|bytes| self.handle(plan, bytes, &slot_of, sink))
        {
            Ok(read) => read,
            Err(e) => {
                sink.count(Counter::PerfBadRecords, 1);
                tracing::warn!("{}: {e}", self.origin);
                0
            }
        };
        self.hand_over(sink);
        sink.end_batch();
        read
    }

    /// Drains an in-memory ring holding one event's records (benches and tests).
    pub fn drain_ring(&mut self, ring: &mut ring::Ring, sink: &mut dyn SampleSink) -> usize {
        let slot_of = |_| Some(0);
        let plan = self.plan;
        let read = ring
            .drain(|bytes| self.handle(plan, bytes, &slot_of, sink))
            .unwrap_or_default();
        self.hand_over(sink);
        read
    }

    /// Parses and decodes one record that `plan`'s event wrote, read from somewhere other than
    /// this reader's ring (a perf.data file: `sampler::perfdata`), exactly as a drained one.
    /// Call [`CpuReader::finish`] after the last.
    pub fn replay_record(&mut self, plan: &PerfPlan, bytes: &[u8], sink: &mut dyn SampleSink) {
        self.handle(plan, bytes, &|_| Some(0), sink);
    }

    /// Hands over the samples still held for a batch.
    pub fn finish(&mut self, sink: &mut dyn SampleSink) {
        self.hand_over(sink);
        sink.end_batch();
    }

    /// Every record a sampler reads goes through here: the live rings and perf.data replays.
    #[inline]
    fn handle(
        &mut self,
        plan: &PerfPlan,
        bytes: &[u8],
        slot_of: &dyn Fn(u64) -> Option<usize>,
        sink: &mut dyn SampleSink,
    ) {
        match record::parse(bytes, plan.format) {
            Ok(Record::Sample(rec)) => {
                let Some(slot) = slot_of(rec.id) else {
                    return self.bad(sink, "sample from an event this sampler did not open");
                };
                let mut sample = Sample::at_address(
                    (rec.time, rec.cpu),
                    (rec.pid, rec.tid),
                    rec.addr,
                    AccessOp::Load,
                    plan.kind,
                );
                let mut notes = Notes::default();
                let decoded = plan.decoder.decode(&rec, slot, &mut sample, &mut notes);
                if !notes.is_empty() {
                    for note in notes.iter() {
                        sink.count(note.counter(), 1);
                    }
                }
                match decoded {
                    Ok(()) => {
                        self.batch.push(sample);
                        if self.batch.len() == BATCH {
                            self.hand_over(sink);
                        }
                    }
                    Err(reason) => sink.count(reason, 1),
                }
            }
            Ok(Record::Lost { lost } | Record::LostSamples { lost }) => {
                sink.count(Counter::SourceLostRecords, lost);
            }
            Ok(Record::Throttle { .. }) => {
                sink.count(Counter::PerfThrottleEvents, 1);
                self.throttles += 1;
                // The first and then every 100th: throttling repeats every tick while it lasts.
                if self.throttles % 100 == 1 {
                    tracing::warn!(
                        "{}: the kernel throttled sampling ({} times so far); raise the \
                         period or kernel.perf_event_max_sample_rate",
                        self.origin,
                        self.throttles
                    );
                }
            }
            Ok(Record::Unthrottle { .. }) => sink.count(Counter::PerfUnthrottleEvents, 1),
            Ok(Record::Other { .. }) => {}
            Err(e) => self.bad(sink, &e.to_string()),
        }
    }

    fn bad(&mut self, sink: &mut dyn SampleSink, what: &str) {
        sink.count(Counter::PerfBadRecords, 1);
        self.bad_records += 1;
        if self.bad_records <= LOGGED_BAD_RECORDS {
            tracing::warn!("{}: bad perf record: {what}", self.origin);
        }
    }
}

/// The online CPUs, from `devices/system/cpu/online`.
pub fn online_cpus(sysfs: &SysfsRoot) -> Result<Vec<u32>, PerfError> {
    let rel = "devices/system/cpu/online";
    let err = |detail: String| PerfError::OnlineCpus {
        path: sysfs.path(rel).display().to_string(),
        detail,
    };
    let text = sysfs.read(rel).map_err(|e| err(e.to_string()))?;
    parse_list(text.trim()).ok_or_else(|| err(format!("not a CPU list: {:?}", text.trim())))
}

fn cpu_list<'a>(cpus: impl Iterator<Item = &'a u32>) -> String {
    cpus.map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::record::{SampleFormat, build};
    use super::ring::{Ring, RingWriter};
    use super::*;
    use crate::sampler::collect::Collector;
    use crate::sampler::pagefault::{self, PageFaultConfig};

    const PAGE: usize = 4096;

    /// Maps `pages` fresh anonymous pages and writes one byte in each: one fault per page. (A
    /// heap allocation could reuse pages the allocator already faulted in.)
    fn touch_fresh_pages(pages: usize) -> (u64, u64) {
        let len = pages * PAGE;
        // SAFETY: a new private anonymous mapping; checked for failure below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        for i in (0..len).step_by(PAGE) {
            // SAFETY: `i` is inside the mapping made above.
            unsafe { ptr.cast::<u8>().add(i).write_volatile(1) };
        }
        // SAFETY: unmapping exactly the mapping made above, which nothing else refers to.
        unsafe { libc::munmap(ptr, len) };
        (ptr as u64, ptr as u64 + len as u64)
    }

    fn pages_seen(samples: &[Sample], (lo, hi): (u64, u64), cpu: Option<u32>) -> usize {
        let pid = std::process::id();
        samples
            .iter()
            .filter(|s| s.pid == pid && (lo..hi).contains(&s.vaddr))
            .filter(|s| cpu.is_none_or(|c| s.cpu == c))
            .map(|s| s.vaddr / PAGE as u64)
            .collect::<HashSet<_>>()
            .len()
    }

    /// Stops the source when the test ends, also by a failed assertion: a scope does not
    /// return (or unwind) before its threads end.
    struct StopOnDrop<'a>(&'a StopToken);

    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.stop();
        }
    }

    fn pagefault_source(sysfs: SysfsRoot) -> PerfSource {
        PerfSource::open(
            pagefault::plan(&PageFaultConfig::default()),
            PerfConfig { ring_pages: 256 },
            sysfs,
            "pagefault".into(),
        )
        .expect("the page-faults software event opens (needs root or CAP_PERFMON)")
    }

    #[test]
    fn page_fault_samples_name_this_process_and_each_fresh_page() {
        let mut source = pagefault_source(SysfsRoot::new("/sys"));
        let (sinks, stop) = (Collector::this_process(), StopToken::new());
        let range = std::thread::scope(|s| {
            let runner = s.spawn(|| source.run(&sinks, &stop));
            let _guard = StopOnDrop(&stop);
            let range = touch_fresh_pages(2048);
            std::thread::sleep(Duration::from_millis(300));
            stop.stop();
            runner.join().unwrap().unwrap();
            range
        });
        let got = sinks.take();
        let lost = got.count_of(Counter::SourceLostRecords) as usize;
        let seen = pages_seen(&got.samples, range, None);
        assert!(
            seen + lost >= 2048,
            "saw {seen} of 2048 pages ({lost} records lost)"
        );
        assert!(seen >= 1024, "saw only {seen} of 2048 pages");
        assert!(
            got.samples
                .iter()
                .all(|s| s.source == SourceKind::PageFault)
        );
    }

    #[test]
    fn a_period_set_through_the_control_applies_live_and_thins_the_samples() {
        let control = PeriodControl::new(1);
        let mut source =
            pagefault_source(SysfsRoot::new("/sys")).with_period_control(control.clone());
        let (sinks, stop) = (Collector::this_process(), StopToken::new());
        // A ring that trickles is drained within a second (pace.rs `LONGEST`).
        let drained = super::pace::LONGEST + Duration::from_millis(300);
        let (every, one_in_64) = std::thread::scope(|s| {
            let runner = s.spawn(|| source.run(&sinks, &stop));
            let _guard = StopOnDrop(&stop);
            let first = touch_fresh_pages(2048);
            std::thread::sleep(drained);
            let every = pages_seen(&sinks.take().samples, first, None);
            control.set(64);
            // Every CPU thread applies the new period at its next drain: within a second on
            // a CPU whose ring only trickles; on a loaded machine that can take longer, so
            // wait until a probe batch shows it.
            std::thread::sleep(super::pace::LONGEST);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                std::thread::sleep(Duration::from_millis(200));
                let probe = touch_fresh_pages(2048);
                std::thread::sleep(drained);
                let seen = pages_seen(&sinks.take().samples, probe, None);
                if seen <= 128 || std::time::Instant::now() > deadline {
                    break;
                }
            }
            let second = touch_fresh_pages(8192);
            std::thread::sleep(drained);
            let one_in_64 = pages_seen(&sinks.take().samples, second, None);
            stop.stop();
            runner.join().unwrap().unwrap();
            (every, one_in_64)
        });
        assert!(every >= 1024, "period 1: saw only {every} of 2048 faults");
        // 8192 faults at one sample per 64 per CPU: 128, give or take what each CPU's counter
        // carried over from before the switch.
        assert!(
            (64..=256).contains(&one_in_64),
            "period 64: saw {one_in_64} of 8192 faults"
        );
    }

    fn pin_to(cpu: usize) {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    }

    #[test]
    fn cpus_that_come_online_get_a_sampler_and_those_that_leave_lose_it() {
        if online_cpus(&SysfsRoot::new("/sys")).unwrap().len() < 2 {
            eprintln!("skipped: needs two online CPUs");
            return;
        }
        // A fake sysfs whose online list the test changes, as hotplug would.
        let dir = tempfile::tempdir().unwrap();
        let online = dir.path().join("devices/system/cpu/online");
        std::fs::create_dir_all(online.parent().unwrap()).unwrap();
        std::fs::write(&online, "0\n").unwrap();
        let mut source = pagefault_source(SysfsRoot::new(dir.path()));
        let (sinks, stop) = (Collector::this_process(), StopToken::new());
        let settle = HOTPLUG_POLL * 2 + Duration::from_millis(200);
        // Pages a thread pinned to cpu 1 faults in, as seen on cpu 1 within `wait`.
        let on_cpu1 = |sinks: &Collector, wait: Duration| {
            let range = std::thread::scope(|s| {
                s.spawn(|| {
                    pin_to(1);
                    touch_fresh_pages(256)
                })
                .join()
                .unwrap()
            });
            let (deadline, mut samples) = (Instant::now() + wait, Vec::new());
            while Instant::now() < deadline && pages_seen(&samples, range, Some(1)) < 256 {
                std::thread::sleep(Duration::from_millis(50));
                samples.extend(sinks.take().samples);
            }
            pages_seen(&samples, range, Some(1))
        };
        std::thread::scope(|s| {
            let runner = s.spawn(|| source.run(&sinks, &stop));
            let _guard = StopOnDrop(&stop);
            std::thread::sleep(Duration::from_millis(200));
            let quiet = Duration::from_millis(500);
            assert_eq!(on_cpu1(&sinks, quiet), 0, "cpu 1 sampled while 'offline'");
            std::fs::write(&online, "0-1\n").unwrap();
            std::thread::sleep(settle);
            let seen = on_cpu1(&sinks, Duration::from_secs(5));
            assert!(
                seen > 128,
                "cpu 1 sampled once 'online': {seen} of 256 pages"
            );
            std::fs::write(&online, "0\n").unwrap();
            std::thread::sleep(settle);
            assert_eq!(on_cpu1(&sinks, quiet), 0, "cpu 1 sampled after it left");
            stop.stop();
            runner.join().unwrap().unwrap();
        });
    }

    #[test]
    fn a_broken_or_failing_fd_stops_the_cpu_sampler_instead_of_spinning() {
        use nix::errno::Errno;
        assert_eq!(
            after_poll(Ok(0), Some(PollFlags::empty())),
            AfterPoll::Drain
        );
        assert_eq!(after_poll(Ok(1), Some(PollFlags::POLLIN)), AfterPoll::Drain);
        assert_eq!(after_poll(Err(Errno::EINTR), None), AfterPoll::Drain);
        assert!(matches!(
            after_poll(Err(Errno::ENOMEM), None),
            AfterPoll::Stop(why) if why.starts_with("polling the perf ring: ENOMEM")
        ));
        for flag in [PollFlags::POLLERR, PollFlags::POLLNVAL] {
            let AfterPoll::Stop(why) = after_poll(Ok(1), Some(PollFlags::POLLIN | flag)) else {
                panic!("{flag:?} must stop the sampler");
            };
            assert!(why.contains(&format!("{flag:?}")), "{why}");
        }
        // A real fd that hangs up: a pipe whose writer has gone.
        let (rd, wr) = nix::unistd::pipe().unwrap();
        drop(wr);
        let mut fds = [PollFd::new(
            std::os::fd::AsFd::as_fd(&rd),
            PollFlags::POLLIN,
        )];
        let polled = poll(&mut fds, PollTimeout::from(100u16));
        assert!(
            matches!(after_poll(polled, fds[0].revents()), AfterPoll::Stop(why) if why.contains("POLLHUP"))
        );
    }

    /// Drops samples at odd addresses, to check that decoder drops are counted.
    struct OddDropper;

    impl SampleDecoder for OddDropper {
        fn decode(
            &self,
            rec: &SampleRecord<'_>,
            _: usize,
            _: &mut Sample,
            _: &mut Notes,
        ) -> Result<(), Counter> {
            if rec.addr % 2 == 1 {
                Err(Counter::DropNoAddress)
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn every_record_kind_ends_in_a_sample_or_a_counter() {
        let format = SampleFormat::new(
            u64::from(bindings_tid_addr()), // TID | TIME | ADDR | CPU
        )
        .unwrap();
        let plan = PerfPlan {
            kind: SourceKind::PageFault,
            classes: Vec::new(),
            format,
            decoder: Box::new(OddDropper),
        };
        let mut ring = Ring::in_memory(1 << 16).unwrap();
        let w = RingWriter::new(&ring);
        let sample = |addr| SampleRecord {
            pid: 42,
            tid: 43,
            time: 1000 + addr,
            addr,
            cpu: 1,
            ..build::empty()
        };
        for addr in [0x1000u64, 0x1001, 0x2000] {
            assert!(w.push(&build::sample(format, &sample(addr))));
        }
        assert!(w.push(&build::lost(7)));
        assert!(w.push(&build::throttle(false, 1)));
        assert!(w.push(&build::throttle(true, 2)));
        let mut truncated = build::sample(format, &sample(0x3000));
        truncated.truncate(16);
        truncated[6..8].copy_from_slice(&16u16.to_ne_bytes());
        assert!(w.push(&truncated));
        let sinks = Collector::default();
        let mut sink = sinks.sink();
        let read = CpuReader::new(&plan, 1).drain_ring(&mut ring, &mut *sink);
        assert_eq!(read, 7);
        let got = sinks.take();
        let addrs: Vec<u64> = got.samples.iter().map(|s| s.vaddr).collect();
        assert_eq!(addrs, [0x1000, 0x2000]);
        assert_eq!(
            (got.samples[0].pid, got.samples[0].time_ns),
            (42, 0x1000 + 1000)
        );
        for (counter, n) in [
            (Counter::DropNoAddress, 1),
            (Counter::SourceLostRecords, 7),
            (Counter::PerfThrottleEvents, 1),
            (Counter::PerfUnthrottleEvents, 1),
            (Counter::PerfBadRecords, 1),
        ] {
            assert_eq!(got.count_of(counter), n, "{}", counter.name());
        }
    }

    fn bindings_tid_addr() -> u32 {
        use perf_event_open_sys::bindings as b;
        b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME | b::PERF_SAMPLE_ADDR | b::PERF_SAMPLE_CPU
    }
}
