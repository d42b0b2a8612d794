//! The kernel's `union perf_mem_data_src` (PERF_SAMPLE_DATA_SRC), decoded.
//!
//! In: the u64 from a sample record (IBS or PEBS), or one built by the IBS RAW decoder.
//! Out: typed fields, the [`AccessOp`], where the access was served from as a [`DataSource`],
//! and whether it hit a core-private cache. Layout: `union perf_mem_data_src` and the
//! `PERF_MEM_*` values in `include/uapi/linux/perf_event.h`; the field values are kernel ABI,
//! so they are named constants here.

use crate::sample::{AccessOp, DataSource};

/// `mem_op` values (shift 0).
pub mod op {
    pub const NA: u64 = 0x1;
    pub const LOAD: u64 = 0x2;
    pub const STORE: u64 = 0x4;
    pub const PFETCH: u64 = 0x8;
    pub const EXEC: u64 = 0x10;
}

/// `mem_lvl` legacy bitmask values (shift 5).
pub mod lvl {
    pub const NA: u64 = 0x1;
    pub const HIT: u64 = 0x2;
    pub const MISS: u64 = 0x4;
    pub const L1: u64 = 0x8;
    pub const LFB: u64 = 0x10;
    pub const L2: u64 = 0x20;
    pub const L3: u64 = 0x40;
    pub const LOC_RAM: u64 = 0x80;
    pub const REM_RAM1: u64 = 0x100;
    pub const REM_RAM2: u64 = 0x200;
    pub const REM_CCE1: u64 = 0x400;
    pub const REM_CCE2: u64 = 0x800;
    pub const IO: u64 = 0x1000;
    pub const UNC: u64 = 0x2000;
}

/// `mem_snoop` values (shift 19).
pub mod snoop {
    pub const NA: u64 = 0x1;
    pub const NONE: u64 = 0x2;
    pub const HIT: u64 = 0x4;
    pub const MISS: u64 = 0x8;
    pub const HITM: u64 = 0x10;
}

/// `mem_lock` values (shift 24).
pub mod lock {
    pub const NA: u64 = 0x1;
    pub const LOCKED: u64 = 0x2;
}

/// `mem_dtlb` values (shift 26).
pub mod tlb {
    pub const NA: u64 = 0x1;
    pub const HIT: u64 = 0x2;
    pub const MISS: u64 = 0x4;
    pub const L1: u64 = 0x8;
    pub const L2: u64 = 0x10;
    pub const WK: u64 = 0x20;
    pub const OS: u64 = 0x40;
}

/// `mem_lvl_num` values (shift 33). 0 means "not set" (kernels before 4.14 only fill `mem_lvl`).
pub mod lvlnum {
    pub const L1: u64 = 0x1;
    pub const L2: u64 = 0x2;
    pub const L3: u64 = 0x3;
    pub const L4: u64 = 0x4;
    pub const L2_MHB: u64 = 0x5;
    pub const MSC: u64 = 0x6;
    /// L0, a level before L1 (Panther Cove reports its hits as `OP_LH | LEVEL(L0)` with no
    /// `mem_lvl` level bit, `pnc_pebs_l2_hit_data_source[]` in `arch/x86/events/intel/ds.c`);
    /// 0x7 was unused before (commit d2bdcde9626c, "perf/x86/intel: Add support for PEBS
    /// memory auxiliary info field in DMR").
    pub const L0: u64 = 0x7;
    pub const UNC: u64 = 0x8;
    /// Named EXTN_MEM in 6.1-rc1, PERF_MEM_LVLNUM_CXL since 6.1-rc3 (commit "perf/mem: Rename
    /// PERF_MEM_LVLNUM_EXTN_MEM to PERF_MEM_LVLNUM_CXL").
    pub const CXL: u64 = 0x9;
    pub const IO: u64 = 0xa;
    pub const ANY_CACHE: u64 = 0xb;
    pub const LFB: u64 = 0xc;
    pub const RAM: u64 = 0xd;
    pub const PMEM: u64 = 0xe;
    pub const NA: u64 = 0xf;
}

