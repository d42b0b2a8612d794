//! The samples port's byte stream (tests/vm/ibs-emu/README.md, "Samples"): an 8-byte header
//! `PGIBS1\0\0` at the start of each connection and after each SYNC, then 24-byte records
//! (u64 vaddr, u64 paddr, u32 vcpu, u8 is_store, 24-bit task: the tgid running on the vCPU
//! when the task channel is on, else 0; little-endian).

pub const HEADER: &[u8; 8] = b"PGIBS1\0\0";
pub const RECORD: usize = 24;

/// One sample as the plugin sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub vaddr: u64,
    pub paddr: u64,
    pub vcpu: u32,
    pub is_store: bool,
    /// The tgid the plugin saw switched in on the vCPU; 0 when it does not know.
    pub task: u32,
}

/// Splits the stream into records: bytes before the first header are skipped (what Linux
/// kept from before the port was opened may start mid-record), headers are allowed at any
/// record boundary later on.
#[derive(Debug, Default)]
pub struct Splitter {
    buf: Vec<u8>,
    synced: bool,
    /// Bytes dropped before the first header.
    pub skipped: u64,
}

impl Splitter {
    /// Adds `bytes` and hands every whole record to `f`.
    pub fn feed(&mut self, bytes: &[u8], mut f: impl FnMut(Record)) {
        self.buf.extend_from_slice(bytes);
        if !self.synced {
            match self.buf.windows(HEADER.len()).position(|w| w == HEADER) {
                Some(i) => {
                    self.skipped += i as u64;
                    self.buf.drain(..i + HEADER.len());
                    self.synced = true;
                }
                None => {
                    // Keep only what could still be the start of a header.
                    let keep = self.buf.len().min(HEADER.len() - 1);
                    let cut = self.buf.len() - keep;
                    self.skipped += cut as u64;
                    self.buf.drain(..cut);
                    return;
                }
            }
        }
        let mut at = 0;
        loop {
            let rest = &self.buf[at..];
            if rest.len() >= HEADER.len() && rest[..HEADER.len()] == *HEADER {
                at += HEADER.len();
            } else if rest.len() >= RECORD {
                let u64_at = |o: usize| u64::from_le_bytes(rest[o..o + 8].try_into().unwrap());
                f(Record {
                    vaddr: u64_at(0),
                    paddr: u64_at(8),
                    vcpu: u32::from_le_bytes(rest[16..20].try_into().unwrap()),
                    is_store: rest[20] != 0,
                    task: u32::from_le_bytes([rest[21], rest[22], rest[23], 0]),
                });
                at += RECORD;
            } else {
                break;
            }
        }
        self.buf.drain(..at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(vaddr: u64, paddr: u64, vcpu: u32, store: u8, task: [u8; 3]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&vaddr.to_le_bytes());
        r.extend_from_slice(&paddr.to_le_bytes());
        r.extend_from_slice(&vcpu.to_le_bytes());
        r.push(store);
        r.extend_from_slice(&task);
        r
    }

    #[test]
    fn skips_to_the_header_and_splits_records_fed_in_pieces() {
        let mut stream = vec![7u8; 13]; // the tail of an older record
        stream.extend_from_slice(HEADER);
        // Task 0x3fffff (4194303, the largest tgid under PID_MAX_LIMIT), low byte first.
        stream.extend(record(
            0x7f00_0000_1000,
            0x8000_1000,
            1,
            1,
            [0xff, 0xff, 0x3f],
        ));
        stream.extend_from_slice(HEADER); // a SYNC's header between records
        stream.extend(record(0x1000, 0x2000, 0, 0, [0, 0, 0]));
        let mut s = Splitter::default();
        let mut got = Vec::new();
        for piece in stream.chunks(5) {
            s.feed(piece, |r| got.push(r));
        }
        assert_eq!(s.skipped, 13);
        assert_eq!(
            got,
            [
                Record {
                    vaddr: 0x7f00_0000_1000,
                    paddr: 0x8000_1000,
                    vcpu: 1,
                    is_store: true,
                    task: 4_194_303,
                },
                Record {
                    vaddr: 0x1000,
                    paddr: 0x2000,
                    vcpu: 0,
                    is_store: false,
                    task: 0,
                }
            ]
        );
    }
}
