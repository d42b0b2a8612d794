//! `pgibs-guest`: the guest side of tests/vm/ibs-emu/check.sh, statically linked into the busybox
//! initramfs. It finds the pghot-ibs-emu plugin's virtio-serial ports by name, sends control
//! commands, and checks a pghot-workload run against the plugin's per-page counts and samples.
//!
//! ```text
//! pgibs-guest ctl COMMAND...        send each command, print each text answer line
//! pgibs-guest check [--period N] -- WORKLOAD-ARGV...
//! pgibs-guest relay FIFO PERIOD STATS-FILE [--only PID,...] [EXCLUDE-PID...]
//!                                   samples -> pghot-trace lines
//! pgibs-guest snap PID FILE         the plugin's counts so far (FILE.counts), then PID's
//!                                   present pages and frames (FILE), for truth
//! pgibs-guest truth SNAP...         the hot set since RESET and its placement per snapshot
//! pgibs-guest taskchan              tell the plugin which process each vCPU runs, until
//!                                   SIGTERM (taskchan.rs)
//! pgibs-guest misses APP-PID        whose misses of the modelled cache, and who evicted the
//!                                   program's lines (misses.rs)
//! ```
//!
//! `relay` and `truth` serve programs nobody here wrote (tests/vm/debian-app.sh): see
//! relay.rs and truth.rs.
//!
//! `check` runs the workload (which must print pghot-workload's `start:` line with `buffer=`,
//! `pattern=`, `size_mb=`, `hot_pages=`, `write_pct=` and `seed=`), maps the buffer's pages to
//! guest-physical frames through /proc/PID/pagemap, resets the plugin's counters when the access
//! phase starts, dumps them when the workload has exited, and prints `PGIBS-*` key=value lines:
//! how many of the workload's hot pages are among the most-counted pages, and whether the
//! samples that arrived are as many as expected and point at the right pages.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pghot_workload::Pattern;
use pghot_workload::pattern::{PAGE_SIZE, Plan};

mod btf;
mod maps;
mod misses;
mod pagemap;
mod reach;
mod records;
mod relay;
mod taskchan;
mod truth;

use records::Splitter;

type Res<T> = Result<T, String>;

/// /dev/vportNpM of the virtio-serial port named `name` (there is no udev in the guest, so no
/// /dev/virtio-ports/NAME link: the name is in sysfs).
fn port(name: &str) -> Res<String> {
    let dir = std::fs::read_dir("/sys/class/virtio-ports")
        .map_err(|e| format!("/sys/class/virtio-ports: {e} (no virtio-serial device?)"))?;
    for entry in dir.flatten() {
        let n = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
        if n.trim() == name {
            return Ok(format!("/dev/{}", entry.file_name().to_string_lossy()));
        }
    }
    Err(format!("no virtio port named {name}"))
}

/// The control port, open for commands and answers.
struct Ctl {
    out: File,
    inp: BufReader<File>,
}

/// The plugin's COUNTS line as key=value pairs.
type Counts = HashMap<String, u64>;

