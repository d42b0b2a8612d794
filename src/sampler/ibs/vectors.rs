//! Hand-derived IBS test vectors (issue 21, item 5), independent of `testraw::LAYOUT` and
//! `RawBuilder`: every register is a literal u64 whose bits are worked out below from the
//! kernel's own definitions, and every expected DATA_SRC and WEIGHT is worked by hand from the
//! kernel's decode, not from pghotd's. A position or rule that pghotd and its other tests got
//! wrong together fails here.
//!
//! Sources (Linux, torvalds/linux as stored for this work):
//! - `arch/x86/include/asm/amd-ibs.h` at 617e407cef5b (the v6.1..v6.14 layout; line numbers
//!   below are that file's): `union ibs_op_ctl` lines 56-69 (opmaxcnt 0-15 line 59,
//!   l3_miss_only 16 line 60, op_en 17 line 61, op_val 18 line 62, cnt_ctl 19 line 63, opcurcnt
//!   32-58 line 66); `union ibs_op_data` lines 72-87 (comp_to_ret_ctr 0-15 line 75,
//!   tag_to_ret_ctr 16-31 line 76); `union ibs_op_data2` lines 90-100 (data_src_lo 0-2 line 93,
//!   rmt_node 4 line 95, cache_hit_st 5 line 96, data_src_hi 6-7 line 97); `union ibs_op_data3`
//!   lines 103-129 (ld_op 0 line 106, st_op 1 line 107, dc_l1tlb_miss 2 line 108, dc_l2tlb_miss
//!   3 line 109, dc_miss 7 line 113, dc_uc_mem_acc 14 line 117, dc_locked_op 15 line 118,
//!   dc_miss_no_mab_alloc 16 line 119, dc_lin_addr_valid 17 line 120, dc_phy_addr_valid 18 line
//!   121, l2_miss 20 line 123, sw_pf 21 line 124, op_mem_width 22-25 line 125, dc_miss_lat 32-47
//!   line 127, tlb_refill_lat 48-63 line 128); `IBS_DATA_SRC_*` lines 10-13 and
//!   `IBS_DATA_SRC_EXT_*` lines 16-23; `struct perf_ibs_data` at the end of the file (u32 size,
//!   then `caps` overlaid on `data[0]`, then u64 regs).
//! - Linux 6.15 (commit d20610c19b4a) turned IbsOpCtl bits 59-63 into `ldlat_thrsh:4` (59-62)
//!   and `ldlat_en:1` (63); Zen5's PageSize in IbsOpData3 bits 4-5 (0 = 4K, 1 = 2M, 2 = 1G,
//!   valid only with DcPhyAddrValid) is the table in commit 0b347a4218da "perf/amd/ibs: Update
//!   DTLB/PageSize decode logic" (`IBS_CAPS_OPDTLBPGSIZE`, caps bit 19).
//! - `arch/x86/events/amd/ibs.c` (stored snapshot 003c0414318a, v6.14 level, plus the two
//!   commits above): the RAW payload of `perf_ibs_handle_irq()`, which reads IbsOpCtl into
//!   `regs[0]`, the MSRs C001_1034..C001_1039 after it (`MSR_AMD64_IBSOP_REG_COUNT` 7 in
//!   `arch/x86/include/asm/msr-index.h`), then with PERF_SAMPLE_RAW IbsBrTarget if
//!   `IBS_CAPS_BRNTRGT` and IbsOpData4 if `IBS_CAPS_OPDATA4`, and hands perf
//!   `.size = sizeof(u32) + ibs_data.size, .data = ibs_data.data`: the caps u32, then the regs.
//!   The decode: `perf_ibs_parse_ld_st_data()` (starts from `PERF_MEM_NA`; WEIGHT is
//!   `op_data3.dc_miss_lat` for a load with `dc_miss`), `perf_ibs_get_mem_op()`,
//!   `perf_ibs_get_op_data2()` (erratum #1293), `perf_ibs_data_src()`, `g_data_src[]`,
//!   `g_zen4_data_src[]`, `ZEN4_RMT_NODE_BITS`, `perf_ibs_get_mem_lvl()`,
//!   `perf_ibs_cache_hit_st_valid()`, `perf_ibs_get_mem_snoop()`, `perf_ibs_get_tlb_lvl()`,
//!   `perf_ibs_get_mem_lock()`. ibs.c line numbers move every release, so functions are named.
//! - `include/uapi/linux/perf_event.h`, `union perf_mem_data_src` and the `PERF_MEM_*_SHIFT`
//!   values: mem_op << 0, mem_lvl << 5, mem_snoop << 19, mem_lock << 24, mem_dtlb << 26,
//!   mem_lvl_num << 33, mem_remote << 37, mem_hops << 43. Values: OP LOAD 0x2; LVL NA 0x1, HIT
//!   0x2, L1 0x8, LFB 0x10, L2 0x20, LOC_RAM 0x80, REM_CCE2 0x800, IO 0x1000, UNC 0x2000; SNOOP
//!   NA 0x1, HITM 0x10; LOCK NA 0x1, LOCKED 0x2; TLB NA 0x1, HIT 0x2, MISS 0x4, L1 0x8, L2 0x10;
//!   LVLNUM L2 0x2, UNC 0x8, CXL 0x9, IO 0xa, ANY_CACHE 0xb, LFB 0xc, RAM 0xd; REMOTE 0x1.
//!
//! The caps words are the shape the parts report (bits 0-9 on Zen3, plus bit 11 ZEN4 on Zen4,
//! plus bits 12 OPLDLAT and 19 OPDTLBPGSIZE on Zen5); each has BRNTRGT (bit 5), so each
//! payload carries IbsBrTarget, and one adds OPDATA4 (bit 10) to check the order of the two.

