//! IBS capability bits (CPUID 8000_001B EAX; `IBS_CAPS_*` in
//! `arch/x86/include/asm/perf_event.h`) and the CPU model the errata depend on.

use super::flags;

/// The IBS feature word: the kernel's `ibs_caps`, also the first u32 of every RAW sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IbsCaps(pub u32);

flags!(IbsCaps {
    /// Bit 0: IBS present (the kernel forces it on).
    avail = 0;
    /// Bit 1: fetch sampling.
    fetch_sam = 1;
    /// Bit 2: op sampling.
    op_sam = 2;
    /// Bit 3: CurCnt readable and writable.
    rd_wr_op_cnt = 3;
    /// Bit 4: op counting (`cnt_ctl`).
    op_cnt = 4;
    /// Bit 5: IbsBrTarget present, appended to RAW.
    brn_trgt = 5;
    /// Bit 6: MaxCnt extended to 23 bits (IbsOpCtl 20-26).
    op_cnt_ext = 6;
    /// Bit 7: OpData bit 38 RipInvalid is meaningful.
    rip_invalid_chk = 7;
    /// Bit 8: fused-branch bit.
    op_brn_fuse = 8;
    /// Bit 9: IcIbsExtdCtl present (fetch RAW).
    fetch_ctl_extd = 9;
    /// Bit 10: IbsOpData4 present, appended to RAW.
    op_data4 = 10;
    /// Bit 11: Zen4 extensions: 5-bit DataSrc, L3MissOnly.
    zen4 = 11;
    /// Bit 12: load-latency filter (Zen5).
    op_ldlat = 12;
    /// Bit 13: alternate disable bits in the Ctl2 MSRs (Zen6, Linux 7.1).
    dis = 13;
    /// Bit 14: fetch latency filter (Linux 7.1).
    fetch_lat = 14;
    /// Bit 15: hardware RIP[63] privilege filter (Linux 7.1).
    bit63_filter = 15;
    /// Bit 16: streaming-store filter and OpData2 StrmSt/RmtSocket (Linux 7.1).
    strmst_rmtsocket = 16;
    /// Bit 18: seen only in an unmerged out-of-tree header; do not rely on it.
    mem_profiler = 18;
    /// Bit 19: Zen5 DTLB page-size encoding in OpData3 bits 4-5.
    op_dtlb_pgsize = 19;
});

impl IbsCaps {
    /// What the kernel assumes when CPUID reports no caps word (IBS_CAPS_DEFAULT).
    pub const DEFAULT: IbsCaps = IbsCaps(0b111);

    /// The host's caps from CPUID, as the kernel derives `ibs_caps`; `None` when the CPU has no
    /// IBS (CPUID 8000_0001 ECX bit 10 clear, as in VMs) or is not x86-64.
    pub fn host() -> Option<IbsCaps> {
        host_caps()
    }

    /// The kernel's rule: trust CPUID 8000_001B only if the IBS flag is set; a caps word
    /// without AVAIL means "use the defaults" (ibs.c `__get_ibs_caps`).
    pub fn from_cpuid(ibs_flag: bool, max_ext_leaf: u32, leaf_1b_eax: u32) -> Option<IbsCaps> {
        if !ibs_flag {
            return None;
        }
        let caps = IbsCaps(if max_ext_leaf >= IBS_LEAF {
            leaf_1b_eax
        } else {
            0
        });
        Some(if caps.avail() { caps } else { IbsCaps::DEFAULT })
    }
}

const EXT_MAX_LEAF: u32 = 0x8000_0000;
const EXT_FEATURES_LEAF: u32 = 0x8000_0001;
const IBS_LEAF: u32 = 0x8000_001b;
/// CPUID 8000_0001 ECX bit 10: IBS (`X86_FEATURE_IBS` in `arch/x86/include/asm/cpufeatures.h`).
const ECX_IBS: u32 = 1 << 10;

/// One CPUID leaf's EAX and ECX.
#[cfg(target_arch = "x86_64")]
fn cpuid(leaf: u32) -> (u32, u32) {
    // `__cpuid` is a safe fn on newer toolchains; the block keeps rust-version 1.88 building.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is present on every x86-64 CPU and only reads identification registers. An
    // extended leaf above the CPU's maximum does not fault (it returns zeros or the highest
    // basic leaf's data), and callers check the maximum before trusting a leaf's value.
    let r = unsafe { core::arch::x86_64::__cpuid(leaf) };
    (r.eax, r.ecx)
}

