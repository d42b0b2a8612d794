//! The kernel side of splitting: what folios a 2 MiB region is made of (`/proc/PID/pagemap` and
//! `/proc/kpageflags`), and splitting a THP to a lower order through
//! `/sys/kernel/debug/split_huge_pages` (`pid,0xstart,0xend,new_order`, Linux 6.10+).
//!
//! The debugfs write returns success even when it split nothing (a pinned, locked or
//! under-migration folio is skipped silently), so every split is verified by reading the
//! region again. Facts: `split_huge_pages_write()` and `split_huge_pages_pid()` in
//! `mm/huge_memory.c` (input format, silent skips); `Documentation/admin-guide/mm/pagemap.rst`
//! (pagemap entries, kpageflags bits); `Documentation/admin-guide/mm/transhuge.rst`.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::split::SUBPAGES;
use crate::migrator::folios::{Folio, FolioError, FolioMap};

/// pagemap: page present.
const PM_PRESENT: u64 = 1 << 63;
/// pagemap: PFN bits 0-54 (zero unless the opener has CAP_SYS_ADMIN).
const PM_PFN_MASK: u64 = (1 << 55) - 1;
/// kpageflags bits (include/uapi/linux/kernel-page-flags.h).
const KPF_COMPOUND_HEAD: u64 = 1 << 15;
const KPF_COMPOUND_TAIL: u64 = 1 << 16;
const KPF_HUGE: u64 = 1 << 17;
const KPF_THP: u64 = 1 << 22;

pub const PAGE_SIZE: u64 = 4096;
pub const REGION_BYTES: u64 = SUBPAGES as u64 * PAGE_SIZE;

#[derive(Debug, thiserror::Error)]
pub enum ThpError {
    #[error("reading {}: {source}", path.display())]
    Pagemap {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} shows no page frame numbers: pghotd needs CAP_SYS_ADMIN to see folio sizes",
        path.display()
    )]
    PfnHidden { path: PathBuf },
    #[error("reading {}: {source}", path.display())]
    Kpageflags {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is not usable ({source}); splitting needs root, debugfs mounted and no kernel \
         lockdown (mount -t debugfs none /sys/kernel/debug)",
        path.display()
    )]
    SplitUnavailable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing '{line}' to {}: {source}", path.display())]
    SplitWrite {
        path: PathBuf,
        line: String,
        source: std::io::Error,
    },
}

impl ThpError {
    /// Whether splitting cannot work on this machine at all (as opposed to this once).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ThpError::SplitUnavailable { .. } | ThpError::PfnHidden { .. }
        )
    }
}

/// One 4 KiB page of a region: not present, or in a folio of `folio_pages` starting at
/// subpage `folio_start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageFolio {
    pub present: bool,
    pub folio_start: u16,
    pub folio_pages: u16,
}

impl PageFolio {
    /// log2 of the folio's pages (9 for a PMD THP, 0 for a base page).
    pub fn order(&self) -> u8 {
        u16::BITS as u8 - 1 - self.folio_pages.max(1).leading_zeros() as u8
    }
}

/// The folios of one 2 MiB-aligned region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub pages: [PageFolio; SUBPAGES],
}