use super::caps::{CpuModel, IbsCaps};
use super::classify::{IbsInput, classify};
use super::decode::decode_data_src;
use super::regs::{DcPageSize, IbsOpRaw};
use crate::sample::{AccessOp, DataSource};
use crate::sampler::hwsample::{DropReason, HwSample, Notes, SampleFields};

/// IBS caps as Zen3 reports them: AVAIL, FETCHSAM, OPSAM, RDWROPCNT, OPCNT, BRNTRGT,
/// OPCNTEXT, RIPINVALIDCHK, OPBRNFUSE, FETCHCTLEXTD (bits 0-9).
const CAPS_ZEN3: u32 = 0x3ff;
/// Zen4: the same plus bit 11 ZEN4 (5-bit DataSrc, L3MissOnly).
const CAPS_ZEN4: u32 = 0xbff;
/// Zen5: plus bit 12 OPLDLAT and bit 19 OPDTLBPGSIZE.
const CAPS_ZEN5: u32 = 0x8_1bff;
/// bit 10 OPDATA4: IbsOpData4 follows IbsBrTarget in the payload.
const OPDATA4: u32 = 1 << 10;

const MILAN: CpuModel = CpuModel {
    family: 0x19,
    model: 0x01,
};
const GENOA: CpuModel = CpuModel {
    family: 0x19,
    model: 0x11,
};
const TURIN: CpuModel = CpuModel {
    family: 0x1a,
    model: 0x02,
};

/// `PERF_RECORD_MISC_CPUMODE_USER`.
const USER: u16 = 2;

/// The RAW payload as `perf_ibs_handle_irq()` hands it over: the caps u32, then each register
/// as a little-endian u64, in the order given (the vector lists IbsBrTarget and IbsOpData4
/// itself, so the length is the vector's, not computed from caps).
fn payload(caps: u32, regs: &[u64]) -> Vec<u8> {
    let mut out = caps.to_le_bytes().to_vec();
    for r in regs {
        out.extend_from_slice(&r.to_le_bytes());
    }
    out
}

/// One sample: the registers, what the kernel reports for them, and what pghotd keeps.
struct Vector {
    name: &'static str,
    cpu: CpuModel,
    raw: Vec<u8>,
    /// PERF_SAMPLE_DATA_SRC as the kernel (>= v6.1) computes it, by hand.
    data_src: u64,
    /// PERF_SAMPLE_WEIGHT as the kernel fills it (0: not filled).
    weight: u64,
    /// PERF_SAMPLE_ADDR / PHYS_ADDR the kernel reports (IbsDcLinAd / IbsDcPhysAd when valid;
    /// else 0, or the core's page-table walk for PHYS_ADDR, which these vectors leave at 0).
    addr: u64,
    phys_addr: u64,
    /// pghotd's classification, by hand from the vector's meaning.
    want: Result<HwSample, DropReason>,
}

