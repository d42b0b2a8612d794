//! DAMON's regions from its `damon:damon_aggregated` tracepoint, read through a perf ring on the
//! kdamond's own thread, instead of a `tried_regions` snapshot.
//!
//! At the end of every aggregation interval the kdamond reports every region of every target,
//! target by target, each record naming the target's index in the context and how many regions
//! that target has (mm/damon/core.c `kdamond_reset_aggregated`:
//! `trace_damon_aggregated(ti, r, damon_nr_regions(t))`; the event in
//! include/trace/events/damon.h). A `tried_regions` snapshot costs far more on both sides: the
//! kdamond makes a sysfs directory of attribute files for every region that matched the scheme
//! and removes them at the next request (mm/damon/sysfs-schemes.c
//! `damon_sysfs_before_damos_apply`, `damon_sysfs_scheme_regions_rm_dirs`), and pghotd lists
//! that directory and opens and reads three files a region, every aggregation interval. In the
//! Debian rig's guest, with MariaDB's 200 MB watched, pghotd's source thread took 17.9 s and
//! the kdamond 26.7 s of a 60 s phase (BENCHMARKS.md, "MariaDB: fewer wake-ups and fewer
//! calls"). Here a region is a 64-byte record in a ring pghotd drains with one read.
//!
//! The event is opened on the kdamond's thread (a per-task event), so another kdamond's regions
//! never reach it. Where tracefs is not mounted, the kernel lacks the event, or perf refuses it,
//! the source reads `tried_regions` as before (`damon::DamonSource` says which, once).
//!
//! The record's layout is read from the event's `format` file, not assumed: fields the kernel
//! adds later are skipped, and a field pghotd needs that moved is found where it went.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use perf_event::Builder;
use perf_event::events::Tracepoint;
use perf_event_open_sys::bindings;

use super::sysfs::Region;
use crate::sampler::perf::record::{self, Record, SampleFormat};
use crate::sampler::perf::ring::{Ring, page_size};

/// Where tracefs is, under the sysfs root: its own mount point (Linux 4.1 and later), then
/// inside debugfs.
const TRACEFS: [&str; 2] = ["kernel/tracing", "kernel/debug/tracing"];
/// The event's directory under tracefs.
const EVENT: &str = "events/damon/damon_aggregated";
/// One record in the ring: the 8-byte header, the RAW section's u32 size, the event's 48 bytes
/// (8 of common fields, 40 of its own on a 64-bit kernel) and 4 bytes of padding to 8.
pub const RECORD_BYTES: usize = 64;
/// The ring holds this long of the most regions DAMON may report, at least: the reader drains
/// it well within that (its pace waits a second at most, and the watermark wakes it at a
/// quarter full).
const RING_HOLDS_S: u64 = 2;
/// Largest ring, in data pages (4 MiB at 4 KiB pages).
const MAX_RING_PAGES: usize = 1024;

/// One field of the event's record: where it is and how wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    offset: usize,
    size: usize,
}

/// Where the fields pghotd reads sit in a `damon_aggregated` record, as the event's `format`
/// file gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    target_id: Field,
    nr_regions: Field,
    start: Field,
    end: Field,
    nr_accesses: Field,
}

/// One region of one target at the end of an aggregation interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aggregated {
    /// The target's index in the kdamond's context (the order pghotd wrote the pids in).
    pub target: u64,
    /// How many regions that target has in this aggregation.
    pub nr_regions: u64,
    pub region: Region,
}

