//! The IBS op MSRs as the kernel copies them into PERF_SAMPLE_RAW (`perf_ibs_handle_irq()` in
//! `arch/x86/events/amd/ibs.c`), with typed views of the registers (the unions of
//! `arch/x86/include/asm/amd-ibs.h`) and the DataSrc encodings (its `IBS_DATA_SRC_*` values).

use super::caps::IbsCaps;
use super::{fields, flags};
use crate::sample::DataSource;

/// IbsOpCtl, MSR C001_1033 (`union ibs_op_ctl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpCtl(pub u64);

fields!(OpCtl {
    /// Bits 0-15: OpMaxCnt[15:0] (period >> 4).
    max_cnt_lo: u32 = 0, 16;
    /// Bits 20-26: OpMaxCnt[22:16] (caps OPCNTEXT).
    max_cnt_hi: u32 = 20, 7;
    /// Bits 32-58: OpCurCnt (low 7 bits randomised by hardware).
    cur_cnt: u32 = 32, 27;
    /// Bits 59-62: LdLatThrsh; threshold = (value + 1) * 128 cycles (Zen5).
    ld_lat_thrsh: u32 = 59, 4;
});

flags!(OpCtl {
    /// Bit 16: L3MissOnly (Zen4+).
    l3_miss_only = 16;
    /// Bit 17: OpEn.
    op_en = 17;
    /// Bit 18: OpVal, the sample is valid.
    op_val = 18;
    /// Bit 19: OpCntCtl, 0 counts cycles, 1 counts dispatched ops.
    cnt_ctl = 19;
    /// Bit 63: LdLatEn (Zen5).
    ld_lat_en = 63;
});

impl OpCtl {
    /// The 23-bit MaxCnt (high bits only meaningful with OPCNTEXT).
    pub const fn max_cnt(self) -> u32 {
        self.max_cnt_hi() << 16 | self.max_cnt_lo()
    }

    /// The programmed period in ops or cycles: MaxCnt counts in units of 16 (the driver
    /// writes `period >> 4`, `perf_ibs_start()`).
    pub const fn period(self) -> u64 {
        (self.max_cnt() as u64) << 4
    }

    /// The load-latency threshold in cycles, when LdLatEn is set.
    pub const fn ld_lat_threshold(self) -> Option<u32> {
        if self.ld_lat_en() {
            Some((self.ld_lat_thrsh() + 1) * 128)
        } else {
            None
        }
    }
}

/// IbsOpData, MSR C001_1035 (`union ibs_op_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpData(pub u64);

fields!(OpData {
    /// Bits 0-15: op completion to retire, cycles.
    comp_to_ret_ctr: u16 = 0, 16;
    /// Bits 16-31: tag to retire, cycles (WEIGHT_STRUCT var2_w).
    tag_to_ret_ctr: u16 = 16, 16;
});

flags!(OpData {
    /// Bit 34.
    op_return = 34;
    /// Bit 35.
    op_brn_taken = 35;
    /// Bit 36.
    op_brn_misp = 36;
    /// Bit 37.
    op_brn_ret = 37;
    /// Bit 38: IbsOpRip is garbage (only meaningful with caps RIPINVALIDCHK).
    rip_invalid = 38;
    /// Bit 39.
    op_brn_fuse = 39;
    /// Bit 40.
    op_microcode = 40;
});

/// IbsOpData2, MSR C001_1036 (`union ibs_op_data2`): valid only for loads (as
/// `perf_ibs_get_mem_lvl()` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpData2(pub u64);

fields!(OpData2 {
    /// Bits 0-2: DataSrc[2:0].
    data_src_lo: u8 = 0, 3;
    /// Bits 6-7: DataSrc[4:3] (caps ZEN4).
    data_src_hi: u8 = 6, 2;
});

