//! Fuzz entry points: one function per untrusted-input parser, taking arbitrary bytes.
//!
//! The same functions run under cargo-fuzz (this crate's `fuzz/`, nightly, long runs) and under
//! proptest in this crate's `tests/fuzz.rs` (stable, a fixed short budget in `cargo test`), so both exercise one body.
//! Each feeds the bytes through the real parsing path and then checks a property beyond "does
//! not panic": a round trip, a bound or a count. A violated property panics, which both
//! harnesses report with the input.
//!
//! Targets: [`perf_records`] (ring drain, record parser, IBS and page-fault decoders),
//! [`perf_data`] (a perf.data file: the header checks, the `linux-perf-data` crate, the replay),
//! [`ibs_raw`] (the IBS RAW payload and classification), [`trace`] (line framing and the line
//! parser), [`config`] (the TOML config file), [`config_set`] (one `config set` value),
//! [`control`] (request framing and parsing) and [`metrics_head`] (the metrics server's HTTP
//! request head).

use std::io::BufReader;
use std::path::Path;

use pghot_protocol::{MAX_REQUEST_BYTES, Request, parse_request};
use pghotd::config::Config;
use pghotd::sample::{Sample, SourceKind};
use pghotd::sampler::SampleSink;
use pghotd::sampler::hwsample::{Notes, SampleFields};
use pghotd::sampler::ibs::{CpuModel, IbsInput, IbsOpRaw, classify};
use pghotd::sampler::perf::record::{self, Record, SampleFormat};
use pghotd::sampler::perf::ring::{Ring, RingWriter};
use pghotd::sampler::perf::{CpuReader, PerfPlan};
use pghotd::sampler::perfdata::PerfData;
use pghotd::sampler::trace::{
    MAX_LINE_BYTES, TraceWriter, parse_line, parse_sample_period, read_line_bounded,
};
use pghotd::stats::Counter;
use pghotd::stop::StopToken;

/// CPU models whose errata change the IBS decode: none, Zen 2 (erratum 1293), Zen 4.
const CPUS: [CpuModel; 3] = [
    CpuModel::UNKNOWN,
    CpuModel {
        family: 0x17,
        model: 0x31,
    },
    CpuModel {
        family: 0x19,
        model: 0x11,
    },
];

/// Splits off a little-endian u64 from the front (zero-padded when short).
fn take_u64(data: &[u8]) -> (u64, &[u8]) {
    let n = data.len().min(8);
    let mut word = [0u8; 8];
    word[..n].copy_from_slice(&data[..n]);
    (u64::from_le_bytes(word), &data[n..])
}

/// A sink that checks what the reader hands it.
struct CheckingSink {
    kind: SourceKind,
    samples: u64,
}

impl SampleSink for CheckingSink {
    fn record(&mut self, sample: &Sample) {
        assert_eq!(
            sample.source, self.kind,
            "a sample from another source kind"
        );
        if matches!(self.kind, SourceKind::Ibs) {
            // The IBS decoder drops kernel and null data addresses before the sink.
            assert!(
                sample.vaddr != 0 && sample.vaddr >> 63 == 0,
                "IBS sample with data address {:#x}",
                sample.vaddr
            );
        }
        self.samples += 1;
    }

    fn count(&mut self, _: Counter, _: u64) {}
}

/// A sink that counts what it gets, whatever the source.
#[derive(Default)]
struct CountingSink {
    samples: u64,
}

impl SampleSink for CountingSink {
    fn record(&mut self, _: &Sample) {
        self.samples += 1;
    }

    fn count(&mut self, _: Counter, _: u64) {}
}

/// The bytes of a perf.data file, opened and replayed as `--source perfdata:` does. Either the
/// open or the replay refuses them with an error, or every sample the sink gets came from one
/// of the file's sample records, which are no more than its records.
pub fn perf_data(data: &[u8]) {
    let len = data.len() as u64;
    let Ok(mut file) = PerfData::open(std::io::Cursor::new(data), len, "fuzz") else {
        return;
    };
    let mut sink = CountingSink::default();
    if let Ok(done) = file.replay(&mut sink, &StopToken::new()) {
        assert!(done.samples + done.skipped <= done.records);
        assert!(done.records <= len / 8, "a record is at least 8 bytes");
        assert!(sink.samples <= done.samples);
    }
}

