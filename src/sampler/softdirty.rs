//! `--source softdirty`: written pages of the managed pids (`--pid`, or the processes a
//! `--cgroup` / `--comm` scope holds at each pass), from the kernel's soft-dirty bits.
//!
//! Every `softdirty_interval_ms`, for each pid: read `/proc/PID/maps`, read the pagemap entries
//! of its writable mappings, emit one store [`Sample`] per page that is present and soft-dirty
//! (bits 63 and 55), then write `4` to `/proc/PID/clear_refs`, which clears the bits and
//! write-protects the whole mm so the next write to each page sets its bit again (one minor
//! fault per page and interval). Reads are invisible to this source. The first pass over a pid
//! only clears: until then every page counts as dirty (new mappings are dirty wholesale). For
//! the same reason a mapping that is new or grew since the pid's last pass is only cleared,
//! not credited ([`settled_mappings`], `softdirty_fresh_mappings`).
//!
//! Cost bound: `softdirty_scan_budget_pages` pagemap entries per second. A pass that scanned N
//! pages is followed by the next no sooner than N / budget seconds after it started, so the
//! interval stretches instead of the scan rate growing (counted in
//! `softdirty_budget_stretches`); writes in between are not lost, they only show later.
//! `softdirty_pages_scanned`, `softdirty_dirty_pages` and `softdirty_scan_ns` report the cost.
//!
//! Needs CONFIG_MEM_SOFT_DIRTY (the architectures that select HAVE_ARCH_SOFT_DIRTY: x86_64,
//! s390, ppc64; `Documentation/admin-guide/mm/soft-dirty.rst`), checked at
//! open by writing a page of our own and reading its bit.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::procpid::{self, ManagedPids, Watched};
use super::{OpenContext, Source, SourceError};
use crate::safefs::{self, limit};
use crate::sample::{AccessOp, SourceKind};
use crate::sampler::{SampleSink, SinkFactory};
use crate::scope::Scope;
use crate::scope::proc::memory_maps;
use crate::stats::Counter;
use crate::stop::StopToken;
use procfs::process::{ClearRefs, MMPermissions, Process};

const PAGE_SIZE: u64 = 4096;
const PM_PRESENT: u64 = 1 << 63;
const PM_SOFT_DIRTY: u64 = 1 << 55;
/// Pagemap entries read per pread: 256 KiB of entries, 1 GiB of address space.
const PAGEMAP_CHUNK: usize = 1 << 15;

/// Tunables of the soft-dirty source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftDirtyConfig {
    /// Time between passes.
    pub interval_ms: u32,
    /// Most pagemap entries scanned per second, over all pids.
    pub scan_budget_pages: u64,
}

impl Default for SoftDirtyConfig {
    fn default() -> Self {
        SoftDirtyConfig {
            interval_ms: 1000,
            // 4 GiB of address space a second: about 10-20 ms of CPU on a current core.
            scan_budget_pages: 1 << 20,
        }
    }
}

/// A writable mapping, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
}

/// The writable mappings of a `/proc/PID/maps` text, parsed line by line by the `procfs` crate
/// ([`crate::scope::proc::memory_maps`]). Lines that do not parse are skipped (the format is
/// the kernel's; a bad line means a kernel we do not understand, not bad input).
pub fn writable_mappings(maps: &str) -> Vec<Mapping> {
    memory_maps(maps)
        .filter(|m| m.perms.contains(MMPermissions::WRITE))
        .filter_map(|m| {
            let (start, end) = m.address;
            (start < end).then_some(Mapping { start, end })
        })
        .collect()
}