/// `mem_region` values (shift 46, 5 bits), from the same commit as [`lvlnum::L0`]: the OMR
/// encoding of Diamond Rapids' PEBS (`omr_data_source[]` in `arch/x86/events/intel/ds.c`).
/// Kernels before it leave the bits 0 (NA).
pub mod region {
    pub const NA: u64 = 0x0;
    pub const RSVD: u64 = 0x1;
    /// The requesting caching agent's shared cache.
    pub const L_SHARE: u64 = 0x2;
    /// The requesting caching agent's non-shared cache.
    pub const L_NON_SHARE: u64 = 0x3;
    /// Another caching agent's IO agent.
    pub const O_IO: u64 = 0x4;
    /// Another caching agent's shared cache.
    pub const O_SHARE: u64 = 0x5;
    /// Another caching agent's non-shared cache.
    pub const O_NON_SHARE: u64 = 0x6;
    pub const MMIO: u64 = 0x7;
    /// Memory regions 0 to 7 (`PERF_MEM_REGION_MEM0` .. `MEM7`), which ACPI MRRM maps to
    /// address ranges.
    pub const MEM0: u64 = 0x8;
    pub const MEM7: u64 = 0xf;
}

/// What `mem_region` says about where an access was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemRegion {
    /// NA (every kernel before the field) or the reserved value: nothing.
    None,
    /// The requesting caching agent's own cache (L_SHARE, L_NON_SHARE).
    LocalAgent,
    /// Another caching agent's cache or IO agent (O_IO, O_SHARE, O_NON_SHARE).
    OtherAgent,
    /// Memory-mapped IO: not memory pghotd manages.
    Mmio,
    /// Memory region 0 to 7. Which memory that is (DRAM, CXL) only ACPI MRRM says, so the
    /// level fields (local or remote RAM) decide.
    Memory(u8),
    /// A value the uapi header does not define (0x10 to 0x1f).
    Unknown(u8),
}

/// A field of the union: bit offset and width.
#[derive(Debug, Clone, Copy)]
struct Field {
    shift: u32,
    width: u32,
}

const OP: Field = Field::new(0, 5);
const LVL: Field = Field::new(5, 14);
const SNOOP: Field = Field::new(19, 5);
const LOCK: Field = Field::new(24, 2);
const DTLB: Field = Field::new(26, 7);
const LVL_NUM: Field = Field::new(33, 4);
const REMOTE: Field = Field::new(37, 1);
const SNOOPX: Field = Field::new(38, 2);
const BLK: Field = Field::new(40, 3);
const HOPS: Field = Field::new(43, 3);
const REGION: Field = Field::new(46, 5);

impl Field {
    const fn new(shift: u32, width: u32) -> Self {
        Field { shift, width }
    }

    const fn mask(self) -> u64 {
        ((1u64 << self.width) - 1) << self.shift
    }
}

/// A core-private cache level an access hit; pghotd drops these (they say nothing about which
/// memory the page sits in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreCacheHit {
    L1,
    /// Line fill buffer: on Intel an L1-level hit on an in-flight line; on AMD IBS a miss that
    /// joined an outstanding one (MAB hit) and may be served from anywhere.
    Lfb,
    L2,
}

/// `union perf_mem_data_src` as a plain u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PerfMemDataSrc(pub u64);

/// What the core writes when the driver filled nothing, on kernels with `mem_lvl_num` NA
/// (OP, LVL, SNOOP, LOCK, TLB and LVLNUM all NA: `PERF_MEM_NA` in `include/linux/perf_event.h`).
pub const PERF_MEM_NA: PerfMemDataSrc = PerfMemDataSrc(0x1e_0508_0021);

/// The same on older kernels, without LVLNUM NA.
pub const PERF_MEM_NA_OLD: PerfMemDataSrc = PerfMemDataSrc(0x0508_0021);

impl PerfMemDataSrc {
    const fn get(self, f: Field) -> u64 {
        (self.0 & f.mask()) >> f.shift
    }

    /// Replaces one field; values wider than the field are cut to it.
    const fn with(self, f: Field, value: u64) -> Self {
        PerfMemDataSrc((self.0 & !f.mask()) | ((value << f.shift) & f.mask()))
    }

    pub const fn mem_op(self) -> u64 {
        self.get(OP)
    }
    pub const fn mem_lvl(self) -> u64 {
        self.get(LVL)
    }
    pub const fn snoop(self) -> u64 {
        self.get(SNOOP)
    }
    pub const fn lock(self) -> u64 {
        self.get(LOCK)
    }
    pub const fn dtlb(self) -> u64 {
        self.get(DTLB)
    }
    pub const fn lvl_num(self) -> u64 {
        self.get(LVL_NUM)
    }
    pub const fn remote(self) -> bool {
        self.get(REMOTE) == 1
    }
    pub const fn snoopx(self) -> u64 {
        self.get(SNOOPX)
    }
    pub const fn blk(self) -> u64 {
        self.get(BLK)
    }
    pub const fn hops(self) -> u64 {
        self.get(HOPS)
    }
    pub const fn region(self) -> u64 {
        self.get(REGION)
    }

