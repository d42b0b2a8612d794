//! The pghot-trace v1 text format: reader (a [`Source`]) and writer.
//!
//! One sample per line, whitespace-separated, `#` starts a comment (to the end of the line):
//!
//! ```text
//! # time_ns  cpu pid  tid  vaddr          paddr       op src    node [latency]
//! 1000000000 0   4242 4242 0x7f0000001000 0x8000a000  L  extmem 2    310
//! 1000000500 1   4242 4243 0x7f0000002000 -           S  dram   0
//! ```
//!
//! `vaddr`/`paddr` are hex with `0x`; `op` is `L` or `S`; `src` is one of
//! `l1 l2 l3 peer dram remote extmem unknown`; `node` and `latency` are decimal; `-` marks an
//! unknown `paddr`, `node` or `latency`. A trace ends at end of file, or for a FIFO or stdin when
//! every writer has closed it.
//!
//! One comment says something: `# sample_period N` (a line of its own, N >= 1) tells how many
//! accesses each sample after it stands for, as a sampling period does; the reader hands it to
//! its sink (migration admission's bandwidth estimate uses it). Readers that do not know it
//! skip it as a comment.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::time::Instant;

use super::pace::{self, DrainPace};
use super::{Source, SourceError};
use crate::sample::{AccessOp, DataSource, Sample, SourceKind};
use crate::sampler::SinkFactory;
use crate::stats::Counter;
use crate::stop::{StopToken, Woken, readable_now, wait_fd, wait_until};
use crate::topology::NodeId;

/// Header line the writer puts first; readers treat it as a comment.
pub const TRACE_HEADER: &str =
    "# pghot-trace v1: time_ns cpu pid tid vaddr paddr op src node [latency]";

/// How a `# sample_period N` line starts.
pub const SAMPLE_PERIOD_DIRECTIVE: &str = "# sample_period ";

/// Longest line accepted; longer ones are reported and skipped (a FIFO writer that never sends
/// a newline must not grow our memory).
pub const MAX_LINE_BYTES: usize = 4096;

/// How many malformed lines are logged one by one before only the counter keeps going.
const LOGGED_BAD_LINES: u64 = 10;

/// Why a trace line was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceLineError {
    #[error("expected 9 or 10 fields, found {0}")]
    FieldCount(usize),
    #[error("field {field}: '{value}' is not a decimal number in 0..={max}")]
    Decimal {
        field: &'static str,
        value: String,
        max: u64,
    },
    #[error("field {field}: '{value}' is not hex with a 0x prefix")]
    Hex { field: &'static str, value: String },
    #[error("field op: '{0}' is not L or S")]
    Op(String),
    #[error("field src: '{0}' is not one of l1 l2 l3 peer dram remote extmem unknown")]
    Src(String),
    #[error("line is not UTF-8")]
    NotUtf8,
    #[error("line is longer than {MAX_LINE_BYTES} bytes")]
    TooLong,
    #[error("'# sample_period {0}': the period must be a decimal number of at least 1")]
    SamplePeriod(String),
}

/// The period a `# sample_period N` line sets; `None` for every other line.
pub fn parse_sample_period(line: &str) -> Option<Result<u64, TraceLineError>> {
    let value = line.strip_prefix(SAMPLE_PERIOD_DIRECTIVE)?.trim();
    Some(match digits(value, 10) {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(TraceLineError::SamplePeriod(value.to_string())),
    })
}

/// `value` as digits of `radix` and nothing else. Rust's integer parsers also take a leading
/// `+`, which the format does not have (README.md, "The pghot-trace v1 format": decimal, and hex
/// with `0x`).
///
/// One pass over the bytes: checking every char with `char::is_digit` and then parsing with
/// `u64::from_str_radix` took 1,369 of the 3,878 instructions a sample cost the daemon reading
/// a trace (`benches/trace-cost.sh`, BENCHMARKS.md "Trace lines"). Upper- and lower-case hex
/// digits both count, as they do for `from_str_radix`; `None` on overflow, as it gives.
fn digits(value: &str, radix: u32) -> Option<u64> {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return None;
    }
    let radix = u64::from(radix);
    let mut n: u64 = 0;
    for &b in bytes {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        let digit = u64::from(digit);
        if digit >= radix {
            return None;
        }
        n = n.checked_mul(radix)?.checked_add(digit)?;
    }
    Some(n)
}

fn decimal(field: &'static str, value: &str, max: u64) -> Result<u64, TraceLineError> {
    match digits(value, 10) {
        Some(n) if n <= max => Ok(n),
        _ => Err(TraceLineError::Decimal {
            field,
            value: value.to_string(),
            max,
        }),
    }
}