/// The mappings of `now` whose soft-dirty bits are the pages' own, and how many were left
/// out. A mapping made or grown since the last pass (`before`) is soft-dirty as a whole: the
/// kernel sets VM_SOFTDIRTY on a new or expanded VMA (mm/vma.c, `__mmap_complete`: "New (or
/// expanded) vma always get soft dirty status"; `do_brk_flags` for a growing heap), and
/// pagemap then reports every present page in it as soft-dirty until the next clear_refs
/// (fs/proc/task_mmu.c, `pte_to_pagemap_entry`). A growing heap, or a thread's stack mapped
/// next to a buffer and merged with it, would credit every page of it as written. Such a
/// mapping is left out of this pass; its clear_refs still runs, so the next pass reads it.
/// A mapping inside one of `before` (split by mprotect or mbind, which set no flag) is kept.
///
/// `before` is as `/proc/PID/maps` lists it: sorted by address, no two overlapping; so the one
/// mapping that can hold `m` is the last to start at or below it, found by binary search
/// (a process may have tens of thousands of mappings; a pass must not be quadratic in them).
pub fn settled_mappings(now: &[Mapping], before: &[Mapping]) -> (Vec<Mapping>, u64) {
    let inside_one = |m: &&Mapping| {
        let after = before.partition_point(|b| b.start <= m.start);
        after > 0 && m.end <= before[after - 1].end
    };
    let (settled, fresh): (Vec<Mapping>, Vec<Mapping>) = now.iter().partition(inside_one);
    (settled, fresh.len() as u64)
}

/// True for a pagemap entry of a present page written since the last clear.
#[inline]
pub fn is_soft_dirty(entry: u64) -> bool {
    entry & (PM_PRESENT | PM_SOFT_DIRTY) == PM_PRESENT | PM_SOFT_DIRTY
}

/// Reads the pagemap entries of `mappings` from `pagemap` (a `/proc/PID/pagemap`), pushing the
/// address of every soft-dirty page to `dirty`. Returns the entries read.
///
/// Kept by hand rather than `procfs::process::PageMap`, which was not slower: 115.8 ns an
/// entry against this loop's 156.6 (`cargo bench --bench pagemap`, 65536 entries, 2026-12-02,
/// BENCHMARKS.md). But the crate's map opens only through a `Process` (no fake file for the
/// test below) and fails a whole range on a short read, where this loop keeps the entries that
/// came; switching changes that behaviour, so it waits for its own change.
pub fn scan_pagemap(
    pagemap: &impl FileExt,
    mappings: &[Mapping],
    dirty: &mut Vec<u64>,
) -> io::Result<u64> {
    let mut buf = vec![0u8; PAGEMAP_CHUNK * 8];
    let mut scanned = 0;
    for m in mappings {
        let mut vpn = m.start / PAGE_SIZE;
        let end = m.end.div_ceil(PAGE_SIZE);
        while vpn < end {
            let n = ((end - vpn) as usize).min(PAGEMAP_CHUNK);
            let bytes = &mut buf[..n * 8];
            let got = pagemap.read_at(bytes, vpn * 8)?;
            // A short read means the mapping went away under us; take what came.
            let entries = got / 8;
            for (i, entry) in bytes[..entries * 8].chunks_exact(8).enumerate() {
                let entry = u64::from_ne_bytes(entry.try_into().unwrap_or([0; 8]));
                if is_soft_dirty(entry) {
                    dirty.push((vpn + i as u64) * PAGE_SIZE);
                }
            }
            scanned += entries as u64;
            if entries < n {
                break;
            }
            vpn += n as u64;
        }
    }
    Ok(scanned)
}

