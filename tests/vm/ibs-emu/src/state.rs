//! What the per-access callback updates, and the totals the control socket reads.
//!
//! Everything a vCPU touches on an access is its own: under MTTCG every vCPU runs on its own
//! host thread, so shared counters would bounce cache lines between them (and an atomic
//! read-modify-write costs a locked instruction per access). The one exception is `snoop=1`,
//! where a miss reads (never writes) the same set of the other vCPUs' caches. Each counter is an atomic only so
//! that the control thread may read it while the vCPU runs; the vCPU updates it with a plain
//! load and store (`bump`), which compiles to an ordinary `add`. RESET never writes a vCPU's
//! counters: it records their current values as a baseline that later reads subtract, so a
//! reset racing an access cannot leave a stale count behind.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::Release};
use std::time::{Duration, Instant};

use crate::bytask::{self, ByTask, Tally};
use crate::config::{Config, PhysFix};
use crate::ring::Ring;

/// Addresses below this are in the lower canonical half, i.e. user space under Linux.
///
/// Plugin API v1 tells a memory callback neither the privilege level nor the MMU index, so
/// "user-mode" is judged by the virtual address. A kernel access to user memory (copy_to_user)
/// therefore counts as user-mode, as IBS would not; the guest's kernel is not sampled otherwise.
pub const USER_TOP: u64 = 0x0000_8000_0000_0000;
pub const PAGE_SHIFT: u32 = 12;
/// Bytes of a cache line of the modelled cache.
const LINE: u64 = 64;
/// Bits of a modelled cache word that hold the line's tag (guest-physical addresses below
/// 2^46); the task that filled it sits above (tgids are below 2^22, PID_MAX_LIMIT).
const TAG_BITS: u32 = 40;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// One sample as it goes out on the samples socket (see `ring` for the wire form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub vaddr: u64,
    pub paddr: u64,
    pub vcpu: u32,
    pub is_store: bool,
    /// The tgid running on the vCPU as the task channel last said; 0 when unknown.
    pub task: u32,
}

/// Adds one to a counter only its vCPU writes (see the module comment).
#[inline(always)]
fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}

