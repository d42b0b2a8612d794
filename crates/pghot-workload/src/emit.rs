//! `--emit-samples`: a pghot-trace v1 stream of the workload's own accesses, one of every
//! `--sample-period`, for pghotd to read from a FIFO (or for a file to keep).
//!
//! Each worker records its samples raw (address, load or store, and the time and CPU it read
//! at the start of its current chunk of accesses) into a buffer of its own
//! ([`WorkerEmitter`]) and hands the buffer to the writer thread ([`Emitter::write_until`])
//! once it holds [`HANDOVER_SAMPLES`] or its oldest sample is [`FLUSH_EVERY`] old (checked
//! at every sample and between chunks). The writer thread formats the lines and writes them.
//! So an emulated IBS sample costs the worker one store into its buffer, as a hardware sample
//! costs the sampled code nothing: formatting a line and reading the clock and CPU per sample
//! took about 5 % of a worker's time natively and more under TCG, and every access the
//! workload does not make is a sample pghotd does not get. Only when [`QUEUED_BUFFERS`] wait
//! does a worker block, as it would on a full pipe. When the reader goes away (EPIPE: Rust
//! ignores SIGPIPE, so the write fails instead of killing us) or any other write fails,
//! emission stops for good: later samples are only counted as dropped, and the workload runs
//! on.

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
use pghotd::sample::{AccessOp, Sample, SourceKind};
use pghotd::sampler::trace::TraceWriter;

/// Longest a sample waits in its worker's buffer (plus one chunk of accesses).
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// A worker hands its buffer over once it holds this many samples (about 16 KiB of lines).
pub const HANDOVER_SAMPLES: usize = 256;

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

/// One sample as a worker records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Raw {
    time_ns: u64,
    vaddr: u64,
    cpu: u32,
    store: bool,
}

/// A worker's samples on their way to the writer thread.
#[derive(Debug)]
struct Handed {
    pid: u32,
    tid: u32,
    samples: Vec<Raw>,
}

impl Handed {
    fn sample(&self, raw: &Raw) -> Sample {
        let op = if raw.store {
            AccessOp::Store
        } else {
            AccessOp::Load
        };
        Sample::at_address(
            (raw.time_ns, raw.cpu),
            (self.pid, self.tid),
            raw.vaddr,
            op,
            SourceKind::Trace,
        )
    }
}

struct Output {
    file: Option<File>,
    error: Option<String>,
    /// The writer's line buffer, kept between writes.
    lines: TraceWriter<Vec<u8>>,
}

/// The sample stream: its output, and the buffers on their way to it.
pub struct Emitter {
    path: PathBuf,
    out: Mutex<Output>,
    full_tx: Sender<Handed>,
    full_rx: Receiver<Handed>,
    spare_tx: Sender<Vec<Raw>>,
    spare_rx: Receiver<Vec<Raw>>,
    stopped: AtomicBool,
    /// Samples recorded while emission was on (those of failed writes move to `dropped`).
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
    /// trace header and the sample period (one sample per `period` accesses). A FIFO's open
    /// blocks until a reader opens it.
    pub fn open(path: &Path, period: u64) -> Result<Emitter, WorkloadError> {
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
        let mut trace = TraceWriter::new(file).map_err(open_err)?;
        trace.write_sample_period(period).map_err(open_err)?;
        let file = trace.into_inner();
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
                lines: TraceWriter::continuing(Vec::with_capacity(HANDOVER_SAMPLES * 80)),
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

    /// Thread `tid` of process `pid`'s own buffer; what it holds is handed over when it is
    /// dropped. Call [`WorkerEmitter::stamp`] before the first sample.
    pub fn worker(&self, pid: u32, tid: u32) -> WorkerEmitter<'_> {
        WorkerEmitter {
            emitter: self,
            pid,
            tid,
            samples: self.spare_buffer(),
            now_ns: 0,
            cpu: 0,
            emitted: 0,
            dropped: 0,
        }
    }