impl Ctl {
    fn open() -> Res<Ctl> {
        let path = port("pghot.ctl")?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("{path}: {e}"))?;
        let inp = BufReader::new(f.try_clone().map_err(|e| e.to_string())?);
        Ok(Ctl { out: f, inp })
    }

    /// Opens the port, waiting up to 5 s while another process has it (a virtio port has one
    /// opener at a time: virtio_console.c `port_fops_open` answers EBUSY).
    fn open_retrying() -> Res<Ctl> {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match Ctl::open() {
                Err(e) if e.contains("busy") && Instant::now() < until => {
                    thread::sleep(Duration::from_millis(20))
                }
                r => return r,
            }
        }
    }

    fn line(&mut self, cmd: &str) -> Res<String> {
        self.out
            .write_all(format!("{cmd}\n").as_bytes())
            .map_err(|e| format!("ctl write: {e}"))?;
        let mut line = String::new();
        self.inp
            .read_line(&mut line)
            .map_err(|e| format!("ctl read: {e}"))?;
        if line.is_empty() {
            return Err("ctl: end of file".into());
        }
        Ok(line.trim_end().to_string())
    }

    fn ok(&mut self, cmd: &str) -> Res<()> {
        match self.line(cmd)? {
            l if l == "OK" => Ok(()),
            l => Err(format!("{cmd}: {l}")),
        }
    }

    /// DUMP: the COUNTS fields and the (pfn, count) records.
    fn dump(&mut self) -> Res<(Counts, Vec<(u32, u32)>)> {
        let line = self.line("DUMP")?;
        let counts = parse_counts(&line)?;
        let n = counts["pages"] as usize;
        let mut raw = vec![0u8; n * 8];
        self.inp
            .read_exact(&mut raw)
            .map_err(|e| format!("DUMP records: {e}"))?;
        let recs = raw
            .chunks_exact(8)
            .map(|c| {
                (
                    u32::from_le_bytes(c[0..4].try_into().unwrap()),
                    u32::from_le_bytes(c[4..8].try_into().unwrap()),
                )
            })
            .collect();
        Ok((counts, recs))
    }
}

fn parse_counts(line: &str) -> Res<Counts> {
    let rest = line
        .strip_prefix("COUNTS ")
        .ok_or_else(|| format!("not a COUNTS line: {line}"))?;
    rest.split_whitespace()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("bad field {kv}"))?;
            Ok((
                k.to_string(),
                v.parse().map_err(|_| format!("bad value {kv}"))?,
            ))
        })
        .collect()
}

/// A sample record and the CLOCK_MONOTONIC time the guest read it.
#[derive(Debug, Clone, Copy)]
struct Got {
    at: Instant,
    vaddr: u64,
    paddr: u64,
    vcpu: u32,
}

/// Reads the samples port in a thread: waits for a header (after asking for one with SYNC),
/// then collects records with their arrival time.
struct Reader {
    got: Arc<Mutex<Vec<Got>>>,
    skipped: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
}

impl Reader {
    fn start(ctl: &mut Ctl) -> Res<Reader> {
        let path = port("pghot.samples")?;
        let mut f = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        let got = Arc::new(Mutex::new(Vec::new()));
        let skipped = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        // Opened first, then SYNC: the header comes after the open, so it is not discarded.
        ctl.ok("SYNC")?;
        let (g, sk, err) = (got.clone(), skipped.clone(), error.clone());
        // The thread is never joined: with nothing running in user mode no sample comes, and
        // its read would block for good; it ends with the process.
        thread::spawn(move || {
            let mut split = Splitter::default();
            let mut chunk = vec![0u8; 1 << 16];
            loop {
                let n = match f.read(&mut chunk) {
                    Ok(n) => n,
                    Err(e) => {
                        *err.lock().unwrap() = Some(format!("samples read: {e}"));
                        return;
                    }
                };
                let at = Instant::now();
                if n == 0 {
                    thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let mut out = g.lock().unwrap();
                split.feed(&chunk[..n], |r| {
                    out.push(Got {
                        at,
                        vaddr: r.vaddr,
                        paddr: r.paddr,
                        vcpu: r.vcpu,
                    })
                });
                sk.store(split.skipped, Ordering::Relaxed);
            }
        });
        Ok(Reader {
            got,
            skipped,
            error,
        })
    }

    /// The records so far, and the bytes skipped before the header.
    fn finish(self) -> Res<(Vec<Got>, u64)> {
        if let Some(e) = self.error.lock().unwrap().take() {
            return Err(e);
        }
        let got = std::mem::take(&mut *self.got.lock().unwrap());
        Ok((got, self.skipped.load(Ordering::Relaxed)))
    }
}

/// What the workload's `start:` line says.
struct Start {
    pid: u32,
    lo: u64,
    hi: u64,
    pattern: Pattern,
    size_mb: usize,
    hot_pages: usize,
    write_pct: u8,
    seed: u64,
}

fn parse_start(line: &str) -> Res<Start> {
    let kv: HashMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let get = |k: &str| {
        kv.get(k)
            .copied()
            .ok_or_else(|| format!("start line has no {k}: {line}"))
    };
    let num = |k: &str| -> Res<u64> { get(k)?.parse().map_err(|_| format!("bad {k} in {line}")) };
    let (lo, hi) = get("buffer")?
        .split_once('-')
        .ok_or_else(|| format!("bad buffer= in {line}"))?;
    let hex =
        |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| e.to_string());
    let pattern = match get("pattern")? {
        "hot-scattered" => Pattern::HotScattered,
        "hot-block" => Pattern::HotBlock,
        "uniform" => Pattern::Uniform,
        "zipf" => Pattern::Zipf,
        "chase" => Pattern::Chase,
        "hot-clusters" => Pattern::HotClusters,
        p => return Err(format!("unknown pattern {p}")),
    };
    Ok(Start {
        pid: num("pid")? as u32,
        lo: hex(lo)?,
        hi: hex(hi)?,
        pattern,
        size_mb: num("size_mb")? as usize,
        hot_pages: num("hot_pages")? as usize,
        write_pct: num("write_pct")? as u8,
        seed: num("seed")?,
    })
}