impl Vector {
    /// A load's registers, in payload order; PERF_SAMPLE_ADDR and PHYS_ADDR are IbsDcLinAd
    /// (`regs[5]`) and IbsDcPhysAd (`regs[6]`), both valid in these vectors unless changed.
    fn load(name: &'static str, cpu: CpuModel, caps: u32, regs: &[u64]) -> Vector {
        Vector {
            name,
            cpu,
            raw: payload(caps, regs),
            data_src: 0,
            weight: 0,
            addr: regs[5],
            phys_addr: regs[6],
            want: Err(DropReason::InvalidSample),
        }
    }

    /// What the kernel reports: DATA_SRC and WEIGHT.
    fn kernel(self, data_src: u64, weight: u64) -> Vector {
        Vector {
            data_src,
            weight,
            ..self
        }
    }

    /// pghotd keeps the load, served from `served_from`, with `latency`.
    fn kept(self, served_from: DataSource, latency: Option<u32>) -> Vector {
        let want = Ok(HwSample {
            vaddr: self.addr,
            paddr: (self.phys_addr != 0).then_some(self.phys_addr),
            op: AccessOp::Load,
            served_from,
            latency,
        });
        Vector { want, ..self }
    }

    fn parse(&self) -> IbsOpRaw {
        IbsOpRaw::parse(&self.raw).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }

    fn fields(&self) -> SampleFields {
        SampleFields {
            misc: USER,
            ip: self.parse().op_rip,
            pid: 4242,
            addr: self.addr,
            phys_addr: self.phys_addr,
            data_src: self.data_src,
            weight: self.weight,
        }
    }

    /// pghotd on the RAW payload (`raw: Some`), or on the kernel's fields alone.
    fn classify(&self, with_raw: bool) -> Result<HwSample, DropReason> {
        let input = IbsInput {
            sample: self.fields(),
            raw: with_raw.then_some(self.raw.as_slice()),
            cpu: self.cpu,
        };
        classify(&input, &mut Notes::default())
    }
}

/// V1: a Zen4 (Genoa, family 0x19 model 0x11) load served by CXL memory on another node.
fn zen4_remote_cxl_load() -> Vector {
    // IbsOpCtl: OpMaxCnt 0x271 (period 10000 >> 4, bits 0-15) | L3MissOnly bit 16 | OpEn bit 17
    // | OpVal bit 18 | OpCntCtl bit 19 = 0x271 | 0xf_0000.
    let ctl = 0x0000_0000_000f_0271;
    let rip = 0x0000_5555_5555_8a10;
    // IbsOpData: TagToRetCtr 0x260 (bits 16-31), CompToRetCtr 0x12 (bits 0-15).
    let data = 0x0000_0000_0260_0012;
    // IbsOpData2: DataSrc 8 = 0b01_000: data_src_lo (0-2) = 0, data_src_hi (6-7) = 0b01 -> bit 6
    // = 0x40; RmtNode bit 4 = 0x10.
    let data2 = 0x0000_0000_0000_0050;
    // IbsOpData3: LdOp bit 0 (0x1) | DcL1TlbMiss bit 2 (0x4) | DcMiss bit 7 (0x80) |
    // DcLinAddrValid bit 17 (0x2_0000) | DcPhyAddrValid bit 18 (0x4_0000) | L2Miss bit 20
    // (0x10_0000) | OpMemWidth 4 = 8 bytes, bits 22-25 (0x100_0000) | DcMissLat 0x320 = 800
    // cycles, bits 32-47 | TlbRefillLat 0x30, bits 48-63.
    let data3 = 0x0030_0320_0116_0085;
    let lin = 0x0000_7f3a_1c40_2a48;
    let phys = 0x0000_0040_8c41_2a48;
    let br_target = 0;
    // Kernel: mem_op LOAD (2). Model 0x11 > 0xF: no erratum #1293, OpData2 kept. mem_lvl: not
    // uncached, DcMiss, L2Miss, a load, ZEN4 caps: DataSrc (1 << 3) | 0 = 8 ->
    // g_zen4_data_src[EXT_EXT_MEM] = LN(CXL): mem_lvl 0, lvl_num 9; RmtNode and 8 is in
    // ZEN4_RMT_NODE_BITS (not DRAM) -> |= REM | HOPS(1). Snoop: CacheHitSt valid on model 0x11,
    // CacheHitSt 0, but 8 is not 1/2/5 -> SNOOP NA (1). TLB: L1 miss, L2 hit -> L2 | HIT = 0x12.
    // Lock NA (1).
    // = 2 | 0 << 5 | 1 << 19 | 1 << 24 | 0x12 << 26 | 9 << 33 | 1 << 37 | 1 << 43
    // = 0x2 + 0x8_0000 + 0x100_0000 + 0x4800_0000 + 0x12_0000_0000 + 0x20_0000_0000
    //   + 0x800_0000_0000.
    let data_src = 0x0000_0832_4908_0002;
    let regs = [ctl, rip, data, data2, data3, lin, phys, br_target];
    // WEIGHT: a load with DcMiss -> dc_miss_lat = 800.
    Vector::load("zen4 remote CXL load", GENOA, CAPS_ZEN4, &regs)
        .kernel(data_src, 800)
        .kept(DataSource::ExtMem, Some(800))
}

