//! Folio sizes, for a batch that no admission has sized (`admission.split` off).
//!
//! move_pages(2) moves whole folios: `add_folio_for_migration()` (mm/migrate.c, Linux 6.12)
//! isolates the folio of the address it is given, and `migrate_pages()` copies all of it. With
//! THP `always` (Debian's default), one sampled 4 KiB page of a THP moves 2 MiB. Charged at
//! 4 KiB, such a move passed the rate limit and the watermark at 1/512 of its size, was counted
//! as 4 KiB in `pgpromote_bytes`, and moved whatever cold subpages the THP held: on the Debian
//! guest, memcached's 808 candidates moved 24,165 pages (BENCHMARKS.md, "memcached on the
//! Debian guest").
//!
//! So each candidate is looked up (pagemap and kpageflags, `admission::thp::SysThp`): a
//! candidate in a large folio is charged at the folio's size, one candidate per folio moves it
//! (the others are counted `pgpromote_same_folio`), and a folio moves whole only once its pages
//! hold, in the table, as many samples as `promote_thp_min_samples_pct` of its 4 KiB pages would
//! need to move on their own (`freq_threshold` each: 256 for a 2 MiB THP at 25 % and threshold
//! 2); until then its candidates wait (`pgpromote_deferred_sparse_folio`), offered again by
//! their next sample, and a folio found short is not counted again for [`RECOUNT_AFTER`].
//!
//! Samples, not sampled pages: a THP whose heat sits in a few pages is worth its copy as much
//! as one warm all over. On the Debian guest, Redis kept its client buffers in the first 61
//! pages of a THP (12 % of it), sampled about 200 times each in a phase; a rule counting
//! sampled pages (a quarter of them, before) held that THP back for the whole phase, with the
//! hottest pages Redis had (ibs-emu's truth `left_hot`; BENCHMARKS.md, "Redis: the hot pages
//! pghotd left").
//!
//! The hold applies whatever room the destination has. Moving sparse THPs whole on the Debian
//! guest's roomy fast node saved Redis 7-17 % of modelled memory time per GET, and cost
//! memcached two thirds of its keys/s (77 THPs, 155 MB copied, while the rig still charged every
//! read of a migration copy at the slow node's latency); a variant that held THPs back
//! only on a contended destination was measured and reverted (BENCHMARKS.md, "THPs charged at
//! their size"). `promote_thp_min_samples_pct = 0` moves them whole.

use super::Migrator;
use super::ratelimit::Clock;
use crate::hotness::candidate::Candidate;
use crate::hotness::{HotTable, PageKey};
use crate::movepages::Mover;
use crate::stats::{Counter, Stats};

/// Bytes of a base page.
const PAGE_BYTES: u64 = 4096;
/// How long a folio found too sparse to move whole is not counted again: its candidates
/// wait without the count (`folio_recounts_skipped`). A count reads each of the folio's
/// pages in the table, 512 lookups for a THP, each a likely cache miss; memcached's slab
/// THPs, sampled thinly and often, were held back 1,528 times in a 16-round phase of the
/// Debian rig, where the migrator took 5.4 s of user time (BENCHMARKS.md, "Admission reads
/// only the candidates' pages"). A folio waits at most this much longer once its pages hold
/// enough: a promotion batch is held about as long (`migrate_hold_ms`).
pub const RECOUNT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
/// Pages of a PMD THP (2 MiB on x86-64), counted in `thp_whole_promotions`.
const PMD_PAGES: u32 = 512;

/// A large folio: its first address and its size in 4 KiB pages (2..=512, a power of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Folio {
    pub start: u64,
    pub pages: u32,
}

impl Folio {
    pub fn bytes(&self) -> u64 {
        u64::from(self.pages) * PAGE_BYTES
    }
}

/// Why folio sizes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FolioError {
    /// This process's pagemap (it exited, or is another's to read): its candidates go on at
    /// 4 KiB and their move says what became of them.
    #[error("{0}")]
    Process(String),
    /// Not on this machine (no page frame numbers without CAP_SYS_ADMIN, no kpageflags): sizing
    /// is off for the rest of the run.
    #[error("{0}")]
    Unavailable(String),
}

