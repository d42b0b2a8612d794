//! `move_shared`: pages two processes map, moved with the real move_pages(2) through
//! `SysMover`, MPOL_MF_MOVE (the default) against MPOL_MF_MOVE_ALL (`move_shared = true`).
//!
//! The mapping is an anonymous MAP_SHARED one, inherited over fork(2) and touched by both
//! processes; /proc/kpagecount confirms each page is mapped twice before any move.
//!
//! What the kernel answers depends on where the pages can go. `add_page_for_migration()` (mm/
//! migrate.c, `add_folio_for_migration()` since 6.10) checks "already on the target node"
//! (status = the node) *before* "mapped by more than one process and no MOVE_ALL" (-EACCES).
//! On a machine with a second memory node the pages are sent there, and MPOL_MF_MOVE gets
//! -EACCES (`pgpromote_fail_shared`) while MPOL_MF_MOVE_ALL moves them. On a machine with one
//! memory node (as the CI host) the only target is the pages' own node, which both flags
//! report as done; what still shows the flag reaching the kernel there is
//! `kernel_move_pages()`'s first check: MPOL_MF_MOVE_ALL without CAP_SYS_NICE is EPERM for the
//! whole call, MPOL_MF_MOVE is not. Both are asserted. The cross-node promotion of a shared
//! mapping through the whole daemon belongs to the QEMU rig (tests/vm).

mod util;

use nix::errno::Errno;
use nix::unistd::{ForkResult, Pid, fork, pipe, read, write};
use pghotd::movepages::{Mover, SysMover, call_failure, page_failure};
use pghotd::stats::Counter;

const PAGE: usize = 4096;
const PAGES: usize = 8;

/// A child process sharing `PAGES` pages of an anonymous MAP_SHARED mapping with this one; it
/// has touched every page and waits until dropped.
struct SharedChild {
    pid: Pid,
    base: *mut u8,
    /// Closing it (drop) lets the child exit.
    release: std::os::fd::OwnedFd,
}

impl SharedChild {
    fn spawn() -> SharedChild {
        // SAFETY: asks for a fresh anonymous mapping at an address the kernel picks; no
        // existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGES * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(
            base,
            libc::MAP_FAILED,
            "{}",
            std::io::Error::last_os_error()
        );
        let base = base.cast::<u8>();
        for i in 0..PAGES {
            // SAFETY: inside the mapping made above, which stays mapped until `Drop`.
            unsafe { base.add(i * PAGE).write_volatile(i as u8 + 1) };
        }
        let (ready_r, ready_w) = pipe().unwrap();
        let (release_r, release_w) = pipe().unwrap();
        // SAFETY: the child only reads the mapping and calls read/write/_exit, all
        // async-signal-safe, so the other threads of the test harness cannot leave it stuck on
        // a lock they held at the fork.
        match unsafe { fork() }.unwrap() {
            ForkResult::Child => {
                let mut sum = 0u8;
                for i in 0..PAGES {
                    // A shared file-backed mapping's page tables are not copied over fork: the
                    // child maps each page by touching it. SAFETY: the inherited mapping.
                    sum = sum.wrapping_add(unsafe { base.add(i * PAGE).read_volatile() });
                }
                let _ = write(&ready_w, &[sum]);
                let mut byte = [0u8];
                let _ = read(&release_r, &mut byte);
                // SAFETY: ends the forked child without running the parent's destructors.
                unsafe { libc::_exit(0) };
            }
            ForkResult::Parent { child } => {
                drop(ready_w);
                drop(release_r);
                let mut sum = [0u8];
                assert_eq!(read(&ready_r, &mut sum).unwrap(), 1, "child died");
                assert_eq!(sum[0], (1..=PAGES as u8).sum::<u8>());
                SharedChild {
                    pid: child,
                    base,
                    release: release_w,
                }
            }
        }
    }

    fn pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    fn pages(&self) -> Vec<u64> {
        (0..PAGES)
            .map(|i| self.base as u64 + (i * PAGE) as u64)
            .collect()
    }
}

impl Drop for SharedChild {
    fn drop(&mut self) {
        let _ = write(&self.release, &[0]);
        let _ = nix::sys::wait::waitpid(self.pid, None);
        // SAFETY: the mapping made in `spawn`; no reference into it outlives this.
        assert_eq!(unsafe { libc::munmap(self.base.cast(), PAGES * PAGE) }, 0);
    }
}

/// How many processes map the page at `addr` of `pid`: its PFN from /proc/PID/pagemap, then
/// /proc/kpagecount (both need CAP_SYS_ADMIN, which the tests have as root).
fn map_count(pid: u32, addr: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut entry = [0u8; 8];
    std::fs::File::open(format!("/proc/{pid}/pagemap"))
        .unwrap()
        .read_exact_at(&mut entry, addr / PAGE as u64 * 8)
        .unwrap();
    let entry = u64::from_le_bytes(entry);
    assert!(entry >> 63 == 1, "page {addr:#x} of {pid} not present");
    let pfn = entry & ((1 << 55) - 1);
    assert_ne!(pfn, 0, "pagemap hides PFNs: not root?");
    let mut count = [0u8; 8];
    std::fs::File::open("/proc/kpagecount")
        .unwrap()
        .read_exact_at(&mut count, pfn * 8)
        .unwrap();
    u64::from_le_bytes(count)
}

