//! The IBS driver's DATA_SRC decode (`perf_ibs_get_data_src()` in `arch/x86/events/amd/ibs.c`),
//! done from RAW so pghotd gets the same answer on kernels that decode nothing (< v6.1) and can
//! apply it to the RAW bits it keeps.

use super::caps::CpuModel;
use super::regs::{IbsDataSrc, IbsOpRaw, OpData2, OpData3};
use crate::sampler::datasrc::{PERF_MEM_NA, PerfMemDataSrc, lock, lvl, lvlnum, op, snoop, tlb};

/// OpData2 as the kernel uses it: zeroed on Fam19h model <= 0xF when SwPf or DcMissNoMabAlloc
/// (erratum #1293, `perf_ibs_get_op_data2()`).
pub(super) fn effective_op_data2(raw: &IbsOpRaw, cpu: CpuModel) -> OpData2 {
    let d3 = raw.op_data3;
    if cpu.erratum_1293() && (d3.sw_pf() || d3.dc_miss_no_mab_alloc()) {
        OpData2(0)
    } else {
        raw.op_data2
    }
}

/// `union perf_mem_data_src` exactly as the IBS driver (>= v6.1) would have reported it.
pub fn decode_data_src(raw: &IbsOpRaw, cpu: CpuModel) -> PerfMemDataSrc {
    let d3 = raw.op_data3;
    // Step 1: loads win over stores (a locked RMW sets both); anything else stays NA.
    let mem_op = match (d3.ld_op(), d3.st_op()) {
        (true, _) => op::LOAD,
        (false, true) => op::STORE,
        (false, false) => return PERF_MEM_NA,
    };
    let d2 = effective_op_data2(raw, cpu);
    let level = mem_level(raw, d2, cpu, mem_op == op::LOAD);
    let out = PERF_MEM_NA
        .with_mem_op(mem_op)
        .with_mem_lvl(level.mem_lvl())
        .with_lvl_num(level.lvl_num())
        .with_remote(level.remote())
        .with_hops(level.hops());
    out.with_snoop(mem_snoop(raw, d2, cpu, out))
        .with_dtlb(mem_dtlb(raw))
        .with_lock(if d3.dc_locked_op() {
            lock::LOCKED
        } else {
            lock::NA
        })
}

/// The level part of the decode (`mem_lvl`, `mem_lvl_num`, remote, hops), as one value.
fn level_bits(lvl_bits: u64, num: u64) -> PerfMemDataSrc {
    PerfMemDataSrc(0).with_mem_lvl(lvl_bits).with_lvl_num(num)
}

/// `L(x)` in the driver: level x plus HIT.
fn hit(lvl_bits: u64, num: u64) -> PerfMemDataSrc {
    level_bits(lvl_bits | lvl::HIT, num)
}

/// Step 3 (perf_ibs_get_mem_lvl).
fn mem_level(raw: &IbsOpRaw, d2: OpData2, cpu: CpuModel, is_load: bool) -> PerfMemDataSrc {
    let d3 = raw.op_data3;
    let src = d2.data_src(raw.caps);
    // DcMiss, L2Miss and DataSrc are invalid for uncached accesses, so this comes first.
    if d3.dc_uc_mem_acc() && src != IbsDataSrc::Io {
        return hit(lvl::UNC, lvlnum::UNC);
    }
    if !d3.dc_miss() {
        return hit(lvl::L1, lvlnum::L1);
    }
    if !d3.l2_miss() && !l2_miss_unreliable(d3, cpu) {
        return hit(lvl::L2, lvlnum::L2);
    }
    // OpData2 is valid only for loads.
    let from_src = if is_load {
        source_level(src, d2.rmt_node())
    } else {
        None
    };
    from_src.unwrap_or_else(|| mab_level(d3))
}