/// xorshift64*: a few cycles, enough to spread the sampling period's low bits.
#[inline]
fn next_random(state: &AtomicU64) -> u64 {
    let mut x = state.load(Relaxed);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    state.store(x, Relaxed);
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// A vCPU's counters and sample ring; written only by that vCPU's thread.
#[repr(align(128))]
pub struct Vcpu {
    pub fast_user: AtomicU64,
    pub slow_user: AtomicU64,
    /// Accesses whose physical address lies beyond `ram_mb` (not counted per page).
    pub outside: AtomicU64,
    /// User-mode accesses left until the next sample.
    countdown: AtomicU64,
    rng: AtomicU64,
    /// Samples that found the ring full.
    pub dropped: AtomicU64,
    /// Accesses that hit the modelled cache (none without one).
    pub hits: AtomicU64,
    /// Samples discarded because their access hit the modelled cache.
    pub filtered: AtomicU64,
    /// Misses of this vCPU's cache that another vCPU's held (`snoop=1`; counted in `hits`
    /// too).
    pub peer_hits: AtomicU64,
    /// The modelled cache: `ways` words per set, most recently used first; a word is the
    /// line's tag (cache line number + 1; 0 is empty) and, above `TAG_BITS`, the tgid whose
    /// miss brought it in (the task channel's; for `by_task`). Empty without a cache.
    cache: Box<[AtomicU64]>,
    /// Ways per set of the modelled cache (a power of two; 1 is direct-mapped), as a shift.
    way_shift: u32,
    /// Sets of the modelled cache less one (a power of two less one: the index mask).
    set_mask: usize,
    /// Accesses per guest-physical 4 KiB page.
    pub pages: Box<[AtomicU32]>,
    pub ring: Ring,
    /// The tgid last switched in on this vCPU (the task channel; 0: not known).
    pub task: AtomicU32,
    /// Task channel stores seen (context switches).
    pub switches: AtomicU64,
    /// Samples pushed with a task named.
    pub with_task: AtomicU64,
    /// Misses per task and cause (`by_task=1`, with a cache).
    by_task: Option<ByTask>,
}

impl Vcpu {
    /// Looks `paddr`'s line up in the modelled cache and fills it on a miss; false without a
    /// cache. LRU within the set, kept by order: a hit in the first way (the usual one: the
    /// line just used) is one load and a compare; a hit further in moves its word to the
    /// front, and a miss shifts the set by one (the last word is the one evicted) and puts
    /// the new line first (and, with `by_task`, attributes the miss). On a miss `snoop(set,
    /// tag)` says whether another vCPU's cache holds the line: then the line is still filled
    /// here (evicting as a miss does) but the access is a hit, served cache to cache.
    #[inline(always)]
    fn cache_hit(&self, paddr: u64, user: bool, snoop: impl FnOnce(usize, u64) -> bool) -> bool {
        if self.cache.is_empty() {
            return false;
        }
        let line = paddr / LINE;
        let tag = line + 1;
        let set = (line as usize) & self.set_mask;
        let words = self.set_words(set);
        let mut carry = words[0].load(Relaxed);
        if carry & TAG_MASK == tag {
            return true;
        }
        for w in &words[1..] {
            let word = w.load(Relaxed);
            w.store(carry, Relaxed);
            if word & TAG_MASK == tag {
                words[0].store(word, Relaxed);
                return true;
            }
            carry = word;
        }
        let task = self.task.load(Relaxed);
        words[0].store(tag | u64::from(task) << TAG_BITS, Relaxed);
        let from_peer = snoop(set, tag);
        if let Some(b) = &self.by_task {
            let (old, had) = (carry & TAG_MASK, (carry >> TAG_BITS) as u32);
            if from_peer {
                b.on_evict(set, old, had, task);
            } else {
                b.on_miss(set, old, had, tag, task, user);
            }
        }
        if from_peer {
            bump(&self.peer_hits);
        }
        from_peer
    }

    /// The words of one set of the modelled cache.
    #[inline(always)]
    fn set_words(&self, set: usize) -> &[AtomicU64] {
        &self.cache[set << self.way_shift..(set + 1) << self.way_shift]
    }

    /// Whether this vCPU's cache holds line `tag` in `set`: another vCPU's snoop (`snoop=1`).
    /// Loads only, from another host thread (the words are atomics for that); the set may
    /// be shifting under it, so a line moving within the set can be missed, a model's error
    /// of one access in a rare race, never a torn word.
    #[inline]
    fn holds(&self, set: usize, tag: u64) -> bool {
        !self.cache.is_empty()
            && self
                .set_words(set)
                .iter()
                .any(|w| w.load(Relaxed) & TAG_MASK == tag)
    }

    /// Counts one user-mode op down; true when it is the one to sample (and reloads).
    #[inline(always)]
    fn sample_due(&self, period: u64) -> bool {
        let left = self.countdown.load(Relaxed);
        if left > 1 {
            self.countdown.store(left - 1, Relaxed);
            return false;
        }
        self.countdown.store(reload(period, &self.rng), Relaxed);
        true
    }
}

/// Totals over all vCPUs, minus the baseline of the last RESET.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub pages: u64,
    pub accesses: u64,
    pub fast_user: u64,
    pub slow_user: u64,
    pub modelled_ns: u64,
    pub samples_sent: u64,
    pub samples_dropped: u64,
    pub outside: u64,
    pub cache_hits: u64,
    /// The part of `cache_hits` another vCPU's cache served (`snoop=1`).
    pub peer_hits: u64,
    pub samples_filtered: u64,
    /// Task channel stores (the guest's context switches).
    pub switches: u64,
    /// Samples taken with a task named.
    pub with_task: u64,
}

/// Counter values at the last RESET.
#[derive(Default)]
struct Baseline {
    pages: Vec<Vec<u32>>,
    fast_user: u64,
    slow_user: u64,
    outside: u64,
    sent: u64,
    dropped: u64,
    hits: u64,
    peer_hits: u64,
    filtered: u64,
    switches: u64,
    with_task: u64,
    by_task: Tally,
    by_task_overflow: u64,
}

pub struct State {
    pub cfg: Config,
    /// Applied to QEMU's reported physical addresses before anything else.
    pub fix: PhysFix,
    slow_lo: u64,
    slow_len: u64,
    /// Settable at run time (control command `SLOW_NS`), read on every slow access.
    pub slow_ns: AtomicU64,
    /// The same for every other access (control command `FAST_NS`).
    pub fast_ns: AtomicU64,
    /// Control commands `ARM` / `DISARM` (start: `cfg.armed`); read on every access.
    pub armed: AtomicBool,
    pub vcpus: Box<[Vcpu]>,
    /// Records the writer thread got onto the samples socket.
    pub sent: AtomicU64,
    /// Set by the control command SYNC: the writer sends a header before its next records.
    pub sync: AtomicBool,
    /// Samples the writer dropped because their vaddr reads as a header (counted as dropped).
    pub header_like: AtomicU64,
    /// The task channel (control command `TASKCHAN BASE LEN`, guest/src/taskchan.rs): a kernel
    /// store at `chan_base + tgid` is the guest's scheduler switching that tgid in. Length 0:
    /// no channel.
    chan_base: AtomicU64,
    chan_len: AtomicU64,
    baseline: std::sync::Mutex<Baseline>,
}