/// Checks that this kernel tracks soft-dirty bits: a page we just wrote must show bit 55.
pub fn check_support() -> Result<(), SourceError> {
    let page = vec![1u8; 2 * PAGE_SIZE as usize];
    let mut page = std::hint::black_box(page);
    // Write into the page-aligned part so the probed page is surely ours and present.
    let aligned = (page.as_ptr() as u64).next_multiple_of(PAGE_SIZE);
    let offset = (aligned - page.as_ptr() as u64) as usize;
    page[offset] = 2;
    std::hint::black_box(&mut page);
    let path = "/proc/self/pagemap";
    let io_err = |source| SourceError::Io {
        op: "reading",
        path: path.to_string(),
        source,
    };
    let pagemap = File::open(path).map_err(io_err)?;
    let mut entry = [0u8; 8];
    pagemap
        .read_exact_at(&mut entry, aligned / PAGE_SIZE * 8)
        .map_err(io_err)?;
    if is_soft_dirty(u64::from_ne_bytes(entry)) {
        Ok(())
    } else {
        Err(SourceError::Unsupported {
            what: "soft-dirty tracking",
            detail: "a freshly written page shows no soft-dirty bit in /proc/self/pagemap".into(),
            option: "CONFIG_MEM_SOFT_DIRTY",
        })
    }
}

/// Why one pid's pass ended early.
enum PassError {
    /// The process is gone (or going).
    Gone,
    /// Its /proc files refused pghotd: another user's process without CAP_DAC_OVERRIDE
    /// (clear_refs is mode 0200 and pagemap 0400, owned by the process's user;
    /// fs/proc/base.c).
    Denied(SourceError),
    Io(SourceError),
}

/// The soft-dirty source over explicit pids or the followed scope.
pub struct SoftDirtySource {
    watched: Watched,
    config: SoftDirtyConfig,
}

impl SoftDirtySource {
    /// Checks pids and kernel support; nothing is written to any process yet.
    pub fn open(ctx: &OpenContext) -> Result<Self, SourceError> {
        let watched = Watched::from_context("softdirty", ctx)?;
        check_support()?;
        Ok(SoftDirtySource {
            watched,
            config: ctx.softdirty,
        })
    }

    /// One pass over `pid`; returns the pagemap entries scanned.
    fn pass(
        &self,
        pid: u32,
        primed: &mut Primed,
        dirty: &mut Vec<u64>,
        sink: &mut dyn SampleSink,
    ) -> Result<u64, PassError> {
        let gone_or = |op: &'static str, path: String| {
            move |source: io::Error| {
                if !procpid::pid_alive(pid) {
                    PassError::Gone
                } else if source.kind() == io::ErrorKind::PermissionDenied {
                    PassError::Denied(SourceError::Io { op, path, source })
                } else {
                    PassError::Io(SourceError::Io { op, path, source })
                }
            }
        };
        let proc_gone_or = |op: &'static str, path: String| {
            move |source: procfs::ProcError| {
                let denied = matches!(source, procfs::ProcError::PermissionDenied(_));
                if !procpid::pid_alive(pid) {
                    PassError::Gone
                } else if denied {
                    PassError::Denied(SourceError::Proc {
                        op,
                        path,
                        source: Box::new(source),
                    })
                } else {
                    PassError::Io(SourceError::Proc {
                        op,
                        path,
                        source: Box::new(source),
                    })
                }
            }
        };
        let mut scanned = 0;
        dirty.clear();
        let maps_path = format!("/proc/{pid}/maps");
        // Bounded: a process makes its maps as long as it likes (a line per mapping).
        let maps = safefs::read_bounded(std::path::Path::new(&maps_path), limit::MAPS)
            .map_err(gone_or("reading", maps_path))?;
        let mappings = writable_mappings(&String::from_utf8_lossy(&maps));
        if let Some(before) = primed.mappings(pid) {
            let (settled, fresh) = settled_mappings(&mappings, before);
            sink.count(Counter::SoftdirtyFreshMappings, fresh);
            let pagemap_path = format!("/proc/{pid}/pagemap");
            let pagemap =
                File::open(&pagemap_path).map_err(gone_or("opening", pagemap_path.clone()))?;
            scanned = scan_pagemap(&pagemap, &settled, dirty)
                .map_err(gone_or("reading", pagemap_path))?;
        }
        let clear_path = format!("/proc/{pid}/clear_refs");
        Process::new(pid as i32)
            .and_then(|p| p.clear_refs(ClearRefs::SoftDirty))
            .map_err(proc_gone_or("writing 4 to", clear_path))?;
        procpid::emit_pages(sink, pid, dirty, AccessOp::Store, SourceKind::SoftDirty);
        primed.mark(pid, mappings);
        Ok(scanned)
    }
}