impl Region {
    /// The region from raw pagemap entries and the kpageflags of their PFNs (0 where absent).
    pub fn from_raw(start: u64, pagemap: &[u64; SUBPAGES], flags: &[u64; SUBPAGES]) -> Region {
        let mut pages = [PageFolio::default(); SUBPAGES];
        let pfn = |i: usize| pagemap[i] & PM_PFN_MASK;
        let present = |i: usize| pagemap[i] & PM_PRESENT != 0;
        let mut i = 0;
        while i < SUBPAGES {
            if !present(i) {
                i += 1;
                continue;
            }
            // A large THP folio (not hugetlb) runs from a head (or a tail whose head lies
            // before the region) over the tails that follow with consecutive PFNs.
            let compound = flags[i] & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL) != 0
                && flags[i] & KPF_THP != 0
                && flags[i] & KPF_HUGE == 0;
            let mut end = i + 1;
            if compound {
                while end < SUBPAGES
                    && present(end)
                    && flags[end] & KPF_COMPOUND_TAIL != 0
                    && pfn(end) == pfn(i) + (end - i) as u64
                {
                    end += 1;
                }
            }
            for p in &mut pages[i..end] {
                *p = PageFolio {
                    present: true,
                    folio_start: i as u16,
                    folio_pages: (end - i) as u16,
                };
            }
            i = end;
        }
        Region { start, pages }
    }

    /// The folio holding `vaddr`, if present.
    pub fn folio_of(&self, vaddr: u64) -> Option<PageFolio> {
        let i = ((vaddr - self.start) / PAGE_SIZE) as usize;
        self.pages.get(i).copied().filter(|p| p.present)
    }
}

/// What the admission needs from the kernel; a fake in tests.
pub trait ThpKernel: Send {
    /// The folios of the 2 MiB region at `start` (aligned) of `pid`.
    fn region(&mut self, pid: u32, start: u64) -> Result<Region, ThpError>;
    /// Splits the THPs in `[start, end)` of `pid` to `order`. Success does not mean anything
    /// split: read the region again.
    fn split(&mut self, pid: u32, start: u64, end: u64, order: u8) -> Result<(), ThpError>;
    /// Whether each of `vaddrs` (sorted) of `pid` is in a large folio now (false where not
    /// present): the re-check before a move of pages admitted at 4 KiB (see
    /// `AdmissionGate::recheck`). By default one region read per 2 MiB region; [`SysThp`]
    /// reads one pagemap span per region and one kpageflags entry per page.
    fn in_large_folio(&mut self, pid: u32, vaddrs: &[u64]) -> Result<Vec<bool>, ThpError> {
        let mut out = Vec::with_capacity(vaddrs.len());
        let mut region: Option<Region> = None;
        for &v in vaddrs {
            let start = v & !(REGION_BYTES - 1);
            let r = match region.take() {
                Some(r) if r.start == start => r,
                _ => self.region(pid, start)?,
            };
            out.push(r.folio_of(v).is_some_and(|f| f.order() > 0));
            region = Some(r);
        }
        Ok(out)
    }
    /// How long khugepaged sleeps between its passes, when the kernel says: ranges collapse
    /// again at most once a pass. By default not known.
    fn khugepaged_pause(&self) -> Option<Duration> {
        None
    }
    /// Whether the 2 MiB region at `start` of `pid` is one PMD THP (a range collapsed again by
    /// khugepaged after a split). By default one region read; [`SysThp`] reads one pagemap
    /// entry and one kpageflags entry.
    fn is_pmd_thp(&mut self, pid: u32, start: u64) -> Result<bool, ThpError> {
        let r = self.region(pid, start)?;
        Ok(r.folio_of(start)
            .is_some_and(|f| usize::from(f.folio_pages) == SUBPAGES))
    }
}

/// Whether a page's kpageflags say it is in a large THP folio: a compound head or tail with
/// KPF_THP, not hugetlb (fs/proc/page.c `stable_page_flags`).
pub fn in_large_thp_folio(kpageflags: u64) -> bool {
    kpageflags & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL) != 0
        && kpageflags & KPF_THP != 0
        && kpageflags & KPF_HUGE == 0
}

/// The real interfaces, under `proc_root` (normally `/proc`) and `split_path` (normally
/// `/sys/kernel/debug/split_huge_pages`); tests point both into a fixture tree.
pub struct SysThp {
    proc_root: PathBuf,
    split_path: PathBuf,
    kpageflags: Option<File>,
    /// khugepaged's pause between passes, `scan_sleep_millisecs`
    /// (Documentation/admin-guide/mm/transhuge.rst, "Khugepaged controls").
    khugepaged_sleep: PathBuf,
}