impl State {
    pub fn new(cfg: Config, n_vcpus: usize) -> State {
        let n_pages = (cfg.ram_mb << (20 - PAGE_SHIFT)) as usize;
        let vcpus = (0..n_vcpus)
            .map(|i| {
                let v = Vcpu {
                    fast_user: AtomicU64::new(0),
                    slow_user: AtomicU64::new(0),
                    outside: AtomicU64::new(0),
                    countdown: AtomicU64::new(0),
                    // xorshift must not start at 0.
                    rng: AtomicU64::new(
                        cfg.seed ^ 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(i as u64 + 1) | 1,
                    ),
                    dropped: AtomicU64::new(0),
                    hits: AtomicU64::new(0),
                    filtered: AtomicU64::new(0),
                    peer_hits: AtomicU64::new(0),
                    cache: (0..(cfg.cache_kb << 10) / LINE)
                        .map(|_| AtomicU64::new(0))
                        .collect(),
                    way_shift: cfg.cache_ways.trailing_zeros(),
                    set_mask: (((cfg.cache_kb << 10) / LINE) as usize / cfg.cache_ways)
                        .saturating_sub(1),
                    pages: (0..n_pages).map(|_| AtomicU32::new(0)).collect(),
                    ring: Ring::new(cfg.ring),
                    task: AtomicU32::new(0),
                    switches: AtomicU64::new(0),
                    with_task: AtomicU64::new(0),
                    by_task: (cfg.by_task && cfg.cache_kb != 0).then(|| {
                        let lines = ((cfg.cache_kb << 10) / LINE) as usize;
                        ByTask::new(lines / cfg.cache_ways, cfg.cache_ways)
                    }),
                };
                v.countdown.store(reload(cfg.period, &v.rng), Relaxed);
                v
            })
            .collect();
        State {
            fix: PhysFix::new(&cfg.memdev_mb),
            slow_lo: cfg.slow_lo,
            slow_len: cfg.slow_hi - cfg.slow_lo,
            slow_ns: AtomicU64::new(cfg.slow_ns),
            fast_ns: AtomicU64::new(cfg.fast_ns),
            armed: AtomicBool::new(cfg.armed),
            vcpus,
            sent: AtomicU64::new(0),
            sync: AtomicBool::new(false),
            header_like: AtomicU64::new(0),
            chan_base: AtomicU64::new(0),
            chan_len: AtomicU64::new(0),
            baseline: std::sync::Mutex::new(Baseline::default()),
            cfg,
        }
    }

    /// Sets the task channel (`len` 0: none). The length goes to 0 first, so a vCPU never
    /// sees the new base with the old length.
    pub fn set_task_channel(&self, base: u64, len: u64) {
        self.chan_len.store(0, Release);
        self.chan_base.store(base, Release);
        self.chan_len.store(len, Release);
        if len == 0 {
            for v in self.vcpus.iter() {
                v.task.store(0, Relaxed);
            }
        }
    }

    /// True when `vaddr` is in the task channel: the access is the channel's, not a program's
    /// (the caller does nothing more with it), and if it is a store the vCPU now runs the tgid
    /// its offset names. Two loads and a compare for every other access.
    #[inline(always)]
    pub fn task_switch(&self, vcpu: u32, vaddr: u64, is_store: impl FnOnce() -> bool) -> bool {
        let off = vaddr.wrapping_sub(self.chan_base.load(Relaxed));
        if off >= self.chan_len.load(Relaxed) {
            return false;
        }
        if let Some(v) = self.vcpus.get(vcpu as usize)
            && is_store()
        {
            v.task.store(off as u32, Relaxed);
            bump(&v.switches);
        }
        true
    }

    /// The per-access work: page count, modelled clock and sampling for user-mode accesses,
    /// and the slow tier's delay. `is_store` is only asked when a sample is taken (it is a
    /// call into QEMU).
    ///
    /// With a modelled cache, an access that hits it is none of that: it still counts down
    /// to the next sample (IBS counts ops, not misses), but a sample that lands on it is
    /// discarded, as pghotd drops an IBS sample whose data source is a cache hit.
    #[inline(always)]
    pub fn on_access(&self, vcpu: u32, vaddr: u64, paddr: u64, is_store: impl FnOnce() -> bool) {
        let Some(v) = self.vcpus.get(vcpu as usize) else {
            return;
        };
        let hit = v.cache_hit(paddr, vaddr < USER_TOP, |set, tag| {
            self.cfg.snoop && self.peer_holds(vcpu as usize, set, tag)
        });
        if vaddr < USER_TOP && v.sample_due(self.cfg.period) {
            if hit {
                bump(&v.filtered);
            } else {
                let s = Sample {
                    vaddr,
                    paddr,
                    vcpu,
                    is_store: is_store(),
                    task: v.task.load(Relaxed),
                };
                if !v.ring.push(&s) {
                    bump(&v.dropped);
                } else if s.task != 0 {
                    bump(&v.with_task);
                }
            }
        }
        if hit {
            bump(&v.hits);
            return;
        }
        let slow = paddr.wrapping_sub(self.slow_lo) < self.slow_len;
        // Per page, only accesses through a user address: a program's own loads and stores
        // and the kernel's copies to and from its memory (read(2), write(2)), not the kernel's
        // work through its own mapping (migration's copies, zeroing), which would make every
        // page a promoter moves look hot.
        if vaddr < USER_TOP {
            match v.pages.get((paddr >> PAGE_SHIFT) as usize) {
                Some(c) => c.store(c.load(Relaxed).wrapping_add(1), Relaxed),
                None => bump(&v.outside),
            }
            bump(if slow { &v.slow_user } else { &v.fast_user });
        }
        let ns = self.delay_ns(slow, vaddr < USER_TOP);
        if ns != 0 {
            spin(ns);
        }
    }