/// Perf ring bytes: the first byte picks a decoding plan (IBS on one of three CPU models, or
/// page faults), the next eight a `sample_type` for the bare record parser, and the rest is
/// written into an in-memory ring as the kernel would and drained by the per-CPU reader.
pub fn perf_records(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let plan: PerfPlan = match pick % 4 {
        3 => pghotd::sampler::pagefault::plan(&Default::default()),
        i => pghotd::sampler::hwplan::ibs_decoding_plan(CPUS[usize::from(i)]),
    };
    let (sample_type, body) = take_u64(rest);

    // The bare parser under any supported format: a RAW slice never leaves its record.
    if let Ok(format) = SampleFormat::new(sample_type) {
        for chunk in body.chunks(64) {
            if let Ok(Record::Sample(s)) = record::parse(chunk, format)
                && let Some(raw) = s.raw
            {
                let (start, end) = (chunk.as_ptr() as usize, raw.as_ptr() as usize);
                assert!(end >= start && end + raw.len() <= start + chunk.len());
            }
        }
    }

    // The reader over a ring: at most one record per 8 bytes, every sample of the plan's kind.
    const RING_BYTES: usize = 1 << 16;
    let Ok(mut ring) = Ring::in_memory(RING_BYTES) else {
        return;
    };
    let mut bytes = body[..body.len().min(RING_BYTES)].to_vec();
    bytes.resize(bytes.len().next_multiple_of(8), 0);
    assert!(RingWriter::new(&ring).push_unchecked(&bytes));
    let mut sink = CheckingSink {
        kind: plan.kind,
        samples: 0,
    };
    let records = CpuReader::new(&plan, 0).drain_ring(&mut ring, &mut sink);
    // A corrupt header ends the drain with an error (and `drain_ring` reports 0 records), so
    // bound both by the bytes: every record is at least 8.
    assert!(records <= bytes.len() / 8);
    assert!(sink.samples <= (bytes.len() / 8) as u64);
    assert_eq!(ring.pending(), 0, "a drain leaves nothing behind");
}

/// An IBS RAW payload after the kernel-decoded fields (misc, addr, phys_addr, data_src,
/// weight: 8 bytes each), classified with and without RAW on each CPU model.
pub fn ibs_raw(data: &[u8]) {
    let (misc, rest) = take_u64(data);
    let (addr, rest) = take_u64(rest);
    let (phys_addr, rest) = take_u64(rest);
    let (data_src, rest) = take_u64(rest);
    let (weight, raw) = take_u64(rest);
    if let Ok(parsed) = IbsOpRaw::parse(raw) {
        assert_eq!(IbsOpRaw::parse(raw), Ok(parsed), "parsing is deterministic");
    }
    let sample = SampleFields {
        misc: misc as u16,
        ip: 0,
        pid: 1,
        addr,
        phys_addr,
        data_src,
        weight,
    };
    for cpu in CPUS {
        for raw in [Some(raw), None] {
            let mut notes = Notes::default();
            if let Ok(hw) = classify(&IbsInput { sample, raw, cpu }, &mut notes) {
                assert!(
                    hw.vaddr != 0 && hw.vaddr >> 63 == 0,
                    "vaddr {:#x}",
                    hw.vaddr
                );
            }
        }
    }
}

