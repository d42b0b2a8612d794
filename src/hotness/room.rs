//! Promoting generously while the fast tier has room: `hot_share_room_mb`.
//!
//! `hot_share_pct` stops promotion where the hot set ends and `demote_below_floor_pct` moves
//! back what was promoted beyond it. That is right while the fast tier is short: a page beyond
//! the hot set takes room a hotter page may need. With room to spare it costs a program its
//! warm pages' speed: on Redis in the rig's Debian guest with about 54 MB free a fast node,
//! NUMA balancing promoted 278 % more pages than the hot set and ran 13 % faster than pghotd
//! held to an 80 % share, the difference in Redis's own modelled memory time (BENCHMARKS.md,
//! issue 18, "How much room the fast tier has decides it"). At 38 MB the same share met every
//! bar and NUMA balancing could move nothing.
//!
//! So with `hot_share_room_mb` set, both act only for a fast node with less room than that
//! (free memory above the `promote_min_free_pct` reserve, as the migrators' watermark counts
//! it). Each migrator reads its fast nodes' free memory at its upkeep and says here which are
//! short. A node becomes short under the setting and stops being short only at a quarter more
//! than it: the pages promoted while it had room fill it to the setting, and moving back only
//! what it takes to give that room back ([`MoveBack::UpToKb`]) leaves it short, so a node does
//! not swing between promoting warm pages and moving them back.
//!
//! Both are per node: a candidate bound for a short node (its promotion target, from the
//! sampled CPU's node) meets the floor and one bound for a node with room does not, and only
//! short nodes move pages back; one node's shortage says nothing of another's room (the rig's
//! fills are uneven: 36 MB free on one fast node and 53 MB on the other in one pass). Nodes
//! are kept in one word's bits; nodes 63 and above share the last bit, which is never cleared
//! (on such a machine the share always acts for them).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::topology::NodeId;

/// The setting and the fast nodes found short of it.
#[derive(Debug, Default)]
pub(super) struct FastRoom {
    wanted_mb: AtomicU32,
    /// Bit n: node n was short at its migrator's last reading.
    short: AtomicU64,
    /// Bit n: node n was read since the setting was last changed. Before any reading the
    /// share acts, so a daemon started on a full fast tier does not promote generously for
    /// its first upkeep interval.
    read: AtomicU64,
}

/// How much a fast node's room decides, at one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveBack {
    /// `hot_share_room_mb` is off (or the room cannot be read): move back every fallen page.
    All,
    /// Move back fallen pages up to this many kB: what the node lacks of the setting (0 while
    /// it has room).
    UpToKb(u64),
}

fn bit(node: NodeId) -> u64 {
    1 << u32::from(node).min(63)
}

impl FastRoom {
    pub(super) fn set_wanted_mb(&self, mb: u32) {
        if self.wanted_mb.swap(mb, Ordering::Relaxed) != mb {
            self.short.store(0, Ordering::Relaxed);
            self.read.store(0, Ordering::Relaxed);
        }
    }

    pub(super) fn wanted_mb(&self) -> u32 {
        self.wanted_mb.load(Ordering::Relaxed)
    }

    /// Whether the heat floor acts now on candidates bound for `to`: always with the setting
    /// off; else while that node is short or has not been read (`None`: while any node is
    /// short, or none has been read).
    #[inline]
    pub(super) fn share_applies(&self, to: Option<NodeId>) -> bool {
        if self.wanted_mb.load(Ordering::Relaxed) == 0 {
            return true;
        }
        let (short, read) = (
            self.short.load(Ordering::Relaxed),
            self.read.load(Ordering::Relaxed),
        );
        match to {
            Some(node) => (short | !read) & bit(node) != 0,
            None => short != 0 || read == 0,
        }
    }

    /// The fast nodes short of room now (bit n: node n).
    pub(super) fn short_nodes(&self) -> u64 {
        if self.wanted_mb() == 0 {
            return 0;
        }
        self.short.load(Ordering::Relaxed)
    }

