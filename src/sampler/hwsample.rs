//! What a hardware sampler (IBS, PEBS) keeps from a sample record, and why it drops the rest.
//!
//! In: the kernel-decoded fields of a PERF_RECORD_SAMPLE ([`SampleFields`]). Out: a
//! [`HwSample`] for an access that reached memory, or the one [`DropReason`] that rejected it.
//! pghot only wants user-space loads and stores that went past the core's L1/L2: cache hits
//! say nothing about where the page sits, so keeping them is not an option.
//! The pid-0 check is the sink's (it counts `pghot_drop_pid_zero`), not done here.

use crate::sample::{AccessOp, DataSource};
use crate::sampler::datasrc::{CoreCacheHit, MemRegion, PerfMemDataSrc};
use crate::stats::Counter;

/// A sampled data access that reached memory (or at least left the core).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwSample {
    /// Linear (virtual) data address; never 0, never a kernel address.
    pub vaddr: u64,
    /// Physical data address, when the hardware or kernel gave one.
    pub paddr: Option<u64>,
    pub op: AccessOp,
    /// Always [`DataSource::Unknown`] for stores: hardware reports sources for loads only.
    pub served_from: DataSource,
    /// Access latency in core cycles (IBS DcMissLat, PEBS load latency).
    pub latency: Option<u32>,
}

/// Why a hardware sample was dropped. Each has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Taken in kernel (or hypervisor) mode: cpumode or RIP bit 63.
    KernelMode,
    /// Taken while a guest ran (cpumode `PERF_RECORD_MISC_GUEST_KERNEL`/`_GUEST_USER`,
    /// `include/uapi/linux/perf_event.h`).
    GuestMode,
    /// Neither a load nor a store.
    NonLoadStore,
    /// Served by L1 (or, on Intel, the line fill buffer).
    L1Hit,
    L2Hit,
    /// No linear data address, or the hardware marked it invalid.
    InvalidAddr,
    /// Data address in the kernel half (bit 63 set).
    KernelAddr,
    /// The hardware marked the sample invalid, or its RAW payload was malformed.
    InvalidSample,
}

impl DropReason {
    pub const ALL: &'static [DropReason] = &[
        DropReason::KernelMode,
        DropReason::GuestMode,
        DropReason::NonLoadStore,
        DropReason::L1Hit,
        DropReason::L2Hit,
        DropReason::InvalidAddr,
        DropReason::KernelAddr,
        DropReason::InvalidSample,
    ];

    pub const fn counter(self) -> Counter {
        match self {
            DropReason::KernelMode => Counter::HwhintKernelMode,
            DropReason::GuestMode => Counter::HwhintGuestMode,
            DropReason::NonLoadStore => Counter::HwhintNonLoadStores,
            DropReason::L1Hit => Counter::HwhintL1Hits,
            DropReason::L2Hit => Counter::HwhintL2Hits,
            DropReason::InvalidAddr => Counter::HwhintInvalidAddr,
            DropReason::KernelAddr => Counter::HwhintKernelAddr,
            DropReason::InvalidSample => Counter::HwhintInvalidSamples,
        }
    }
}

/// A layout newer than pghotd knows, met and tolerated while decoding one sample. Counted
/// whether the sample is then kept or dropped, so that a kernel or CPU this code has not seen
/// shows up in the counters instead of passing silently. Each has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeNote {
    /// An IBS RAW payload longer than the registers its caps word announces: those were
    /// decoded, the rest ignored.
    IbsRawLongerThanKnown,
    /// An IBS RAW payload that did not parse: the kernel-decoded fields were used instead.
    IbsRawFallbackDecoded,
    /// A `mem_region` value the uapi header does not define: the level fields were used.
    DataSrcRegionUnknown,
}

