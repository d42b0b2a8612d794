//! The 24-byte record kept per tracked page, and the (pid, page) key packing.

use crate::topology::NodeId;

/// Largest pid the key can hold. Linux's PID_MAX_LIMIT is 4M (2^22).
pub const MAX_PID: u32 = (1 << 22) - 1;

/// Virtual page numbers above this do not fit the key: user addresses at or above 2^52
/// (only reachable with 5-level paging and an explicit high mmap hint).
pub const MAX_VPN: u64 = (1 << 40) - 1;

/// Base page shift: the table tracks 4 KiB pages.
pub const PAGE_SHIFT: u32 = 12;

pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;

/// (pid, virtual page number) packed as `pid << 40 | vpn`; 0 is never a valid key (pid 0 is
/// dropped before it gets here), so it marks an empty slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageKey(u64);

impl PageKey {
    /// The key's bits spread over the whole word (the table's hash), for other tables keyed
    /// by page.
    #[inline]
    pub fn mixed(self) -> u64 {
        mix(self.raw())
    }

    /// `None` when the pid or address is out of the key's range, or pid is 0.
    pub fn new(pid: u32, vaddr: u64) -> Option<PageKey> {
        let vpn = vaddr >> PAGE_SHIFT;
        (pid != 0 && pid <= MAX_PID && vpn <= MAX_VPN)
            .then_some(PageKey(u64::from(pid) << 40 | vpn))
    }

    pub fn pid(self) -> u32 {
        (self.0 >> 40) as u32
    }

    /// Page-aligned virtual address.
    pub fn vaddr(self) -> u64 {
        (self.0 & MAX_VPN) << PAGE_SHIFT
    }

    pub(crate) fn raw(self) -> u64 {
        self.0
    }

    pub(crate) fn from_raw(raw: u64) -> PageKey {
        PageKey(raw)
    }
}

/// Heat is fixed point: one sample adds 1.0 = 256, halved per elapsed epoch.
pub const HEAT_ONE: u32 = 256;

pub(crate) const FLAG_QUEUED: u8 = 1;
/// pghotd itself moved the page to the top tier (demotion only ever moves these back).
pub(crate) const FLAG_PROMOTED: u8 = 2;
/// pghotd moved the page back to a lower tier at least once; kept when it is promoted again,
/// so that a page that came back is held to a lower bar before it goes back again (see
/// `fallen::RETURNED_RANK_PCT`).
pub(crate) const FLAG_MOVED_BACK: u8 = 4;

/// One tracked page. Kept at 24 bytes so that, with the table's 3/4 load limit, a tracked
/// page costs 32 bytes of memory.
///
/// `Zeroable`: the empty slot is all zero bytes, so a shard's slots come from a zeroed
/// allocation (calloc: pages the kernel maps on first touch), not from a loop that writes every
/// slot at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Zeroable)]
#[repr(C)]
pub struct Entry {
    pub(crate) key: u64,
    /// Sample time of the last access, in ms, truncated to 32 bits (compared with wrapping
    /// arithmetic, so ordering holds for gaps under 24 days).
    pub(crate) last_ms: u32,
    pub(crate) heat: u32,
    /// Samples in the current promotion window.
    pub(crate) count: u16,
    pub(crate) node: NodeId,
    pub(crate) loads: u8,
    pub(crate) stores: u8,
    pub(crate) flags: u8,
    _pad: u8,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 24);

/// Milliseconds from `then` to `now`, both truncated sample times; 0 when samples arrive out of
/// order (CPUs' rings are ordered each, not with each other).
#[inline]
pub(crate) fn elapsed_ms(now: u32, then: u32) -> u32 {
    let delta = now.wrapping_sub(then) as i32;
    delta.max(0) as u32
}

/// Epoch boundaries (multiples of the half-life on the truncated sample clock) from `then_ms`
/// to `now_ms`: the halvings a heat last updated at `then_ms` has taken by `now_ms`. Every
/// heat halves at the same boundaries, so anything ranked against heats (the `hot_share_pct`
/// floor) must decay by these steps too, not by the continuous time between.
#[inline]
pub(crate) fn epochs_between(then_ms: u32, now_ms: u32, halflife_ms: u32) -> u32 {
    let elapsed = elapsed_ms(now_ms, then_ms);
    (then_ms % halflife_ms).saturating_add(elapsed) / halflife_ms
}

#[inline]
pub(crate) fn decayed(heat: u32, last_ms: u32, now_ms: u32, halflife_ms: u32) -> u32 {
    let epochs = epochs_between(last_ms, now_ms, halflife_ms);
    if epochs >= 32 { 0 } else { heat >> epochs }
}

impl Entry {
    pub(crate) fn new(key: PageKey, now_ms: u32, node: NodeId) -> Entry {
        Entry {
            key: key.raw(),
            last_ms: now_ms,
            node,
            ..Entry::default()
        }
    }

    pub fn key(&self) -> PageKey {
        PageKey::from_raw(self.key)
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    pub fn count(&self) -> u16 {
        self.count
    }

    pub fn is_queued(&self) -> bool {
        self.flags & FLAG_QUEUED != 0
    }

    /// pghotd promoted this page and has not demoted it since.
    pub fn is_promoted(&self) -> bool {
        self.flags & FLAG_PROMOTED != 0
    }

    /// Heat in samples (fractional), decayed to `now_ms`.
    pub fn heat_at(&self, now_ms: u32, halflife_ms: u32) -> f64 {
        f64::from(decayed(self.heat, self.last_ms, now_ms, halflife_ms)) / f64::from(HEAT_ONE)
    }

    pub fn loads(&self) -> u8 {
        self.loads
    }

    pub fn stores(&self) -> u8 {
        self.stores
    }
}

/// `splitmix64`'s finalizer: spreads the packed key's bits over the whole word.
#[inline]
pub(crate) fn mix(key: u64) -> u64 {
    let mut z = key;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_reject_out_of_range() {
        let k = PageKey::new(MAX_PID, 0x7fff_ffff_f123).unwrap();
        assert_eq!(k.pid(), MAX_PID);
        assert_eq!(k.vaddr(), 0x7fff_ffff_f000);
        assert!(PageKey::new(0, 0x1000).is_none());
        assert!(PageKey::new(MAX_PID + 1, 0x1000).is_none());
        assert!(PageKey::new(1, 1 << 52).is_none());
        assert!(PageKey::new(1, (1 << 52) - 1).is_some());
    }

    #[test]
    fn heat_halves_per_epoch_boundary() {
        assert_eq!(decayed(1024, 0, 999, 1000), 1024);
        assert_eq!(decayed(1024, 0, 1000, 1000), 512);
        assert_eq!(decayed(1024, 999, 1000, 1000), 512);
        assert_eq!(decayed(1024, 500, 2500, 1000), 256);
        assert_eq!(decayed(1024, 0, 40_000, 1000), 0);
        // Out of order: no decay.
        assert_eq!(decayed(1024, 2000, 1000, 1000), 1024);
        // Across the 32-bit wrap.
        assert_eq!(decayed(1024, u32::MAX - 10, 20, 1000), 1024);
        assert_eq!(decayed(1024, u32::MAX - 10, 1000, 1000), 512);
    }
}
