//! Parsing perf records: PERF_RECORD_SAMPLE by the event's `sample_type`, and the loss and
//! throttle records a sampler must count.
//!
//! Field order is the kernel's `perf_output_sample()` order (`kernel/events/core.c`; the
//! PERF_RECORD_* layouts in `include/uapi/linux/perf_event.h`).
//! pghotd only ever asks for the fixed-size fields below plus RAW, so the parser refuses any
//! other `sample_type` bit at setup instead of guessing a layout. We parse by hand rather than
//! with perf-event-data, which shifts every field after a WEIGHT_STRUCT and copies each sample
//! into a boxed struct (perf-event-data 0.1.8, `src/records/sample.rs`: it reads the weight
//! only for WEIGHT).

use perf_event_open_sys::bindings;

pub const RECORD_LOST: u32 = bindings::PERF_RECORD_LOST;
pub const RECORD_THROTTLE: u32 = bindings::PERF_RECORD_THROTTLE;
pub const RECORD_UNTHROTTLE: u32 = bindings::PERF_RECORD_UNTHROTTLE;
pub const RECORD_SAMPLE: u32 = bindings::PERF_RECORD_SAMPLE;
pub const RECORD_LOST_SAMPLES: u32 = bindings::PERF_RECORD_LOST_SAMPLES;

const IDENTIFIER: u64 = bindings::PERF_SAMPLE_IDENTIFIER as u64;
const IP: u64 = bindings::PERF_SAMPLE_IP as u64;
const TID: u64 = bindings::PERF_SAMPLE_TID as u64;
const TIME: u64 = bindings::PERF_SAMPLE_TIME as u64;
const ADDR: u64 = bindings::PERF_SAMPLE_ADDR as u64;
const ID: u64 = bindings::PERF_SAMPLE_ID as u64;
const STREAM_ID: u64 = bindings::PERF_SAMPLE_STREAM_ID as u64;
const CPU: u64 = bindings::PERF_SAMPLE_CPU as u64;
const PERIOD: u64 = bindings::PERF_SAMPLE_PERIOD as u64;
const RAW: u64 = bindings::PERF_SAMPLE_RAW as u64;
const WEIGHT: u64 = bindings::PERF_SAMPLE_WEIGHT as u64;
const WEIGHT_STRUCT: u64 = bindings::PERF_SAMPLE_WEIGHT_STRUCT as u64;
const DATA_SRC: u64 = bindings::PERF_SAMPLE_DATA_SRC as u64;
const PHYS_ADDR: u64 = bindings::PERF_SAMPLE_PHYS_ADDR as u64;
/// Asked for by perf tools (`perf record --all-cgroups`, `--data-page-size`,
/// `--code-page-size`), never by pghotd: one u64 each after PHYS_ADDR, read past.
const CGROUP: u64 = bindings::PERF_SAMPLE_CGROUP as u64;
const DATA_PAGE_SIZE: u64 = bindings::PERF_SAMPLE_DATA_PAGE_SIZE as u64;
const CODE_PAGE_SIZE: u64 = bindings::PERF_SAMPLE_CODE_PAGE_SIZE as u64;

/// The `sample_type` bits this parser understands.
const SUPPORTED: u64 = IDENTIFIER
    | IP
    | TID
    | TIME
    | ADDR
    | ID
    | STREAM_ID
    | CPU
    | PERIOD
    | RAW
    | WEIGHT
    | WEIGHT_STRUCT
    | DATA_SRC
    | PHYS_ADDR
    | CGROUP
    | DATA_PAGE_SIZE
    | CODE_PAGE_SIZE;

/// `PERF_MEM_NA` as the generic code writes it when no driver filled DATA_SRC.
pub const DATA_SRC_NA: u64 = 0x0508_0021;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("sample_type {0:#x} has bits pghotd cannot parse ({1:#x})")]
    UnsupportedFormat(u64, u64),
    #[error("sample_type {0:#x}: WEIGHT and WEIGHT_STRUCT are mutually exclusive")]
    BothWeights(u64),
    #[error("record type {kind} of {len} bytes is truncated (needs {needed})")]
    Truncated {
        kind: u32,
        len: usize,
        needed: usize,
    },
    #[error("sample RAW section of {raw} bytes overruns the {len}-byte record")]
    RawOverrun { raw: usize, len: usize },
}