    fn spare_buffer(&self) -> Vec<Raw> {
        self.spare_rx
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(HANDOVER_SAMPLES))
    }

    /// The writer thread's loop: writes buffers as workers hand them over, until `stop`
    /// receives or disconnects.
    pub fn write_until(&self, stop: &Receiver<()>) {
        loop {
            crossbeam_channel::select! {
                recv(stop) -> _ => return,
                recv(self.full_rx) -> handed => match handed {
                    Ok(handed) => self.write(handed),
                    Err(_) => return,
                },
            }
        }
    }

    fn write(&self, mut handed: Handed) {
        let mut guard = self.out.lock();
        let out = &mut *guard;
        out.lines.get_mut().clear();
        for raw in &handed.samples {
            // Writing into a Vec cannot fail.
            let _ = out.lines.write_sample(&handed.sample(raw));
        }
        let result = match out.file.as_mut() {
            Some(file) => file.write_all(out.lines.get_mut()),
            None => Err(io::Error::other("emission stopped")),
        };
        if let Err(e) = result {
            // These samples never reached the reader.
            let lost = handed.samples.len() as u64;
            self.emitted.fetch_sub(lost, Ordering::Relaxed);
            self.dropped.fetch_add(lost, Ordering::Relaxed);
            if out.file.is_some() {
                self.stop(out, &e);
            }
        }
        handed.samples.clear();
        let _ = self.spare_tx.try_send(handed.samples);
    }

    /// Writes what is still queued and reports the counts; call once the workers are done.
    pub fn finish(&self) -> EmitStats {
        while let Ok(handed) = self.full_rx.try_recv() {
            self.write(handed);
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
    pid: u32,
    tid: u32,
    samples: Vec<Raw>,
    /// Time and CPU of the last [`WorkerEmitter::stamp`], given to the samples after it.
    now_ns: u64,
    cpu: u32,
    emitted: u64,
    dropped: u64,
}

impl WorkerEmitter<'_> {
    /// Records a sample of an access at `vaddr`, stamped with the last [`Self::stamp`], or
    /// counts it as dropped once emission has stopped.
    pub fn emit(&mut self, vaddr: u64, store: bool) {
        if self.emitter.stopped.load(Ordering::Relaxed) {
            self.dropped += 1;
            return;
        }
        self.samples.push(Raw {
            time_ns: self.now_ns,
            vaddr,
            cpu: self.cpu,
            store,
        });
        self.emitted += 1;
        if self.samples.len() >= HANDOVER_SAMPLES {
            self.hand_over();
        }
    }

    /// Sets the time and CPU of the samples that follow (the worker reads them once per chunk
    /// of accesses, not per sample), and hands the buffer over if its oldest sample is
    /// [`FLUSH_EVERY`] old by `now_ns`, so a worker that samples rarely does not keep a sample
    /// back until its buffer fills.
    pub fn stamp(&mut self, now_ns: u64, cpu: u32) {
        (self.now_ns, self.cpu) = (now_ns, cpu);
        if let Some(oldest) = self.samples.first()
            && now_ns.saturating_sub(oldest.time_ns) >= FLUSH_EVERY.as_nanos() as u64
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
        if self.samples.is_empty() {
            return;
        }
        let samples = std::mem::replace(&mut self.samples, self.emitter.spare_buffer());
        // Blocks while QUEUED_BUFFERS wait (the reader is behind). The emitter holds the
        // receiver, so the send cannot fail.
        let _ = self.emitter.full_tx.send(Handed {
            pid: self.pid,
            tid: self.tid,
            samples,
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use pghotd::sampler::trace::parse_line;

    const MS: u64 = 1_000_000;

    fn lines_in(path: &Path) -> Vec<Sample> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter_map(|l| parse_line(l).unwrap())
            .collect()
    }

    #[test]
    fn samples_round_trip_through_the_trace_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.trace");
        let emitter = Emitter::open(&path, 100).unwrap();
        {
            let mut worker = emitter.worker(42, 43);
            worker.stamp(5 * MS, 1);
            worker.emit(0x7f00_0000_1040, true);
            worker.stamp(6 * MS, 0);
            worker.emit(0x7f00_0000_2000, false);
        }
        let stats = emitter.finish();
        assert_eq!(stats.samples_emitted, 2);
        assert_eq!(stats.samples_dropped, 0);
        let parsed = lines_in(&path);
        assert_eq!(parsed.len(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.lines()
                .nth(1)
                .and_then(pghotd::sampler::trace::parse_sample_period),
            Some(Ok(100)),
            "the period follows the header"
        );
        let fields = |s: &Sample| (s.time_ns, s.cpu, s.pid, s.tid, s.vaddr, s.op);
        assert_eq!(
            fields(&parsed[0]),
            (5 * MS, 1, 42, 43, 0x7f00_0000_1040, AccessOp::Store)
        );
        assert_eq!(
            fields(&parsed[1]),
            (6 * MS, 0, 42, 43, 0x7f00_0000_2000, AccessOp::Load)
        );
        // An emulated sample knows neither the physical address nor the node.
        assert!(parsed.iter().all(|s| s.paddr.is_none() && s.node.is_none()));
    }

    #[test]
    fn a_full_or_old_buffer_is_handed_to_the_writer_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.trace");
        let emitter = Emitter::open(&path, 100).unwrap();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let lines_in_file = || lines_in(&path).len();
        let wait_for = |n: usize| {
            let waited = std::time::Instant::now();
            while lines_in_file() < n {
                assert!(waited.elapsed() < Duration::from_secs(10), "never written");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        std::thread::scope(|scope| {
            scope.spawn(|| emitter.write_until(&stop_rx));
            let mut worker = emitter.worker(1, 1);
            worker.stamp(MS, 0);
            worker.emit(0x1000, false);
            // Not full, not old: still in the worker's buffer.
            worker.stamp(MS + FLUSH_EVERY.as_nanos() as u64 - 1, 0);
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(lines_in_file(), 0);
            // A stamp FLUSH_EVERY after the oldest sample sends it.
            worker.stamp(MS + FLUSH_EVERY.as_nanos() as u64, 0);
            wait_for(1);
            // A full buffer goes without waiting for the clock.
            for _ in 0..HANDOVER_SAMPLES {
                worker.emit(0x2000, true);
            }
            wait_for(1 + HANDOVER_SAMPLES);
            // The rest goes when the worker is done.
            worker.emit(0x3000, false);
            drop(worker);
            wait_for(2 + HANDOVER_SAMPLES);
            drop(stop_tx);
        });
        let stats = emitter.finish();
        assert_eq!(lines_in_file() as u64, stats.samples_emitted);
        assert_eq!(stats.samples_emitted, 2 + HANDOVER_SAMPLES as u64);
    }

    #[test]
    fn an_empty_buffer_is_never_handed_over() {
        let dir = tempfile::tempdir().unwrap();
        let emitter = Emitter::open(&dir.path().join("s.trace"), 100).unwrap();
        let mut worker = emitter.worker(1, 1);
        worker.stamp(0, 0);
        worker.stamp(u64::MAX, 0);
        assert!(emitter.full_rx.is_empty());
        worker.stamp(0, 0);
        worker.emit(0x1000, false);
        worker.stamp(u64::MAX, 0);
        assert_eq!(emitter.full_rx.len(), 1);
    }

    #[test]
    fn a_gone_reader_stops_emission_without_failing() {
        let (reader, writer) = nix::unistd::pipe().unwrap();
        drop(reader);
        let emitter = Emitter::over(PathBuf::from("pipe"), File::from(writer));
        let mut worker = emitter.worker(1, 1);
        worker.stamp(MS, 0);
        worker.emit(0x1000, false);
        worker.hand_over();
        // The writer thread's part, by hand: the write fails with EPIPE.
        emitter.write(emitter.full_rx.try_recv().unwrap());
        worker.emit(0x2000, false);
        worker.emit(0x3000, false);
        drop(worker);
        let stats = emitter.finish();
        assert_eq!(stats.samples_emitted, 0);
        assert_eq!(stats.samples_dropped, 3);
        assert!(stats.emit_error.unwrap().contains("broken pipe"));
    }
}
