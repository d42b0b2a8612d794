//! /proc/PID/pagemap: one u64 per virtual page, bit 63 present, bits 0-54 the PFN (shown to
//! root only). Documentation/admin-guide/mm/pagemap.rst; fs/proc/task_mmu.c `pagemap_read`.

use std::fs::File;
use std::os::unix::fs::FileExt;

const PRESENT: u64 = 1 << 63;
const PFN_MASK: u64 = (1 << 55) - 1;

/// The frame an entry names, if the page is present.
pub fn frame(entry: u64) -> Option<u64> {
    (entry & PRESENT != 0).then_some(entry & PFN_MASK)
}

/// The frame of each page of `[lo, hi)` (None: not present).
pub fn frames(pagemap: &File, lo: u64, hi: u64) -> std::io::Result<Vec<Option<u64>>> {
    let mut raw = vec![0u8; ((hi - lo) >> 12) as usize * 8];
    pagemap.read_exact_at(&mut raw, (lo >> 12) * 8)?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| frame(u64::from_le_bytes(c.try_into().unwrap())))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_bit_and_pfn_bits_as_pagemap_rst_says() {
        // Bit 63 present, bit 55 soft-dirty (not part of the PFN), PFN 0x1234.
        assert_eq!(frame(1 << 63 | 1 << 55 | 0x1234), Some(0x1234));
        // Swapped (bit 62) without bit 63: no frame.
        assert_eq!(frame(1 << 62 | 0x1234), None);
        assert_eq!(frame(0), None);
    }
}
