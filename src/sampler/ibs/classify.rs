//! Per-sample classification, like the pghot IBS driver: keep user loads and stores that left
//! L1/L2 with a valid linear address; count everything else under one [`DropReason`].

use super::caps::CpuModel;
use super::decode::{decode_data_src, effective_op_data2};
use super::regs::IbsOpRaw;
use crate::sample::{AccessOp, DataSource};
use crate::sampler::hwsample::{
    DropReason, HwSample, LfbMeans, SampleFields, check_cache_hit, check_cpumode, check_data_addr,
    classify_decoded,
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
/// (`perf_ibs_parse_ld_st_data()` in `arch/x86/events/amd/ibs.c`).
pub fn classify(input: &IbsInput) -> Result<HwSample, DropReason> {
    match input.raw {
        Some(bytes) => {
            check_cpumode(input.sample.misc)?;
            let raw = IbsOpRaw::parse(bytes).map_err(|_| DropReason::InvalidSample)?;
            classify_raw(&raw, input.sample.phys_addr, input.cpu)
        }
        // Without RAW an IBS LFB is the "MAB" case: a miss past L2 (`perf_ibs_get_mem_lvl()`).
        None => classify_decoded(&input.sample, LfbMeans::MissInFlight),
    }
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
    check_cache_hit(decode_data_src(raw, cpu), LfbMeans::MissInFlight)?;
    if !d3.dc_lin_addr_valid() {
        return Err(DropReason::InvalidAddr);
    }
    let vaddr = check_data_addr(raw.dc_lin_ad)?;
    Ok(HwSample {
        vaddr,
        paddr: raw_paddr(raw, phys_addr),
        op,
        served_from: served_from(raw, op, cpu),
        latency: raw_latency(raw, op),
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

/// DcMissLat, for loads that missed the data cache (what the kernel reports as WEIGHT).
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
        classify(&with_raw(&b.bytes(), cpu))
    }

    fn decoded_classify(sample: SampleFields) -> Result<HwSample, DropReason> {
        classify(&IbsInput {
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
            assert_eq!(classify(&i), Err(want));
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
            assert_eq!(
                classify(&with_raw(bad, GENOA)),
                Err(DropReason::InvalidSample)
            );
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
        assert_eq!(classify(&i).unwrap().paddr, Some(0x5000));
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
        assert_eq!(classify(&i), Err(DropReason::L1Hit));
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
            let _ = classify(&i);
            let _ = classify(&IbsInput { raw: None, ..i });
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
            if let Ok(s) = classify(&with_raw(&bytes, cpu)) {
                prop_assert!(s.vaddr != 0 && s.vaddr >> 63 == 0);
            }
        }
    }
}