impl DecodeNote {
    pub const ALL: &'static [DecodeNote] = &[
        DecodeNote::IbsRawLongerThanKnown,
        DecodeNote::IbsRawFallbackDecoded,
        DecodeNote::DataSrcRegionUnknown,
    ];

    pub const fn counter(self) -> Counter {
        match self {
            DecodeNote::IbsRawLongerThanKnown => Counter::IbsRawLongerThanKnown,
            DecodeNote::IbsRawFallbackDecoded => Counter::IbsRawFallbackDecoded,
            DecodeNote::DataSrcRegionUnknown => Counter::DataSrcRegionUnknown,
        }
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The notes of one sample, each at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Notes(u8);

impl Notes {
    #[inline]
    pub fn add(&mut self, note: DecodeNote) {
        self.0 |= note.bit();
    }

    pub const fn contains(self, note: DecodeNote) -> bool {
        self.0 & note.bit() != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = DecodeNote> {
        DecodeNote::ALL
            .iter()
            .copied()
            .filter(move |&n| self.contains(n))
    }
}

/// The kernel-decoded fields of a sample record, as the record parser gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleFields {
    /// `header.misc`; cpumode is `misc & 7`.
    pub misc: u16,
    pub ip: u64,
    /// Carried for the caller; pid 0 is dropped by the sink, not here.
    pub pid: u32,
    /// PERF_SAMPLE_ADDR; 0 when the kernel had none.
    pub addr: u64,
    /// PERF_SAMPLE_PHYS_ADDR; 0 when the kernel had none.
    pub phys_addr: u64,
    /// PERF_SAMPLE_DATA_SRC; [`PERF_MEM_NA`](crate::sampler::datasrc::PERF_MEM_NA) when none.
    pub data_src: u64,
    /// PERF_SAMPLE_WEIGHT (or WEIGHT_STRUCT, whose low 32 bits are the latency); 0 when none.
    pub weight: u64,
}

/// `PERF_RECORD_MISC_CPUMODE_*` (uapi perf_event.h).
const CPUMODE_MASK: u16 = 0x7;
const CPUMODE_KERNEL: u16 = 1;
const CPUMODE_HYPERVISOR: u16 = 3;
const CPUMODE_GUEST_KERNEL: u16 = 4;
const CPUMODE_GUEST_USER: u16 = 5;

/// Bit 63 marks the kernel half of the x86-64 address space
/// (`Documentation/arch/x86/x86_64/mm.rst`).
pub const KERNEL_HALF: u64 = 1 << 63;

/// Drops samples not taken in host user mode. Unknown cpumodes fall through to the RIP check.
pub fn check_cpumode(misc: u16) -> Result<(), DropReason> {
    match misc & CPUMODE_MASK {
        CPUMODE_KERNEL | CPUMODE_HYPERVISOR => Err(DropReason::KernelMode),
        CPUMODE_GUEST_KERNEL | CPUMODE_GUEST_USER => Err(DropReason::GuestMode),
        _ => Ok(()),
    }
}

/// Drops kernel instruction pointers.
pub fn check_ip(ip: u64) -> Result<(), DropReason> {
    if ip & KERNEL_HALF != 0 {
        return Err(DropReason::KernelMode);
    }
    Ok(())
}

/// Accepts a user data address: not 0, not in the kernel half.
pub fn check_data_addr(addr: u64) -> Result<u64, DropReason> {
    match addr {
        0 => Err(DropReason::InvalidAddr),
        a if a & KERNEL_HALF != 0 => Err(DropReason::KernelAddr),
        a => Ok(a),
    }
}

/// What a line-fill-buffer hit means for this hardware.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LfbMeans {
    /// Intel: an L1-level hit on a line already in flight; dropped as an L1 hit.
    L1Hit,
    /// AMD IBS: a miss past L2 that joined an outstanding one (MAB hit); the source is unknown
    /// but the access did leave the core (the "MAB" case of `perf_ibs_get_mem_lvl()`).
    MissInFlight,
}

/// Drops core-private cache hits.
pub fn check_cache_hit(src: PerfMemDataSrc, lfb: LfbMeans) -> Result<(), DropReason> {
    match (src.core_cache_hit(), lfb) {
        (Some(CoreCacheHit::L1), _) | (Some(CoreCacheHit::Lfb), LfbMeans::L1Hit) => {
            Err(DropReason::L1Hit)
        }
        (Some(CoreCacheHit::L2), _) => Err(DropReason::L2Hit),
        _ => Ok(()),
    }
}

/// Classifies a sample from its kernel-decoded fields only (no RAW), for IBS and PEBS alike.
pub fn classify_decoded(
    f: &SampleFields,
    lfb: LfbMeans,
    notes: &mut Notes,
) -> Result<HwSample, DropReason> {
    let src = PerfMemDataSrc(f.data_src);
    if matches!(src.mem_region(), MemRegion::Unknown(_)) {
        notes.add(DecodeNote::DataSrcRegionUnknown);
    }
    check_cpumode(f.misc)?;
    check_ip(f.ip)?;
    let op = src.access_op().ok_or(DropReason::NonLoadStore)?;
    check_cache_hit(src, lfb)?;
    let vaddr = check_data_addr(f.addr)?;
    let served_from = match (op, src.core_cache_hit()) {
        (AccessOp::Store, _) | (_, Some(CoreCacheHit::Lfb)) => DataSource::Unknown,
        (AccessOp::Load, _) => src.to_data_source(),
    };
    Ok(HwSample {
        vaddr,
        paddr: (f.phys_addr != 0).then_some(f.phys_addr),
        op,
        served_from,
        latency: weight_latency(f.weight),
    })
}

/// The latency word of PERF_SAMPLE_WEIGHT(_STRUCT): its low 32 bits (`var1_dw` of
/// `union perf_sample_weight`, which IBS fills in `perf_ibs_parse_ld_st_data()`);
/// 0 means the kernel reported none.
fn weight_latency(weight: u64) -> Option<u32> {
    u32::try_from(weight & u64::from(u32::MAX))
        .ok()
        .filter(|&l| l != 0)
}

/// Test helpers shared by the IBS and PEBS classification tests.
#[cfg(test)]
pub(crate) mod testutil {
    use super::SampleFields;
    use crate::sampler::datasrc::{PerfMemDataSrc, op};

    /// `PERF_RECORD_MISC_CPUMODE_USER`.
    pub const USER: u16 = 2;