    /// Whether a vCPU other than `me` holds line `tag` in `set` of its cache (every vCPU's
    /// cache has the same sets). Out of line: it runs on misses only, and inlined it would
    /// grow the per-access path that every hit takes.
    #[inline(never)]
    fn peer_holds(&self, me: usize, set: usize, tag: u64) -> bool {
        self.vcpus
            .iter()
            .enumerate()
            .any(|(i, v)| i != me && v.holds(set, tag))
    }

    /// Host ns to spin for one access that missed the modelled cache: the slow node's delay
    /// or the fast tier's for an access through a user address (the programs' own, and the
    /// kernel's copies to and from their memory), nothing for the kernel's accesses through
    /// its own mapping.
    ///
    /// The fast-tier delay is for the programs' memory: the kernel's data is never on the slow
    /// node, and charging each of its misses in a one-level direct-mapped cache made every
    /// system call and context switch cost hundreds of microseconds. Its accesses to the slow
    /// node are page migration's copies: streaming reads that real hardware runs with many
    /// lines in flight at the link's bandwidth. A dependent-load latency charged to each made
    /// a 4 KiB page cost milliseconds of host time (Redis: 12.6 s of pghotd's migrator for
    /// 1,840 pages; memcached: 87 s for 155 MB; BENCHMARKS.md, "THPs charged at their size"),
    /// hundreds of times what a real copy costs at the guest's dilation, and it charged every
    /// promoter for its moves in that coin (the migrating task for NUMA balancing, kdamond
    /// for DAMON). So the kernel's copies cost what they cost any other kernel access.
    #[inline(always)]
    fn delay_ns(&self, slow: bool, user: bool) -> u64 {
        match (user, slow) {
            (false, _) => 0,
            (true, true) => self.slow_ns.load(Relaxed),
            (true, false) => self.fast_ns.load(Relaxed),
        }
    }

    /// Per-page counts since the last RESET, summed over vCPUs: `(pfn, count)` for every page
    /// with a count, in pfn order.
    pub fn page_counts(&self) -> Vec<(u32, u32)> {
        let base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.vcpus.first().map_or(0, |v| v.pages.len());
        let mut out = Vec::new();
        for pfn in 0..n {
            let mut sum = 0u32;
            for (i, v) in self.vcpus.iter().enumerate() {
                let b = base
                    .pages
                    .get(i)
                    .and_then(|p| p.get(pfn))
                    .copied()
                    .unwrap_or(0);
                sum = sum.wrapping_add(v.pages[pfn].load(Relaxed).wrapping_sub(b));
            }
            if sum != 0 {
                out.push((pfn as u32, sum));
            }
        }
        out
    }

    /// The scalar counters since the last RESET (`pages` and `accesses` from `counts`).
    pub fn totals(&self, counts: &[(u32, u32)]) -> Totals {
        let base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        let sum = |f: fn(&Vcpu) -> u64| self.vcpus.iter().map(f).sum::<u64>();
        let fast_user = sum(|v| v.fast_user.load(Relaxed)).wrapping_sub(base.fast_user);
        let slow_user = sum(|v| v.slow_user.load(Relaxed)).wrapping_sub(base.slow_user);
        let outside = sum(|v| v.outside.load(Relaxed)).wrapping_sub(base.outside);
        Totals {
            pages: counts.len() as u64,
            accesses: counts.iter().map(|&(_, c)| u64::from(c)).sum::<u64>() + outside,
            fast_user,
            slow_user,
            modelled_ns: fast_user * self.cfg.fast_model_ns + slow_user * self.cfg.slow_model_ns,
            samples_sent: self.sent.load(Relaxed).wrapping_sub(base.sent),
            samples_dropped: (sum(|v| v.dropped.load(Relaxed)) + self.header_like.load(Relaxed))
                .wrapping_sub(base.dropped),
            outside,
            cache_hits: sum(|v| v.hits.load(Relaxed)).wrapping_sub(base.hits),
            peer_hits: sum(|v| v.peer_hits.load(Relaxed)).wrapping_sub(base.peer_hits),
            samples_filtered: sum(|v| v.filtered.load(Relaxed)).wrapping_sub(base.filtered),
            switches: sum(|v| v.switches.load(Relaxed)).wrapping_sub(base.switches),
            with_task: sum(|v| v.with_task.load(Relaxed)).wrapping_sub(base.with_task),
        }
    }