/// Trace text: framed by the source's bounded line reader (buffer size from the first byte),
/// each line parsed; a parsed sample (or `# sample_period` line) written back by `TraceWriter`
/// parses to the same.
pub fn trace(data: &[u8]) {
    let Some((&cap, text)) = data.split_first() else {
        return;
    };
    let mut reader = BufReader::with_capacity(usize::from(cap).max(1), text);
    let mut line = Vec::new();
    let mut lines = 0;
    while let Ok(Some(outcome)) = read_line_bounded(&mut reader, &mut line) {
        lines += 1;
        if outcome.is_err() {
            continue;
        }
        assert!(line.len() <= MAX_LINE_BYTES && !line.contains(&b'\n'));
        // A period line round-trips through the writer too.
        if let Some(Ok(period)) = std::str::from_utf8(&line)
            .ok()
            .and_then(parse_sample_period)
        {
            let mut writer = TraceWriter::continuing(Vec::new());
            let _ = writer.write_sample_period(period);
            let written = String::from_utf8(writer.into_inner()).unwrap_or_default();
            assert_eq!(
                parse_sample_period(written.trim_end_matches('\n')),
                Some(Ok(period)),
                "period round trip through {written:?}"
            );
            continue;
        }
        let Ok(Some(sample)) = std::str::from_utf8(&line)
            .map(parse_line)
            .unwrap_or(Ok(None))
        else {
            continue;
        };
        let Ok(mut writer) = TraceWriter::new(Vec::new()) else {
            continue;
        };
        if writer.write_sample(&sample).is_err() {
            continue;
        }
        let written = String::from_utf8(writer.into_inner()).unwrap_or_default();
        let back: Vec<_> = written
            .lines()
            .filter_map(|l| parse_line(l).ok()?)
            .collect();
        assert_eq!(back, [sample], "round trip through {written:?}");
    }
    let newlines = text.iter().filter(|&&b| b == b'\n').count();
    let unterminated = usize::from(!text.is_empty() && !text.ends_with(b"\n"));
    assert_eq!(lines, newlines + unterminated, "every line framed once");
}

/// A config file; an accepted one gives back the same configuration when each value that
/// `config get` shows is set again through `config set`'s path.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parsed = Config::default();
    if parsed.apply_file(Path::new("fuzz.toml"), text).is_err() {
        return;
    }
    // `config get` shows an unset option as null; the file spells an off socket `""`.
    let mut left: Vec<(&str, serde_json::Value, String)> = parsed
        .values()
        .into_iter()
        .filter_map(|(key, value)| {
            let text = match (key, &value) {
                ("control_socket", serde_json::Value::Null) => "\"\"".to_string(),
                (_, serde_json::Value::Null) => return None,
                _ => value.to_string(),
            };
            Some((key, value, text))
        })
        .collect();
    // Set one key at a time, as `pghotctl config set` does: a key checked against another
    // (damon_min_regions <= damon_max_regions) may need the other set first, so the keys
    // refused go round again while a pass makes progress.
    let mut again = Config::default();
    loop {
        let before = left.len();
        let mut refused = Vec::new();
        for (key, value, text) in left {
            match again.with_setting(key, &text) {
                Ok(c) => again = c,
                Err(e) => refused.push((key, value, text, e)),
            }
        }
        if refused.is_empty() {
            break;
        }
        if refused.len() == before {
            let (key, value, _, e) = &refused[0];
            panic!("{key} = {value} was accepted in a file but not by config set: {e}");
        }
        left = refused.into_iter().map(|(k, v, t, _)| (k, v, t)).collect();
    }
    assert_eq!(again.values(), parsed.values(), "config from {text:?}");
}

/// One `pghotctl config set KEY VALUE`: the first byte picks the key (a row of the settings
/// table), the rest is the value. An accepted value changes that key and no other (it is one
/// value, never a document that could carry a second key or a table), and what `config get`
/// then shows is accepted again and gives the same configuration.
pub fn config_set(data: &[u8]) {
    let Some((&pick, value)) = data.split_first() else {
        return;
    };
    let Ok(value) = std::str::from_utf8(value) else {
        return;
    };
    let setting = &pghotd::config::SETTINGS[usize::from(pick) % pghotd::config::SETTINGS.len()];
    let base = Config::default();
    let Ok(next) = base.with_setting(setting.key, value) else {
        return;
    };
    let shown = next.values();
    for ((key, before), (_, after)) in base.values().iter().zip(&shown) {
        assert!(
            *key == setting.key || before == after,
            "config set {} {value:?} changed {key} too",
            setting.key
        );
    }
    let (_, now) = shown.iter().find(|(k, _)| *k == setting.key).unwrap();
    // `config get` shows an unset option as null; `""` is how it is written.
    let again = match now {
        serde_json::Value::Null => "\"\"".to_string(),
        v => v.to_string(),
    };
    match base.with_setting(setting.key, &again) {
        Ok(c) => assert_eq!(c.values(), shown, "{} = {again}", setting.key),
        Err(e) => panic!(
            "{} = {again} (shown after {value:?}) was refused: {e}",
            setting.key
        ),
    }
}