    pub const fn with_mem_op(self, v: u64) -> Self {
        self.with(OP, v)
    }
    pub const fn with_mem_lvl(self, v: u64) -> Self {
        self.with(LVL, v)
    }
    pub const fn with_snoop(self, v: u64) -> Self {
        self.with(SNOOP, v)
    }
    pub const fn with_lock(self, v: u64) -> Self {
        self.with(LOCK, v)
    }
    pub const fn with_dtlb(self, v: u64) -> Self {
        self.with(DTLB, v)
    }
    pub const fn with_lvl_num(self, v: u64) -> Self {
        self.with(LVL_NUM, v)
    }
    pub const fn with_remote(self, remote: bool) -> Self {
        self.with(REMOTE, remote as u64)
    }
    pub const fn with_hops(self, v: u64) -> Self {
        self.with(HOPS, v)
    }
    pub const fn with_region(self, v: u64) -> Self {
        self.with(REGION, v)
    }

    /// `mem_region`, decoded.
    pub const fn mem_region(self) -> MemRegion {
        // The field is 5 bits wide, so the cast cannot truncate.
        let v = self.region() as u8;
        match self.region() {
            region::NA | region::RSVD => MemRegion::None,
            region::L_SHARE | region::L_NON_SHARE => MemRegion::LocalAgent,
            region::O_IO | region::O_SHARE | region::O_NON_SHARE => MemRegion::OtherAgent,
            region::MMIO => MemRegion::Mmio,
            region::MEM0..=region::MEM7 => MemRegion::Memory(v - region::MEM0 as u8),
            _ => MemRegion::Unknown(v),
        }
    }

    /// Load or store; `None` for prefetch, exec or NA (not a data access pghotd can use).
    /// A load-and-store (locked RMW) counts as a load, as the IBS driver reports it.
    pub fn access_op(self) -> Option<AccessOp> {
        let op = self.mem_op();
        if op & op::LOAD != 0 {
            Some(AccessOp::Load)
        } else if op & op::STORE != 0 {
            Some(AccessOp::Store)
        } else {
            None
        }
    }

    /// `mem_lvl` says the access missed the named level and does not say where it hit.
    fn lvl_miss_only(self) -> bool {
        let l = self.mem_lvl();
        l & lvl::MISS != 0 && l & lvl::HIT == 0
    }

    /// `mem_lvl_num`, when set to a level (not 0 = unset on old kernels, not NA).
    fn known_lvl_num(self) -> Option<u64> {
        match self.lvl_num() {
            0 | lvlnum::NA => None,
            n => Some(n),
        }
    }

    /// The core-private cache the access hit, if any. Prefers `mem_lvl_num`; falls back to the
    /// legacy `mem_lvl` HIT bits (Intel store decodes set only those, with MISS on an L1 miss).
    pub fn core_cache_hit(self) -> Option<CoreCacheHit> {
        if self.lvl_miss_only() {
            return None;
        }
        if let Some(n) = self.known_lvl_num() {
            return match n {
                // L0 sits before L1; both are the core's own and dropped alike.
                lvlnum::L0 | lvlnum::L1 => Some(CoreCacheHit::L1),
                lvlnum::LFB => Some(CoreCacheHit::Lfb),
                lvlnum::L2 | lvlnum::L2_MHB => Some(CoreCacheHit::L2),
                _ => None,
            };
        }
        let l = self.mem_lvl();
        if l & lvl::HIT == 0 {
            None
        } else if l & lvl::L1 != 0 {
            Some(CoreCacheHit::L1)
        } else if l & lvl::LFB != 0 {
            Some(CoreCacheHit::Lfb)
        } else if l & lvl::L2 != 0 {
            Some(CoreCacheHit::L2)
        } else {
            None
        }
    }

    /// Where the access was served from. Memory levels are what pghotd cares about: CXL
    /// (`mem_lvl_num` 9, which the IBS driver reports with no `mem_lvl` bits,
    /// `perf_ibs_get_mem_lvl()` in `arch/x86/events/amd/ibs.c`) and PMEM are
    /// the extension tier; RAM splits on the remote flag.
    pub fn to_data_source(self) -> DataSource {
        if self.lvl_miss_only() {
            return DataSource::Unknown;
        }
        if let Some(src) = self.source_from_region() {
            return src;
        }
        match self.known_lvl_num() {
            Some(n) => self.source_from_lvl_num(n),
            None => self.source_from_lvl(),
        }
    }