fn hex(field: &'static str, value: &str) -> Result<u64, TraceLineError> {
    value
        .strip_prefix("0x")
        .and_then(|hex| digits(hex, 16))
        .ok_or_else(|| TraceLineError::Hex {
            field,
            value: value.to_string(),
        })
}

fn optional<T>(
    value: &str,
    parse: impl FnOnce(&str) -> Result<T, TraceLineError>,
) -> Result<Option<T>, TraceLineError> {
    if value == "-" {
        Ok(None)
    } else {
        parse(value).map(Some)
    }
}

fn data_source(value: &str) -> Result<DataSource, TraceLineError> {
    Ok(match value {
        "l1" => DataSource::L1,
        "l2" => DataSource::L2,
        "l3" => DataSource::L3,
        "peer" => DataSource::PeerCache,
        "dram" => DataSource::LocalDram,
        "remote" => DataSource::RemoteDram,
        "extmem" => DataSource::ExtMem,
        "unknown" => DataSource::Unknown,
        _ => return Err(TraceLineError::Src(value.to_string())),
    })
}

fn data_source_name(src: DataSource) -> &'static str {
    match src {
        DataSource::L1 => "l1",
        DataSource::L2 => "l2",
        DataSource::L3 => "l3",
        DataSource::PeerCache => "peer",
        DataSource::LocalDram => "dram",
        DataSource::RemoteDram => "remote",
        DataSource::ExtMem => "extmem",
        DataSource::Unknown => "unknown",
    }
}

/// Parses one line. `Ok(None)` for blank and comment-only lines.
pub fn parse_line(line: &str) -> Result<Option<Sample>, TraceLineError> {
    let content = line.split_once('#').map_or(line, |(before, _)| before);
    let mut fields = [""; 10];
    let mut count = 0;
    for field in content.split_ascii_whitespace() {
        if count < fields.len() {
            fields[count] = field;
        }
        count += 1;
    }
    match count {
        0 => return Ok(None),
        9 | 10 => {}
        n => return Err(TraceLineError::FieldCount(n)),
    }
    let u32_max = u64::from(u32::MAX);
    let op = match fields[6] {
        "L" => AccessOp::Load,
        "S" => AccessOp::Store,
        other => return Err(TraceLineError::Op(other.to_string())),
    };
    Ok(Some(Sample {
        time_ns: decimal("time_ns", fields[0], u64::MAX)?,
        cpu: decimal("cpu", fields[1], u32_max)? as u32,
        pid: decimal("pid", fields[2], u32_max)? as u32,
        tid: decimal("tid", fields[3], u32_max)? as u32,
        vaddr: hex("vaddr", fields[4])?,
        paddr: optional(fields[5], |v| hex("paddr", v))?,
        op,
        served_from: data_source(fields[7])?,
        node: optional(fields[8], |v| {
            decimal("node", v, u64::from(NodeId::MAX)).map(|n| n as NodeId)
        })?,
        latency: if count == 10 {
            optional(fields[9], |v| {
                decimal("latency", v, u32_max).map(|n| n as u32)
            })?
        } else {
            None
        },
        source: SourceKind::Trace,
    }))
}

/// Writes samples in the v1 format; what `pghotd --record` and the test tools use.
pub struct TraceWriter<W: Write> {
    out: W,
    /// Reused for every line, not zeroed again for each (`write_sample` 61 -> 53 instructions
    /// a line under cachegrind).
    line: LineBuf,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace with its header line.
    pub fn new(mut out: W) -> io::Result<Self> {
        writeln!(out, "{TRACE_HEADER}")?;
        Ok(TraceWriter::continuing(out))
    }

