//! What the kernel makes of the IBS settings: `ibs.ldlat` changes more than a threshold.
//!
//! `perf_ibs_init()` in `arch/x86/events/amd/ibs.c` programs IbsOpCtl from the event's config
//! and config1. For `ldlat` (config1 bits 0-11) it sets LdLatEn (bit 63) and the threshold
//! (bits 59-62), and also:
//! - Linux 6.15 to 7.0 set L3MissOnly (bit 16) on every CPU, whatever `l3missonly` said:
//!   `config |= IBS_OP_L3MISSONLY | IBS_OP_LDLAT_EN` (commit d20610c19b4a "perf/amd/ibs: Add
//!   support for OP Load Latency Filtering", first in v6.15-rc1);
//! - Linux 7.1 sets it only when `cpu_feature_enabled(X86_FEATURE_ZEN5)` (commit 898138efc990
//!   "perf/amd/ibs: Limit ldlat->l3missonly dependency to Zen5", merged in tip perf/core for
//!   7.1; erratum 1606 of AMD's revision guide for Family 1Ah Models 00h-0Fh, pub. 58251). It was
//!   offered to the 6.18.y and 7.0.y stable trees (AUTOSEL, April 2026), and distributions
//!   backport IBS work to older bases: a kernel that carries it behaves like 7.1 whatever its
//!   release says. pghotd cannot see that, so below 7.1 it assumes the 6.15 rule and says so.
//!
//! And on every kernel with ldlat, `perf_ibs_handle_irq()` drops the sample unless
//! `op_data3.ld_op && op_data3.dc_miss && op_data3.dc_miss_lat > ldlat` (same commit, kept in
//! 7.1): stores, loads that hit the data cache and faster misses never reach the ring.

use std::fmt;
use std::path::Path;

use super::caps::CpuModel;

/// The kernel's release, as `uname -r` prints it (`/proc/sys/kernel/osrelease`).
pub type KernelVersion = procfs::KernelVersion;

/// The running kernel's release; `None` when it cannot be read or parsed.
pub fn host_kernel() -> Option<KernelVersion> {
    let bytes = crate::safefs::read_bounded(
        Path::new("/proc/sys/kernel/osrelease"),
        crate::safefs::limit::ATTRIBUTE,
    )
    .ok()?;
    parse_release(&String::from_utf8_lossy(&bytes))
}

/// Parses a release such as `6.15.0-1-amd64` or `7.1.0-rc2`; `None` for anything else.
pub fn parse_release(release: &str) -> Option<KernelVersion> {
    KernelVersion::from_str(release.trim()).ok()
}

/// Why the kernel turns L3MissOnly on for an ldlat event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForcedBy {
    /// Linux 6.15 to 7.0 (and a release pghotd cannot read): on every CPU.
    LdlatBefore71,
    /// Linux 7.1 and later: only on Zen5, for erratum 1606.
    LdlatZen5Erratum1606,
}

impl ForcedBy {
    /// The kernel's rule for an event with ldlat set, or `None` when it leaves L3MissOnly alone.
    pub fn rule(kernel: Option<KernelVersion>, cpu: CpuModel) -> Option<ForcedBy> {
        match kernel {
            Some(k) if (k.major, k.minor) >= (7, 1) => {
                cpu.is_zen5().then_some(ForcedBy::LdlatZen5Erratum1606)
            }
            // 6.15 to 7.0; an older release with ldlat is a backport of d20610c19b4a.
            _ => Some(ForcedBy::LdlatBefore71),
        }
    }
}

/// L3MissOnly (IbsOpCtl bit 16) as the kernel programs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L3MissOnly {
    Off,
    /// pghotd asks for it (`ibs.l3miss_only = true`, or unset on a CPU that has it).
    Requested,
    /// pghotd asks for it off (`ibs.l3miss_only = false`) and the kernel sets it anyway.
    Forced(ForcedBy),
}

impl L3MissOnly {
    pub const fn is_on(self) -> bool {
        !matches!(self, L3MissOnly::Off)
    }
}

/// The IBS op settings in effect once the kernel has applied its own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbsEffective {
    pub l3miss_only: L3MissOnly,
    /// The load-latency threshold in cycles.
    pub ldlat: Option<u32>,
    /// The release the rules were read for (`None`: unknown).
    pub kernel: Option<KernelVersion>,
    pub cpu: CpuModel,
}

impl IbsEffective {
    /// `l3miss_requested`: whether pghotd sets `l3missonly` in the event's config.
    pub fn new(
        l3miss_requested: bool,
        ldlat: Option<u32>,
        kernel: Option<KernelVersion>,
        cpu: CpuModel,
    ) -> IbsEffective {
        let forced = ldlat.and_then(|_| ForcedBy::rule(kernel, cpu));
        let l3miss_only = match (l3miss_requested, forced) {
            (true, _) => L3MissOnly::Requested,
            (false, Some(by)) => L3MissOnly::Forced(by),
            (false, None) => L3MissOnly::Off,
        };
        IbsEffective {
            l3miss_only,
            ldlat,
            kernel,
            cpu,
        }
    }

