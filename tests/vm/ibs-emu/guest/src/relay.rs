//! `pgibs-guest relay`: the plugin's samples, each with the pid it belongs to, as pghot-trace
//! v1 lines into a FIFO that pghotd reads with its `trace:` source.
//!
//! A plugin record has a virtual and a guest-physical address but no process (plugin API v1
//! tells a memory callback neither CR3 nor the task). The process is the one whose page table
//! maps that virtual page to that frame: /proc/PID/pagemap gives each virtual page's frame (bit
//! 63 present, bits 0-54 the PFN; Documentation/admin-guide/mm/pagemap.rst, fs/proc/task_mmu.c
//! `pagemap_read`). Without `--only`, every user process is a candidate, as perf would
//! attribute a hardware sample to whatever ran, so pghotd's own scope decides what it manages;
//! the process last found for the sample's vCPU and the busiest are tried first, the others
//! within a budget of searches a second (see `Attributor::pid_of`). With `--only PID,...` (the
//! pids pghotd is told to manage, its `pids` setting) only those are candidates: pghotd would
//! drop every other process's sample at its scope (src/scope), so the relay need not find out
//! whose it was. A record at an address none of them has mapped (their /proc/PID/maps, read at
//! each rescan) is dropped without a system call; any other costs at most one pagemap read per
//! managed process.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pghotd::clock::monotonic_ns;
use pghotd::migrator::ratelimit::{Clock, MonotonicClock, TokenBucket};
use pghotd::sample::{AccessOp, DataSource, Sample, SourceKind};
use pghotd::sampler::pace::{self, DrainPace};
use pghotd::sampler::trace::{TRACE_HEADER, TraceWriter};
use pghotd::topology::{SysfsRoot, Topology};

use crate::maps::Spans;
use crate::records::{Record, Splitter};
use crate::{Ctl, Res, port};

/// How often the candidate processes are listed again (exited ones pruned, the busiest
/// first, the frames nobody mapped forgotten).
const RESCAN: Duration = Duration::from_millis(500);
/// Most (page, frame) pairs `known` holds.
const KNOWN_MAX: usize = 1 << 18;
/// Processes tried for every record not already known: the vCPU's last and the busiest.
const QUICK_TRIES: usize = 2;
/// Searches of every other listed process a second, at most.
const SEARCHES_PER_S: u64 = 25;
/// What the port's queue should hold at most between two batches: a sixteenth of the guest's
/// receive buffers (drivers/char/virtio_console.c `fill_queue`: one page each, as many as
/// the virtqueue holds, 128 in QEMU's virtio-serial), so that a busy stream never waits on
/// the relay.
const PORT_BYTES_A_BATCH: usize = 32 << 10;
/// One in this many records the task channel named (and `--only` kept) is checked against
/// pagemap: a read per 64 records costs the relay little, and a Redis phase's 40,000 such
/// records give over 600 checks.
const TASK_CHECK_EVERY: u64 = 64;
/// Most pages `Figures::missed` keeps.
const MISSED_PAGES: usize = 16_384;
/// How often the figures are written to the stats file while the relay runs (without the
/// per-page list of misses, which is sorted once, at the end).
const STATS_EVERY: Duration = Duration::from_secs(1);
/// The lower canonical half: user space (the plugin's own test for user mode).
const USER_TOP: u64 = 0x0000_8000_0000_0000;

struct Proc {
    pid: u32,
    pagemap: File,
    /// Records found to be this process's, for the order candidates are tried in.
    hits: u64,
    /// What it had mapped at the last rescan; with `--only` only (without it, a record is
    /// tried against a few processes and costs those reads whatever their maps say).
    spans: Spans,
}

/// Finds the process a record belongs to.
struct Attributor {
    procs: Vec<Proc>,
    scanned: Option<Instant>,
    /// Index into `procs` of the last process found, per vCPU.
    last: HashMap<u32, u32>,
    /// Frames no process mapped at that address since the last rescan (an exited process,
    /// a page being migrated): not looked up again until the next rescan.
    nobody: HashSet<u64>,
    /// (virtual page, frame) -> pid: a hot page is sampled again and again, and each pagemap
    /// read is a system call (tens of microseconds under TCG). Kept across rescans; an entry
    /// of a process that has exited is dropped when it is next used (pruning the whole map at
    /// each rescan walked megabytes every half second, and under the plugin's modelled cache
    /// each of the relay's memory misses costs the guest as one of the program's does). A
    /// moved page has a new frame, so a new key, and another process mapping the same frame
    /// at the same address after it was freed is left to chance. Cleared past [`KNOWN_MAX`].
    known: HashMap<(u64, u64), u32>,
    /// The pids the last rescan listed.
    live: HashSet<u32>,
    /// Pids with no executable (kernel threads), not looked at again while they exist (a pid
    /// reused between two rescans would be missed: with pid_max in the millions, rare).
    not_user: HashSet<u32>,
    /// pagemap reads, for the cost figure.
    reads: u64,
    /// Of those, the reads for records left unattributed.
    miss_reads: u64,
    budget: Budget,
    /// Records left unattributed because the search budget was spent.
    skipped: u64,
    /// The only candidates (`--only`), or every user process.
    only: Option<Vec<u32>>,
    /// Records at addresses no candidate had mapped at the last rescan (`--only`): dropped
    /// without a read. Of the records of a Redis phase, 23,208 of 41,084 were other processes'
    /// and cost 17,439 of the 22,219 pagemap reads before this check.
    outside_maps: u64,
    /// Rescans that could not read a candidate's maps.
    maps_errors: u64,
    /// Records the plugin named the process of (the task channel).
    by_task: u64,
    /// Of those, the ones `--only` kept (the check's cadence).
    by_task_kept: u64,
    /// One in [`TASK_CHECK_EVERY`] of those kept, checked against the named process's
    /// pagemap: the channel's accuracy, measured in the guest.
    task_checks: u64,
    /// Of those, the ones whose page that process did not map at that frame (a wrong task, or
    /// a page moved between the access and the check).
    task_mismatches: u64,
    /// The pagemaps the checks read, by pid.
    check_maps: HashMap<u32, File>,
}