flags!(OpData2 {
    /// Bit 4: served by a node other than the requester's.
    rmt_node = 4;
    /// Bit 5: for cache sources, 0 = M state, 1 = O state.
    cache_hit_st = 5;
    /// Bit 8: streaming store (Linux 7.1, caps bit 16).
    strm_st = 8;
    /// Bit 9: served by another socket (Linux 7.1, caps bit 16).
    rmt_socket = 9;
});

impl OpData2 {
    /// The DataSrc number: 5 bits with caps ZEN4, else 3 (`perf_ibs_data_src()`).
    pub const fn data_src_value(self, caps: IbsCaps) -> u8 {
        if caps.zen4() {
            self.data_src_hi() << 3 | self.data_src_lo()
        } else {
            self.data_src_lo()
        }
    }

    pub const fn data_src(self, caps: IbsCaps) -> IbsDataSrc {
        IbsDataSrc::decode(self.data_src_value(caps), caps.zen4())
    }
}

/// IbsOpData3, MSR C001_1037 (`union ibs_op_data3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpData3(pub u64);

flags!(OpData3 {
    /// Bit 0.
    ld_op = 0;
    /// Bit 1.
    st_op = 1;
    /// Bit 2 (Zen5: valid only with DcPhyAddrValid).
    dc_l1_tlb_miss = 2;
    /// Bit 3 (Zen5: valid only with DcPhyAddrValid).
    dc_l2_tlb_miss = 3;
    /// Bit 4, Zen3/Zen4 only (caps bit 19 clear).
    dc_l1_tlb_hit_2m = 4;
    /// Bit 5, Zen3/Zen4 only (caps bit 19 clear).
    dc_l1_tlb_hit_1g = 5;
    /// Bit 6, Zen3/Zen4 only (caps bit 19 clear).
    dc_l2_tlb_hit_2m = 6;
    /// Bit 7: missed the data cache.
    dc_miss = 7;
    /// Bit 8: misaligned access.
    dc_mis_acc = 8;
    /// Bit 13: write-combining memory.
    dc_wc_mem_acc = 13;
    /// Bit 14: uncacheable; DcMiss, L2Miss, DataSrc and DcMissLat are invalid then.
    dc_uc_mem_acc = 14;
    /// Bit 15.
    dc_locked_op = 15;
    /// Bit 16: hit an outstanding miss buffer (MAB) instead of allocating one.
    dc_miss_no_mab_alloc = 16;
    /// Bit 17: IbsDcLinAd holds the linear address.
    dc_lin_addr_valid = 17;
    /// Bit 18: IbsDcPhysAd holds the physical address.
    dc_phy_addr_valid = 18;
    /// Bit 19, Zen3/Zen4 only (caps bit 19 clear).
    dc_l2_tlb_hit_1g = 19;
    /// Bit 20: missed L2.
    l2_miss = 20;
    /// Bit 21: software prefetch.
    sw_pf = 21;
});

fields!(OpData3 {
    /// Bits 4-5 with caps bit 19 (Zen5): page size code, see [`OpData3::page_size`].
    page_size_code: u8 = 4, 2;
    /// Bits 22-25: 0 = none, else 2^(v-1) bytes.
    op_mem_width: u8 = 22, 4;
    /// Bits 26-31: outstanding fills.
    dc_miss_open_mem_reqs: u8 = 26, 6;
    /// Bits 32-47: data cache miss latency, cycles (loads with DcMiss).
    dc_miss_lat: u16 = 32, 16;
    /// Bits 48-63: L1 TLB refill latency, cycles.
    tlb_refill_lat: u16 = 48, 16;
});

/// Page size of the data access (Zen5, caps bit 19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DcPageSize {
    Size4K,
    Size2M,
    Size1G,
    /// Encoding 3.
    Reserved,
}

impl OpData3 {
    /// The page size on CPUs with caps bit 19 (`IBS_CAPS_OPDTLBPGSIZE`, Zen5), valid only
    /// when DcPhyAddrValid.
    pub const fn page_size(self, caps: IbsCaps) -> Option<DcPageSize> {
        if !caps.op_dtlb_pgsize() || !self.dc_phy_addr_valid() {
            return None;
        }
        Some(match self.page_size_code() {
            0 => DcPageSize::Size4K,
            1 => DcPageSize::Size2M,
            2 => DcPageSize::Size1G,
            _ => DcPageSize::Reserved,
        })
    }

