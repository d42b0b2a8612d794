//! Writes perf.data files in the layout `perf record` writes, for tests and fuzz seeds: the
//! recordings of machines this one is not (an AMD box with IBS, another PMU numbering, another
//! CPU model).
//!
//! Layout (`tools/perf/util/header.c`, `perf_session__write_header()`): `struct
//! perf_file_header`; the attrs section, one `struct perf_file_attr` (the attr, then a
//! `perf_file_section` locating its ids) per event; the ids; the data section's records; the
//! feature table (a `perf_file_section` per feature bit, ascending) right after the data; the
//! feature sections: HEADER_CPUID (`write_cpuid()`), HEADER_EVENT_DESC (`write_event_desc()`)
//! and HEADER_PMU_MAPPINGS (`write_pmu_mappings()`). Strings are `struct perf_header_string`: a
//! u32 length, then the bytes NUL-padded to 64 (`do_write_string()`, NAME_ALIGN).

/// `PERF_ATTR_SIZE_VER7` (`include/uapi/linux/perf_event.h`): up to `sig_data`.
const ATTR_SIZE: usize = 128;
/// HEADER_CPUID, HEADER_EVENT_DESC, HEADER_PMU_MAPPINGS (`tools/perf/util/header.h`).
const FEAT_CPUID: u32 = 9;
const FEAT_EVENT_DESC: u32 = super::guard::FEAT_EVENT_DESC;
const FEAT_PMU_MAPPINGS: u32 = super::guard::FEAT_PMU_MAPPINGS;

/// One event of the recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    /// `perf_event_attr.type`: 1 for software events, a PMU's number for the others.
    pub pmu_type: u32,
    pub config: u64,
    pub sample_type: u64,
    pub period: u64,
    pub ids: Vec<u64>,
}

/// A recording to write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerfDataFile {
    pub events: Vec<Event>,
    /// HEADER_PMU_MAPPINGS.
    pub pmus: Vec<(u32, String)>,
    /// HEADER_CPUID, e.g. `AuthenticAMD,25,1,1`.
    pub cpuid: Option<String>,
    /// The data section: records as the kernel writes them (`perf::record::build`).
    pub records: Vec<Vec<u8>>,
}

fn u32le(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn u64le(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// `struct perf_header_string`, padded to 64 bytes as perf pads it.
fn string(out: &mut Vec<u8>, s: &str) {
    let padded = (s.len() + 1).div_ceil(64) * 64;
    u32le(out, padded as u32);
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len() + padded - s.len(), 0);
}

/// `struct perf_event_attr`, `ATTR_SIZE` bytes, fields in the uapi order.
fn attr(out: &mut Vec<u8>, e: &Event) {
    let start = out.len();
    u32le(out, e.pmu_type);
    u32le(out, ATTR_SIZE as u32);
    u64le(out, e.config);
    u64le(out, e.period);
    u64le(out, e.sample_type);
    u64le(out, 0); // read_format
    // flags: bit 18 sample_id_all; freq (bit 10) clear, so sample_period is a period.
    u64le(out, 1 << 18);
    out.resize(start + ATTR_SIZE, 0);
}

impl PerfDataFile {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        const HEADER: usize = 104;
        let file_attr = ATTR_SIZE + 16;
        let attrs_at = HEADER;
        let ids_at = attrs_at + file_attr * self.events.len();
        let mut ids = Vec::new();
        let mut attrs = Vec::new();
        for e in &self.events {
            attr(&mut attrs, e);
            u64le(&mut attrs, (ids_at + ids.len()) as u64);
            u64le(&mut attrs, 8 * e.ids.len() as u64);
            for &id in &e.ids {
                u64le(&mut ids, id);
            }
        }
        let data: Vec<u8> = self.records.concat();
        let data_at = ids_at + ids.len();
        let features = self.features();
        let table_at = data_at + data.len();
        let mut sections = Vec::new();
        let mut table = Vec::new();
        let mut at = table_at + 16 * features.len();
        for (_, bytes) in &features {
            u64le(&mut table, at as u64);
            u64le(&mut table, bytes.len() as u64);
            at += bytes.len();
            sections.extend_from_slice(bytes);
        }
        let mut out = Vec::with_capacity(at);
        out.extend_from_slice(b"PERFILE2");
        u64le(&mut out, HEADER as u64);
        u64le(&mut out, file_attr as u64);
        for (offset, size) in [
            (attrs_at, attrs.len()),
            (data_at, data.len()),
            (0, 0), // event_types: not written since 2011
        ] {
            u64le(&mut out, offset as u64);
            u64le(&mut out, size as u64);
        }
        let mut bitmap = [0u64; 4];
        for (bit, _) in &features {
            bitmap[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        for word in bitmap {
            u64le(&mut out, word);
        }
        for part in [&attrs, &ids, &data, &table, &sections] {
            out.extend_from_slice(part);
        }
        out
    }

    /// The feature sections in ascending bit order.
    fn features(&self) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        if let Some(cpuid) = &self.cpuid {
            let mut b = Vec::new();
            string(&mut b, cpuid);
            out.push((FEAT_CPUID, b));
        }
        let mut desc = Vec::new();
        u32le(&mut desc, self.events.len() as u32);
        u32le(&mut desc, ATTR_SIZE as u32);
        for e in &self.events {
            attr(&mut desc, e);
            u32le(&mut desc, e.ids.len() as u32);
            string(&mut desc, &e.name);
            for &id in &e.ids {
                u64le(&mut desc, id);
            }
        }
        out.push((FEAT_EVENT_DESC, desc));
        if !self.pmus.is_empty() {
            let mut b = Vec::new();
            u32le(&mut b, self.pmus.len() as u32);
            for (pmu_type, name) in &self.pmus {
                u32le(&mut b, *pmu_type);
                string(&mut b, name);
            }
            out.push((FEAT_PMU_MAPPINGS, b));
        }
        out
    }
}
