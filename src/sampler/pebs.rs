//! Intel PEBS memory sampling: event configuration from the core PMU's sysfs aliases, and
//! classification of the kernel-decoded samples.
//!
//! In: the core PMU(s) under `bus/event_source/devices/` (`cpu`, or `cpu_core` and `cpu_atom`
//! on hybrid parts) and [`PebsConfig`]; per sample the record's [`SampleFields`]. Out: one
//! [`PebsEventConfig`] per core PMU listing the events to open on each of its CPUs, and per
//! sample an [`HwSample`] or a [`DropReason`]. Facts: the `mem-loads`, `mem-stores` and
//! `mem-loads-aux` event aliases and `intel_pmu_hw_config()` in `arch/x86/events/intel/core.c`;
//! `precise_ip` in `man 2 perf_event_open`.

use crate::sampler::hwsample::{
    DropReason, HwSample, LfbMeans, Notes, SampleFields, classify_decoded,
};
use crate::sampler::pmu::{ConfigWords, Pmu, PmuError};
use crate::topology::SysfsRoot;
use crate::topology::sysfs::parse_list;

/// What the operator may tune about PEBS memory sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PebsConfig {
    /// Qualifying loads (or stores) between samples. 2000 gives a rate near IBS's 10000 ops for
    /// memory-bound code, since only loads over `ldlat` count.
    pub period: u64,
    /// Load-latency threshold in cycles: 30 like `perf mem` (the sysfs alias says 3, which
    /// samples mostly L1 hits).
    pub ldlat: u32,
    /// Also sample stores (`mem-stores`).
    pub stores: bool,
}

impl Default for PebsConfig {
    fn default() -> Self {
        PebsConfig {
            period: 2000,
            ldlat: 30,
            stores: true,
        }
    }
}

/// What an event is for within the per-CPU list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PebsRole {
    /// `mem-loads-aux`: opened first, as the leader of the loads' group, not sampling.
    /// Golden Cove and later refuse DATA_SRC on mem-loads without it (ENODATA,
    /// `intel_pmu_hw_config()`).
    Leader,
    /// `mem-loads`: joins the preceding Leader's group when there is one.
    Loads,
    /// `mem-stores`: its own group.
    Stores,
}

/// One event to open per CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PebsEvent {
    /// The sysfs alias it came from.
    pub name: String,
    pub words: ConfigWords,
    pub role: PebsRole,
    /// Opened with `sample_period` and `precise_ip`; the aux leader only counts.
    pub sampling: bool,
}

/// Everything needed to open PEBS memory sampling on one core PMU's CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PebsEventConfig {
    pub pmu_name: String,
    /// `perf_event_attr.type` (4 = PERF_TYPE_RAW for a non-hybrid `cpu`).
    pub pmu_type: u32,
    /// The CPUs this PMU covers (`<pmu>/cpus` on hybrid parts); `None` means all of them.
    pub cpus: Option<Vec<u32>>,
    /// In open order.
    pub events: Vec<PebsEvent>,
    pub period: u64,
    /// PEBS needs precise_ip >= 1; 2 asks for zero skid (`man 2 perf_event_open`).
    pub precise_ip: u8,
}

/// Errors building the PEBS configuration.
#[derive(Debug, thiserror::Error)]
pub enum PebsError {
    #[error(transparent)]
    Pmu(#[from] PmuError),
    #[error(
        "configuring PEBS on {pmu}: no events/{alias} alias; memory sampling needs an Intel CPU \
         with PEBS and a kernel that publishes it"
    )]
    MissingAlias { pmu: String, alias: &'static str },
    #[error("configuring PEBS on {pmu}: the mem-loads latency threshold: {source}")]
    Ldlat {
        pmu: String,
        #[source]
        source: PmuError,
    },
    #[error("configuring PEBS on {pmu}: period must be at least 1")]
    ZeroPeriod { pmu: String },
    #[error("reading the CPUs of {pmu}: cannot parse '{text}' as a CPU list")]
    Cpus { pmu: String, text: String },
}

