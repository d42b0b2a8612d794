//! Per-sample classification, like the pghot IBS driver: keep user loads and stores that left
//! L1/L2 with a valid linear address; count everything else under one [`DropReason`].

use super::caps::CpuModel;
use super::decode::{decode_data_src, effective_op_data2};
use super::regs::IbsOpRaw;
use crate::sample::{AccessOp, DataSource};
use crate::sampler::datasrc::{PerfMemDataSrc, lvl, lvlnum};
use crate::sampler::hwsample::{
    DecodeNote, DropReason, HwSample, LfbMeans, Notes, SampleFields, check_cache_hit,
    check_cpumode, check_data_addr, classify_decoded,
};

/// What the record parser hands over for one ibs_op sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbsInput<'a> {
    /// The kernel-decoded fields (misc, ip, pid, addr, phys_addr, data_src, weight).
    pub sample: SampleFields,
    /// The PERF_SAMPLE_RAW payload, starting at the caps u32.
    pub raw: Option<&'a [u8]>,
    /// The host CPU, for errata (read once with [`CpuModel::host`]).
    pub cpu: CpuModel,
}

/// Classifies one sample. RAW is preferred when present: it carries load/store, L2 miss,
/// latency and validity bits on every kernel, while DATA_SRC/ADDR/WEIGHT need v6.1
/// (`perf_ibs_parse_ld_st_data()` in `arch/x86/events/amd/ibs.c`). A RAW payload longer than
/// its caps announce is decoded and noted; one that does not parse falls back to the kernel's
/// fields when the kernel decoded them, and is noted too.
pub fn classify(input: &IbsInput, notes: &mut Notes) -> Result<HwSample, DropReason> {
    let Some(bytes) = input.raw else {
        return classify_kernel_fields(&input.sample, notes);
    };
    match IbsOpRaw::parse(bytes) {
        Ok(raw) => {
            if raw.trailing_bytes != 0 {
                notes.add(DecodeNote::IbsRawLongerThanKnown);
            }
            check_cpumode(input.sample.misc)?;
            classify_raw(&raw, input.sample.phys_addr, input.cpu)
        }
        Err(_) if kernel_decoded(&input.sample) => {
            notes.add(DecodeNote::IbsRawFallbackDecoded);
            classify_kernel_fields(&input.sample, notes)
        }
        Err(_) => {
            check_cpumode(input.sample.misc)?;
            Err(DropReason::InvalidSample)
        }
    }
}

/// From the kernel's decoded fields alone. An IBS LFB is the "MAB" case there: a miss past L2
/// (`perf_ibs_get_mem_lvl()`). WEIGHT is kept only where the RAW path keeps DcMissLat.
fn classify_kernel_fields(f: &SampleFields, notes: &mut Notes) -> Result<HwSample, DropReason> {
    let mut hw = classify_decoded(f, LfbMeans::MissInFlight, notes)?;
    if !memory_latency(PerfMemDataSrc(f.data_src)) {
        hw.latency = None;
    }
    Ok(hw)
}

/// DcMissLat is a memory latency only for a load the kernel places in a cache or memory. It
/// reports it as WEIGHT for every load with DcMiss (`perf_ibs_parse_ld_st_data()`), IO and
/// uncached ones included, although `perf_ibs_get_mem_lvl()` notes that DcMissLat is invalid
/// for uncached accesses; an IO read's latency is no memory tier's either. Both paths leave
/// those out, so a sample decodes the same from RAW and from the kernel's fields.
fn memory_latency(src: PerfMemDataSrc) -> bool {
    !matches!(src.lvl_num(), lvlnum::IO | lvlnum::UNC) && src.mem_lvl() & (lvl::IO | lvl::UNC) == 0
}

/// The kernel filled DATA_SRC for this op: v6.1+ sets `mem_op` to LOAD or STORE from
/// IbsOpData3 (`perf_ibs_get_mem_op()`), where older kernels, and any op that is neither,
/// leave `PERF_MEM_NA`. Without that, ADDR, PHYS_ADDR and WEIGHT were not filled either.
fn kernel_decoded(f: &SampleFields) -> bool {
    PerfMemDataSrc(f.data_src).access_op().is_some()
}

