//! `--source ibs` and `--source pebs`: the hardware decoders plugged into the per-CPU perf
//! sampler.
//!
//! In: the PMU's sysfs files and the tunables. Out: a [`PerfPlan`] whose decoder turns each
//! sample record into a [`Sample`] through `ibs::classify` or `pebs::classify`, or names the
//! drop reason's counter. Everything that needs the hardware is in `perf`; everything that
//! needs the bit layouts is in `ibs`, `pebs` and `hwsample`.

use perf_event_open_sys::bindings as b;

use super::SourceError;
use super::hwsample::{HwSample, Notes, SampleFields};
use super::ibs::{
    CpuModel, IbsCaps, IbsConfig, IbsEffective, IbsEventConfig, IbsInput, host_kernel,
};
use super::pebs::{PebsConfig, PebsEventConfig, PebsRole};
use super::perf::record::{SampleFormat, SampleRecord};
use super::perf::{EventClass, EventSpec, Group, PerfPlan, SampleDecoder};
use super::pmu::Pmu;
use crate::sample::{Sample, SourceKind};
use crate::stats::Counter;
use crate::topology::SysfsRoot;

/// What both hardware sources ask of every sample: fixed-size fields only, so the record has
/// one layout (`enum perf_event_sample_format` in `include/uapi/linux/perf_event.h`).
const HW_FORMAT: u32 = b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_ADDR
    | b::PERF_SAMPLE_CPU
    | b::PERF_SAMPLE_WEIGHT
    | b::PERF_SAMPLE_DATA_SRC
    | b::PERF_SAMPLE_PHYS_ADDR;

fn format(bits: u32) -> SampleFormat {
    SampleFormat::new(u64::from(bits))
        .unwrap_or_else(|e| unreachable!("a fixed, supported format: {e}"))
}

/// The kernel-decoded fields the classifiers read.
fn fields(rec: &SampleRecord<'_>) -> SampleFields {
    SampleFields {
        misc: rec.misc,
        ip: rec.ip,
        pid: rec.pid,
        addr: rec.addr,
        phys_addr: rec.phys_addr,
        data_src: rec.data_src,
        weight: rec.weight,
    }
}

fn apply(hw: HwSample, out: &mut Sample) {
    out.vaddr = hw.vaddr;
    out.paddr = hw.paddr;
    out.op = hw.op;
    out.served_from = hw.served_from;
    out.latency = hw.latency;
}

/// The IBS op plan: one `ibs_op` event per CPU, with the RAW MSR dump so that load/store,
/// L2-miss, latency and validity bits are read the same way on every kernel.
pub fn ibs_plan(root: &SysfsRoot, t: &IbsConfig) -> Result<(PerfPlan, String), SourceError> {
    let (config, effective) = ibs_config(root, t)?;
    if config.period_rounded() {
        tracing::warn!(
            "ibs.period {} is not a multiple of 16; using {}",
            config.requested_period,
            config.period
        );
    }
    for warning in effective.warnings() {
        tracing::warn!("{warning}");
    }
    let describe = ibs_describe(&config, &effective);
    let mut plan = ibs_decoding_plan(effective.cpu);
    plan.classes = vec![EventClass {
        cpus: None,
        events: vec![EventSpec {
            name: "ibs_op".into(),
            pmu_type: config.pmu_type,
            config: config.words.config,
            config1: config.words.config1,
            config2: config.words.config2,
            period: config.period,
            precise_ip: 0,
            exclude_kernel: config.exclude_kernel(),
            sampling: true,
            group: Group::Alone,
        }],
    }];
    Ok((plan, describe))
}

/// The ibs_op event pghotd opens for these settings, and what the running kernel will make of
/// it on this CPU (`--check-config` shows the latter too).
pub fn ibs_config(
    root: &SysfsRoot,
    t: &IbsConfig,
) -> Result<(IbsEventConfig, IbsEffective), SourceError> {
    let pmu = Pmu::open(root, "ibs_op")?;
    // The PMU exists, so the CPU has IBS; CPUID says which extensions (else the baseline).
    let caps = IbsCaps::host().unwrap_or(IbsCaps::DEFAULT);
    let config = IbsEventConfig::build(&pmu, caps, t)?;
    let effective = config.effective(host_kernel(), CpuModel::host());
    Ok((config, effective))
}