const MEM_LOADS: &str = "mem-loads";
const MEM_STORES: &str = "mem-stores";
const MEM_LOADS_AUX: &str = "mem-loads-aux";
/// Hybrid core PMUs, big cores first (as `arch/x86/events/intel/core.c` names them).
const HYBRID_PMUS: [&str; 2] = ["cpu_core", "cpu_atom"];
const PRECISE_IP: u8 = 2;

impl PebsEventConfig {
    /// Builds the events for one core PMU.
    pub fn build(pmu: &Pmu, t: &PebsConfig) -> Result<Self, PebsError> {
        let pmu_name = pmu.name().to_string();
        if t.period == 0 {
            return Err(PebsError::ZeroPeriod { pmu: pmu_name });
        }
        let mut events = Vec::with_capacity(3);
        if pmu.has_event(MEM_LOADS_AUX) {
            events.push(event(pmu, MEM_LOADS_AUX, PebsRole::Leader, false)?);
        }
        let mut loads = event(pmu, MEM_LOADS, PebsRole::Loads, true)?;
        pmu.set(&mut loads.words, "ldlat", u64::from(t.ldlat))
            .map_err(|source| PebsError::Ldlat {
                pmu: pmu_name.clone(),
                source,
            })?;
        events.push(loads);
        if t.stores {
            events.push(event(pmu, MEM_STORES, PebsRole::Stores, true)?);
        }
        Ok(PebsEventConfig {
            pmu_name,
            pmu_type: pmu.pmu_type(),
            cpus: None,
            events,
            period: t.period,
            precise_ip: PRECISE_IP,
        })
    }

