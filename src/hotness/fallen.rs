//! Correcting promotions against the heat floor: `demote_below_floor_pct`.
//!
//! A promotion is a bet on a few samples. It is made while the `hot_share_pct` floor still
//! rests on a phase's first seconds, or when a warm page's windowed heat crosses the floor by
//! chance (BENCHMARKS.md, issue 18: on Redis in the rig's Debian guest, a 60 s half-life and
//! an 80 % share still promoted about half as many pages again as the hot set). Such a page
//! keeps being sampled on the fast node (IBS and PEBS see every tier), so its heat tells, a
//! little later and on more samples, whether it belongs to the hot set after all.
//!
//! While `demote_below_floor_pct` is set, the table lists every page pghotd promotes, per fast
//! node. Each migrator's upkeep walks a bounded chunk of the lists of the fast nodes it demotes
//! from ([`HotTable::take_fallen`](super::HotTable::take_fallen)): a page still ours and on the
//! node whose heat is under that percentage of the floor (the lowest of the last few drawn:
//! [`RecentFloors`](super::share::RecentFloors)) is handed back to be moved to the lower tier; a page no longer ours (demoted, found back on a lower tier by the audit,
//! evicted from the table) leaves the list. The gap between the floor, which a page must reach
//! to be promoted, and the share of it under which it goes back is the hysteresis that keeps a
//! page near the floor from moving on every sample.
//!
//! Why lists and not the floor pass's slice: the pass reads one of 16 slices per 5 s of sample
//! time, so a page was looked at once per 80 s, after the warm pages promoted early in a
//! two-minute phase had already cost their room (r24a: 105 pages moved back, over-promotion
//! 47.7 % against 48.2 %). The lists hold only pages pghotd promoted (16 bytes each, with the
//! rank last seen: half of what the table keeps for them), and a re-check is one table lookup.

use std::collections::BTreeMap;

use super::PageKey;
use crate::topology::NodeId;

/// Pages a migrator's upkeep re-checks at most per fast node: the whole list for any fast tier
/// up to 64 MiB of promoted 4 KiB pages each second, in turns beyond that.
pub const CHECK_PER_UPKEEP: usize = 16_384;

/// A page pghotd moved back and promoted again goes back only under this percentage of the
/// bar a page promoted once meets. Its return is evidence that it sits at the hot set's edge
/// rather than below it, as a page cache refault within the active list's size is
/// (mm/workingset.c `workingset_refault`); without it such pages went back and forth with the
/// floor's draws (BENCHMARKS.md, issue 18, "Moving back less, or a longer half-life").
pub const RETURNED_RANK_PCT: u32 = 80;

/// The rank a returned page is re-checked with: its own, scaled so that it falls under the
/// bar only below [`RETURNED_RANK_PCT`] of it.
pub(super) fn returned_rank(rank: u32) -> u32 {
    u32::try_from(u64::from(rank) * 100 / u64::from(RETURNED_RANK_PCT)).unwrap_or(u32::MAX)
}

/// What a re-check measures the listed pages against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bar {
    /// The floor's bits ([`DrawnFloor::bits`](super::share::DrawnFloor::bits)): a new draw
    /// starts a new round.
    pub floor: u64,
    /// A page whose rank times 100 is under this has fallen (the floor now times
    /// `demote_below_floor_pct`).
    pub bar: u64,
    /// The table's clock (ms).
    pub now_ms: u32,
    /// The heat half-life the ranks decay with (ms).
    pub halflife_ms: u32,
}

impl Bar {
    fn under(&self, rank: u32) -> bool {
        u64::from(rank) * 100 < self.bar
    }

    /// Whether a page is over the bar without looking it up: it was seen over this bar's
    /// height in the epoch that is still running. Within an epoch a page's heat only grows
    /// (samples; it halves only at an epoch boundary, `entry::decayed`), and its rank is its
    /// heat plus a fixed offset, so the rank seen then is at most its rank now.
    fn known_over(&self, page: &Listed) -> bool {
        page.rank != 0
            && super::entry::epochs_between(page.at_ms, self.now_ms, self.halflife_ms) == 0
            && !self.under(page.rank)
    }
}