    /// A user-mode sample with a user data address, no physical address and no weight.
    pub fn user_sample(data_src: PerfMemDataSrc) -> SampleFields {
        SampleFields {
            misc: USER,
            ip: 0x40_1000,
            pid: 42,
            addr: 0x7f00_0000_1000,
            phys_addr: 0,
            data_src: data_src.0,
            weight: 0,
        }
    }

    /// A load's data source with these `mem_lvl` bits and level number.
    pub fn load(lvl_bits: u64, num: u64) -> PerfMemDataSrc {
        PerfMemDataSrc(0)
            .with_mem_op(op::LOAD)
            .with_mem_lvl(lvl_bits)
            .with_lvl_num(num)
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::{USER, load, user_sample as fields};
    use super::*;
    use crate::sampler::datasrc::{PERF_MEM_NA, lvl, lvlnum, op};

    #[test]
    fn drop_reasons_have_distinct_source_drop_counters() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.counter().name()).collect();
        assert!(DropReason::ALL.iter().all(|r| r.counter().is_source_drop()));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DropReason::ALL.len());
        // Plus the two every perf source shares: records lost in the ring, and malformed ones.
        let source_drops = Counter::ALL.iter().filter(|c| c.is_source_drop()).count();
        assert_eq!(source_drops, DropReason::ALL.len() + 2);
    }

    #[test]
    fn cpumodes() {
        assert_eq!(check_cpumode(USER), Ok(()));
        assert_eq!(check_cpumode(0), Ok(()));
        assert_eq!(check_cpumode(1), Err(DropReason::KernelMode));
        assert_eq!(check_cpumode(3), Err(DropReason::KernelMode));
        assert_eq!(check_cpumode(4), Err(DropReason::GuestMode));
        assert_eq!(check_cpumode(5 | 0x4000), Err(DropReason::GuestMode));
    }

    #[test]
    fn decoded_cxl_load_is_kept_as_extmem() {
        let mut f = fields(load(0, lvlnum::CXL).with_remote(true));
        f.phys_addr = 0x20_0000_1000;
        f.weight = 0x0005_0000_0000_01f4;
        let s = classify_decoded(&f, LfbMeans::MissInFlight, &mut Notes::default()).unwrap();
        assert_eq!(s.vaddr, 0x7f00_0000_1000);
        assert_eq!(s.paddr, Some(0x20_0000_1000));
        assert_eq!((s.op, s.served_from), (AccessOp::Load, DataSource::ExtMem));
        assert_eq!(s.latency, Some(500));
    }

    #[test]
    fn decoded_drops() {
        let miss = load(lvl::LOC_RAM | lvl::HIT, lvlnum::RAM);
        let cases: [(SampleFields, DropReason); 8] = [
            (
                SampleFields {
                    misc: 1,
                    ..fields(miss)
                },
                DropReason::KernelMode,
            ),
            (
                SampleFields {
                    ip: KERNEL_HALF | 5,
                    ..fields(miss)
                },
                DropReason::KernelMode,
            ),
            (
                SampleFields {
                    misc: 5,
                    ..fields(miss)
                },
                DropReason::GuestMode,
            ),
            (fields(PERF_MEM_NA), DropReason::NonLoadStore),
            (
                fields(load(lvl::L1 | lvl::HIT, lvlnum::L1)),
                DropReason::L1Hit,
            ),
            (
                fields(load(lvl::L2 | lvl::HIT, lvlnum::L2)),
                DropReason::L2Hit,
            ),
            (
                SampleFields {
                    addr: 0,
                    ..fields(miss)
                },
                DropReason::InvalidAddr,
            ),
            (
                SampleFields {
                    addr: KERNEL_HALF | 0x1000,
                    ..fields(miss)
                },
                DropReason::KernelAddr,
            ),
        ];
        for (f, want) in cases {
            assert_eq!(
                classify_decoded(&f, LfbMeans::MissInFlight, &mut Notes::default()),
                Err(want),
                "{f:?}"
            );
        }
    }

    #[test]
    fn lfb_is_an_l1_hit_on_intel_and_an_unknown_miss_on_ibs() {
        let f = fields(load(lvl::LFB | lvl::HIT, lvlnum::LFB));
        assert_eq!(
            classify_decoded(&f, LfbMeans::L1Hit, &mut Notes::default()),
            Err(DropReason::L1Hit)
        );
        let s = classify_decoded(&f, LfbMeans::MissInFlight, &mut Notes::default()).unwrap();
        assert_eq!(s.served_from, DataSource::Unknown);
    }

    #[test]
    fn stores_carry_no_source_and_no_phys_without_one() {
        let st = PerfMemDataSrc(0)
            .with_mem_op(op::STORE)
            .with_mem_lvl(lvl::L1 | lvl::MISS);
        let s = classify_decoded(&fields(st), LfbMeans::L1Hit, &mut Notes::default()).unwrap();
        assert_eq!(
            (s.op, s.served_from),
            (AccessOp::Store, DataSource::Unknown)
        );
        assert_eq!((s.paddr, s.latency), (None, None));
    }
}