/// Where folio sizes come from: the kernel (`SysThp`), or a fake in tests.
pub trait FolioMap: Send {
    /// For each of `vaddrs` (sorted) of `pid`, the large folio that holds it; `None` for a
    /// base page or a page not present.
    fn large_folios(&mut self, pid: u32, vaddrs: &[u64]) -> Result<Vec<Option<Folio>>, FolioError>;
}

/// The samples a folio's pages hold in the table: their counts, as `record` left them (a count
/// whose window has lapsed is reset by the page's next sample, so it still counts until then,
/// as it did for the rule by sampled pages).
fn folio_samples(table: &HotTable, pid: u32, folio: Folio) -> u64 {
    let mut sum = 0;
    table.visit_range(pid, folio.start, folio.pages, |_, e| {
        sum += u64::from(e.count());
    });
    sum
}

/// Whether a folio of `pages` whose pages hold `samples` is hot enough to move whole: as many
/// samples as `min_pct` of its pages would need at `threshold` each.
fn hot_enough(samples: u64, pages: u32, threshold: u32, min_pct: u8) -> bool {
    samples * 100 >= u64::from(pages) * u64::from(threshold) * u64::from(min_pct)
}

impl<M: Mover, C: Clock> Migrator<M, C> {
    /// Whether the migrator sizes folios itself: it has a folio map and no admission that
    /// sizes them (splitting on).
    pub(super) fn sizes_folios(&self) -> bool {
        self.folios.is_some() && !self.admission.as_ref().is_some_and(|a| a.sizes_folios())
    }

    /// The large folios of `vaddrs` (sorted) of `pid`, or `None` when they cannot be read: no
    /// map, this process's map unreadable (logged), or folio sizes unreadable on this machine
    /// (warned; the map is dropped, so every later lookup is `None` at once). Promotion and
    /// moving back both ask here.
    fn folios_of(&mut self, pid: u32, vaddrs: &[u64]) -> Option<Vec<Option<Folio>>> {
        match self.folios.as_mut()?.large_folios(pid, vaddrs) {
            Ok(folios) => Some(folios),
            Err(FolioError::Process(e)) => {
                tracing::debug!(pid, "folio sizes unknown, its pages move at 4 KiB: {e}");
                None
            }
            Err(FolioError::Unavailable(e)) => {
                tracing::warn!(
                    "folio sizes cannot be read: candidates are charged at 4 KiB, a page in a \
                     large folio moves it whole, and pages under the heat floor move back \
                     whatever their folio: {e}"
                );
                self.folios = None;
                None
            }
        }
    }

    /// Charges each candidate of `batch` at its folio's size, keeps one candidate per folio
    /// and defers the candidates of folios too sparse to move whole (see the module doc).
    pub(super) fn size_folios(&mut self, batch: &mut Vec<Candidate>) {
        batch.sort_unstable_by_key(|c| (c.key.pid(), c.key.vaddr()));
        let mut out = Vec::with_capacity(batch.len());
        for group in batch.chunk_by(|a, b| a.key.pid() == b.key.pid()) {
            if self.folios.is_none() {
                out.extend_from_slice(group);
                continue;
            }
            let vaddrs: Vec<u64> = group.iter().map(|c| c.key.vaddr()).collect();
            match self.folios_of(group[0].key.pid(), &vaddrs) {
                Some(folios) => self.charge_folios(group, &folios, &mut out),
                None => {
                    self.stats
                        .add(Counter::FolioSizeUnknown, group.len() as u64);
                    out.extend_from_slice(group);
                }
            }
        }
        *batch = out;
    }

    /// Takes out of `pages` (ours, on a fast node, to be moved back) those that sit in a large
    /// folio there, each counted (`pgdemote_held_large_folio`). move_pages(2) would move the
    /// whole folio, which was promoted as one (a THP or a subfolio admission judged dense, or
    /// a THP `promote_thp_min_samples_pct` let move), and the page falling under the floor
    /// says nothing of its other pages; the demotion bucket would also be charged 4 KiB for
    /// it. Where folio sizes cannot be read (see `folios_of`) nothing is held.
    pub(super) fn hold_large_folios(&mut self, pages: &mut Vec<PageKey>) {
        if pages.is_empty() || self.folios.is_none() {
            return;
        }
        pages.sort_unstable_by_key(|k| (k.pid(), k.vaddr()));
        let mut kept = Vec::with_capacity(pages.len());
        let mut held = 0u64;
        for group in pages.chunk_by(|a, b| a.pid() == b.pid()) {
            let vaddrs: Vec<u64> = group.iter().map(|k| k.vaddr()).collect();
            let Some(folios) = self.folios_of(group[0].pid(), &vaddrs) else {
                kept.extend_from_slice(group);
                continue;
            };
            for (key, folio) in group.iter().zip(&folios) {
                if folio.is_some() {
                    held += 1;
                } else {
                    kept.push(*key);
                }
            }
        }
        self.stats.add(Counter::PgdemoteHeldLargeFolio, held);
        *pages = kept;
    }

