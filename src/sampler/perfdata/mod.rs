//! `--source perfdata:PATH`: replays a file `perf record` wrote, through the same record parser
//! and decoders as the live perf sources.
//!
//! The container (header, attributes, feature sections, the data section's records in time
//! order) is read by the `linux-perf-data` crate, after [`guard::check`] has held every size
//! the crate allocates from to the file's real length. Each sample record then goes, header
//! and body as the kernel wrote them, through [`CpuReader::replay_record`]: the function a
//! live ring's records go through, with a [`PerfPlan`] built for that record's event from the
//! file's own header ([`events`]): its `sample_type`, its PMU by name, the recording CPU's
//! model for the IBS errata. So `perf record -e ibs_op// --raw-samples` on an AMD box, `perf mem
//! record` on Intel and `perf record -e page-faults -d` anywhere replay as their live sources
//! would have run there.
//!
//! Like `trace:`, the replay runs as fast as it reads and the source ends at the end of the
//! file. Records of events pghotd does not decode (a `dummy` event, `cycles`) are counted in
//! `perfdata_skipped_samples` and named once in the log. Only little-endian files are read
//! (the record decoders are; every machine with IBS or PEBS is), and not compressed ones
//! (`perf record -z`).

pub mod build;
mod events;
mod guard;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::os::unix::fs::OpenOptionsExt;

use linux_perf_data::{PerfFile, PerfFileReader, PerfFileRecord, PerfRecordIter};

use super::perf::record::RECORD_SAMPLE;
use super::perf::{CpuReader, PerfPlan};
use super::{SampleSink, SinkFactory, Source, SourceError};
use crate::sample::SourceKind;
use crate::stats::Counter;
use crate::stop::StopToken;

pub use events::{Recorder, cpu_model};
pub use guard::Layout;

/// Largest perf.data read. The crate holds a round of records (between perf's FINISHED_ROUND
/// markers) in memory to sort them, and a file without markers entirely; 16 GiB is hours of
/// system-wide IBS at the default period.
pub const MAX_FILE_BYTES: u64 = 16 << 30;

/// What is wrong with a perf.data file.
#[derive(Debug, thiserror::Error)]
pub enum PerfDataError {
    #[error("is {kind}, not a regular file")]
    NotRegular { kind: &'static str },
    #[error("is {len} bytes, more than the {MAX_FILE_BYTES} read")]
    TooLarge { len: u64 },
    #[error("is {len} bytes, too short for a perf.data header")]
    TooShort { len: u64 },
    #[error("is not a perf.data file (its magic is \"{magic}\", not \"PERFILE2\")")]
    NotPerfData { magic: String },
    #[error("is a big-endian perf.data; pghotd reads little-endian (x86) recordings")]
    BigEndian,
    #[error("is a pipe-mode perf.data (perf record -o -); record to a file with -o FILE")]
    PipeMode,
    #[error("is compressed (perf record -z); record without -z")]
    Compressed,
    #[error("has a bad header: {0}")]
    Header(String),
    #[error(
        "is cut short: its {what} (bytes {offset}..{}) ends past the file's {len} bytes",
        end.map_or_else(|| "overflow".to_string(), |e| e.to_string())
    )]
    Truncated {
        what: String,
        offset: u64,
        end: Option<u64>,
        len: u64,
    },
    #[error("has a bad record at byte {offset}: {what}")]
    Record { offset: u64, what: String },
    #[error("could not be parsed: {0}")]
    Parse(#[from] linux_perf_data::Error),
    #[error("has no event pghotd decodes:\n  {}", .0.join("\n  "))]
    NothingReadable(Vec<String>),
    #[error("reading: {0}")]
    Io(#[from] io::Error),
}

/// What a replay read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Records of the data section (perf's own records, such as FINISHED_ROUND, included).
    pub records: u64,
    /// Sample records handed to a decoder.
    pub samples: u64,
    /// Sample records of events pghotd does not decode.
    pub skipped: u64,
}

/// An opened perf.data: the header read and checked, one plan per event it can decode.
pub struct PerfData<R: Read> {
    label: String,
    layout: Layout,
    file: PerfFile,
    records: PerfRecordIter<R>,
    /// Per attr, in the file's order: its plan, or why its records are not read.
    plans: Vec<Result<PerfPlan, String>>,
    names: Vec<String>,
    recorder: Recorder,
    period: Option<u64>,
}

impl<R: Read + Seek> PerfData<R> {
    /// Checks and parses the header of the `len`-byte file `reader` reads. `label` names it
    /// in logs.
    pub fn open(mut reader: R, len: u64, label: &str) -> Result<Self, PerfDataError> {
        if len > MAX_FILE_BYTES {
            return Err(PerfDataError::TooLarge { len });
        }
        let layout = guard::check(&mut reader, len)?;
        reader.rewind()?;
        let PerfFileReader {
            perf_file,
            record_iter,
        } = PerfFileReader::parse_file(reader)?;
        let recorder = Recorder::of(&perf_file).map_err(PerfDataError::Header)?;
        let attrs = perf_file.event_attributes();
        let plans: Vec<_> = attrs
            .iter()
            .map(|a| events::plan_for(a, &recorder))
            .collect();
        let names: Vec<String> = attrs.iter().map(events::event_name).collect();
        if plans.iter().all(Result::is_err) {
            let why = names
                .iter()
                .zip(&plans)
                .filter_map(|(name, plan)| plan.as_ref().err().map(|e| format!("{name}: {e}")))
                .collect();
            return Err(PerfDataError::NothingReadable(why));
        }
        let period = attrs
            .iter()
            .zip(&plans)
            .find(|(_, p)| p.is_ok())
            .and_then(|(a, _)| events::fixed_period(a));
        Ok(PerfData {
            label: label.to_string(),
            layout,
            file: perf_file,
            records: record_iter,
            plans,
            names,
            recorder,
            period,
        })
    }