fn classify_raw(raw: &IbsOpRaw, phys_addr: u64, cpu: CpuModel) -> Result<HwSample, DropReason> {
    if !raw.op_ctl.op_val() {
        return Err(DropReason::InvalidSample);
    }
    if raw.rip_is_kernel() {
        return Err(DropReason::KernelMode);
    }
    let d3 = raw.op_data3;
    let op = match (d3.ld_op(), d3.st_op()) {
        (true, _) => AccessOp::Load,
        (false, true) => AccessOp::Store,
        (false, false) => return Err(DropReason::NonLoadStore),
    };
    // The kernel's own decode decides L1/L2 hits, so RAW and DATA_SRC agree (uncached
    // accesses and erratum #1293 included, `perf_ibs_get_mem_lvl()`).
    let src = decode_data_src(raw, cpu);
    check_cache_hit(src, LfbMeans::MissInFlight)?;
    if !d3.dc_lin_addr_valid() {
        return Err(DropReason::InvalidAddr);
    }
    let vaddr = check_data_addr(raw.dc_lin_ad)?;
    Ok(HwSample {
        vaddr,
        paddr: raw_paddr(raw, phys_addr),
        op,
        served_from: served_from(raw, op, cpu),
        latency: raw_latency(raw, op).filter(|_| memory_latency(src)),
    })
}

/// IbsDcPhysAd when valid and not zeroed for an unprivileged opener (v6.14+,
/// `perf_ibs_phyaddr_clear()`), else the kernel's
/// PHYS_ADDR (which may come from a page-table walk).
fn raw_paddr(raw: &IbsOpRaw, phys_addr: u64) -> Option<u64> {
    if raw.op_data3.dc_phy_addr_valid() && raw.dc_phys_ad != 0 {
        Some(raw.dc_phys_ad)
    } else {
        (phys_addr != 0).then_some(phys_addr)
    }
}

/// DataSrc is valid only for loads, and not for uncached ones (`perf_ibs_get_mem_lvl()`).
fn served_from(raw: &IbsOpRaw, op: AccessOp, cpu: CpuModel) -> DataSource {
    if op == AccessOp::Store || raw.op_data3.dc_uc_mem_acc() {
        return DataSource::Unknown;
    }
    let d2 = effective_op_data2(raw, cpu);
    d2.data_src(raw.caps).data_source(d2.rmt_node())
}