/// The watched processes while the source runs: explicit pids (exits counted, the source ends
/// with the last) or the followed scope.
enum Live {
    Explicit(ManagedPids),
    Followed(Arc<Scope>),
}

/// The pids whose soft-dirty bits this source has cleared, with the writable mappings each
/// had then: only their next pass reads dirty pages (a first pass would report every page
/// written since the process started), and only in mappings that were there
/// ([`settled_mappings`]). A pid that leaves the watched set is forgotten, so if it comes back
/// (a process rejoining the cgroup, or a new one under a reused pid) it is primed again.
#[derive(Debug, Default)]
struct Primed(std::collections::HashMap<u32, Vec<Mapping>>);

impl Primed {
    #[cfg(test)]
    fn has(&self, pid: u32) -> bool {
        self.0.contains_key(&pid)
    }

    /// The mappings `pid` had at its last pass; `None` before its first.
    fn mappings(&self, pid: u32) -> Option<&[Mapping]> {
        self.0.get(&pid).map(Vec::as_slice)
    }

    fn mark(&mut self, pid: u32, mappings: Vec<Mapping>) {
        self.0.insert(pid, mappings);
    }

    fn forget(&mut self, pid: u32) {
        self.0.remove(&pid);
    }

    /// Keeps only the pids still watched.
    fn follow(&mut self, watched: &[u32]) {
        self.0.retain(|pid, _| watched.binary_search(pid).is_ok());
    }
}

impl Source for SoftDirtySource {
    fn kind(&self) -> SourceKind {
        SourceKind::SoftDirty
    }

    fn describe(&self) -> String {
        format!(
            "softdirty ({}, every {} ms, budget {} pages/s)",
            self.watched.describe(),
            self.config.interval_ms,
            self.config.scan_budget_pages
        )
    }

    fn run(&mut self, sinks: &dyn SinkFactory, stop: &StopToken) -> Result<(), SourceError> {
        let mut sink = sinks.sink();
        let mut live = match &self.watched {
            Watched::Pids(pids) => Live::Explicit(ManagedPids::new("softdirty", pids)),
            Watched::Scope(scope) => Live::Followed(Arc::clone(scope)),
        };
        let mut primed = Primed::default();
        let interval = Duration::from_millis(u64::from(self.config.interval_ms));
        let mut dirty = Vec::new();
        let mut denied_warned = false;
        let mut next = Instant::now();
        while crate::stop::wait_until(next, stop) {
            let pids = match &mut live {
                Live::Explicit(managed) => {
                    managed.reap(sink.as_mut());
                    if managed.is_empty() {
                        tracing::info!("softdirty: every managed pid has exited; source ends");
                        break;
                    }
                    managed.pids().to_vec()
                }
                Live::Followed(scope) => scope.members(),
            };
            primed.follow(&pids);
            let started = Instant::now();
            let mut scanned = 0;
            for &pid in &pids {
                match self.pass(pid, &mut primed, &mut dirty, sink.as_mut()) {
                    Ok(n) => {
                        scanned += n;
                        sink.count(Counter::SoftdirtyDirtyPages, dirty.len() as u64);
                    }
                    Err(PassError::Gone) => match &mut live {
                        Live::Explicit(managed) => managed.exited(pid, sink.as_mut()),
                        // The scope tracker drops it at its next refresh.
                        Live::Followed(_) => primed.forget(pid),
                    },
                    // A pid the operator named must be watched: say why it cannot be.
                    Err(PassError::Denied(e)) if matches!(live, Live::Explicit(_)) => {
                        return Err(e);
                    }
                    // A followed scope may hold processes pghotd cannot open: skip them,
                    // say so once, count each pass.
                    Err(PassError::Denied(e)) => {
                        sink.count(Counter::SoftdirtyDenied, 1);
                        if !denied_warned {
                            denied_warned = true;
                            tracing::warn!(
                                "softdirty: skipping pid {pid} (and any other process it may not \
                                 open; counted in softdirty_denied): {e}; the /proc files of \
                                 another user's process need CAP_DAC_OVERRIDE"
                            );
                        }
                    }
                    Err(PassError::Io(e)) => return Err(e),
                }
            }
            sink.end_batch();
            let cost = started.elapsed();
            sink.count(Counter::SoftdirtyScans, 1);
            sink.count(Counter::SoftdirtyPagesScanned, scanned);
            sink.count(Counter::SoftdirtyScanNs, cost.as_nanos() as u64);
            let budget =
                Duration::from_secs_f64(scanned as f64 / self.config.scan_budget_pages as f64);
            let wait = scan_pause(interval, budget, cost);
            if wait > interval {
                sink.count(Counter::SoftdirtyBudgetStretches, 1);
            }
            next = started + wait;
        }
        Ok(())
    }
}

