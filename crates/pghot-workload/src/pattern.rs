//! Access patterns: which pages are hot, and the stream of accesses each worker makes.
//!
//! A [`Plan`] is built once from the seed (SplitMix64 stream 0 of the seed); each worker walks it
//! with its own [`Cursor`] (stream 1 + worker index). Every access touches one 64-bit word in a
//! random 64-byte line of the chosen 4 KiB page; `write_pct` percent of them are stores.
//!
//! | pattern | hot set | accesses |
//! |---|---|---|
//! | `hot-scattered` | `hot_pages` pages chosen at random across the buffer | uniform over the hot set |
//! | `hot-block` | one contiguous run of `hot_pages` at a random offset | uniform over the block |
//! | `uniform` | every page | uniform over the buffer |
//! | `zipf` | the `hot_pages` highest ranks | Zipf(0.99) over ranks, ranks shuffled over pages |
//! | `chase` | as `hot-scattered` | a dependent pointer chase around one random cycle |
//! | `hot-clusters` | 64 KiB clusters, one in each of `hot_pages / 16` random 2 MiB regions, all at the same random 64 KiB-aligned offset | uniform over the hot set |
//! | `runs-64k`, `runs-128k`, `runs-256k` | runs of that size, each starting at a random 4 KiB page of the buffer (so at a different offset in each 2 MiB region, some across two), not overlapping | uniform over the hot set |
//!
//! `hot-clusters` is the THP-splitting workload of the TierBPF issue: with `--thp` each cluster
//! is the hot part of a 2 MiB THP, and every THP has it at the same offset, the shape the
//! per-process subpage histogram sees in the paper's Figure 1 workloads. The `runs-*` patterns
//! are issue 24's shapes: hot runs at different offsets in different THPs, which a histogram
//! folded by offset sees as nearly flat.
//!
//! For `chase` each hot page holds one 64-byte slot (at a random line) whose first word is the
//! word index of the next slot in the cycle; [`Plan::init_memory`] writes them, and a store
//! writes the slot's second word so the chain survives.

use std::sync::atomic::{AtomicU64, Ordering};

use super::rng::SplitMix64;
use super::zipf::Zipf;

pub const PAGE_SIZE: usize = 4096;
pub const WORDS_PER_PAGE: usize = PAGE_SIZE / 8;
const LINES_PER_PAGE: u64 = 64;
const WORDS_PER_LINE: usize = 8;
pub const ZIPF_EXPONENT: f64 = 0.99;

/// Bits of each access's random draw: 6 pick the line, the next 26 decide load or store, the
/// top 32 pick the page (multiply-shift over at most 2^32 pages, i.e. 16 TiB).
const WRITE_BITS: u32 = 26;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pattern {
    /// `--hot-mb` of pages chosen at random across the buffer, accessed uniformly.
    HotScattered,
    /// One contiguous `--hot-mb` block at a random offset, accessed uniformly.
    HotBlock,
    /// Every page equally (`--hot-mb` is not used).
    Uniform,
    /// Zipf(0.99) over all pages in a random rank order; the top `--hot-mb` ranks are the hot set.
    Zipf,
    /// A dependent pointer chase around one random cycle through `--hot-mb` of scattered pages.
    Chase,
    /// `--hot-mb` as 64 KiB clusters, one per random 2 MiB region, at one offset in each.
    HotClusters,
    /// `--hot-mb` as 64 KiB runs, each at a random 4 KiB page of the buffer.
    #[value(name = "runs-64k")]
    Runs64k,
    /// `--hot-mb` as 128 KiB runs, each at a random 4 KiB page of the buffer.
    #[value(name = "runs-128k")]
    Runs128k,
    /// `--hot-mb` as 256 KiB runs, each at a random 4 KiB page of the buffer.
    #[value(name = "runs-256k")]
    Runs256k,
}

