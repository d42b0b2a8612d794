//! One run: place the buffer, start the workers, report on a fixed timeline, stop.
//!
//! Threads: `pghot-wl/N` workers (accesses, and samples when asked), `pghot-wl-emit` (writes
//! the sample buffers the workers hand over), and the main thread, which does all measuring. Workers only
//! publish a running count every `CHUNK` (1024) accesses and check the stop flag as often, so the
//! access loop shares no cache line per access.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::emit::{self, Emitter};
use super::pattern::{PAGE_SIZE, Plan};
use super::placement::{self, Census, FastNodes, TierShare};
use super::report::{self, Milestones, RunResult, Tick};
use super::sys::{self, Mapping};
use super::threadtime::{ThreadTimes, WorkerTimes, round};
use super::{Options, WorkloadError};
use pghotd::topology::{SysfsRoot, Topology};

/// Accesses between a worker's count updates and stop checks.
const CHUNK: u64 = 1024;

/// The machine's top-tier nodes, once `--node` is known to be a memory node of it.
fn fast_nodes_with(opts: &Options) -> Result<FastNodes, WorkloadError> {
    let topology = Topology::read(SysfsRoot::new(&opts.sysfs_root))?;
    if !topology.node(opts.node).is_some_and(|n| n.has_memory()) {
        let available: Vec<String> = topology
            .nodes()
            .iter()
            .filter(|n| n.has_memory())
            .map(|n| n.id.to_string())
            .collect();
        return Err(WorkloadError::NoSuchNode {
            node: opts.node,
            available: available.join(","),
        });
    }
    Ok(FastNodes::from_topology(&topology))
}

/// Runs the workload, writing progress and the RESULT line to `out`.
pub fn run(opts: &Options, out: &mut dyn Write) -> Result<RunResult, WorkloadError> {
    opts.validate()?;
    let fast = fast_nodes_with(opts)?;
    let pid = std::process::id();
    let say =
        |out: &mut dyn Write, line: &str| writeln!(out, "{line}").map_err(WorkloadError::Output);

    // A file is opened (and a bad path reported) before the slow placement; a FIFO after it,
    // since its open waits for the reader.
    let mut emitter = match &opts.emit {
        Some(e) if !emit::is_fifo(&e.path) => Some(Emitter::open(&e.path, e.period)?),
        _ => None,
    };

    let pages = opts.pages();
    let map = placement::allocate_on(pages * PAGE_SIZE, opts.node, opts.thp)?;
    let plan = Plan::new(
        opts.pattern,
        pages,
        opts.hot_pages(),
        opts.write_pct,
        opts.seed,
    );
    plan.init_memory(map.words());
    let plans = shifted_plans(opts, plan);
    let plan = &plans[0];
    let mut census = Census::new(pid, map.addr(), pages);
    let on_node = placement::count_on(census.refresh()?, opts.node);
    let initial_on_node_pct = 100.0 * on_node as f64 / pages as f64;
    placement::release_binding(&map)?;
    say(
        out,
        &format!(
            "placement: pid={pid} node={} pages_on_node={on_node} pages={pages} on_node_pct={initial_on_node_pct:.2}",
            opts.node
        ),
    )?;

    if let Some(e) = &opts.emit
        && emitter.is_none()
    {
        emitter = Some(Emitter::open(&e.path, e.period)?);
    }
    say(out, &start_line(opts, pid, plan, &map, &fast))?;

    let phase = Phase {
        opts,
        plans: &plans,
        epoch: AtomicUsize::new(0),
        map: &map,
        fast: &fast,
        emitter: emitter.as_ref(),
        pid,
    };
    let outcome = phase.run(&mut census, out)?;
    let (shifts, hot_count) = (
        phase.epoch.load(Ordering::Relaxed),
        phase.plan().hot_count(),
    );
    let emit = emitter.map(|e| e.finish()).unwrap_or_default();

    let result = result_of(
        opts,
        outcome,
        Placed {
            pid,
            initial_on_node_pct,
            hot_count,
        },
        shifts,
        emit,
    );
    say(out, &result.line())?;
    Ok(result)
}