/// The share of one core the scans may take, in percent. Natively a pass over a process of
/// a quarter of a million pages takes a few milliseconds and the interval decides; where the
/// machine is slow (the Debian rig's TCG guest: 2.2 s a pass over Redis's 70 000 pages, back to
/// back at the 2 s interval, 154 s of CPU in a 173 s phase) the scans back off instead.
const SCAN_CPU_PCT: u32 = 10;

/// From one scan's start to the next: the interval, stretched by the page budget
/// (`softdirty_scan_budget_pages` a second) and by [`SCAN_CPU_PCT`] of the time the scan took.
fn scan_pause(interval: Duration, budget: Duration, took: Duration) -> Duration {
    interval.max(budget).max(took * (100 / SCAN_CPU_PCT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_slow_scan_stretches_the_pause_to_ten_times_its_length() {
        let ms = Duration::from_millis;
        // Native: 5 ms of scan, a 70 ms page budget: the 1 s interval decides.
        assert_eq!(scan_pause(ms(1000), ms(70), ms(5)), ms(1000));
        // A page budget over the interval decides.
        assert_eq!(scan_pause(ms(1000), ms(1500), ms(5)), ms(1500));
        // The TCG guest's 2.2 s pass: 22 s.
        assert_eq!(scan_pause(ms(2000), ms(70), ms(2200)), ms(22_000));
    }

    #[test]
    fn new_and_grown_mappings_are_left_out_until_their_next_pass() {
        let m = |start, end| Mapping { start, end };
        let before = [m(0x1000, 0x9000), m(0x20000, 0x30000)];
        let now = [
            // Split in two by an mprotect: both halves stay (no VM_SOFTDIRTY on a split).
            m(0x1000, 0x5000),
            m(0x5000, 0x9000),
            // Grown downwards by a merge with a new neighbour: out.
            m(0x1f000, 0x30000),
            // New: out.
            m(0x40000, 0x41000),
        ];
        let (settled, fresh) = settled_mappings(&now, &before);
        assert_eq!(settled, vec![m(0x1000, 0x5000), m(0x5000, 0x9000)]);
        assert_eq!(fresh, 2);
        // Unchanged: all kept.
        assert_eq!(settled_mappings(&before, &before), (before.to_vec(), 0));
        // Between two old mappings, or reaching past the end of the one it starts in: out;
        // below every old mapping: out.
        let now = [m(0x0, 0x800), m(0xa000, 0xb000), m(0x8000, 0xa000)];
        assert_eq!(settled_mappings(&now, &before), (Vec::new(), 3));
    }

    #[test]
    fn a_pid_that_leaves_the_watched_set_is_primed_again_when_it_returns() {
        let mut primed = Primed::default();
        primed.mark(10, Vec::new());
        primed.mark(20, Vec::new());
        primed.follow(&[10, 30]);
        assert!(primed.has(10) && !primed.has(20) && !primed.has(30));
        primed.forget(10);
        assert!(!primed.has(10));
    }

    #[test]
    fn watches_the_followed_scope_or_explicit_live_pids() {
        let mut ctx = OpenContext::default();
        let err = Watched::from_context("softdirty", &ctx).unwrap_err();
        assert!(err.to_string().contains("--cgroup"), "{err}");
        ctx.pids = vec![u32::MAX];
        let err = Watched::from_context("softdirty", &ctx).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        ctx.pids = vec![std::process::id()];
        assert!(matches!(
            Watched::from_context("softdirty", &ctx),
            Ok(Watched::Pids(p)) if p == [std::process::id()]
        ));
        // A followed scope wins, explicit pids included (they are among its members).
        ctx.followed_scope = Some(std::sync::Arc::new(crate::scope::Scope::of_pids([], 1)));
        assert!(matches!(
            Watched::from_context("softdirty", &ctx),
            Ok(Watched::Scope(_))
        ));
    }

    #[test]
    fn maps_keep_writable_mappings_only() {
        let maps = "\
55d0c0000000-55d0c0002000 r--p 00000000 fd:01 123 /usr/bin/x
55d0c0002000-55d0c0003000 rw-p 00002000 fd:01 123 /usr/bin/x
7f0000000000-7f0010000000 rw-p 00000000 00:00 0 
7f0010000000-7f0010001000 ---p 00000000 00:00 0 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
garbage line
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";
        assert_eq!(
            writable_mappings(maps),
            vec![
                Mapping {
                    start: 0x55d0c0002000,
                    end: 0x55d0c0003000
                },
                Mapping {
                    start: 0x7f0000000000,
                    end: 0x7f0010000000
                },
                Mapping {
                    start: 0x7ffd00000000,
                    end: 0x7ffd00021000
                },
            ]
        );
    }

    /// A fake pagemap: entries at their vpn's offset.
    fn pagemap(entries: &[(u64, u64)]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let max = entries.iter().map(|(vpn, _)| *vpn).max().unwrap_or(0);
        let mut bytes = vec![0u8; (max as usize + 1) * 8];
        for &(vpn, e) in entries {
            bytes[vpn as usize * 8..][..8].copy_from_slice(&e.to_ne_bytes());
        }
        f.write_all(&bytes).unwrap();
        f
    }

    #[test]
    fn pagemap_scan_reports_present_soft_dirty_pages() {
        let f = pagemap(&[
            (0x10, PM_PRESENT | PM_SOFT_DIRTY | 0x1234),
            (0x11, PM_PRESENT),
            // Soft-dirty but not present (a hole in a new mapping): not a write we can move.
            (0x12, PM_SOFT_DIRTY),
            (0x13, PM_PRESENT | PM_SOFT_DIRTY),
            (0x20, PM_PRESENT | PM_SOFT_DIRTY),
        ]);
        let mut dirty = Vec::new();
        let maps = [
            Mapping {
                start: 0x10 * PAGE_SIZE,
                end: 0x14 * PAGE_SIZE,
            },
            // Runs past the end of the file: a short read ends the mapping.
            Mapping {
                start: 0x20 * PAGE_SIZE,
                end: 0x40 * PAGE_SIZE,
            },
        ];
        let scanned = scan_pagemap(f.as_file(), &maps, &mut dirty).unwrap();
        assert_eq!(
            dirty,
            vec![0x10 * PAGE_SIZE, 0x13 * PAGE_SIZE, 0x20 * PAGE_SIZE]
        );
        assert_eq!(scanned, 4 + 1);
    }

    #[test]
    fn support_check_matches_the_kernel() {
        // Either this kernel tracks soft-dirty bits, or the error names the option.
        if let Err(e) = check_support() {
            assert!(e.to_string().contains("CONFIG_MEM_SOFT_DIRTY"), "{e}");
        }
    }
}
