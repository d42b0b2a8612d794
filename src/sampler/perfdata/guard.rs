//! Checks a perf.data file's layout against its length before the `linux-perf-data` crate reads
//! it, so that what the crate allocates from the file's numbers is bounded by the file.
//!
//! The crate trusts the header: it allocates a feature section's size before reading it
//! (`vec![0; size]` in `file_reader.rs`), reserves a capacity of a section's own element count
//! (`Vec::with_capacity(nr)` for HEADER_EVENT_DESC's events and ids and HEADER_PMU_MAPPINGS),
//! divides by the header's `attr_size`, and grows a record's buffer by an AUXTRACE record's
//! `size`. A damaged or hostile file would abort the process on a huge allocation or a division
//! by zero. Every such number is checked here against the bytes that are really there.
//!
//! Layouts: `struct perf_file_header` and `struct perf_file_section` in
//! `tools/perf/util/header.h`; the feature sections as `tools/perf/util/header.c` writes them
//! (`write_event_desc()`, `write_pmu_mappings()`, `do_write_string()`); the record header is
//! `struct perf_event_header` of `include/uapi/linux/perf_event.h`.

use std::io::{self, Read, Seek, SeekFrom};

use super::PerfDataError;

/// `struct perf_file_header`: magic, size, attr_size, then the attrs, data and event_types
/// sections (offset and size each) and the 256-bit feature bitmap.
pub const HEADER_SIZE: u64 = 8 + 8 + 8 + 3 * 16 + 32;
/// `PERF_ATTR_SIZE_VER0` (`include/uapi/linux/perf_event.h`): the smallest attr a kernel knows.
const ATTR_SIZE_VER0: u64 = 64;
/// No attr layout is anywhere near this; perf's own reader refuses sizes above a page.
const ATTR_SIZE_MAX: u64 = 4096;
/// Largest feature section read (they hold strings, topologies and build ids: kilobytes).
pub const FEATURE_MAX: u64 = 64 << 20;
/// `PERF_RECORD_AUXTRACE`, `PERF_RECORD_COMPRESSED` and `PERF_RECORD_COMPRESSED2`
/// (`tools/lib/perf/include/perf/event.h`, `enum perf_user_event_type`).
const RECORD_AUXTRACE: u32 = 71;
const RECORD_COMPRESSED: u32 = 81;
const RECORD_COMPRESSED2: u32 = 83;
/// `HEADER_EVENT_DESC`, `HEADER_PMU_MAPPINGS` and `HEADER_COMPRESSED` (`tools/perf/util/header.h`).
pub const FEAT_EVENT_DESC: u32 = 12;
pub const FEAT_PMU_MAPPINGS: u32 = 16;
pub const FEAT_COMPRESSED: u32 = 27;

/// What the checks found, for the reader and its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub data_offset: u64,
    pub data_size: u64,
    /// Record headers walked in the data section.
    pub records: u64,
    /// The feature bits set in the header.
    pub features: Vec<u32>,
}