/// Erratum #1293: L2Miss is invalid with SwPf or DcMissNoMabAlloc, so no L2 hit is claimed.
fn l2_miss_unreliable(d3: OpData3, cpu: CpuModel) -> bool {
    cpu.erratum_1293() && (d3.sw_pf() || d3.dc_miss_no_mab_alloc())
}

/// The driver's g_data_src / g_zen4_data_src tables with the RmtNode adjustment. `None` where
/// the table has no entry (NoStatus, peer agent, reserved), which falls back to the MAB rule.
fn source_level(src: IbsDataSrc, rmt_node: bool) -> Option<PerfMemDataSrc> {
    let remote = |v: PerfMemDataSrc, hops| v.with_remote(true).with_hops(hops);
    let v = match src {
        IbsDataSrc::LocalCache => hit(lvl::L3 | lvl::REM_CCE1, lvlnum::ANY_CACHE),
        IbsDataSrc::LocalCcxCache => hit(lvl::L3, lvlnum::L3),
        IbsDataSrc::NearCcxCache => remote(hit(lvl::REM_CCE1, lvlnum::ANY_CACHE), 0),
        IbsDataSrc::RemoteCache | IbsDataSrc::FarCcxCache => {
            remote(hit(lvl::REM_CCE2, lvlnum::ANY_CACHE), 1)
        }
        // HOPS 1 because IBS does not tell a remote socket from a remote node.
        IbsDataSrc::Dram if rmt_node => remote(hit(lvl::REM_RAM1, lvlnum::RAM), 1),
        IbsDataSrc::Dram => hit(lvl::LOC_RAM, lvlnum::RAM),
        IbsDataSrc::Pmem | IbsDataSrc::ExtMem => {
            // No mem_lvl bits for these: only the level number (CXL is 9).
            let num = if src == IbsDataSrc::Pmem {
                lvlnum::PMEM
            } else {
                lvlnum::CXL
            };
            let v = level_bits(0, num);
            if rmt_node { remote(v, 1) } else { v }
        }
        IbsDataSrc::Io => hit(lvl::IO, lvlnum::IO),
        IbsDataSrc::NoStatus | IbsDataSrc::PeerAgentMem | IbsDataSrc::Reserved(_) => return None,
    };
    Some(v)
}

/// "MAB": a miss that joined an outstanding one (LFB), else nothing known (no HIT with NA).
fn mab_level(d3: OpData3) -> PerfMemDataSrc {
    if d3.dc_miss_no_mab_alloc() {
        hit(lvl::LFB, lvlnum::LFB)
    } else {
        level_bits(lvl::NA, lvlnum::NA)
    }
}

/// Step 4: HITM only for a trustworthy CacheHitSt = 0 on a load served by a cache beyond L2.
fn mem_snoop(raw: &IbsOpRaw, d2: OpData2, cpu: CpuModel, so_far: PerfMemDataSrc) -> u64 {
    let beyond_l2 = so_far.mem_lvl() & (lvl::L1 | lvl::L2) == 0;
    let is_load = so_far.mem_op() == op::LOAD;
    let modified = !d2.cache_hit_st() && d2.data_src(raw.caps).is_cache();
    if cpu.cache_hit_st_valid() && is_load && beyond_l2 && modified {
        snoop::HITM
    } else {
        snoop::NA
    }
}

/// Step 5: the DTLB level, when the linear (and on Zen5 the physical) address is valid.
fn mem_dtlb(raw: &IbsOpRaw) -> u64 {
    let d3 = raw.op_data3;
    if !d3.dc_lin_addr_valid() || (raw.caps.op_dtlb_pgsize() && !d3.dc_phy_addr_valid()) {
        tlb::NA
    } else if !d3.dc_l1_tlb_miss() {
        tlb::L1 | tlb::HIT
    } else if !d3.dc_l2_tlb_miss() {
        tlb::L2 | tlb::HIT
    } else {
        tlb::L2 | tlb::MISS
    }
}