/// DcMissLat, for cacheable loads that missed the data cache (the kernel's WEIGHT, which it
/// also fills for uncached ones: see [`memory_latency`]).
fn raw_latency(raw: &IbsOpRaw, op: AccessOp) -> Option<u32> {
    let d3 = raw.op_data3;
    (op == AccessOp::Load && d3.dc_miss() && !d3.dc_uc_mem_acc())
        .then(|| u32::from(d3.dc_miss_lat()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::testraw::*;
    use super::*;
    use crate::sampler::datasrc::{PERF_MEM_NA, lvl, lvlnum, op};
    use crate::sampler::hwsample::testutil::{load, user_sample};

    /// Classifies, dropping the notes.
    fn run(input: &IbsInput) -> Result<HwSample, DropReason> {
        classify(input, &mut Notes::default())
    }

    /// Classifies, keeping the notes.
    fn noted(input: &IbsInput) -> (Result<HwSample, DropReason>, Notes) {
        let mut notes = Notes::default();
        (classify(input, &mut notes), notes)
    }

    /// A RAW sample; the kernel-decoded fields say nothing (pre-v6.1 kernel).
    fn with_raw(bytes: &[u8], cpu: CpuModel) -> IbsInput<'_> {
        let sample = SampleFields {
            addr: 0,
            ..user_sample(PERF_MEM_NA)
        };
        IbsInput {
            sample,
            raw: Some(bytes),
            cpu,
        }
    }

    fn raw_classify(b: &RawBuilder, cpu: CpuModel) -> Result<HwSample, DropReason> {
        run(&with_raw(&b.bytes(), cpu))
    }

    fn decoded_classify(sample: SampleFields) -> Result<HwSample, DropReason> {
        run(&IbsInput {
            sample,
            raw: None,
            cpu: GENOA,
        })
    }

    #[test]
    fn cxl_load_from_raw() {
        let b = user_load(CAPS_ZEN4).data_src(8).on(&["RmtNode"]);
        let s = raw_classify(&b, GENOA).unwrap();
        let want = HwSample {
            vaddr: 0x7f00_dead_b000,
            paddr: Some(0x80_0000_b000),
            op: AccessOp::Load,
            served_from: DataSource::ExtMem,
            latency: Some(420),
        };
        assert_eq!(s, want);
    }

    #[test]
    fn raw_sources_per_data_src() {
        let cases = [
            (CAPS_ZEN4, 1, false, DataSource::L3),
            (CAPS_ZEN4, 2, false, DataSource::PeerCache),
            (CAPS_ZEN4, 3, false, DataSource::LocalDram),
            (CAPS_ZEN4, 3, true, DataSource::RemoteDram),
            (CAPS_ZEN4, 5, true, DataSource::PeerCache),
            (CAPS_ZEN4, 6, false, DataSource::ExtMem),
            (CAPS_ZEN4, 6, true, DataSource::ExtMem),
            (CAPS_ZEN4, 7, false, DataSource::Unknown),
            (CAPS_ZEN4, 8, false, DataSource::ExtMem),
            (CAPS_ZEN4, 12, false, DataSource::Unknown),
            (CAPS_ZEN4, 0, false, DataSource::Unknown),
            (CAPS_ZEN3, 2, false, DataSource::L3),
            (CAPS_ZEN3, 3, true, DataSource::RemoteDram),
            (CAPS_ZEN3, 4, true, DataSource::PeerCache),
        ];
        for (caps, src, rmt, want) in cases {
            let b = user_load(caps).data_src(src).set("RmtNode", rmt.into());
            let s = raw_classify(&b, GENOA).unwrap();
            assert_eq!(
                s.served_from, want,
                "caps {caps:#x} DataSrc {src} rmt {rmt}"
            );
        }
    }

    #[test]
    fn every_drop_reason_from_raw() {
        let load = user_load(CAPS_ZEN4).data_src(3);
        let bytes = load.bytes();
        for (misc, want) in [(1, DropReason::KernelMode), (4, DropReason::GuestMode)] {
            let mut i = with_raw(&bytes, GENOA);
            i.sample.misc = misc;
            assert_eq!(run(&i), Err(want));
        }
        let cases = [
            (
                load.clone().reg(Reg::Rip, 1 << 63 | 0x10),
                DropReason::KernelMode,
            ),
            (load.clone().set("OpVal", 0), DropReason::InvalidSample),
            (load.clone().set("LdOp", 0), DropReason::NonLoadStore),
            (load.clone().set("DcMiss", 0), DropReason::L1Hit),
            (load.clone().set("L2Miss", 0), DropReason::L2Hit),
            (
                load.clone().set("DcLinAddrValid", 0),
                DropReason::InvalidAddr,
            ),
            (load.clone().reg(Reg::LinAd, 0), DropReason::InvalidAddr),
            (
                load.clone().reg(Reg::LinAd, 0xffff_8880_0000_1000),
                DropReason::KernelAddr,
            ),
        ];
        for (b, want) in cases {
            assert_eq!(raw_classify(&b, GENOA), Err(want), "{b:?}");
        }
        for bad in [&bytes[..bytes.len() - 1], &[]] {
            assert_eq!(run(&with_raw(bad, GENOA)), Err(DropReason::InvalidSample));
        }
    }

    #[test]
    fn invalid_rip_is_not_taken_for_a_kernel_one() {
        let b = user_load(CAPS_ZEN4)
            .reg(Reg::Rip, 1 << 63)
            .on(&["OpRipInvalid"]);
        assert!(raw_classify(&b, GENOA).is_ok());
    }

    #[test]
    fn stores_uncached_and_physical_address_fallbacks() {
        let store = user_load(CAPS_ZEN4)
            .set("LdOp", 0)
            .on(&["StOp"])
            .data_src(3);
        let s = raw_classify(&store, GENOA).unwrap();
        assert_eq!(
            (s.op, s.served_from),
            (AccessOp::Store, DataSource::Unknown)
        );
        assert_eq!(s.latency, None);

        // Uncached: DcMiss, DataSrc and DcMissLat are invalid, and it is not a cache hit.
        let uc = user_load(CAPS_ZEN4)
            .set("DcMiss", 0)
            .on(&["DcUcMemAcc"])
            .data_src(3);
        let s = raw_classify(&uc, GENOA).unwrap();
        assert_eq!((s.served_from, s.latency), (DataSource::Unknown, None));

        // v6.14+ zeroes IbsDcPhysAd for unprivileged openers: fall back to PHYS_ADDR.
        let bytes = user_load(CAPS_ZEN4).reg(Reg::PhysAd, 0).bytes();
        let mut i = with_raw(&bytes, GENOA);
        i.sample.phys_addr = 0x5000;
        assert_eq!(run(&i).unwrap().paddr, Some(0x5000));
        let invalid = user_load(CAPS_ZEN4).set("DcPhyAddrValid", 0);
        assert_eq!(raw_classify(&invalid, GENOA).unwrap().paddr, None);
    }

    #[test]
    fn erratum_1293_keeps_unclaimed_l2_hits_on_milan() {
        let b = user_load(CAPS_ZEN4)
            .data_src(8)
            .set("L2Miss", 0)
            .on(&["SwPf"]);
        assert_eq!(raw_classify(&b, GENOA), Err(DropReason::L2Hit));
        let s = raw_classify(&b, MILAN).unwrap();
        assert_eq!(s.served_from, DataSource::Unknown, "OpData2 zeroed");
        let past_l2 = user_load(CAPS_ZEN4).data_src(8).on(&["DcMissNoMabAlloc"]);
        let source = |cpu| raw_classify(&past_l2, cpu).unwrap().served_from;
        assert_eq!(source(GENOA), DataSource::ExtMem);
        assert_eq!(source(MILAN), DataSource::Unknown);
    }

    #[test]
    fn raw_wins_over_kernel_decoded_fields() {
        let bytes = user_load(CAPS_ZEN4).set("DcMiss", 0).bytes();
        let mut i = with_raw(&bytes, GENOA);
        i.sample.data_src = load(0, lvlnum::CXL).0;
        i.sample.addr = 0x1000;
        assert_eq!(run(&i), Err(DropReason::L1Hit));
    }

    #[test]
    fn kernel_decoded_only() {
        let cxl = SampleFields {
            phys_addr: 0x40_0000_2000,
            weight: 310,
            ..user_sample(load(0, lvlnum::CXL).with_remote(true).with_hops(1))
        };
        let s = decoded_classify(cxl).unwrap();
        assert_eq!((s.vaddr, s.paddr), (0x7f00_0000_1000, Some(0x40_0000_2000)));
        assert_eq!((s.op, s.served_from), (AccessOp::Load, DataSource::ExtMem));
        assert_eq!(s.latency, Some(310));

        // An IBS MAB hit past L2 is kept with an unknown source.
        let mab = user_sample(load(lvl::LFB | lvl::HIT, lvlnum::LFB));
        assert_eq!(
            decoded_classify(mab).unwrap().served_from,
            DataSource::Unknown
        );

        let drops = [
            (
                user_sample(load(lvl::L2 | lvl::HIT, lvlnum::L2)),
                DropReason::L2Hit,
            ),
            (user_sample(PERF_MEM_NA), DropReason::NonLoadStore),
            (SampleFields { addr: 0, ..cxl }, DropReason::InvalidAddr),
            (
                SampleFields {
                    addr: 1 << 63,
                    ..cxl
                },
                DropReason::KernelAddr,
            ),
            (SampleFields { misc: 1, ..cxl }, DropReason::KernelMode),
            (SampleFields { misc: 4, ..cxl }, DropReason::GuestMode),
        ];
        for (f, want) in drops {
            assert_eq!(decoded_classify(f), Err(want), "{f:?}");
        }
    }

    /// What a >= v6.1 kernel would have put in the record for this RAW payload
    /// (`perf_ibs_parse_ld_st_data()`).
    fn as_kernel_decoded(b: &RawBuilder, cpu: CpuModel) -> SampleFields {
        let raw = b.parse();
        let d3 = raw.op_data3;
        let src = decode_data_src(&raw, cpu);
        let is_load = src.mem_op() == op::LOAD;
        SampleFields {
            addr: if d3.dc_lin_addr_valid() {
                raw.dc_lin_ad
            } else {
                0
            },
            phys_addr: if d3.dc_phy_addr_valid() {
                raw.dc_phys_ad
            } else {
                0
            },
            weight: if d3.dc_miss() && is_load {
                d3.dc_miss_lat().into()
            } else {
                0
            },
            ..user_sample(src)
        }
    }

    #[test]
    fn raw_and_kernel_decoded_paths_agree() {
        let loads = [
            user_load(CAPS_ZEN4).data_src(8),
            user_load(CAPS_ZEN4).data_src(3).on(&["RmtNode"]),
            user_load(CAPS_ZEN4).data_src(1),
            user_load(CAPS_ZEN4).data_src(2),
            user_load(CAPS_ZEN4).data_src(6),
            user_load(CAPS_ZEN4).set("DcMiss", 0),
            user_load(CAPS_ZEN4).set("L2Miss", 0),
            user_load(CAPS_ZEN4).set("DcLinAddrValid", 0),
            user_load(CAPS_ZEN4).set("LdOp", 0),
            user_load(CAPS_ZEN4).set("LdOp", 0).on(&["StOp"]),
            user_load(CAPS_ZEN3).data_src(2),
            user_load(CAPS_ZEN3).data_src(4).on(&["RmtNode"]),
        ];
        for b in loads {
            let decoded = as_kernel_decoded(&b, GENOA);
            assert_eq!(raw_classify(&b, GENOA), decoded_classify(decoded), "{b:?}");
        }
    }

    /// A Zen4 user load served by remote extension memory (CXL), as `perf_ibs_handle_irq()` in
    /// `arch/x86/events/amd/ibs.c` lays out its RAW: the u32 `ibs_caps`, then IbsOpCtl,
    /// IbsOpRip, IbsOpData, IbsOpData2, IbsOpData3, IbsDcLinAd, IbsDcPhysAd (the
    /// `MSR_AMD64_IBSOP_REG_MASK` loop), then BrTarget and OpData4 only if caps has them.
    /// Every value is written out from the kernel's definitions, not from this crate's.
    fn zen4_remote_cxl_load_raw() -> Vec<u8> {
        // `IBS_CAPS_AVAIL` (1 << 0) | `OPSAM` (1 << 2) | `OPCNT` (1 << 4) |
        // `RIPINVALIDCHK` (1 << 7) | `ZEN4` (1 << 11), `arch/x86/include/asm/perf_event.h`;
        // no `BRNTRGT` (1 << 5) and no `OPDATA4` (1 << 10), so seven registers follow.
        let caps: u32 = 0x1 | 0x4 | 0x10 | 0x80 | 0x800;
        // `union ibs_op_ctl`: op_en bit 17, op_val bit 18 (`arch/x86/include/asm/amd-ibs.h`).
        let ctl: u64 = 1 << 17 | 1 << 18;
        let rip: u64 = 0x40_1234;
        // `union ibs_op_data2`: DataSrc 8 (`IBS_DATA_SRC_EXT_EXT_MEM`) is data_src_lo 0 (bits
        // 0-2) and data_src_hi 1 (bits 6-7, read by `perf_ibs_data_src()`); rmt_node bit 4.
        let data2: u64 = 1 << 6 | 1 << 4;
        // `union ibs_op_data3`: ld_op 0, dc_miss 7, dc_lin_addr_valid 17,
        // dc_phy_addr_valid 18, l2_miss 20, dc_miss_lat 32-47 = 420 cycles.
        let data3: u64 = 1 | 1 << 7 | 1 << 17 | 1 << 18 | 1 << 20 | 420 << 32;
        let mut raw = caps.to_le_bytes().to_vec();
        for reg in [ctl, rip, 0, data2, data3, 0x7f00_dead_b000, 0x80_0000_b000] {
            raw.extend_from_slice(&reg.to_le_bytes());
        }
        assert_eq!(raw.len(), 4 + 7 * 8);
        raw
    }

    /// What the load above is: pghotd's sample for it.
    const ZEN4_REMOTE_CXL_LOAD: HwSample = HwSample {
        vaddr: 0x7f00_dead_b000,
        paddr: Some(0x80_0000_b000),
        op: AccessOp::Load,
        served_from: DataSource::ExtMem,
        latency: Some(420),
    };

    /// What a v6.1+ kernel puts in the record's own fields for that load
    /// (`perf_ibs_parse_ld_st_data()` in `arch/x86/events/amd/ibs.c`), worked out by hand from
    /// `include/uapi/linux/perf_event.h`.
    fn zen4_remote_cxl_load_fields() -> SampleFields {
        // `perf_ibs_get_mem_op()`: PERF_MEM_OP_LOAD 0x2 at shift 0.
        let op = 0x2;
        // `perf_ibs_get_mem_lvl()`: g_zen4_data_src[IBS_DATA_SRC_EXT_EXT_MEM] is LN(CXL)
        // alone (mem_lvl 0); rmt_node with ZEN4_RMT_NODE_APPLICABLE adds REM | HOPS(1).
        // PERF_MEM_LVLNUM_CXL 0x9 << 33, PERF_MEM_REMOTE_REMOTE 1 << 37, PERF_MEM_HOPS_1 1 << 43.
        let level = 0x9 << 33 | 1 << 37 | 1 << 43;
        // `perf_ibs_get_mem_snoop()`: not a cache source, PERF_MEM_SNOOP_NA 0x1 << 19.
        let snoop = 0x1 << 19;
        // `perf_ibs_get_tlb_lvl()`: linear address valid, dc_l1tlb_miss 0:
        // PERF_MEM_TLB_L1 0x8 | PERF_MEM_TLB_HIT 0x2, at shift 26.
        let dtlb = (0x8 | 0x2) << 26;
        // `perf_ibs_get_mem_lock()`: not locked, PERF_MEM_LOCK_NA 0x1 << 24.
        let lock = 0x1 << 24;
        SampleFields {
            misc: 2, // PERF_RECORD_MISC_USER
            ip: 0x40_1234,
            pid: 42,
            addr: 0x7f00_dead_b000,
            phys_addr: 0x80_0000_b000,
            data_src: op | level | snoop | dtlb | lock,
            // PERF_SAMPLE_WEIGHT: `data->weight.full = op_data3.dc_miss_lat`.
            weight: 420,
        }
    }

    #[test]
    fn a_longer_raw_payload_is_decoded_and_counted() {
        let exact = zen4_remote_cxl_load_raw();
        let (got, notes) = noted(&with_raw(&exact, GENOA));
        assert_eq!(got, Ok(ZEN4_REMOTE_CXL_LOAD));
        assert!(notes.is_empty());
        // A kernel that appends an eighth register it does not announce in caps, and one
        // that appends a u32 (the RAW section is then padded to 8 bytes,
        // `perf_prepare_sample()`).
        for tail in [&[0xab; 8][..], &[0xab, 0xcd, 0xef, 0x01, 0, 0, 0, 0]] {
            let mut longer = exact.clone();
            longer.extend_from_slice(tail);
            let (got, notes) = noted(&with_raw(&longer, GENOA));
            assert_eq!(got, Ok(ZEN4_REMOTE_CXL_LOAD));
            let seen: Vec<_> = notes.iter().collect();
            assert_eq!(seen, [DecodeNote::IbsRawLongerThanKnown]);
        }
        // Counted even when the sample is then dropped.
        let mut kernel = with_raw(&exact, GENOA);
        let mut longer = exact.clone();
        longer.extend_from_slice(&[0; 8]);
        kernel.raw = Some(&longer);
        kernel.sample.misc = 1; // PERF_RECORD_MISC_KERNEL
        let (got, notes) = noted(&kernel);
        assert_eq!(got, Err(DropReason::KernelMode));
        assert!(notes.contains(DecodeNote::IbsRawLongerThanKnown));
    }

    #[test]
    fn a_raw_payload_that_does_not_parse_falls_back_to_the_kernel_fields() {
        let exact = zen4_remote_cxl_load_raw();
        let fields = zen4_remote_cxl_load_fields();
        // One byte short, caps only, and a caps word announcing BrTarget and OpData4 that the
        // seven registers after it do not hold.
        let mut announcing = exact.clone();
        announcing[0] |= 1 << 5;
        announcing[1] |= 1 << 2;
        for bad in [&exact[..exact.len() - 1], &exact[..4], &announcing[..]] {
            let input = IbsInput {
                sample: fields,
                raw: Some(bad),
                cpu: GENOA,
            };
            let (got, notes) = noted(&input);
            assert_eq!(got, Ok(ZEN4_REMOTE_CXL_LOAD), "{} bytes", bad.len());
            let seen: Vec<_> = notes.iter().collect();
            assert_eq!(seen, [DecodeNote::IbsRawFallbackDecoded]);
        }
        // A kernel before v6.1 filled nothing (DATA_SRC stays PERF_MEM_NA): nothing to fall
        // back to, so the sample is invalid and no fallback is counted.
        let (got, notes) = noted(&with_raw(&exact[..exact.len() - 1], GENOA));
        assert_eq!(got, Err(DropReason::InvalidSample));
        assert!(notes.is_empty());
        // The fallback applies the same drops: an L2 hit as the kernel reports it,
        // `L(L2) | LN(L2)` from `perf_ibs_get_mem_lvl()`: LVL_L2 0x20 | LVL_HIT 0x2 at
        // shift 5, LVLNUM_L2 0x2 at shift 33, with mem_op LOAD.
        let l2_hit = SampleFields {
            data_src: 0x2 | (0x20 | 0x2) << 5 | 0x2 << 33,
            ..fields
        };
        let input = IbsInput {
            sample: l2_hit,
            raw: Some(&exact[..4]),
            cpu: GENOA,
        };
        assert_eq!(noted(&input).0, Err(DropReason::L2Hit));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..100),
            misc in any::<u16>(),
            data_src in any::<u64>(),
            addr in any::<u64>(),
            family in 0x17u32..0x1b,
            model in 0u32..0x80,
        ) {
            let mut i = with_raw(&bytes, CpuModel { family, model });
            i.sample = SampleFields { misc, data_src, addr, ..i.sample };
            let _ = run(&i);
            let _ = run(&IbsInput { raw: None, ..i });
        }

        #[test]
        fn well_formed_random_payloads_never_panic(
            caps in any::<u32>(),
            regs in any::<[u64; 9]>(),
            model in 0u32..0x80,
        ) {
            let mut bytes = caps.to_le_bytes().to_vec();
            let n = IbsOpRaw::expected_len(super::super::IbsCaps(caps)) / 8;
            for r in &regs[..n] {
                bytes.extend_from_slice(&r.to_le_bytes());
            }
            let cpu = CpuModel { family: 0x19, model };
            if let Ok(s) = run(&with_raw(&bytes, cpu)) {
                prop_assert!(s.vaddr != 0 && s.vaddr >> 63 == 0);
            }
        }
    }
}
