//! The perf ring buffer: one mmap per CPU, read in batches.
//!
//! Layout (perf_event_open(2), `struct perf_event_mmap_page`): page 0 is the control page, with
//! the kernel-written `data_head` at byte 1024 and the reader-owned `data_tail` at 1032; the data
//! area (`data_offset`, `data_size`, a power of two) follows. `data_head` is a free-running byte
//! count; records are 8-byte multiples, so a record header never straddles the end of the area,
//! but a body may, and is then copied into a scratch buffer.
//!
//! We read the ring ourselves rather than through perf-event2's `Sampler` because a drain must
//! load `data_head` once and publish `data_tail` once per batch (not per record), parse records
//! in place without a per-record copy, and run against an in-memory ring in tests and benches
//! (perf-event2's reader is tied to a live fd, and its blocking read panics on poll errors).

use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const DATA_OFFSET: usize = 1040;
const DATA_SIZE: usize = 1048;
/// Size of a record header: `{u32 type; u16 misc; u16 size}`.
pub const HEADER_LEN: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error(
        "mapping {bytes} bytes of perf ring buffer: {source}{}",
        if source.raw_os_error() == Some(libc::EPERM) {
            " (over kernel.perf_event_mlock_kb and RLIMIT_MEMLOCK: run as root, grant \
             CAP_IPC_LOCK, or lower perf.ring_pages)"
        } else {
            ""
        }
    )]
    Map {
        bytes: usize,
        source: std::io::Error,
    },
    #[error("ring data pages must be a power of two, got {0}")]
    NotPowerOfTwo(usize),
    #[error(
        "corrupt perf ring: record of {size} bytes at offset {offset} with {available} bytes \
         available; {skipped} bytes skipped"
    )]
    Corrupt {
        size: usize,
        offset: u64,
        available: u64,
        skipped: u64,
    },
}