    /// Writes more lines of a trace whose header is already out (e.g. a thread's buffer that
    /// is later appended to the stream).
    pub fn continuing(out: W) -> Self {
        TraceWriter {
            out,
            line: LineBuf::default(),
        }
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Says that each sample from here on stands for `period` accesses.
    pub fn write_sample_period(&mut self, period: u64) -> io::Result<()> {
        writeln!(self.out, "{SAMPLE_PERIOD_DIRECTIVE}{period}")
    }

    pub fn write_sample(&mut self, s: &Sample) -> io::Result<()> {
        // Built by hand into one stack buffer: `write!` cost 165 ns a line, this 95-100 ns
        // (`cargo bench --bench trace`); it is most of what an emulated-IBS workload pays per
        // sample, and much more under TCG.
        let line = &mut self.line;
        line.len = 0;
        line.dec(s.time_ns);
        line.byte(b' ');
        line.dec(u64::from(s.cpu));
        line.byte(b' ');
        line.dec(u64::from(s.pid));
        line.byte(b' ');
        line.dec(u64::from(s.tid));
        line.byte(b' ');
        line.hex(s.vaddr);
        line.byte(b' ');
        match s.paddr {
            Some(p) => line.hex(p),
            None => line.byte(b'-'),
        }
        line.byte(b' ');
        line.byte(match s.op {
            AccessOp::Load => b'L',
            AccessOp::Store => b'S',
        });
        line.byte(b' ');
        line.bytes(data_source_name(s.served_from).as_bytes());
        line.byte(b' ');
        match s.node {
            Some(n) => line.dec(u64::from(n)),
            None => line.byte(b'-'),
        }
        if let Some(l) = s.latency {
            line.byte(b' ');
            line.dec(u64::from(l));
        }
        line.byte(b'\n');
        self.out.write_all(self.line.as_bytes())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One trace line under construction. 160 bytes hold the longest line (about 125).
struct LineBuf {
    bytes: [u8; 160],
    len: usize,
}

impl Default for LineBuf {
    fn default() -> Self {
        LineBuf {
            bytes: [0; 160],
            len: 0,
        }
    }
}

impl LineBuf {
    fn bytes(&mut self, b: &[u8]) {
        self.bytes[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    fn byte(&mut self, b: u8) {
        self.bytes(&[b]);
    }

    fn dec(&mut self, n: u64) {
        self.bytes(itoa::Buffer::new().format(n).as_bytes());
    }

    /// `0x` and lowercase hex digits without leading zeros, as `{:#x}` writes.
    fn hex(&mut self, n: u64) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut digits = [0u8; 16];
        let mut i = digits.len();
        let mut rest = n;
        loop {
            i -= 1;
            digits[i] = DIGITS[(rest & 0xf) as usize];
            rest >>= 4;
            if rest == 0 {
                break;
            }
        }
        self.bytes(b"0x");
        self.bytes(&digits[i..]);
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

// After a read that left the stream empty (it did not fill the buffer), the next waits as
// [`DrainPace`] says: the time the writer takes to send a page at the rate the reads saw, from
// a tenth of a second to one. A writer that sends a line or two at a time would otherwise wake
// the source thread for each, and on the TCG guest each wake-up of an idle pghotd cost about
// 1.4 ms of a vCPU (BENCHMARKS.md, "pghotd's idle cost"). The pace is the perf sampler's, so
// a trace sample waits no longer than a hardware one: a writer that sends a page or more every
// 100 ms is read every 100 ms, as a busy perf ring is drained, and one fast enough to fill a
// read (the 64 KiB buffer) never waits.

/// Which wait of a gather comes first. Sleeping out the gather and then waiting for
/// data is one wake-up when the writer sends more often than that (the data is there when the
/// sleep ends) and two when it sends less often (the sleep ends on nothing); waiting for data
/// first and then sleeping out the rest is the other way round. The rig's guest relay writes a
/// batch every 100 ms and the batch's own time (tests/vm/ibs-emu/guest/src/relay.rs `GATHER`):
/// sleeping first woke pghotd's source thread 1.5 times per batch (987 voluntary switches in a
/// 65 s Redis phase of about 650 batches, t33w in BENCHMARKS.md "Fewer wake-ups").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GatherOrder {
    SleepFirst,
    DataFirst,
}

impl GatherOrder {
    /// The order for the next gather: the other one after a gather that took two wake-ups.
    fn after(self, two_wakes: bool) -> GatherOrder {
        match (self, two_wakes) {
            (order, false) => order,
            (GatherOrder::SleepFirst, true) => GatherOrder::DataFirst,
            (GatherOrder::DataFirst, true) => GatherOrder::SleepFirst,
        }
    }
}

/// A `Read` that waits with poll(2) for data or a stop request, even on a FIFO or stdin with no
/// data. Regular files are always readable and never wait.
struct StoppableReader {
    file: File,
    stop: StopToken,
    /// A FIFO, pipe or socket: reads return what a writer has sent so far.
    stream: bool,
    /// When the last read left the stream empty.
    trickle_at: Option<Instant>,
    gather: GatherOrder,
    /// How long a trickle is left to gather, from what the reads before found.
    pace: DrainPace,
    /// When the last read returned.
    read_at: Option<Instant>,
}

impl StoppableReader {
    /// Waits until `due` has passed and data is there (or the stream hung up), in the order
    /// `self.gather` says, and learns the order for the next gather. `false`: stopped.
    fn gather(&mut self, due: Instant) -> io::Result<bool> {
        let two_wakes = match self.gather {
            GatherOrder::SleepFirst => {
                if !wait_until(due, &self.stop) {
                    return Ok(false);
                }
                // The read loop waits for the data if it is not there yet: a second wake-up.
                !readable_now(self.file.as_fd())
            }
            GatherOrder::DataFirst => {
                match wait_fd(self.file.as_fd(), &self.stop, None) {
                    Ok(Woken::Stopped) => return Ok(false),
                    Ok(_) => {}
                    Err(e) => return Err(e.into()),
                }
                let early = Instant::now() < due;
                if early && !wait_until(due, &self.stop) {
                    return Ok(false);
                }
                early
            }
        };
        self.gather = self.gather.after(two_wakes);
        Ok(true)
    }
}

/// Marker error: the reader gave up because a stop was requested.
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped")
    }
}

impl std::error::Error for Stopped {}

impl Read for StoppableReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(at) = self.trickle_at.take()
            && !self.gather(at + self.pace.wait())?
        {
            return Err(io::Error::other(Stopped));
        }
        loop {
            match wait_fd(self.file.as_fd(), &self.stop, None) {
                Ok(Woken::Stopped) => return Err(io::Error::other(Stopped)),
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
            // The fd is readable or hung up, so this read does not block: it returns data, or
            // 0 once every writer has closed (POLLHUP is only raised after a writer has been
            // and gone, so a FIFO waiting for its first writer keeps us waiting).
            match self.file.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Ok(n) => {
                    let now = Instant::now();
                    if self.stream && n > 0 && n < buf.len() {
                        self.trickle_at = Some(now);
                        let over = self.read_at.map_or(pace::FIRST, |at| now - at);
                        self.pace.drained(n, over);
                    }
                    self.read_at = Some(now);
                    return Ok(n);
                }
                other => return other,
            }
        }
    }
}

/// Replays a pghot-trace v1 file, FIFO or stdin (`-`).
pub struct TraceSource {
    path: String,
    reader: BufReader<StoppableReader>,
}

impl TraceSource {
    /// Opens the trace. A FIFO is opened without waiting for a writer.
    pub fn open(path: &str) -> Result<Self, SourceError> {
        let open_err = |source| SourceError::TraceOpen {
            path: path.to_string(),
            source,
        };
        let file = if path == "-" {
            let fd: OwnedFd = io::stdin().as_fd().try_clone_to_owned().map_err(open_err)?;
            File::from(fd)
        } else {
            let meta = std::fs::metadata(path).map_err(open_err)?;
            if meta.is_dir() {
                return Err(open_err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "is a directory",
                )));
            }
            let mut options = std::fs::OpenOptions::new();
            options.read(true);
            if meta.file_type().is_fifo() {
                // A blocking open of a FIFO waits for a writer; poll does the waiting instead.
                options.custom_flags(libc::O_NONBLOCK);
            }
            options.open(path).map_err(open_err)?
        };
        let stream = !file.metadata().map_err(open_err)?.is_file();
        let reader = StoppableReader {
            file,
            stop: StopToken::new(),
            stream,
            trickle_at: None,
            gather: GatherOrder::SleepFirst,
            pace: DrainPace::new(pace::PAGE_BYTES),
            read_at: None,
        };
        Ok(TraceSource {
            path: path.to_string(),
            reader: BufReader::with_capacity(1 << 16, reader),
        })
    }
}