#[cfg(test)]
mod tests {
    use super::super::testraw::*;
    use super::*;
    use crate::sample::DataSource;

    fn decode(b: &RawBuilder, cpu: CpuModel) -> PerfMemDataSrc {
        decode_data_src(&b.parse(), cpu)
    }

    /// (mem_lvl, lvl_num, remote, hops) of a decode.
    fn level(d: PerfMemDataSrc) -> (u64, u64, bool, u64) {
        (d.mem_lvl(), d.lvl_num(), d.remote(), d.hops())
    }

    const H: u64 = lvl::HIT;

    #[test]
    fn every_zen4_data_src_value_on_a_load_past_l2() {
        let named: [(u64, (u64, u64, bool, u64)); 7] = [
            (1, (lvl::L3 | H, lvlnum::L3, false, 0)),
            (2, (lvl::REM_CCE1 | H, lvlnum::ANY_CACHE, true, 0)),
            (3, (lvl::LOC_RAM | H, lvlnum::RAM, false, 0)),
            (5, (lvl::REM_CCE2 | H, lvlnum::ANY_CACHE, true, 1)),
            (6, (0, lvlnum::PMEM, false, 0)),
            (7, (lvl::IO | H, lvlnum::IO, false, 0)),
            (8, (0, lvlnum::CXL, false, 0)),
        ];
        let unknown = (lvl::NA, lvlnum::NA, false, 0);
        for v in 0..=31 {
            let want = named
                .iter()
                .find(|(n, _)| *n == v)
                .map_or(unknown, |&(_, w)| w);
            let d = decode(&user_load(CAPS_ZEN4).data_src(v), GENOA);
            assert_eq!(level(d), want, "DataSrc {v}");
            assert_eq!(d.mem_op(), op::LOAD);
        }
    }

    #[test]
    fn rmt_node_applies_to_dram_pmem_and_cxl_only() {
        let remote = |v| decode(&user_load(CAPS_ZEN4).data_src(v).on(&["RmtNode"]), GENOA);
        assert_eq!(level(remote(3)), (lvl::REM_RAM1 | H, lvlnum::RAM, true, 1));
        assert_eq!(level(remote(6)), (0, lvlnum::PMEM, true, 1));
        assert_eq!(level(remote(8)), (0, lvlnum::CXL, true, 1));
        assert_eq!(level(remote(1)), (lvl::L3 | H, lvlnum::L3, false, 0));
        assert_eq!(
            level(remote(2)),
            (lvl::REM_CCE1 | H, lvlnum::ANY_CACHE, true, 0)
        );
        assert_eq!(level(remote(7)), (lvl::IO | H, lvlnum::IO, false, 0));
        assert_eq!(remote(8).to_data_source(), DataSource::ExtMem);
        assert_eq!(remote(3).to_data_source(), DataSource::RemoteDram);
    }

    #[test]
    fn pre_zen4_data_src_table() {
        let want = [
            (0, (lvl::NA, lvlnum::NA, false, 0)),
            (1, (lvl::NA, lvlnum::NA, false, 0)),
            (
                2,
                (lvl::L3 | lvl::REM_CCE1 | H, lvlnum::ANY_CACHE, false, 0),
            ),
            (3, (lvl::LOC_RAM | H, lvlnum::RAM, false, 0)),
            (4, (lvl::REM_CCE2 | H, lvlnum::ANY_CACHE, true, 1)),
            (5, (lvl::NA, lvlnum::NA, false, 0)),
            (6, (lvl::NA, lvlnum::NA, false, 0)),
            (7, (lvl::IO | H, lvlnum::IO, false, 0)),
        ];
        for (v, w) in want {
            assert_eq!(
                level(decode(&user_load(CAPS_ZEN3).data_src(v), MILAN)),
                w,
                "{v}"
            );
        }
        let rmt_dram = user_load(CAPS_ZEN3).data_src(3).on(&["RmtNode"]);
        assert_eq!(
            level(decode(&rmt_dram, MILAN)),
            (lvl::REM_RAM1 | H, lvlnum::RAM, true, 1)
        );
    }