/// Who owns the memory under a ring.
enum Backing {
    /// A `MAP_SHARED` mapping of a perf fd, unmapped on drop.
    Mmap,
    /// An in-memory ring (tests, benches); `u64`s keep it 8-byte aligned.
    Heap(#[allow(dead_code)] Box<[u64]>),
}

/// One CPU's ring buffer and the scratch space for records that wrap.
pub struct Ring {
    base: NonNull<u8>,
    len: usize,
    data_offset: usize,
    data_size: usize,
    backing: Backing,
    scratch: Vec<u8>,
}

// SAFETY: the ring's memory is owned by this value (a private mapping or a boxed slice); the only
// concurrent writer is the kernel (or `RingWriter` on the same thread in tests), which follows the
// data_head/data_tail protocol.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps the ring of a perf event fd: one control page plus `data_pages` (a power of two).
    pub fn map(fd: &impl AsRawFd, data_pages: usize) -> Result<Ring, RingError> {
        if !data_pages.is_power_of_two() {
            return Err(RingError::NotPowerOfTwo(data_pages));
        }
        let page = page_size();
        let len = (1 + data_pages) * page;
        // SAFETY: a fresh shared mapping of a perf fd at offset 0, as perf_event_open(2) specifies;
        // the kernel validates fd and length; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RingError::Map {
                bytes: len,
                source: std::io::Error::last_os_error(),
            });
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| RingError::Map {
            bytes: len,
            source: std::io::Error::other("mmap returned NULL"),
        })?;
        let mut ring = Ring {
            base,
            len,
            data_offset: page,
            data_size: data_pages * page,
            backing: Backing::Mmap,
            scratch: Vec::new(),
        };
        // Kernels since 4.1 publish the data area's place; trust it when it is sane.
        let (offset, size) = (ring.control(DATA_OFFSET), ring.control(DATA_SIZE));
        if offset != 0 && size != 0 && offset + size <= len as u64 && size.is_power_of_two() {
            ring.data_offset = offset as usize;
            ring.data_size = size as usize;
        }
        Ok(ring)
    }

    /// An in-memory ring with `data_size` bytes of data (a power of two, at least a page's
    /// worth of headers), written with [`RingWriter`]. For tests and benchmarks.
    pub fn in_memory(data_size: usize) -> Result<Ring, RingError> {
        if !data_size.is_power_of_two() || data_size < HEADER_LEN {
            return Err(RingError::NotPowerOfTwo(data_size));
        }
        let control = 4096;
        let mut words = vec![0u64; (control + data_size) / 8].into_boxed_slice();
        let base = NonNull::new(words.as_mut_ptr().cast::<u8>())
            .ok_or(RingError::NotPowerOfTwo(data_size))?;
        Ok(Ring {
            base,
            len: control + data_size,
            data_offset: control,
            data_size,
            backing: Backing::Heap(words),
            scratch: Vec::new(),
        })
    }

    pub fn data_size(&self) -> usize {
        self.data_size
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= self.len && offset.is_multiple_of(8));
        // SAFETY: `offset` is one of the control-page fields (8-byte aligned, inside the first
        // page of a mapping at least two pages long) and the memory lives as long as `self`.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn control(&self, offset: usize) -> u64 {
        self.word(offset).load(Ordering::Relaxed)
    }

    /// Bytes written by the kernel and not read yet.
    pub fn pending(&self) -> u64 {
        let head = self.word(DATA_HEAD).load(Ordering::Acquire);
        head.wrapping_sub(self.word(DATA_TAIL).load(Ordering::Relaxed))
    }

    /// `len` bytes of the data area from `at`; callers only ask for bytes between data_tail and
    /// data_head, which the kernel does not write until the tail moves past them.
    fn data(&self, at: usize, len: usize) -> &[u8] {
        assert!(at + len <= self.data_size);
        // SAFETY: the range lies inside the data area of the mapping (checked above), which
        // lives as long as `self`; see above for why nothing writes it meanwhile.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(self.data_offset + at), len) }
    }

    /// Hands every complete record to `on_record` (header included), then releases their space
    /// to the kernel. Returns how many records were read. A record whose header is impossible
    /// (size under 8, not a multiple of 8, or past the head) means the ring is corrupt: the
    /// rest of the batch is skipped and reported.
    pub fn drain(&mut self, mut on_record: impl FnMut(&[u8])) -> Result<usize, RingError> {
        let head = self.word(DATA_HEAD).load(Ordering::Acquire);
        let mut tail = self.word(DATA_TAIL).load(Ordering::Relaxed);
        let mask = self.data_size - 1;
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut read = 0;
        let mut result = Ok(());
        while head.wrapping_sub(tail) >= HEADER_LEN as u64 {
            let available = head.wrapping_sub(tail);
            let at = tail as usize & mask;
            let header = self.data(at, HEADER_LEN);
            let size = usize::from(u16::from_ne_bytes([header[6], header[7]]));
            if size < HEADER_LEN || !size.is_multiple_of(8) || size as u64 > available {
                result = Err(RingError::Corrupt {
                    size,
                    offset: tail,
                    available,
                    skipped: available,
                });
                tail = head;
                break;
            }
            if at + size <= self.data_size {
                on_record(self.data(at, size));
            } else {
                let first = self.data_size - at;
                scratch.clear();
                scratch.extend_from_slice(self.data(at, first));
                scratch.extend_from_slice(self.data(0, size - first));
                on_record(&scratch);
            }
            tail = tail.wrapping_add(size as u64);
            read += 1;
        }
        self.scratch = scratch;
        // Release: our reads of the records happen before the kernel may overwrite them.
        self.word(DATA_TAIL).store(tail, Ordering::Release);
        result.map(|()| read)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if let Backing::Mmap = self.backing {
            // SAFETY: `base`/`len` are exactly the mapping made in `Ring::map`, unmapped once.
            unsafe {
                libc::munmap(self.base.as_ptr().cast(), self.len);
            }
        }
    }
}

/// Plays the kernel's part on an in-memory ring: appends records at `data_head`.
pub struct RingWriter<'a> {
    ring: &'a Ring,
}

impl<'a> RingWriter<'a> {
    pub fn new(ring: &'a Ring) -> Self {
        Self { ring }
    }

