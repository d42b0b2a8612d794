//! Where pghotd's own memory lives: its hotness table on the top tier.
//!
//! Every sample reads and writes the table, so its pages are as hot as any workload's. They are
//! allocated where each is first touched, and the first samples come after the workloads have
//! filled DRAM: in the rig's Debian guest (the fast nodes filled before pghotd started) 34 of
//! the table's 40 resident MB sat on the slow node, where each of the table's cache misses cost
//! the slow tier's latency (BENCHMARKS.md, issue 18, "the heat-floor pass reads only occupied
//! slots"). So the daemon places the table once, at start: it asks for the top-tier nodes with
//! `MPOL_PREFERRED_MANY` (mbind(2); Linux 5.15) and populates the pages at once (madvise(2)
//! `MADV_POPULATE_WRITE`; Linux 5.14). A preferred policy falls back to the other nodes when
//! the preferred ones have no free memory, as every allocation does, so the table exists
//! whatever the top tier holds; on a kernel without `MPOL_PREFERRED_MANY` (EINVAL) the first
//! top-tier node is preferred alone (`MPOL_PREFERRED`).

use nix::errno::Errno;

use crate::topology::NodeId;

/// `MPOL_PREFERRED_MANY` of `enum mempolicy_mode` (include/uapi/linux/mempolicy.h, after
/// `MPOL_LOCAL` = 4); the libc crate does not define it.
const MPOL_PREFERRED_MANY: libc::c_int = 5;

/// The part of `[addr, addr + len)` made of whole pages: mbind(2) wants a page-aligned start.
pub fn whole_pages(addr: usize, len: usize, page: usize) -> Option<(usize, usize)> {
    let start = addr.checked_next_multiple_of(page)?;
    let end = (addr.checked_add(len)? / page) * page;
    (end > start).then_some((start, end - start))
}

/// Prefers `nodes` for the whole pages of `[addr, addr + len)` and populates them writable.
/// The range must be memory this process owns and keeps mapped (a live allocation): the pages
/// are allocated, their contents unchanged (zero pages stay zero).
pub fn prefer_and_populate(addr: usize, len: usize, nodes: &[NodeId]) -> Result<(), Errno> {
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)?.unwrap_or(4096) as usize;
    let Some((start, len)) = whole_pages(addr, len, page) else {
        return Ok(());
    };
    if let Some(first) = nodes.first() {
        match mbind_preferred(start, len, MPOL_PREFERRED_MANY, nodes) {
            Err(Errno::EINVAL) => mbind_preferred(start, len, libc::MPOL_PREFERRED, &[*first])?,
            other => other?,
        }
    }
    // SAFETY: `[start, start + len)` is whole pages inside the caller's live allocation;
    // MADV_POPULATE_WRITE faults them in writable without changing what they hold, and takes
    // no pointer beyond the range.
    let ret = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn mbind_preferred(
    start: usize,
    len: usize,
    mode: libc::c_int,
    nodes: &[NodeId],
) -> Result<(), Errno> {
    let words = nodes
        .iter()
        .map(|&n| usize::from(n) / 64 + 1)
        .max()
        .unwrap_or(1);
    let mut mask = vec![0 as libc::c_ulong; words];
    for &n in nodes {
        mask[usize::from(n) / 64] |= 1 << (usize::from(n) % 64);
    }
    // The kernel reads `maxnode - 1` bits (`get_nodes()` in mm/mempolicy.c decrements it).
    let maxnode = (words * 64 + 1) as libc::c_ulong;
    // SAFETY: `mask` is a live array of `words` unsigned longs, of which the kernel reads at
    // most `maxnode - 1` bits; `[start, start + len)` is page-aligned memory of this process.
    // mbind only changes the range's policy; flags 0 moves nothing.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            start as libc::c_ulong,
            len as libc::c_ulong,
            mode as libc::c_ulong,
            mask.as_ptr(),
            maxnode,
            0 as libc::c_ulong,
        )
    };
    if ret < 0 { Err(Errno::last()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_pages_are_placed() {
        // By hand, 4 KiB pages: 0x1010 + 0x3000 ends at 0x4010: whole pages 0x2000..0x4000.
        assert_eq!(whole_pages(0x1010, 0x3000, 0x1000), Some((0x2000, 0x2000)));
        assert_eq!(whole_pages(0x1000, 0x1000, 0x1000), Some((0x1000, 0x1000)));
        // Less than a page, or no whole one: nothing.
        assert_eq!(whole_pages(0x1010, 0x1000, 0x1000), None);
        assert_eq!(whole_pages(0x1000, 0, 0x1000), None);
        assert_eq!(whole_pages(usize::MAX - 10, 100, 0x1000), None);
    }

    /// The range's line in /proc/self/numa_maps: its policy and its pages per node.
    fn numa_maps_line(start: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/numa_maps").expect("numa_maps");
        maps.lines()
            .find(|l| l.starts_with(&format!("{start:x} ")))
            .unwrap_or_else(|| panic!("no numa_maps line at {start:x}:\n{maps}"))
            .to_string()
    }

    #[test]
    fn a_placed_range_prefers_the_nodes_and_is_resident_there() {
        // 64 pages of an anonymous mapping, untouched: nothing resident before.
        let len = 64 * 4096;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        let start = addr as usize;
        prefer_and_populate(start, len, &[0]).expect("mbind and populate on node 0");
        // The kernel's own account (fs/proc/task_mmu.c `show_numa_map`, policy from
        // `mpol_to_str`): "prefer (many):0" on 5.15 and later, and all 64 pages on node 0,
        // the only node of this machine.
        let line = numa_maps_line(start);
        assert!(
            line.contains(" prefer (many):0 ") || line.contains(" prefer:0 "),
            "{line}"
        );
        assert!(line.contains(" N0=64"), "{line}");
        // SAFETY: the mapping made above, no longer used.
        assert_eq!(unsafe { libc::munmap(addr, len) }, 0);
    }
}