/// V2: erratum #1293. A load that claims an L2 hit (L2Miss 0) while DcMissNoMabAlloc is set,
/// with DataSrc 3 (DRAM, the same value in the 3- and 5-bit encodings) and RmtNode, taken on
/// family 0x19 model `cpu.model` with `caps`.
fn erratum_1293_load(cpu: CpuModel, caps: u32) -> Vector {
    let ctl = 0x0000_0000_000f_0271;
    let rip = 0x0000_5555_5555_9000;
    let data = 0x0000_0000_0100_0008;
    // IbsOpData2: DataSrc 3 in bits 0-2 | RmtNode bit 4 = 0x13.
    let data2 = 0x0000_0000_0000_0013;
    // IbsOpData3: LdOp (0x1) | DcMiss bit 7 (0x80) | DcMissNoMabAlloc bit 16 (0x1_0000) |
    // DcLinAddrValid (0x2_0000) | DcPhyAddrValid (0x4_0000) | OpMemWidth 8 bytes (0x100_0000)
    // | DcMissLat 0xf0 = 240. L2Miss (bit 20) clear, no TLB miss bits.
    let data3 = 0x0000_00f0_0107_0081;
    let lin = 0x0000_7f00_0012_3440;
    let phys = 0x0000_0001_2345_6440;
    let regs = [ctl, rip, data, data2, data3, lin, phys, 0];
    // WEIGHT 240 on either model: a load with DcMiss. DATA_SRC and the outcome differ per model.
    Vector::load("erratum 1293", cpu, caps, &regs).kernel(0, 240)
}

/// V2 on Milan (model 0x01, Zen3 caps): the erratum applies.
fn milan_erratum_1293() -> Vector {
    let mut v = erratum_1293_load(MILAN, CAPS_ZEN3);
    v.name = "erratum 1293 on family 0x19 model 0x01";
    // Kernel: perf_ibs_get_op_data2(): family 0x19, model 0x01 <= 0xF, DcMissNoMabAlloc -> the
    // OpData2 copy is 0. mem_lvl: not uncached, DcMiss; L2Miss == 0 but the erratum test
    // (x86 == 0x19 && model <= 0xF && (sw_pf || dc_miss_no_mab_alloc)) holds, so no L2 hit; a
    // load, no ZEN4 caps: g_data_src[0] = 0 -> check_mab: DcMissNoMabAlloc -> L(LFB) | LN(LFB):
    // mem_lvl LFB | HIT = 0x12, lvl_num 0xc, no remote (the RmtNode was zeroed). Snoop:
    // perf_ibs_cache_hit_st_valid() is false on model <= 0xF -> NA. TLB L1 | HIT = 0xa. Lock NA.
    // = 2 | 0x12 << 5 | 1 << 19 | 1 << 24 | 0xa << 26 | 0xc << 33
    // = 0x2 + 0x240 + 0x8_0000 + 0x100_0000 + 0x2800_0000 + 0x18_0000_0000.
    v.data_src = 0x0000_0018_2908_0242;
    // pghotd: an IBS LFB is a miss in flight (kept), its source unknown (OpData2 zeroed).
    v.kept(DataSource::Unknown, Some(240))
}