/// The frame of each page of `[lo, hi)` of `pid` (None: not present), from /proc/PID/pagemap:
/// one u64 per virtual page, bit 63 present, bits 0-54 the PFN (shown to root only; see
/// Documentation/admin-guide/mm/pagemap.rst and fs/proc/task_mmu.c, `pagemap_read`).
fn pagemap(pid: u32, lo: u64, hi: u64) -> Res<Vec<Option<u64>>> {
    let path = format!("/proc/{pid}/pagemap");
    let f = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    pagemap::frames(&f, lo, hi).map_err(|e| format!("{path}: {e}"))
}

/// The frames of every other mapping of `pid` (stack, heap, binary, libraries): pages of the
/// workload that are not its buffer.
fn other_frames(pid: u32, buf_lo: u64) -> Res<HashSet<u64>> {
    let mut out = HashSet::new();
    // Not the buffer, nothing absurdly large.
    for (lo, hi) in truth::user_mappings(pid, 1 << 30)? {
        if lo == buf_lo {
            continue;
        }
        if let Ok(frames) = pagemap(pid, lo, hi) {
            out.extend(frames.into_iter().flatten());
        }
    }
    Ok(out)
}

/// What one watched run of the check workload left behind: its `start:` line, its buffer's
/// frames and its other pages' at the RESET, the plugin's counts and per-page records at the
/// end, and the sample records the guest read.
struct CheckRun {
    start: Start,
    frames: Vec<Option<u64>>,
    others: HashSet<u64>,
    reset_at: Instant,
    end_at: Instant,
    counts: Counts,
    recs: Vec<(u32, u32)>,
    got: Vec<Got>,
    skipped: u64,
    ns_per_access: String,
}

impl CheckRun {
    /// The sample records read after the RESET: the run's own (earlier ones are a backlog the
    /// port held while closed).
    fn after_reset(&self) -> impl Iterator<Item = &Got> + Clone {
        self.got.iter().filter(|g| g.at >= self.reset_at)
    }
}

/// `pgibs-guest check`: run the workload under the plugin, then print the ground truth, the
/// samples, their arrival and the plugin's counts for check.sh.
fn check(period: u64, argv: &[String]) -> Res<()> {
    let run = run_watched(argv)?;
    let buf = Buffer::new(&run);
    report_truth(&run, &buf);
    report_samples(&run, &buf, period);
    report_arrival(&run);
    report_counts(&run);
    Ok(())
}