impl Layout {
    /// Reads the `field:TYPE NAME; offset:N; size:N; signed:N;` lines of a tracefs `format`
    /// file (Documentation/trace/events.rst, "Event formats"). Fields it does not need are
    /// skipped; a needed one missing, or of a width other than 4 or 8 bytes, is an error naming
    /// it. Hand-written: the perf crates pghotd uses (perf-event2, linux-perf-data) read records,
    /// not tracefs format files, and these few lines need no more than splitting on `;`.
    pub fn parse(format: &str) -> Result<Layout, String> {
        let mut fields: Vec<(&str, Field)> = Vec::new();
        for line in format.lines() {
            let Some(rest) = line.trim().strip_prefix("field:") else {
                continue;
            };
            let mut parts = rest.split(';').map(str::trim);
            let decl = parts.next().unwrap_or_default();
            // "unsigned long target_id", "char comm[16]": the name is the last word.
            let name = decl
                .rsplit(' ')
                .next()
                .unwrap_or_default()
                .split('[')
                .next()
                .unwrap_or_default();
            let (mut offset, mut size) = (None, None);
            for part in parts {
                if let Some(v) = part.strip_prefix("offset:") {
                    offset = v.parse().ok();
                } else if let Some(v) = part.strip_prefix("size:") {
                    size = v.parse().ok();
                }
            }
            if let (Some(offset), Some(size)) = (offset, size) {
                fields.push((name, Field { offset, size }));
            }
        }
        let field = |name: &str| -> Result<Field, String> {
            let (_, f) = fields
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| format!("the event's format has no field '{name}'"))?;
            if f.size == 4 || f.size == 8 {
                Ok(*f)
            } else {
                Err(format!(
                    "field '{name}' is {} bytes wide; pghotd reads 4 or 8",
                    f.size
                ))
            }
        };
        Ok(Layout {
            target_id: field("target_id")?,
            nr_regions: field("nr_regions")?,
            start: field("start")?,
            end: field("end")?,
            nr_accesses: field("nr_accesses")?,
        })
    }

    fn read(raw: &[u8], f: Field) -> Option<u64> {
        let bytes = raw.get(f.offset..f.offset + f.size)?;
        Some(match f.size {
            4 => u64::from(u32::from_ne_bytes(bytes.try_into().ok()?)),
            _ => u64::from_ne_bytes(bytes.try_into().ok()?),
        })
    }

    /// The region a record's RAW section describes; `None` when it is too short for the
    /// layout.
    pub fn decode(&self, raw: &[u8]) -> Option<Aggregated> {
        let nr_accesses = Layout::read(raw, self.nr_accesses)?;
        Some(Aggregated {
            target: Layout::read(raw, self.target_id)?,
            nr_regions: Layout::read(raw, self.nr_regions)?,
            region: Region {
                start: Layout::read(raw, self.start)?,
                end: Layout::read(raw, self.end)?,
                nr_accesses: u32::try_from(nr_accesses).unwrap_or(u32::MAX),
            },
        })
    }
}

/// Gathers one aggregation's records into a list per target of the regions with an access
/// seen (`nr_accesses` above 0: what the `stat` scheme's access pattern lets into
/// `tried_regions`, so both ways give the same lists).
///
/// The kdamond writes target 0's regions, then target 1's, and so on; an aggregation is whole
/// once every target has had as many records as its `nr_regions` says. A record that cannot
/// belong to the aggregation being gathered (an earlier target again, a count that changed,
/// more records than announced: records were lost in between) starts a new one, and the
/// partial one is counted as torn and dropped. A vaddr target always has at least one region
/// (DAMON keeps `min_nr_regions`), so every target appears in every aggregation.
#[derive(Debug)]
pub struct Assembler {
    lists: Vec<Vec<Region>>,
    /// Records of this aggregation so far, per target.
    seen: Vec<u64>,
    /// Regions each target has in this aggregation (from its first record).
    expected: Vec<u64>,
    /// The target of the last record.
    last: Option<usize>,
    /// Aggregations dropped because records of them were missing.
    pub torn: u64,
    /// Records naming a target index the kdamond was not given.
    pub foreign: u64,
}

impl Assembler {
    pub fn new(targets: usize) -> Assembler {
        Assembler {
            lists: vec![Vec::new(); targets],
            seen: vec![0; targets],
            expected: vec![0; targets],
            last: None,
            torn: 0,
            foreign: 0,
        }
    }

    fn targets(&self) -> usize {
        self.lists.len()
    }

    /// Forgets the aggregation being gathered (counted as torn when it had records).
    pub fn drop_partial(&mut self) {
        if self.last.is_some() {
            self.torn += 1;
        }
        self.clear();
    }

    fn clear(&mut self) {
        for list in &mut self.lists {
            list.clear();
        }
        self.seen.fill(0);
        self.expected.fill(0);
        self.last = None;
    }