/// V2 on Genoa (model 0x11, Zen4 caps): same registers, no erratum.
fn genoa_no_erratum_1293() -> Vector {
    let mut v = erratum_1293_load(GENOA, CAPS_ZEN4);
    v.name = "erratum 1293 registers on family 0x19 model 0x11";
    // Kernel: model 0x11 > 0xF, OpData2 kept. mem_lvl: DcMiss, L2Miss == 0 and the erratum test
    // fails -> L(L2) | LN(L2): mem_lvl L2 | HIT = 0x22, lvl_num 2. Snoop: valid CPU, a load, but
    // mem_lvl has L2 -> NA. TLB L1 | HIT = 0xa. Lock NA.
    // = 2 | 0x22 << 5 | 1 << 19 | 1 << 24 | 0xa << 26 | 2 << 33
    // = 0x2 + 0x440 + 0x8_0000 + 0x100_0000 + 0x2800_0000 + 0x4_0000_0000.
    v.data_src = 0x0000_0004_2908_0442;
    v.want = Err(DropReason::L2Hit);
    v
}

/// V3: a locked read-modify-write on Genoa served, Modified, by a CCX in another node (far-CCX
/// HITM). Caps add OPDATA4, so IbsBrTarget and then IbsOpData4 follow IbsDcPhysAd.
fn genoa_far_ccx_hitm() -> Vector {
    let ctl = 0x0000_0000_000f_0271;
    let rip = 0x0000_5555_5555_a3c4;
    let data = 0x0000_0000_0300_0020;
    // IbsOpData2: DataSrc 5 = 0b00_101: data_src_lo = 5 (bits 0 and 2), data_src_hi = 0;
    // RmtNode bit 4 = 0x10; CacheHitSt bit 5 = 0 (M state).
    let data2 = 0x0000_0000_0000_0015;
    // IbsOpData3: LdOp (0x1) | StOp bit 1 (0x2) | DcL1TlbMiss (0x4) | DcL2TlbMiss bit 3 (0x8) |
    // DcMiss (0x80) | DcLockedOp bit 15 (0x8000) | DcLinAddrValid (0x2_0000) | DcPhyAddrValid
    // (0x4_0000) | L2Miss (0x10_0000) | OpMemWidth 8 bytes (0x100_0000) | DcMissLat 0x1c2 = 450
    // | TlbRefillLat 0x55.
    let data3 = 0x0055_01c2_0116_808f;
    let lin = 0x0000_7ffd_0bad_f00c;
    let phys = 0x0000_0002_0f00_000c;
    let (br_target, data4) = (0, 0x0000_0000_dead_beef);
    // Kernel: mem_op LOAD (LdOp wins over StOp in perf_ibs_get_mem_op()). mem_lvl: ZEN4 DataSrc
    // 5 -> g_zen4_data_src[EXT_FAR_CCX_CACHE] = L(REM_CCE2) | LN(ANY_CACHE) | REM | HOPS(1):
    // mem_lvl REM_CCE2 | HIT = 0x802, lvl_num 0xb; RmtNode does not apply (5 is not in
    // ZEN4_RMT_NODE_BITS). Snoop: valid on model 0x11, a load, not L1/L2, CacheHitSt 0, DataSrc
    // EXT_FAR_CCX_CACHE -> HITM (0x10). TLB: L1 and L2 miss -> L2 | MISS = 0x14. Lock: LOCKED
    // (0x2).
    // = 2 | 0x802 << 5 | 0x10 << 19 | 2 << 24 | 0x14 << 26 | 0xb << 33 | 1 << 37 | 1 << 43
    // = 0x2 + 0x1_0040 + 0x80_0000 + 0x200_0000 + 0x5000_0000 + 0x16_0000_0000
    //   + 0x20_0000_0000 + 0x800_0000_0000.
    let data_src = 0x0000_0836_5281_0042;
    let regs = [ctl, rip, data, data2, data3, lin, phys, br_target, data4];
    Vector::load("far-CCX HITM", GENOA, CAPS_ZEN4 | OPDATA4, &regs)
        .kernel(data_src, 450)
        .kept(DataSource::PeerCache, Some(450))
}

