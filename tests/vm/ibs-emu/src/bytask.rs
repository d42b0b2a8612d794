//! Whose misses of the modelled cache, and whose evictions caused them (plugin argument
//! `by_task=1`, control command `MISSES`).
//!
//! COUNTS says a program made more memory accesses beside one promoter than beside another;
//! it cannot say why. With the task channel naming each vCPU's task, every miss is counted
//! here per (task, cause), user and kernel addresses apart. The cause is the task whose miss
//! last evicted this very line from this slot, when the task missing now is the one that lost
//! it (a refetch: the program's line pushed out by a promoter's, the relay's or the kernel's
//! work on its vCPU, or by the program itself); otherwise there is none to name (a first
//! touch, a line another task had, or one evicted before the slot's last eviction: one victim
//! is remembered per slot).
//!
//! Only a miss touches these arrays; a hit costs what it did without them. Everything is
//! written by its vCPU's thread only (the module comment of `state` says why the counters are
//! atomics all the same).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The cause of a miss that is no refetch.
pub const NONE: u32 = u32::MAX;
/// (task, cause) pairs one vCPU can count: a Redis phase of the rig filled 4,096 (every
/// round's redis-benchmark and the rig's own short-lived tools are tasks of their own).
const PAIRS: usize = 16384;
/// Slots tried before a new pair is given up (and counted in `overflow`).
const PROBES: usize = 64;

/// One counted (task, cause) pair: `key` is `task | cause << 32`, plus one (0 is empty).
struct Pair {
    key: AtomicU64,
    user: AtomicU64,
    kernel: AtomicU64,
}

/// Misses per (task, cause), summed over vCPUs: `(user, kernel)` accesses.
pub type Tally = HashMap<(u32, u32), (u64, u64)>;

/// One vCPU's attribution, beside its modelled cache: per set, the lines it last evicted, as
/// many as it has ways, newest first (a shadow of the set's next `ways` LRU positions, so a
/// miss is a refetch when a cache of twice the ways would have hit); the task that filled each
/// line is kept in the cache's own words.
pub struct ByTask {
    /// How many evicted lines each set remembers (the cache's ways).
    depth: usize,
    /// The lines (tags as the cache keeps them: line number + 1) each set evicted; 0: none.
    victim: Box<[AtomicU64]>,
    /// Who had each and who evicted it: `owner | evictor << 32`.
    victim_who: Box<[AtomicU64]>,
    pairs: Box<[Pair]>,
    /// Misses of pairs that found no free slot.
    pub overflow: AtomicU64,
}

/// Adds one to a counter only its vCPU writes.
#[inline(always)]
fn bump(c: &AtomicU64) {
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}

impl ByTask {
    /// For a cache of `sets` sets of `ways` ways.
    pub fn new(sets: usize, ways: usize) -> ByTask {
        let n = sets * ways;
        ByTask {
            depth: ways,
            victim: (0..n).map(|_| AtomicU64::new(0)).collect(),
            victim_who: (0..n).map(|_| AtomicU64::new(0)).collect(),
            pairs: (0..PAIRS)
                .map(|_| Pair {
                    key: AtomicU64::new(0),
                    user: AtomicU64::new(0),
                    kernel: AtomicU64::new(0),
                })
                .collect(),
            overflow: AtomicU64::new(0),
        }
    }

    /// Task `task` missed on the line tagged `tag` in set `set`, evicting the line tagged
    /// `old` (0: the way was empty) that task `had` brought in.
    #[inline]
    pub fn on_miss(&self, set: usize, old: u64, had: u32, tag: u64, task: u32, user: bool) {
        let tags = &self.victim[set * self.depth..(set + 1) * self.depth];
        let whos = &self.victim_who[set * self.depth..(set + 1) * self.depth];
        // The newest eviction of this line decides: it is the one the line is missing for.
        let cause = match tags.iter().position(|t| t.load(Relaxed) == tag) {
            Some(i) => {
                let who = whos[i].load(Relaxed);
                if who as u32 == task {
                    (who >> 32) as u32
                } else {
                    NONE
                }
            }
            None => NONE,
        };
        self.on_evict(set, old, had, task);
        self.count(task, cause, user);
    }