/// A page on a node's list, with its rank against the floor when last looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Listed {
    key: PageKey,
    /// Its rank when last looked up; 0: not looked up since it was listed (or since the
    /// half-life changed, which changes every page's decay).
    rank: u32,
    /// When (the table's clock, ms).
    at_ms: u32,
}

impl Listed {
    fn unseen(key: PageKey) -> Listed {
        Listed {
            key,
            rank: 0,
            at_ms: 0,
        }
    }
}

/// The pages pghotd promoted and has not seen leave, per fast node; `None` while
/// `demote_below_floor_pct` is off.
#[derive(Debug, Default)]
pub(super) struct PromotedLists {
    pub(super) by_node: Option<BTreeMap<NodeId, NodeList>>,
}

#[derive(Debug, Default)]
pub(super) struct NodeList {
    /// Pages found over the bar by the last whole round against `clean_against` (all pages
    /// while there is none).
    keys: Vec<Listed>,
    /// Pages listed since that round, and those it found under the bar: the only ones a
    /// re-check against the same floor looks at.
    fresh: Vec<PageKey>,
    /// Where the next chunk of a list longer than one re-check starts.
    cursor: usize,
    /// The floor (its bits) the last whole round was made against.
    clean_against: Option<u64>,
    /// The half-life the ranks in `keys` were seen with.
    halflife_ms: u32,
}

impl NodeList {
    fn len(&self) -> usize {
        self.keys.len() + self.fresh.len()
    }

    /// Ranks seen with another half-life are no bound on the ranks now.
    fn forget_ranks_unless(&mut self, halflife_ms: u32) {
        if self.halflife_ms != halflife_ms {
            self.keys.iter_mut().for_each(|l| l.rank = 0);
            self.halflife_ms = halflife_ms;
        }
    }
}

impl PromotedLists {
    /// Starts listing (with the pages already promoted, from a walk of the table) or stops.
    pub(super) fn set_on(&mut self, on: bool, already: impl FnOnce() -> Vec<(NodeId, PageKey)>) {
        match (on, self.by_node.is_some()) {
            (true, false) => {
                let mut by_node: BTreeMap<NodeId, NodeList> = BTreeMap::new();
                for (node, key) in already() {
                    by_node
                        .entry(node)
                        .or_default()
                        .keys
                        .push(Listed::unseen(key));
                }
                self.by_node = Some(by_node);
            }
            (false, true) => self.by_node = None,
            _ => {}
        }
    }

    /// pghotd promoted `key` to `node`; `bound` caps each node's list (the table's size: it
    /// cannot hold more pages than that either).
    pub(super) fn note(&mut self, key: PageKey, node: NodeId, bound: usize) {
        if let Some(by_node) = &mut self.by_node {
            let list = by_node.entry(node).or_default();
            if list.len() < bound {
                list.fresh.push(key);
            }
        }
    }