/// khugepaged's pause between passes, in ms.
const KHUGEPAGED_SLEEP: &str =
    "/sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs";

impl SysThp {
    pub fn new(proc_root: impl Into<PathBuf>, split_path: impl Into<PathBuf>) -> SysThp {
        SysThp {
            proc_root: proc_root.into(),
            split_path: split_path.into(),
            kpageflags: None,
            khugepaged_sleep: PathBuf::from(KHUGEPAGED_SLEEP),
        }
    }

    /// Reads khugepaged's pause from `path` instead (tests).
    pub fn with_khugepaged_sleep(mut self, path: impl Into<PathBuf>) -> SysThp {
        self.khugepaged_sleep = path.into();
        self
    }

    pub fn system() -> SysThp {
        SysThp::new("/proc", "/sys/kernel/debug/split_huge_pages")
    }

    pub fn split_path(&self) -> &Path {
        &self.split_path
    }

    /// The kpageflags of the page at `vaddr` of `pid` when it is in a large THP folio (a
    /// compound head or tail with KPF_THP, not hugetlb), else 0 (a base page, not present).
    fn in_large_folio_flags(&mut self, pid: u32, vaddr: u64) -> Result<u64, ThpError> {
        let mut entry = [0u64];
        let path = self.read_pagemap(pid, vaddr / PAGE_SIZE, &mut entry)?;
        self.thp_flags(entry[0], &path)
    }