fn ibs_describe(config: &IbsEventConfig, effective: &IbsEffective) -> String {
    format!(
        "ibs (ibs_op type {}, period {}, config {:#x}, {} filters kernel samples; {effective})",
        config.pmu_type,
        config.period,
        config.words.config,
        if config.exclude_kernel() {
            "the kernel"
        } else {
            "pghotd"
        }
    )
}

/// The IBS record format and decoder without events to open: what reads rings of IBS records
/// (the sampler, and benches and tests that fill a ring themselves).
pub fn ibs_decoding_plan(cpu: CpuModel) -> PerfPlan {
    PerfPlan {
        kind: SourceKind::Ibs,
        classes: Vec::new(),
        format: format(HW_FORMAT | b::PERF_SAMPLE_RAW),
        decoder: Box::new(IbsDecoder { cpu }),
    }
}

struct IbsDecoder {
    cpu: CpuModel,
}

impl SampleDecoder for IbsDecoder {
    #[inline]
    fn decode(
        &self,
        rec: &SampleRecord<'_>,
        _: usize,
        out: &mut Sample,
        notes: &mut Notes,
    ) -> Result<(), Counter> {
        let input = IbsInput {
            sample: fields(rec),
            raw: rec.raw,
            cpu: self.cpu,
        };
        let hw = super::ibs::classify(&input, notes).map_err(|r| r.counter())?;
        apply(hw, out);
        Ok(())
    }
}

