//! Building the ibs_op perf_event_attr values from sysfs formats and tunables (the `format/`
//! attributes and `perf_ibs_init()` of `arch/x86/events/amd/ibs.c`;
//! `tools/perf/Documentation/perf-amd-ibs.txt`).

use super::caps::{CpuModel, IbsCaps};
use super::effective::{IbsEffective, KernelVersion};
use crate::sampler::pmu::{ConfigWords, Pmu, PmuError};

/// What the operator may tune about IBS op sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbsConfig {
    /// Ops (or cycles) between samples; rounded down to a multiple of 16.
    pub period: u64,
    /// Count dispatched ops (`cnt_ctl`) rather than cycles: the rate then follows instruction
    /// throughput instead of time.
    pub count_ops: bool,
    /// Keep only ops that missed L3 (`l3missonly`, Zen4+). `None`: on where available.
    pub l3miss_only: Option<bool>,
    /// Load-latency threshold in cycles (`ldlat`, Zen5 / Linux 6.15), 128..=2048.
    pub ldlat: Option<u32>,
    /// Only user-space samples are wanted (the kernel filters them when it can).
    pub user_only: bool,
}

impl Default for IbsConfig {
    /// Period 10000 ops as in the pghot series' runs, counting ops, L3-miss-only where the CPU has
    /// it, no latency filter, user space only.
    fn default() -> Self {
        IbsConfig {
            period: 10_000,
            count_ops: true,
            l3miss_only: None,
            ldlat: None,
            user_only: true,
        }
    }
}

/// Who drops kernel-mode samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelFilter {
    /// `swfilt` is set and the event is opened with `exclude_kernel = 1` (v6.14+): the NMI
    /// handler discards them (the NMI is still paid).
    Kernel,
    /// The event must be opened with `exclude_kernel = 0` (IBS rejects it otherwise,
    /// `perf_ibs_init()`);
    /// [`classify`](super::classify) drops kernel samples.
    Pghotd,
}

/// Everything pghotd needs to open one ibs_op event per CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbsEventConfig {
    /// `perf_event_attr.type`.
    pub pmu_type: u32,
    /// `config`, `config1`, `config2`, `config3`.
    pub words: ConfigWords,
    /// The `sample_period` to open with: a valid multiple of 16.
    pub period: u64,
    /// What the tunables asked for; differs from `period` when it was rounded down.
    pub requested_period: u64,
    pub kernel_filter: KernelFilter,
    /// pghotd sets `l3missonly` (the kernel may set it regardless: [`IbsEffective`]).
    pub l3miss_only: bool,
    /// The `ldlat` threshold pghotd sets, in cycles.
    pub ldlat: Option<u32>,
}

/// Errors building the IBS configuration.
#[derive(Debug, thiserror::Error)]
pub enum IbsEventError {
    #[error("configuring {pmu}: {source}")]
    Pmu {
        pmu: String,
        #[source]
        source: PmuError,
    },
    #[error(
        "configuring {pmu}: counting ops needs format/cnt_ctl, which this PMU lacks (caps bit 4 \
         OPCNT); count cycles instead"
    )]
    NoCntCtl { pmu: String },
    #[error(
        "configuring {pmu}: l3miss_only needs format/l3missonly, which this PMU lacks; it needs \
         a Zen4 or newer CPU and Linux 5.19+"
    )]
    NoL3MissOnly { pmu: String },
    #[error(
        "configuring {pmu}: ldlat needs format/ldlat, which this PMU lacks; it needs a Zen5 or \
         newer CPU and Linux 6.15+"
    )]
    NoLdlat { pmu: String },
    #[error(
        "configuring {pmu}: ldlat {ldlat} cycles is outside 128..=2048 (the Zen5 load-latency \
         filter, Linux 6.15+)"
    )]
    LdlatRange { pmu: String, ldlat: u32 },
    #[error(
        "configuring {pmu}: period {requested} (rounded down to {rounded}) is below the minimum \
         {min} ({min:#x})"
    )]
    PeriodTooSmall {
        pmu: String,
        requested: u64,
        rounded: u64,
        min: u64,
    },
    #[error(
        "configuring {pmu}: period {requested} is above the hardware maximum {max} ({max:#x}{})",
        if *opcntext { ", with caps OPCNTEXT" } else { ", without caps OPCNTEXT" }
    )]
    PeriodTooLarge {
        pmu: String,
        requested: u64,
        max: u64,
        opcntext: bool,
    },
}