    /// Adds one record; true when it completed the aggregation, whose lists [`Assembler::take`]
    /// then hands over.
    pub fn push(&mut self, rec: Aggregated) -> bool {
        let Some(t) = usize::try_from(rec.target)
            .ok()
            .filter(|&t| t < self.targets())
        else {
            self.foreign += 1;
            return false;
        };
        let starts_anew = match self.last {
            None => false,
            Some(last) => {
                t < last
                    || self.seen[t] >= self.expected[t] && self.seen[t] > 0
                    || self.seen[t] > 0 && self.expected[t] != rec.nr_regions
            }
        };
        if starts_anew {
            self.drop_partial();
        }
        if self.seen[t] == 0 {
            self.expected[t] = rec.nr_regions;
        }
        self.seen[t] += 1;
        self.last = Some(t);
        if rec.region.nr_accesses > 0 && rec.region.start < rec.region.end {
            self.lists[t].push(rec.region);
        }
        t + 1 == self.targets()
            && self
                .seen
                .iter()
                .zip(&self.expected)
                .all(|(&s, &e)| s > 0 && s == e)
    }

    /// Swaps the whole aggregation's lists into `out` (one per target) and starts the next.
    pub fn take(&mut self, out: &mut Vec<Vec<Region>>) {
        out.resize_with(self.targets(), Vec::new);
        for (o, l) in out.iter_mut().zip(&mut self.lists) {
            std::mem::swap(o, l);
        }
        self.clear();
    }
}

/// What one drain of the ring found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    pub records: usize,
    /// Records the kernel dropped because the ring was full (PERF_RECORD_LOST).
    pub lost: u64,
    /// Records that could not be parsed, or a corrupt stretch of the ring.
    pub bad: u64,
}

/// The `damon_aggregated` event on one kdamond thread, and its ring.
pub struct AggregatedEvent {
    // Dropped after the ring: the mapping is of this event's fd.
    ring: Ring,
    counter: perf_event::Counter,
    layout: Layout,
    format: SampleFormat,
}

/// The event's directory under the first tracefs that has it.
fn event_dir(sysfs_root: &Path) -> Result<PathBuf, String> {
    TRACEFS
        .iter()
        .map(|t| sysfs_root.join(t).join(EVENT))
        .find(|d| d.join("id").is_file())
        .ok_or_else(|| {
            format!(
                "no {EVENT} under {}/{{{}}} (tracefs not mounted there, or a kernel without \
                 DAMON's tracepoints)",
                sysfs_root.display(),
                TRACEFS.join(",")
            )
        })
}

/// Data pages for a ring that holds [`RING_HOLDS_S`] of `max_regions` regions reported every
/// `aggr_us`, and at least two aggregations (the kdamond writes one in a burst, so a ring
/// smaller than one would tear every aggregation of a slow kdamond): a power of two, between
/// 8 and [`MAX_RING_PAGES`].
pub fn ring_pages(max_regions: u32, aggr_us: u32) -> usize {
    let per_s = u64::from(max_regions) * 1_000_000 / u64::from(aggr_us.max(1));
    let records = (per_s * RING_HOLDS_S).max(2 * u64::from(max_regions));
    let bytes = records * RECORD_BYTES as u64;
    let pages = usize::try_from(bytes.div_ceil(page_size() as u64)).unwrap_or(MAX_RING_PAGES);
    pages.clamp(8, MAX_RING_PAGES).next_power_of_two()
}