    /// Reads `out.len()` pagemap entries of `pid` from page number `index`; returns the
    /// file's path, for later errors.
    fn read_pagemap(&self, pid: u32, index: u64, out: &mut [u64]) -> Result<PathBuf, ThpError> {
        let (file, path) = self.open_pagemap(pid)?;
        read_entries(&file, index, out).map_err(|source| ThpError::Pagemap {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// `pid`'s pagemap, open for reading at any offset, and its path.
    fn open_pagemap(&self, pid: u32) -> Result<(File, PathBuf), ThpError> {
        let path = self.proc_root.join(pid.to_string()).join("pagemap");
        match File::open(&path) {
            Ok(file) => Ok((file, path)),
            Err(source) => Err(ThpError::Pagemap { path, source }),
        }
    }

    /// The kpageflags behind a pagemap entry when they say "in a large THP folio", else 0.
    fn thp_flags(&mut self, entry: u64, pagemap: &Path) -> Result<u64, ThpError> {
        if entry & PM_PRESENT == 0 {
            return Ok(0);
        }
        let pfn = entry & PM_PFN_MASK;
        if pfn == 0 {
            return Err(ThpError::PfnHidden {
                path: pagemap.to_path_buf(),
            });
        }
        let mut flags = [0u64];
        let kpf_path = self.proc_root.join("kpageflags");
        read_entries(self.kpageflags()?, pfn, &mut flags).map_err(|source| {
            ThpError::Kpageflags {
                path: kpf_path,
                source,
            }
        })?;
        let f = flags[0];
        Ok(if in_large_thp_folio(f) { f } else { 0 })
    }

    fn kpageflags(&mut self) -> Result<&File, ThpError> {
        let file = match self.kpageflags.take() {
            Some(f) => f,
            None => {
                let path = self.proc_root.join("kpageflags");
                File::open(&path).map_err(|source| ThpError::Kpageflags { path, source })?
            }
        };
        Ok(self.kpageflags.insert(file))
    }
}

/// Reads `out.len()` u64 entries at entry index `index`; entries past the end of the file read
/// as 0 (a fixture, or a PFN beyond the last one).
fn read_entries(file: &File, index: u64, out: &mut [u64]) -> std::io::Result<()> {
    // Straight into `out` (native-endian u64s, as the kernel writes them): no buffer to
    // allocate and copy per read, which showed in the rig's profile of the migrator.
    let buf: &mut [u8] = bytemuck::cast_slice_mut(out);
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], index * 8 + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    // A partial entry at the end reads as 0 too.
    buf[done / 8 * 8..].fill(0);
    Ok(())
}

impl ThpKernel for SysThp {
    /// `scan_sleep_millisecs` as the kernel gives it (a regular file, a few bytes: `safefs`);
    /// `None` when it is missing (no THP in this kernel) or not a number.
    fn khugepaged_pause(&self) -> Option<Duration> {
        let text = crate::safefs::read_text(&self.khugepaged_sleep, 32).ok()?;
        text.trim().parse().ok().map(Duration::from_millis)
    }

    fn region(&mut self, pid: u32, start: u64) -> Result<Region, ThpError> {
        let mut pagemap = [0u64; SUBPAGES];
        let path = self.read_pagemap(pid, start / PAGE_SIZE, &mut pagemap)?;
        if pagemap
            .iter()
            .any(|&e| e & PM_PRESENT != 0 && e & PM_PFN_MASK == 0)
        {
            return Err(ThpError::PfnHidden { path });
        }
        let kpf_path = self.proc_root.join("kpageflags");
        let kpf = self.kpageflags()?;
        let mut flags = [0u64; SUBPAGES];
        // One read per run of consecutive PFNs (a whole THP is one run).
        let mut i = 0;
        while i < SUBPAGES {
            if pagemap[i] & PM_PRESENT == 0 {
                i += 1;
                continue;
            }
            let pfn = pagemap[i] & PM_PFN_MASK;
            let mut end = i + 1;
            while end < SUBPAGES
                && pagemap[end] & PM_PRESENT != 0
                && pagemap[end] & PM_PFN_MASK == pfn + (end - i) as u64
            {
                end += 1;
            }
            read_entries(kpf, pfn, &mut flags[i..end]).map_err(|source| ThpError::Kpageflags {
                path: kpf_path.clone(),
                source,
            })?;
            i = end;
        }
        Ok(Region::from_raw(start, &pagemap, &flags))
    }

    /// Per 2 MiB region, one pagemap read from the first to the last page asked about; then one
    /// kpageflags entry per present page: a THP's subpage reads as a compound head or tail
    /// with KPF_THP (as in [`Region::from_raw`]). A split region's base pages, with PFNs that
    /// are not consecutive, would cost [`SysThp::region`] up to 512 kpageflags reads. The
    /// pagemap is opened once for all the regions: a program's hot pages are scattered, so a
    /// batch of candidates names about as many regions as pages, and each open checks ptrace
    /// access again (fs/proc/base.c `proc_mem_open`, `mm_access`).
    fn in_large_folio(&mut self, pid: u32, vaddrs: &[u64]) -> Result<Vec<bool>, ThpError> {
        let mut out = vec![false; vaddrs.len()];
        if vaddrs.is_empty() {
            return Ok(out);
        }
        let (file, path) = self.open_pagemap(pid)?;
        let mut i = 0;
        while i < vaddrs.len() {
            let region = vaddrs[i] & !(REGION_BYTES - 1);
            let end = i + vaddrs[i..]
                .iter()
                .take_while(|&&v| v & !(REGION_BYTES - 1) == region)
                .count();
            let first = vaddrs[i] / PAGE_SIZE;
            let last = vaddrs[end - 1] / PAGE_SIZE;
            let mut pagemap = vec![0u64; (last - first + 1) as usize];
            read_entries(&file, first, &mut pagemap).map_err(|source| ThpError::Pagemap {
                path: path.clone(),
                source,
            })?;
            for (o, &v) in out[i..end].iter_mut().zip(&vaddrs[i..end]) {
                let entry = pagemap[(v / PAGE_SIZE - first) as usize];
                *o = self.thp_flags(entry, &path)? != 0;
            }
            i = end;
        }
        Ok(out)
    }

    /// Subpage 256 of a region is a compound tail only in a folio larger than 1 MiB, that is
    /// a PMD THP: split to any order up to 8 it is a folio head or a base page.
    fn is_pmd_thp(&mut self, pid: u32, start: u64) -> Result<bool, ThpError> {
        let middle = start + (SUBPAGES as u64 / 2) * PAGE_SIZE;
        Ok(self.in_large_folio_flags(pid, middle)? & KPF_COMPOUND_TAIL != 0)
    }

    fn split(&mut self, pid: u32, start: u64, end: u64, order: u8) -> Result<(), ThpError> {
        // One write of at most 255 bytes; addresses must be 0x-prefixed hex.
        let line = format!("{pid},{start:#x},{end:#x},{order}");
        let path = &self.split_path;
        let mut file = crate::safefs::open_existing_for_write(path, false).map_err(|source| {
            match source.kind() {
                ErrorKind::NotFound
                | ErrorKind::PermissionDenied
                | ErrorKind::ReadOnlyFilesystem => ThpError::SplitUnavailable {
                    path: path.clone(),
                    source,
                },
                _ => ThpError::SplitWrite {
                    path: path.clone(),
                    line: line.clone(),
                    source,
                },
            }
        })?;
        file.write_all(line.as_bytes()).map_err(|source| {
            // Lockdown refuses the write itself with EPERM.
            if source.raw_os_error() == Some(libc::EPERM) {
                ThpError::SplitUnavailable {
                    path: path.clone(),
                    source,
                }
            } else {
                ThpError::SplitWrite {
                    path: path.clone(),
                    line,
                    source,
                }
            }
        })
    }
}

/// The migrator's folio sizes (`migrator::folios`) when no admission sizes them: one
/// pagemap span and one kpageflags entry per page asked about ([`ThpKernel::in_large_folio`]),
/// then one region read per 2 MiB region holding a large folio, for its extent (an mTHP is
/// aligned to its size, so it never crosses a region).
impl FolioMap for SysThp {
    fn large_folios(&mut self, pid: u32, vaddrs: &[u64]) -> Result<Vec<Option<Folio>>, FolioError> {
        let large = self.in_large_folio(pid, vaddrs).map_err(folio_error)?;
        let mut out = Vec::with_capacity(vaddrs.len());
        let mut region: Option<Region> = None;
        for (&v, &is_large) in vaddrs.iter().zip(&large) {
            if !is_large {
                out.push(None);
                continue;
            }
            let start = v & !(REGION_BYTES - 1);
            let r = match region.take() {
                Some(r) if r.start == start => r,
                _ => self.region(pid, start).map_err(folio_error)?,
            };
            out.push(r.folio_of(v).filter(|f| f.order() > 0).map(|f| Folio {
                start: start + u64::from(f.folio_start) * PAGE_SIZE,
                pages: u32::from(f.folio_pages),
            }));
            region = Some(r);
        }
        Ok(out)
    }
}

/// A process's pagemap failing is that process's; anything else is the machine's.
fn folio_error(e: ThpError) -> FolioError {
    match e {
        ThpError::Pagemap { .. } => FolioError::Process(e.to_string()),
        _ => FolioError::Unavailable(e.to_string()),
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A kernel of THPs in memory: regions of folios, and a split that really splits them
    //! unless told to skip (as the kernel does with a pinned folio).

    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    pub(crate) struct FakeThp {
        /// (pid, region start) -> folio pages per subpage (0: not present).
        pub(crate) regions: HashMap<(u32, u64), [u16; SUBPAGES]>,
        pub(crate) splits: Vec<(u32, u64, u64, u8)>,
        /// Split writes succeed but change nothing (pinned folios).
        pub(crate) refuse: bool,
        pub(crate) unavailable: bool,
        /// Region reads so far (each a pagemap + kpageflags read on the real kernel).
        pub(crate) reads: usize,
        /// Pages looked up one by one (`in_large_folio`: one kpageflags entry each on the
        /// real kernel), not region reads.
        pub(crate) page_lookups: usize,
    }

    impl FakeThp {
        /// A PMD THP at `start`.
        pub(crate) fn thp(&mut self, pid: u32, start: u64) {
            self.regions
                .insert((pid, start), [SUBPAGES as u16; SUBPAGES]);
        }
    }

    impl ThpKernel for FakeThp {
        fn region(&mut self, pid: u32, start: u64) -> Result<Region, ThpError> {
            self.reads += 1;
            let sizes = self
                .regions
                .get(&(pid, start))
                .copied()
                .unwrap_or([0; SUBPAGES]);
            let mut pages = [PageFolio::default(); SUBPAGES];
            for (i, p) in pages.iter_mut().enumerate() {
                let size = sizes[i];
                if size > 0 {
                    *p = PageFolio {
                        present: true,
                        folio_start: (i - i % size as usize) as u16,
                        folio_pages: size,
                    };
                }
            }
            Ok(Region { start, pages })
        }

        fn in_large_folio(&mut self, pid: u32, vaddrs: &[u64]) -> Result<Vec<bool>, ThpError> {
            self.page_lookups += vaddrs.len();
            Ok(vaddrs
                .iter()
                .map(|&v| {
                    let start = v & !(REGION_BYTES - 1);
                    let i = ((v - start) / PAGE_SIZE) as usize;
                    self.regions.get(&(pid, start)).is_some_and(|s| s[i] > 1)
                })
                .collect())
        }

        fn split(&mut self, pid: u32, start: u64, end: u64, order: u8) -> Result<(), ThpError> {
            if self.unavailable {
                return Err(ThpError::SplitUnavailable {
                    path: PathBuf::from("/sys/kernel/debug/split_huge_pages"),
                    source: std::io::Error::from(ErrorKind::NotFound),
                });
            }
            self.splits.push((pid, start, end, order));
            // The range may be part of a region (a subfolio split further, issue 24).
            let region = start & !(REGION_BYTES - 1);
            let pages =
                ((start - region) / PAGE_SIZE) as usize..((end - region) / PAGE_SIZE) as usize;
            if !self.refuse
                && let Some(sizes) = self.regions.get_mut(&(pid, region))
            {
                // As split_huge_pages_pid() does: each folio the range meets splits whole.
                let folio_of = |i: usize, size: u16| {
                    let size = usize::from(size.max(1));
                    i - i % size..i - i % size + size
                };
                let from = folio_of(pages.start, sizes[pages.start]).start;
                let to = folio_of(pages.end - 1, sizes[pages.end - 1]).end;
                for s in &mut sizes[from..to] {
                    if *s > 1 << order {
                        *s = 1 << order;
                    }
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bits from include/uapi/linux/kernel-page-flags.h: COMPOUND_HEAD 15, COMPOUND_TAIL 16,
    /// HUGE 17, THP 22.
    #[test]
    fn a_large_thp_folio_is_a_compound_page_with_thp_and_not_hugetlb() {
        assert!(in_large_thp_folio(1 << 15 | 1 << 22));
        assert!(in_large_thp_folio(1 << 16 | 1 << 22));
        assert!(!in_large_thp_folio(1 << 22));
        assert!(!in_large_thp_folio(1 << 15));
        assert!(!in_large_thp_folio(1 << 15 | 1 << 17 | 1 << 22));
    }

    /// Writes a sparse pagemap for pid 77 and a kpageflags file under `root`.
    fn fixture(root: &Path, entries: &[(u64, u64)], kpf: &[(u64, u64)]) {
        let dir = root.join("77");
        std::fs::create_dir_all(&dir).unwrap();
        let pm = File::create(dir.join("pagemap")).unwrap();
        for &(vaddr, entry) in entries {
            pm.write_all_at(&entry.to_ne_bytes(), vaddr / PAGE_SIZE * 8)
                .unwrap();
        }
        let f = File::create(root.join("kpageflags")).unwrap();
        for &(pfn, flags) in kpf {
            f.write_all_at(&flags.to_ne_bytes(), pfn * 8).unwrap();
        }
    }

    const START: u64 = 0x7f00_0020_0000;

    /// (index, entry) pairs of a pagemap or kpageflags fixture.
    type Entries = Vec<(u64, u64)>;

    /// The pagemap entries and kpageflags of a PMD THP at `START`, PFNs from `head`.
    fn pmd_thp(head: u64) -> (Entries, Entries) {
        let entries = (0..512)
            .map(|i| (START + i * PAGE_SIZE, PM_PRESENT | (head + i)))
            .collect();
        let kpf = (0..512)
            .map(|i| {
                let part = if i == 0 {
                    KPF_COMPOUND_HEAD
                } else {
                    KPF_COMPOUND_TAIL
                };
                (head + i, part | KPF_THP)
            })
            .collect();
        (entries, kpf)
    }

    /// The kernel writes the value and a newline (mm/khugepaged.c
    /// `scan_sleep_millisecs_show`: `sysfs_emit(buf, "%u\n", ...)`); 10000 is its default
    /// (`khugepaged_scan_sleep_millisecs`).
    #[test]
    fn khugepageds_pause_is_read_from_sysfs_and_absent_when_unreadable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scan_sleep_millisecs");
        let k = SysThp::new(dir.path(), dir.path().join("split")).with_khugepaged_sleep(&path);
        assert_eq!(k.khugepaged_pause(), None);
        std::fs::write(&path, "10000\n").unwrap();
        assert_eq!(k.khugepaged_pause(), Some(Duration::from_secs(10)));
        std::fs::write(&path, "ten\n").unwrap();
        assert_eq!(k.khugepaged_pause(), None);
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert_eq!(k.khugepaged_pause(), None);
    }

    /// A file of two entries and half of a third: entries past the end, the half one
    /// included, read as 0, from any index.
    #[test]
    fn entries_past_the_end_read_as_zero() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entries");
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0x8000_0000_0000_1234u64.to_ne_bytes());
        bytes.extend_from_slice(&0x42u64.to_ne_bytes());
        bytes.extend_from_slice(&[0xff; 4]);
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let mut out = [7u64; 4];
        read_entries(&file, 0, &mut out).unwrap();
        assert_eq!(out, [0x8000_0000_0000_1234, 0x42, 0, 0]);
        let mut out = [7u64; 2];
        read_entries(&file, 1, &mut out).unwrap();
        assert_eq!(out, [0x42, 0]);
    }

    #[test]
    fn a_pmd_thp_reads_as_one_512_page_folio() {
        let dir = tempfile::tempdir().unwrap();
        let (entries, kpf) = pmd_thp(0x40000);
        fixture(dir.path(), &entries, &kpf);
        let mut k = SysThp::new(dir.path(), dir.path().join("split"));
        let r = k.region(77, START).unwrap();
        let f = r.folio_of(START + 300 * PAGE_SIZE).unwrap();
        assert_eq!((f.folio_start, f.folio_pages, f.order()), (0, 512, 9));
    }

    #[test]
    fn split_folios_base_pages_and_holes_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let mut entries = Vec::new();
        let mut kpf = Vec::new();
        // Subpages 0..32: two order-4 folios (PFN 0x1000.., 0x2000..); 32: a base page; 33..:
        // absent.
        for i in 0..32u64 {
            let pfn = if i < 16 { 0x1000 + i } else { 0x2000 + i - 16 };
            let part = if i % 16 == 0 {
                KPF_COMPOUND_HEAD
            } else {
                KPF_COMPOUND_TAIL
            };
            entries.push((START + i * PAGE_SIZE, PM_PRESENT | pfn));
            kpf.push((pfn, part | KPF_THP));
        }
        entries.push((START + 32 * PAGE_SIZE, PM_PRESENT | 0x3000));
        kpf.push((0x3000, 1 << 5)); // LRU only
        fixture(dir.path(), &entries, &kpf);
        let mut k = SysThp::new(dir.path(), dir.path().join("split"));
        let r = k.region(77, START).unwrap();
        let at = |i: u64| r.folio_of(START + i * PAGE_SIZE);
        assert_eq!(at(3).map(|f| (f.folio_start, f.order())), Some((0, 4)));
        assert_eq!(at(20).map(|f| (f.folio_start, f.order())), Some((16, 4)));
        assert_eq!(at(32).map(|f| f.order()), Some(0));
        assert_eq!(at(40), None);
    }

    /// The re-check's per-page read: subpage 5 of a THP (PFNs 0x40000.., head 0x40000), a base
    /// page at subpage 600 (the next region), an absent page; then a hidden PFN.
    #[test]
    fn in_large_folio_reads_one_kpageflags_entry_per_page() {
        let dir = tempfile::tempdir().unwrap();
        let (mut entries, mut kpf) = pmd_thp(0x40000);
        entries.push((START + 600 * PAGE_SIZE, PM_PRESENT | 0x9000));
        kpf.push((0x9000, 1 << 5)); // LRU only
        fixture(dir.path(), &entries, &kpf);
        let mut k = SysThp::new(dir.path(), dir.path().join("split"));
        let pages = [
            START,
            START + 5 * PAGE_SIZE,
            START + 600 * PAGE_SIZE,
            START + 700 * PAGE_SIZE,
        ];
        assert_eq!(
            k.in_large_folio(77, &pages).unwrap(),
            vec![true, true, false, false]
        );
        assert!(k.is_pmd_thp(77, START).unwrap());
        fixture(dir.path(), &[(START + 3 * PAGE_SIZE, PM_PRESENT)], &[]);
        let err = k.in_large_folio(77, &[START + 3 * PAGE_SIZE]).unwrap_err();
        assert!(err.is_unavailable(), "{err}");
    }

    /// A region split to 1 MiB folios: subpage 256 is the second folio's head, not a tail.
    #[test]
    fn a_region_split_to_1m_is_not_a_pmd_thp() {
        let dir = tempfile::tempdir().unwrap();
        let (entries, mut kpf) = pmd_thp(0x40000);
        kpf[256].1 = KPF_COMPOUND_HEAD | KPF_THP;
        fixture(dir.path(), &entries, &kpf);
        let mut k = SysThp::new(dir.path(), dir.path().join("split"));
        assert!(!k.is_pmd_thp(77, START).unwrap());
        assert_eq!(
            k.in_large_folio(77, &[START + 256 * PAGE_SIZE]).unwrap(),
            vec![true]
        );
    }

    #[test]
    fn hidden_pfns_are_an_error_naming_the_capability() {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path(), &[(START, PM_PRESENT)], &[]);
        let mut k = SysThp::new(dir.path(), dir.path().join("split"));
        let err = k.region(77, START).unwrap_err();
        assert!(err.is_unavailable());
        assert!(err.to_string().contains("CAP_SYS_ADMIN"), "{err}");
    }

    #[test]
    fn split_writes_the_pid_range_and_order_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("split_huge_pages");
        File::create(&path).unwrap();
        let mut k = SysThp::new(dir.path(), &path);
        k.split(77, START, START + REGION_BYTES, 4).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "77,0x7f0000200000,0x7f0000400000,4"
        );
        let mut k = SysThp::new(dir.path(), dir.path().join("missing"));
        let err = k.split(77, START, START + REGION_BYTES, 4).unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        assert!(err.to_string().contains("mount -t debugfs"), "{err}");
    }
}