/// The validated `sample_type` of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleFormat(u64);

impl SampleFormat {
    pub fn new(sample_type: u64) -> Result<Self, RecordError> {
        let unknown = sample_type & !SUPPORTED;
        if unknown != 0 {
            return Err(RecordError::UnsupportedFormat(sample_type, unknown));
        }
        if sample_type & WEIGHT != 0 && sample_type & WEIGHT_STRUCT != 0 {
            return Err(RecordError::BothWeights(sample_type));
        }
        Ok(Self(sample_type))
    }

    pub fn bits(self) -> u64 {
        self.0
    }

    fn has(self, bit: u64) -> bool {
        self.0 & bit != 0
    }
}

/// The fields of one PERF_RECORD_SAMPLE; absent fields are 0 (`data_src` is PERF_MEM_NA), the
/// same values the kernel writes when a driver did not fill a requested field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRecord<'a> {
    /// `header.misc`: cpumode in bits 0-2, EXACT_IP in bit 14.
    pub misc: u16,
    /// IDENTIFIER or ID: which event of a CPU's group wrote the sample.
    pub id: u64,
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub addr: u64,
    pub cpu: u32,
    pub period: u64,
    pub raw: Option<&'a [u8]>,
    pub weight: u64,
    pub data_src: u64,
    pub phys_addr: u64,
}

/// A record as the sampler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    Sample(SampleRecord<'a>),
    /// Records the kernel dropped because the ring was full.
    Lost {
        lost: u64,
    },
    /// Samples lost inside the PMU (PEBS buffer).
    LostSamples {
        lost: u64,
    },
    Throttle {
        time: u64,
    },
    Unthrottle {
        time: u64,
    },
    /// Anything else (MMAP, COMM, ...): not asked for, ignored.
    Other {
        kind: u32,
    },
}

/// Reads native-endian u64/u32 fields in order.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    kind: u32,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], RecordError> {
        let end = self.at + len;
        let out = self.bytes.get(self.at..end).ok_or(RecordError::Truncated {
            kind: self.kind,
            len: self.bytes.len(),
            needed: end,
        })?;
        self.at = end;
        Ok(out)
    }

    fn u64(&mut self) -> Result<u64, RecordError> {
        let b = self.take(8)?;
        Ok(u64::from_ne_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    fn u32_pair(&mut self) -> Result<(u32, u32), RecordError> {
        let v = self.u64()?;
        // Two u32s in memory order: on little-endian the first is the low half.
        let b = v.to_ne_bytes();
        Ok((
            u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        ))
    }

    fn opt_u64(&mut self, present: bool) -> Result<u64, RecordError> {
        if present { self.u64() } else { Ok(0) }
    }
}

/// Parses one record (header included, as the ring hands it over).
pub fn parse(bytes: &[u8], format: SampleFormat) -> Result<Record<'_>, RecordError> {
    let mut c = Cursor {
        bytes,
        at: 0,
        kind: 0,
    };
    let (kind, misc_size) = c.u32_pair()?;
    c.kind = kind;
    let misc = misc_size as u16;
    match kind {
        RECORD_SAMPLE => parse_sample(&mut c, misc, format).map(Record::Sample),
        RECORD_LOST => {
            let _id = c.u64()?;
            Ok(Record::Lost { lost: c.u64()? })
        }
        RECORD_LOST_SAMPLES => Ok(Record::LostSamples { lost: c.u64()? }),
        RECORD_THROTTLE => Ok(Record::Throttle { time: c.u64()? }),
        RECORD_UNTHROTTLE => Ok(Record::Unthrottle { time: c.u64()? }),
        kind => Ok(Record::Other { kind }),
    }
}