/// The `start:` line: what runs, where its buffer is, which nodes are fast (check.sh and the
/// rig read it).
fn start_line(opts: &Options, pid: u32, plan: &Plan, map: &Mapping, fast: &FastNodes) -> String {
    let fast_ids: Vec<String> = fast.ids().iter().map(usize::to_string).collect();
    format!(
        "start: pid={pid} pattern={} size_mb={} hot_pages={} threads={} write_pct={} seed={} buffer={:#x}-{:#x} fast_nodes={}",
        opts.pattern,
        opts.size_mb,
        plan.hot_count(),
        opts.threads,
        opts.write_pct,
        opts.seed,
        map.addr(),
        map.addr() + map.len() as u64,
        fast_ids.join(",")
    )
}

/// What the RESULT needs beside the phase's outcome: the process, the buffer's share on the
/// asked node after the placement, and the hot set's size in the plan in place at the end.
struct Placed {
    pid: u32,
    initial_on_node_pct: f64,
    hot_count: usize,
}

/// The RESULT of a finished phase.
fn result_of(
    opts: &Options,
    outcome: Outcome,
    placed: Placed,
    shifts: usize,
    emit: emit::EmitStats,
) -> RunResult {
    RunResult {
        pattern: opts.pattern.name().to_string(),
        size_mb: opts.size_mb,
        hot_mb: (placed.hot_count * PAGE_SIZE) as u64 >> 20,
        threads: opts.threads,
        duration_s: round(outcome.elapsed.as_secs_f64(), 3),
        accesses: outcome.accesses,
        ns_per_access: Some(report::ns_per_access(
            outcome.elapsed.as_nanos() as f64,
            opts.threads,
            outcome.accesses,
        ))
        .filter(|ns| ns.is_finite())
        .map(|ns| round(ns, 2)),
        hot_fast_pct: round(outcome.last.share.hot_fast_pct, 2),
        cold_fast_mb: round(outcome.last.share.cold_fast_mb, 3),
        time_to_90_s: outcome.milestones.to_90_s.map(|t| round(t, 3)),
        time_to_95_s: outcome.milestones.to_95_s.map(|t| round(t, 3)),
        time_to_99_s: outcome.milestones.to_99_s.map(|t| round(t, 3)),
        workers: outcome.workers,
        initial_on_node_pct: round(placed.initial_on_node_pct, 2),
        pid: placed.pid,
        node: opts.node,
        hot_pages: placed.hot_count,
        write_pct: opts.write_pct,
        seed: opts.seed,
        shift_s: opts.shift.map(|d| d.as_secs_f64()),
        shifts,
        emit,
    }
}

/// The plans of a run: one, or with `--shift-s` one per shift to come, each from the next
/// seed (the first is `first`, so a run without shifts is unchanged).
fn shifted_plans(opts: &Options, first: Plan) -> Vec<Plan> {
    let epochs = opts.shift.map_or(1, |every| {
        (opts.duration.as_secs_f64() / every.as_secs_f64()).ceil() as usize
    });
    let mut plans = vec![first];
    for e in 1..epochs.max(1) as u64 {
        let seed = opts.seed.wrapping_add(e);
        plans.push(Plan::new(
            opts.pattern,
            opts.pages(),
            opts.hot_pages(),
            opts.write_pct,
            seed,
        ));
    }
    plans
}

/// The access phase's shared state.
struct Phase<'a> {
    opts: &'a Options,
    /// The hot set's successive places; `epoch` is the one the workers use now.
    plans: &'a [Plan],
    epoch: AtomicUsize,
    map: &'a Mapping,
    fast: &'a FastNodes,
    emitter: Option<&'a Emitter>,
    pid: u32,
}

struct Outcome {
    elapsed: Duration,
    workers: Option<WorkerTimes>,
    accesses: u64,
    last: Tick,
    milestones: Milestones,
}