impl AggregatedEvent {
    /// Opens the event on kdamond thread `tid` with a ring of `ring_pages` data pages, and
    /// enables it. The error says what was missing or refused.
    pub fn open(sysfs_root: &Path, tid: u32, ring_pages: usize) -> Result<AggregatedEvent, String> {
        let dir = event_dir(sysfs_root)?;
        let read = |name: &str, limit: usize| {
            let path = dir.join(name);
            crate::safefs::read_text(&path, limit)
                .map_err(|e| format!("reading {}: {e}", path.display()))
        };
        let id_text = read("id", crate::safefs::limit::ATTRIBUTE)?;
        let id: u64 = id_text
            .trim()
            .parse()
            .map_err(|_| format!("{}/id: '{}' is not a number", dir.display(), id_text.trim()))?;
        let layout = Layout::parse(&read("format", crate::safefs::limit::ATTRIBUTE)?)
            .map_err(|e| format!("{}/format: {e}", dir.display()))?;
        let format =
            SampleFormat::new(u64::from(bindings::PERF_SAMPLE_RAW)).map_err(|e| e.to_string())?;
        let pid = libc::pid_t::try_from(tid).map_err(|_| format!("thread id {tid}"))?;
        let mut b = Builder::new(Tracepoint::with_id(id));
        // The kdamond is a kernel thread: the tracepoint fires in kernel mode.
        b.observe_pid(pid)
            .any_cpu()
            .include_kernel()
            .sample_period(1)
            .wakeup_watermark(ring_pages * page_size() / 4);
        b.attrs_mut().sample_type = format.bits();
        let mut counter = b.build().map_err(|e| {
            format!(
                "perf_event_open of damon:damon_aggregated on kdamond thread {tid}: {e} ({})",
                crate::sampler::perf::hint(e.raw_os_error(), 0)
            )
        })?;
        let ring = Ring::map(&counter, ring_pages).map_err(|e| e.to_string())?;
        counter
            .enable()
            .map_err(|e| format!("enabling damon:damon_aggregated: {e}"))?;
        Ok(AggregatedEvent {
            ring,
            counter,
            layout,
            format,
        })
    }

    /// The event's fd: readable at the ring's watermark, hung up when the kdamond exits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the counter owns this open fd and lives as long as `self`, which the returned
        // borrow cannot outlive.
        unsafe { BorrowedFd::borrow_raw(self.counter.as_raw_fd()) }
    }

    /// Feeds every record in the ring to `asm`, calling `whole` each time one completes an
    /// aggregation.
    pub fn drain(&mut self, asm: &mut Assembler, mut whole: impl FnMut(&mut Assembler)) -> Drained {
        drain_ring(&mut self.ring, self.format, &self.layout, asm, &mut whole)
    }
}