fn parse_sample<'a>(
    c: &mut Cursor<'a>,
    misc: u16,
    f: SampleFormat,
) -> Result<SampleRecord<'a>, RecordError> {
    let identifier = c.opt_u64(f.has(IDENTIFIER))?;
    let ip = c.opt_u64(f.has(IP))?;
    let (pid, tid) = if f.has(TID) { c.u32_pair()? } else { (0, 0) };
    let time = c.opt_u64(f.has(TIME))?;
    let addr = c.opt_u64(f.has(ADDR))?;
    let id = c.opt_u64(f.has(ID))?;
    let _stream_id = c.opt_u64(f.has(STREAM_ID))?;
    let cpu = if f.has(CPU) { c.u32_pair()?.0 } else { 0 };
    let period = c.opt_u64(f.has(PERIOD))?;
    let raw = if f.has(RAW) {
        let (size, _) = c.u32_pair()?;
        // The u32 size sits in the first half of that word; the payload starts right after it.
        c.at -= 4;
        let size = size as usize;
        let raw = c
            .bytes
            .get(c.at..c.at + size)
            .ok_or(RecordError::RawOverrun {
                raw: size,
                len: c.bytes.len(),
            })?;
        // u32 size + data is padded to 8 bytes (`perf_sample_save_raw_data()` in
        // `include/linux/perf_event.h`; `perf_prepare_sample()` on older kernels).
        c.at = (c.at + size + 7) & !7;
        Some(raw)
    } else {
        None
    };
    let weight = c.opt_u64(f.has(WEIGHT) || f.has(WEIGHT_STRUCT))?;
    let data_src = if f.has(DATA_SRC) {
        c.u64()?
    } else {
        DATA_SRC_NA
    };
    let phys_addr = c.opt_u64(f.has(PHYS_ADDR))?;
    // `perf_output_sample()` writes these three after PHYS_ADDR, in this order.
    for bit in [CGROUP, DATA_PAGE_SIZE, CODE_PAGE_SIZE] {
        c.opt_u64(f.has(bit))?;
    }
    Ok(SampleRecord {
        misc,
        id: if f.has(IDENTIFIER) { identifier } else { id },
        ip,
        pid,
        tid,
        time,
        addr,
        cpu,
        period,
        raw,
        weight,
        data_src,
        phys_addr,
    })
}

/// Builds records byte by byte as the kernel lays them out; tests and benches feed these to rings.
pub mod build {
    use super::*;