/// V4: Zen5 (Turin, family 0x1a model 0x02) with ldlat 256 and a 2 MiB page: a local DRAM load.
fn zen5_ldlat_2m_page() -> Vector {
    // IbsOpCtl as perf_ibs_init() programs ldlat = 256 on Zen5: 256 >> 7 = 2, LdLatThrsh =
    // 2 - 1 = 1 in bits 59-62 (1 << 59), LdLatEn bit 63, and L3MissOnly bit 16 (forced on Zen5);
    // with OpMaxCnt 0x271, OpEn, OpVal, OpCntCtl: 1 << 63 | 1 << 59 | 0xf_0271.
    let ctl = 0x8800_0000_000f_0271;
    let rip = 0x0000_5555_5556_0040;
    let data = 0x0000_0000_0200_0004;
    // IbsOpData2: DataSrc 3 (DRAM), local.
    let data2 = 0x0000_0000_0000_0003;
    // IbsOpData3: LdOp (0x1) | DcL1TlbMiss (0x4) | PageSize 1 = 2M in bits 4-5 (0x10) | DcMiss
    // (0x80) | DcLinAddrValid (0x2_0000) | DcPhyAddrValid (0x4_0000) | L2Miss (0x10_0000) |
    // OpMemWidth 8 bytes (0x100_0000) | DcMissLat 0x190 = 400 (> 256: passes the ldlat filter of
    // perf_ibs_handle_irq(), which keeps ld_op && dc_miss && dc_miss_lat > 256).
    let data3 = 0x0000_0190_0116_0095;
    let lin = 0x0000_7f44_0020_1c80;
    let phys = 0x0000_0010_0420_1c80;
    // Kernel: LOAD; mem_lvl: DataSrc 3 -> L(LOC_RAM) | LN(RAM): mem_lvl 0x82, lvl_num 0xd, not
    // remote. Snoop: family 0x1a, CacheHitSt valid; 3 is not a cache -> NA. TLB: caps
    // OPDTLBPGSIZE and DcPhyAddrValid set, so the TLB bits count: L1 miss, L2 hit -> L2 | HIT =
    // 0x12 (bits 4-5 are PageSize here, which the TLB decode never reads). Lock NA.
    // = 2 | 0x82 << 5 | 1 << 19 | 1 << 24 | 0x12 << 26 | 0xd << 33
    // = 0x2 + 0x1040 + 0x8_0000 + 0x100_0000 + 0x4800_0000 + 0x1a_0000_0000.
    let data_src = 0x0000_001a_4908_1042;
    let regs = [
        ctl,
        rip,
        data,
        data2,
        data3,
        lin,
        phys,
        0x0000_5555_5556_0100,
    ];
    Vector::load("zen5 ldlat 256, 2M page", TURIN, CAPS_ZEN5, &regs)
        .kernel(data_src, 400)
        .kept(DataSource::LocalDram, Some(400))
}

/// V4b: the same Zen5 load with the physical address withheld, as v6.14..7.0 do for an
/// opener that may not see it (`perf_ibs_phyaddr_clear()` zeroes IbsDcPhysAd and clears
/// DcPhyAddrValid): on Zen5 the TLB bits and PageSize are then invalid.
fn zen5_no_phys() -> Vector {
    let mut v = zen5_ldlat_2m_page();
    v.name = "zen5 ldlat 256, physical address withheld";
    // IbsOpData3 without DcPhyAddrValid (bit 18, 0x4_0000): 0x116_0095 - 0x4_0000 = 0x112_0095.
    let data3 = 0x0000_0190_0112_0095;
    let regs = [
        0x8800_0000_000f_0271,
        0x0000_5555_5556_0040,
        0x0000_0000_0200_0004,
        0x0000_0000_0000_0003,
        data3,
        v.addr,
        0, // IbsDcPhysAd zeroed
        0x0000_5555_5556_0100,
    ];
    v.raw = payload(CAPS_ZEN5, &regs);
    // Kernel: as V4 except TLB: OPDTLBPGSIZE and !dc_phy_addr_valid -> TLB NA (0x1).
    // = 2 | 0x82 << 5 | 1 << 19 | 1 << 24 | 1 << 26 | 0xd << 33
    // = 0x2 + 0x1040 + 0x8_0000 + 0x100_0000 + 0x400_0000 + 0x1a_0000_0000.
    v.data_src = 0x0000_001a_0508_1042;
    // PHYS_ADDR: not from IBS; the core's page-table walk, which this vector leaves at 0.
    v.phys_addr = 0;
    v.kept(DataSource::LocalDram, Some(400))
}