    /// Where `mem_region` is more precise than the level: another agent's cache is a peer
    /// cache although the kernel reports it as L3, and MMIO is not RAM although it reports
    /// it as such (`omr_data_source[]`). Memory regions and the local agent's cache add
    /// nothing the level fields do not say.
    fn source_from_region(self) -> Option<DataSource> {
        match self.mem_region() {
            MemRegion::OtherAgent => Some(DataSource::PeerCache),
            MemRegion::Mmio => Some(DataSource::Unknown),
            MemRegion::None
            | MemRegion::LocalAgent
            | MemRegion::Memory(_)
            | MemRegion::Unknown(_) => None,
        }
    }

    fn source_from_lvl_num(self, n: u64) -> DataSource {
        match n {
            lvlnum::L0 | lvlnum::L1 | lvlnum::LFB => DataSource::L1,
            lvlnum::L2 | lvlnum::L2_MHB => DataSource::L2,
            lvlnum::L3 => self.source_past_l3().unwrap_or(DataSource::L3),
            // L4 and memory-side caches are still caches; L3 is the deepest DataSource has.
            lvlnum::L4 | lvlnum::MSC => DataSource::L3,
            // IBS pre-Zen4 "local node cache" is L3|REM_CCE1 + ANY_CACHE; other CCXs' caches
            // carry REM_CCE* only (`g_data_src`/`g_zen4_data_src` in `arch/x86/events/amd/ibs.c`).
            lvlnum::ANY_CACHE if self.mem_lvl() & lvl::L3 != 0 => DataSource::L3,
            lvlnum::ANY_CACHE => DataSource::PeerCache,
            lvlnum::RAM if self.remote() => DataSource::RemoteDram,
            lvlnum::RAM => DataSource::LocalDram,
            lvlnum::CXL | lvlnum::PMEM => DataSource::ExtMem,
            _ => DataSource::Unknown,
        }
    }

    /// Intel's table for Sandy Bridge to Broadwell (and the Gracemont E-cores, which patch
    /// other entries) reports an L3 miss served elsewhere with LEVEL(L3) and the real source
    /// in `mem_lvl`: remote DRAM as `P(LVL, REM_RAM1) | REM | LEVEL(L3)` (entry 0x0b) and a
    /// remote cache as `P(LVL, REM_CCE1) | REM | LEVEL(L3)` (0x08, 0x09), in
    /// `pebs_data_source[]` of `arch/x86/events/intel/ds.c`. Diamond Rapids marks another
    /// agent's L3 with REM_CCE1 too (`parse_omr_data_source()`). So with LVLNUM L3 the
    /// remote `mem_lvl` bits win.
    fn source_past_l3(self) -> Option<DataSource> {
        let l = self.mem_lvl();
        if l & lvl::HIT == 0 {
            None
        } else if l & (lvl::REM_RAM1 | lvl::REM_RAM2) != 0 {
            Some(DataSource::RemoteDram)
        } else if l & (lvl::REM_CCE1 | lvl::REM_CCE2) != 0 {
            Some(DataSource::PeerCache)
        } else {
            None
        }
    }