    fn header(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + body.len());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&misc.to_ne_bytes());
        out.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        out.extend_from_slice(body);
        out
    }

    fn push_u64(out: &mut Vec<u8>, v: u64) {
        out.extend_from_slice(&v.to_ne_bytes());
    }

    fn push_pair(out: &mut Vec<u8>, a: u32, b: u32) {
        out.extend_from_slice(&a.to_ne_bytes());
        out.extend_from_slice(&b.to_ne_bytes());
    }

    /// A PERF_RECORD_SAMPLE holding `s`'s fields that `format` selects.
    pub fn sample(format: SampleFormat, s: &SampleRecord<'_>) -> Vec<u8> {
        let f = format;
        let mut b = Vec::with_capacity(160);
        if f.has(IDENTIFIER) {
            push_u64(&mut b, s.id);
        }
        if f.has(IP) {
            push_u64(&mut b, s.ip);
        }
        if f.has(TID) {
            push_pair(&mut b, s.pid, s.tid);
        }
        if f.has(TIME) {
            push_u64(&mut b, s.time);
        }
        if f.has(ADDR) {
            push_u64(&mut b, s.addr);
        }
        if f.has(ID) {
            push_u64(&mut b, s.id);
        }
        if f.has(STREAM_ID) {
            push_u64(&mut b, 0);
        }
        if f.has(CPU) {
            push_pair(&mut b, s.cpu, 0);
        }
        if f.has(PERIOD) {
            push_u64(&mut b, s.period);
        }
        if f.has(RAW) {
            let raw = s.raw.unwrap_or(&[]);
            b.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
            b.extend_from_slice(raw);
            while !b.len().is_multiple_of(8) {
                b.push(0);
            }
        }
        if f.has(WEIGHT) || f.has(WEIGHT_STRUCT) {
            push_u64(&mut b, s.weight);
        }
        if f.has(DATA_SRC) {
            push_u64(&mut b, s.data_src);
        }
        if f.has(PHYS_ADDR) {
            push_u64(&mut b, s.phys_addr);
        }
        for bit in [CGROUP, DATA_PAGE_SIZE, CODE_PAGE_SIZE] {
            if f.has(bit) {
                push_u64(&mut b, 0);
            }
        }
        header(RECORD_SAMPLE, s.misc, &b)
    }

    /// A PERF_RECORD_LOST for `lost` records.
    pub fn lost(lost: u64) -> Vec<u8> {
        let mut b = Vec::new();
        push_u64(&mut b, 0);
        push_u64(&mut b, lost);
        header(RECORD_LOST, 0, &b)
    }

    /// A PERF_RECORD_THROTTLE (or UNTHROTTLE) at `time`.
    pub fn throttle(unthrottle: bool, time: u64) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [time, 0, 0] {
            push_u64(&mut b, v);
        }
        let kind = if unthrottle {
            RECORD_UNTHROTTLE
        } else {
            RECORD_THROTTLE
        };
        header(kind, 0, &b)
    }

    /// A zeroed sample record to fill in.
    pub fn empty() -> SampleRecord<'static> {
        SampleRecord {
            misc: 0,
            id: 0,
            ip: 0,
            pid: 0,
            tid: 0,
            time: 0,
            addr: 0,
            cpu: 0,
            period: 0,
            raw: None,
            weight: 0,
            data_src: DATA_SRC_NA,
            phys_addr: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IBS_FORMAT: u64 = IP | TID | TIME | ADDR | CPU | WEIGHT | DATA_SRC | PHYS_ADDR;

    fn full() -> SampleRecord<'static> {
        SampleRecord {
            misc: 2 | 1 << 14,
            id: 77,
            ip: 0x40_1000,
            pid: 1234,
            tid: 1235,
            time: 987_654_321,
            addr: 0x7f00_0000_1234,
            cpu: 3,
            period: 10_000,
            raw: None,
            weight: 310,
            data_src: 0x1234_5678,
            phys_addr: 0x8000_1234,
        }
    }

    #[test]
    fn the_documented_ibs_layout_is_72_bytes_and_round_trips() {
        // 0x8C08F (IP, TID, TIME, ADDR, CPU, WEIGHT, DATA_SRC, PHYS_ADDR) gives a 72-byte
        // record with phys_addr at byte 64.
        let f = SampleFormat::new(IBS_FORMAT).unwrap();
        assert_eq!(IBS_FORMAT, 0x8C08F);
        let bytes = build::sample(f, &full());
        assert_eq!(bytes.len(), 72);
        assert_eq!(bytes[64..72], 0x8000_1234u64.to_ne_bytes());
        let Record::Sample(s) = parse(&bytes, f).unwrap() else {
            panic!("not a sample")
        };
        assert_eq!(
            s,
            SampleRecord {
                id: 0,
                period: 0,
                ..full()
            }
        );
    }

    #[test]
    fn raw_payloads_are_padded_and_fields_after_them_still_line_up() {
        let f = SampleFormat::new(IBS_FORMAT | RAW | IDENTIFIER | PERIOD).unwrap();
        for raw_len in [0usize, 1, 4, 60, 61, 68, 76] {
            let raw: Vec<u8> = (0..raw_len as u8).collect();
            let rec = SampleRecord {
                raw: Some(&raw),
                ..full()
            };
            let bytes = build::sample(f, &rec);
            assert_eq!(bytes.len() % 8, 0);
            let Record::Sample(s) = parse(&bytes, f).unwrap() else {
                panic!("not a sample")
            };
            assert_eq!(s, rec, "raw of {raw_len} bytes");
        }
    }

    #[test]
    fn the_page_size_fields_perf_asks_for_are_read_past() {
        // `perf record --data-page-size` on IBS: PHYS_ADDR (bit 19) then DATA_PAGE_SIZE (bit
        // 22), the last two u64s of the record (`perf_output_sample()` in kernel/events/core.c).
        let f = SampleFormat::new(IBS_FORMAT | 1 << 22).unwrap();
        let mut bytes = build::sample(f, &full());
        assert_eq!(bytes.len(), 80);
        bytes[72..80].copy_from_slice(&4096u64.to_ne_bytes());
        let Record::Sample(s) = parse(&bytes, f).unwrap() else {
            panic!("not a sample")
        };
        assert_eq!(s.phys_addr, 0x8000_1234);
        assert!(
            parse(&bytes[..72], f).is_err(),
            "the page size is part of the record"
        );
    }

    #[test]
    fn absent_fields_read_as_the_kernels_defaults() {
        let f = SampleFormat::new(TID | ADDR).unwrap();
        let bytes = build::sample(f, &full());
        let Record::Sample(s) = parse(&bytes, f).unwrap() else {
            panic!("not a sample")
        };
        assert_eq!((s.pid, s.addr, s.phys_addr), (1234, 0x7f00_0000_1234, 0));
        assert_eq!(s.data_src, DATA_SRC_NA);
    }

    #[test]
    fn loss_and_throttle_records() {
        let f = SampleFormat::new(TID).unwrap();
        assert_eq!(parse(&build::lost(17), f), Ok(Record::Lost { lost: 17 }));
        assert_eq!(
            parse(&build::throttle(false, 5), f),
            Ok(Record::Throttle { time: 5 })
        );
        assert_eq!(
            parse(&build::throttle(true, 6), f),
            Ok(Record::Unthrottle { time: 6 })
        );
    }

    #[test]
    fn truncated_and_overrunning_records_are_errors_not_panics() {
        let f = SampleFormat::new(IBS_FORMAT | RAW).unwrap();
        let raw = [0u8; 60];
        let bytes = build::sample(
            f,
            &SampleRecord {
                raw: Some(&raw),
                ..full()
            },
        );
        for cut in 0..bytes.len() {
            assert!(parse(&bytes[..cut], f).is_err(), "cut at {cut}");
        }
        let mut huge = bytes.clone();
        let raw_at = 48; // after ip, tid, time, addr, cpu (+ header)
        huge[raw_at..raw_at + 4].copy_from_slice(&4000u32.to_ne_bytes());
        assert!(matches!(
            parse(&huge, f),
            Err(RecordError::RawOverrun { raw: 4000, .. })
        ));
    }

    #[test]
    fn unsupported_sample_types_are_refused_up_front() {
        let callchain = bindings::PERF_SAMPLE_CALLCHAIN as u64;
        let err = SampleFormat::new(TID | callchain).unwrap_err();
        assert!(err.to_string().contains("cannot parse"), "{err}");
        assert!(SampleFormat::new(WEIGHT | WEIGHT_STRUCT).is_err());
    }
}