    /// Finds the core PMU(s): `cpu`, or on hybrid parts `cpu_core` and `cpu_atom` (each with
    /// its own type and CPU list).
    pub fn discover(root: &SysfsRoot, t: &PebsConfig) -> Result<Vec<Self>, PebsError> {
        let mut hybrid = Vec::new();
        for name in HYBRID_PMUS {
            match Pmu::open(root, name) {
                Ok(pmu) => hybrid.push(pmu),
                Err(PmuError::Missing { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if hybrid.is_empty() {
            return Ok(vec![Self::build(&Pmu::open(root, "cpu")?, t)?]);
        }
        hybrid
            .iter()
            .map(|pmu| {
                let mut config = Self::build(pmu, t)?;
                config.cpus = pmu_cpus(root, pmu.name())?;
                Ok(config)
            })
            .collect()
    }
}

fn event(
    pmu: &Pmu,
    alias: &'static str,
    role: PebsRole,
    sampling: bool,
) -> Result<PebsEvent, PebsError> {
    if !pmu.has_event(alias) {
        return Err(PebsError::MissingAlias {
            pmu: pmu.name().to_string(),
            alias,
        });
    }
    Ok(PebsEvent {
        name: alias.to_string(),
        words: pmu.event(alias)?,
        role,
        sampling,
    })
}

/// `<pmu>/cpus`, e.g. `0-15`; absent means all CPUs.
fn pmu_cpus(root: &SysfsRoot, pmu: &str) -> Result<Option<Vec<u32>>, PebsError> {
    let rel = format!("{}/{pmu}/cpus", crate::sampler::pmu::PMU_DIR);
    let Some(text) = root.read_optional(&rel).map_err(PmuError::from)? else {
        return Ok(None);
    };
    parse_list(&text).map(Some).ok_or_else(|| PebsError::Cpus {
        pmu: pmu.to_string(),
        text,
    })
}

/// Classifies a PEBS sample from its kernel-decoded DATA_SRC: L1, LFB and L2 hits, samples
/// without a user data address and kernel-mode samples are dropped.
pub fn classify(fields: &SampleFields, notes: &mut Notes) -> Result<HwSample, DropReason> {
    classify_decoded(fields, LfbMeans::L1Hit, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{AccessOp, DataSource};
    use crate::sampler::datasrc::{PERF_MEM_NA, PerfMemDataSrc, lvl, lvlnum};
    use crate::sampler::hwsample::DecodeNote;
    use crate::sampler::hwsample::testutil::{load, user_sample};
    use crate::sampler::pmu::fixture::{IBS_OP_FULL, INTEL_CPU, root_with};

    const PRE_GLC: &[(&str, &str)] = &[
        ("type", "4"),
        ("format/event", "config:0-7"),
        ("format/umask", "config:8-15"),
        ("format/ldlat", "config1:0-15"),
        ("events/mem-loads", "event=0xcd,umask=0x1,ldlat=3"),
        ("events/mem-stores", "event=0xd0,umask=0x82"),
    ];

    #[test]
    fn golden_cove_leads_with_mem_loads_aux() {
        let (_tmp, root) = root_with(&[("cpu", INTEL_CPU)]);
        let configs = PebsEventConfig::discover(&root, &PebsConfig::default()).unwrap();
        assert_eq!(configs.len(), 1);
        let c = &configs[0];
        assert_eq!(
            (c.pmu_name.as_str(), c.pmu_type, c.cpus.as_ref()),
            ("cpu", 4, None)
        );
        assert_eq!((c.period, c.precise_ip), (2000, 2));
        let summary: Vec<_> = c
            .events
            .iter()
            .map(|e| {
                (
                    e.name.as_str(),
                    e.role,
                    e.sampling,
                    e.words.config,
                    e.words.config1,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("mem-loads-aux", PebsRole::Leader, false, 0x8203, 0),
                ("mem-loads", PebsRole::Loads, true, 0x01cd, 30),
                ("mem-stores", PebsRole::Stores, true, 0x02cd, 0),
            ]
        );
    }

    #[test]
    fn older_cores_have_no_leader_and_stores_are_optional() {
        let (_tmp, root) = root_with(&[("cpu", PRE_GLC)]);
        let pmu = Pmu::open(&root, "cpu").unwrap();
        let t = PebsConfig {
            ldlat: 100,
            stores: false,
            period: 7,
        };
        let c = PebsEventConfig::build(&pmu, &t).unwrap();
        assert_eq!(c.events.len(), 1);
        assert_eq!(c.events[0].role, PebsRole::Loads);
        assert_eq!(
            (c.events[0].words.config, c.events[0].words.config1),
            (0x01cd, 100)
        );
        assert_eq!(c.period, 7);
        let t = PebsConfig::default();
        let c = PebsEventConfig::build(&pmu, &t).unwrap();
        assert_eq!(c.events[1].words.config, 0x82d0);
    }

    #[test]
    fn hybrid_parts_get_one_config_per_core_pmu() {
        let core: Vec<_> = INTEL_CPU
            .iter()
            .map(|&(k, v)| if k == "type" { (k, "8") } else { (k, v) })
            .chain([("cpus", "0-7")])
            .collect();
        let atom = [
            ("type", "10"),
            ("cpus", "8-15"),
            ("format/event", "config:0-7"),
            ("format/umask", "config:8-15"),
            ("format/ldlat", "config1:0-15"),
            ("events/mem-loads", "event=0xd0,umask=0x5,ldlat=3"),
            ("events/mem-stores", "event=0xd0,umask=0x6"),
        ];
        let (_tmp, root) = root_with(&[("cpu_core", &core), ("cpu_atom", &atom)]);
        let configs = PebsEventConfig::discover(&root, &PebsConfig::default()).unwrap();
        let names: Vec<_> = configs
            .iter()
            .map(|c| (c.pmu_name.as_str(), c.pmu_type))
            .collect();
        assert_eq!(names, [("cpu_core", 8), ("cpu_atom", 10)]);
        assert_eq!(configs[0].cpus, Some((0..8).collect()));
        assert_eq!(configs[1].cpus, Some((8..16).collect()));
        assert_eq!(configs[0].events[0].role, PebsRole::Leader);
        assert_eq!(configs[1].events[0].words.config, 0x05d0);
    }

    fn discover_err(root: &SysfsRoot) -> String {
        PebsEventConfig::discover(root, &PebsConfig::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_the_missing_pmu_or_alias() {
        let (_tmp, root) = root_with(&[("ibs_op", IBS_OP_FULL)]);
        let msg = discover_err(&root);
        assert!(
            msg.contains("opening PMU cpu") && msg.contains("not an Intel CPU"),
            "{msg}"
        );

        // An AMD core PMU: `cpu` exists, without the PEBS aliases.
        let (_tmp, root) = root_with(&[("cpu", &[("type", "4"), ("format/event", "config:0-7")])]);
        let msg = discover_err(&root);
        assert!(msg.contains("no events/mem-loads alias"), "{msg}");

        let no_stores: Vec<_> = PRE_GLC
            .iter()
            .copied()
            .filter(|(k, _)| !k.contains("stores"))
            .collect();
        let (_tmp, root) = root_with(&[("cpu", &no_stores)]);
        let msg = discover_err(&root);
        assert!(msg.contains("no events/mem-stores alias"), "{msg}");

        let no_ldlat: Vec<_> = PRE_GLC
            .iter()
            .copied()
            .filter(|(k, _)| *k != "format/ldlat")
            .collect();
        let (_tmp, root) = root_with(&[("cpu", &no_ldlat)]);
        let msg = discover_err(&root);
        assert!(
            msg.contains("resolving event alias") && msg.contains("'ldlat'"),
            "{msg}"
        );

        let (_tmp, root) = root_with(&[("cpu", PRE_GLC)]);
        let pmu = Pmu::open(&root, "cpu").unwrap();
        let t = PebsConfig {
            ldlat: 70_000,
            ..PebsConfig::default()
        };
        let msg = PebsEventConfig::build(&pmu, &t).unwrap_err().to_string();
        assert!(
            msg.contains("latency threshold") && msg.contains("16 bits"),
            "{msg}"
        );
        let t = PebsConfig {
            period: 0,
            ..PebsConfig::default()
        };
        assert!(PebsEventConfig::build(&pmu, &t).is_err());
    }

    /// `union perf_mem_data_src` values, written out from `include/uapi/linux/perf_event.h`
    /// for the vectors below (not this crate's constants): each `PERF_MEM_<field>_<value>`
    /// shifted by its `PERF_MEM_<field>_SHIFT`.
    mod uapi {
        pub const OP_LOAD: u64 = 0x2; // PERF_MEM_OP_LOAD, shift 0
        pub const LVL_SHIFT: u32 = 5;
        pub const LVL_HIT: u64 = 0x2 << LVL_SHIFT;
        pub const SNOOP_SHIFT: u32 = 19;
        pub const SNOOP_NA: u64 = 0x1 << SNOOP_SHIFT;
        pub const SNOOP_NONE: u64 = 0x2 << SNOOP_SHIFT;
        pub const SNOOP_HIT: u64 = 0x4 << SNOOP_SHIFT;
        /// PERF_MEM_TLB_HIT 0x2 | PERF_MEM_TLB_L1 0x8 | PERF_MEM_TLB_L2 0x10, shift 26: what
        /// `pnc_latency_data()` and `pebs_set_tlb_lock()` add for a load that hit the STLB.
        pub const TLB_HIT_L1_L2: u64 = (0x2 | 0x8 | 0x10) << 26;
        pub const LVLNUM_SHIFT: u32 = 33;
        pub const REMOTE: u64 = 1 << 37; // PERF_MEM_REMOTE_REMOTE
        pub const BLK_NA: u64 = 0x1 << 40; // PERF_MEM_BLK_NA
        pub const REGION_SHIFT: u32 = 46;
    }

    /// A user load with this DATA_SRC, a physical address and a latency.
    fn kernel_load(data_src: u64) -> SampleFields {
        SampleFields {
            phys_addr: 0x1_2345_6000,
            weight: 250,
            ..user_sample(PerfMemDataSrc(data_src))
        }
    }

    fn served_from(data_src: u64) -> DataSource {
        classify(&kernel_load(data_src), &mut Notes::default())
            .unwrap()
            .served_from
    }

    #[test]
    fn panther_cove_l0_hit_is_an_l1_hit() {
        use uapi::*;
        // `pnc_pebs_l2_hit_data_source[0x01]` in `arch/x86/events/intel/ds.c`:
        // OP_LH | LEVEL(L0) | P(SNOOP, NONE), no mem_lvl level bit; `pnc_latency_data()`
        // adds the TLB hit and BLK NA. PERF_MEM_LVLNUM_L0 is 0x07.
        let l0 = OP_LOAD | LVL_HIT | SNOOP_NONE | TLB_HIT_L1_L2 | 0x7 << LVLNUM_SHIFT | BLK_NA;
        assert_eq!(
            classify(&kernel_load(l0), &mut Notes::default()),
            Err(DropReason::L1Hit)
        );
    }

    #[test]
    fn diamond_rapids_omr_regions() {
        use uapi::*;
        // `omr_data_source[]` and `parse_omr_data_source()` in `arch/x86/events/intel/ds.c`,
        // for an L2 miss with omr_hitm 0 (so P(SNOOP, HIT)) and `pnc_latency_data()`'s TLB
        // and BLK bits. PERF_MEM_LVL_L3 0x40, LOC_RAM 0x80, REM_RAM1 0x100; LVLNUM_L3 0x3,
        // LVLNUM_RAM 0xd.
        let common = OP_LOAD | LVL_HIT | SNOOP_HIT | TLB_HIT_L1_L2 | BLK_NA;
        let ram = 0xd << LVLNUM_SHIFT;
        let l3 = 0x40 << LVL_SHIFT | 0x3 << LVLNUM_SHIFT;
        let region = |r: u64| r << REGION_SHIFT;
        let cases = [
            // 0x08 memory region 0, local: LEVEL(RAM) | P(REGION, MEM0) | P(LVL, LOC_RAM).
            (ram | region(0x8) | 0x80 << LVL_SHIFT, DataSource::LocalDram),
            // 0x09 memory region 1, omr_remote: P(LVL, REM_RAM1) | REM.
            (
                ram | region(0x9) | 0x100 << LVL_SHIFT | REMOTE,
                DataSource::RemoteDram,
            ),
            // 0x07 MMIO: LEVEL(RAM) | P(REGION, MMIO) and no RAM level bit; not DRAM.
            (ram | region(0x7), DataSource::Unknown),
            // 0x05 other CA shared cache: P(LVL, L3) | LEVEL(L3) | P(REGION, O_SHARE).
            (l3 | region(0x5), DataSource::PeerCache),
            // 0x02 local CA shared cache, omr_snoop and omr_promoted 0: SNOOP HIT | NA.
            (l3 | region(0x2) | SNOOP_NA, DataSource::L3),
        ];
        for (data_src, want) in cases {
            assert_eq!(served_from(common | data_src), want, "{data_src:#x}");
        }
    }

    #[test]
    fn an_unknown_region_is_counted_and_the_level_decides() {
        use uapi::*;
        // A local RAM load (`pebs_data_source[0x0c]`: P(LVL, LOC_RAM) | LEVEL(RAM)) with a
        // region value the header does not define (it stops at MEM7, 0x0f).
        let local_ram = OP_LOAD | LVL_HIT | 0x80 << LVL_SHIFT | SNOOP_NONE | 0xd << LVLNUM_SHIFT;
        let mut notes = Notes::default();
        let s = classify(&kernel_load(local_ram | 0x13 << REGION_SHIFT), &mut notes).unwrap();
        assert_eq!(s.served_from, DataSource::LocalDram);
        assert!(notes.contains(DecodeNote::DataSrcRegionUnknown));
        let mut notes = Notes::default();
        classify(&kernel_load(local_ram | 0x8 << REGION_SHIFT), &mut notes).unwrap();
        assert!(notes.is_empty());
    }

    /// A sampled load that hit at `lvl_bits`, with a physical address and a latency.
    fn sample(lvl_bits: u64, num: u64) -> SampleFields {
        SampleFields {
            phys_addr: 0x1_2345_6000,
            weight: 250,
            ..user_sample(load(lvl_bits | lvl::HIT, num))
        }
    }

    #[test]
    fn pebs_drops_core_cache_hits_including_lfb() {
        let drops = [
            (sample(lvl::L1, lvlnum::L1), DropReason::L1Hit),
            (sample(lvl::LFB, lvlnum::LFB), DropReason::L1Hit),
            (sample(lvl::L2, lvlnum::L2), DropReason::L2Hit),
            (user_sample(PERF_MEM_NA), DropReason::NonLoadStore),
        ];
        for (f, want) in drops {
            assert_eq!(classify(&f, &mut Notes::default()), Err(want), "{f:?}");
        }
        let kernel = SampleFields {
            misc: 1,
            ..sample(lvl::L3, lvlnum::L3)
        };
        assert_eq!(
            classify(&kernel, &mut Notes::default()),
            Err(DropReason::KernelMode)
        );
        let no_addr = SampleFields {
            addr: 0,
            ..sample(lvl::L3, lvlnum::L3)
        };
        assert_eq!(
            classify(&no_addr, &mut Notes::default()),
            Err(DropReason::InvalidAddr)
        );
        let kaddr = SampleFields {
            addr: 1 << 63,
            ..sample(lvl::L3, lvlnum::L3)
        };
        assert_eq!(
            classify(&kaddr, &mut Notes::default()),
            Err(DropReason::KernelAddr)
        );
    }

    #[test]
    fn pebs_keeps_memory_loads_with_latency() {
        let remote = SampleFields {
            data_src: load(lvl::REM_RAM1 | lvl::HIT, lvlnum::RAM)
                .with_remote(true)
                .0,
            ..sample(0, 0)
        };
        let s = classify(&remote, &mut Notes::default()).unwrap();
        assert_eq!(
            (s.op, s.served_from),
            (AccessOp::Load, DataSource::RemoteDram)
        );
        assert_eq!(
            (s.vaddr, s.paddr, s.latency),
            (0x7f00_0000_1000, Some(0x1_2345_6000), Some(250))
        );
        let l3 = classify(&sample(lvl::L3, lvlnum::L3), &mut Notes::default()).unwrap();
        assert_eq!(l3.served_from, DataSource::L3);
    }

    #[test]
    fn sandy_bridge_to_broadwell_remote_dram_and_remote_cache() {
        use uapi::*;
        // `pebs_data_source[]` ("Version for Sandy Bridge and later") in
        // `arch/x86/events/intel/ds.c`, which those cores use unpatched; `load_latency_data()`
        // adds the TLB hit and, before Ice Lake's block info, BLK NA. PERF_MEM_LVL_L3 0x40,
        // LOC_RAM 0x80, REM_RAM1 0x100, REM_CCE1 0x400; SNOOP_MISS 0x8, SNOOP_HITM 0x10;
        // LVLNUM_L3 0x3, LVLNUM_RAM 0xd.
        let common = OP_LOAD | LVL_HIT | TLB_HIT_L1_L2 | BLK_NA;
        let lvl = |bits: u64| bits << LVL_SHIFT;
        let l3 = 0x3 << LVLNUM_SHIFT;
        let ram = 0xd << LVLNUM_SHIFT;
        let none_miss = SNOOP_NONE | 0x8 << SNOOP_SHIFT;
        let cases = [
            // 0x04 L3 hit: P(LVL, L3) | LEVEL(L3) | P(SNOOP, NONE).
            (0x04, lvl(0x40) | l3 | SNOOP_NONE, DataSource::L3),
            // 0x08 L3 miss, snoop hit: P(LVL, REM_CCE1) | REM | LEVEL(L3) | P(SNOOP, HIT).
            (
                0x08,
                lvl(0x400) | REMOTE | l3 | SNOOP_HIT,
                DataSource::PeerCache,
            ),
            // 0x09 the same with P(SNOOP, HITM).
            (
                0x09,
                lvl(0x400) | REMOTE | l3 | 0x10 << SNOOP_SHIFT,
                DataSource::PeerCache,
            ),
            // 0x0a L3 miss, shared: P(LVL, LOC_RAM) | LEVEL(RAM) | P(SNOOP, HIT).
            (0x0a, lvl(0x80) | ram | SNOOP_HIT, DataSource::LocalDram),
            // 0x0b L3 miss, shared: P(LVL, REM_RAM1) | REM | LEVEL(L3) | P(SNOOP, HIT).
            (
                0x0b,
                lvl(0x100) | REMOTE | l3 | SNOOP_HIT,
                DataSource::RemoteDram,
            ),
            // 0x0c L3 miss, excl: P(LVL, LOC_RAM) | LEVEL(RAM) | SNOOP_NONE_MISS.
            (0x0c, lvl(0x80) | ram | none_miss, DataSource::LocalDram),
            // 0x0d L3 miss, excl: P(LVL, REM_RAM1) | LEVEL(RAM) | REM | SNOOP_NONE_MISS.
            (
                0x0d,
                lvl(0x100) | ram | REMOTE | none_miss,
                DataSource::RemoteDram,
            ),
        ];
        for (dse, data_src, want) in cases {
            assert_eq!(served_from(common | data_src), want, "dse {dse:#x}");
        }
        // 0x00 unknown L3 miss: P(OP, LOAD) | P(LVL, MISS) | LEVEL(L3) | P(SNOOP, NA); kept
        // with no source (the node's tier decides).
        let unknown = OP_LOAD | lvl(0x4) | l3 | SNOOP_NA | TLB_HIT_L1_L2 | BLK_NA;
        assert_eq!(served_from(unknown), DataSource::Unknown);
    }

    #[test]
    fn skylake_and_later_remote_dram_and_pmem() {
        use uapi::*;
        // `__intel_pmu_pebs_data_source_skl()` in `arch/x86/events/intel/ds.c` patches the
        // table with LEVEL() alone, no mem_lvl level bit. `intel_pmu_init()` in
        // `arch/x86/events/intel/core.c` passes pmem = true on Sapphire and Granite Rapids:
        // ds.c has no LEVEL(CXL) entry (LN(CXL) is the AMD IBS driver's, `g_zen4_data_src[]`),
        // so CXL memory shows up as RAM (0x0b when remote) or PMEM (0x08, 0x09).
        let common = OP_LOAD | LVL_HIT | TLB_HIT_L1_L2;
        let cases = [
            // 0x08: OP_LH | LEVEL(PMEM) | P(SNOOP, HIT); PERF_MEM_LVLNUM_PMEM 0xe.
            (0x08, 0xe << LVLNUM_SHIFT | SNOOP_HIT, DataSource::ExtMem),
            // 0x09: OP_LH | LEVEL(PMEM) | REM | P(SNOOP, HIT).
            (
                0x09,
                0xe << LVLNUM_SHIFT | REMOTE | SNOOP_HIT,
                DataSource::ExtMem,
            ),
            // 0x0b: OP_LH | LEVEL(RAM) | REM | P(SNOOP, NONE).
            (
                0x0b,
                0xd << LVLNUM_SHIFT | REMOTE | SNOOP_NONE,
                DataSource::RemoteDram,
            ),
            // 0x0d: OP_LH | LEVEL(ANY_CACHE) | REM | P(SNOOP, HITM); LVLNUM_ANY_CACHE 0xb.
            (
                0x0d,
                0xb << LVLNUM_SHIFT | REMOTE | 0x10 << SNOOP_SHIFT,
                DataSource::PeerCache,
            ),
        ];
        for (dse, data_src, want) in cases {
            assert_eq!(served_from(common | data_src), want, "dse {dse:#x}");
        }
    }
}