    /// Access width in bytes, `None` when the op had none.
    pub const fn op_mem_width_bytes(self) -> Option<u32> {
        match self.op_mem_width() {
            0 => None,
            v => Some(1 << (v - 1)),
        }
    }
}

/// IbsOpData2 DataSrc, decoded for the CPU generation (`IBS_DATA_SRC_*` and
/// `IBS_DATA_SRC_EXT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IbsDataSrc {
    /// 0: no valid status.
    NoStatus,
    /// Pre-Zen4 2: local node cache.
    LocalCache,
    /// Pre-Zen4 4: remote node cache.
    RemoteCache,
    /// Zen4 1: local L3, or another L1/L2 in the same CCX.
    LocalCcxCache,
    /// Zen4 2: another CCX's cache in the same node.
    NearCcxCache,
    /// Zen4 5: another CCX's cache in a different node.
    FarCcxCache,
    /// 3 (both): DRAM.
    Dram,
    /// Zen4 6: long-latency DIMM.
    Pmem,
    /// 7 (both): MMIO, config, PCI, APIC.
    Io,
    /// Zen4 8: extension memory (CXL).
    ExtMem,
    /// Zen4 12: coherent memory of another processor type (accelerator).
    PeerAgentMem,
    /// Any value the generation reserves.
    Reserved(u8),
}

impl IbsDataSrc {
    /// Decodes a 3-bit (pre-Zen4) or 5-bit (Zen4+) DataSrc.
    pub const fn decode(value: u8, zen4: bool) -> IbsDataSrc {
        match (value, zen4) {
            (0, _) => IbsDataSrc::NoStatus,
            (3, _) => IbsDataSrc::Dram,
            (7, _) => IbsDataSrc::Io,
            (2, false) => IbsDataSrc::LocalCache,
            (4, false) => IbsDataSrc::RemoteCache,
            (1, true) => IbsDataSrc::LocalCcxCache,
            (2, true) => IbsDataSrc::NearCcxCache,
            (5, true) => IbsDataSrc::FarCcxCache,
            (6, true) => IbsDataSrc::Pmem,
            (8, true) => IbsDataSrc::ExtMem,
            (12, true) => IbsDataSrc::PeerAgentMem,
            (v, _) => IbsDataSrc::Reserved(v),
        }
    }

    /// Where a load was served from. `rmt_node` (OpData2 bit 4) splits DRAM into local and
    /// remote; PMEM and CXL are the extension tier wherever they sit. Peer-agent memory and IO
    /// are not tiers pghotd manages, so they are Unknown (the kernel reports them as NA/IO).
    pub const fn data_source(self, rmt_node: bool) -> DataSource {
        match self {
            IbsDataSrc::LocalCache | IbsDataSrc::LocalCcxCache => DataSource::L3,
            IbsDataSrc::RemoteCache | IbsDataSrc::NearCcxCache | IbsDataSrc::FarCcxCache => {
                DataSource::PeerCache
            }
            IbsDataSrc::Dram if rmt_node => DataSource::RemoteDram,
            IbsDataSrc::Dram => DataSource::LocalDram,
            IbsDataSrc::Pmem | IbsDataSrc::ExtMem => DataSource::ExtMem,
            IbsDataSrc::NoStatus
            | IbsDataSrc::Io
            | IbsDataSrc::PeerAgentMem
            | IbsDataSrc::Reserved(_) => DataSource::Unknown,
        }
    }

    /// Sources for which CacheHitSt means something: 1, 2, 5 on Zen4+, 2 before
    /// (`perf_ibs_get_mem_snoop()`).
    pub const fn is_cache(self) -> bool {
        matches!(
            self,
            IbsDataSrc::LocalCache
                | IbsDataSrc::LocalCcxCache
                | IbsDataSrc::NearCcxCache
                | IbsDataSrc::FarCcxCache
        )
    }
}