    /// Appends one record (its length a multiple of 8); false if the ring has no room, as the
    /// kernel would then drop it and later report a PERF_RECORD_LOST.
    pub fn push(&self, record: &[u8]) -> bool {
        assert!(record.len().is_multiple_of(8) && record.len() >= HEADER_LEN);
        self.push_unchecked(record)
    }

    /// Appends any 8-byte-aligned bytes, whatever header they hold (tests of corrupt rings).
    pub fn push_unchecked(&self, record: &[u8]) -> bool {
        let ring = self.ring;
        assert!(
            matches!(ring.backing, Backing::Heap(_)),
            "only in-memory rings"
        );
        assert!(record.len().is_multiple_of(8));
        let head = ring.word(DATA_HEAD).load(Ordering::Relaxed);
        let tail = ring.word(DATA_TAIL).load(Ordering::Acquire);
        if head.wrapping_sub(tail) + record.len() as u64 > ring.data_size as u64 {
            return false;
        }
        let mask = ring.data_size - 1;
        for (i, &byte) in record.iter().enumerate() {
            let at = (head as usize + i) & mask;
            // SAFETY: `at` is inside the data area of a heap ring; the reader does not look at
            // bytes past data_head, which is published below with release ordering.
            unsafe {
                ring.base
                    .as_ptr()
                    .add(ring.data_offset + at)
                    .write_volatile(byte);
            }
        }
        ring.word(DATA_HEAD)
            .store(head.wrapping_add(record.len() as u64), Ordering::Release);
        true
    }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body_words: &[u64]) -> Vec<u8> {
        let size = (HEADER_LEN + 8 * body_words.len()) as u16;
        let mut out = Vec::new();
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(&size.to_ne_bytes());
        for w in body_words {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out
    }

    fn drain_all(ring: &mut Ring) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        ring.drain(|r| got.push(r.to_vec())).unwrap();
        got
    }

    #[test]
    fn records_come_out_in_order_including_one_that_wraps() {
        let mut ring = Ring::in_memory(64).unwrap();
        let w = RingWriter::new(&ring);
        let a = record(9, &[1, 2, 3]); // 32 bytes
        let b = record(9, &[4, 5]); // 24 bytes
        assert!(w.push(&a) && w.push(&b));
        assert_eq!(drain_all(&mut ring), vec![a.clone(), b.clone()]);
        // Head is now at 56: the next 32-byte record wraps around the 64-byte area.
        let c = record(2, &[7, 8, 9]);
        assert!(RingWriter::new(&ring).push(&c));
        assert_eq!(drain_all(&mut ring), vec![c]);
        assert_eq!(ring.pending(), 0);
    }

    #[test]
    fn a_full_ring_refuses_records_until_drained() {
        let mut ring = Ring::in_memory(64).unwrap();
        let r = record(9, &[0; 3]);
        assert!(RingWriter::new(&ring).push(&r));
        assert!(RingWriter::new(&ring).push(&r));
        assert!(!RingWriter::new(&ring).push(&r), "64 bytes hold two");
        assert_eq!(drain_all(&mut ring).len(), 2);
        assert!(RingWriter::new(&ring).push(&r));
    }

    #[test]
    fn an_impossible_header_skips_the_batch_and_says_so() {
        let mut ring = Ring::in_memory(64).unwrap();
        let mut bad = record(9, &[0]);
        bad[6] = 12; // not a multiple of 8
        assert!(RingWriter::new(&ring).push(&bad));
        let err = ring.drain(|_| panic!("no record")).unwrap_err();
        assert!(err.to_string().contains("corrupt perf ring"), "{err}");
        assert_eq!(ring.pending(), 0, "the reader resynchronises at the head");
        let good = record(9, &[1]);
        assert!(RingWriter::new(&ring).push(&good));
        assert_eq!(drain_all(&mut ring), vec![good]);
    }

    #[test]
    fn sizes_must_be_powers_of_two() {
        assert!(Ring::in_memory(96).is_err());
    }
}