impl Pattern {
    pub const fn name(self) -> &'static str {
        match self {
            Pattern::HotScattered => "hot-scattered",
            Pattern::HotBlock => "hot-block",
            Pattern::Uniform => "uniform",
            Pattern::Zipf => "zipf",
            Pattern::Chase => "chase",
            Pattern::HotClusters => "hot-clusters",
            Pattern::Runs64k => "runs-64k",
            Pattern::Runs128k => "runs-128k",
            Pattern::Runs256k => "runs-256k",
        }
    }

    /// Pages per run of a `runs-*` pattern.
    pub const fn run_pages(self) -> Option<usize> {
        match self {
            Pattern::Runs64k => Some(16),
            Pattern::Runs128k => Some(32),
            Pattern::Runs256k => Some(64),
            _ => None,
        }
    }

    /// Whether `--hot-mb` means anything for this pattern.
    pub const fn uses_hot_size(self) -> bool {
        !matches!(self, Pattern::Uniform)
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Scattered {
        hot: Vec<u32>,
    },
    Block {
        start: u64,
        len: u64,
    },
    Uniform,
    Zipf {
        zipf: Zipf,
        rank_to_page: Vec<u32>,
    },
    /// Word index of each hot page's slot, in cycle order.
    Chase {
        slots: Vec<usize>,
    },
}

/// One access a worker made: the word touched and whether it was a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub word: usize,
    pub store: bool,
}

impl Access {
    pub fn page(self) -> usize {
        self.word / WORDS_PER_PAGE
    }
}

/// The hot set and access stream of one run over a buffer of `pages` 4 KiB pages.
#[derive(Debug, Clone)]
pub struct Plan {
    pattern: Pattern,
    pages: usize,
    is_hot: Vec<bool>,
    hot_count: usize,
    write_threshold: u64,
    kind: Kind,
}

impl Plan {
    /// `1 <= hot_pages <= pages < 2^32` (checked by the caller; `hot_pages` is ignored for
    /// `uniform`), `write_pct <= 100`.
    pub fn new(pattern: Pattern, pages: usize, hot_pages: usize, write_pct: u8, seed: u64) -> Plan {
        assert!(pages >= 1 && u32::try_from(pages - 1).is_ok(), "page count");
        let hot_pages = if pattern.uses_hot_size() {
            hot_pages.clamp(1, pages)
        } else {
            pages
        };
        let mut rng = SplitMix64::stream(seed, 0);
        let mut is_hot = vec![false; pages];
        let kind = match pattern {
            Pattern::HotScattered | Pattern::Chase => {
                let hot = choose_pages(&mut rng, pages, hot_pages);
                for &p in &hot {
                    is_hot[p as usize] = true;
                }
                if pattern == Pattern::Chase {
                    // A shuffled ring visits every hot page once per lap: one cycle by
                    // construction, uniformly random among cyclic orders.
                    let mut ring = hot;
                    rng.shuffle(&mut ring);
                    let slots = ring
                        .iter()
                        .map(|&p| {
                            let line = rng.below(LINES_PER_PAGE) as usize;
                            p as usize * WORDS_PER_PAGE + line * WORDS_PER_LINE
                        })
                        .collect();
                    Kind::Chase { slots }
                } else {
                    Kind::Scattered { hot }
                }
            }
            Pattern::Runs64k | Pattern::Runs128k | Pattern::Runs256k => {
                let run = pattern.run_pages().unwrap_or(1);
                let hot = run_pages(&mut rng, pages, hot_pages, run);
                for &p in &hot {
                    is_hot[p as usize] = true;
                }
                Kind::Scattered { hot }
            }
            Pattern::HotClusters => {
                let hot = cluster_pages(&mut rng, pages, hot_pages);
                for &p in &hot {
                    is_hot[p as usize] = true;
                }
                Kind::Scattered { hot }
            }
            Pattern::HotBlock => {
                let start = rng.below((pages - hot_pages + 1) as u64);
                is_hot[start as usize..start as usize + hot_pages].fill(true);
                Kind::Block {
                    start,
                    len: hot_pages as u64,
                }
            }
            Pattern::Uniform => {
                is_hot.fill(true);
                Kind::Uniform
            }
            Pattern::Zipf => {
                let mut rank_to_page: Vec<u32> = (0..pages as u32).collect();
                rng.shuffle(&mut rank_to_page);
                for &p in &rank_to_page[..hot_pages] {
                    is_hot[p as usize] = true;
                }
                Kind::Zipf {
                    zipf: Zipf::new(pages, ZIPF_EXPONENT),
                    rank_to_page,
                }
            }
        };
        let hot_count = is_hot.iter().filter(|&&h| h).count();
        Plan {
            pattern,
            pages,
            is_hot,
            hot_count,
            write_threshold: u64::from(write_pct.min(100)) * (1 << WRITE_BITS) / 100,
            kind,
        }
    }