    /// Store ops reach pghotd: not with ldlat, whose software filter keeps DcMiss loads only.
    pub const fn stores_sampled(&self) -> bool {
        self.ldlat.is_none()
    }

    /// What an operator must be told at start: each line names the setting and the consequence.
    pub fn warnings(&self) -> Vec<String> {
        let Some(ldlat) = self.ldlat else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let L3MissOnly::Forced(by) = self.l3miss_only {
            out.push(format!(
                "ibs.ldlat = {ldlat}: {} also sets L3MissOnly, overriding ibs.l3miss_only = \
                 false: loads served by the L3 cache are not sampled ({})",
                Release(self.kernel),
                self.why(by)
            ));
        }
        out.push(format!(
            "ibs.ldlat = {ldlat}: the kernel keeps only loads that missed the data cache and took \
             more than {ldlat} cycles (perf_ibs_handle_irq): stores are not sampled, so pages \
             that are only written are never seen"
        ));
        out
    }

    /// Why the kernel forces L3MissOnly, with the commit, for a log line.
    fn why(&self, by: ForcedBy) -> String {
        match by {
            ForcedBy::LdlatBefore71 if self.cpu.is_zen5() => {
                "Linux 6.15 to 7.0 do so with ldlat on every CPU (commit d20610c19b4a), and \
                 this Zen5 needs it for erratum 1606"
                    .into()
            }
            ForcedBy::LdlatBefore71 => "Linux 6.15 to 7.0 do so with ldlat on every CPU \
                 (commit d20610c19b4a); a kernel with commit 898138efc990 (7.1, or a backport) \
                 does so on Zen5 only"
                .into(),
            ForcedBy::LdlatZen5Erratum1606 => format!(
                "Linux 7.1 does so on Zen5 (family {:#x} model {:#x}) for erratum 1606, \
                 commit 898138efc990",
                self.cpu.family, self.cpu.model
            ),
        }
    }

    /// The effective value of `ibs.l3miss_only` when it differs from the setting.
    pub fn l3miss_override(&self) -> Option<String> {
        match self.l3miss_only {
            L3MissOnly::Forced(by) => Some(format!(
                "effective: true, set by {} with ibs.ldlat ({})",
                Release(self.kernel),
                match by {
                    ForcedBy::LdlatBefore71 => "Linux 6.15 to 7.0, every CPU",
                    ForcedBy::LdlatZen5Erratum1606 => "Linux 7.1+, Zen5 erratum 1606",
                }
            )),
            L3MissOnly::Off | L3MissOnly::Requested => None,
        }
    }
}

/// One line for the source's description and `--check-config`.
impl fmt::Display for IbsEffective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l3 = match self.l3miss_only {
            L3MissOnly::Off => "off",
            L3MissOnly::Requested => "on",
            L3MissOnly::Forced(_) => "on (forced by the kernel with ldlat)",
        };
        write!(f, "l3missonly {l3}, ")?;
        match self.ldlat {
            None => write!(f, "no ldlat, loads and stores sampled"),
            Some(n) => write!(
                f,
                "ldlat {n} cycles: data-cache-missing loads over {n} cycles only, stores are \
                 not sampled"
            ),
        }
    }
}

