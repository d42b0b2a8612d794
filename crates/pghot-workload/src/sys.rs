//! The workload's syscall boundary: the only `unsafe` of [`crate::workload`].
//!
//! Each wrapper returns `io::Result` with errno read right after the call. Numbers and flags
//! are from `man 2 mmap`, `man 2 madvise`, `man 2 mbind` and `include/uapi/linux/mempolicy.h`.

use std::io;
use std::sync::atomic::AtomicU64;

use pghotd::topology::NodeId;

/// An anonymous private mapping, unmapped on drop.
///
/// The address is kept as an integer so the mapping is `Send + Sync`: the only view of its
/// memory is [`Mapping::words`], a slice of atomics, which threads may share.
#[derive(Debug)]
pub struct Mapping {
    addr: usize,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes (a multiple of the page size) at an address aligned to `align` (a power
    /// of two multiple of the page size, e.g. 2 MiB so THPs can form when asked for).
    pub fn anonymous(len: usize, align: usize) -> io::Result<Mapping> {
        let total = len
            .checked_add(align)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: a fresh anonymous mapping at a kernel-chosen address (hint NULL) overlaps no
        // existing Rust object; the arguments are plain integers. See `man 2 mmap`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = ptr as usize;
        let addr = start.next_multiple_of(align);
        let head = addr - start;
        let tail = total - head - len;
        // SAFETY: [start, addr) and [addr + len, start + total) lie inside the mapping just
        // created, which nothing references yet; unmapping them leaves [addr, addr + len)
        // mapped. Errors cannot occur for page-aligned ranges of our own mapping, and a failure
        // would only leave a few unused pages mapped. See `man 2 munmap`.
        unsafe {
            if head > 0 {
                libc::munmap(start as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((addr + len) as *mut libc::c_void, tail);
            }
        }
        Ok(Mapping { addr, len })
    }

    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping as 64-bit words. All access goes through atomics (relaxed loads and stores
    /// compile to plain moves), so worker threads share it without data races.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: [addr, addr + len) is mapped readable and writable for as long as `self`
        // lives (unmapped only in Drop), and the returned slice borrows `self`. addr is page
        // aligned, so aligned for AtomicU64, and len / 8 words fit inside. AtomicU64 has the
        // layout of u64 and every bit pattern (zero-filled fresh pages included) is valid. No
        // non-atomic reference to this memory is ever created.
        unsafe { std::slice::from_raw_parts(self.addr as *const AtomicU64, self.len / 8) }
    }

    /// madvise(2) over the whole mapping (`MADV_HUGEPAGE`, `MADV_NOHUGEPAGE`).
    pub fn madvise(&self, advice: libc::c_int) -> io::Result<()> {
        // SAFETY: the range is exactly this live mapping; these advice values change only the
        // kernel's THP policy for it, never its contents. See `man 2 madvise`.
        let ret = unsafe { libc::madvise(self.addr as *mut libc::c_void, self.len, advice) };
        if ret == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// mbind(2) over the whole mapping with no flags: `mode` (MPOL_BIND, MPOL_DEFAULT) applies
    /// to pages faulted in from now on. `nodes` empty passes a NULL mask (MPOL_DEFAULT).
    pub fn mbind(&self, mode: libc::c_int, nodes: &[NodeId]) -> io::Result<()> {
        const BITS: usize = libc::c_ulong::BITS as usize;
        let max = nodes.iter().map(|&n| usize::from(n)).max();
        let mut mask = vec![0 as libc::c_ulong; max.map_or(0, |m| m / BITS + 1)];
        for &n in nodes {
            mask[usize::from(n) / BITS] |= 1 << (usize::from(n) % BITS);
        }
        let (mask_ptr, maxnode) = if mask.is_empty() {
            (std::ptr::null(), 0)
        } else {
            // The kernel reads maxnode - 1 bits (get_nodes() decrements it), as libnuma
            // knows: pass one more than the mask holds.
            (mask.as_ptr(), mask.len() * BITS + 1)
        };
        // SAFETY: the range is exactly this live mapping; `mask` outlives the call and holds
        // (maxnode - 1) / BITS words, all the kernel reads; the kernel keeps no pointer to it.
        // A policy change never changes memory contents. See `man 2 mbind`.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.addr as libc::c_ulong,
                self.len as libc::c_ulong,
                mode as libc::c_ulong,
                mask_ptr,
                maxnode as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if ret == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was created in `anonymous` and is unmapped only here; `words()`
        // slices borrow `self`, so none outlives this call. See `man 2 munmap`.
        unsafe {
            libc::munmap(self.addr as *mut libc::c_void, self.len);
        }
    }
}

/// The CPU this thread runs on now (0 if the kernel cannot say, which it always can on Linux
/// since 2.6.19: the value only steers pghotd's choice of nearest node).
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and only reads the vDSO or calls getcpu(2).
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(0)
}

/// The calling thread's kernel thread id.
pub fn thread_id() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail. See `man 2 gettid`.
    let tid = unsafe { libc::gettid() };
    tid as u32
}
