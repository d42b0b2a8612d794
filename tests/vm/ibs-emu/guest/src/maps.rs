//! /proc/PID/maps as address ranges: which virtual addresses a process has mapped at all. Each
//! line starts `START-END ` in hex, END exclusive (Documentation/filesystems/proc.rst, "The
//! /proc/PID/maps"; fs/proc/task_mmu.c `show_vma_header_prefix`), in ascending order. Read and
//! parsed with pghotd's own helpers (src/safefs.rs, src/scope/proc.rs `memory_maps`).

use std::path::Path;

use pghotd::safefs::{limit, read_text};
use pghotd::scope::proc::memory_maps;

/// The mapped ranges of one process, ascending, `[start, end)`.
#[derive(Debug, Default, PartialEq)]
pub struct Spans(Vec<(u64, u64)>);

impl Spans {
    /// The ranges of a maps file's text, parsed by pghotd's own reader (a line it cannot parse
    /// is skipped, as pghotd's scope skips it).
    pub fn parse(text: &str) -> Spans {
        let mut spans: Vec<(u64, u64)> = memory_maps(text).map(|m| m.address).collect();
        // The kernel lists them in order; sorting keeps `covers` right whatever the input.
        spans.sort_unstable();
        Spans(spans)
    }

    /// Reads `/proc/PID/maps` with pghotd's bound for it.
    pub fn read(pid: u32) -> Result<Spans, String> {
        let path = format!("/proc/{pid}/maps");
        let text = read_text(Path::new(&path), limit::MAPS).map_err(|e| format!("{path}: {e}"))?;
        Ok(Spans::parse(&text))
    }

    /// Whether `vaddr` lies in one of the ranges.
    pub fn covers(&self, vaddr: u64) -> bool {
        // The first range starting above vaddr; the one before it is the only candidate.
        let i = self.0.partition_point(|&(lo, _)| lo <= vaddr);
        i > 0 && vaddr < self.0[i - 1].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as proc.rst shows them (a path, an anonymous mapping, `[stack]`).
    #[test]
    fn ranges_from_the_documented_format_end_exclusive() {
        let text = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
7f2c44000000-7f2c44021000 rw-p 00000000 00:00 0
7ffd4d36a000-7ffd4d38b000 rw-p 00000000 00:00 0                          [stack]
";
        let s = Spans::parse(text);
        assert!(s.covers(0x0040_0000));
        assert!(s.covers(0x0045_1fff));
        assert!(!s.covers(0x0045_2000));
        assert!(s.covers(0x7f2c_4402_0fff));
        assert!(!s.covers(0x7f2c_4402_1000));
        assert!(s.covers(0x7ffd_4d37_0000));
        assert!(!s.covers(0x3f_ffff));
        assert!(!s.covers(0x7fff_0000_0000));
        assert!(!Spans::default().covers(0x1000));
    }

    #[test]
    fn a_line_that_is_not_a_range_is_skipped() {
        let s = Spans::parse("00400000-00452000 r-xp 00000000 08:02 173521\nnot a range\n");
        assert_eq!(s, Spans(vec![(0x40_0000, 0x45_2000)]));
    }

    /// The kernel's own maps of this process: a stack variable and this function's code are
    /// mapped, page 0 is not (below mmap_min_addr, Documentation/admin-guide/sysctl/vm.rst).
    #[test]
    fn this_process_maps_its_stack_and_code_and_not_page_zero() {
        let s = Spans::read(std::process::id()).unwrap();
        let local = 7u64;
        assert!(s.covers(&local as *const u64 as u64));
        let code = this_process_maps_its_stack_and_code_and_not_page_zero as *const ();
        assert!(s.covers(code as u64));
        assert!(!s.covers(0));
    }
}