/// Errors decoding a RAW payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RawError {
    #[error("IBS RAW payload of {len} bytes is shorter than its 4-byte caps word")]
    NoCaps { len: usize },
    #[error(
        "IBS RAW payload of {len} bytes is shorter than the {expected} bytes its caps {caps:#x} \
         announce (BrTarget {br_target}, OpData4 {op_data4})"
    )]
    Short {
        len: usize,
        expected: usize,
        caps: u32,
        br_target: bool,
        op_data4: bool,
    },
}

/// One decoded ibs_op RAW payload: caps, then the op MSRs (`struct perf_ibs_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbsOpRaw {
    pub caps: IbsCaps,
    pub op_ctl: OpCtl,
    /// IbsOpRip C001_1034.
    pub op_rip: u64,
    pub op_data: OpData,
    pub op_data2: OpData2,
    pub op_data3: OpData3,
    /// IbsDcLinAd C001_1038.
    pub dc_lin_ad: u64,
    /// IbsDcPhysAd C001_1039; zeroed by v6.14+ for unprivileged openers
    /// (`perf_ibs_phyaddr_clear()`, called from `perf_ibs_handle_irq()`).
    pub dc_phys_ad: u64,
    /// IbsBrTarget C001_103B, present iff caps BRNTRGT.
    pub br_target: Option<u64>,
    /// IbsOpData4 C001_103D, present iff caps OPDATA4.
    pub op_data4: Option<u64>,
    /// Bytes after the last register the caps word announces, ignored: a register a newer
    /// kernel appends, or the padding of a RAW section that is not 4 mod 8 bytes long.
    pub trailing_bytes: usize,
}

/// The seven op MSRs always present (IbsOpCtl .. IbsDcPhysAd).
const FIXED_REGS: usize = 7;
const CAPS_LEN: usize = 4;

impl IbsOpRaw {
    /// The payload length for a caps word: `4 + 8 * n`, n in 7..=9.
    pub const fn expected_len(caps: IbsCaps) -> usize {
        CAPS_LEN + 8 * (FIXED_REGS + caps.brn_trgt() as usize + caps.op_data4() as usize)
    }

    /// Decodes the payload starting at the caps u32 (what perf-event-data's `raw()` returns).
    /// RAW is not ABI (the PERF_RECORD_SAMPLE comment in `include/uapi/linux/perf_event.h`),
    /// but `perf_ibs_handle_irq()` has only ever appended: the seven op MSRs, then BrTarget
    /// and OpData4 as caps announces them. So a longer payload is decoded up to what caps
    /// announces and the rest is left in `trailing_bytes`; a shorter one is an error.
    pub fn parse(raw: &[u8]) -> Result<IbsOpRaw, RawError> {
        let (caps, regs) = raw
            .split_first_chunk::<CAPS_LEN>()
            .ok_or(RawError::NoCaps { len: raw.len() })?;
        let caps = IbsCaps(u32::from_le_bytes(*caps));
        let expected = Self::expected_len(caps);
        if raw.len() < expected {
            return Err(RawError::Short {
                len: raw.len(),
                expected,
                caps: caps.0,
                br_target: caps.brn_trgt(),
                op_data4: caps.op_data4(),
            });
        }
        let (words, _) = regs[..expected - CAPS_LEN].as_chunks::<8>();
        let word = |i: usize| words.get(i).map_or(0, |w| u64::from_le_bytes(*w));
        // Order of the optionals is BrTarget then OpData4 (`perf_ibs_handle_irq()`).
        let br_target = caps.brn_trgt().then(|| word(FIXED_REGS));
        let op_data4 = caps
            .op_data4()
            .then(|| word(FIXED_REGS + usize::from(caps.brn_trgt())));
        Ok(IbsOpRaw {
            caps,
            op_ctl: OpCtl(word(0)),
            op_rip: word(1),
            op_data: OpData(word(2)),
            op_data2: OpData2(word(3)),
            op_data3: OpData3(word(4)),
            dc_lin_ad: word(5),
            dc_phys_ad: word(6),
            br_target,
            op_data4,
            trailing_bytes: raw.len() - expected,
        })
    }

