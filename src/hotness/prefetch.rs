//! Cache prefetch of a hotness-table slot before its sample is recorded.
//!
//! Recording is bound by one cache miss per sample: the key compare right after the home slot
//! is loaded (BENCHMARKS.md, "Against the 100 ns target"). A source that hands over samples in
//! batches lets the sink ask for the home slots of the next few samples while it records the
//! current one, so those misses overlap instead of queueing.

/// Asks the CPU to bring the cache line at `addr` closer. A hint only: it never faults, reads
/// nothing into the program, and is dropped by the CPU if the address is not mapped.
#[inline(always)]
pub(crate) fn prefetch_line(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 has no architectural effect (no load, no fault, no write), so any
    // address is sound; it is only `unsafe` because it is a `#[target_feature]` intrinsic (SSE,
    // part of the x86-64 baseline). There is no safe prefetch in std.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