/// Whose a record is, as far as the relay finds out.
#[derive(Debug, PartialEq)]
enum Found {
    Pid(u32),
    /// At an address no candidate had mapped (`--only`): another process's record.
    Outside,
    /// Not found: no candidate maps that frame at that address, or the search budget is spent.
    Nobody,
}

/// One pagemap entry: `Some(pfn)` when present, `None` when absent; `Err` when the process
/// is gone.
fn frame(pagemap: &File, vaddr: u64) -> std::io::Result<Option<u64>> {
    let mut e = [0u8; 8];
    let n = pagemap.read_at(&mut e, (vaddr >> 12) * 8)?;
    if n != 8 {
        return Err(ErrorKind::UnexpectedEof.into());
    }
    Ok(crate::pagemap::frame(u64::from_le_bytes(e)))
}

/// The pids /proc lists now, ascending.
fn proc_pids() -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}

impl Attributor {
    fn new(only: Option<Vec<u32>>) -> Attributor {
        Attributor {
            procs: Vec::new(),
            scanned: None,
            last: HashMap::new(),
            nobody: HashSet::new(),
            known: HashMap::new(),
            live: HashSet::new(),
            not_user: HashSet::new(),
            reads: 0,
            miss_reads: 0,
            budget: Budget::new(SEARCHES_PER_S),
            skipped: 0,
            only,
            outside_maps: 0,
            maps_errors: 0,
            by_task: 0,
            by_task_kept: 0,
            task_checks: 0,
            task_mismatches: 0,
            check_maps: HashMap::new(),
        }
    }