    /// The op ran in kernel mode: RIP bit 63, unless the hardware says RIP is garbage.
    pub const fn rip_is_kernel(&self) -> bool {
        let rip_valid = !(self.caps.rip_invalid_chk() && self.op_data.rip_invalid());
        rip_valid && self.op_rip >> 63 == 1
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::testraw::*;
    use super::*;

    type Getter = fn(&IbsOpRaw) -> u64;

    /// Every accessor, named as in [`LAYOUT`]; bits 4-5 of OpData3 (PageSize) are tested apart.
    const ACCESSORS: &[(&str, Getter)] = &[
        ("OpMaxCnt", |r| r.op_ctl.max_cnt_lo().into()),
        ("L3MissOnly", |r| r.op_ctl.l3_miss_only().into()),
        ("OpEn", |r| r.op_ctl.op_en().into()),
        ("OpVal", |r| r.op_ctl.op_val().into()),
        ("OpCntCtl", |r| r.op_ctl.cnt_ctl().into()),
        ("OpMaxCntHi", |r| r.op_ctl.max_cnt_hi().into()),
        ("OpCurCnt", |r| r.op_ctl.cur_cnt().into()),
        ("LdLatThrsh", |r| r.op_ctl.ld_lat_thrsh().into()),
        ("LdLatEn", |r| r.op_ctl.ld_lat_en().into()),
        ("CompToRetCtr", |r| r.op_data.comp_to_ret_ctr().into()),
        ("TagToRetCtr", |r| r.op_data.tag_to_ret_ctr().into()),
        ("OpReturn", |r| r.op_data.op_return().into()),
        ("OpBrnTaken", |r| r.op_data.op_brn_taken().into()),
        ("OpBrnMisp", |r| r.op_data.op_brn_misp().into()),
        ("OpBrnRet", |r| r.op_data.op_brn_ret().into()),
        ("OpRipInvalid", |r| r.op_data.rip_invalid().into()),
        ("OpBrnFuse", |r| r.op_data.op_brn_fuse().into()),
        ("OpMicrocode", |r| r.op_data.op_microcode().into()),
        ("DataSrcLo", |r| r.op_data2.data_src_lo().into()),
        ("RmtNode", |r| r.op_data2.rmt_node().into()),
        ("CacheHitSt", |r| r.op_data2.cache_hit_st().into()),
        ("DataSrcHi", |r| r.op_data2.data_src_hi().into()),
        ("StrmSt", |r| r.op_data2.strm_st().into()),
        ("RmtSocket", |r| r.op_data2.rmt_socket().into()),
        ("LdOp", |r| r.op_data3.ld_op().into()),
        ("StOp", |r| r.op_data3.st_op().into()),
        ("DcL1TlbMiss", |r| r.op_data3.dc_l1_tlb_miss().into()),
        ("DcL2TlbMiss", |r| r.op_data3.dc_l2_tlb_miss().into()),
        ("DcL1TlbHit2M", |r| r.op_data3.dc_l1_tlb_hit_2m().into()),
        ("DcL1TlbHit1G", |r| r.op_data3.dc_l1_tlb_hit_1g().into()),
        ("DcL2TlbHit2M", |r| r.op_data3.dc_l2_tlb_hit_2m().into()),
        ("DcMiss", |r| r.op_data3.dc_miss().into()),
        ("DcMisAcc", |r| r.op_data3.dc_mis_acc().into()),
        ("DcWcMemAcc", |r| r.op_data3.dc_wc_mem_acc().into()),
        ("DcUcMemAcc", |r| r.op_data3.dc_uc_mem_acc().into()),
        ("DcLockedOp", |r| r.op_data3.dc_locked_op().into()),
        ("DcMissNoMabAlloc", |r| {
            r.op_data3.dc_miss_no_mab_alloc().into()
        }),
        ("DcLinAddrValid", |r| r.op_data3.dc_lin_addr_valid().into()),
        ("DcPhyAddrValid", |r| r.op_data3.dc_phy_addr_valid().into()),
        ("DcL2TlbHit1G", |r| r.op_data3.dc_l2_tlb_hit_1g().into()),
        ("L2Miss", |r| r.op_data3.l2_miss().into()),
        ("SwPf", |r| r.op_data3.sw_pf().into()),
        ("OpMemWidth", |r| r.op_data3.op_mem_width().into()),
        ("OpDcMissOpenMemReqs", |r| {
            r.op_data3.dc_miss_open_mem_reqs().into()
        }),
        ("DcMissLat", |r| r.op_data3.dc_miss_lat().into()),
        ("TlbRefillLat", |r| r.op_data3.tlb_refill_lat().into()),
    ];

    #[test]
    fn every_field_accessor_reads_its_bits_and_only_those() {
        assert_eq!(
            ACCESSORS.len() + 1,
            LAYOUT.len(),
            "PageSize is tested apart"
        );
        for &(name, _, _, width) in LAYOUT.iter().filter(|(n, ..)| *n != "PageSize") {
            let max = u64::MAX >> (64 - width);
            let raw = RawBuilder::new(CAPS_ZEN4).set(name, max).parse();
            for &(other, get) in ACCESSORS {
                let want = if other == name { max } else { 0 };
                assert_eq!(get(&raw), want, "{other} after setting {name}");
            }
            let one = RawBuilder::new(CAPS_ZEN4).set(name, 1).parse();
            let get = ACCESSORS.iter().find(|(n, _)| *n == name).unwrap().1;
            assert_eq!(get(&one), 1, "{name} = 1");
        }
    }

    #[test]
    fn plain_registers_and_optional_ones_land_in_place() {
        let raw = RawBuilder::new(CAPS_ZEN3 | BRNTRGT | OPDATA4)
            .reg(Reg::Rip, 0x1111)
            .reg(Reg::LinAd, 0x2222)
            .reg(Reg::PhysAd, 0x3333)
            .reg(Reg::BrTarget, 0x4444)
            .reg(Reg::Data4, 0x5555)
            .parse();
        assert_eq!(
            (raw.op_rip, raw.dc_lin_ad, raw.dc_phys_ad),
            (0x1111, 0x2222, 0x3333)
        );
        assert_eq!((raw.br_target, raw.op_data4), (Some(0x4444), Some(0x5555)));
        assert_eq!(raw.caps, IbsCaps(CAPS_ZEN3 | BRNTRGT | OPDATA4));
    }

    #[test]
    fn payload_length_follows_caps() {
        let cases = [
            (CAPS_ZEN3, 60, None, None),
            (CAPS_ZEN3 | BRNTRGT, 68, Some(7), None),
            (CAPS_ZEN3 | OPDATA4, 68, None, Some(9)),
            (CAPS_ZEN3 | BRNTRGT | OPDATA4, 76, Some(7), Some(9)),
        ];
        for (caps, len, br, d4) in cases {
            let b = RawBuilder::new(caps)
                .reg(Reg::BrTarget, 7)
                .reg(Reg::Data4, 9);
            let bytes = b.bytes();
            assert_eq!(bytes.len(), len);
            assert_eq!(IbsOpRaw::expected_len(IbsCaps(caps)), len);
            let raw = IbsOpRaw::parse(&bytes).unwrap();
            assert_eq!((raw.br_target, raw.op_data4), (br, d4), "caps {caps:#x}");
            assert_eq!(raw.trailing_bytes, 0);
            for short in [len - 8, len - 1] {
                let err = IbsOpRaw::parse(&bytes[..short]).unwrap_err();
                assert!(matches!(err, RawError::Short { expected, .. } if expected == len));
            }
            for extra in [1, 4, 8, 16] {
                let mut longer = bytes.clone();
                longer.resize(len + extra, 0xee);
                let parsed = IbsOpRaw::parse(&longer).unwrap();
                assert_eq!(parsed.trailing_bytes, extra, "caps {caps:#x}");
                assert_eq!(
                    IbsOpRaw {
                        trailing_bytes: 0,
                        ..parsed
                    },
                    raw
                );
            }
        }
        assert_eq!(
            IbsOpRaw::parse(&[1, 0, 0]),
            Err(RawError::NoCaps { len: 3 })
        );
        let msg = IbsOpRaw::parse(&[0x21, 0, 0, 0]).unwrap_err().to_string();
        assert!(
            msg.contains("4 bytes is shorter than the 68 bytes its caps 0x21 announce"),
            "{msg}"
        );
    }

    #[test]
    fn every_zen4_data_src_value() {
        use IbsDataSrc::*;
        let named = [
            (0, NoStatus),
            (1, LocalCcxCache),
            (2, NearCcxCache),
            (3, Dram),
            (5, FarCcxCache),
            (6, Pmem),
            (7, Io),
            (8, ExtMem),
            (12, PeerAgentMem),
        ];
        for v in 0..=31u8 {
            let want = named
                .iter()
                .find(|(n, _)| *n == v)
                .map_or(Reserved(v), |&(_, s)| s);
            let raw = RawBuilder::new(CAPS_ZEN4).data_src(v.into()).parse();
            assert_eq!(raw.op_data2.data_src_value(raw.caps), v);
            assert_eq!(raw.op_data2.data_src(raw.caps), want, "DataSrc {v}");
        }
    }

    #[test]
    fn pre_zen4_data_src_uses_three_bits() {
        use IbsDataSrc::*;
        let want = [
            NoStatus,
            Reserved(1),
            LocalCache,
            Dram,
            RemoteCache,
            Reserved(5),
            Reserved(6),
            Io,
        ];
        for (v, want) in (0u64..).zip(want) {
            // The high bits are ignored without caps ZEN4.
            let raw = RawBuilder::new(CAPS_ZEN3).data_src(v | 0x18).parse();
            assert_eq!(raw.op_data2.data_src(raw.caps), want, "DataSrc {v}");
        }
    }

    #[test]
    fn data_sources_map_to_tiers() {
        use IbsDataSrc::*;
        let cases = [
            (LocalCcxCache, false, DataSource::L3),
            (LocalCache, false, DataSource::L3),
            (NearCcxCache, false, DataSource::PeerCache),
            (FarCcxCache, true, DataSource::PeerCache),
            (RemoteCache, true, DataSource::PeerCache),
            (Dram, false, DataSource::LocalDram),
            (Dram, true, DataSource::RemoteDram),
            (Pmem, false, DataSource::ExtMem),
            (Pmem, true, DataSource::ExtMem),
            (ExtMem, false, DataSource::ExtMem),
            (ExtMem, true, DataSource::ExtMem),
            (Io, false, DataSource::Unknown),
            (PeerAgentMem, false, DataSource::Unknown),
            (NoStatus, false, DataSource::Unknown),
            (Reserved(9), false, DataSource::Unknown),
        ];
        for (src, rmt, want) in cases {
            assert_eq!(src.data_source(rmt), want, "{src:?} rmt {rmt}");
        }
    }

    #[test]
    fn derived_values() {
        let raw = RawBuilder::new(CAPS_ZEN3)
            .set("OpMaxCnt", 0x271)
            .set("OpMaxCntHi", 0x7f)
            .set("LdLatThrsh", 1)
            .set("OpMemWidth", 4)
            .parse();
        assert_eq!(raw.op_ctl.max_cnt(), 0x7f_0271);
        assert_eq!(raw.op_ctl.period(), 0x7f_02710);
        assert_eq!(raw.op_ctl.ld_lat_threshold(), None);
        assert_eq!(raw.op_data3.op_mem_width_bytes(), Some(8));
        let raw = RawBuilder::new(CAPS_ZEN3)
            .on(&["LdLatEn"])
            .set("LdLatThrsh", 15)
            .parse();
        assert_eq!(raw.op_ctl.ld_lat_threshold(), Some(2048));
        assert_eq!(raw.op_data3.op_mem_width_bytes(), None);
    }

    #[test]
    fn zen5_page_size_needs_caps_and_a_valid_physical_address() {
        let zen5 = CAPS_ZEN4 | OPDTLBPGSIZE;
        let sizes = [
            DcPageSize::Size4K,
            DcPageSize::Size2M,
            DcPageSize::Size1G,
            DcPageSize::Reserved,
        ];
        for (code, want) in (0u64..).zip(sizes) {
            let b = RawBuilder::new(zen5).set("PageSize", code);
            let with_pa = b.clone().on(&["DcPhyAddrValid"]).parse();
            assert_eq!(with_pa.op_data3.page_size(with_pa.caps), Some(want));
            let no_pa = b.parse();
            assert_eq!(no_pa.op_data3.page_size(no_pa.caps), None);
        }
        let zen4 = RawBuilder::new(CAPS_ZEN4)
            .on(&["DcPhyAddrValid", "DcL1TlbHit2M"])
            .parse();
        assert_eq!(zen4.op_data3.page_size(zen4.caps), None);
        assert!(zen4.op_data3.dc_l1_tlb_hit_2m());
    }

    #[test]
    fn kernel_rip_unless_marked_invalid() {
        let kernel = RawBuilder::new(CAPS_ZEN3).reg(Reg::Rip, 1 << 63 | 0x1000);
        assert!(kernel.parse().rip_is_kernel());
        assert!(!kernel.clone().on(&["OpRipInvalid"]).parse().rip_is_kernel());
        let no_chk = RawBuilder::new(CAPS_ZEN3 & !RIPINVALIDCHK).reg(Reg::Rip, 1 << 63);
        assert!(no_chk.on(&["OpRipInvalid"]).parse().rip_is_kernel());
        assert!(
            !RawBuilder::new(CAPS_ZEN3)
                .reg(Reg::Rip, 0x1000)
                .parse()
                .rip_is_kernel()
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = IbsOpRaw::parse(&bytes);
        }

        #[test]
        fn well_sized_payloads_always_parse(caps in any::<u32>(), regs in any::<[u64; 9]>()) {
            let b = regs.iter().enumerate().fold(RawBuilder::new(caps), |b, (i, &v)| {
                let reg = [Reg::Ctl, Reg::Rip, Reg::Data, Reg::Data2, Reg::Data3, Reg::LinAd,
                           Reg::PhysAd, Reg::BrTarget, Reg::Data4][i];
                b.reg(reg, v)
            });
            let raw = IbsOpRaw::parse(&b.bytes()).unwrap();
            prop_assert_eq!(raw.op_ctl.0, regs[0]);
            prop_assert_eq!(raw.dc_phys_ad, regs[6]);
            prop_assert_eq!(raw.br_target, IbsCaps(caps).brn_trgt().then_some(regs[7]));
            prop_assert_eq!(raw.op_data4, IbsCaps(caps).op_data4().then_some(regs[8]));
        }

        #[test]
        fn a_longer_payload_decodes_like_the_exact_one(
            caps in any::<u32>(),
            regs in any::<[u64; 9]>(),
            tail in proptest::collection::vec(any::<u8>(), 1..40),
        ) {
            let mut bytes = caps.to_le_bytes().to_vec();
            for r in regs {
                bytes.extend_from_slice(&r.to_le_bytes());
            }
            bytes.truncate(IbsOpRaw::expected_len(IbsCaps(caps)));
            let exact = IbsOpRaw::parse(&bytes).unwrap();
            bytes.extend_from_slice(&tail);
            let longer = IbsOpRaw::parse(&bytes).unwrap();
            prop_assert_eq!(longer.trailing_bytes, tail.len());
            prop_assert_eq!(IbsOpRaw { trailing_bytes: 0, ..longer }, exact);
        }
    }
}