    pub fn pattern(&self) -> Pattern {
        self.pattern
    }

    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Pages in the hot set (every page for `uniform`).
    pub fn hot_count(&self) -> usize {
        self.hot_count
    }

    /// Hot-set membership by page index.
    pub fn is_hot(&self) -> &[bool] {
        &self.is_hot
    }

    /// Writes what the pattern needs in memory before the workers start (the chase's links).
    /// `mem` is the buffer as words, `pages * 512` of them.
    pub fn init_memory(&self, mem: &[AtomicU64]) {
        if let Kind::Chase { slots } = &self.kind {
            for (i, &slot) in slots.iter().enumerate() {
                let next = slots[(i + 1) % slots.len()];
                mem[slot].store(next as u64, Ordering::Relaxed);
            }
        }
    }

    /// The cursor of worker `index`.
    pub fn cursor(&self, seed: u64, index: u64) -> Cursor {
        let mut rng = SplitMix64::stream(seed, 1 + index);
        let chase_word = match &self.kind {
            Kind::Chase { slots } => slots[rng.below(slots.len() as u64) as usize],
            _ => 0,
        };
        Cursor {
            rng,
            chase_word,
            seq: 0,
            sink: 0,
        }
    }

    /// Makes one access to `mem` (the buffer as words) and says what it was.
    #[inline]
    pub fn access(&self, cur: &mut Cursor, mem: &[AtomicU64]) -> Access {
        let r = cur.rng.next_u64();
        let store = (r >> 6) & ((1 << WRITE_BITS) - 1) < self.write_threshold;
        let line = (r & (LINES_PER_PAGE - 1)) as usize;
        let pick = |n: u64| ((r >> 32) * n) >> 32;
        let page = match &self.kind {
            Kind::Scattered { hot } => hot[pick(hot.len() as u64) as usize] as usize,
            Kind::Block { start, len } => (start + pick(*len)) as usize,
            Kind::Uniform => pick(self.pages as u64) as usize,
            Kind::Zipf { zipf, rank_to_page } => rank_to_page[zipf.sample(&mut cur.rng)] as usize,
            Kind::Chase { .. } => {
                let word = cur.chase_word;
                cur.chase_word = mem[word].load(Ordering::Relaxed) as usize;
                if store {
                    cur.seq = cur.seq.wrapping_add(1);
                    mem[word + 1].store(cur.seq, Ordering::Relaxed);
                }
                return Access { word, store };
            }
        };
        let word = page * WORDS_PER_PAGE + line * WORDS_PER_LINE;
        if store {
            cur.seq = cur.seq.wrapping_add(1);
            mem[word].store(cur.seq, Ordering::Relaxed);
        } else {
            cur.sink = cur.sink.wrapping_add(mem[word].load(Ordering::Relaxed));
        }
        Access { word, store }
    }
}

/// `k` distinct pages of `0..pages`, uniformly at random (a partial Fisher-Yates shuffle).
/// Pages of a 64 KiB cluster and of a 2 MiB region.
const CLUSTER_PAGES: usize = 16;
const REGION_PAGES: usize = 512;