    /// RESET: every counter reads 0 from now on (see the module comment).
    pub fn reset(&self) {
        let mut base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        base.pages = self
            .vcpus
            .iter()
            .map(|v| v.pages.iter().map(|c| c.load(Relaxed)).collect())
            .collect();
        let sum = |f: fn(&Vcpu) -> u64| self.vcpus.iter().map(f).sum::<u64>();
        base.fast_user = sum(|v| v.fast_user.load(Relaxed));
        base.slow_user = sum(|v| v.slow_user.load(Relaxed));
        base.outside = sum(|v| v.outside.load(Relaxed));
        base.dropped = sum(|v| v.dropped.load(Relaxed)) + self.header_like.load(Relaxed);
        base.sent = self.sent.load(Relaxed);
        base.hits = sum(|v| v.hits.load(Relaxed));
        base.peer_hits = sum(|v| v.peer_hits.load(Relaxed));
        base.filtered = sum(|v| v.filtered.load(Relaxed));
        base.switches = sum(|v| v.switches.load(Relaxed));
        base.with_task = sum(|v| v.with_task.load(Relaxed));
        (base.by_task, base.by_task_overflow) = self.by_task_now();
    }

    /// Every vCPU's misses per (task, cause) and the overflow, since the start.
    fn by_task_now(&self) -> (Tally, u64) {
        let mut tally = Tally::new();
        let mut overflow = 0;
        for b in self.vcpus.iter().filter_map(|v| v.by_task.as_ref()) {
            b.add_to(&mut tally);
            overflow += b.overflow.load(Relaxed);
        }
        (tally, overflow)
    }

    /// Misses per (task, cause) and the overflow since the last RESET; `None` without
    /// `by_task`.
    pub fn by_task(&self) -> Option<(Tally, u64)> {
        self.vcpus.first()?.by_task.as_ref()?;
        let (now, overflow) = self.by_task_now();
        let base = self.baseline.lock().unwrap_or_else(|e| e.into_inner());
        Some((
            bytask::since(&now, &base.by_task),
            overflow.wrapping_sub(base.by_task_overflow),
        ))
    }

    /// Called by the writer thread after `n` records reached the socket.
    pub fn add_sent(&self, n: u64) {
        self.sent.fetch_add(n, Release);
    }
}

/// The next countdown, as IBS op sampling counts: the hardware counts in units of 16 up to
/// IbsOpMaxCnt, which holds period >> 4 (`perf_ibs_handle_irq` in
/// arch/x86/events/amd/ibs.c), from a current count (IbsOpCurCnt) whose low bits it preloads at
/// random so that samples do not lock onto a loop (arch/x86/include/asm/perf_event.h: "The
/// lower 7 bits of the current count are random bits preloaded by hardware"; the old oprofile
/// driver randomised them in software). We randomise the low 4 bits: the interval is
/// `(period & !15) - r` with r uniform in 0..16, a mean of `(period & !15) - 7.5`.
#[inline]
fn reload(period: u64, rng: &AtomicU64) -> u64 {
    ((period & !0xf) - (next_random(rng) >> 60)).max(1)
}