/// [`AggregatedEvent::drain`] over any ring (tests feed an in-memory one).
fn drain_ring(
    ring: &mut Ring,
    format: SampleFormat,
    layout: &Layout,
    asm: &mut Assembler,
    whole: &mut impl FnMut(&mut Assembler),
) -> Drained {
    let mut out = Drained::default();
    let read = ring.drain(|bytes| match record::parse(bytes, format) {
        Ok(Record::Sample(s)) => match s.raw.and_then(|raw| layout.decode(raw)) {
            Some(rec) => {
                if asm.push(rec) {
                    whole(asm);
                }
            }
            None => out.bad += 1,
        },
        Ok(Record::Lost { lost }) => {
            out.lost += lost;
            asm.drop_partial();
        }
        Ok(_) => {}
        Err(_) => out.bad += 1,
    });
    match read {
        Ok(n) => out.records = n,
        Err(_) => {
            out.bad += 1;
            asm.drop_partial();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::perf::record::build;
    use crate::sampler::perf::ring::RingWriter;

    /// Captured from a real kernel (Linux 6.18, x86-64):
    /// `cat /sys/kernel/tracing/events/damon/damon_aggregated/format`.
    const FORMAT_6_18: &str = "name: damon_aggregated
ID: 767
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long target_id;\toffset:8;\tsize:8;\tsigned:0;
\tfield:unsigned int nr_regions;\toffset:16;\tsize:4;\tsigned:0;
\tfield:unsigned long start;\toffset:24;\tsize:8;\tsigned:0;
\tfield:unsigned long end;\toffset:32;\tsize:8;\tsigned:0;
\tfield:unsigned int nr_accesses;\toffset:40;\tsize:4;\tsigned:0;
\tfield:unsigned int age;\toffset:44;\tsize:4;\tsigned:0;

print fmt: \"target_id=%lu nr_regions=%u %lu-%lu: %u %u\", REC->target_id, REC->nr_regions, REC->start, REC->end, REC->nr_accesses, REC->age
";

    /// A record's RAW section as that kernel writes it: the 8 bytes of common fields, then
    /// the event's fields at the offsets above (worked out by hand from
    /// include/trace/events/damon.h's TP_STRUCT__entry on x86-64: unsigned long target_id at
    /// 8, unsigned int nr_regions at 16, start and end aligned to 24 and 32, nr_accesses and
    /// age at 40 and 44), 48 bytes in all.
    fn raw(target: u64, nr_regions: u32, start: u64, end: u64, nr_accesses: u32) -> Vec<u8> {
        let mut b = vec![0u8; 48];
        b[8..16].copy_from_slice(&target.to_ne_bytes());
        b[16..20].copy_from_slice(&nr_regions.to_ne_bytes());
        b[24..32].copy_from_slice(&start.to_ne_bytes());
        b[32..40].copy_from_slice(&end.to_ne_bytes());
        b[40..44].copy_from_slice(&nr_accesses.to_ne_bytes());
        b[44..48].copy_from_slice(&7u32.to_ne_bytes());
        b
    }

    fn region(start: u64, end: u64, nr_accesses: u32) -> Region {
        Region {
            start,
            end,
            nr_accesses,
        }
    }

    fn rec(target: u64, nr_regions: u64, start: u64, nr_accesses: u32) -> Aggregated {
        Aggregated {
            target,
            nr_regions,
            region: region(start, start + 0x1000, nr_accesses),
        }
    }

    #[test]
    fn the_real_format_gives_the_offsets_of_the_kernels_struct() {
        let layout = Layout::parse(FORMAT_6_18).unwrap();
        let r = raw(1, 11, 0x7f00_0000_0000, 0x7f00_0001_0000, 20);
        assert_eq!(
            layout.decode(&r),
            Some(Aggregated {
                target: 1,
                nr_regions: 11,
                region: region(0x7f00_0000_0000, 0x7f00_0001_0000, 20),
            })
        );
        // The record's header says 60 bytes of RAW on this kernel (u32 size + 48 + padding):
        // RECORD_BYTES is what one takes in the ring.
        assert_eq!(8 + 4 + r.len() + 4, RECORD_BYTES);
        assert_eq!(
            layout.decode(&r[..40]),
            None,
            "a short record is not read past"
        );
    }

    #[test]
    fn a_field_added_or_moved_is_followed_and_a_missing_one_named() {
        // A later kernel that adds a field before `start` moves it: read where it went.
        let grown = FORMAT_6_18
            .replace(
                "\tfield:unsigned long start;\toffset:24;",
                "\tfield:unsigned long sz_filter;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:unsigned long start;\toffset:48;",
            )
            .replace("offset:32;", "offset:56;");
        let layout = Layout::parse(&grown).unwrap();
        let mut r = raw(0, 3, 0, 0, 5);
        r.resize(64, 0);
        r[48..56].copy_from_slice(&0x1000u64.to_ne_bytes());
        r[56..64].copy_from_slice(&0x3000u64.to_ne_bytes());
        assert_eq!(
            layout.decode(&r).map(|a| a.region),
            Some(region(0x1000, 0x3000, 5))
        );
        let err = Layout::parse(&FORMAT_6_18.replace("nr_accesses", "nr_hits")).unwrap_err();
        assert!(err.contains("no field 'nr_accesses'"), "{err}");
        let err = Layout::parse(&FORMAT_6_18.replace("offset:16;\tsize:4", "offset:16;\tsize:2"))
            .unwrap_err();
        assert!(err.contains("'nr_regions' is 2 bytes"), "{err}");
    }

    /// By hand: two targets with 2 and 3 regions; the aggregation is whole at the fifth
    /// record, and only regions with an access seen are listed.
    #[test]
    fn an_aggregation_is_whole_when_every_target_has_its_regions() {
        let mut a = Assembler::new(2);
        assert!(!a.push(rec(0, 2, 0x1000, 4)));
        assert!(!a.push(rec(0, 2, 0x2000, 0)));
        assert!(!a.push(rec(1, 3, 0x10000, 1)));
        assert!(!a.push(rec(1, 3, 0x11000, 20)));
        assert!(a.push(rec(1, 3, 0x12000, 0)));
        let mut out = Vec::new();
        a.take(&mut out);
        assert_eq!(
            out,
            vec![
                vec![region(0x1000, 0x2000, 4)],
                vec![region(0x10000, 0x11000, 1), region(0x11000, 0x12000, 20)],
            ]
        );
        assert_eq!((a.torn, a.foreign), (0, 0));
        // The next aggregation starts empty.
        assert!(!a.push(rec(0, 1, 0x1000, 2)));
        assert!(a.push(rec(1, 1, 0x10000, 2)));
        a.take(&mut out);
        assert_eq!(out[0], vec![region(0x1000, 0x2000, 2)]);
    }

    /// By hand: records missing from an aggregation tear it (dropped, counted) and the next
    /// one is gathered whole; a record of a target the kdamond was not given is counted.
    #[test]
    fn a_torn_aggregation_is_dropped_and_the_next_is_whole() {
        let mut a = Assembler::new(2);
        // Target 1's records of the first aggregation were lost: target 0 comes again.
        assert!(!a.push(rec(0, 2, 0x1000, 1)));
        assert!(!a.push(rec(0, 2, 0x2000, 1)));
        assert!(!a.push(rec(0, 2, 0x1000, 3)));
        assert_eq!(a.torn, 1);
        assert!(!a.push(rec(0, 2, 0x2000, 3)));
        assert!(!a.push(rec(5, 1, 0x9000, 3)));
        assert_eq!(a.foreign, 1);
        assert!(a.push(rec(1, 1, 0x10000, 3)));
        let mut out = Vec::new();
        a.take(&mut out);
        assert_eq!(out[0].len(), 2);
        assert_eq!(out[0][0].nr_accesses, 3);
        // A count that changed mid-way (the kdamond split regions between two aggregations
        // and the end of the first was lost) starts anew.
        assert!(!a.push(rec(0, 2, 0x1000, 1)));
        assert!(!a.push(rec(0, 4, 0x1000, 1)));
        assert_eq!(a.torn, 2);
    }

    /// Records through a ring as the kernel lays them out: two whole aggregations of one
    /// target, a PERF_RECORD_LOST between them tearing the one in progress.
    #[test]
    fn the_ring_is_read_into_whole_aggregations_and_losses_tear_them() {
        let layout = Layout::parse(FORMAT_6_18).unwrap();
        let format = SampleFormat::new(u64::from(bindings::PERF_SAMPLE_RAW)).unwrap();
        let mut ring = Ring::in_memory(1 << 16).unwrap();
        let sample = |r: &[u8]| {
            let mut s = build::empty();
            s.raw = Some(r);
            build::sample(format, &s)
        };
        let records = [
            sample(&raw(0, 2, 0x1000, 0x2000, 5)),
            sample(&raw(0, 2, 0x2000, 0x4000, 0)),
            sample(&raw(0, 2, 0x1000, 0x2000, 6)),
            build::lost(3),
            sample(&raw(0, 1, 0x1000, 0x4000, 7)),
        ];
        assert_eq!(records[0].len(), RECORD_BYTES);
        {
            let w = RingWriter::new(&ring);
            for r in &records {
                assert!(w.push(r));
            }
        }
        let mut a = Assembler::new(1);
        let mut wholes = Vec::new();
        let got = drain_ring(
            &mut ring,
            format,
            &layout,
            &mut a,
            &mut |a: &mut Assembler| {
                let mut out = Vec::new();
                a.take(&mut out);
                wholes.push(out);
            },
        );
        assert_eq!(
            got,
            Drained {
                records: 5,
                lost: 3,
                bad: 0
            }
        );
        assert_eq!(
            wholes,
            vec![
                vec![vec![region(0x1000, 0x2000, 5)]],
                vec![vec![region(0x1000, 0x4000, 7)]],
            ]
        );
        assert_eq!(a.torn, 1);
    }

    /// By hand: 1000 regions every 100 ms are 640,000 bytes a second, 1,280,000 in two
    /// seconds: 313 pages of 4 KiB, so 512; a handful of regions takes the least, 8.
    #[test]
    fn the_ring_holds_two_seconds_and_two_aggregations_of_the_most_regions() {
        if page_size() != 4096 {
            return;
        }
        assert_eq!(ring_pages(1000, 100_000), 512);
        assert_eq!(ring_pages(10, 100_000), 8);
        assert_eq!(ring_pages(100_000, 1000), MAX_RING_PAGES);
        // A kdamond aggregating every 5 s with up to 8192 regions (a host's reclaim): two
        // seconds would be 1638 x 2 x 64 B = 52 pages, under one aggregation's 8192 x 64 B =
        // 128 pages; two of those are 256.
        assert_eq!(ring_pages(8192, 5_000_000), 256);
    }
}