    #[test]
    fn hits_uncached_stores_and_mab() {
        let l1 = user_load(CAPS_ZEN4).set("DcMiss", 0).data_src(3);
        assert_eq!(
            level(decode(&l1, GENOA)),
            (lvl::L1 | H, lvlnum::L1, false, 0)
        );
        let l2 = user_load(CAPS_ZEN4).set("L2Miss", 0).data_src(3);
        assert_eq!(
            level(decode(&l2, GENOA)),
            (lvl::L2 | H, lvlnum::L2, false, 0)
        );
        let uc = user_load(CAPS_ZEN4)
            .set("DcMiss", 0)
            .on(&["DcUcMemAcc"])
            .data_src(3);
        assert_eq!(
            level(decode(&uc, GENOA)),
            (lvl::UNC | H, lvlnum::UNC, false, 0)
        );
        let uc_io = user_load(CAPS_ZEN4).on(&["DcUcMemAcc"]).data_src(7);
        assert_eq!(
            level(decode(&uc_io, GENOA)),
            (lvl::IO | H, lvlnum::IO, false, 0)
        );
        // DataSrc is for loads only: a store past L2 gets NA, or LFB on a MAB hit.
        let store = user_load(CAPS_ZEN4)
            .set("LdOp", 0)
            .on(&["StOp"])
            .data_src(8);
        let d = decode(&store, GENOA);
        assert_eq!(
            (d.mem_op(), level(d)),
            (op::STORE, (lvl::NA, lvlnum::NA, false, 0))
        );
        let mab = store.on(&["DcMissNoMabAlloc"]);
        assert_eq!(
            level(decode(&mab, GENOA)),
            (lvl::LFB | H, lvlnum::LFB, false, 0)
        );
        let peer = user_load(CAPS_ZEN4).data_src(12).on(&["DcMissNoMabAlloc"]);
        assert_eq!(
            level(decode(&peer, GENOA)),
            (lvl::LFB | H, lvlnum::LFB, false, 0)
        );
    }

    #[test]
    fn non_memory_ops_are_na_and_rmw_is_a_load() {
        let alu = RawBuilder::new(CAPS_ZEN4).on(&["OpVal", "DcMiss", "L2Miss"]);
        assert_eq!(decode(&alu, GENOA), PERF_MEM_NA);
        let rmw = user_load(CAPS_ZEN4).on(&["StOp", "DcLockedOp"]).data_src(3);
        let d = decode(&rmw, GENOA);
        assert_eq!((d.mem_op(), d.lock()), (op::LOAD, lock::LOCKED));
        assert_eq!(decode(&user_load(CAPS_ZEN4), GENOA).lock(), lock::NA);
    }

    #[test]
    fn erratum_1293_on_family_19h_model_01_only() {
        for flag in ["SwPf", "DcMissNoMabAlloc"] {
            // L2Miss clear: an L2 hit on Genoa, not claimed on Milan.
            let l2 = user_load(CAPS_ZEN4)
                .set("L2Miss", 0)
                .data_src(3)
                .on(&[flag]);
            assert_eq!(decode(&l2, GENOA).lvl_num(), lvlnum::L2, "{flag}");
            assert_ne!(decode(&l2, MILAN).lvl_num(), lvlnum::L2, "{flag}");
            // Past L2: OpData2 is zeroed on Milan, so DataSrc 8 is lost.
            let cxl = user_load(CAPS_ZEN4).data_src(8).on(&[flag, "RmtNode"]);
            assert_eq!(decode(&cxl, GENOA).lvl_num(), lvlnum::CXL, "{flag}");
            let want = if flag == "SwPf" {
                lvlnum::NA
            } else {
                lvlnum::LFB
            };
            let d = decode(&cxl, MILAN);
            assert_eq!((d.lvl_num(), d.remote()), (want, false), "{flag}");
        }
        let plain = user_load(CAPS_ZEN4).data_src(8);
        assert_eq!(decode(&plain, MILAN).lvl_num(), lvlnum::CXL);
    }