/// Busy-waits `ns` host nanoseconds on the monotonic clock (`Instant` is CLOCK_MONOTONIC via
/// the vDSO: about 20 ns a read, fine against the hundreds of ns spun here). Sleeping would
/// give the host CPU away and take tens of microseconds.
#[inline(never)]
fn spin(ns: u64) {
    let start = Instant::now();
    let d = Duration::from_nanos(ns);
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(period: u64) -> State {
        let cfg = Config {
            period,
            ram_mb: 4,
            ring: 1 << 16,
            ..Config::default()
        };
        State::new(cfg, 2)
    }

    const CHANNEL: u64 = 0xffff_c900_0010_0000;

    /// One vCPU with a 1 KiB cache of `ways` ways, `by_task` on and the task channel set.
    fn tasked_cache(ways: usize) -> State {
        tasked_caches(1, ways, false)
    }

    /// `vcpus` vCPUs, each with a 1 KiB cache of `ways` ways, `by_task` on, `snoop` as given
    /// and the task channel set.
    fn tasked_caches(vcpus: usize, ways: usize, snoop: bool) -> State {
        let s = State::new(
            Config {
                period: 1 << 20,
                ram_mb: 4,
                ring: 16,
                cache_kb: 1,
                cache_ways: ways,
                by_task: true,
                snoop,
                ..Config::default()
            },
            vcpus,
        );
        s.set_task_channel(CHANNEL, 1 << 22);
        s
    }

    /// `task` switched in on vCPU 0, then one access.
    fn access_as(s: &State, task: u64, vaddr: u64, paddr: u64) {
        s.task_switch(0, CHANNEL + task, || true);
        s.on_access(0, vaddr, paddr, || false);
    }

    #[test]
    fn counts_pages_and_user_accesses() {
        let s = state(10_000);
        s.on_access(0, 0x1000, 0x5000, || false);
        s.on_access(1, 0x1000, 0x5000, || false);
        s.on_access(1, USER_TOP + 8, 0x6000, || false); // kernel: not counted per page
        s.on_access(0, 0x1000, 0x8000_1000, || false); // slow, beyond ram_mb
        s.on_access(7, 0x1000, 0x5000, || false); // no such vCPU: ignored
        let counts = s.page_counts();
        assert_eq!(counts, vec![(5, 2)]);
        let t = s.totals(&counts);
        assert_eq!(
            (t.fast_user, t.slow_user, t.outside, t.accesses),
            (2, 1, 1, 3)
        );
        assert_eq!(t.modelled_ns, 2 * 143 + 320);
        s.reset();
        let counts = s.page_counts();
        assert!(counts.is_empty());
        assert_eq!(s.totals(&counts), Totals::default());
        s.on_access(1, 0x1000, 0x5000, || false);
        assert_eq!(s.page_counts(), vec![(5, 1)]);
    }

    /// The delays as set: the slow node's and the fast tier's for user addresses, none for
    /// the kernel's own accesses, the slow node's included (migration's copies).
    #[test]
    fn only_accesses_through_user_addresses_are_delayed() {
        let s = state(10_000);
        s.slow_ns.store(16_000, Relaxed);
        s.fast_ns.store(7_150, Relaxed);
        assert_eq!(s.delay_ns(true, true), 16_000);
        assert_eq!(s.delay_ns(false, true), 7_150);
        assert_eq!(s.delay_ns(true, false), 0);
        assert_eq!(s.delay_ns(false, false), 0);
    }

    #[test]
    fn samples_one_in_period_with_random_low_bits() {
        let s = state(64);
        let n = 64 * 10_000;
        for i in 0..n {
            s.on_access(0, 0x10_0000 + (i % 4096) * 8, 0x1000, || i % 2 == 0);
        }
        let mut got = Vec::new();
        s.vcpus[0].ring.drain(|r| got.push(*r));
        // Mean interval 64 - 7.5: about 11,300 samples.
        assert!((10_900..=11_800).contains(&got.len()), "{}", got.len());
        assert!(got.iter().all(|r| r.vcpu == 0 && r.paddr == 0x1000));
        assert!(got.iter().any(|r| r.is_store) && got.iter().any(|r| !r.is_store));
        // Kernel accesses are never sampled.
        for _ in 0..1000 {
            s.on_access(1, USER_TOP, 0x1000, || false);
        }
        assert!(s.vcpus[1].ring.is_empty());
    }

    /// A 1 KiB cache holds 16 lines: 0x1000 and 0x1040 are lines 0x40 and 0x41 (slots 0 and
    /// 1); 0x1400 is line 0x50, slot 0 again, so it evicts 0x1000. By hand: 0x1000 miss,
    /// 0x1000 hit, 0x1040 miss, 0x1400 miss (evicts), 0x1000 miss, 0x1040 hit: 4 misses
    /// counted on page 1, 2 hits; the slow access beyond is a miss on page 0x80001.
    #[test]
    fn the_modelled_cache_counts_only_misses_and_filters_samples_on_hits() {
        let cfg = Config {
            period: 16,
            ram_mb: 4096,
            ring: 1 << 12,
            cache_kb: 1,
            ..Config::default()
        };
        let s = State::new(cfg, 1);
        for paddr in [0x1000, 0x1000, 0x1040, 0x1400, 0x1000, 0x1040] {
            s.on_access(0, 0x7000, paddr, || false);
        }
        s.on_access(0, 0x7000, 0x8000_1000, || false);
        let counts = s.page_counts();
        assert_eq!(counts, vec![(1, 4), (0x80001, 1)]);
        let t = s.totals(&counts);
        assert_eq!((t.fast_user, t.slow_user, t.cache_hits), (4, 1, 2));
        assert_eq!(t.modelled_ns, 4 * 143 + 320);
        // One address over and over: after the first miss every op hits, so every sample is
        // filtered and none is sent; period 16 means a mean interval of 16 - 7.5 = 8.5 ops
        // (`reload`), so 1600 ops give about 188 samples.
        let s = State::new(
            Config {
                period: 16,
                ram_mb: 1,
                ring: 1 << 12,
                cache_kb: 1,
                ..Config::default()
            },
            1,
        );
        for _ in 0..16 * 100 {
            s.on_access(0, 0x7000, 0x1000, || false);
        }
        let t = s.totals(&s.page_counts());
        assert!(s.vcpus[0].ring.is_empty());
        assert!((170..=205).contains(&t.samples_filtered), "{t:?}");
    }

    #[test]
    fn full_ring_drops_and_counts() {
        let cfg = Config {
            period: 16,
            ram_mb: 1,
            ring: 4,
            ..Config::default()
        };
        let s = State::new(cfg, 1);
        for _ in 0..16 * 100 {
            s.on_access(0, 0x1000, 0x1000, || false);
        }
        let t = s.totals(&s.page_counts());
        assert!(t.samples_dropped > 80, "{t:?}");
    }

    /// A 1 KiB cache of 2 ways has 8 sets: lines 0x40, 0x48 and 0x50 (0x1000, 0x1200,
    /// 0x1400) all fall in set 0. By hand, LRU: 0x1000 miss, 0x1200 miss, 0x1000 hit (now
    /// first), 0x1400 miss evicting 0x1200 (the least recent; FIFO would evict 0x1000),
    /// 0x1000 hit, 0x1200 miss evicting 0x1400, 0x1400 miss evicting 0x1000, 0x1200 hit. One
    /// way (16 sets: 0x1200 alone in set 8): 0x1400 evicts 0x1000 and the reverse.
    #[test]
    fn the_modelled_cache_is_lru_within_a_set() {
        let seq = [
            0x1000, 0x1200, 0x1000, 0x1400, 0x1000, 0x1200, 0x1400, 0x1200,
        ];
        let run = |ways| {
            let cfg = Config {
                ram_mb: 1,
                ring: 16,
                cache_kb: 1,
                cache_ways: ways,
                ..Config::default()
            };
            let s = State::new(cfg, 1);
            seq.map(|p| s.vcpus[0].cache_hit(p, true, |_, _| false))
        };
        let (m, h) = (false, true);
        assert_eq!(run(2), [m, m, h, m, h, m, m, h]);
        assert_eq!(run(1), [m, m, h, m, m, h, m, h]);
    }

    /// The task that filled a line moves with it inside the set: in a 2-way set 0, 200's
    /// miss on 0x1400 evicts its own 0x1200 (100's 0x1000 was used since), so 200's miss on
    /// 0x1200 is a refetch of its own and evicts 100's 0x1000; 100's miss on it then names 200.
    #[test]
    fn a_lines_owner_moves_with_it_inside_the_set() {
        let s = tasked_cache(2);
        for (task, paddr) in [
            (100, 0x1000),
            (200, 0x1200),
            (100, 0x1000),
            (200, 0x1400),
            (200, 0x1200),
            (100, 0x1000),
        ] {
            access_as(&s, task, 0x7000, paddr);
        }
        let want: Tally = [
            ((100, bytask::NONE), (1, 0)),
            ((200, bytask::NONE), (2, 0)),
            ((200, 200), (1, 0)),
            ((100, 200), (1, 0)),
        ]
        .into_iter()
        .collect();
        assert_eq!(s.by_task().unwrap(), (want, 0));
    }

    /// With `by_task`, the vCPU's task as the channel names it owns its misses: lines 0x1000
    /// and 0x1400 share slot 0 of a 1 KiB direct-mapped cache (see
    /// `the_modelled_cache_counts_only_misses_and_filters_samples_on_hits`), so task 200's miss on
    /// 0x1400 evicts task 100's 0x1000 and 100's next miss on it is a refetch caused by 200;
    /// 100's kernel-address miss on 0x1400 then is none (the line was 200's). RESET starts
    /// the count again.
    #[test]
    fn misses_are_counted_per_task_and_the_evicting_task() {
        let s = tasked_cache(1);
        let run = |task, vaddr, paddr| access_as(&s, task, vaddr, paddr);
        run(100, 0x7000, 0x1000);
        run(200, 0x7000, 0x1400);
        run(100, 0x7000, 0x1000);
        run(100, 0x7000, 0x1000); // a hit: not counted
        run(100, USER_TOP + 8, 0x1400);
        let (tally, overflow) = s.by_task().unwrap();
        let want = Tally::from([
            ((100, bytask::NONE), (1, 1)),
            ((200, bytask::NONE), (1, 0)),
            ((100, 200), (1, 0)),
        ]);
        assert_eq!((tally, overflow), (want, 0));
        s.reset();
        assert_eq!(s.by_task().unwrap(), (Tally::new(), 0));
        run(200, 0x7000, 0x1000);
        let want = Tally::from([((200, bytask::NONE), (1, 0))]);
        assert_eq!(s.by_task().unwrap(), (want, 0));
        assert!(state(16).by_task().is_none(), "off by default");
    }

    /// Two vCPUs, each with a 1 KiB direct-mapped cache (16 sets): 0x1000 (line 0x40) and
    /// 0x1400 (line 0x50) share set 0, both on page 1. By hand, with `snoop=1`: vCPU 0 0x1000
    /// miss; vCPU 1 0x1000 own miss, vCPU 0 holds it: a peer hit; vCPU 1 0x1000 own hit;
    /// vCPU 0 0x1400 miss (evicts 0x1000 there); vCPU 1 0x1400 own miss (evicts its 0x1000),
    /// vCPU 0 holds it: a peer hit; vCPU 0 0x1000 own miss, and vCPU 1 no longer holds it: a
    /// miss. 3 misses, 3 hits of which 2 peer hits. Without snoop the same accesses are 5
    /// misses and 1 hit.
    #[test]
    fn a_miss_another_vcpus_cache_holds_is_a_hit_with_snoop() {
        let run = |snoop| {
            // by_task and the task channel change no hit or miss.
            let s = tasked_caches(2, 1, snoop);
            for (vcpu, paddr) in [
                (0, 0x1000),
                (1, 0x1000),
                (1, 0x1000),
                (0, 0x1400),
                (1, 0x1400),
                (0, 0x1000),
            ] {
                s.on_access(vcpu, 0x7000, paddr, || false);
            }
            let counts = s.page_counts();
            let t = s.totals(&counts);
            (counts, t.fast_user, t.cache_hits, t.peer_hits)
        };
        assert_eq!(run(true), (vec![(1, 3)], 3, 3, 2));
        assert_eq!(run(false), (vec![(1, 5)], 5, 1, 0));
    }

    /// With `by_task`, a peer hit is no miss of the task, but its fill still evicts: task
    /// 100 on vCPU 1 misses 0x1000; task 200 on vCPU 0 misses 0x1400; task 100's 0x1400 on
    /// vCPU 1 is a peer hit that evicts its own 0x1000 there; its 0x1000 again misses (vCPU
    /// 0 holds only 0x1400), a refetch of what it evicted itself.
    #[test]
    fn a_peer_hit_is_not_counted_as_a_miss_but_its_eviction_is_remembered() {
        let s = tasked_caches(2, 1, true);
        let run = |vcpu: u32, task: u64, paddr| {
            s.task_switch(vcpu, CHANNEL + task, || true);
            s.on_access(vcpu, 0x7000, paddr, || false);
        };
        run(1, 100, 0x1000);
        run(0, 200, 0x1400);
        run(1, 100, 0x1400);
        run(1, 100, 0x1000);
        let want = Tally::from([
            ((100, bytask::NONE), (1, 0)),
            ((200, bytask::NONE), (1, 0)),
            ((100, 100), (1, 0)),
        ]);
        assert_eq!(s.by_task().unwrap(), (want, 0));
        assert_eq!(s.totals(&s.page_counts()).peer_hits, 1);
    }

    /// A kernel store into the channel names the task of that vCPU only; loads in it and
    /// accesses outside it name nothing; each later sample of the vCPU carries the task, and
    /// turning the channel off forgets it.
    #[test]
    fn the_task_channel_names_each_vcpus_task_for_its_samples() {
        let s = state(16);
        let base = 0xffff_c900_0010_0000;
        assert!(!s.task_switch(0, base + 4242, || true), "no channel yet");
        s.set_task_channel(base, 4_194_304);
        assert!(s.task_switch(0, base + 4242, || true));
        assert!(
            s.task_switch(1, base + 77, || false),
            "a load is the channel's too"
        );
        assert!(!s.task_switch(1, base - 1, || true));
        assert!(
            !s.task_switch(1, base + 4_194_304, || true),
            "one past the end"
        );
        assert_eq!(s.vcpus[0].task.load(Relaxed), 4242);
        assert_eq!(s.vcpus[1].task.load(Relaxed), 0);
        for _ in 0..16 * 4 {
            s.on_access(0, 0x1000, 0x1000, || false);
            s.on_access(1, 0x2000, 0x2000, || false);
        }
        let mut tasks = Vec::new();
        for v in s.vcpus.iter() {
            v.ring.drain(|x| tasks.push((x.vcpu, x.task)));
        }
        assert!(tasks.len() >= 6, "{tasks:?}");
        assert!(
            tasks
                .iter()
                .all(|&(v, t)| t == if v == 0 { 4242 } else { 0 }),
            "{tasks:?}"
        );
        let t = s.totals(&s.page_counts());
        assert_eq!(t.switches, 1);
        assert_eq!(
            t.with_task,
            tasks.iter().filter(|x| x.0 == 0).count() as u64
        );
        s.set_task_channel(0, 0);
        assert_eq!(s.vcpus[0].task.load(Relaxed), 0);
        assert!(!s.task_switch(0, base + 4242, || true));
    }
}