    fn source_from_lvl(self) -> DataSource {
        let l = self.mem_lvl();
        if l & lvl::HIT == 0 {
            return DataSource::Unknown;
        }
        const ORDER: [(u64, DataSource); 8] = [
            (lvl::L1, DataSource::L1),
            (lvl::LFB, DataSource::L1),
            (lvl::L2, DataSource::L2),
            (lvl::L3, DataSource::L3),
            (lvl::LOC_RAM, DataSource::LocalDram),
            (lvl::REM_RAM1 | lvl::REM_RAM2, DataSource::RemoteDram),
            (lvl::REM_CCE1 | lvl::REM_CCE2, DataSource::PeerCache),
            (lvl::IO | lvl::UNC, DataSource::Unknown),
        ];
        ORDER
            .iter()
            .find(|(bits, _)| l & bits != 0)
            .map_or(DataSource::Unknown, |&(_, src)| src)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn src() -> PerfMemDataSrc {
        PerfMemDataSrc(0)
    }

    #[test]
    fn na_constants_decode_as_na() {
        for na in [PERF_MEM_NA, PERF_MEM_NA_OLD] {
            assert_eq!(na.mem_op(), op::NA);
            assert_eq!(na.mem_lvl(), lvl::NA);
            assert_eq!(na.snoop(), snoop::NA);
            assert_eq!(na.lock(), lock::NA);
            assert_eq!(na.dtlb(), tlb::NA);
            assert_eq!(na.access_op(), None);
            assert_eq!(na.core_cache_hit(), None);
            assert_eq!(na.to_data_source(), DataSource::Unknown);
        }
        assert_eq!(PERF_MEM_NA.lvl_num(), lvlnum::NA);
        assert_eq!(PERF_MEM_NA_OLD.lvl_num(), 0);
    }

    #[test]
    fn every_field_round_trips_at_its_documented_position() {
        let v = src()
            .with_mem_op(op::EXEC)
            .with_mem_lvl(lvl::UNC)
            .with_snoop(snoop::HITM)
            .with_lock(lock::LOCKED)
            .with_dtlb(tlb::OS)
            .with_lvl_num(lvlnum::NA)
            .with_remote(true)
            .with_hops(4)
            .with_region(0x1f);
        assert_eq!(v.0 & 0x1f, 0x10);
        assert_eq!(v.0 >> 5 & 0x3fff, 0x2000);
        assert_eq!(v.0 >> 19 & 0x1f, 0x10);
        assert_eq!(v.0 >> 24 & 0x3, 0x2);
        assert_eq!(v.0 >> 26 & 0x7f, 0x40);
        assert_eq!(v.0 >> 33 & 0xf, 0xf);
        assert_eq!(v.0 >> 37 & 1, 1);
        assert_eq!(v.0 >> 43 & 7, 4);
        // mem_region: bits 46-50 (`PERF_MEM_REGION_SHIFT` 46, `mem_region : 5` after
        // `mem_hops : 3` in `union perf_mem_data_src`), nothing above.
        assert_eq!(v.0 >> 46 & 0x1f, 0x1f);
        assert_eq!(v.0 >> 51, 0);
        assert_eq!(v.region(), 0x1f);
        assert_eq!((v.mem_op(), v.mem_lvl(), v.snoop()), (0x10, 0x2000, 0x10));
        assert_eq!((v.lock(), v.dtlb(), v.lvl_num()), (2, 0x40, 0xf));
        assert!(v.remote());
        assert_eq!(v.hops(), 4);
        let x = PerfMemDataSrc((0x2 << 38) | (0x4 << 40));
        assert_eq!((x.snoopx(), x.blk()), (2, 4));
        assert_eq!(src().with_hops(9).hops(), 1, "cut to the field width");
    }

    #[test]
    fn access_op_from_mem_op() {
        assert_eq!(
            src().with_mem_op(op::LOAD).access_op(),
            Some(AccessOp::Load)
        );
        assert_eq!(
            src().with_mem_op(op::STORE).access_op(),
            Some(AccessOp::Store)
        );
        let rmw = src().with_mem_op(op::LOAD | op::STORE);
        assert_eq!(rmw.access_op(), Some(AccessOp::Load));
        for other in [0, op::NA, op::PFETCH, op::EXEC] {
            assert_eq!(src().with_mem_op(other).access_op(), None);
        }
    }

    #[test]
    fn lvl_num_maps_to_data_source() {
        let cases = [
            (lvlnum::L1, false, DataSource::L1),
            (lvlnum::LFB, false, DataSource::L1),
            (lvlnum::L2, false, DataSource::L2),
            (lvlnum::L2_MHB, false, DataSource::L2),
            (lvlnum::L3, false, DataSource::L3),
            (lvlnum::L4, false, DataSource::L3),
            (lvlnum::MSC, false, DataSource::L3),
            (lvlnum::ANY_CACHE, true, DataSource::PeerCache),
            (lvlnum::RAM, false, DataSource::LocalDram),
            (lvlnum::RAM, true, DataSource::RemoteDram),
            (lvlnum::CXL, false, DataSource::ExtMem),
            (lvlnum::CXL, true, DataSource::ExtMem),
            (lvlnum::PMEM, false, DataSource::ExtMem),
            (lvlnum::IO, false, DataSource::Unknown),
            (lvlnum::UNC, false, DataSource::Unknown),
            (lvlnum::NA, false, DataSource::Unknown),
            (lvlnum::L0, false, DataSource::L1),
        ];
        for (n, remote, want) in cases {
            let v = src().with_lvl_num(n).with_remote(remote);
            assert_eq!(v.to_data_source(), want, "lvl_num {n:#x} remote {remote}");
        }
        let local_cache = src()
            .with_mem_lvl(lvl::L3 | lvl::REM_CCE1 | lvl::HIT)
            .with_lvl_num(lvlnum::ANY_CACHE);
        assert_eq!(local_cache.to_data_source(), DataSource::L3);
    }

    #[test]
    fn legacy_mem_lvl_maps_when_lvl_num_is_unset() {
        let cases = [
            (lvl::L1, DataSource::L1),
            (lvl::LFB, DataSource::L1),
            (lvl::L2, DataSource::L2),
            (lvl::L3, DataSource::L3),
            (lvl::LOC_RAM, DataSource::LocalDram),
            (lvl::REM_RAM1, DataSource::RemoteDram),
            (lvl::REM_RAM2, DataSource::RemoteDram),
            (lvl::REM_CCE1, DataSource::PeerCache),
            (lvl::REM_CCE2, DataSource::PeerCache),
            (lvl::IO, DataSource::Unknown),
            (lvl::UNC, DataSource::Unknown),
        ];
        for (bits, want) in cases {
            let hit = src().with_mem_lvl(bits | lvl::HIT);
            assert_eq!(hit.to_data_source(), want, "{bits:#x}");
            let miss = src().with_mem_lvl(bits | lvl::MISS);
            assert_eq!(miss.to_data_source(), DataSource::Unknown, "{bits:#x}");
        }
        assert_eq!(
            src().with_mem_lvl(lvl::L3).to_data_source(),
            DataSource::Unknown
        );
    }

    #[test]
    fn core_cache_hits_from_lvl_num_or_legacy_bits() {
        let by_num = |n| src().with_lvl_num(n).core_cache_hit();
        assert_eq!(by_num(lvlnum::L1), Some(CoreCacheHit::L1));
        assert_eq!(by_num(lvlnum::L0), Some(CoreCacheHit::L1));
        assert_eq!(by_num(lvlnum::LFB), Some(CoreCacheHit::Lfb));
        assert_eq!(by_num(lvlnum::L2), Some(CoreCacheHit::L2));
        assert_eq!(by_num(lvlnum::L3), None);
        assert_eq!(by_num(lvlnum::CXL), None);
        let by_lvl = |bits| src().with_mem_lvl(bits).core_cache_hit();
        assert_eq!(by_lvl(lvl::L1 | lvl::HIT), Some(CoreCacheHit::L1));
        assert_eq!(by_lvl(lvl::LFB | lvl::HIT), Some(CoreCacheHit::Lfb));
        assert_eq!(by_lvl(lvl::L2 | lvl::HIT), Some(CoreCacheHit::L2));
        // An Intel store that missed L1 (precise_store_data): L1|MISS, no level number.
        assert_eq!(by_lvl(lvl::L1 | lvl::MISS), None);
        assert_eq!(by_lvl(lvl::L1), None);
        assert_eq!(by_lvl(lvl::LOC_RAM | lvl::HIT), None);
    }

    #[test]
    fn every_region_value_decodes() {
        // `PERF_MEM_REGION_*` in `include/uapi/linux/perf_event.h`: 0x0 NA, 0x01 RSVD,
        // 0x02/0x03 local CA shared/non-shared cache, 0x04 other CA IO agent, 0x05/0x06 other
        // CA shared/non-shared cache, 0x07 MMIO, 0x08..0x0f memory regions 0..7.
        let want = |v: u8| match v {
            0 | 1 => MemRegion::None,
            2 | 3 => MemRegion::LocalAgent,
            4..=6 => MemRegion::OtherAgent,
            7 => MemRegion::Mmio,
            8..=15 => MemRegion::Memory(v - 8),
            _ => MemRegion::Unknown(v),
        };
        for v in 0..32u8 {
            let d = src().with_region(v.into());
            assert_eq!(d.mem_region(), want(v), "region {v:#x}");
        }
    }

    proptest! {
        #[test]
        fn any_u64_decodes_without_panic(v in any::<u64>()) {
            let d = PerfMemDataSrc(v);
            let _ = (d.mem_op(), d.mem_lvl(), d.snoop(), d.lock(), d.dtlb(), d.lvl_num());
            let _ = (d.remote(), d.snoopx(), d.blk(), d.hops(), d.mem_region());
            let _ = (d.access_op(), d.core_cache_hit(), d.to_data_source());
        }
    }
}