/// Control connection bytes, framed as the server frames them: a request that parses
/// serializes to a line that parses to the same request.
pub fn control(data: &[u8]) {
    use pghotd::control::server::{Line, LineReader};
    let mut reader = LineReader::new();
    let mut input = data;
    let stop = pghotd::stop::StopToken::new();
    loop {
        let bytes = match reader.next(&mut input, &stop) {
            Line::Closed | Line::Idle => break,
            Line::TooLong => continue, // answered with an error
            Line::Request(bytes) => bytes,
        };
        assert!(bytes.len() < MAX_REQUEST_BYTES);
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        let Ok(request) = parse_request(text.trim()) else {
            continue;
        };
        let line = request.to_line();
        let back = parse_request(line.trim_end());
        match (&request, &back) {
            // serde_json's float parsing may land one ULP off the printed value.
            (
                Request::Record {
                    duration_s: Some(a),
                },
                Ok(Request::Record {
                    duration_s: Some(b),
                }),
            ) => assert!((a - b).abs() <= a.abs() * 1e-15, "{line}"),
            _ => assert_eq!(back.ok(), Some(request.clone()), "{line}"),
        }
        if let Request::Record {
            duration_s: Some(s),
        } = request
        {
            // What the server does with it: an answer, never a panic.
            let _ = pghotd::control::server::record_duration(s);
        }
    }
}

/// Bytes received on a metrics connection, as the server sees them arrive: every prefix is
/// parsed, and once a prefix gives an answer (not `Incomplete`) every longer one gives the same
/// answer, so how the bytes are split across reads never matters. A request's method and
/// target are non-empty words of the first line; `Incomplete` only while no blank line has
/// arrived and the bytes are within the head bound.
pub fn metrics_head(data: &[u8]) {
    use pghotd::control::http::{Head, MAX_HEAD_BYTES, parse_head};
    let whole = parse_head(data);
    let mut first: Option<(usize, Head)> = None;
    // Every prefix of a short input; of a long one, a sample (every parse scans its prefix),
    // always with the ends around the head bound.
    let n = data.len();
    let mut ends: Vec<usize> = (0..=n.min(512)).collect();
    ends.extend((1..=64).map(|k| n * k / 64));
    ends.extend((MAX_HEAD_BYTES - 1..=MAX_HEAD_BYTES + 1).filter(|&e| e <= n));
    ends.sort_unstable();
    ends.dedup();
    for end in ends {
        let head = parse_head(&data[..end]);
        match &first {
            Some((at, answer)) => assert_eq!(&head, answer, "prefix {end} vs {at}: {data:?}"),
            None if head != Head::Incomplete => first = Some((end, head)),
            None => {}
        }
    }
    match (&first, &whole) {
        (None, Head::Incomplete) => {
            assert!(data.len() <= MAX_HEAD_BYTES);
            assert!(!data.windows(2).any(|w| w == b"\n\n"), "{data:?}");
            assert!(!data.windows(3).any(|w| w == b"\n\r\n"), "{data:?}");
        }
        (Some((_, answer)), whole) => assert_eq!(answer, whole),
        (None, whole) => panic!("{whole:?} for the whole input but Incomplete for it as a prefix"),
    }
    if let Head::Request { method, target } = whole {
        let line = data.split(|&b| b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        assert!(line.starts_with(&format!("{method} {target}")), "{line:?}");
        assert!(!method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase()));
        assert!(!target.is_empty() && !target.contains(char::is_whitespace));
    }
}