    /// Re-checks pages listed for `node` against `bar`: `rank_of(key)` is `Some(rank)` for a
    /// page still ours on `node` and `None` for one that left, which leaves the list. Returns
    /// the fallen pages (rank under the bar).
    ///
    /// Against a floor not yet gone round, a round over the whole list (up to `max` pages,
    /// from where the last stopped when the list is longer). Against the floor the last whole
    /// round was made against, only the pages listed since and those that round found under
    /// the bar (up to `max`): between two draws of the floor a page's heat only grows
    /// (samples) or halves at an epoch boundary, where the floor halves too, so a page over
    /// the bar stays over it. In either, a page seen over a bar at least as high earlier in
    /// the same epoch is not looked up ([`Bar::known_over`]): a new floor is drawn every 5 s
    /// of sample time and most promoted pages stand well over it. Each migrator's upkeep asks
    /// every second; in the Debian rig's TCG guest, where each lookup's cache miss costs
    /// microseconds, the rounds every second were 6.5 % of pghotd's and the relay's profile
    /// samples (BENCHMARKS.md, issue 18, "the heat-floor pass reads only occupied slots",
    /// t29a), and the round at each new floor still 7.4 % of pghotd's own (t30b, "Redis beside
    /// pghotd").
    pub(super) fn recheck(
        &mut self,
        node: NodeId,
        max: usize,
        bar: Bar,
        mut rank_of: impl FnMut(PageKey) -> Option<u32>,
    ) -> Vec<PageKey> {
        let Some(list) = self.by_node.as_mut().and_then(|m| m.get_mut(&node)) else {
            return Vec::new();
        };
        list.forget_ranks_unless(bar.halflife_ms);
        let mut fallen = Vec::new();
        // Looks a page up: fallen, over (with its rank now) or gone.
        let mut look = |key: PageKey, fallen: &mut Vec<PageKey>| match rank_of(key) {
            Some(rank) if bar.under(rank) => {
                fallen.push(key);
                None
            }
            Some(rank) => Some(Listed {
                key,
                rank,
                at_ms: bar.now_ms,
            }),
            None => None,
        };
        if list.clean_against == Some(bar.floor) {
            let looked = list.fresh.len().min(max);
            for key in list.fresh.drain(..looked) {
                if let Some(over) = look(key, &mut fallen) {
                    list.keys.push(over);
                }
            }
            list.fresh.extend_from_slice(&fallen);
            return fallen;
        }
        list.keys.extend(list.fresh.drain(..).map(Listed::unseen));
        if list.keys.len() <= max {
            // A whole round: every page looked at once, or known over the bar.
            let mut over = Vec::with_capacity(list.keys.len());
            for page in list.keys.drain(..) {
                if bar.known_over(&page) {
                    over.push(page);
                } else if let Some(seen) = look(page.key, &mut fallen) {
                    over.push(seen);
                }
            }
            list.keys = over;
            list.fresh.clone_from(&fallen);
            list.cursor = 0;
            list.clean_against = Some(bar.floor);
            return fallen;
        }
        // Longer than one re-check: a chunk from the cursor, and no whole round to rely on.
        list.clean_against = None;
        let mut i = list.cursor;
        for _ in 0..max {
            if list.keys.is_empty() {
                break;
            }
            if i >= list.keys.len() {
                i = 0;
            }
            let page = list.keys[i];
            if bar.known_over(&page) {
                i += 1;
                continue;
            }
            match rank_of(page.key) {
                Some(rank) => {
                    if bar.under(rank) {
                        fallen.push(page.key);
                    }
                    list.keys[i] = Listed {
                        rank,
                        at_ms: bar.now_ms,
                        ..page
                    };
                    i += 1;
                }
                // The last key takes this slot and is looked at next.
                None => _ = list.keys.swap_remove(i),
            }
        }
        list.cursor = i;
        fallen
    }