/// Runs the workload `argv`, echoing its output; RESET when it prints its `start:` line (the
/// counts cover the access phase only, not the placement's page faults), DUMP when it exits.
fn run_watched(argv: &[String]) -> Res<CheckRun> {
    let mut ctl = Ctl::open()?;
    let reader = Reader::start(&mut ctl)?;
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", argv[0]))?;
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut at_start = None;
    let mut result = None;
    for line in out.lines() {
        let line = line.map_err(|e| e.to_string())?;
        println!("{line}");
        if line.starts_with("start:") {
            let s = parse_start(&line)?;
            ctl.ok("RESET")?;
            let reset_at = Instant::now();
            let frames = pagemap(s.pid, s.lo, s.hi)?;
            let others = other_frames(s.pid, s.lo)?;
            at_start = Some((s, reset_at, frames, others));
        } else if line.starts_with("RESULT ") {
            result = Some(line);
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let end_at = Instant::now();
    let (counts, recs) = ctl.dump()?;
    // The records the writer flushed by now (every 100 ms) reach us within about 100 ms.
    thread::sleep(Duration::from_millis(200));
    let (got, skipped) = reader.finish()?;
    if !status.success() {
        return Err(format!("workload exited with {status}"));
    }
    let Some((start, reset_at, frames, others)) = at_start else {
        return Err("workload printed no start: line".into());
    };
    let ns_per_access = result
        .as_deref()
        .and_then(|r| r.split("\"ns_per_access\":").nth(1))
        .and_then(|r| r.split([',', '}']).next())
        .unwrap_or("-")
        .to_string();
    Ok(CheckRun {
        start,
        frames,
        others,
        reset_at,
        end_at,
        counts,
        recs,
        got,
        skipped,
        ns_per_access,
    })
}

/// The workload's buffer as the plan made it: which of its pages are hot, and which buffer
/// page each present frame holds.
struct Buffer {
    pages: usize,
    plan: Plan,
    /// The plan's hot page count: the k of the top-k comparisons.
    k: usize,
    pfn_page: HashMap<u64, usize>,
}

impl Buffer {
    fn new(run: &CheckRun) -> Buffer {
        let s = &run.start;
        let pages = s.size_mb * 256;
        let plan = Plan::new(s.pattern, pages, s.hot_pages, s.write_pct, s.seed);
        let pfn_page = run
            .frames
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.map(|pfn| (pfn, i)))
            .collect();
        Buffer {
            pages,
            k: plan.hot_count(),
            plan,
            pfn_page,
        }
    }

    /// Whether each page of the buffer is hot, by index.
    fn hot(&self) -> &[bool] {
        self.plan.is_hot()
    }

    /// Whether `pfn` holds a page of the buffer that is hot (`Some(true)`) or cold.
    fn hot_at(&self, pfn: u32) -> Option<bool> {
        self.pfn_page.get(&u64::from(pfn)).map(|&i| self.hot()[i])
    }
}

/// PGIBS-TRUTH and PGIBS-TRUTH-OTHERS: are the hot pages among the most-counted pages, of all
/// RAM and of the buffer alone?
fn report_truth(run: &CheckRun, buf: &Buffer) {
    let (frames, hot, k) = (&run.frames, buf.hot(), buf.k);
    let present = buf.pfn_page.len();
    let hot_pfns: Vec<u64> = (0..buf.pages)
        .filter(|&i| hot[i])
        .filter_map(|i| frames[i])
        .collect();
    let slow_lo = 0x8_0000u64; // pfn of 0x80000000, node 2 of the 3node topology
    let slow_hi = 0xc_0000u64;
    let hot_on_slow = hot_pfns
        .iter()
        .filter(|&&p| (slow_lo..slow_hi).contains(&p))
        .count();
    let mut by_count = run.recs.clone();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let top = &by_count[..k.min(by_count.len())];
    let top_hot = top
        .iter()
        .filter(|(pfn, _)| buf.hot_at(*pfn) == Some(true))
        .count();
    let top_cold_buf = top
        .iter()
        .filter(|(pfn, _)| buf.hot_at(*pfn) == Some(false))
        .count();
    let top_workload_other = top
        .iter()
        .filter(|(pfn, _)| run.others.contains(&u64::from(*pfn)))
        .count();
    // The buffer's own pages ranked alone: are its most-counted pages the hot ones?
    let buf_top_hot = by_count
        .iter()
        .filter_map(|(pfn, _)| buf.hot_at(*pfn))
        .take(k)
        .filter(|&h| h)
        .count();
    let count_of: HashMap<u32, u32> = run.recs.iter().copied().collect();
    let sum_over = |want_hot: bool| -> (u64, u64) {
        let mut sum = 0u64;
        let mut n = 0u64;
        for i in 0..buf.pages {
            if hot[i] == want_hot
                && let Some(pfn) = frames[i]
            {
                sum += u64::from(count_of.get(&(pfn as u32)).copied().unwrap_or(0));
                n += 1;
            }
        }
        (sum, n)
    };
    let (hot_sum, hot_n) = sum_over(true);
    let (cold_sum, cold_n) = sum_over(false);
    let hot_zero = hot_pfns
        .iter()
        .filter(|&&p| !count_of.contains_key(&(p as u32)))
        .count();
    println!(
        "PGIBS-TRUTH hot_pages={k} present={present}/{} hot_on_slow_node={hot_on_slow} top_k_hot={top_hot} top_k_cold_buffer={top_cold_buf} top_k_workload_other={top_workload_other} top_k_rest={} top_k_hot_pct={:.2} buffer_top_k_hot_pct={:.2} hot_pages_uncounted={hot_zero} mean_count_hot={:.1} mean_count_cold={:.1} buffer_count_share_pct={:.2}",
        buf.pages,
        k - top_hot - top_cold_buf - top_workload_other,
        100.0 * top_hot as f64 / k as f64,
        100.0 * buf_top_hot as f64 / k as f64,
        hot_sum as f64 / hot_n.max(1) as f64,
        cold_sum as f64 / cold_n.max(1) as f64,
        100.0 * (hot_sum + cold_sum) as f64 / run.counts["accesses"].max(1) as f64,
    );
    // The five most-counted pages outside the buffer, for the record.
    let outside: Vec<String> = by_count
        .iter()
        .filter(|(pfn, _)| buf.hot_at(*pfn).is_none())
        .take(5)
        .map(|(pfn, c)| format!("{pfn:#x}:{c}"))
        .collect();
    println!(
        "PGIBS-TRUTH-OTHERS top_outside_buffer={}",
        outside.join(",")
    );
}

/// PGIBS-SAMPLES: as many records as the period promises, each with the frame pagemap gives
/// its address, on the hot pages.
fn report_samples(run: &CheckRun, buf: &Buffer, period: u64) {
    let s = &run.start;
    let counts = &run.counts;
    let after: Vec<&Got> = run.after_reset().collect();
    let user = counts["fast_user"] + counts["slow_user"];
    let expected = user as f64 / reach::mean_interval(period);
    let (mut in_buf, mut same_page, mut other_page, mut paddr_buf_vaddr_not) = (0, 0, 0, 0);
    let mut on_hot = 0;
    let mut vcpus = [0u64; 4];
    for g in &after {
        vcpus[(g.vcpu as usize).min(3)] += 1;
        let pfn = g.paddr >> 12;
        if (s.lo..s.hi).contains(&g.vaddr) {
            in_buf += 1;
            let i = ((g.vaddr - s.lo) / PAGE_SIZE as u64) as usize;
            if run.frames[i] == Some(pfn) {
                same_page += 1;
                if buf.hot()[i] {
                    on_hot += 1;
                }
            } else {
                other_page += 1;
            }
        } else if buf.pfn_page.contains_key(&pfn) {
            paddr_buf_vaddr_not += 1;
        }
    }
    println!(
        "PGIBS-SAMPLES received={} before_reset={} expected={expected:.0} received_pct_of_expected={:.1} plugin_sent={} plugin_dropped={} user_accesses={user} in_buffer={in_buf} paddr_matches_pagemap={same_page} paddr_mismatch={other_page} paddr_in_buffer_vaddr_not={paddr_buf_vaddr_not} on_hot_pages={on_hot} vcpu0={} vcpu1={} skipped_bytes_before_header={}",
        after.len(),
        run.got.len() - after.len(),
        100.0 * after.len() as f64 / expected.max(1.0),
        counts["samples_sent"],
        counts["samples_dropped"],
        vcpus[0],
        vcpus[1],
        run.skipped,
    );
}

/// PGIBS-ARRIVAL: records per 100 ms while the workload ran: do they arrive as they are taken?
fn report_arrival(run: &CheckRun) {
    let after = run.after_reset();
    let slots = ((run.end_at - run.reset_at).as_millis() / 100) as usize;
    let mut per = vec![0u64; slots.max(1)];
    for g in after.clone() {
        let i = ((g.at - run.reset_at).as_millis() / 100) as usize;
        if i < slots {
            per[i] += 1;
        }
    }
    let mut sorted = per.clone();
    sorted.sort_unstable();
    let inner = if per.len() > 2 {
        &per[1..per.len() - 1]
    } else {
        &per[..]
    };
    println!(
        "PGIBS-ARRIVAL intervals_100ms={} min={} median={} max={} empty_inner_intervals={} after_exit={}",
        per.len(),
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        inner.iter().filter(|&&n| n == 0).count(),
        after.filter(|g| g.at > run.end_at).count(),
    );
}

/// PGIBS-COUNTS: the plugin's own counts for the run, and the workload's ns per access.
fn report_counts(run: &CheckRun) {
    let c = |k: &str| run.counts.get(k).copied().unwrap_or(0);
    println!(
        "PGIBS-COUNTS accesses={} pages={} fast_user={} slow_user={} modelled_ns={} outside_ram={} ns_per_access={}",
        c("accesses"),
        c("pages"),
        c("fast_user"),
        c("slow_user"),
        c("modelled_ns"),
        c("outside_ram"),
        run.ns_per_access,
    );
}

/// `relay`'s arguments after the word itself: FIFO PERIOD STATS [--only PID,...] [EXCLUDE...].
struct RelayArgs {
    fifo: String,
    period: u64,
    stats: String,
    only: Option<Vec<u32>>,
    exclude: Vec<u32>,
}

fn pids<'a>(list: impl IntoIterator<Item = &'a str>) -> Result<Vec<u32>, String> {
    list.into_iter()
        .map(|p| p.parse().map_err(|_| format!("relay: bad pid {p:?}")))
        .collect()
}