/// The PEBS plan: mem-loads (with its aux leader where the core needs one) and mem-stores on
/// each core PMU's CPUs, sharing one ring per CPU; IDENTIFIER tells their samples apart.
pub fn pebs_plan(root: &SysfsRoot, t: &PebsConfig) -> Result<(PerfPlan, String), SourceError> {
    let configs = PebsEventConfig::discover(root, t)?;
    let classes = configs.iter().map(pebs_class).collect();
    let describe = format!(
        "pebs ({} PMU {}, period {}, ldlat {}{})",
        configs.len(),
        configs
            .iter()
            .map(|c| c.pmu_name.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        t.period,
        t.ldlat,
        if t.stores { ", stores" } else { "" }
    );
    let mut plan = pebs_decoding_plan();
    plan.classes = classes;
    Ok((plan, describe))
}

/// The PEBS record format and decoder without events to open (the sampler's, and what reads
/// PEBS records from a perf.data file with that file's `sample_type`).
pub fn pebs_decoding_plan() -> PerfPlan {
    PerfPlan {
        kind: SourceKind::Pebs,
        classes: Vec::new(),
        format: format(HW_FORMAT | b::PERF_SAMPLE_IDENTIFIER),
        decoder: Box::new(PebsDecoder),
    }
}

fn pebs_class(c: &PebsEventConfig) -> EventClass {
    let events = c
        .events
        .iter()
        .map(|e| EventSpec {
            name: format!("{}/{}", c.pmu_name, e.name),
            pmu_type: c.pmu_type,
            config: e.words.config,
            config1: e.words.config1,
            config2: e.words.config2,
            period: c.period,
            precise_ip: if e.sampling { c.precise_ip } else { 0 },
            exclude_kernel: true,
            sampling: e.sampling,
            group: match e.role {
                PebsRole::Leader => Group::Leader,
                PebsRole::Loads if c.events.iter().any(|x| x.role == PebsRole::Leader) => {
                    Group::Member
                }
                PebsRole::Loads | PebsRole::Stores => Group::Alone,
            },
        })
        .collect();
    EventClass {
        cpus: c.cpus.clone(),
        events,
    }
}

struct PebsDecoder;

impl SampleDecoder for PebsDecoder {
    #[inline]
    fn decode(
        &self,
        rec: &SampleRecord<'_>,
        _: usize,
        out: &mut Sample,
        notes: &mut Notes,
    ) -> Result<(), Counter> {
        let hw = super::pebs::classify(&fields(rec), notes).map_err(|r| r.counter())?;
        apply(hw, out);
        Ok(())
    }
}

/// An IBS op RAW payload as the kernel lays it out (`perf_ibs_handle_irq()` in
/// `arch/x86/events/amd/ibs.c`): the caps word, then IbsOpCtl,
/// IbsOpRip, IbsOpData, IbsOpData2, IbsOpData3, IbsDcLinAd and IbsDcPhysAd. For tests and
/// benches that fill a ring with IBS records.
pub fn ibs_raw(caps: u32, msrs: [u64; 7]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(60);
    raw.extend_from_slice(&caps.to_ne_bytes());
    for msr in msrs {
        raw.extend_from_slice(&msr.to_ne_bytes());
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{AccessOp, DataSource};
    use crate::sampler::SinkFactory;
    use crate::sampler::collect::Collector;
    use crate::sampler::datasrc::{PerfMemDataSrc, lvl, lvlnum, op};
    use crate::sampler::perf::CpuReader;
    use crate::sampler::perf::record::build;
    use crate::sampler::perf::ring::{Ring, RingWriter};

    /// Zen4 caps: AVAIL, OPSAM, OPCNT, ZEN4 extensions.
    const CAPS: u32 = 1 | 1 << 2 | 1 << 4 | 1 << 11;
    const OP_VALID: u64 = 1 << 17 | 1 << 18;
    const VADDR: u64 = 0x7f12_3456_7008;
    const PADDR: u64 = 0x9_1234_5008;

    /// A load that missed L2 and was served by extension memory (DataSrc 8), 420 cycles.
    fn cxl_load_raw() -> Vec<u8> {
        let data2 = 1 << 6; // DataSrc[4:3] = 1, DataSrc[2:0] = 0: 8
        let data3 = 1 | 1 << 7 | 1 << 17 | 1 << 18 | 1 << 20 | 420 << 32;
        ibs_raw(CAPS, [OP_VALID, 0x40_1000, 0, data2, data3, VADDR, PADDR])
    }

    fn record(misc: u16, raw: &[u8]) -> SampleRecord<'_> {
        SampleRecord {
            misc,
            ip: 0x40_1000,
            pid: 77,
            tid: 78,
            time: 5,
            addr: VADDR,
            cpu: 1,
            raw: Some(raw),
            phys_addr: PADDR,
            ..build::empty()
        }
    }

    fn drain(plan: &PerfPlan, records: &[Vec<u8>]) -> crate::sampler::collect::Collected {
        let mut ring = Ring::in_memory(1 << 14).unwrap();
        for r in records {
            assert!(RingWriter::new(&ring).push(r));
        }
        let sinks = Collector::default();
        let mut sink = sinks.sink();
        CpuReader::new(plan, 1).drain_ring(&mut ring, &mut *sink);
        sinks.take()
    }

    #[test]
    fn ibs_records_become_samples_with_their_source_or_a_drop_counter() {
        let plan = ibs_decoding_plan(CpuModel::UNKNOWN);
        let raw = cxl_load_raw();
        let kernel = record(1, &raw); // cpumode kernel
        let mut l1_raw = raw.clone();
        l1_raw[36..44].copy_from_slice(&(1u64 | 1 << 17 | 1 << 18).to_ne_bytes()); // no DcMiss
        let got = drain(
            &plan,
            &[
                build::sample(plan.format, &record(2, &raw)),
                build::sample(plan.format, &kernel),
                build::sample(plan.format, &record(2, &l1_raw)),
            ],
        );
        assert_eq!(got.samples.len(), 1);
        let s = got.samples[0];
        assert_eq!((s.pid, s.tid, s.cpu, s.vaddr), (77, 78, 1, VADDR));
        assert_eq!(s.paddr, Some(PADDR));
        assert_eq!((s.op, s.served_from), (AccessOp::Load, DataSource::ExtMem));
        assert_eq!((s.latency, s.source), (Some(420), SourceKind::Ibs));
        assert_eq!(got.count_of(Counter::HwhintKernelMode), 1);
        assert_eq!(got.count_of(Counter::HwhintL1Hits), 1);
    }

    #[test]
    fn the_ibs_description_carries_what_the_kernel_makes_of_ldlat() {
        use crate::sampler::ibs::parse_release;
        use crate::sampler::pmu::fixture::{IBS_OP_FULL, root_with};
        let (_tmp, root) = root_with(&[("ibs_op", IBS_OP_FULL)]);
        let t = IbsConfig {
            l3miss_only: Some(false),
            ldlat: Some(256),
            ..IbsConfig::default()
        };
        // The host part runs (this VM has no IBS: the baseline caps), whatever the host is.
        let (config, _) = ibs_config(&root, &t).unwrap();
        assert_eq!(
            config.words.config & 1 << 16,
            0,
            "pghotd leaves l3missonly off"
        );
        let zen6 = CpuModel {
            family: 0x1a,
            model: 0x50,
        };
        let forced = config.effective(parse_release("6.17.1"), zen6);
        let text = ibs_describe(&config, &forced);
        assert!(
            text.ends_with(
                "; l3missonly on (forced by the kernel with ldlat), ldlat 256 cycles: \
                 data-cache-missing loads over 256 cycles only, stores are not sampled)"
            ),
            "{text}"
        );
        let kept = config.effective(parse_release("7.1.0"), zen6);
        assert!(
            ibs_describe(&config, &kept).contains("; l3missonly off, ldlat 256"),
            "{kept}"
        );
    }

    #[test]
    fn ibs_raw_tolerance_reaches_the_counters() {
        let plan = ibs_decoding_plan(CpuModel::UNKNOWN);
        let mut longer = cxl_load_raw();
        longer.extend_from_slice(&[0xab; 8]);
        let short = &cxl_load_raw()[..59];
        // What a v6.1+ kernel reports for the same load: mem_op LOAD, LVLNUM_CXL.
        let cxl = PerfMemDataSrc(0)
            .with_mem_op(op::LOAD)
            .with_lvl_num(lvlnum::CXL);
        let mut fallback = record(2, short);
        fallback.data_src = cxl.0;
        let got = drain(
            &plan,
            &[
                build::sample(plan.format, &record(2, &longer)),
                build::sample(plan.format, &fallback),
                build::sample(plan.format, &record(2, short)),
            ],
        );
        assert_eq!(got.samples.len(), 2);
        assert!(
            got.samples
                .iter()
                .all(|s| s.served_from == DataSource::ExtMem)
        );
        assert_eq!(got.count_of(Counter::IbsRawLongerThanKnown), 1);
        assert_eq!(got.count_of(Counter::IbsRawFallbackDecoded), 1);
        assert_eq!(got.count_of(Counter::HwhintInvalidSamples), 1);
    }

    #[test]
    fn pebs_records_are_classified_from_their_data_source() {
        let plan = pebs_decoding_plan();
        let ram = PerfMemDataSrc(0)
            .with_mem_op(op::LOAD)
            .with_mem_lvl(lvl::LOC_RAM | lvl::HIT)
            .with_lvl_num(lvlnum::RAM);
        let l1 = PerfMemDataSrc(0)
            .with_mem_op(op::LOAD)
            .with_mem_lvl(lvl::L1 | lvl::HIT)
            .with_lvl_num(lvlnum::L1);
        let rec = |data_src: PerfMemDataSrc| SampleRecord {
            misc: 2,
            pid: 9,
            addr: VADDR,
            weight: 250,
            data_src: data_src.0,
            ..build::empty()
        };
        let got = drain(
            &plan,
            &[
                build::sample(plan.format, &rec(ram)),
                build::sample(plan.format, &rec(l1)),
            ],
        );
        assert_eq!(got.samples.len(), 1);
        assert_eq!(got.samples[0].served_from, DataSource::LocalDram);
        assert_eq!(got.samples[0].latency, Some(250));
        assert_eq!(got.count_of(Counter::HwhintL1Hits), 1);
    }

    #[test]
    fn pebs_plans_group_loads_under_the_aux_leader_and_keep_hybrid_cpu_lists() {
        let config = PebsEventConfig {
            pmu_name: "cpu_core".into(),
            pmu_type: 8,
            cpus: Some(vec![0, 1, 2, 3]),
            events: vec![
                super::super::pebs::PebsEvent {
                    name: "mem-loads-aux".into(),
                    words: Default::default(),
                    role: PebsRole::Leader,
                    sampling: false,
                },
                super::super::pebs::PebsEvent {
                    name: "mem-loads".into(),
                    words: Default::default(),
                    role: PebsRole::Loads,
                    sampling: true,
                },
                super::super::pebs::PebsEvent {
                    name: "mem-stores".into(),
                    words: Default::default(),
                    role: PebsRole::Stores,
                    sampling: true,
                },
            ],
            period: 2000,
            precise_ip: 2,
        };
        let class = pebs_class(&config);
        let groups: Vec<Group> = class.events.iter().map(|e| e.group).collect();
        assert_eq!(groups, [Group::Leader, Group::Member, Group::Alone]);
        assert_eq!(
            class.events[0].precise_ip, 0,
            "the aux leader does not sample"
        );
        assert_eq!(class.cpus, Some(vec![0, 1, 2, 3]));
        assert_eq!(class.events[1].name, "cpu_core/mem-loads");
    }

    #[test]
    fn a_machine_without_ibs_or_pebs_says_which_pmu_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysfsRoot::new(dir.path());
        let err = ibs_plan(&root, &IbsConfig::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("ibs_op"), "{err}");
        let err = pebs_plan(&root, &PebsConfig::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("cpu"), "{err}");
    }
}