    /// A migrator read `node`'s room (`None`: could not): records whether the node is short
    /// and says what to move back from it.
    pub(super) fn observe(&self, node: NodeId, room_kb: Option<u64>) -> MoveBack {
        let wanted_kb = u64::from(self.wanted_mb()) * 1024;
        if wanted_kb == 0 {
            return MoveBack::All;
        }
        let bit = bit(node);
        self.read.fetch_or(bit, Ordering::Relaxed);
        let Some(room_kb) = room_kb else {
            self.short.fetch_or(bit, Ordering::Relaxed);
            return MoveBack::All;
        };
        let was_short = self.short.load(Ordering::Relaxed) & bit != 0;
        let short = room_kb < wanted_kb || (was_short && room_kb < wanted_kb + wanted_kb / 4);
        if short || bit == 1 << 63 {
            self.short.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.short.fetch_and(!bit, Ordering::Relaxed);
        }
        MoveBack::UpToKb(wanted_kb.saturating_sub(room_kb))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_the_share_always_applies_and_everything_fallen_goes_back() {
        let room = FastRoom::default();
        assert!(room.share_applies(None));
        assert_eq!(room.observe(0, Some(1 << 30)), MoveBack::All);
        assert!(room.share_applies(None));
        assert_eq!(room.short_nodes(), 0);
    }

    #[test]
    fn a_node_is_short_under_the_setting_and_has_room_again_only_a_quarter_above_it() {
        // 16 MiB = 16,384 kB; a quarter more is 20,480 kB.
        let room = FastRoom::default();
        room.set_wanted_mb(16);
        assert!(room.share_applies(None), "nothing read yet");
        assert_eq!(room.observe(0, Some(30_000)), MoveBack::UpToKb(0));
        assert!(!room.share_applies(None));
        assert_eq!(room.observe(0, Some(16_000)), MoveBack::UpToKb(384));
        assert!(room.share_applies(None));
        assert_eq!(room.short_nodes(), 0b1);
        // Moving back 384 kB gives the setting back: still short (hysteresis).
        assert_eq!(room.observe(0, Some(16_384)), MoveBack::UpToKb(0));
        assert_eq!(room.observe(0, Some(20_479)), MoveBack::UpToKb(0));
        assert!(room.share_applies(None));
        assert_eq!(room.observe(0, Some(20_480)), MoveBack::UpToKb(0));
        assert!(!room.share_applies(None));
    }

    #[test]
    fn the_share_acts_for_a_short_node_and_an_unreadable_one_counts_as_short() {
        let room = FastRoom::default();
        room.set_wanted_mb(8);
        // Node 1 read, node 0 not yet: the floor acts for both.
        room.observe(1, Some(100_000));
        assert!(!room.share_applies(Some(1)));
        assert!(room.share_applies(Some(0)));
        room.observe(0, Some(100_000));
        room.observe(1, Some(1_000));
        assert_eq!(room.short_nodes(), 0b10);
        assert!(room.share_applies(None));
        // Per node: only candidates bound for node 1 meet the floor.
        assert!(room.share_applies(Some(1)));
        assert!(!room.share_applies(Some(0)));
        // A node no migrator reads (not a fast node of any) always meets it.
        assert!(room.share_applies(Some(5)));
        room.observe(1, Some(100_000));
        assert!(!room.share_applies(None));
        assert_eq!(room.observe(1, None), MoveBack::All);
        assert_eq!(room.short_nodes(), 0b10);
        // Turning it off forgets.
        room.set_wanted_mb(0);
        assert_eq!(room.short_nodes(), 0);
        assert!(room.share_applies(None));
    }

    #[test]
    fn nodes_from_63_share_a_bit_that_stays_short() {
        let room = FastRoom::default();
        room.set_wanted_mb(8);
        room.observe(70, Some(100_000));
        assert_eq!(room.short_nodes(), 1 << 63);
        room.observe(63, Some(100_000));
        assert!(room.share_applies(None));
    }
}