    /// Every [`TASK_CHECK_EVERY`]th record the task channel named and `--only` kept: does the
    /// named process map that page at that frame? One pagemap read per check.
    fn check_task(&mut self, r: &Record) {
        self.by_task_kept += 1;
        if !self.by_task_kept.is_multiple_of(TASK_CHECK_EVERY) {
            return;
        }
        let map = match self.check_maps.entry(r.task) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                match File::open(format!("/proc/{}/pagemap", r.task)) {
                    Ok(f) => e.insert(f),
                    Err(_) => return,
                }
            }
        };
        self.task_checks += 1;
        if !matches!(frame(map, r.vaddr), Ok(Some(f)) if f == r.paddr >> 12) {
            self.task_mismatches += 1;
        }
    }

    /// Lists user processes (those with an executable: kernel threads have none) and opens
    /// the pagemap of new ones.
    fn rescan(&mut self) {
        // With `--only`, the pids still alive, without listing /proc.
        let pids = match &self.only {
            Some(only) => only
                .iter()
                .copied()
                .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
                .collect(),
            None => proc_pids(),
        };
        let mut old: HashMap<u32, Proc> = self.procs.drain(..).map(|p| (p.pid, p)).collect();
        let live: HashSet<u32> = pids.iter().copied().collect();
        self.not_user.retain(|pid| live.contains(pid));
        for pid in pids {
            let proc = match old.remove(&pid) {
                Some(p) => p,
                None => match self.open_user(pid) {
                    Some(p) => p,
                    None => continue,
                },
            };
            self.procs.push(proc);
        }
        if self.only.is_some() {
            // A mapping made since the last rescan is not known until the next (within
            // RESCAN): its records until then are dropped as outside.
            // One that cannot be read (the process exiting) keeps what it had.
            for p in &mut self.procs {
                match Spans::read(p.pid) {
                    Ok(spans) => p.spans = spans,
                    Err(_) => self.maps_errors += 1,
                }
            }
        }
        // The busiest first: most records need one or two reads.
        self.procs.sort_by_key(|p| std::cmp::Reverse(p.hits));
        self.last.clear();
        self.nobody.clear();
        self.live = live;
        if self.known.len() > KNOWN_MAX {
            self.known.clear();
        }
        self.scanned = Some(Instant::now());
    }

    /// A user process's entry with its pagemap open; `None` for a kernel thread (remembered)
    /// or a process already gone.
    fn open_user(&mut self, pid: u32) -> Option<Proc> {
        if self.not_user.contains(&pid) {
            return None;
        }
        if std::fs::read_link(format!("/proc/{pid}/exe")).is_err() {
            self.not_user.insert(pid);
            return None;
        }
        let pagemap = File::open(format!("/proc/{pid}/pagemap")).ok()?;
        Some(Proc {
            pid,
            pagemap,
            hits: 0,
            spans: Spans::default(),
        })
    }

    /// Tries `procs[i]` for `r`'s page; on a match, remembers it for the vCPU and the page.
    fn try_proc(&mut self, i: usize, r: &Record, pfn: u64) -> Option<u32> {
        self.reads += 1;
        match frame(&self.procs[i].pagemap, r.vaddr) {
            Ok(Some(f)) if f == pfn => {
                self.procs[i].hits += 1;
                self.known.insert((r.vaddr >> 12, pfn), self.procs[i].pid);
                let pid = self.procs[i].pid;
                let at = self.move_up(i);
                self.last.insert(r.vcpu, at as u32);
                Some(pid)
            }
            _ => None,
        }
    }

    /// Keeps the busiest processes at the front between rescans: a process found by a search
    /// that now has more records than the last of the quick tries takes its place, so a
    /// program that starts being sampled (the phase's first second, before any rescan has
    /// sorted it forward) is not left to the search budget. Returns `i`'s new index.
    fn move_up(&mut self, i: usize) -> usize {
        let edge = QUICK_TRIES.min(self.procs.len()).saturating_sub(1);
        if i <= edge || self.procs[i].hits <= self.procs[edge].hits {
            return i;
        }
        self.procs.swap(i, edge);
        for at in self.last.values_mut() {
            if *at as usize == i {
                *at = edge as u32;
            } else if *at as usize == edge {
                *at = i as u32;
            }
        }
        edge
    }

    /// Rescans when [`RESCAN`] has passed since the last; called once a batch, not once a
    /// record (a clock read each).
    fn rescan_if_due(&mut self) {
        if self.scanned.is_none_or(|t| t.elapsed() >= RESCAN) {
            self.rescan();
        }
    }

    fn pid_of(&mut self, r: &Record) -> Found {
        // The plugin knew whose it was (the task channel, taskchan.rs), as perf knows on real
        // hardware: no lookup, and no rescans while every record comes so.
        if r.task != 0 {
            self.by_task += 1;
            return match &self.only {
                Some(only) if !only.contains(&r.task) => Found::Outside,
                Some(_) => {
                    self.check_task(r);
                    Found::Pid(r.task)
                }
                None => Found::Pid(r.task),
            };
        }
        self.rescan_if_due();
        // First, as it is the cheapest test (a binary search of a few hundred ranges) and the
        // one most records fail: over half of a Redis phase's records are other processes'.
        if self.only.is_some() && !self.procs.iter().any(|p| p.spans.covers(r.vaddr)) {
            self.outside_maps += 1;
            return Found::Outside;
        }
        let pfn = r.paddr >> 12;
        if self.nobody.contains(&pfn) {
            return Found::Nobody;
        }
        let key = (r.vaddr >> 12, pfn);
        match self.known.get(&key) {
            Some(&pid) if self.live.contains(&pid) => return Found::Pid(pid),
            Some(_) => {
                self.known.remove(&key);
            }
            None => {}
        }
        let reads_before = self.reads;
        let first = self.last.get(&r.vcpu).map(|&i| i as usize);
        let listed = self.procs.len();
        // The vCPU's last process and the busiest first (`rescan` sorts them so), always.
        let quick: Vec<usize> = first
            .into_iter()
            .chain((0..listed.min(QUICK_TRIES)).filter(|&i| Some(i) != first))
            .collect();
        for &i in &quick {
            if let Some(pid) = self.try_proc(i, r, pfn) {
                return Found::Pid(pid);
            }
        }
        // The rest only within the budget: most records no busy process maps belong to
        // processes that lived a few milliseconds (the rig's commands), whose search costs a
        // read of every listed process and finds nothing. With every candidate tried already
        // (`--only` a few pids) there is nothing to search and the frame is nobody's.
        let rest: Vec<usize> = (0..listed).filter(|i| !quick.contains(i)).collect();
        if !rest.is_empty() && !self.budget.take() {
            self.skipped += 1;
            self.miss_reads += self.reads - reads_before;
            return Found::Nobody;
        }
        for i in rest {
            if let Some(pid) = self.try_proc(i, r, pfn) {
                return Found::Pid(pid);
            }
        }
        self.miss_reads += self.reads - reads_before;
        self.nobody.insert(pfn);
        Found::Nobody
    }
}

/// At most `per_s` a second, as many at once: pghotd's own migration rate limiter, counting
/// searches instead of bytes.
struct Budget {
    bucket: TokenBucket,
    clock: MonotonicClock,
}