#[cfg(target_arch = "x86_64")]
fn host_caps() -> Option<IbsCaps> {
    let (max_ext, _) = cpuid(EXT_MAX_LEAF);
    if max_ext < EXT_FEATURES_LEAF {
        return None;
    }
    let (_, ecx) = cpuid(EXT_FEATURES_LEAF);
    let (eax, _) = if max_ext >= IBS_LEAF {
        cpuid(IBS_LEAF)
    } else {
        (0, 0)
    };
    IbsCaps::from_cpuid(ecx & ECX_IBS != 0, max_ext, eax)
}

#[cfg(not(target_arch = "x86_64"))]
fn host_caps() -> Option<IbsCaps> {
    None
}

/// CPU family and model (as /proc/cpuinfo prints them, decimal there), which select errata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CpuModel {
    pub family: u32,
    pub model: u32,
}

impl CpuModel {
    /// Family 0: no errata apply.
    pub const UNKNOWN: CpuModel = CpuModel {
        family: 0,
        model: 0,
    };

    /// The boot CPU's model from `/proc/cpuinfo`; [`CpuModel::UNKNOWN`] if it cannot be read
    /// (pghotd then applies no errata, which only loses precision on early Zen3/Zen4).
    pub fn host() -> CpuModel {
        crate::safefs::read_proc(
            std::path::Path::new("/proc/cpuinfo"),
            crate::safefs::limit::CPUINFO,
        )
        .ok()
        .and_then(|info| CpuModel::of(&info))
        .unwrap_or(CpuModel::UNKNOWN)
    }

    /// Reads `cpu family` and `model` of the first processor block.
    pub fn from_cpuinfo(text: &str) -> Option<CpuModel> {
        CpuModel::of(&procfs::FromRead::from_read(text.as_bytes()).ok()?)
    }

    /// `cpu family` and `model` of the first CPU the `procfs` crate parsed.
    fn of(info: &procfs::CpuInfo) -> Option<CpuModel> {
        let value = |key: &str| info.get_field(0, key)?.parse::<u32>().ok();
        Some(CpuModel {
            family: value("cpu family")?,
            model: value("model")?,
        })
    }

    /// Erratum #1293 (Fam19h model <= 0xF): OpData2, L2Miss and OpDcMissOpenMemReqs are invalid
    /// when SwPf or DcMissNoMabAlloc is set (`perf_ibs_get_op_data2()` and
    /// `perf_ibs_get_mem_lvl()` in `arch/x86/events/amd/ibs.c`).
    pub const fn erratum_1293(self) -> bool {
        self.family == 0x19 && self.model <= 0xf
    }

    /// The kernel's `X86_FEATURE_ZEN5`: family 0x1A models 0x00-0x2F, 0x40-0x4F and 0x60-0x7F
    /// (`bsp_init_amd()` in `arch/x86/kernel/cpu/amd.c`, after "x86/CPU/AMD: Add more models to
    /// X86_FEATURE_ZEN5"; models 0x50-0x5F, 0x80-0xAF and 0xC0-0xCF are Zen6 there). Selects
    /// erratum 1606, the ldlat filter's need of L3MissOnly (`perf_ibs_init()`, Linux 7.1+).
    pub const fn is_zen5(self) -> bool {
        self.family == 0x1a && matches!(self.model, 0x00..=0x2f | 0x40..=0x4f | 0x60..=0x7f)
    }