    /// Task `task`'s fill of set `set` evicted the line tagged `old` (0: the way was empty)
    /// that task `had` brought in. Alone for a fill that is no miss (`snoop=1`: another
    /// vCPU's cache served it); `on_miss` calls it for the others.
    #[inline]
    pub fn on_evict(&self, set: usize, old: u64, had: u32, task: u32) {
        if old == 0 {
            return;
        }
        let tags = &self.victim[set * self.depth..(set + 1) * self.depth];
        let whos = &self.victim_who[set * self.depth..(set + 1) * self.depth];
        for i in (1..self.depth).rev() {
            tags[i].store(tags[i - 1].load(Relaxed), Relaxed);
            whos[i].store(whos[i - 1].load(Relaxed), Relaxed);
        }
        tags[0].store(old, Relaxed);
        whos[0].store(u64::from(had) | u64::from(task) << 32, Relaxed);
    }

    #[inline]
    fn count(&self, task: u32, cause: u32, user: bool) {
        let key = (u64::from(task) | u64::from(cause) << 32) + 1;
        // Fibonacci hashing: the top bits of key * 2^64/phi.
        let mut i =
            (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - PAIRS.trailing_zeros())) as usize;
        for _ in 0..PROBES {
            let p = &self.pairs[i];
            let k = p.key.load(Relaxed);
            if k == 0 {
                p.key.store(key, Relaxed);
            }
            if k == 0 || k == key {
                bump(if user { &p.user } else { &p.kernel });
                return;
            }
            i = (i + 1) & (PAIRS - 1);
        }
        bump(&self.overflow);
    }

    /// Adds this vCPU's counts into `into`.
    pub fn add_to(&self, into: &mut Tally) {
        for p in self.pairs.iter() {
            let key = p.key.load(Relaxed);
            if key == 0 {
                continue;
            }
            let key = key - 1;
            let e = into.entry((key as u32, (key >> 32) as u32)).or_default();
            e.0 += p.user.load(Relaxed);
            e.1 += p.kernel.load(Relaxed);
        }
    }
}

/// `now` less `base`, pair by pair, without the pairs that did not change.
pub fn since(now: &Tally, base: &Tally) -> Tally {
    now.iter()
        .filter_map(|(&k, &(u, kern))| {
            let (bu, bk) = base.get(&k).copied().unwrap_or_default();
            let d = (u.wrapping_sub(bu), kern.wrapping_sub(bk));
            (d != (0, 0)).then_some((k, d))
        })
        .collect()
}

