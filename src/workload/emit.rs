//! `--emit-samples`: a pghot-trace v1 stream of the workload's own accesses, one of every
//! `--sample-period`, for pghotd to read from a FIFO (or for a file to keep).
//!
//! Each worker formats its samples into a buffer of its own ([`WorkerEmitter`]) and hands it to
//! the writer thread ([`Emitter::write_until`]) once it holds [`HANDOVER_BYTES`] or its oldest
//! sample is [`FLUSH_EVERY`] old (checked at every sample and between chunks of accesses), so a worker never waits on a lock or a write(2) while the
//! reader catches up: an emulated IBS sample should cost the workload its formatting and
//! nothing else (a shared writer behind a mutex put the worker to sleep on every flush, about
//! 0.09 s in 4 s under TCG). Only when [`QUEUED_BUFFERS`] wait does a worker block, as it
//! would on a full pipe. When the reader goes away (EPIPE: Rust ignores SIGPIPE, so the write
//! fails instead of killing us) or any other write fails, emission stops for good: later
//! samples are only counted as dropped, and the workload runs on.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use serde::Serialize;

use super::WorkloadError;
use super::sys;
use crate::sampler::trace::TraceWriter;
use crate::sampler::{AccessOp, DataSource, Sample, SourceKind};

/// Longest a sample waits in its worker's buffer (plus one chunk of accesses).
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// A worker hands its buffer over once it holds this many bytes (about 300 lines).
pub const HANDOVER_BYTES: usize = 16 << 10;

/// Buffers handed over and not yet written before a worker has to wait for the writer.
pub const QUEUED_BUFFERS: usize = 64;

/// What happened to the samples, for the RESULT line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EmitStats {
    /// Samples written to the output (if emission stopped, the ones in flight were not).
    pub samples_emitted: u64,
    /// Samples made after emission stopped, or lost with a failed write.
    pub samples_dropped: u64,
    /// Why emission stopped, if it did.
    pub emit_error: Option<String>,
}

struct Output {
    file: Option<File>,
    error: Option<String>,
}

/// The sample stream: its output, and the buffers on their way to it.
pub struct Emitter {
    path: PathBuf,
    out: Mutex<Output>,
    full_tx: Sender<Vec<u8>>,
    full_rx: Receiver<Vec<u8>>,
    spare_tx: Sender<Vec<u8>>,
    spare_rx: Receiver<Vec<u8>>,
    stopped: AtomicBool,
    /// Lines formatted while emission was on (lines of failed writes move to `dropped`).
    emitted: AtomicU64,
    dropped: AtomicU64,
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
        let file = TraceWriter::new(file).map_err(open_err)?.into_inner();
        Ok(Emitter::over(path.to_path_buf(), file))
    }

    fn over(path: PathBuf, file: File) -> Emitter {
        let (full_tx, full_rx) = crossbeam_channel::bounded(QUEUED_BUFFERS);
        let (spare_tx, spare_rx) = crossbeam_channel::bounded(QUEUED_BUFFERS);
        Emitter {
            path,
            out: Mutex::new(Output {
                file: Some(file),
                error: None,
            }),
            full_tx,
            full_rx,
            spare_tx,
            spare_rx,
            stopped: AtomicBool::new(false),
            emitted: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// A worker's own buffer; what it holds is handed over when it is dropped.
    pub fn worker(&self) -> WorkerEmitter<'_> {
        WorkerEmitter {
            emitter: self,
            lines: TraceWriter::continuing(self.spare_buffer()),
            oldest_ns: 0,
            emitted: 0,
            dropped: 0,
        }
    }

    fn spare_buffer(&self) -> Vec<u8> {
        self.spare_rx
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(HANDOVER_BYTES + 256))
    }

    /// The writer thread's loop: writes buffers as workers hand them over, until `stop`
    /// receives or disconnects.
    pub fn write_until(&self, stop: &Receiver<()>) {
        loop {
            crossbeam_channel::select! {
                recv(stop) -> _ => return,
                recv(self.full_rx) -> buf => match buf {
                    Ok(buf) => self.write(buf),
                    Err(_) => return,
                },
            }
        }
    }

    fn write(&self, mut buf: Vec<u8>) {
        let mut out = self.out.lock();
        let result = match out.file.as_mut() {
            Some(file) => file.write_all(&buf),
            None => Err(io::Error::other("emission stopped")),
        };
        if let Err(e) = result {
            // These lines never reached the reader.
            let lines = buf.iter().filter(|&&b| b == b'\n').count() as u64;
            self.emitted.fetch_sub(lines, Ordering::Relaxed);
            self.dropped.fetch_add(lines, Ordering::Relaxed);
            if out.file.is_some() {
                self.stop(&mut out, &e);
            }
        }
        buf.clear();
        let _ = self.spare_tx.try_send(buf);
    }

    /// Writes what is still queued and reports the counts; call once the workers are done.
    pub fn finish(&self) -> EmitStats {
        while let Ok(buf) = self.full_rx.try_recv() {
            self.write(buf);
        }
        let out = self.out.lock();
        EmitStats {
            samples_emitted: self.emitted.load(Ordering::Relaxed),
            samples_dropped: self.dropped.load(Ordering::Relaxed),
            emit_error: out.error.clone(),
        }
    }

    /// Stops emitting for good after a write error. Said once on stderr, since the run itself
    /// goes on.
    fn stop(&self, out: &mut Output, err: &io::Error) {
        let reason = if err.kind() == io::ErrorKind::BrokenPipe {
            "broken pipe (the reader is gone)".to_string()
        } else {
            err.to_string()
        };
        eprintln!(
            "pghot-workload: writing samples to {}: {reason}; no more samples are emitted",
            self.path.display()
        );
        out.error = Some(reason);
        out.file = None;
        self.stopped.store(true, Ordering::Relaxed);
    }
}

