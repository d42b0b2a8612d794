//! Soft-dirty pagemap scan: the source's pread loop (`softdirty::scan_pagemap`, 32768 entries
//! a read) against the `procfs` crate's `PageMap::get_range_info` over the same range, both
//! keeping the present and soft-dirty pages.
//!
//! The bench maps 256 MiB (65536 pages) of anonymous memory and writes every page, so each
//! entry is present and soft-dirty, then scans the range from `/proc/self/pagemap` with each
//! reader, in chunks of 32768 entries as the source does. Each reader runs `RUNS` times; the
//! best is reported in ns per entry. Run with `cargo bench --bench pagemap`.

use std::fs::File;
use std::hint::black_box;
use std::time::{Duration, Instant};

use pghotd::sampler::softdirty::{Mapping, scan_pagemap};
use procfs::process::{MemoryPageFlags, PageInfo, Process};

const PAGE: u64 = 4096;
const PAGES: usize = 1 << 16;
const CHUNK: usize = 1 << 15;
const RUNS: usize = 7;

fn best(mut run: impl FnMut() -> usize) -> (Duration, usize) {
    let mut best = Duration::MAX;
    let mut found = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        found = black_box(run());
        best = best.min(t.elapsed());
    }
    (best, found)
}

fn main() {
    let mut region = vec![0u8; PAGES * PAGE as usize + PAGE as usize];
    for page in region.chunks_mut(PAGE as usize) {
        page[0] = 1;
    }
    black_box(&mut region);
    let start = (region.as_ptr() as u64).next_multiple_of(PAGE);
    let end = start + PAGES as u64 * PAGE;
    let mapping = [Mapping { start, end }];

    let pagemap = File::open("/proc/self/pagemap").expect("/proc/self/pagemap");
    let mut dirty = Vec::with_capacity(PAGES);
    let (hand, hand_found) = best(|| {
        dirty.clear();
        scan_pagemap(&pagemap, &mapping, &mut dirty).unwrap();
        dirty.len()
    });

    let me = Process::myself().unwrap();
    let mut crate_map = me.pagemap().unwrap();
    let want = MemoryPageFlags::PRESENT | MemoryPageFlags::SOFT_DIRTY;
    let (procfs, procfs_found) = best(|| {
        dirty.clear();
        let mut vpn = (start / PAGE) as usize;
        let last = (end / PAGE) as usize;
        while vpn < last {
            let n = (last - vpn).min(CHUNK);
            let infos = crate_map.get_range_info(vpn..vpn + n).unwrap();
            for (i, info) in infos.iter().enumerate() {
                if let PageInfo::MemoryPage(f) = info
                    && f.contains(want)
                {
                    dirty.push((vpn + i) as u64 * PAGE);
                }
            }
            vpn += n;
        }
        dirty.len()
    });

    let per = |d: Duration| d.as_nanos() as f64 / PAGES as f64;
    println!("pagemap scan of {PAGES} entries, best of {RUNS}:");
    println!(
        "  pread loop (scan_pagemap)      {:8.1} us  {:6.2} ns/entry  ({hand_found} dirty)",
        hand.as_secs_f64() * 1e6,
        per(hand)
    );
    println!(
        "  procfs PageMap::get_range_info {:8.1} us  {:6.2} ns/entry  ({procfs_found} dirty)",
        procfs.as_secs_f64() * 1e6,
        per(procfs)
    );
    println!(
        "  procfs / pread: {:.2}x",
        procfs.as_secs_f64() / hand.as_secs_f64()
    );
}