/// The MISSES answer: `MISSES overflow=N pairs=P` then `task:cause:user:kernel` for the pairs
/// with the most misses first (cause `-` for none), at most `limit`, and `rest=user:kernel`
/// for the pairs left out.
pub fn misses_line(tally: &Tally, overflow: u64, limit: usize) -> String {
    let mut pairs: Vec<_> = tally.iter().collect();
    pairs.sort_by_key(|&(&(task, cause), &(u, k))| (std::cmp::Reverse(u + k), task, cause));
    let mut out = format!("MISSES overflow={overflow} pairs={}", pairs.len());
    let (mut rest_u, mut rest_k) = (0, 0);
    for (i, (&(task, cause), &(u, k))) in pairs.into_iter().enumerate() {
        if i >= limit {
            rest_u += u;
            rest_k += k;
            continue;
        }
        let cause = if cause == NONE {
            "-".to_string()
        } else {
            cause.to_string()
        };
        out.push_str(&format!(" {task}:{cause}:{u}:{k}"));
    }
    out.push_str(&format!(" rest={rest_u}:{rest_k}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(b: &ByTask) -> Tally {
        let mut t = Tally::new();
        b.add_to(&mut t);
        t
    }

    /// Worked by hand on one set of one way: task 7 fills it with line A; 9's miss on B evicts A; 7's
    /// miss on A is a refetch caused by 9 (and evicts B); 9's miss on B, through a kernel
    /// address, is a refetch caused by 7; 7's miss on C evicts B; 7's miss on A then is no
    /// refetch (the slot remembers only B); 7's miss on C is a refetch of its own (cause 7).
    #[test]
    fn a_refetch_names_the_task_whose_miss_evicted_the_line() {
        let b = ByTask::new(4, 1);
        let (a, bb, c) = (0x41, 0x45, 0x49);
        // (evicted line, who had brought it in): one way, so the previous miss's.
        b.on_miss(1, 0, 0, a, 7, true);
        b.on_miss(1, a, 7, bb, 9, true);
        b.on_miss(1, bb, 9, a, 7, true);
        b.on_miss(1, a, 7, bb, 9, false);
        b.on_miss(1, bb, 9, c, 7, true);
        b.on_miss(1, c, 7, a, 7, true);
        b.on_miss(1, a, 7, c, 7, true);
        let t = tally(&b);
        let want: Tally = [
            ((7, NONE), (3, 0)),
            ((9, NONE), (1, 0)),
            ((7, 9), (1, 0)),
            ((9, 7), (0, 1)),
            ((7, 7), (1, 0)),
        ]
        .into_iter()
        .collect();
        assert_eq!(t, want);
        assert_eq!(b.overflow.load(Relaxed), 0);
    }

    /// Two ways, so a set remembers its last two evictions, newest first. By hand: 9 evicts
    /// 7's A, then 9's own B; 7 missing on A finds it second in the shadow (cause 9); 9
    /// missing on B finds it first (itself); 5 missing on A, which 7 had, is no refetch of
    /// 5's; C was never evicted.
    #[test]
    fn a_set_remembers_as_many_evictions_as_it_has_ways() {
        let b = ByTask::new(2, 2);
        let (a, bb, c) = (0x41, 0x45, 0x49);
        b.on_miss(1, a, 7, 0x51, 9, true);
        b.on_miss(1, bb, 9, 0x55, 9, true);
        b.on_miss(1, 0, 0, a, 7, true);
        b.on_miss(1, 0, 0, bb, 9, false);
        b.on_miss(1, 0, 0, a, 5, true);
        b.on_miss(1, 0, 0, c, 7, true);
        let t = tally(&b);
        let want: Tally = [
            ((9, NONE), (2, 0)),
            ((7, 9), (1, 0)),
            ((9, 9), (0, 1)),
            ((5, NONE), (1, 0)),
            ((7, NONE), (1, 0)),
        ]
        .into_iter()
        .collect();
        assert_eq!(t, want);
    }

    #[test]
    fn pairs_past_the_table_are_counted_as_overflow() {
        let b = ByTask::new(1, 1);
        for task in 0..(PAIRS as u32 + 100) {
            b.on_miss(0, 0, 0, 1, task, true);
        }
        let t = tally(&b);
        let counted: u64 = t.values().map(|&(u, _)| u).sum();
        assert_eq!(counted + b.overflow.load(Relaxed), PAIRS as u64 + 100);
        assert!(t.len() <= PAIRS);
        assert!(b.overflow.load(Relaxed) >= 100);
    }

    #[test]
    fn the_answer_lists_the_most_missed_pairs_first_and_sums_the_rest() {
        let now: Tally = [((5, NONE), (10, 2)), ((5, 6), (4, 0)), ((6, 5), (1, 1))]
            .into_iter()
            .collect();
        let base: Tally = [((5, NONE), (3, 2)), ((6, 5), (1, 1))]
            .into_iter()
            .collect();
        let d = since(&now, &base);
        assert_eq!(d.len(), 2, "(6, 5) did not change");
        assert_eq!(
            misses_line(&d, 3, 1),
            "MISSES overflow=3 pairs=2 5:-:7:0 rest=4:0\n"
        );
        assert_eq!(
            misses_line(&d, 0, 10),
            "MISSES overflow=0 pairs=2 5:-:7:0 5:6:4:0 rest=0:0\n"
        );
    }
}
