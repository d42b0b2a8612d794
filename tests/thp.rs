//! The admission's folio reader against this machine's kernel: a 4 MiB MADV_HUGEPAGE buffer of
//! this process, read through the real `/proc/self/pagemap` and `/proc/kpageflags`, must show
//! exactly as many 2 MiB folios as the kernel's own smaps `AnonHugePages` says it has.
//!
//! Needs root (PFNs in pagemap need CAP_SYS_ADMIN; CI runs as root). Splitting through debugfs
//! is exercised in the QEMU rig (`tests/vm/rig.sh pghotd-thp-split`).

use pghotd::admission::thp::{REGION_BYTES, SysThp, ThpKernel};
use pghotd::migrator::folios::{Folio, FolioMap};

const BUF: usize = 2 * REGION_BYTES as usize;

/// `AnonHugePages` (kB) of the VMA holding `addr`, from /proc/self/smaps.
fn anon_huge_kb(addr: u64) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((a, b)) = range.split_once('-')
            && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            inside = (a..b).contains(&addr);
        } else if inside && let Some(v) = line.strip_prefix("AnonHugePages:") {
            return v.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    panic!("no VMA holds {addr:#x}");
}

#[test]
fn pmd_thps_read_back_as_512_page_folios() {
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.contains("[never]") || thp.is_empty() {
        eprintln!(
            "THP is off on this machine ({}); nothing to read",
            thp.trim()
        );
        return;
    }
    // SAFETY: an anonymous private mapping of BUF bytes at an address the kernel picks; no
    // existing memory is affected. The result is checked against MAP_FAILED below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            BUF + REGION_BYTES as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED, "mmap");
    let start = (ptr as u64).next_multiple_of(REGION_BYTES);
    // SAFETY: [start, start + BUF) lies inside the mapping made above (one spare 2 MiB for the
    // alignment), which nothing else uses.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, BUF, libc::MADV_HUGEPAGE) };
    assert_eq!(rc, 0, "madvise: {}", std::io::Error::last_os_error());
    for off in (0..BUF).step_by(4096) {
        // SAFETY: inside the mapping, writable, and only this thread touches it.
        unsafe { ((start as usize + off) as *mut u8).write_volatile(1) };
    }
    let kernel_thps = anon_huge_kb(start) / 2048;
    let mut sys = SysThp::system();
    let mut ours = 0;
    for r in 0..2 {
        let region = sys
            .region(std::process::id(), start + r * REGION_BYTES)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            region.pages.iter().all(|p| p.present),
            "every page was touched"
        );
        let first = region.pages[0];
        if first.order() == 9 {
            ours += 1;
            assert!(
                region
                    .pages
                    .iter()
                    .all(|p| p.folio_start == 0 && p.folio_pages == 512)
            );
        } else {
            assert!(region.pages.iter().all(|p| p.folio_pages < 512));
        }
    }
    eprintln!("THPs: smaps says {kernel_thps}, pagemap/kpageflags say {ours}");
    assert_eq!(ours, kernel_thps);
    // The migrator's folio sizes (`FolioMap`) for one page of each region, and one more page
    // of the first: a THP's pages name its start and 512 pages, a base page none.
    let pages = [
        start + 5 * 4096,
        start + 300 * 4096,
        start + REGION_BYTES + 7 * 4096,
    ];
    let folios = sys
        .large_folios(std::process::id(), &pages)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut sized = 0;
    for (&v, folio) in pages.iter().zip(&folios) {
        let region = v & !(REGION_BYTES - 1);
        let whole = sys.region(std::process::id(), region).unwrap().pages[0].order() == 9;
        if whole {
            assert_eq!(
                *folio,
                Some(Folio {
                    start: region,
                    pages: 512
                }),
                "{v:#x}"
            );
            sized += 1;
        } else {
            assert!(folio.is_none_or(|f| f.pages < 512), "{v:#x}: {folio:?}");
        }
    }
    if ours == 2 {
        assert_eq!(sized, 3, "both regions are THPs");
    }
    // SAFETY: unmaps exactly the mapping made above; nothing refers to it any more.
    unsafe { libc::munmap(ptr, BUF + REGION_BYTES as usize) };
}