/// `hot-clusters`: whole 64 KiB clusters, one per random 2 MiB region, at one random aligned
/// offset; `k` rounds down to whole clusters (at least one) and up to one per region at most.
fn cluster_pages(rng: &mut SplitMix64, pages: usize, k: usize) -> Vec<u32> {
    let regions = (pages / REGION_PAGES).max(1);
    let region_pages = REGION_PAGES.min(pages);
    let slots = (region_pages / CLUSTER_PAGES).max(1);
    let offset = rng.below(slots as u64) as usize * CLUSTER_PAGES;
    let clusters = (k / CLUSTER_PAGES).clamp(1, regions);
    choose_pages(rng, regions, clusters)
        .into_iter()
        .flat_map(|r| {
            let first = r as usize * REGION_PAGES + offset;
            (first..(first + CLUSTER_PAGES).min(pages)).map(|p| p as u32)
        })
        .collect()
}

/// `runs-*`: `k / run` runs (at least one) of `run` pages, each at a random page of the buffer,
/// not overlapping. A start that would overlap a placed run is drawn again, at most 64 times
/// per run on average (the caller keeps the hot set at most a quarter of the buffer, where a
/// draw fails with probability under one half).
fn run_pages(rng: &mut SplitMix64, pages: usize, k: usize, run: usize) -> Vec<u32> {
    let run = run.min(pages);
    let runs = (k / run).max(1);
    let mut taken = vec![false; pages];
    let mut hot = Vec::with_capacity(runs * run);
    let mut draws = 0;
    while hot.len() < runs * run && draws < runs * 64 {
        draws += 1;
        let start = rng.below((pages - run + 1) as u64) as usize;
        if taken[start..start + run].contains(&true) {
            continue;
        }
        taken[start..start + run].fill(true);
        hot.extend((start..start + run).map(|p| p as u32));
    }
    hot
}