/// One worker's side of the stream.
pub struct WorkerEmitter<'a> {
    emitter: &'a Emitter,
    lines: TraceWriter<Vec<u8>>,
    /// Sample time of the oldest line in the buffer.
    oldest_ns: u64,
    emitted: u64,
    dropped: u64,
}

impl WorkerEmitter<'_> {
    /// Formats one sample into the buffer, or counts it as dropped once emission has stopped.
    pub fn emit(&mut self, sample: &Sample) {
        if self.emitter.stopped.load(Ordering::Relaxed) {
            self.dropped += 1;
            return;
        }
        if self.lines.get_mut().is_empty() {
            self.oldest_ns = sample.time_ns;
        }
        // Writing into a Vec cannot fail.
        let _ = self.lines.write_sample(sample);
        self.emitted += 1;
        if self.lines.get_mut().len() >= HANDOVER_BYTES {
            self.hand_over();
        } else {
            self.hand_over_if_old(sample.time_ns);
        }
    }

    /// Hands the buffer over if its oldest sample is [`FLUSH_EVERY`] old at `now_ns`: the
    /// workers call this between chunks of accesses, so a worker that samples rarely does not
    /// keep a sample back until its next one.
    pub fn hand_over_if_old(&mut self, now_ns: u64) {
        if !self.lines.get_mut().is_empty()
            && now_ns.saturating_sub(self.oldest_ns) >= FLUSH_EVERY.as_nanos() as u64
        {
            self.hand_over();
        }
    }

    fn hand_over(&mut self) {
        self.emitter
            .emitted
            .fetch_add(self.emitted, Ordering::Relaxed);
        self.emitter
            .dropped
            .fetch_add(self.dropped, Ordering::Relaxed);
        (self.emitted, self.dropped) = (0, 0);
        if self.lines.get_mut().is_empty() {
            return;
        }
        let full = std::mem::replace(self.lines.get_mut(), self.emitter.spare_buffer());
        // Blocks while QUEUED_BUFFERS wait (the reader is behind). The emitter holds the
        // receiver, so the send cannot fail.
        let _ = self.emitter.full_tx.send(full);
    }
}

impl Drop for WorkerEmitter<'_> {
    fn drop(&mut self) {
        self.hand_over();
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
        {
            let mut worker = emitter.worker();
            worker.emit(&s);
            worker.emit(&sample_now(42, 43, 0x7f00_0000_2000, false));
        }
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
    fn a_full_or_old_buffer_is_handed_to_the_writer_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.trace");
        let emitter = Emitter::open(&path).unwrap();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let lines_in_file = || std::fs::read_to_string(&path).unwrap().lines().count() - 1;
        std::thread::scope(|scope| {
            scope.spawn(|| emitter.write_until(&stop_rx));
            let mut worker = emitter.worker();
            let mut s = sample_now(1, 1, 0x1000, false);
            worker.emit(&s);
            // Not full, not old: still in the worker's buffer.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(lines_in_file(), 0);
            // A sample FLUSH_EVERY later sends both.
            s.time_ns += FLUSH_EVERY.as_nanos() as u64;
            worker.emit(&s);
            let waited = std::time::Instant::now();
            while lines_in_file() < 2 {
                assert!(waited.elapsed() < Duration::from_secs(10), "never written");
                std::thread::sleep(Duration::from_millis(5));
            }
            // Enough lines to fill a buffer go without waiting for the clock.
            let n = HANDOVER_BYTES / 40;
            for _ in 0..n {
                worker.emit(&s);
            }
            while lines_in_file() < 2 + HANDOVER_BYTES / 100 {
                assert!(waited.elapsed() < Duration::from_secs(10), "never written");
                std::thread::sleep(Duration::from_millis(5));
            }
            drop(worker);
            drop(stop_tx);
        });
        let stats = emitter.finish();
        assert_eq!(lines_in_file() as u64, stats.samples_emitted);
        assert_eq!(stats.samples_emitted, 2 + (HANDOVER_BYTES / 40) as u64);
    }

    #[test]
    fn a_lone_sample_goes_once_it_is_old_without_waiting_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let emitter = Emitter::open(&dir.path().join("s.trace")).unwrap();
        let mut worker = emitter.worker();
        let s = sample_now(1, 1, 0x1000, false);
        worker.emit(&s);
        worker.hand_over_if_old(s.time_ns + FLUSH_EVERY.as_nanos() as u64 - 1);
        assert!(emitter.full_rx.is_empty());
        worker.hand_over_if_old(s.time_ns + FLUSH_EVERY.as_nanos() as u64);
        assert_eq!(emitter.full_rx.len(), 1);
        // An empty buffer is never sent.
        worker.hand_over_if_old(u64::MAX);
        assert_eq!(emitter.full_rx.len(), 1);
    }

    #[test]
    fn a_gone_reader_stops_emission_without_failing() {
        let (reader, writer) = nix::unistd::pipe().unwrap();
        drop(reader);
        let emitter = Emitter::over(PathBuf::from("pipe"), File::from(writer));
        let mut worker = emitter.worker();
        worker.emit(&sample_now(1, 1, 0x1000, false));
        worker.hand_over();
        // The writer thread's part, by hand: the write fails with EPIPE.
        emitter.write(emitter.full_rx.try_recv().unwrap());
        worker.emit(&sample_now(1, 1, 0x2000, false));
        worker.emit(&sample_now(1, 1, 0x3000, false));
        drop(worker);
        let stats = emitter.finish();
        assert_eq!(stats.samples_emitted, 0);
        assert_eq!(stats.samples_dropped, 3);
        assert!(stats.emit_error.unwrap().contains("broken pipe"));
    }
}