impl Phase<'_> {
    /// The hot set in place now.
    fn plan(&self) -> &Plan {
        &self.plans[self.epoch.load(Ordering::Relaxed)]
    }

    /// Moves the hot set when a shift is due at `now` (the first report after it); true if it
    /// moved.
    fn shift_if_due(&self, t0: Instant, now: Instant) -> bool {
        let Some(every) = self.opts.shift else {
            return false;
        };
        let due = ((now - t0).as_secs_f64() / every.as_secs_f64()) as usize;
        let due = due.min(self.plans.len() - 1);
        self.epoch.fetch_max(due, Ordering::Relaxed) < due
    }

    fn run(&self, census: &mut Census, out: &mut dyn Write) -> Result<Outcome, WorkloadError> {
        let counts: Vec<CachePadded<AtomicU64>> = (0..self.opts.threads)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        let stop = AtomicBool::new(false);
        thread::scope(|scope| {
            // Any early return below drops these: the sample writer ends, the workers are released
            // and, since the guard has raised `stop`, leave after their first chunk.
            let _stop_on_return = StopOnDrop(&stop);
            let (go, wait_for_go) = crossbeam_channel::bounded::<()>(0);
            let (emit_stop, emit_stop_wait) = crossbeam_channel::bounded::<()>(1);
            if let Some(emitter) = self.emitter {
                let name = "pghot-wl-emit".to_string();
                thread::Builder::new()
                    .name(name.clone())
                    .spawn_scoped(scope, move || emitter.write_until(&emit_stop_wait))
                    .map_err(|source| WorkloadError::Spawn { name, source })?;
            }
            let mut workers = Vec::with_capacity(self.opts.threads);
            for (index, count) in counts.iter().enumerate() {
                let name = format!("pghot-wl/{index}");
                let (stop, wait_for_go) = (&stop, wait_for_go.clone());
                let handle = thread::Builder::new()
                    .name(name.clone())
                    .spawn_scoped(scope, move || {
                        // Disconnected is the start signal: all workers start together.
                        let _ = wait_for_go.recv();
                        let before = ThreadTimes::of_current_thread();
                        self.worker(index, count, stop);
                        let after = ThreadTimes::of_current_thread();
                        after.zip(before).map(|(a, b)| a.since(b))
                    })
                    .map_err(|source| WorkloadError::Spawn { name, source })?;
                workers.push(handle);
            }

            drop(go);
            let t0 = Instant::now();
            let mut timeline = Timeline {
                t0,
                threads: self.opts.threads,
                last_at: t0,
                last_total: 0,
                milestones: Milestones::default(),
                was_hot: self.plans[0].is_hot().to_vec(),
                shifted_at_s: 0.0,
            };
            let ticking = self.tick_until_end(&mut timeline, census, &counts, out);

            stop.store(true, Ordering::Relaxed);
            let mut thread_times = Vec::with_capacity(self.opts.threads);
            for (index, worker) in workers.into_iter().enumerate() {
                thread_times.push(
                    worker
                        .join()
                        .map_err(|_| WorkloadError::WorkerPanicked(index))?,
                );
            }
            // After the workers: their last buffers may still need the writer to make room.
            drop(emit_stop);
            let ended = Instant::now();
            ticking?;

            // Workers are stopped: the last line has exact counts.
            let total = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            let last = timeline.tick(ended, total, census, self)?;
            writeln!(out, "{last}").map_err(WorkloadError::Output)?;
            Ok(Outcome {
                elapsed: ended - t0,
                workers: WorkerTimes::sum(&thread_times, (ended - t0).as_secs_f64()),
                accesses: total,
                last,
                milestones: timeline.milestones,
            })
        })
    }

    /// Reports every `report_every` until `duration` is up. A report that overruns the next
    /// deadline skips it rather than bunching lines up.
    fn tick_until_end(
        &self,
        timeline: &mut Timeline,
        census: &mut Census,
        counts: &[CachePadded<AtomicU64>],
        out: &mut dyn Write,
    ) -> Result<(), WorkloadError> {
        let end = timeline.t0 + self.opts.duration;
        let every = self.opts.report_every;
        let mut next = timeline.t0 + every;
        while next < end {
            // Nothing but the clock ends this wait: workers have no fatal errors to report.
            thread::sleep(next.saturating_duration_since(Instant::now()));
            let now = Instant::now();
            if self.shift_if_due(timeline.t0, now) {
                timeline.shifted(now, self.plan());
                writeln!(out, "shift: t={:.2} hot set moved", timeline.shifted_at_s)
                    .map_err(WorkloadError::Output)?;
            }
            let total = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            let tick = timeline.tick(now, total, census, self)?;
            writeln!(out, "{tick}").map_err(WorkloadError::Output)?;
            let after = Instant::now();
            while next <= after {
                next += every;
            }
        }
        thread::sleep(end.saturating_duration_since(Instant::now()));
        Ok(())
    }

    fn worker(&self, index: usize, count: &AtomicU64, stop: &AtomicBool) {
        let mem = self.map.words();
        let base = self.map.addr();
        let tid = sys::thread_id();
        let mut cursor = self.plans[0].cursor(self.opts.seed, index as u64);
        let period = self.opts.emit.as_ref().map(|e| e.period);
        let mut sampling = self.emitter.map(|e| e.worker(self.pid, tid)).zip(period);
        if let Some((emitter, _)) = sampling.as_mut() {
            emitter.stamp(pghotd::clock::monotonic_ns(), sys::current_cpu());
        }
        let mut until_sample = sampling.as_ref().map_or(u64::MAX, |(_, period)| *period);
        let mut done = 0u64;
        loop {
            let plan = self.plan();
            for _ in 0..CHUNK {
                let access = plan.access(&mut cursor, mem);
                until_sample -= 1;
                if until_sample == 0
                    && let Some((emitter, period)) = sampling.as_mut()
                {
                    until_sample = *period;
                    let vaddr = base + access.word as u64 * 8;
                    emitter.emit(vaddr, access.store);
                }
            }
            done += CHUNK;
            count.store(done, Ordering::Relaxed);
            if let Some((emitter, _)) = sampling.as_mut() {
                emitter.stamp(pghotd::clock::monotonic_ns(), sys::current_cpu());
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        std::hint::black_box(cursor.sink());
    }
}

/// Raises the stop flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Interval bookkeeping between report lines.
struct Timeline {
    t0: Instant,
    threads: usize,
    last_at: Instant,
    last_total: u64,
    milestones: Milestones,
    /// Every page the hot set has been on (see [`TierShare::of_moving`]).
    was_hot: Vec<bool>,
    /// When the hot set last moved, seconds from `t0`; milestones count from it.
    shifted_at_s: f64,
}

impl Timeline {
    /// The hot set moved to `plan` at `now`: its milestones start again.
    fn shifted(&mut self, now: Instant, plan: &Plan) {
        for (was, &is) in self.was_hot.iter_mut().zip(plan.is_hot()) {
            *was |= is;
        }
        self.shifted_at_s = (now - self.t0).as_secs_f64();
        self.milestones = Milestones::default();
    }

    /// The line for `now`, when the workers had made `total` accesses; the census runs after.
    fn tick(
        &mut self,
        now: Instant,
        total: u64,
        census: &mut Census,
        phase: &Phase<'_>,
    ) -> Result<Tick, WorkloadError> {
        let interval = now.saturating_duration_since(self.last_at);
        let ns = report::ns_per_access(
            interval.as_nanos() as f64,
            self.threads,
            total - self.last_total,
        );
        let share = TierShare::of_moving(
            census.refresh()?,
            phase.plan().is_hot(),
            &self.was_hot,
            phase.fast,
        );
        let tick = Tick {
            t_s: (now - self.t0).as_secs_f64(),
            ns_per_access: ns,
            share,
            accesses: total,
        };
        self.milestones.observe_since(&tick, self.shifted_at_s);
        self.last_at = now;
        self.last_total = total;
        Ok(tick)
    }
}