/// Op period limits (the op PMU's `min_period` and `max_period` in `arch/x86/events/amd/ibs.c`).
pub const MIN_PERIOD: u64 = 0x90;
pub const MAX_PERIOD: u64 = 0xf_fff0;
pub const MAX_PERIOD_OPCNTEXT: u64 = 0x7ff_fff0;
pub const LDLAT_RANGE: std::ops::RangeInclusive<u32> = 128..=2048;

impl IbsEventConfig {
    pub fn build(pmu: &Pmu, caps: IbsCaps, t: &IbsConfig) -> Result<Self, IbsEventError> {
        let name = || pmu.name().to_string();
        let mut words = ConfigWords::default();
        let mut set = |field: &str, value: u64| {
            pmu.set(&mut words, field, value)
                .map_err(|source| IbsEventError::Pmu {
                    pmu: name(),
                    source,
                })
        };
        if t.count_ops {
            if !pmu.has_format("cnt_ctl") {
                return Err(IbsEventError::NoCntCtl { pmu: name() });
            }
            set("cnt_ctl", 1)?;
        }
        let l3miss_only = l3miss_wanted(pmu, t.l3miss_only)?;
        if l3miss_only {
            set("l3missonly", 1)?;
        }
        if let Some(ldlat) = t.ldlat {
            check_ldlat(pmu, ldlat)?;
            set("ldlat", u64::from(ldlat))?;
        }
        // swfilt (v6.14) is what makes exclude_kernel legal for IBS (`perf_ibs_init()`).
        let kernel_filter = if t.user_only && pmu.has_format("swfilt") {
            set("swfilt", 1)?;
            KernelFilter::Kernel
        } else {
            KernelFilter::Pghotd
        };
        Ok(IbsEventConfig {
            pmu_type: pmu.pmu_type(),
            words,
            period: valid_period(pmu, caps, t.period)?,
            requested_period: t.period,
            kernel_filter,
            l3miss_only,
            ldlat: t.ldlat,
        })
    }

    /// `perf_event_attr.exclude_kernel` to open with.
    pub fn exclude_kernel(&self) -> bool {
        self.kernel_filter == KernelFilter::Kernel
    }

    /// What the kernel will program, given its release and the CPU (see [`IbsEffective`]).
    pub fn effective(&self, kernel: Option<KernelVersion>, cpu: CpuModel) -> IbsEffective {
        IbsEffective::new(self.l3miss_only, self.ldlat, kernel, cpu)
    }

    /// The period was rounded down to a multiple of 16 (worth a log line).
    pub fn period_rounded(&self) -> bool {
        self.period != self.requested_period
    }
}

fn l3miss_wanted(pmu: &Pmu, wanted: Option<bool>) -> Result<bool, IbsEventError> {
    let available = pmu.has_format("l3missonly");
    match wanted {
        None => Ok(available),
        Some(true) if !available => Err(IbsEventError::NoL3MissOnly {
            pmu: pmu.name().to_string(),
        }),
        Some(on) => Ok(on),
    }
}

fn check_ldlat(pmu: &Pmu, ldlat: u32) -> Result<(), IbsEventError> {
    let pmu_name = pmu.name().to_string();
    if !pmu.has_format("ldlat") {
        return Err(IbsEventError::NoLdlat { pmu: pmu_name });
    }
    if !LDLAT_RANGE.contains(&ldlat) {
        return Err(IbsEventError::LdlatRange {
            pmu: pmu_name,
            ldlat,
        });
    }
    Ok(())
}