    #[test]
    fn cache_hit_st_is_hitm_only_where_trusted() {
        let cases = [
            (CAPS_ZEN4, 1, GENOA, snoop::HITM),
            (CAPS_ZEN4, 2, GENOA, snoop::HITM),
            (CAPS_ZEN4, 5, ZEN5, snoop::HITM),
            (CAPS_ZEN4, 3, GENOA, snoop::NA),
            (CAPS_ZEN4, 8, GENOA, snoop::NA),
            (CAPS_ZEN4, 1, MILAN, snoop::NA),
            (
                CAPS_ZEN4,
                1,
                CpuModel {
                    family: 0x19,
                    model: 0x21,
                },
                snoop::NA,
            ),
            (
                CAPS_ZEN4,
                1,
                CpuModel {
                    family: 0x19,
                    model: 0x5f,
                },
                snoop::NA,
            ),
            (
                CAPS_ZEN4,
                1,
                CpuModel {
                    family: 0x19,
                    model: 0x60,
                },
                snoop::HITM,
            ),
            (
                CAPS_ZEN3,
                2,
                CpuModel {
                    family: 0x17,
                    model: 0x31,
                },
                snoop::HITM,
            ),
            (
                CAPS_ZEN3,
                4,
                CpuModel {
                    family: 0x17,
                    model: 0x31,
                },
                snoop::NA,
            ),
        ];
        for (caps, src, cpu, want) in cases {
            let b = user_load(caps).data_src(src);
            assert_eq!(
                decode(&b, cpu).snoop(),
                want,
                "caps {caps:#x} src {src} {cpu:?}"
            );
            // CacheHitSt = 1 is the O state: never HITM.
            assert_eq!(decode(&b.on(&["CacheHitSt"]), cpu).snoop(), snoop::NA);
        }
        let l2_hit = user_load(CAPS_ZEN4).data_src(1).set("L2Miss", 0);
        assert_eq!(decode(&l2_hit, GENOA).snoop(), snoop::NA);
        let store = user_load(CAPS_ZEN4)
            .set("LdOp", 0)
            .on(&["StOp"])
            .data_src(1);
        assert_eq!(decode(&store, GENOA).snoop(), snoop::NA);
    }

    #[test]
    fn dtlb_levels() {
        let base = user_load(CAPS_ZEN4);
        assert_eq!(decode(&base, GENOA).dtlb(), tlb::L1 | tlb::HIT);
        let l2 = base.clone().on(&["DcL1TlbMiss"]);
        assert_eq!(decode(&l2, GENOA).dtlb(), tlb::L2 | tlb::HIT);
        let walk = l2.on(&["DcL2TlbMiss"]);
        assert_eq!(decode(&walk, GENOA).dtlb(), tlb::L2 | tlb::MISS);
        let no_la = base.clone().set("DcLinAddrValid", 0);
        assert_eq!(decode(&no_la, GENOA).dtlb(), tlb::NA);
        // Zen5 TLB bits are valid only with a valid physical address.
        let zen5 = user_load(CAPS_ZEN4 | OPDTLBPGSIZE);
        assert_eq!(decode(&zen5, ZEN5).dtlb(), tlb::L1 | tlb::HIT);
        let zen5_no_pa = zen5.set("DcPhyAddrValid", 0);
        assert_eq!(decode(&zen5_no_pa, ZEN5).dtlb(), tlb::NA);
        let zen4_no_pa = base.set("DcPhyAddrValid", 0);
        assert_eq!(decode(&zen4_no_pa, GENOA).dtlb(), tlb::L1 | tlb::HIT);
    }
}