    /// One process's candidates (sorted by address) with their folios, into `out`.
    fn charge_folios(
        &mut self,
        group: &[Candidate],
        folios: &[Option<Folio>],
        out: &mut Vec<Candidate>,
    ) {
        let min_pct = self.config.promote_thp_min_samples_pct;
        let table = &self.table;
        let threshold = u32::from(table.policy().freq_threshold);
        let now = self.clock.now();
        let sparse = &mut self.sparse_folios;
        sparse.retain(|_, at| now.saturating_sub(*at) < RECOUNT_AFTER);
        let stats = &self.stats;
        let moves = |c: &Candidate, folio: Folio| {
            if min_pct == 0 {
                return true;
            }
            let at = (c.key.pid(), folio.start);
            if sparse.contains_key(&at) {
                stats.add(Counter::FolioRecountsSkipped, 1);
                return false;
            }
            let samples = folio_samples(table, c.key.pid(), folio);
            let hot = hot_enough(samples, folio.pages, threshold, min_pct);
            if !hot {
                sparse.insert(at, now);
            }
            hot
        };
        let waiting = one_per_folio(group, folios, &self.stats, moves, out);
        self.held_back(&waiting, Counter::PgpromoteDeferredSparseFolio);
    }
}

/// One address per folio: the first candidate (by address) of each large folio that `moves`
/// lets move is charged at the folio's size and moves it, later ones in it are counted
/// `pgpromote_same_folio`; PMD THPs count in `thp_whole_promotions`. Base pages (`None`) go
/// on as they are. Returns the candidates of folios `moves` held back, for the caller to
/// count and un-queue. `group` is one process's, sorted by address, so a folio's candidates
/// are adjacent; `moves` is asked once per folio. Admission's gate moves what it does not
/// split through this too.
pub fn one_per_folio(
    group: &[Candidate],
    folios: &[Option<Folio>],
    stats: &Stats,
    mut moves: impl FnMut(&Candidate, Folio) -> bool,
    out: &mut Vec<Candidate>,
) -> Vec<Candidate> {
    let mut waiting = Vec::new();
    // The folio decided last, and whether it moves.
    let mut last: Option<(Folio, bool)> = None;
    for (c, folio) in group.iter().zip(folios) {
        let Some(folio) = *folio else {
            out.push(*c);
            continue;
        };
        let moving = match last {
            Some((f, moving)) if f == folio => {
                if moving {
                    stats.add(Counter::PgpromoteSameFolio, 1);
                } else {
                    waiting.push(*c);
                }
                continue;
            }
            _ => moves(c, folio),
        };
        last = Some((folio, moving));
        if !moving {
            waiting.push(*c);
            continue;
        }
        if folio.pages >= PMD_PAGES {
            stats.add(Counter::ThpWholePromotions, 1);
        }
        out.push(Candidate {
            bytes: folio.bytes(),
            ..*c
        });
    }
    waiting
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_of_the_pages_worth_of_samples_is_hot_enough_and_one_short_is_not() {
        // 512 pages * 25 % = 128 pages, at threshold 2 = 256 samples, by hand.
        assert!(hot_enough(256, 512, 2, 25));
        assert!(!hot_enough(255, 512, 2, 25));
        // However they are spread: 61 pages with about 200 each is far beyond.
        assert!(hot_enough(61 * 200, 512, 2, 25));
        // A 16 KiB mTHP (4 pages): one page at threshold 2 is a quarter's worth.
        assert!(hot_enough(2, 4, 2, 25));
        assert!(!hot_enough(1, 4, 2, 25));
        assert!(hot_enough(0, 512, 2, 0));
        assert!(!hot_enough(1023, 512, 2, 100));
    }
}