fn parse_relay(args: &[String]) -> Result<RelayArgs, String> {
    let [fifo, period, stats, rest @ ..] = args else {
        return Err("relay: FIFO PERIOD STATS needed".into());
    };
    let period = match period.parse() {
        Ok(p) if p >= 1 => p,
        _ => return Err(format!("relay: bad period {period:?}")),
    };
    let (only, rest) = match rest {
        [flag, list, rest @ ..] if flag == "--only" => {
            let only = pids(list.split(','))?;
            (Some(only), rest)
        }
        [flag] if flag == "--only" => return Err("relay: --only needs PID,...".into()),
        _ => (None, rest),
    };
    Ok(RelayArgs {
        fifo: fifo.clone(),
        period,
        stats: stats.clone(),
        only,
        exclude: pids(rest.iter().map(String::as_str))?,
    })
}

fn relay_args(args: &[String]) -> Result<(), String> {
    let a = parse_relay(args)?;
    relay::relay(&a.fifo, a.period, &a.stats, a.only, &a.exclude)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("ctl") => Ctl::open().and_then(|mut ctl| {
            for cmd in &args[1..] {
                if cmd == "DUMP" {
                    // The COUNTS fields, then the ten most-counted pages.
                    let (c, mut recs) = ctl.dump()?;
                    let mut fields: Vec<_> = c.iter().collect();
                    fields.sort();
                    let f: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    println!("DUMP {}", f.join(" "));
                    recs.sort_by_key(|r| std::cmp::Reverse(r.1));
                    let top: Vec<String> = recs
                        .iter()
                        .take(10)
                        .map(|(p, n)| format!("{p:#x}:{n}"))
                        .collect();
                    println!("DUMP top_pages={}", top.join(","));
                } else {
                    println!("{}", ctl.line(cmd)?);
                }
            }
            Ok(())
        }),
        Some("check") => {
            let mut period = 10_000;
            let mut rest = &args[1..];
            if rest.first().map(String::as_str) == Some("--period") && rest.len() > 1 {
                period = rest[1].parse().unwrap_or(period);
                rest = &rest[2..];
            }
            if rest.first().map(String::as_str) == Some("--") {
                rest = &rest[1..];
            }
            if rest.is_empty() {
                Err("check needs the workload's command line".into())
            } else {
                check(period, rest)
            }
        }
        Some("relay") if args.len() >= 4 => relay_args(&args[1..]),
        Some("snap") if args.len() == 3 => match args[1].parse() {
            Ok(pid) => truth::write_snapshot(pid, &args[2]).map(|n| println!("PGIBS-SNAP pid={pid} pages={n}")),
            Err(_) => Err(format!("snap: bad pid {}", args[1])),
        },
        Some("truth") if args.len() >= 2 => truth::report(&args[1..]),
        Some("taskchan") if args.len() == 1 => taskchan::run(),
        Some("misses") if args.len() == 2 => match args[1].parse() {
            Ok(pid) => misses::report(pid),
            Err(_) => Err(format!("misses: bad pid {}", args[1])),
        },
        _ => Err("usage: pgibs-guest ctl COMMAND... | check [--period N] -- WORKLOAD-ARGV... | relay FIFO PERIOD STATS [--only PID,...] [EXCLUDE-PID...] | snap PID FILE | truth SNAP... | taskchan | misses APP-PID".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("PGIBS-ERROR {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn relay_arguments_with_and_without_only() {
        let a = parse_relay(&args("/run/f 200 /tmp/s --only 301,7 99")).unwrap();
        assert_eq!(
            (a.fifo.as_str(), a.period, a.stats.as_str()),
            ("/run/f", 200, "/tmp/s")
        );
        assert_eq!(a.only, Some(vec![301, 7]));
        assert_eq!(a.exclude, vec![99]);
        let a = parse_relay(&args("/run/f 100 /tmp/s 99 100")).unwrap();
        assert_eq!(a.only, None);
        assert_eq!(a.exclude, vec![99, 100]);
    }

    #[test]
    fn relay_arguments_refused_with_what_was_wrong() {
        for (line, says) in [
            ("/run/f 0 /tmp/s", "bad period \"0\""),
            ("/run/f x /tmp/s", "bad period \"x\""),
            ("/run/f 200 /tmp/s --only", "--only needs"),
            ("/run/f 200 /tmp/s --only 3,y", "bad pid \"y\""),
            ("/run/f 200 /tmp/s 7 z", "bad pid \"z\""),
            ("/run/f 200", "FIFO PERIOD STATS"),
        ] {
            let e = parse_relay(&args(line))
                .err()
                .unwrap_or_else(|| panic!("{line} accepted"));
            assert!(e.contains(says), "{line}: {e}");
        }
    }
}