fn choose_pages(rng: &mut SplitMix64, pages: usize, k: usize) -> Vec<u32> {
    let mut all: Vec<u32> = (0..pages as u32).collect();
    for i in 0..k {
        let j = i + rng.below((pages - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(k);
    all
}

/// One worker's position in the access stream.
#[derive(Debug, Clone)]
pub struct Cursor {
    rng: SplitMix64,
    chase_word: usize,
    /// Value of the next store (any changing value would do).
    seq: u64,
    /// Sum of loaded values, so loads have a use.
    sink: u64,
}

impl Cursor {
    /// What the loads summed to; pass it to `std::hint::black_box` at the end.
    pub fn sink(&self) -> u64 {
        self.sink
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGES: usize = 1024;
    const HOT: usize = 100;

    fn memory(pages: usize) -> Vec<AtomicU64> {
        (0..pages * WORDS_PER_PAGE)
            .map(|_| AtomicU64::new(0))
            .collect()
    }

    fn hot_list(plan: &Plan) -> Vec<usize> {
        (0..plan.pages()).filter(|&p| plan.is_hot()[p]).collect()
    }

    fn run(plan: &Plan, n: usize, seed: u64) -> Vec<Access> {
        let mem = memory(plan.pages());
        plan.init_memory(&mem);
        let mut cur = plan.cursor(seed, 0);
        (0..n).map(|_| plan.access(&mut cur, &mem)).collect()
    }

    #[test]
    fn hot_sets_have_the_asked_size() {
        for pattern in [
            Pattern::HotScattered,
            Pattern::HotBlock,
            Pattern::Zipf,
            Pattern::Chase,
        ] {
            let plan = Plan::new(pattern, PAGES, HOT, 30, 1);
            assert_eq!(plan.hot_count(), HOT, "{pattern}");
            assert_eq!(hot_list(&plan).len(), HOT, "{pattern}");
        }
        let uniform = Plan::new(Pattern::Uniform, PAGES, HOT, 30, 1);
        assert_eq!(uniform.hot_count(), PAGES);
        assert!(uniform.is_hot().iter().all(|&h| h));
        let all = Plan::new(Pattern::HotScattered, PAGES, PAGES, 30, 1);
        assert_eq!(hot_list(&all).len(), PAGES);
    }

    #[test]
    fn scattered_accesses_stay_in_the_hot_set_and_spread_over_it() {
        let plan = Plan::new(Pattern::HotScattered, PAGES, HOT, 30, 5);
        let hot = hot_list(&plan);
        // Scattered: not one run.
        assert!(
            hot.last().unwrap() - hot.first().unwrap() > HOT * 2,
            "{hot:?}"
        );
        let mut seen = vec![0u32; PAGES];
        for a in run(&plan, 50_000, 5) {
            assert!(plan.is_hot()[a.page()], "page {} is not hot", a.page());
            assert_eq!(a.word % WORDS_PER_LINE, 0, "line-aligned word");
            seen[a.page()] += 1;
        }
        assert!(
            hot.iter().all(|&p| seen[p] > 0),
            "every hot page is touched"
        );
    }

    #[test]
    fn block_is_one_contiguous_run() {
        for seed in 0..20 {
            let plan = Plan::new(Pattern::HotBlock, PAGES, HOT, 30, seed);
            let hot = hot_list(&plan);
            assert_eq!(hot.len(), HOT);
            assert_eq!(
                hot.last().unwrap() - hot.first().unwrap(),
                HOT - 1,
                "seed {seed}"
            );
            for a in run(&plan, 2000, seed) {
                assert!(plan.is_hot()[a.page()]);
            }
        }
    }

    #[test]
    fn uniform_covers_the_buffer() {
        let plan = Plan::new(Pattern::Uniform, PAGES, HOT, 30, 2);
        let mut seen = vec![false; PAGES];
        for a in run(&plan, 20_000, 2) {
            seen[a.page()] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn chase_is_one_cycle_over_every_hot_page() {
        let plan = Plan::new(Pattern::Chase, PAGES, HOT, 30, 9);
        let mem = memory(PAGES);
        plan.init_memory(&mem);
        let Kind::Chase { slots } = &plan.kind else {
            panic!("chase plan")
        };
        // Follow the links in memory from the first slot: back after exactly HOT steps.
        let mut word = slots[0];
        let mut visited = vec![false; PAGES];
        for step in 0..HOT {
            let page = word / WORDS_PER_PAGE;
            assert!(plan.is_hot()[page], "step {step}: page {page} not hot");
            assert!(!visited[page], "step {step}: page {page} visited twice");
            visited[page] = true;
            word = mem[word].load(Ordering::Relaxed) as usize;
        }
        assert_eq!(word, slots[0], "the chain closes after {HOT} steps");
        assert_eq!(visited, plan.is_hot());

        // The workers' accesses walk the same cycle, stores included (which keep the links).
        let accesses = run(&plan, 3 * HOT, 9);
        for (i, a) in accesses.iter().enumerate().skip(1) {
            let prev = accesses[i - 1].word;
            let pos = slots.iter().position(|&s| s == prev).unwrap();
            assert_eq!(a.word, slots[(pos + 1) % HOT]);
        }
        assert!(accesses.iter().any(|a| a.store));
    }

    #[test]
    fn zipf_hot_set_is_the_top_ranks_and_draws_most_accesses() {
        let plan = Plan::new(Pattern::Zipf, PAGES, HOT, 30, 4);
        let Kind::Zipf { rank_to_page, .. } = &plan.kind else {
            panic!("zipf plan")
        };
        assert!(
            rank_to_page[..HOT]
                .iter()
                .all(|&p| plan.is_hot()[p as usize])
        );
        let accesses = run(&plan, 100_000, 4);
        let hot = accesses.iter().filter(|a| plan.is_hot()[a.page()]).count();
        let share = hot as f64 / accesses.len() as f64;
        // Ranks 1..=100 of 1024 at s = 0.99 carry about 68% of the mass.
        let zipf = Zipf::new(PAGES, ZIPF_EXPONENT);
        let want: f64 = (0..HOT).map(|r| zipf.probability(r)).sum();
        assert!(
            (share - want).abs() < 0.01,
            "hot share {share}, want {want}"
        );
        let top = rank_to_page[0] as usize;
        let top_count = accesses.iter().filter(|a| a.page() == top).count();
        assert!(top_count > 100_000 / 20, "rank 0 got {top_count}");
    }

    #[test]
    fn write_pct_sets_the_store_share() {
        for (pct, pattern) in [
            (0, Pattern::Uniform),
            (30, Pattern::HotScattered),
            (75, Pattern::Chase),
            (100, Pattern::Zipf),
        ] {
            let plan = Plan::new(pattern, PAGES, HOT, pct, 3);
            let n = 100_000;
            let stores = run(&plan, n, 3).iter().filter(|a| a.store).count();
            let share = stores as f64 / n as f64;
            assert!(
                (share - f64::from(pct) / 100.0).abs() < 0.01,
                "{pattern} write-pct {pct}: store share {share}"
            );
        }
    }

    #[test]
    fn hot_clusters_are_64k_at_one_offset_in_distinct_2m_regions() {
        let plan = Plan::new(Pattern::HotClusters, 64 * 512, 40 * 16 + 5, 0, 3);
        let hot = hot_list(&plan);
        assert_eq!(plan.hot_count(), 40 * 16);
        let offsets: std::collections::HashSet<usize> = hot.iter().map(|p| p % 512 / 16).collect();
        assert_eq!(offsets.len(), 1, "one cluster offset in every region");
        let regions: std::collections::HashSet<usize> = hot.iter().map(|p| p / 512).collect();
        assert_eq!(regions.len(), 40);
        for r in regions {
            assert_eq!(
                hot.iter().filter(|&&p| p / 512 == r).count(),
                16,
                "region {r}"
            );
        }
    }

    #[test]
    fn runs_are_whole_at_page_offsets_that_differ_from_region_to_region() {
        // 40 runs of 32 pages (128 KiB) in 256 regions: 1280 hot pages in runs of exactly 32.
        let plan = Plan::new(Pattern::Runs128k, 256 * 512, 40 * 32 + 7, 0, 3);
        let hot = hot_list(&plan);
        assert_eq!(plan.hot_count(), 40 * 32);
        let starts: Vec<usize> = hot
            .iter()
            .copied()
            .filter(|&p| p == 0 || !plan.is_hot()[p - 1])
            .collect();
        // Two runs placed back to back read as one longer stretch: each stretch of hot pages
        // is a whole number of runs.
        let mut total = 0;
        for &s in &starts {
            let len = (s..)
                .take_while(|&p| p < plan.pages() && plan.is_hot()[p])
                .count();
            assert_eq!(len % 32, 0, "run at {s} of {len} pages");
            total += len;
        }
        assert_eq!(total, 40 * 32);
        // Offsets within the 2 MiB regions differ (one shared offset would be hot-clusters).
        let offsets: std::collections::HashSet<usize> = starts.iter().map(|s| s % 512).collect();
        assert!(offsets.len() > 30, "{} distinct offsets", offsets.len());
    }

    #[test]
    fn same_seed_same_run_other_seed_other_run() {
        for pattern in [
            Pattern::HotScattered,
            Pattern::HotBlock,
            Pattern::Uniform,
            Pattern::Zipf,
            Pattern::Chase,
            Pattern::Runs64k,
        ] {
            let a = Plan::new(pattern, PAGES, HOT, 30, 11);
            let b = Plan::new(pattern, PAGES, HOT, 30, 11);
            let c = Plan::new(pattern, PAGES, HOT, 30, 12);
            assert_eq!(a.is_hot(), b.is_hot(), "{pattern}");
            assert_eq!(run(&a, 1000, 11), run(&b, 1000, 11), "{pattern}");
            assert_ne!(run(&a, 1000, 11), run(&c, 1000, 12), "{pattern}");
            if pattern != Pattern::Uniform {
                assert_ne!(a.is_hot(), c.is_hot(), "{pattern}");
            }
        }
    }

    #[test]
    fn workers_get_different_streams() {
        let plan = Plan::new(Pattern::Uniform, PAGES, HOT, 30, 1);
        let mem = memory(PAGES);
        let (mut w0, mut w1) = (plan.cursor(1, 0), plan.cursor(1, 1));
        let a: Vec<_> = (0..100).map(|_| plan.access(&mut w0, &mem)).collect();
        let b: Vec<_> = (0..100).map(|_| plan.access(&mut w1, &mem)).collect();
        assert_ne!(a, b);
    }
}