/// A section of the file: `struct perf_file_section`.
#[derive(Debug, Clone, Copy)]
struct Section {
    offset: u64,
    size: u64,
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn read_at(file: &mut (impl Read + Seek), offset: u64, len: usize) -> io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len];
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// Checks the header, the sections, the feature table, the feature sections the crate parses
/// and every record header of the data section. `len` is the file's length.
pub fn check(file: &mut (impl Read + Seek), len: u64) -> Result<Layout, PerfDataError> {
    // A pipe-mode stream starts with a 16-byte `struct perf_pipe_file_header`.
    if len < 16 {
        return Err(PerfDataError::TooShort { len });
    }
    let start = read_at(file, 0, 16)?;
    check_magic(&start)?;
    if le_u64(&start, 8) == 16 {
        return Err(PerfDataError::PipeMode);
    }
    if len < HEADER_SIZE {
        return Err(PerfDataError::TooShort { len });
    }
    let header = read_at(file, 0, HEADER_SIZE as usize)?;
    let header_size = le_u64(&header, 8);
    if header_size < HEADER_SIZE || header_size > len {
        return Err(PerfDataError::Header(format!(
            "header size {header_size} (expected at least {HEADER_SIZE}, within the {len}-byte file)"
        )));
    }
    let attr_size = le_u64(&header, 16);
    if !(ATTR_SIZE_VER0..=ATTR_SIZE_MAX).contains(&attr_size) {
        return Err(PerfDataError::Header(format!(
            "attr_size {attr_size} is not in {ATTR_SIZE_VER0}..={ATTR_SIZE_MAX}"
        )));
    }
    let section = |at: usize| Section {
        offset: le_u64(&header, at),
        size: le_u64(&header, at + 8),
    };
    let (attrs, data, event_types) = (section(24), section(40), section(56));
    for (name, s) in [
        ("attrs", attrs),
        ("data", data),
        ("event_types", event_types),
    ] {
        within(name, s, len)?;
    }
    let features: Vec<u32> = (0..256u32)
        .filter(|&bit| le_u64(&header, 72 + (bit / 64) as usize * 8) >> (bit % 64) & 1 == 1)
        .collect();
    if event_types.size != 0 && !features.contains(&FEAT_EVENT_DESC) {
        // Only perf before Linux 2.6.39 wrote it; the crate sizes its id lists from it.
        return Err(PerfDataError::Header(
            "it has an event_types section and no event descriptions: perf older than 2011 \
             wrote it"
                .into(),
        ));
    }
    if features.contains(&FEAT_COMPRESSED) {
        return Err(PerfDataError::Compressed);
    }
    let table_offset = data.offset + data.size;
    let table = Section {
        offset: table_offset,
        size: 16 * features.len() as u64,
    };
    within("feature table", table, len)?;
    let table_bytes = read_at(file, table.offset, table.size as usize)?;
    for (i, &feature) in features.iter().enumerate() {
        let s = Section {
            offset: le_u64(&table_bytes, i * 16),
            size: le_u64(&table_bytes, i * 16 + 8),
        };
        let name = format!("feature {feature} section");
        within(&name, s, len)?;
        if s.size > FEATURE_MAX {
            return Err(PerfDataError::Header(format!(
                "{name} is {} bytes (at most {FEATURE_MAX} read)",
                s.size
            )));
        }
        if feature == FEAT_EVENT_DESC || feature == FEAT_PMU_MAPPINGS {
            let bytes = read_at(file, s.offset, s.size as usize)?;
            let walked = if feature == FEAT_EVENT_DESC {
                walk_event_desc(&bytes)
            } else {
                walk_pmu_mappings(&bytes)
            };
            walked.map_err(|what| PerfDataError::Header(format!("{name}: {what}")))?;
        }
    }
    let records = walk_records(file, data)?;
    Ok(Layout {
        data_offset: data.offset,
        data_size: data.size,
        records,
        features,
    })
}

fn check_magic(header: &[u8]) -> Result<(), PerfDataError> {
    match &header[..8] {
        b"PERFILE2" => Ok(()),
        b"2ELIFREP" => Err(PerfDataError::BigEndian),
        b"PERFFILE" => Err(PerfDataError::Header(
            "version 1 (PERFFILE) files are not read; re-record with a perf from after 2011".into(),
        )),
        other => Err(PerfDataError::NotPerfData {
            magic: String::from_utf8_lossy(other).escape_debug().to_string(),
        }),
    }
}

/// The section lies inside the file; a section that runs past the end was cut off.
fn within(name: &str, s: Section, len: u64) -> Result<(), PerfDataError> {
    match s.offset.checked_add(s.size) {
        Some(end) if end <= len => Ok(()),
        end => Err(PerfDataError::Truncated {
            what: name.to_string(),
            offset: s.offset,
            end,
            len,
        }),
    }
}