    /// CacheHitSt is invalid on Fam19h models <= 0xF and 0x20..=0x5F
    /// (`perf_ibs_cache_hit_st_valid()` in `arch/x86/events/amd/ibs.c`).
    pub const fn cache_hit_st_valid(self) -> bool {
        !(self.family == 0x19 && (self.model <= 0xf || (self.model >= 0x20 && self.model <= 0x5f)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type CapsGetter = fn(IbsCaps) -> bool;

    #[test]
    fn every_caps_bit_has_its_accessor() {
        let accessors: [(u32, CapsGetter); 19] = [
            (0, IbsCaps::avail),
            (1, IbsCaps::fetch_sam),
            (2, IbsCaps::op_sam),
            (3, IbsCaps::rd_wr_op_cnt),
            (4, IbsCaps::op_cnt),
            (5, IbsCaps::brn_trgt),
            (6, IbsCaps::op_cnt_ext),
            (7, IbsCaps::rip_invalid_chk),
            (8, IbsCaps::op_brn_fuse),
            (9, IbsCaps::fetch_ctl_extd),
            (10, IbsCaps::op_data4),
            (11, IbsCaps::zen4),
            (12, IbsCaps::op_ldlat),
            (13, IbsCaps::dis),
            (14, IbsCaps::fetch_lat),
            (15, IbsCaps::bit63_filter),
            (16, IbsCaps::strmst_rmtsocket),
            (18, IbsCaps::mem_profiler),
            (19, IbsCaps::op_dtlb_pgsize),
        ];
        for (bit, get) in accessors {
            let caps = IbsCaps(1 << bit);
            for (other, get_other) in accessors {
                assert_eq!(
                    get_other(caps),
                    other == bit,
                    "bit {bit} read by bit {other}"
                );
            }
            assert!(!get(IbsCaps(!(1 << bit))));
        }
    }

    #[test]
    fn cpuid_caps_follow_the_kernel_rules() {
        assert_eq!(IbsCaps::from_cpuid(false, IBS_LEAF, 0x1ff), None);
        assert_eq!(
            IbsCaps::from_cpuid(true, IBS_LEAF, 0x1ff),
            Some(IbsCaps(0x1ff))
        );
        assert_eq!(
            IbsCaps::from_cpuid(true, IBS_LEAF, 0x1fe),
            Some(IbsCaps::DEFAULT)
        );
        assert_eq!(
            IbsCaps::from_cpuid(true, IBS_LEAF - 1, 0x1ff),
            Some(IbsCaps::DEFAULT)
        );
        // This VM has no IBS; on an IBS host the word must at least say AVAIL.
        if let Some(caps) = IbsCaps::host() {
            assert!(caps.avail());
        }
    }

    #[test]
    fn cpuinfo_parsing_and_errata() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
                    model\t\t: 1\nmodel name\t: AMD EPYC 7763\n\nprocessor\t: 1\n\
                    cpu family\t: 99\nmodel\t\t: 99\n";
        let m = CpuModel::from_cpuinfo(text).unwrap();
        assert_eq!(
            m,
            CpuModel {
                family: 0x19,
                model: 1
            }
        );
        assert!(m.erratum_1293() && !m.cache_hit_st_valid());
        assert_eq!(CpuModel::from_cpuinfo("processor: 0\n"), None);
        assert_eq!(CpuModel::from_cpuinfo("cpu family: x\nmodel: 1"), None);

        let genoa = CpuModel {
            family: 0x19,
            model: 0x11,
        };
        assert!(!genoa.erratum_1293() && genoa.cache_hit_st_valid());
        let zen3_client = CpuModel {
            family: 0x19,
            model: 0x21,
        };
        assert!(!zen3_client.erratum_1293() && !zen3_client.cache_hit_st_valid());
        let zen5 = CpuModel {
            family: 0x1a,
            model: 0x02,
        };
        assert!(!zen5.erratum_1293() && zen5.cache_hit_st_valid());
        assert!(!CpuModel::UNKNOWN.erratum_1293() && CpuModel::UNKNOWN.cache_hit_st_valid());
        let _ = CpuModel::host();
    }

    #[test]
    fn zen5_is_the_kernels_model_list() {
        let cpu = |family, model| CpuModel { family, model };
        // Both ends of each range `bsp_init_amd()` lists, and models inside them.
        for m in [
            0x00, 0x02, 0x11, 0x24, 0x2f, 0x40, 0x44, 0x4f, 0x60, 0x70, 0x7f,
        ] {
            assert!(cpu(0x1a, m).is_zen5(), "1a/{m:#x}");
        }
        // Zen6 ranges and the gaps the kernel warns about; other families never.
        for m in [0x30, 0x3f, 0x50, 0x5f, 0x80, 0xaf, 0xb0, 0xc0, 0xcf] {
            assert!(!cpu(0x1a, m).is_zen5(), "1a/{m:#x}");
        }
        assert!(!cpu(0x19, 0x11).is_zen5() && !cpu(0x1b, 0x02).is_zen5());
        assert!(!CpuModel::UNKNOWN.is_zen5());
    }
}