/// V5a: an uncached load from a device BAR mapped into user space: DcUcMemAcc with DataSrc 7
/// (IO) on Genoa.
fn genoa_uncached_io_load() -> Vector {
    let ctl = 0x0000_0000_000f_0271;
    let rip = 0x0000_5555_5555_b0b0;
    let data = 0x0000_0000_0010_0001;
    // IbsOpData2: DataSrc 7 in bits 0-2, high bits 0.
    let data2 = 0x0000_0000_0000_0007;
    // IbsOpData3: LdOp (0x1) | DcMiss (0x80) | DcUcMemAcc bit 14 (0x4000) | DcLinAddrValid
    // (0x2_0000) | DcPhyAddrValid (0x4_0000) | L2Miss (0x10_0000) | OpMemWidth 3 = 4 bytes,
    // bits 22-25 (0xc0_0000) | DcMissLat 0x80 (invalid for uncached accesses).
    let data3 = 0x0000_0080_00d6_4081;
    let lin = 0x0000_7f12_0000_0040;
    let phys = 0x0000_0000_fe00_0040;
    // Kernel: LOAD. mem_lvl: DcUcMemAcc but DataSrc == IBS_DATA_SRC_EXT_IO, so not UNC; DcMiss,
    // L2Miss, a load: g_zen4_data_src[EXT_IO] = L(IO) | LN(IO): mem_lvl 0x1002, lvl_num 0xa.
    // Snoop: 7 is not a cache -> NA. TLB L1 | HIT = 0xa. Lock NA.
    // = 2 | 0x1002 << 5 | 1 << 19 | 1 << 24 | 0xa << 26 | 0xa << 33
    // = 0x2 + 0x2_0040 + 0x8_0000 + 0x100_0000 + 0x2800_0000 + 0x14_0000_0000.
    let data_src = 0x0000_0014_290a_0042;
    let regs = [ctl, rip, data, data2, data3, lin, phys, 0];
    // WEIGHT: perf_ibs_parse_ld_st_data() checks only dc_miss and LOAD: 0x80 = 128, although
    // its own comment in perf_ibs_get_mem_lvl() calls DcMissLat invalid for uncached accesses.
    // pghotd keeps the sample (it left the core) with no tier and no latency: an IO read is no
    // memory tier's, and the latency is invalid for an uncached access.
    Vector::load("uncached IO load", GENOA, CAPS_ZEN4, &regs)
        .kernel(data_src, 128)
        .kept(DataSource::Unknown, None)
}

/// V5b: an uncached load whose (invalid) DataSrc says local cache, CacheHitSt 0 and DcMiss
/// clear, on Genoa: the uncached check must come first, and the kernel still reports HITM.
fn genoa_uncached_load() -> Vector {
    let ctl = 0x0000_0000_000f_0271;
    let rip = 0x0000_5555_5555_c0c0;
    let data = 0x0000_0000_0010_0001;
    // IbsOpData2: DataSrc 1 (EXT_LOC_CACHE), CacheHitSt 0.
    let data2 = 0x0000_0000_0000_0001;
    // IbsOpData3: LdOp (0x1) | DcUcMemAcc (0x4000) | DcLinAddrValid (0x2_0000) | DcPhyAddrValid
    // (0x4_0000) | OpMemWidth 8 bytes (0x100_0000). DcMiss, L2Miss, DcMissLat all 0.
    let data3 = 0x0000_0000_0106_4001;
    let lin = 0x0000_7f12_3456_7008;
    let phys = 0x0000_0000_8765_4008;
    // Kernel: LOAD. mem_lvl: DcUcMemAcc and DataSrc 1 != EXT_IO -> L(UNC) | LN(UNC): mem_lvl
    // 0x2002, lvl_num 8, before the DcMiss == 0 (L1) test. Snoop: valid on model 0x11, a load,
    // mem_lvl has neither L1 nor L2, CacheHitSt 0, DataSrc EXT_LOC_CACHE -> HITM (0x10). TLB L1
    // | HIT = 0xa. Lock NA.
    // = 2 | 0x2002 << 5 | 0x10 << 19 | 1 << 24 | 0xa << 26 | 8 << 33
    // = 0x2 + 0x4_0040 + 0x80_0000 + 0x100_0000 + 0x2800_0000 + 0x10_0000_0000.
    let data_src = 0x0000_0010_2984_0042;
    let regs = [ctl, rip, data, data2, data3, lin, phys, 0];
    // No DcMiss: WEIGHT not filled.
    Vector::load(
        "uncached load, DataSrc local cache",
        GENOA,
        CAPS_ZEN4,
        &regs,
    )
    .kernel(data_src, 0)
    .kept(DataSource::Unknown, None)
}