    #[cfg(test)]
    pub(super) fn listed(&self, node: NodeId) -> usize {
        self.by_node
            .as_ref()
            .and_then(|m| m.get(&node))
            .map_or(0, NodeList::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(page: u64) -> PageKey {
        PageKey::new(3, page << 12).unwrap()
    }

    /// A floor's bits, as `take_fallen` passes them.
    const FLOOR: u64 = 7 << 32 | 1000;
    /// A page stays while its rank is at least this (the bar is 100 times it).
    const LOW: u32 = 1000;
    /// Ranks the tests give: under the bar, and over it.
    const UNDER: u32 = LOW - 1;
    const OVER: u32 = 2 * LOW;
    /// The heat half-life the tests rank with: an epoch is 60 s of the table's clock.
    const HALFLIFE: u32 = 60_000;

    /// Against the floor `floor` with the bar at `least`, at `now_ms`.
    fn bar(floor: u64, least: u32, now_ms: u32) -> Bar {
        Bar {
            floor,
            bar: u64::from(least) * 100,
            now_ms,
            halflife_ms: HALFLIFE,
        }
    }

    #[test]
    fn off_lists_nothing_and_on_starts_from_what_is_already_promoted() {
        let mut l = PromotedLists::default();
        l.note(key(1), 0, 10);
        assert_eq!(l.listed(0), 0);
        l.set_on(true, || vec![(0, key(2)), (1, key(3))]);
        l.note(key(4), 0, 10);
        assert_eq!((l.listed(0), l.listed(1)), (2, 1));
        // Bounded per node.
        l.note(key(5), 0, 2);
        assert_eq!(l.listed(0), 2);
        // Turning it on again does not walk again; off forgets.
        l.set_on(true, || panic!("walked twice"));
        l.set_on(false, Vec::new);
        assert_eq!(l.listed(0), 0);
    }

    #[test]
    fn rechecks_go_round_in_chunks_and_drop_pages_that_left() {
        let mut l = PromotedLists::default();
        l.set_on(true, || (1..=5).map(|p| (0, key(p))).collect());
        // Pages 2 and 4 are under the bar, page 3 left.
        let state = |k: PageKey| match k.vaddr() >> 12 {
            3 => None,
            2 | 4 => Some(UNDER),
            _ => Some(OVER),
        };
        let b = bar(FLOOR, LOW, 0);
        // First chunk of 3: pages 1, 2, then 3 leaves and page 5 takes its slot.
        assert_eq!(l.recheck(0, 3, b, state), vec![key(2)]);
        assert_eq!(l.listed(0), 4);
        // The list is now 1, 2, 5, 4; the next chunk starts at page 5's slot: 5, 4, then
        // round to 1.
        assert_eq!(l.recheck(0, 3, b, state), vec![key(4)]);
        // Then 2, 5, 4.
        assert_eq!(l.recheck(0, 3, b, state), vec![key(2), key(4)]);
        // A whole round at once (1, 2, 5, 4); another node has no list.
        assert_eq!(l.recheck(0, 100, b, state), vec![key(2), key(4)]);
        assert_eq!(l.recheck(1, 100, b, state), vec![]);
    }

    #[test]
    fn against_the_same_floor_only_pages_listed_since_and_those_under_are_looked_at_again() {
        let mut l = PromotedLists::default();
        l.set_on(true, || (1..=3).map(|p| (0, key(p))).collect());
        let looked = std::cell::RefCell::new(Vec::new());
        let none_under = |k: PageKey| {
            looked.borrow_mut().push(k.vaddr() >> 12);
            Some(OVER)
        };
        let seen = || std::mem::take(&mut *looked.borrow_mut());
        // A whole round; against the same floor, nothing to look at again.
        assert_eq!(l.recheck(0, 100, bar(FLOOR, LOW, 0), none_under), vec![]);
        assert_eq!(seen(), [1, 2, 3]);
        assert_eq!(l.recheck(0, 100, bar(FLOOR, LOW, 0), none_under), vec![]);
        assert_eq!(seen(), [0u64; 0]);
        // A page listed since: only it, once.
        l.note(key(4), 0, 10);
        assert_eq!(l.recheck(0, 100, bar(FLOOR, LOW, 0), none_under), vec![]);
        assert_eq!(seen(), [4]);
        assert_eq!(l.recheck(0, 100, bar(FLOOR, LOW, 0), none_under), vec![]);
        assert_eq!(seen(), [0u64; 0]);
        assert_eq!(l.listed(0), 4);
        // Another floor, its bar over every rank seen: every page again.
        assert_eq!(
            l.recheck(0, 100, bar(FLOOR + 1, OVER + 1, 0), none_under),
            (1..=4).map(key).collect::<Vec<_>>()
        );
        assert_eq!(seen(), [1, 2, 3, 4]);
        // A list longer than one re-check goes in chunks, each call one, whatever the floor
        // (the next epoch: nothing is known over the bar).
        assert_eq!(
            l.recheck(0, 3, bar(FLOOR + 2, LOW, HALFLIFE), none_under),
            vec![]
        );
        assert_eq!(seen(), [1, 2, 3]);
        assert_eq!(
            l.recheck(0, 3, bar(FLOOR + 2, OVER + 1, HALFLIFE), none_under)
                .len(),
            3
        );
        assert_eq!(seen(), [4, 1, 2]);
        // A page found under the bar is found again at every re-check (its move may wait for
        // the budget) until it leaves; the pages over the bar are not looked at again.
        let page_2_under = |k: PageKey| {
            looked.borrow_mut().push(k.vaddr() >> 12);
            Some(if k == key(2) { UNDER } else { OVER })
        };
        let b = bar(FLOOR + 3, LOW, 2 * HALFLIFE);
        assert_eq!(l.recheck(0, 100, b, page_2_under), vec![key(2)]);
        assert_eq!(seen(), [1, 2, 3, 4]);
        assert_eq!(l.recheck(0, 100, b, page_2_under), vec![key(2)]);
        assert_eq!(seen(), [2]);
        let page_2_left = |k: PageKey| {
            looked.borrow_mut().push(k.vaddr() >> 12);
            (k != key(2)).then_some(OVER)
        };
        assert_eq!(l.recheck(0, 100, b, page_2_left), vec![]);
        assert_eq!(seen(), [2]);
        assert_eq!(l.listed(0), 3);
    }

    /// The skip: a new floor whose bar stays under the rank a page was seen at in the same
    /// epoch does not look it up; a bar over that rank, the next epoch (the page's heat may
    /// have halved) or another half-life (its decay changed) does.
    #[test]
    fn a_page_seen_over_a_higher_bar_in_this_epoch_is_not_looked_up() {
        let mut l = PromotedLists::default();
        l.set_on(true, || (1..=3).map(|p| (0, key(p))).collect());
        let looked = std::cell::RefCell::new(Vec::new());
        // Pages 1, 2 and 3 rank 1500, 2500 and 3500.
        let ranks = |k: PageKey| {
            let page = k.vaddr() >> 12;
            looked.borrow_mut().push(page);
            Some(500 + 1000 * page as u32)
        };
        let seen = || std::mem::take(&mut *looked.borrow_mut());
        assert_eq!(l.recheck(0, 100, bar(FLOOR, 1000, 5_000), ranks), vec![]);
        assert_eq!(seen(), [1, 2, 3]);
        // A floor drawn higher 5 s later: only page 1, seen at 1500, can be under 2000; it is.
        assert_eq!(
            l.recheck(0, 100, bar(FLOOR + 1, 2000, 10_000), ranks),
            vec![key(1)]
        );
        assert_eq!(seen(), [1]);
        // Lower again: only the page the last round found under its bar is looked up (it is
        // listed after the others now), and it is over this one.
        assert_eq!(
            l.recheck(0, 100, bar(FLOOR + 2, 1200, 15_000), ranks),
            vec![]
        );
        assert_eq!(seen(), [1]);
        // Over page 2's rank: page 2 and page 1, not page 3.
        assert_eq!(
            l.recheck(0, 100, bar(FLOOR + 3, 3000, 20_000), ranks),
            vec![key(2), key(1)]
        );
        assert_eq!(seen(), [2, 1]);
        // The next epoch: every page again.
        assert_eq!(
            l.recheck(0, 100, bar(FLOOR + 4, 1000, HALFLIFE + 1), ranks),
            vec![]
        );
        assert_eq!(seen(), [3, 2, 1]);
        assert_eq!(
            l.recheck(0, 100, bar(FLOOR + 5, 1000, HALFLIFE + 2), ranks),
            vec![]
        );
        assert_eq!(seen(), [0u64; 0]);
        // Another half-life: every page again.
        let other = Bar {
            halflife_ms: 2 * HALFLIFE,
            ..bar(FLOOR + 6, 1000, HALFLIFE + 3)
        };
        assert_eq!(l.recheck(0, 100, other, ranks), vec![]);
        assert_eq!(seen(), [3, 2, 1]);
        // In chunks too: a page known over the bar is passed without a lookup.
        assert_eq!(
            l.recheck(
                0,
                2,
                Bar {
                    floor: FLOOR + 7,
                    ..other
                },
                ranks
            ),
            vec![]
        );
        assert_eq!(seen(), [0u64; 0]);
        assert_eq!(
            l.recheck(
                0,
                2,
                Bar {
                    floor: FLOOR + 8,
                    bar: 200_000,
                    ..other
                },
                ranks
            ),
            vec![key(1)]
        );
        assert_eq!(seen(), [1]);
    }
}