#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::*;
    use crate::sampler::perf::ring::{Ring, RingWriter};

    /// Any subset of the supported bits, WEIGHT_STRUCT dropped when WEIGHT is there.
    fn format() -> impl Strategy<Value = SampleFormat> {
        any::<u64>().prop_map(|bits| {
            let mut bits = bits & SUPPORTED;
            if bits & WEIGHT != 0 {
                bits &= !WEIGHT_STRUCT;
            }
            SampleFormat::new(bits).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_never_panic_the_record_parser(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            kind in prop_oneof![Just(RECORD_SAMPLE), Just(RECORD_LOST), any::<u32>()],
            f in format(),
        ) {
            let mut record = bytes;
            if record.len() >= 4 {
                record[..4].copy_from_slice(&kind.to_ne_bytes());
            }
            let _ = parse(&record, f);
        }

        #[test]
        fn random_headers_never_panic_a_ring_drain(
            words in proptest::collection::vec(any::<u64>(), 1..64),
        ) {
            let mut ring = Ring::in_memory(1 << 10).unwrap();
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
            // The writer takes anything 8-byte aligned; the header inside is random.
            if RingWriter::new(&ring).push_unchecked(&bytes) {
                let mut seen = 0;
                let _ = ring.drain(|r| seen += r.len());
                prop_assert!(seen <= bytes.len());
                prop_assert_eq!(ring.pending(), 0);
            }
        }
    }
}