fn all() -> Vec<Vector> {
    vec![
        zen4_remote_cxl_load(),
        milan_erratum_1293(),
        genoa_no_erratum_1293(),
        genoa_far_ccx_hitm(),
        zen5_ldlat_2m_page(),
        zen5_no_phys(),
        genoa_uncached_io_load(),
        genoa_uncached_load(),
    ]
}

#[test]
fn pghotd_reports_the_kernels_data_src_for_every_vector() {
    for v in all() {
        let got = decode_data_src(&v.parse(), v.cpu).0;
        assert_eq!(
            got, v.data_src,
            "{}: pghotd {got:#018x}, kernel {:#018x}",
            v.name, v.data_src
        );
    }
}

#[test]
fn pghotd_keeps_what_the_vector_means_from_raw() {
    for v in all() {
        assert_eq!(v.classify(true), v.want, "{}", v.name);
    }
}

/// The same sample decoded from RAW and from the kernel's own fields (a kernel without RAW, or
/// a RAW that does not parse) gives the same result: DATA_SRC, WEIGHT, ADDR and PHYS_ADDR as
/// the kernel reports them lead where the registers do.
#[test]
fn raw_and_the_kernels_fields_agree() {
    for v in all() {
        assert_eq!(v.classify(false), v.classify(true), "{}", v.name);
    }
}

#[test]
fn payloads_parse_at_the_kernels_offsets() {
    let v = zen4_remote_cxl_load();
    assert_eq!(v.raw.len(), 4 + 8 * 8, "caps + 7 op MSRs + IbsBrTarget");
    let raw = v.parse();
    assert_eq!(raw.caps, IbsCaps(CAPS_ZEN4));
    assert_eq!(raw.trailing_bytes, 0);
    assert!(raw.op_ctl.op_val() && raw.op_ctl.l3_miss_only() && raw.op_ctl.cnt_ctl());
    assert_eq!(raw.op_ctl.period(), 10_000);
    assert_eq!(raw.op_data.tag_to_ret_ctr(), 0x260);
    assert_eq!(raw.op_data.comp_to_ret_ctr(), 0x12);
    assert_eq!(raw.op_data3.tlb_refill_lat(), 0x30);
    assert_eq!(raw.op_data3.op_mem_width_bytes(), Some(8));
    assert_eq!(
        (raw.op_rip, raw.dc_lin_ad, raw.dc_phys_ad),
        (0x5555_5555_8a10, 0x7f3a_1c40_2a48, 0x40_8c41_2a48)
    );
    assert_eq!((raw.br_target, raw.op_data4), (Some(0), None));

    let hitm = genoa_far_ccx_hitm().parse();
    assert_eq!(hitm.br_target, Some(0));
    assert_eq!(
        hitm.op_data4,
        Some(0xdead_beef),
        "OpData4 after IbsBrTarget"
    );
    assert!(hitm.op_data3.dc_locked_op() && hitm.op_data3.st_op());

    let zen5 = zen5_ldlat_2m_page().parse();
    assert_eq!(zen5.op_ctl.ld_lat_threshold(), Some(256));
    assert!(zen5.op_ctl.l3_miss_only());
    assert_eq!(zen5.op_data3.page_size(zen5.caps), Some(DcPageSize::Size2M));
    assert_eq!(zen5.br_target, Some(0x5555_5556_0100));
    let withheld = zen5_no_phys().parse();
    assert_eq!(withheld.op_data3.page_size(withheld.caps), None);

    let milan = milan_erratum_1293().parse();
    assert!(milan.op_data3.dc_miss_no_mab_alloc() && !milan.op_data3.l2_miss());
    assert!(milan.op_data2.rmt_node());
}
