//! Which of pghotd's decoders reads each event of a perf.data file, from the file's own header:
//! the event's PMU by name from HEADER_PMU_MAPPINGS (a PMU's type number is given out when the
//! recording kernel registered it, so `ibs_op` may be 11 there and 9 here), the CPU model for
//! the IBS errata from HEADER_CPUID, and the record layout from the attr's `sample_type`.

use linux_perf_data::linux_perf_event_reader::{
    PerfEventType, SamplingPolicy, SoftwareCounterType,
};
use linux_perf_data::{AttributeDescription, PerfFile};
use perf_event_open_sys::bindings as b;

use crate::sampler::hwplan::{ibs_decoding_plan, pebs_decoding_plan};
use crate::sampler::ibs::CpuModel;
use crate::sampler::pagefault::{self, PageFaultConfig};
use crate::sampler::perf::PerfPlan;
use crate::sampler::perf::record::SampleFormat;

/// What the file's header says about the machine that recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorder {
    /// HEADER_PMU_MAPPINGS: type number and name of every PMU the recording kernel had.
    pub pmus: Vec<(u32, String)>,
    /// HEADER_CPUID as written, e.g. `AuthenticAMD,25,17,1`.
    pub cpuid: Option<String>,
    /// The family and model in `cpuid`; [`CpuModel::UNKNOWN`] without one.
    pub cpu: CpuModel,
}

impl Recorder {
    /// Reads the mappings and the CPUID string. A feature section that does not parse is an
    /// error: decoding with a guessed PMU or CPU would be silently wrong.
    pub fn of(file: &PerfFile) -> Result<Recorder, String> {
        let pmus = file
            .pmu_mappings()
            .map_err(|e| format!("the PMU mappings (HEADER_PMU_MAPPINGS): {e}"))?
            .map(|m| m.0.into_iter().collect())
            .unwrap_or_default();
        let cpuid = file
            .cpu_id()
            .map_err(|e| format!("the CPU id (HEADER_CPUID): {e}"))?
            .map(str::to_string);
        let cpu = cpuid
            .as_deref()
            .and_then(cpu_model)
            .unwrap_or(CpuModel::UNKNOWN);
        Ok(Recorder { pmus, cpuid, cpu })
    }

    fn pmu_name(&self, pmu_type: u32) -> Option<&str> {
        self.pmus
            .iter()
            .find(|(t, _)| *t == pmu_type)
            .map(|(_, name)| name.as_str())
    }
}

/// The family and model of an x86 HEADER_CPUID string, `vendor,family,model,stepping` with
/// decimal numbers: what perf's `get_cpuid()` in `tools/perf/arch/x86/util/header.c` writes
/// (this VM's perf 6.1 wrote `GenuineIntel,6,207,2` where /proc/cpuinfo says family 6, model
/// 207). Other architectures write other forms (arm64: a MIDR in hex): `None`.
pub fn cpu_model(cpuid: &str) -> Option<CpuModel> {
    let mut fields = cpuid.trim_end_matches('$').split(',');
    let vendor = fields.next()?;
    if !matches!(vendor, "AuthenticAMD" | "HygonGenuine" | "GenuineIntel") {
        return None;
    }
    let family = fields.next()?.trim().parse().ok()?;
    let model = fields.next()?.trim().parse().ok()?;
    Some(CpuModel { family, model })
}

/// The event's name as perf recorded it, or its type and config.
pub fn event_name(attr: &AttributeDescription) -> String {
    attr.name()
        .map_or_else(|| format!("{:?}", attr.attributes().type_), str::to_string)
}

/// The plan that decodes `attr`'s records, or why pghotd does not read them.
pub fn plan_for(attr: &AttributeDescription, recorder: &Recorder) -> Result<PerfPlan, String> {
    let a = attr.attributes();
    let bits = a.sample_format.bits();
    let format = SampleFormat::new(bits).map_err(|e| e.to_string())?;
    if bits & u64::from(b::PERF_SAMPLE_ADDR) == 0 {
        return Err("recorded without data addresses (perf record -d)".into());
    }
    let mut plan = match a.type_ {
        PerfEventType::Software(
            SoftwareCounterType::PageFaults
            | SoftwareCounterType::PageFaultsMin
            | SoftwareCounterType::PageFaultsMaj,
        ) => pagefault::plan(&PageFaultConfig::default()),
        PerfEventType::DynamicPmu(pmu_type, ..) => match recorder.pmu_name(pmu_type) {
            Some("ibs_op") => ibs_decoding_plan(recorder.cpu),
            Some("cpu" | "cpu_core" | "cpu_atom")
                if bits & u64::from(b::PERF_SAMPLE_DATA_SRC) != 0 =>
            {
                pebs_decoding_plan()
            }
            Some(name) => {
                return Err(format!(
                    "PMU {name} (type {pmu_type}) is not one pghotd decodes"
                ));
            }
            None => {
                return Err(format!(
                    "PMU type {pmu_type} is not in the file's PMU mappings, so its records \
                     cannot be told apart from another machine's"
                ));
            }
        },
        ref other => return Err(format!("{other:?} is not a memory access event")),
    };
    plan.classes.clear();
    plan.format = format;
    Ok(plan)
}

/// How many events each sample stands for, when the event was recorded with a fixed period.
pub fn fixed_period(attr: &AttributeDescription) -> Option<u64> {
    match attr.attributes().sampling_policy {
        SamplingPolicy::Period(n) => Some(n.get()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_strings_give_family_and_model_in_decimal() {
        // This VM's perf: /proc/cpuinfo says family 6, model 207.
        assert_eq!(
            cpu_model("GenuineIntel,6,207,2"),
            Some(CpuModel {
                family: 6,
                model: 207
            })
        );
        // A Zen3 EPYC 7763 (Milan) reports family 25 (0x19), model 1 in /proc/cpuinfo.
        assert_eq!(
            cpu_model("AuthenticAMD,25,1,1$"),
            Some(CpuModel {
                family: 0x19,
                model: 1
            })
        );
        assert_eq!(cpu_model("0x00000000410fd0c0"), None);
        assert_eq!(cpu_model("AuthenticAMD,x,1,1"), None);
        assert_eq!(cpu_model("AuthenticAMD,25"), None);
    }
}
