//! A bounded single-producer single-consumer ring of samples, one per vCPU: the vCPU pushes
//! (never waits), the writer thread drains. Slots are atomics written with relaxed stores and
//! published by the release store of `head`, so neither side needs a lock or `unsafe`.

use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

use crate::state::Sample;

/// Bytes of one record on the samples socket: u64 vaddr, u64 paddr, u32 vcpu, u8 is_store,
/// 24-bit task (the tgid the task channel last named for the vCPU, 0 when unknown);
/// little-endian.
#[cfg(test)]
pub const RECORD_BYTES: usize = 24;
/// Sent once per connection, before the first record.
pub const HEADER: &[u8; 8] = b"PGIBS1\0\0";

pub struct Ring {
    /// Three words per slot: vaddr, paddr, vcpu | is_store << 32 | task << 40.
    slots: Box<[AtomicU64]>,
    mask: u64,
    /// Pushes so far (written by the producer only).
    head: AtomicU64,
    /// Pops so far (written by the consumer only).
    tail: AtomicU64,
}

impl Ring {
    /// `cap` must be a power of two.
    pub fn new(cap: usize) -> Ring {
        assert!(cap.is_power_of_two());
        Ring {
            slots: (0..cap * 3).map(|_| AtomicU64::new(0)).collect(),
            mask: cap as u64 - 1,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }

    /// Producer side; false when the ring is full (the sample is dropped).
    #[inline]
    pub fn push(&self, s: &Sample) -> bool {
        let head = self.head.load(Relaxed);
        if head.wrapping_sub(self.tail.load(Acquire)) > self.mask {
            return false;
        }
        let i = ((head & self.mask) * 3) as usize;
        self.slots[i].store(s.vaddr, Relaxed);
        self.slots[i + 1].store(s.paddr, Relaxed);
        let meta = u64::from(s.vcpu) | u64::from(s.is_store) << 32 | u64::from(s.task) << 40;
        self.slots[i + 2].store(meta, Relaxed);
        self.head.store(head.wrapping_add(1), Release);
        true
    }

    /// Consumer side: hands every queued sample to `f`, oldest first; returns how many.
    pub fn drain(&self, mut f: impl FnMut(&Sample)) -> u64 {
        let tail = self.tail.load(Relaxed);
        let head = self.head.load(Acquire);
        let mut t = tail;
        while t != head {
            let i = ((t & self.mask) * 3) as usize;
            let meta = self.slots[i + 2].load(Relaxed);
            f(&Sample {
                vaddr: self.slots[i].load(Relaxed),
                paddr: self.slots[i + 1].load(Relaxed),
                vcpu: meta as u32,
                is_store: (meta >> 32) & 1 != 0,
                task: (meta >> 40) as u32,
            });
            t = t.wrapping_add(1);
        }
        self.tail.store(head, Release);
        head.wrapping_sub(tail)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.head.load(Acquire) == self.tail.load(Relaxed)
    }
}

/// The one vaddr a record may not carry: its bytes would read as a header, which a reader
/// accepts at any record boundary (after SYNC). A user-mode address, but not one Linux hands
/// out unasked; `encode` drops such a sample.
pub const HEADER_AS_VADDR: u64 = u64::from_le_bytes(*HEADER);

/// Appends the wire form of `s` to `out`; false (nothing appended) for a sample whose vaddr
/// would read as a header.
pub fn encode(s: &Sample, out: &mut Vec<u8>) -> bool {
    if s.vaddr == HEADER_AS_VADDR {
        return false;
    }
    out.extend_from_slice(&s.vaddr.to_le_bytes());
    out.extend_from_slice(&s.paddr.to_le_bytes());
    out.extend_from_slice(&s.vcpu.to_le_bytes());
    let task = s.task.to_le_bytes();
    out.extend_from_slice(&[u8::from(s.is_store), task[0], task[1], task[2]]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_full() {
        let r = Ring::new(4);
        let s = |n: u64| Sample {
            vaddr: n,
            paddr: n << 12,
            vcpu: n as u32,
            is_store: n % 2 == 1,
            // The widest task the wire carries (24 bits, pid_max's limit 4194304 fits).
            task: if n == 3 { 0xff_ffff } else { n as u32 * 1000 },
        };
        for n in 0..4 {
            assert!(r.push(&s(n)));
        }
        assert!(!r.push(&s(9)));
        let mut got = Vec::new();
        assert_eq!(r.drain(|x| got.push(*x)), 4);
        assert_eq!(got, (0..4).map(s).collect::<Vec<_>>());
        assert!(r.push(&s(5)));
        got.clear();
        r.drain(|x| got.push(*x));
        assert_eq!(got, vec![s(5)]);
    }

    #[test]
    fn wire_form() {
        let mut out = Vec::new();
        assert!(!encode(
            &Sample {
                vaddr: HEADER_AS_VADDR,
                paddr: 0,
                vcpu: 0,
                is_store: false,
                task: 0,
            },
            &mut out,
        ));
        assert!(out.is_empty());
        encode(
            &Sample {
                vaddr: 0x1122,
                paddr: 0x8000_1000,
                vcpu: 1,
                is_store: true,
                task: 0x12_3456,
            },
            &mut out,
        );
        assert_eq!(out.len(), RECORD_BYTES);
        assert_eq!(&out[0..8], &0x1122u64.to_le_bytes());
        assert_eq!(&out[8..16], &0x8000_1000u64.to_le_bytes());
        assert_eq!(&out[16..20], &1u32.to_le_bytes());
        assert_eq!(&out[20..24], &[1, 0x56, 0x34, 0x12]);
    }
}