/// Hardware MaxCnt counts in 16s, so the low nibble is dropped (the kernel masks it silently
/// at open); 0x90 is the op minimum; 0xFFFF0, or 0x7FFFFF0 with OPCNTEXT, the maximum
/// (`perf_ibs_init()` and `perf_ibs_start()` in `arch/x86/events/amd/ibs.c`).
fn valid_period(pmu: &Pmu, caps: IbsCaps, requested: u64) -> Result<u64, IbsEventError> {
    let rounded = requested & !0xf;
    if rounded < MIN_PERIOD {
        return Err(IbsEventError::PeriodTooSmall {
            pmu: pmu.name().to_string(),
            requested,
            rounded,
            min: MIN_PERIOD,
        });
    }
    let max = if caps.op_cnt_ext() {
        MAX_PERIOD_OPCNTEXT
    } else {
        MAX_PERIOD
    };
    if rounded > max {
        return Err(IbsEventError::PeriodTooLarge {
            pmu: pmu.name().to_string(),
            requested,
            max,
            opcntext: caps.op_cnt_ext(),
        });
    }
    Ok(rounded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::pmu::fixture::{IBS_OP_FULL, IBS_OP_OLD, root_with};

    /// Zen5-like caps: OPCNT, OPCNTEXT, ZEN4, OPLDLAT.
    const CAPS_ZEN5: IbsCaps = IbsCaps(1 | 1 << 2 | 1 << 4 | 1 << 6 | 1 << 11 | 1 << 12);
    const CAPS_ZEN2: IbsCaps = IbsCaps(1 | 1 << 2 | 1 << 4);

    fn pmu(files: &[(&str, &str)]) -> (tempfile::TempDir, Pmu) {
        let (tmp, root) = root_with(&[("ibs_op", files)]);
        let pmu = Pmu::open(&root, "ibs_op").unwrap();
        (tmp, pmu)
    }

    fn err(pmu: &Pmu, caps: IbsCaps, t: IbsConfig) -> String {
        IbsEventConfig::build(pmu, caps, &t)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn defaults_on_a_current_kernel_use_every_published_format() {
        let (_tmp, pmu) = pmu(IBS_OP_FULL);
        let c = IbsEventConfig::build(&pmu, CAPS_ZEN5, &IbsConfig::default()).unwrap();
        assert_eq!(c.pmu_type, 11);
        assert_eq!(c.words.config, 1 << 19 | 1 << 16, "cnt_ctl and l3missonly");
        assert_eq!(
            (c.words.config1, c.words.config2),
            (0, 1),
            "no ldlat, swfilt"
        );
        assert_eq!((c.period, c.requested_period), (10_000, 10_000));
        assert!(!c.period_rounded());
        assert_eq!(c.kernel_filter, KernelFilter::Kernel);
        assert!(c.exclude_kernel());
    }

    #[test]
    fn an_old_kernel_gets_cnt_ctl_only_and_pghotd_filters_kernel_samples() {
        let (_tmp, pmu) = pmu(IBS_OP_OLD);
        let c = IbsEventConfig::build(&pmu, CAPS_ZEN2, &IbsConfig::default()).unwrap();
        assert_eq!(c.pmu_type, 9);
        assert_eq!(
            c.words,
            ConfigWords {
                config: 1 << 19,
                ..ConfigWords::default()
            }
        );
        assert_eq!(c.kernel_filter, KernelFilter::Pghotd);
        assert!(!c.exclude_kernel());
    }

    #[test]
    fn tunables_map_to_fields() {
        let (_tmp, pmu) = pmu(IBS_OP_FULL);
        let t = IbsConfig {
            period: 0x12345,
            count_ops: false,
            l3miss_only: Some(false),
            ldlat: Some(256),
            user_only: false,
        };
        let c = IbsEventConfig::build(&pmu, CAPS_ZEN5, &t).unwrap();
        assert_eq!(c.words.config, 0);
        assert_eq!((c.words.config1, c.words.config2), (256, 0));
        assert_eq!((c.period, c.requested_period), (0x12340, 0x12345));
        assert!(c.period_rounded());
        assert_eq!(c.kernel_filter, KernelFilter::Pghotd);
        // pghotd leaves l3missonly off, but the kernel is not asked what it does with ldlat.
        assert_eq!((c.l3miss_only, c.ldlat), (false, Some(256)));
        let zen5 = CpuModel {
            family: 0x1a,
            model: 0x44,
        };
        let on = |release: &str| {
            let kernel = super::super::effective::parse_release(release);
            c.effective(kernel, zen5).l3miss_only.is_on()
        };
        assert!(on("6.15.0") && on("7.1.0"));
        let zen6 = CpuModel {
            family: 0x1a,
            model: 0x50,
        };
        let e = c.effective(super::super::effective::parse_release("7.1.0"), zen6);
        assert!(!e.l3miss_only.is_on() && !e.stores_sampled());
    }

    #[test]
    fn period_limits() {
        let (_tmp, pmu) = pmu(IBS_OP_FULL);
        let with = |period| IbsConfig {
            period,
            ..IbsConfig::default()
        };
        let ok = |caps, p| {
            IbsEventConfig::build(&pmu, caps, &with(p))
                .map(|c| c.period)
                .ok()
        };
        assert_eq!(ok(CAPS_ZEN2, 0x90), Some(0x90));
        assert_eq!(ok(CAPS_ZEN2, 0x9f), Some(0x90));
        assert_eq!(ok(CAPS_ZEN2, 0xf_ffff), Some(0xf_fff0));
        assert_eq!(ok(CAPS_ZEN2, 0x10_0000), None);
        assert_eq!(ok(CAPS_ZEN5, 0x10_0000), Some(0x10_0000));
        assert_eq!(ok(CAPS_ZEN5, 0x7ff_ffff), Some(0x7ff_fff0));
        let msg = err(&pmu, CAPS_ZEN2, with(0x8f));
        assert!(
            msg.contains("period 143 (rounded down to 128) is below the minimum 144"),
            "{msg}"
        );
        let msg = err(&pmu, CAPS_ZEN5, with(0x800_0000));
        assert!(
            msg.contains("maximum 134217712 (0x7fffff0, with caps OPCNTEXT)"),
            "{msg}"
        );
        let msg = err(&pmu, CAPS_ZEN2, with(0x10_0000));
        assert!(msg.contains("(0xffff0, without caps OPCNTEXT)"), "{msg}");
    }

    #[test]
    fn missing_features_name_format_cpu_and_kernel() {
        let (_tmp, old) = pmu(IBS_OP_OLD);
        let t = IbsConfig {
            l3miss_only: Some(true),
            ..IbsConfig::default()
        };
        let msg = err(&old, CAPS_ZEN2, t);
        assert!(
            msg.contains("format/l3missonly") && msg.contains("Zen4"),
            "{msg}"
        );
        let t = IbsConfig {
            ldlat: Some(256),
            ..IbsConfig::default()
        };
        let msg = err(&old, CAPS_ZEN2, t);
        assert!(
            msg.contains("format/ldlat") && msg.contains("Zen5"),
            "{msg}"
        );
        assert!(msg.contains("Linux 6.15"), "{msg}");

        let (_tmp, full) = pmu(IBS_OP_FULL);
        for bad in [127, 2049, 0] {
            let t = IbsConfig {
                ldlat: Some(bad),
                ..IbsConfig::default()
            };
            let msg = err(&full, CAPS_ZEN5, t);
            assert!(
                msg.contains(&format!("ldlat {bad} cycles is outside 128..=2048")),
                "{msg}"
            );
            assert!(msg.contains("Zen5") && msg.contains("Linux 6.15"), "{msg}");
        }
        for good in [128, 2048] {
            let t = IbsConfig {
                ldlat: Some(good),
                ..IbsConfig::default()
            };
            assert!(IbsEventConfig::build(&full, CAPS_ZEN5, &t).is_ok());
        }

        let (_tmp, bare) = pmu(&[("type", "9")]);
        let msg = err(&bare, CAPS_ZEN2, IbsConfig::default());
        assert!(msg.contains("counting ops needs format/cnt_ctl"), "{msg}");
        let t = IbsConfig {
            count_ops: false,
            ..IbsConfig::default()
        };
        assert!(IbsEventConfig::build(&bare, CAPS_ZEN2, &t).is_ok());
    }
}