impl Budget {
    fn new(per_s: u64) -> Budget {
        let clock = MonotonicClock::default();
        Budget {
            bucket: TokenBucket::new(per_s, clock.now()),
            clock,
        }
    }

    fn take(&mut self) -> bool {
        self.bucket.take_units(self.clock.now(), 1, 1) == 1
    }
}

#[derive(Default)]
struct Figures {
    records: u64,
    kernel_half: u64,
    attributed: u64,
    unattributed: u64,
    /// Records of the relay's own accesses, not passed on.
    own: u64,
    lines: u64,
    pipe_opens: u64,
    /// Reads of the samples port (each returns one virtio receive buffer at most).
    port_reads: u64,
    batches: u64,
    batch_ns_total: u64,
    batch_ns_max: u64,
    by_pid: HashMap<u32, u64>,
    /// Records found nobody's, per virtual page (at most [`MISSED_PAGES`] pages), to tell where
    /// they come from: stack and library addresses of processes that lived a few milliseconds.
    /// Records outside the `--only` candidates' maps are other processes' and not listed.
    missed: HashMap<u64, u64>,
}

impl Figures {
    /// Writes the figures; `end`: with the most missed pages, sorted (a walk of `missed`).
    fn write(&self, path: &str, attributor: &Attributor, skipped: u64, end: bool) {
        let mut top: Vec<(u32, u64)> = self.by_pid.iter().map(|(&p, &n)| (p, n)).collect();
        top.sort_by_key(|&(p, n)| (std::cmp::Reverse(n), p));
        let top: Vec<String> = top
            .iter()
            .take(5)
            .map(|(p, n)| format!("{p}:{n}"))
            .collect();
        let text = format!(
            "records={} kernel_half={} attributed={} unattributed={} relay_own={} lines={} pipe_opens={} port_reads={} pagemap_reads={} miss_reads={} outside_maps={} maps_errors={} by_task={} task_checks={} task_mismatches={} searches_skipped={} batches={} batch_us_mean={:.1} batch_us_max={:.1} skipped_bytes={} top_pids={} missed_pages={} top_missed={}\n",
            self.records,
            self.kernel_half,
            self.attributed,
            self.unattributed,
            self.own,
            self.lines,
            self.pipe_opens,
            self.port_reads,
            attributor.reads,
            attributor.miss_reads,
            attributor.outside_maps,
            attributor.maps_errors,
            attributor.by_task,
            attributor.task_checks,
            attributor.task_mismatches,
            attributor.skipped,
            self.batches,
            self.batch_ns_total as f64 / self.batches.max(1) as f64 / 1e3,
            self.batch_ns_max as f64 / 1e3,
            skipped,
            top.join(","),
            self.missed.len(),
            if !end {
                "-".to_string()
            } else {
                let mut m: Vec<(u64, u64)> = self.missed.iter().map(|(&p, &n)| (p, n)).collect();
                m.sort_by_key(|&(p, n)| (std::cmp::Reverse(n), p));
                m.iter()
                    .take(12)
                    .map(|(p, n)| format!("{:#x}:{n}", p << 12))
                    .collect::<Vec<_>>()
                    .join(",")
            },
        );
        let tmp = format!("{path}.tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

/// The trace's sample: the node from the kernel's own memory blocks, the data source from
/// the node's tier (a lower-tier node is the slow, CXL-like memory).
fn sample(r: &Record, pid: u32, topo: &Topology, time_ns: u64) -> Sample {
    let node = topo.physmap().node_of(r.paddr);
    Sample {
        time_ns,
        cpu: r.vcpu,
        pid,
        // The plugin does not know the thread; the process is what pghotd keys on.
        tid: pid,
        vaddr: r.vaddr,
        paddr: Some(r.paddr),
        op: if r.is_store {
            AccessOp::Store
        } else {
            AccessOp::Load
        },
        served_from: match node {
            Some(n) if topo.is_lower_tier(n) => DataSource::ExtMem,
            Some(_) => DataSource::LocalDram,
            None => DataSource::Unknown,
        },
        node,
        latency: None,
        source: SourceKind::Trace,
    }
}

/// Opens the FIFO for writing (waits for a reader) and writes the trace's first lines.
fn open_out(out: &str, period: u64) -> Res<File> {
    let mut f = OpenOptions::new()
        .write(true)
        .open(out)
        .map_err(|e| format!("{out}: {e}"))?;
    let head = format!("{TRACE_HEADER}\n# sample_period {period}\n");
    f.write_all(head.as_bytes())
        .map_err(|e| format!("{out}: {e}"))?;
    Ok(f)
}

/// After each batch the relay waits before reading again, so that it reads, looks up and
/// writes many records per system call rather than one; the wait bounds the delay the relay
/// adds. Each batch costs the guest a few milliseconds of a vCPU whatever it holds (waking,
/// the port's reads, the FIFO's write and pghotd's wake to read it, all under TCG), and that
/// CPU is taken from the program's vCPUs: a Redis phase at 4 ms took 25,658 batches and 24 s
/// of the relay's CPU in 120 s, at 10 ms 10,356 batches and 16.5 s (BENCHMARKS.md, "Redis on
/// the Debian guest: what pghotd cost the guest"), with `--only` still 7,401 batches of 5.3
/// records and 11.2 s in 90 s, at 40 ms 2,222 batches and 6.8-9 s. At 200 ms (t33a,
/// BENCHMARKS.md "Fewer wake-ups") the relay woke 5 times a second instead of 12 and took
/// about as much CPU (4.55 s against 4.6-4.8): past this point a busy stream's cost is per
/// record, and per read of the port, whose count the plugin's flushes set
/// (tests/vm/ibs-emu/src/io.rs `FLUSH_EVERY`). A stream that only trickles (a program with few
/// samples on the slow tier) pays per batch, so the wait follows the stream as a perf ring's
/// reader does in pghotd (src/sampler/pace.rs): the time the program's records take to fill a
/// page of trace lines, from 100 ms to a second, as a hardware ring wakes its reader at its
/// watermark; it also reads the port before it holds [`PORT_BYTES_A_BATCH`]. With the
/// plugin's own 100 ms a sample waits at most 4 ms of the program's own time at a 100 ms wait
/// (the rig's dilation D = 50 stretches the program's time 50-fold, tests/vm/README.md "Time
/// dilation") and 22 ms at a second, as pghotd's perf sampler may hold a sample a second.
/// It woke 85-90 times in a 60 s MariaDB phase instead of 1,085, and 888 times in a Redis
/// phase instead of 2,897 (BENCHMARKS.md, "MariaDB: fewer wake-ups and fewer calls").
fn gather(
    lines: &mut DrainPace,
    port: &mut DrainPace,
    drained: &Drained,
    written: usize,
    over: Duration,
) -> Duration {
    lines.drained(written, over);
    port.drained(drained.bytes, over);
    lines.wait().min(port.wait())
}

/// O_NONBLOCK (include/uapi/asm-generic/fcntl.h), for the samples port.
const O_NONBLOCK: i32 = 0o4000;

/// What one `drain_port` read.
#[derive(Debug, Default, PartialEq)]
struct Drained {
    bytes: usize,
    reads: u64,
}

/// Reads `port` until it has nothing more (WouldBlock, or 0: the host side gone), handing each
/// read's bytes to `feed`. A virtio port's read returns at most one of the guest's receive
/// buffers (drivers/char/virtio_console.c `fill_readbuf`), however much more is queued and
/// however large the caller's buffer: one read per batch drained one buffer per 40 ms, fewer
/// records than the plugin sent, so the queue filled, the plugin's rings overflowed (it dropped
/// 13-29 % of its samples) and the rest waited seconds in the queue.
fn drain_port(
    port: &mut impl Read,
    chunk: &mut [u8],
    mut feed: impl FnMut(&[u8]),
) -> std::io::Result<Drained> {
    let mut d = Drained::default();
    loop {
        match port.read(chunk) {
            Ok(0) => return Ok(d),
            Ok(n) => {
                d.bytes += n;
                d.reads += 1;
                feed(&chunk[..n]);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(d),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One batch's handling of records: each becomes a trace line for pghotd, or is counted.
struct PassOn<'a> {
    attributor: &'a mut Attributor,
    fig: &'a mut Figures,
    topo: &'a Topology,
    own_pid: u32,
    exclude: &'a [u32],
    /// The batch's time, every sample's.
    now_ns: u64,
}

impl PassOn<'_> {
    fn record(&mut self, r: &Record, w: &mut TraceWriter<&mut Vec<u8>>) {
        let fig = &mut *self.fig;
        fig.records += 1;
        if r.vaddr >= USER_TOP {
            fig.kernel_half += 1;
            return;
        }
        match self.attributor.pid_of(r) {
            // The relay is part of the emulated hardware: a real machine has no such
            // process, so its own accesses are not samples (fed to pghotd they would feed
            // back: more samples, more relay work, more samples). The same for the pids it is
            // told to leave out (the promoter: see `relay`).
            Found::Pid(pid) if pid == self.own_pid || self.exclude.contains(&pid) => fig.own += 1,
            Found::Pid(pid) => {
                fig.attributed += 1;
                *fig.by_pid.entry(pid).or_default() += 1;
                // A Vec does not fail to grow.
                let _ = w.write_sample(&sample(r, pid, self.topo, self.now_ns));
                fig.lines += 1;
            }
            // Counted by the attributor (`outside_maps`); not a failure to find the owner, so
            // not listed among the misses (a hash insert a record saved).
            Found::Outside => fig.unattributed += 1,
            Found::Nobody => {
                fig.unattributed += 1;
                let vpn = r.vaddr >> 12;
                if fig.missed.len() < MISSED_PAGES || fig.missed.contains_key(&vpn) {
                    *fig.missed.entry(vpn).or_default() += 1;
                }
            }
        }
    }
}

/// `exclude`: pids whose samples are dropped like the relay's own. Under TCG and the rig's time
/// dilation a promoter costs the guest far more than it costs hardware (BENCHMARKS.md, "Redis
/// on the Debian guest: six promoters"), so its own share of the guest's memory operations, and
/// so of the samples, is far larger too, and each of its own samples makes more work for it (in
/// one Redis phase, 60 of 87 thousand samples were pghotd's own).
/// Ends on SIGTERM (the rig's end of the phase) with its figures written, so that they cover
/// the phase and nothing after it.
/// `only`: see the module's comment.
pub fn relay(
    out: &str,
    period: u64,
    stats: &str,
    only: Option<Vec<u32>>,
    exclude: &[u32],
) -> Res<()> {
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&term))
        .map_err(|e| format!("SIGTERM handler: {e}"))?;
    let topo = Topology::read(SysfsRoot::new("/sys")).map_err(|e| format!("topology: {e}"))?;
    let path = port("pghot.samples")?;
    // Non-blocking, so that each batch reads until the port is empty (`drain_port`).
    let mut samples = OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    // Opened first, then SYNC: the header comes after the open, so it is not discarded.
    Ctl::open_retrying()?.ok("SYNC")?;
    let mut fifo = open_out(out, period)?;
    // The rig starts the phase on this line: every promoter is at work before it begins.
    println!("relay: ready");
    std::io::stdout()
        .flush()
        .map_err(|e| format!("stdout: {e}"))?;
    let mut fig = Figures {
        pipe_opens: 1,
        ..Figures::default()
    };
    let mut attributor = Attributor::new(only);
    let mut split = Splitter::default();
    let mut chunk = vec![0u8; 1 << 16];
    let mut lines: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut stats_at = Instant::now();
    let own_pid = std::process::id();
    let mut lines_pace = DrainPace::new(pace::PAGE_BYTES);
    let mut port_pace = DrainPace::new(PORT_BYTES_A_BATCH);
    let mut batch_at = Instant::now();
    while !term.load(Ordering::Relaxed) {
        let began = Instant::now();
        lines.clear();
        let mut w = TraceWriter::continuing(&mut lines);
        // One clock read a batch: the batch's records are handled within milliseconds of
        // each other, and each read is dear under TCG.
        let now_ns = monotonic_ns();
        let mut pass = PassOn {
            attributor: &mut attributor,
            fig: &mut fig,
            topo: &topo,
            own_pid,
            exclude,
            now_ns,
        };
        let drained = drain_port(&mut samples, &mut chunk, |bytes| {
            split.feed(bytes, |r| pass.record(&r, &mut w))
        })
        .map_err(|e| format!("{path}: {e}"))?;
        fig.port_reads += drained.reads;
        let over = began - batch_at;
        batch_at = began;
        let wait = gather(&mut lines_pace, &mut port_pace, &drained, lines.len(), over);
        if drained.bytes == 0 {
            // Nothing yet, or no process on the other side (the plugin reconnects).
            std::thread::sleep(wait);
            continue;
        }
        if !lines.is_empty()
            && let Err(e) = fifo.write_all(&lines)
        {
            // pghotd closed the FIFO (stopped or restarted): wait for the next reader.
            if e.kind() != ErrorKind::BrokenPipe {
                return Err(format!("{out}: {e}"));
            }
            fifo = open_out(out, period)?;
            fig.pipe_opens += 1;
        }
        let took = began.elapsed().as_nanos() as u64;
        fig.batches += 1;
        fig.batch_ns_total += took;
        fig.batch_ns_max = fig.batch_ns_max.max(took);
        if stats_at.elapsed() >= STATS_EVERY {
            fig.write(stats, &attributor, split.skipped, false);
            stats_at = Instant::now();
        }
        std::thread::sleep(wait);
    }
    fig.write(stats, &attributor, split.skipped, true);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// By hand: the wait is the shorter of the two paces. 1,024 bytes of lines in 100 ms take
    /// 400 ms to make a page; 24 KiB of records from the port take 133 ms to make 32 KiB.
    #[test]
    fn the_relay_waits_for_a_page_of_lines_unless_the_port_fills_first() {
        let ms = Duration::from_millis;
        let (mut lines, mut port) = (
            DrainPace::new(pace::PAGE_BYTES),
            DrainPace::new(PORT_BYTES_A_BATCH),
        );
        let quiet = Drained {
            bytes: 2400,
            reads: 1,
        };
        assert_eq!(
            gather(&mut lines, &mut port, &quiet, 1024, ms(100)),
            ms(400)
        );
        let busy = Drained {
            bytes: 24 << 10,
            reads: 6,
        };
        let wait = gather(&mut lines, &mut port, &busy, 1024, ms(100));
        assert!(wait > ms(133) && wait < ms(134), "{wait:?}");
        // Nothing at all: a second.
        let none = Drained::default();
        assert_eq!(gather(&mut lines, &mut port, &none, 0, ms(400)), ms(1000));
    }

    /// A port as virtio_console's `fill_readbuf` serves one: each read returns at most one
    /// queued buffer, then WouldBlock (O_NONBLOCK) once none is left.
    struct OneBufferPerRead(VecDeque<Vec<u8>>);

    impl Read for OneBufferPerRead {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let Some(mut b) = self.0.pop_front() else {
                return Err(ErrorKind::WouldBlock.into());
            };
            let n = b.len().min(out.len());
            out[..n].copy_from_slice(&b[..n]);
            if n < b.len() {
                self.0.push_front(b.split_off(n));
            }
            Ok(n)
        }
    }

    /// Three queued buffers (24, 48 and 24 bytes) come out in one drain, in order, in three
    /// reads; a second drain finds nothing.
    #[test]
    fn a_drain_reads_every_queued_buffer() {
        let bufs = [vec![1u8; 24], vec![2u8; 48], vec![3u8; 24]];
        let mut port = OneBufferPerRead(bufs.iter().cloned().collect());
        let mut chunk = vec![0u8; 1 << 16];
        let mut got = Vec::new();
        let d = drain_port(&mut port, &mut chunk, |b| got.extend_from_slice(b)).unwrap();
        assert_eq!(
            d,
            Drained {
                bytes: 96,
                reads: 3
            }
        );
        assert_eq!(got, bufs.concat());
        let d = drain_port(&mut port, &mut chunk, |_| panic!("nothing left")).unwrap();
        assert_eq!(d, Drained::default());
    }

    /// A buffer larger than the chunk takes two reads; a real non-blocking socket behaves the
    /// same (WouldBlock once empty).
    #[test]
    fn a_drain_splits_what_does_not_fit_and_stops_on_would_block() {
        let mut port = OneBufferPerRead(VecDeque::from([vec![7u8; 40]]));
        let mut chunk = vec![0u8; 32];
        let mut sizes = Vec::new();
        let d = drain_port(&mut port, &mut chunk, |b| sizes.push(b.len())).unwrap();
        assert_eq!((d.bytes, d.reads, sizes), (40, 2, vec![32, 8]));

        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.write_all(&[9u8; 100]).unwrap();
        let d = drain_port(&mut a, &mut [0u8; 64], |_| {}).unwrap();
        assert_eq!(d.bytes, 100);
        drop(b);
        // The other side gone: 0, the end.
        assert_eq!(drain_port(&mut a, &mut [0u8; 64], |_| {}).unwrap().bytes, 0);
    }

    /// With `--only` this process: a record at page 0 (mapped by nobody) is dropped without a
    /// pagemap read; one at a stack address is read (and, at a frame that is not the stack
    /// page's, not attributed).
    #[test]
    fn only_reads_pagemap_for_addresses_the_candidates_map() {
        let mut a = Attributor::new(Some(vec![std::process::id()]));
        a.rescan_if_due();
        let at = |vaddr: u64| Record {
            vaddr,
            paddr: !0xfff,
            vcpu: 0,
            is_store: false,
            task: 0,
        };
        assert_eq!(a.pid_of(&at(0)), Found::Outside);
        assert_eq!((a.outside_maps, a.reads), (1, 0));
        let local = 7u64;
        assert_eq!(a.pid_of(&at(&local as *const u64 as u64)), Found::Nobody);
        assert_eq!((a.outside_maps, a.reads), (1, 1));
    }

    /// A record the plugin named the process of is that process's, or outside `--only`'s
    /// list, with no pagemap read and no rescan, whatever its address.
    #[test]
    fn a_record_with_its_task_is_taken_at_its_word() {
        let me = std::process::id();
        let mut a = Attributor::new(Some(vec![me, 4_194_303]));
        let r = |task: u32| Record {
            vaddr: 0x1000,
            paddr: 0x2000,
            vcpu: 1,
            is_store: true,
            task,
        };
        assert_eq!(a.pid_of(&r(4_194_303)), Found::Pid(4_194_303));
        assert_eq!(a.pid_of(&r(me)), Found::Pid(me));
        assert_eq!(a.pid_of(&r(1)), Found::Outside);
        assert_eq!((a.by_task, a.reads, a.outside_maps), (3, 0, 0));
        assert!(a.scanned.is_none(), "no rescan for named records");
        let mut every = Attributor::new(None);
        assert_eq!(every.pid_of(&r(1)), Found::Pid(1));
    }

    /// The check of one kept named record in 64: this process's own page at its own frame
    /// passes, at another frame fails.
    #[test]
    fn one_named_record_in_64_is_checked_against_pagemap() {
        let me = std::process::id();
        let page = vec![1u8; 8192];
        let vaddr = (page.as_ptr() as u64).div_ceil(4096) * 4096;
        let pagemap = File::open("/proc/self/pagemap").unwrap();
        let Ok(Some(pfn)) = frame(&pagemap, vaddr) else {
            eprintln!("no frame in /proc/self/pagemap: skipped");
            return;
        };
        if pfn == 0 {
            eprintln!("frames hidden (not root): skipped");
            return;
        }
        let mut a = Attributor::new(Some(vec![me]));
        let r = |paddr: u64| Record {
            vaddr,
            paddr,
            vcpu: 0,
            is_store: false,
            task: me,
        };
        // Other processes' records (outside `--only`) do not count towards the cadence.
        let other = Record {
            task: 1,
            ..r(pfn << 12)
        };
        for _ in 0..127 {
            assert_eq!(a.pid_of(&other), Found::Outside);
            assert_eq!(a.pid_of(&r(pfn << 12)), Found::Pid(me));
        }
        assert_eq!(a.task_checks, 1);
        assert_eq!(a.pid_of(&r(pfn << 12)), Found::Pid(me));
        assert_eq!((a.task_checks, a.task_mismatches), (2, 0));
        for _ in 0..64 {
            a.pid_of(&r((pfn + 1) << 12));
        }
        assert_eq!((a.task_checks, a.task_mismatches), (3, 1));
        drop(page);
    }

    /// Records of this process's own heap, at the frames its pagemap gives, become trace lines
    /// that pghotd's parser reads back with the same pid, address and frame; records at an
    /// address the process has not mapped are dropped as outside without a pagemap read.
    /// Also the relay's cost harness: `RELAY_COST_RECORDS=200000` under cachegrind gives its
    /// instructions per record (BENCHMARKS.md, "Cheaper trace parsing and relay records").
    #[test]
    fn pass_on_writes_own_pages_as_lines_and_drops_outside() {
        let n: usize = std::env::var("RELAY_COST_RECORDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4_000);
        let pid = std::process::id();
        // 16 MiB of heap, every page touched so it has a frame.
        let heap = vec![1u8; 16 << 20];
        let lo = (heap.as_ptr() as u64).div_ceil(4096) * 4096;
        let hi = (heap.as_ptr() as u64 + heap.len() as u64) & !4095;
        let pagemap = File::open("/proc/self/pagemap").unwrap();
        let frames = crate::pagemap::frames(&pagemap, lo, hi).unwrap();
        // Without CAP_SYS_ADMIN pagemap shows no frames (pagemap.rst): nothing to attribute.
        let Some(&Some(first)) = frames.first() else {
            eprintln!("no frames in /proc/self/pagemap (not root): skipped");
            return;
        };
        assert_ne!(first, 0, "frames hidden (not root)");
        let topo = Topology::read(SysfsRoot::new("/sys")).unwrap();
        let mut attributor = Attributor::new(Some(vec![pid]));
        attributor.rescan_if_due();
        let mut fig = Figures::default();
        let mut pass = PassOn {
            attributor: &mut attributor,
            fig: &mut fig,
            topo: &topo,
            // Not this process: its records are the program's here.
            own_pid: 0,
            exclude: &[],
            now_ns: 1,
        };
        let mut lines = Vec::new();
        let mut w = TraceWriter::continuing(&mut lines);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut inside = 0;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // About half the records outside (as in a Redis phase): page 1, mapped by nobody.
            let r = if i % 2 == 0 {
                let page = (x % frames.len() as u64) as usize;
                inside += 1;
                Record {
                    vaddr: lo + (page as u64) * 4096 + (x & 0xfc0),
                    paddr: frames[page].unwrap() * 4096 + (x & 0xfc0),
                    vcpu: (x >> 40) as u32 & 1,
                    is_store: x & 1 == 1,
                    task: 0,
                }
            } else {
                Record {
                    vaddr: 0x1000 + (x & 0xfc0),
                    paddr: 0x8000_0000,
                    vcpu: 0,
                    is_store: false,
                    task: 0,
                }
            };
            pass.record(&r, &mut w);
        }
        drop(heap);
        assert_eq!((fig.attributed, fig.lines), (inside, inside));
        assert_eq!(attributor.outside_maps, n as u64 - inside);
        // At most one pagemap read per page: the rest were known.
        assert!(
            attributor.reads <= frames.len() as u64,
            "{}",
            attributor.reads
        );
        let text = String::from_utf8(lines).unwrap();
        let parsed: Vec<Sample> = text
            .lines()
            .map(|l| pghotd::sampler::trace::parse_line(l).unwrap().unwrap())
            .collect();
        assert_eq!(parsed.len() as u64, inside);
        for s in &parsed {
            assert_eq!((s.pid, s.time_ns), (pid, 1));
            assert!((lo..hi).contains(&s.vaddr));
            let page = ((s.vaddr - lo) >> 12) as usize;
            assert_eq!(
                s.paddr,
                Some(frames[page].unwrap() * 4096 + (s.vaddr & 0xfff))
            );
        }
    }

    /// A full bucket gives `per_s` at once and then nothing until time refills it (25 takes
    /// in well under the 40 ms one more token needs).
    #[test]
    fn budget_gives_its_rate_at_once_then_waits() {
        let mut b = Budget::new(25);
        assert!((0..25).all(|_| b.take()));
        assert!(!b.take());
        std::thread::sleep(Duration::from_millis(45));
        assert!(b.take());
        assert!(!b.take());
    }
}