/// Reads one line into `line` (without the newline), at most [`MAX_LINE_BYTES`]; the rest of an
/// over-long line is consumed and reported. `Ok(false)` at end of input.
pub fn read_line_bounded(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
) -> io::Result<Option<Result<(), TraceLineError>>> {
    line.clear();
    let mut too_long = false;
    let mut saw_any = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(if saw_any {
                Some(if too_long {
                    Err(TraceLineError::TooLong)
                } else {
                    Ok(())
                })
            } else {
                None
            });
        }
        saw_any = true;
        let (chunk, done) = match memchr_newline(available) {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long {
            if line.len() + chunk.len() > MAX_LINE_BYTES {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(if too_long {
                Err(TraceLineError::TooLong)
            } else {
                Ok(())
            }));
        }
    }
}

/// Samples per `record_batch` call.
const BATCH: usize = 32;

/// What one line of a trace holds.
enum Line {
    Sample(Sample),
    SamplePeriod(u64),
    /// A comment or a blank line.
    Nothing,
}

/// The `memchr` crate's search, a word or vector at a time: a byte-at-a-time `position` took
/// 260 instructions a line (cachegrind, BENCHMARKS.md "Trace lines").
fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

impl Source for TraceSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Trace
    }

    fn describe(&self) -> String {
        format!("trace:{}", self.path)
    }

    fn run(&mut self, sinks: &dyn SinkFactory, stop: &StopToken) -> Result<(), SourceError> {
        let mut sink = sinks.sink();
        // The reader must see the daemon's token while it waits in poll.
        self.reader.get_mut().stop = stop.clone();
        let mut line = Vec::with_capacity(256);
        let mut line_no: u64 = 0;
        let mut bad: u64 = 0;
        // Parsed samples go to the sink in batches (it prefetches table slots ahead), but never
        // wait for more input: the batch is handed over whenever the read buffer runs dry.
        let mut batch: Vec<Sample> = Vec::with_capacity(BATCH);
        loop {
            if !batch.is_empty() && (batch.len() == BATCH || self.reader.buffer().is_empty()) {
                sink.record_batch(&batch);
                batch.clear();
            }
            let outcome = match read_line_bounded(&mut self.reader, &mut line) {
                Ok(None) => break,
                Ok(Some(outcome)) => outcome,
                Err(e) if e.get_ref().is_some_and(|inner| inner.is::<Stopped>()) => break,
                Err(e) if stop.is_stopped() => {
                    tracing::debug!(path = %self.path, "trace read ended by stop: {e}");
                    break;
                }
                Err(source) => {
                    return Err(SourceError::TraceRead {
                        path: self.path.clone(),
                        source,
                    });
                }
            };
            line_no += 1;
            let parsed = outcome.and_then(|()| {
                let text = std::str::from_utf8(&line).map_err(|_| TraceLineError::NotUtf8)?;
                match parse_sample_period(text) {
                    Some(period) => period.map(Line::SamplePeriod),
                    None => parse_line(text).map(|s| s.map_or(Line::Nothing, Line::Sample)),
                }
            });
            match parsed {
                Ok(Line::Sample(sample)) => batch.push(sample),
                Ok(Line::Nothing) => {}
                Ok(Line::SamplePeriod(period)) => {
                    // It applies to the samples after it.
                    sink.record_batch(&batch);
                    batch.clear();
                    sink.set_sample_period(period);
                }
                Err(reason) => {
                    bad += 1;
                    sink.count(Counter::TraceBadLines, 1);
                    if bad <= LOGGED_BAD_LINES {
                        tracing::warn!("{}:{line_no}: skipped malformed line: {reason}", self.path);
                    }
                    if bad == LOGGED_BAD_LINES {
                        tracing::warn!(
                            "{}: further malformed lines are only counted (trace_bad_lines)",
                            self.path
                        );
                    }
                }
            }
            // Poll the stop flag between lines too: a fast regular file never waits in poll.
            if line_no.is_multiple_of(4096) && stop.is_stopped() {
                break;
            }
        }
        sink.record_batch(&batch);
        if bad > 0 {
            tracing::warn!(
                "{}: {bad} malformed line(s) skipped of {line_no}",
                self.path
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::collect::Collector;
    use std::io::Seek;
    use std::time::Duration;

    fn sample() -> Sample {
        Sample {
            time_ns: 1_000_000_000,
            cpu: 1,
            pid: 4242,
            tid: 4243,
            vaddr: 0x7f00_0000_1000,
            paddr: Some(0x8000_a000),
            op: AccessOp::Store,
            served_from: DataSource::ExtMem,
            node: Some(2),
            latency: Some(310),
            source: SourceKind::Trace,
        }
    }

    #[test]
    fn parses_full_and_minimal_lines() {
        let s = parse_line("1000000000 1 4242 4243 0x7f0000001000 0x8000a000 S extmem 2 310")
            .unwrap()
            .unwrap();
        assert_eq!(s, sample());
        let s = parse_line("5 0 1 1 0x1000 - L unknown -  # trailing comment")
            .unwrap()
            .unwrap();
        assert_eq!((s.paddr, s.node, s.latency), (None, None, None));
        assert_eq!(s.served_from, DataSource::Unknown);
        assert_eq!(
            parse_line("5 0 1 1 0x1000 - L dram 0 -")
                .unwrap()
                .unwrap()
                .latency,
            None
        );
    }

    #[test]
    fn blank_and_comment_lines_are_not_samples() {
        assert_eq!(parse_line(""), Ok(None));
        assert_eq!(parse_line("   \t "), Ok(None));
        assert_eq!(parse_line(TRACE_HEADER), Ok(None));
    }

    #[test]
    fn bad_lines_name_the_field_and_the_reason() {
        let cases = [
            ("1 2 3", "expected 9 or 10 fields, found 3"),
            ("1 0 1 1 0x1 - L dram 0 1 extra", "found 11"),
            ("x 0 1 1 0x1000 - L dram 0", "field time_ns: 'x'"),
            ("1 -1 1 1 0x1000 - L dram 0", "field cpu: '-1'"),
            ("1 0 4294967296 1 0x1000 - L dram 0", "field pid"),
            ("1 0 1 1 1000 - L dram 0", "field vaddr: '1000' is not hex"),
            ("1 0 1 1 0x - L dram 0", "field vaddr: '0x'"),
            ("1 0 1 1 0x1000 0xzz L dram 0", "field paddr"),
            ("1 0 1 1 0x1000 - R dram 0", "field op: 'R'"),
            ("1 0 1 1 0x1000 - L cxl 0", "field src: 'cxl'"),
            ("1 0 1 1 0x1000 - L dram 65536", "field node: '65536'"),
            ("1 0 1 1 0x1000 - L dram 0 fast", "field latency: 'fast'"),
            // Rust's parsers take a sign; the format does not.
            ("+5 0 1 1 0x1000 - L dram 0", "field time_ns: '+5'"),
            ("1 +0 1 1 0x1000 - L dram 0", "field cpu: '+0'"),
            ("1 0 1 1 0x+7f00 - L dram 0", "field vaddr: '0x+7f00'"),
            ("1 0 1 1 0x1000 0x+1 L dram 0", "field paddr: '0x+1'"),
            ("1 0 1 1 0x1000 - L dram +2", "field node: '+2'"),
            ("1 0 1 1 0x1000 - L dram 0 +310", "field latency: '+310'"),
            ("1 0 1 1 0x1000 - L dram ٣", "field node: '٣'"),
        ];
        for (line, want) in cases {
            let err = parse_line(line).unwrap_err().to_string();
            assert!(err.contains(want), "{line:?}: got {err:?}, want {want:?}");
        }
    }

    /// The one-pass digit parser against std's: every value `from_str_radix` takes without a
    /// sign is the same number, overflow (u64::MAX + 1, by hand: 18446744073709551616) and
    /// any other byte are refused.
    #[test]
    fn digits_agree_with_from_str_radix_and_refuse_overflow() {
        let cases = [
            ("0", 10),
            ("007", 10),
            ("18446744073709551615", 10),
            ("ffffffffffffffff", 16),
            ("FfFf", 16),
            ("7f0d1234abcd", 16),
            ("9", 10),
        ];
        for (text, radix) in cases {
            let want = u64::from_str_radix(text, radix).ok();
            assert!(want.is_some(), "{text}");
            assert_eq!(digits(text, radix), want, "{text} base {radix}");
        }
        for (text, radix) in [
            ("18446744073709551616", 10),
            ("10000000000000000", 16),
            ("", 10),
            ("a", 10),
            ("g", 16),
            ("1 ", 10),
            ("+1", 10),
            ("-1", 10),
            ("٣", 10),
        ] {
            assert_eq!(digits(text, radix), None, "{text:?} base {radix}");
        }
    }

    #[test]
    fn writer_formats_like_the_format_macros() {
        let mut extreme = sample();
        extreme.time_ns = u64::MAX;
        extreme.cpu = u32::MAX;
        extreme.vaddr = 0;
        extreme.paddr = Some(u64::MAX);
        extreme.node = Some(NodeId::MAX);
        extreme.latency = Some(u32::MAX);
        for s in [sample(), extreme] {
            let mut w = TraceWriter::new(Vec::new()).unwrap();
            w.write_sample(&s).unwrap();
            let text = String::from_utf8(w.into_inner()).unwrap();
            let line = text.lines().nth(1).unwrap();
            let want = format!(
                "{} {} {} {} {:#x} {:#x} S extmem {} {}",
                s.time_ns,
                s.cpu,
                s.pid,
                s.tid,
                s.vaddr,
                s.paddr.unwrap(),
                s.node.unwrap(),
                s.latency.unwrap()
            );
            assert_eq!(line, want);
        }
    }

    #[test]
    fn writer_output_parses_back_to_the_same_samples() {
        let mut minimal = sample();
        minimal.paddr = None;
        minimal.node = None;
        minimal.latency = None;
        minimal.op = AccessOp::Load;
        minimal.served_from = DataSource::PeerCache;
        let mut writer = TraceWriter::new(Vec::new()).unwrap();
        writer.write_sample(&sample()).unwrap();
        writer.write_sample(&minimal).unwrap();
        let text = String::from_utf8(writer.into_inner()).unwrap();
        let parsed: Vec<Sample> = text
            .lines()
            .filter_map(|l| parse_line(l).unwrap())
            .collect();
        assert_eq!(parsed, vec![sample(), minimal]);
    }

    #[test]
    fn source_skips_bad_lines_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let long = "9".repeat(MAX_LINE_BYTES + 10);
        let mut text =
            format!("{TRACE_HEADER}\n1 0 1 1 0x1000 - L dram 0\nbogus\n{long}\n").into_bytes();
        text.extend_from_slice(b"\xff\n2 0 1 1 0x2000 - S extmem 2");
        std::fs::write(&path, text).unwrap();
        let mut src = TraceSource::open(path.to_str().unwrap()).unwrap();
        let sinks = Collector::default();
        src.run(&sinks, &StopToken::new()).unwrap();
        let got = sinks.take();
        assert_eq!(got.samples.len(), 2);
        assert_eq!(got.samples[1].vaddr, 0x2000);
        assert_eq!(got.count_of(Counter::TraceBadLines), 3);
        assert!(got.counts.iter().all(|(c, _)| *c == Counter::TraceBadLines));
    }

    #[test]
    fn a_sample_period_line_reaches_the_sink_before_the_samples_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let l = "1 0 42 42 0x1000 - L unknown -";
        let text = format!(
            "{TRACE_HEADER}\n{l}\n# sample_period 100\n{l}\n{l}\n# sample_period 0\n\
             # sample_period x\n# sample_period  2000 \n{l}\n"
        );
        std::fs::write(&path, text).unwrap();
        let sinks = Collector::default();
        TraceSource::open(path.to_str().unwrap())
            .unwrap()
            .run(&sinks, &StopToken::new())
            .unwrap();
        let got = sinks.take();
        assert_eq!(got.samples.len(), 4);
        assert_eq!(got.periods, vec![(1, 100), (3, 2000)]);
        // 0 and a non-number are malformed lines, named as such.
        assert_eq!(got.count_of(Counter::TraceBadLines), 2);
        assert!(matches!(
            parse_sample_period("# sample_period 0"),
            Some(Err(TraceLineError::SamplePeriod(_)))
        ));
        assert!(matches!(
            parse_sample_period("# sample_period +3"),
            Some(Err(TraceLineError::SamplePeriod(_)))
        ));
        assert!(parse_sample_period("# sample period 3").is_none());
        assert!(parse_sample_period(l).is_none());
    }

    #[test]
    fn open_reports_missing_files_and_directories() {
        let err = TraceSource::open("/nonexistent/x.trace").err().unwrap();
        assert!(
            err.to_string()
                .starts_with("opening trace /nonexistent/x.trace")
        );
        let dir = tempfile::tempdir().unwrap();
        let err = TraceSource::open(dir.path().to_str().unwrap())
            .err()
            .unwrap();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

    #[test]
    fn fifo_ends_when_its_writer_closes_and_stops_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut src = TraceSource::open(fifo.to_str().unwrap()).unwrap();
        let writer_path = fifo.clone();
        let writer = std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(writer_path)
                .unwrap();
            writeln!(f, "1 0 1 1 0x1000 - L dram 0").unwrap();
            writeln!(f, "2 0 1 1 0x2000 - L dram 0").unwrap();
        });
        let sinks = Collector::default();
        src.run(&sinks, &StopToken::new()).unwrap();
        writer.join().unwrap();
        assert_eq!(sinks.take().samples.len(), 2);

        // With no writer at all, the source waits until asked to stop.
        let mut idle = TraceSource::open(fifo.to_str().unwrap()).unwrap();
        let stop = StopToken::new();
        let stopper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(150));
                stop.stop();
            })
        };
        let sinks = Collector::default();
        idle.run(&sinks, &stop).unwrap();
        stopper.join().unwrap();
        assert!(sinks.take().samples.is_empty());
    }

    #[test]
    fn a_sample_is_handed_over_while_the_fifo_writer_is_still_idle() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut src = TraceSource::open(fifo.to_str().unwrap()).unwrap();
        let (sinks, stop) = (Collector::default(), StopToken::new());
        let (wrote_tx, wrote_rx) = std::sync::mpsc::channel();
        let (seen_tx, seen_rx) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            writeln!(f, "1 0 1 1 0x1000 - L dram 0").unwrap();
            wrote_tx.send(()).unwrap();
            // Keep the FIFO open (no more input, no end) until the test has looked.
            let _ = seen_rx.recv_timeout(std::time::Duration::from_secs(5));
        });
        std::thread::scope(|s| {
            let runner = s.spawn(|| src.run(&sinks, &stop));
            wrote_rx.recv().unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while sinks.shared.lock().samples.is_empty() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let seen = sinks.shared.lock().samples.len();
            seen_tx.send(()).unwrap();
            writer.join().unwrap();
            runner.join().unwrap().unwrap();
            assert_eq!(
                seen, 1,
                "the one sample was held back while the writer idled"
            );
        });
    }

    /// A reader on a pipe's read end, in the given gather order, and the write end.
    fn piped(order: GatherOrder) -> (StoppableReader, File) {
        let (read, write) = nix::unistd::pipe().unwrap();
        let reader = StoppableReader {
            file: File::from(read),
            stop: StopToken::new(),
            stream: true,
            trickle_at: None,
            gather: order,
            pace: DrainPace::new(pace::PAGE_BYTES),
            read_at: None,
        };
        (reader, File::from(write))
    }

    #[test]
    fn a_trickle_is_left_to_gather_for_as_long_as_its_writer_takes_to_send_a_page() {
        let (mut r, mut w) = piped(GatherOrder::SleepFirst);
        let mut buf = vec![0u8; 1 << 16];
        // 1,024 bytes that came over 100 ms: a page (4,096) takes the writer 400 ms.
        r.read_at = Some(Instant::now() - Duration::from_millis(100));
        w.write_all(&[b'x'; 1024]).unwrap();
        assert_eq!(r.read(&mut buf).unwrap(), 1024);
        let wait = r.pace.wait();
        assert!(
            wait >= Duration::from_millis(400) && wait < Duration::from_millis(480),
            "{wait:?}"
        );
        assert!(r.trickle_at.is_some());
        // A read that fills the buffer leaves more behind: the next read does not wait.
        w.write_all(&[b'x'; 100]).unwrap();
        assert_eq!(r.read(&mut buf[..50]).unwrap(), 50);
        assert!(r.trickle_at.is_none());
        // A regular file never gathers.
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"1 0 1 1 0x1000 - L dram 0\n").unwrap();
        file.rewind().unwrap();
        let mut f = StoppableReader {
            file,
            stop: StopToken::new(),
            stream: false,
            trickle_at: None,
            gather: GatherOrder::SleepFirst,
            pace: DrainPace::new(pace::PAGE_BYTES),
            read_at: None,
        };
        assert!(f.read(&mut buf).unwrap() > 0);
        assert!(f.trickle_at.is_none());
    }

    #[test]
    fn the_gather_waits_in_the_order_that_takes_one_wake_up() {
        let gather = Duration::from_millis(30);
        // Sleeping first with no data when the sleep ends: the writer is slower than the
        // gather, so the next gather waits for data first.
        let (mut r, _w) = piped(GatherOrder::SleepFirst);
        let began = Instant::now();
        assert!(r.gather(began + gather).unwrap());
        assert!(began.elapsed() >= gather);
        assert_eq!(r.gather, GatherOrder::DataFirst);

        // Sleeping first with data there when the sleep ends: one wake-up, the order stays.
        let (mut r, mut w) = piped(GatherOrder::SleepFirst);
        w.write_all(b"1 0 1 1 0x1000 - L dram 0\n").unwrap();
        assert!(r.gather(Instant::now() + gather).unwrap());
        assert_eq!(r.gather, GatherOrder::SleepFirst);

        // Data first, arriving after the gather was due: no sleep, the order stays.
        let (mut r, mut w) = piped(GatherOrder::DataFirst);
        w.write_all(b"x\n").unwrap();
        let began = Instant::now();
        assert!(r.gather(began).unwrap());
        assert!(began.elapsed() < Duration::from_secs(5));
        assert_eq!(r.gather, GatherOrder::DataFirst);

        // Data first, arriving before the gather is due: the rest is slept out, and the writer
        // is faster than the gather, so the next gather sleeps first.
        let (mut r, mut w) = piped(GatherOrder::DataFirst);
        w.write_all(b"x\n").unwrap();
        let began = Instant::now();
        assert!(r.gather(began + gather).unwrap());
        assert!(began.elapsed() >= gather);
        assert_eq!(r.gather, GatherOrder::SleepFirst);

        // A hung-up stream is readable (the read returns its end): no wait for data.
        let (mut r, w) = piped(GatherOrder::DataFirst);
        drop(w);
        assert!(r.gather(Instant::now()).unwrap());
        assert_eq!(r.gather, GatherOrder::DataFirst);
    }

    #[test]
    fn a_gather_ends_on_stop_in_either_order() {
        for order in [GatherOrder::SleepFirst, GatherOrder::DataFirst] {
            let (mut r, _w) = piped(order);
            r.stop.stop();
            let began = Instant::now();
            assert!(
                !r.gather(began + Duration::from_secs(30)).unwrap(),
                "{order:?}"
            );
            assert!(began.elapsed() < Duration::from_secs(5), "{order:?}");
        }
    }
}