/// The nodes with memory (the kernel's N_MEMORY, which move_pages(2) accepts).
fn memory_nodes() -> Vec<i32> {
    let list = std::fs::read_to_string("/sys/devices/system/node/has_memory").unwrap();
    let mut nodes = Vec::new();
    for part in list.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        nodes.extend(a.parse::<i32>().unwrap()..=b.parse::<i32>().unwrap());
    }
    nodes
}

fn query(pid: u32, pages: &[u64]) -> Vec<i32> {
    let mut status = vec![i32::MIN; pages.len()];
    SysMover::default()
        .move_pages(pid, pages, None, &mut status)
        .unwrap();
    status
}

fn move_to(mover: SysMover, pid: u32, pages: &[u64], node: i32) -> Result<Vec<i32>, Errno> {
    let mut status = vec![i32::MIN; pages.len()];
    let nodes = vec![node; pages.len()];
    let mut mover = mover;
    mover.move_pages(pid, pages, Some(&nodes), &mut status)?;
    Ok(status)
}

#[test]
fn shared_pages_move_only_with_move_all() {
    let child = SharedChild::spawn();
    let pages = child.pages();
    for &p in &pages {
        assert_eq!(map_count(child.pid(), p), 2, "page {p:#x} is not shared");
    }
    let here = query(child.pid(), &pages);
    let home = here[0];
    assert!(home >= 0 && here.iter().all(|&n| n == home), "{here:?}");
    // Another node with memory if there is one: a real move; else the pages' own node.
    let target = memory_nodes()
        .into_iter()
        .find(|&n| n != home)
        .unwrap_or(home);

    let own_only = move_to(SysMover::default(), child.pid(), &pages, target).unwrap();
    if target != home {
        assert!(own_only.iter().all(|&s| s == -libc::EACCES), "{own_only:?}");
        assert_eq!(page_failure(own_only[0]), Counter::PgpromoteFailShared);
        assert_eq!(
            query(child.pid(), &pages),
            here,
            "MPOL_MF_MOVE moved a shared page"
        );
    } else {
        // One memory node: "already there" is decided before the map count is looked at.
        assert_eq!(own_only, vec![home; PAGES]);
    }

    let all = move_to(SysMover::moving_shared(true), child.pid(), &pages, target).unwrap();
    assert_eq!(all, vec![target; PAGES]);
    assert_eq!(query(child.pid(), &pages), vec![target; PAGES]);
    // Both processes still map every page (moved, not unshared), and see what was written.
    for (i, &p) in pages.iter().enumerate() {
        assert_eq!(map_count(child.pid(), p), 2);
        // SAFETY: page i of the mapping, which lives as long as `child`.
        let byte = unsafe { child.base.add(i * PAGE).read_volatile() };
        assert_eq!(byte, i as u8 + 1);
    }
}

#[test]
fn move_all_reaches_the_kernel_which_wants_cap_sys_nice() {
    let child = SharedChild::spawn();
    let pages = child.pages();
    let home = query(child.pid(), &pages)[0];
    let pid = child.pid();
    // Capabilities are per thread: drop CAP_SYS_NICE in one thread only, as a service whose
    // bounding set lacks it would run.
    let (own_only, all) = std::thread::spawn(move || {
        caps::drop(
            None,
            caps::CapSet::Effective,
            caps::Capability::CAP_SYS_NICE,
        )
        .unwrap();
        (
            move_to(SysMover::default(), pid, &pages, home),
            move_to(SysMover::moving_shared(true), pid, &pages, home),
        )
    })
    .join()
    .unwrap();
    assert_eq!(own_only, Ok(vec![home; PAGES]));
    assert_eq!(all, Err(Errno::EPERM));
    assert_eq!(call_failure(Errno::EPERM), Counter::PgpromoteFailPermission);
}

/// The daemon says at start when `move_shared` cannot work, and not when it can.
#[test]
fn move_shared_without_cap_sys_nice_is_warned_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("empty.trace");
    std::fs::write(&trace, "# pghot-trace v1\n").unwrap();
    let warning = "lacks CAP_SYS_NICE";
    let run = |drop_nice: bool, move_shared: &str| {
        let mut cmd = util::replay(&trace);
        cmd.args(["--move-shared", move_shared]);
        if drop_nice {
            use std::os::unix::process::CommandExt;
            // SAFETY: only prctl(PR_CAPBSET_DROP) between fork and exec; root's exec then
            // leaves CAP_SYS_NICE out of the permitted and effective sets.
            unsafe {
                cmd.pre_exec(|| {
                    caps::drop(None, caps::CapSet::Bounding, caps::Capability::CAP_SYS_NICE)
                        .map_err(|e| std::io::Error::other(e.to_string()))
                });
            }
        }
        String::from_utf8_lossy(&util::run(&mut cmd, true).stderr).into_owned()
    };
    let lacking = run(true, "true");
    assert!(lacking.contains(warning), "{lacking}");
    assert!(lacking.contains("move_shared"), "{lacking}");
    let granted = run(false, "true");
    assert!(!granted.contains(warning), "{granted}");
    let off = run(true, "false");
    assert!(!off.contains(warning), "{off}");
}
