//! /proc/PID/maps as address ranges: which virtual addresses a process has mapped at all. Each
//! line starts `START-END ` in hex, END exclusive (Documentation/filesystems/proc.rst, "The
//! /proc/PID/maps"; fs/proc/task_mmu.c `show_vma_header_prefix`), in ascending order.

use std::fs::File;
use std::io::Read;

/// The most of a maps file read: a process with a few thousand mappings fits (each line is
/// under 200 bytes with its path).
const MAPS_MAX: u64 = 4 << 20;

/// The mapped ranges of one process, ascending, `[start, end)`.
#[derive(Debug, Default, PartialEq)]
pub struct Spans(Vec<(u64, u64)>);

impl Spans {
    /// Parses a maps file's text; `Err` names the first line that is not `START-END ...`.
    pub fn parse(text: &str) -> Result<Spans, String> {
        let mut spans = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let range = line.split(' ').next().unwrap_or("");
            let bad = || format!("maps line {}: {line:?} does not start START-END", i + 1);
            let (lo, hi) = range.split_once('-').ok_or_else(bad)?;
            let lo = u64::from_str_radix(lo, 16).map_err(|_| bad())?;
            let hi = u64::from_str_radix(hi, 16).map_err(|_| bad())?;
            if lo >= hi {
                return Err(bad());
            }
            spans.push((lo, hi));
        }
        // The kernel lists them in order; sorting keeps `covers` right whatever the input.
        spans.sort_unstable();
        Ok(Spans(spans))
    }

    /// Reads `/proc/PID/maps` (a regular file in procfs, read up to [`MAPS_MAX`]).
    pub fn read(pid: u32) -> Result<Spans, String> {
        let path = format!("/proc/{pid}/maps");
        let file = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        let mut text = String::new();
        file.take(MAPS_MAX)
            .read_to_string(&mut text)
            .map_err(|e| format!("{path}: {e}"))?;
        Spans::parse(&text).map_err(|e| format!("{path}: {e}"))
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
        let s = Spans::parse(text).unwrap();
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
    fn a_line_that_is_not_a_range_is_named() {
        let e = Spans::parse("00400000-00452000 r-xp 0 0 0\nnot a range\n").unwrap_err();
        assert!(
            e.contains("maps line 2") && e.contains("not a range"),
            "{e}"
        );
        assert!(Spans::parse("2000-1000 r-xp").is_err());
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