/// A bounds-checked reader over a feature section.
struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Walk<'_> {
    fn skip(&mut self, n: u64, what: &str) -> Result<(), String> {
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return Err(format!(
                "{what} of {n} bytes at byte {} runs past the section's {} bytes",
                self.at,
                self.bytes.len()
            ));
        }
        self.at += n as usize;
        Ok(())
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let at = self.at;
        self.skip(4, what)?;
        Ok(le_u32(self.bytes, at))
    }

    /// `struct perf_header_string`: a u32 length, then that many bytes.
    fn string(&mut self, what: &str) -> Result<(), String> {
        let n = self.u32(what)?;
        self.skip(u64::from(n), what)
    }
}

/// HEADER_EVENT_DESC: nr and attr_size, then per event the attr, nr_ids, the name and the ids.
fn walk_event_desc(bytes: &[u8]) -> Result<(), String> {
    let mut w = Walk { bytes, at: 0 };
    let nr = w.u32("the event count")?;
    let attr_size = u64::from(w.u32("the attr size")?);
    if !(ATTR_SIZE_VER0..=ATTR_SIZE_MAX).contains(&attr_size) {
        return Err(format!(
            "attr size {attr_size} is not in {ATTR_SIZE_VER0}..={ATTR_SIZE_MAX}"
        ));
    }
    for event in 0..nr {
        let at = w.at;
        w.skip(attr_size, "an attr")?;
        // The attr's own size field (bytes 4-7) must fit the slot the crate reads it from.
        let own = u64::from(le_u32(bytes, at + 4));
        if own > attr_size || own < ATTR_SIZE_VER0 {
            return Err(format!(
                "event {event}: attr says it is {own} bytes, its slot is {attr_size}"
            ));
        }
        let ids = w.u32("an id count")?;
        w.string("an event name")?;
        w.skip(8 * u64::from(ids), "an id list")?;
    }
    Ok(())
}

/// HEADER_PMU_MAPPINGS: nr, then per PMU its type and name.
fn walk_pmu_mappings(bytes: &[u8]) -> Result<(), String> {
    let mut w = Walk { bytes, at: 0 };
    let nr = w.u32("the PMU count")?;
    for _ in 0..nr {
        w.u32("a PMU type")?;
        w.string("a PMU name")?;
    }
    Ok(())
}

/// Walks the record headers of the data section: each at least 8 bytes, inside the section,
/// and none of the kinds whose payload the crate would size from the record's own numbers.
fn walk_records(file: &mut (impl Read + Seek), data: Section) -> Result<u64, PerfDataError> {
    file.seek(SeekFrom::Start(data.offset))?;
    let mut reader = io::BufReader::with_capacity(1 << 16, file);
    let (mut at, mut records) = (0u64, 0u64);
    let mut body = [0u8; 1 << 16];
    while at < data.size {
        let bad = |what: String| PerfDataError::Record {
            offset: data.offset + at,
            what,
        };
        if data.size - at < 8 {
            return Err(bad(format!(
                "{} bytes left in the data section, less than a record header",
                data.size - at
            )));
        }
        let mut head = [0u8; 8];
        reader.read_exact(&mut head)?;
        let kind = le_u32(&head, 0);
        let size = u64::from(u16::from_le_bytes([head[6], head[7]]));
        if size < 8 {
            return Err(bad(format!("record of type {kind} claims {size} bytes")));
        }
        if size > data.size - at {
            return Err(bad(format!(
                "record of type {kind} and {size} bytes runs past the data section's end \
                 ({} bytes left)",
                data.size - at
            )));
        }
        match kind {
            RECORD_AUXTRACE => return Err(bad("an AUXTRACE record; AUX data is not read".into())),
            RECORD_COMPRESSED | RECORD_COMPRESSED2 => return Err(PerfDataError::Compressed),
            _ => {}
        }
        reader.read_exact(&mut body[..(size - 8) as usize])?;
        at += size;
        records += 1;
    }
    Ok(records)
}