    /// The kind of the first event decoded (the source's kind in logs and status).
    pub fn kind(&self) -> SourceKind {
        self.plans
            .iter()
            .find_map(|p| p.as_ref().ok())
            .map_or(SourceKind::Trace, |p| p.kind)
    }

    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// One line per event: its name and the decoder, or why it is skipped.
    pub fn events(&self) -> Vec<String> {
        self.names
            .iter()
            .zip(&self.plans)
            .map(|(name, plan)| match plan {
                Ok(p) => format!("{name} ({})", p.kind.name()),
                Err(why) => format!("{name} (skipped: {why})"),
            })
            .collect()
    }

    /// Decodes every record into `sink` until the file ends or `stop` is raised.
    pub fn replay(
        &mut self,
        sink: &mut dyn SampleSink,
        stop: &StopToken,
    ) -> Result<Replayed, PerfDataError> {
        let Some(first) = self.plans.iter().find_map(|p| p.as_ref().ok()) else {
            return Ok(Replayed::default());
        };
        if let Some(period) = self.period {
            sink.set_sample_period(period);
        }
        let mut reader = CpuReader::with_origin(first, self.label.clone());
        let mut done = Replayed::default();
        let mut bytes: Vec<u8> = Vec::with_capacity(512);
        loop {
            let next = self.records.next_record(&mut self.file);
            let record = match next {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(e) => {
                    reader.finish(sink);
                    return Err(PerfDataError::Record {
                        offset: self.layout.data_offset,
                        what: format!("after {} records: {e}", done.records),
                    });
                }
            };
            done.records += 1;
            let PerfFileRecord::EventRecord { attr_index, record } = record else {
                continue;
            };
            let is_sample = record.record_type.0 == RECORD_SAMPLE;
            let Some(Ok(plan)) = self.plans.get(attr_index) else {
                if is_sample {
                    done.skipped += 1;
                    sink.count(Counter::PerfDataSkippedSamples, 1);
                }
                continue;
            };
            done.samples += u64::from(is_sample);
            // The record as the kernel wrote it: `struct perf_event_header`, then the body.
            let body = record.data.as_slice();
            bytes.clear();
            bytes.extend_from_slice(&record.record_type.0.to_ne_bytes());
            bytes.extend_from_slice(&record.misc.to_ne_bytes());
            let size = u16::try_from(8 + body.len()).unwrap_or(u16::MAX);
            bytes.extend_from_slice(&size.to_ne_bytes());
            bytes.extend_from_slice(&body);
            reader.replay_record(plan, &bytes, sink);
            if done.records.is_multiple_of(4096) && stop.is_stopped() {
                break;
            }
        }
        reader.finish(sink);
        Ok(done)
    }
}

/// Opens `path` for reading: a regular file (not a FIFO that would block, not a device), not
/// larger than [`MAX_FILE_BYTES`].
fn open_file(path: &str) -> Result<(File, u64), PerfDataError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(PerfDataError::NotRegular {
            kind: crate::safefs::kind_name(&meta),
        });
    }
    Ok((file, meta.len()))
}

/// The `perfdata:PATH` source.
pub struct PerfDataSource {
    path: String,
    data: PerfData<BufReader<File>>,
}

impl PerfDataSource {
    /// Opens and checks the file now, so a bad file fails at startup.
    pub fn open(path: &str) -> Result<Self, SourceError> {
        let err = |source| SourceError::PerfData {
            path: path.to_string(),
            source: Box::new(source),
        };
        let (file, len) = open_file(path).map_err(err)?;
        let data =
            PerfData::open(BufReader::with_capacity(1 << 16, file), len, path).map_err(err)?;
        let r = data.recorder();
        tracing::info!(
            "perfdata {path}: {} records; recorded on cpuid {} ({}); events: {}",
            data.layout.records,
            r.cpuid.as_deref().unwrap_or("unknown"),
            if r.cpu == crate::sampler::ibs::CpuModel::UNKNOWN {
                "no IBS errata applied".to_string()
            } else {
                format!("family {:#x} model {:#x}", r.cpu.family, r.cpu.model)
            },
            data.events().join(", ")
        );
        Ok(PerfDataSource {
            path: path.to_string(),
            data,
        })
    }
}

impl Source for PerfDataSource {
    fn kind(&self) -> SourceKind {
        self.data.kind()
    }

    fn describe(&self) -> String {
        format!("perfdata:{}", self.path)
    }

    fn run(&mut self, sinks: &dyn SinkFactory, stop: &StopToken) -> Result<(), SourceError> {
        let mut sink = sinks.sink();
        let done = self
            .data
            .replay(&mut *sink, stop)
            .map_err(|source| SourceError::PerfData {
                path: self.path.clone(),
                source: Box::new(source),
            })?;
        tracing::info!(
            "perfdata {}: replayed {} sample records of {} records",
            self.path,
            done.samples,
            done.records
        );
        if done.skipped > 0 {
            tracing::warn!(
                "perfdata {}: {} sample records of events pghotd does not decode were skipped",
                self.path,
                done.skipped
            );
        }
        Ok(())
    }
}