/// `Linux 6.16.3`, or words for a release pghotd could not read.
struct Release(Option<KernelVersion>);

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(k) => write!(f, "Linux {}.{}.{}", k.major, k.minor, k.patch),
            None => f.write_str("this kernel (release unknown)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZEN5: CpuModel = CpuModel {
        family: 0x1a,
        model: 0x02,
    };
    /// A family 0x1A model the kernel files under Zen6 (`bsp_init_amd()`).
    const ZEN6: CpuModel = CpuModel {
        family: 0x1a,
        model: 0x50,
    };

    fn k(release: &str) -> Option<KernelVersion> {
        Some(parse_release(release).unwrap_or_else(|| panic!("{release}")))
    }

    #[test]
    fn releases_parse_as_uname_prints_them() {
        let v = |r: &str| parse_release(r).map(|k| (k.major, k.minor, k.patch));
        assert_eq!(v("6.15.0-1-amd64\n"), Some((6, 15, 0)));
        assert_eq!(v("7.1.0-rc2"), Some((7, 1, 0)));
        assert_eq!(v("6.18.7-arch1-1"), Some((6, 18, 7)));
        assert_eq!(v("5.14.0-570.el9.x86_64"), Some((5, 14, 0)));
        assert_eq!(v("garbage"), None);
        assert_eq!(v(""), None);
        // The host's, whatever it is, parses (this file exists on every Linux).
        assert!(host_kernel().is_some());
    }

    #[test]
    fn ldlat_forces_l3missonly_on_6_15_to_7_0_on_every_cpu() {
        for release in [
            "6.15.0",
            "6.15.0-rc1",
            "6.16.3-200.fc42.x86_64",
            "6.18.7",
            "7.0.2",
        ] {
            for cpu in [ZEN5, ZEN6] {
                let e = IbsEffective::new(false, Some(256), k(release), cpu);
                assert_eq!(
                    e.l3miss_only,
                    L3MissOnly::Forced(ForcedBy::LdlatBefore71),
                    "{release} {cpu:?}"
                );
                assert!(e.l3miss_only.is_on() && !e.stores_sampled());
            }
        }
    }

    #[test]
    fn from_7_1_only_zen5_is_forced() {
        for release in ["7.1.0-rc1", "7.1.0", "7.2.5", "8.0.0"] {
            let zen5 = IbsEffective::new(false, Some(128), k(release), ZEN5);
            assert_eq!(
                zen5.l3miss_only,
                L3MissOnly::Forced(ForcedBy::LdlatZen5Erratum1606)
            );
            let zen6 = IbsEffective::new(false, Some(128), k(release), ZEN6);
            assert_eq!(zen6.l3miss_only, L3MissOnly::Off, "{release}");
            // Off or not, the software filter still drops every store.
            assert!(!zen6.stores_sampled());
        }
    }

    #[test]
    fn unknown_and_older_releases_take_the_6_15_rule() {
        // A release pghotd cannot read, and a backport onto an older base (the PMU only
        // offers `ldlat` when the kernel has d20610c19b4a).
        for kernel in [None, k("5.14.0-570.el9.x86_64"), k("6.12.9")] {
            let e = IbsEffective::new(false, Some(512), kernel, ZEN6);
            assert_eq!(e.l3miss_only, L3MissOnly::Forced(ForcedBy::LdlatBefore71));
        }
    }

    #[test]
    fn without_ldlat_nothing_changes() {
        for (asked, want) in [(false, L3MissOnly::Off), (true, L3MissOnly::Requested)] {
            for kernel in [k("6.16.0"), k("7.1.0"), None] {
                let e = IbsEffective::new(asked, None, kernel, ZEN5);
                assert_eq!(e.l3miss_only, want);
                assert!(e.stores_sampled());
                assert!(e.warnings().is_empty() && e.l3miss_override().is_none());
            }
        }
        let e = IbsEffective::new(true, Some(256), k("6.16.0"), ZEN5);
        assert_eq!(e.l3miss_only, L3MissOnly::Requested);
        assert_eq!(e.l3miss_override(), None);
    }

    #[test]
    fn warnings_name_the_setting_the_kernel_and_the_consequence() {
        let e = IbsEffective::new(false, Some(256), k("6.16.3"), ZEN6);
        let w = e.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("ibs.ldlat = 256: Linux 6.16.3 also sets L3MissOnly"));
        assert!(
            w[0].contains("overriding ibs.l3miss_only = false"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("d20610c19b4a") && w[0].contains("898138efc990"));
        assert!(w[1].contains("stores are not sampled"), "{}", w[1]);
        assert!(w[1].contains("more than 256 cycles"), "{}", w[1]);
        let o = e.l3miss_override().unwrap();
        assert!(o.starts_with("effective: true, set by Linux 6.16.3"), "{o}");

        let zen5 = IbsEffective::new(false, Some(256), k("7.1.0"), ZEN5).warnings();
        assert!(zen5[0].contains("erratum 1606") && zen5[0].contains("model 0x2"));
        let unknown = IbsEffective::new(false, Some(256), None, ZEN5).warnings();
        assert!(unknown[0].contains("this kernel (release unknown)"));
        // Asked on: only the store warning.
        let asked = IbsEffective::new(true, Some(256), k("6.16.3"), ZEN6).warnings();
        assert_eq!(asked.len(), 1);
        assert!(asked[0].contains("stores are not sampled"));
    }

    #[test]
    fn display_is_the_effective_config() {
        let e = IbsEffective::new(false, Some(384), k("6.15.0"), ZEN5);
        assert_eq!(
            e.to_string(),
            "l3missonly on (forced by the kernel with ldlat), ldlat 384 cycles: \
             data-cache-missing loads over 384 cycles only, stores are not sampled"
        );
        let plain = IbsEffective::new(true, None, k("6.15.0"), ZEN5);
        assert_eq!(
            plain.to_string(),
            "l3missonly on, no ldlat, loads and stores sampled"
        );
    }
}
