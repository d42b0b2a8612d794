//! `--emit-samples`: a pghot-trace v1 stream of the workload's own accesses, one of every
//! `--sample-period`, for pghotd to read from a FIFO (or for a file to keep).
//!
//! All workers share one [`TraceWriter`] behind a mutex; a flusher thread calls [`Emitter::flush`]
//! every [`FLUSH_EVERY`] so a reader sees samples within that time. When the reader goes away
//! (EPIPE: Rust ignores SIGPIPE, so the write fails instead of killing us) or any other write
//! fails, emission stops for good: later samples are only counted as dropped, and the workload
//! runs on.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

use super::WorkloadError;
use super::sys;
use crate::sampler::trace::TraceWriter;
use crate::sampler::{AccessOp, DataSource, Sample, SourceKind};

/// Longest a sample waits in the buffer.
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);

struct State {
    writer: Option<TraceWriter<BufWriter<File>>>,
    emitted: u64,
    dropped: u64,
    error: Option<String>,
}

/// What happened to the samples, for the RESULT line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EmitStats {
    /// Samples written before emission stopped (if it did, the last few buffered ones may
    /// not have reached the reader).
    pub samples_emitted: u64,
    /// Samples made after emission stopped.
    pub samples_dropped: u64,
    /// Why emission stopped, if it did.
    pub emit_error: Option<String>,
}

/// The shared sample writer.
pub struct Emitter {
    path: PathBuf,
    state: Mutex<State>,
}

impl std::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Emitter {
    /// Opens `path` for writing (creating a regular file if it does not exist) and writes the
    /// trace header. A FIFO's open blocks until a reader opens it.
    pub fn open(path: &Path) -> Result<Emitter, WorkloadError> {
        let open_err = |source| WorkloadError::EmitOpen {
            path: path.to_path_buf(),
            source,
        };
        if is_fifo(path) {
            eprintln!(
                "pghot-workload: waiting for a reader on FIFO {}",
                path.display()
            );
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(open_err)?;
        let mut writer =
            TraceWriter::new(BufWriter::with_capacity(1 << 16, file)).map_err(open_err)?;
        writer.flush().map_err(open_err)?;
        Ok(Emitter {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                writer: Some(writer),
                emitted: 0,
                dropped: 0,
                error: None,
            }),
        })
    }

    /// Writes one sample, or counts it as dropped once emission has stopped.
    pub fn emit(&self, sample: &Sample) {
        let mut state = self.state.lock();
        let Some(writer) = state.writer.as_mut() else {
            state.dropped += 1;
            return;
        };
        match writer.write_sample(sample) {
            Ok(()) => state.emitted += 1,
            Err(e) => {
                state.dropped += 1;
                self.stop(&mut state, &e);
            }
        }
    }

    /// Pushes buffered lines to the reader.
    pub fn flush(&self) {
        let mut state = self.state.lock();
        let Some(writer) = state.writer.as_mut() else {
            return;
        };
        if let Err(e) = writer.flush() {
            self.stop(&mut state, &e);
        }
    }

    /// Flushes and reports the counts.
    pub fn finish(&self) -> EmitStats {
        self.flush();
        let state = self.state.lock();
        EmitStats {
            samples_emitted: state.emitted,
            samples_dropped: state.dropped,
            emit_error: state.error.clone(),
        }
    }

    /// Stops emitting for good after a write error. Said once on stderr, since the run itself
    /// goes on.
    fn stop(&self, state: &mut State, err: &io::Error) {
        let reason = if err.kind() == io::ErrorKind::BrokenPipe {
            "broken pipe (the reader is gone)".to_string()
        } else {
            err.to_string()
        };
        eprintln!(
            "pghot-workload: writing samples to {}: {reason}; no more samples are emitted",
            self.path.display()
        );
        state.error = Some(reason);
        // Dropping the writer tries one more flush into the broken fd; its error is the one we
        // already have.
        state.writer = None;
    }
}

/// Whether `path` is a FIFO (whose open for writing blocks until a reader comes).
pub fn is_fifo(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// A sample of the calling thread's access at `vaddr`, stamped now.
pub fn sample_now(pid: u32, tid: u32, vaddr: u64, store: bool) -> Sample {
    Sample {
        time_ns: sys::monotonic_ns(),
        cpu: sys::current_cpu(),
        pid,
        tid,
        vaddr,
        paddr: None,
        op: if store {
            AccessOp::Store
        } else {
            AccessOp::Load
        },
        served_from: DataSource::Unknown,
        node: None,
        latency: None,
        source: SourceKind::Trace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::trace::parse_line;

    #[test]
    fn samples_round_trip_through_the_trace_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.trace");
        let emitter = Emitter::open(&path).unwrap();
        let s = sample_now(42, 43, 0x7f00_0000_1040, true);
        emitter.emit(&s);
        emitter.emit(&sample_now(42, 43, 0x7f00_0000_2000, false));
        let stats = emitter.finish();
        assert_eq!(stats.samples_emitted, 2);
        assert_eq!(stats.samples_dropped, 0);
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed: Vec<Sample> = text
            .lines()
            .filter_map(|l| parse_line(l).unwrap())
            .collect();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0], s);
        assert_eq!(parsed[1].op, AccessOp::Load);
    }

    #[test]
    fn a_gone_reader_stops_emission_without_failing() {
        let (reader, writer) = nix::unistd::pipe().unwrap();
        drop(reader);
        let emitter = Emitter {
            path: PathBuf::from("pipe"),
            state: Mutex::new(State {
                writer: Some(TraceWriter::new(BufWriter::new(File::from(writer))).unwrap()),
                emitted: 0,
                dropped: 0,
                error: None,
            }),
        };
        emitter.emit(&sample_now(1, 1, 0x1000, false));
        emitter.flush();
        emitter.emit(&sample_now(1, 1, 0x2000, false));
        emitter.emit(&sample_now(1, 1, 0x3000, false));
        let stats = emitter.finish();
        assert_eq!(stats.samples_emitted, 1);
        assert_eq!(stats.samples_dropped, 2);
        assert!(stats.emit_error.unwrap().contains("broken pipe"));
    }
}
