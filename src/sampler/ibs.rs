//! AMD IBS op sampling: event configuration, RAW payload decoding and sample classification.
//!
//! In: the `ibs_op` [`Pmu`](crate::sampler::pmu::Pmu) from sysfs plus [`IbsConfig`] (at
//! startup), and per sample the fields the record parser extracted ([`IbsInput`], optionally
//! with the PERF_SAMPLE_RAW payload). Out: an [`IbsEventConfig`] for perf_event_open, and per
//! sample an [`HwSample`](crate::sampler::hwsample::HwSample) or the
//! [`DropReason`](crate::sampler::hwsample::DropReason) to count. Everything here is pure: no
//! syscalls, no hardware, so it is tested with fixtures and hand-built payloads.
//!
//! Sources, named in the comments of the submodules: the register layouts and DataSrc values
//! of `arch/x86/include/asm/amd-ibs.h` (`union ibs_op_ctl`, `ibs_op_data`, `ibs_op_data2`,
//! `ibs_op_data3`, `IBS_DATA_SRC_*`) and the `IBS_CAPS_*` bits of
//! `arch/x86/include/asm/perf_event.h`, which follow AMD's Processor Programming Reference for
//! Family 19h and the AMD64 Architecture Programmer's Manual Vol. 2, "Instruction-Based
//! Sampling"; the RAW payload that `perf_ibs_handle_irq()` in `arch/x86/events/amd/ibs.c`
//! writes; and that file's DATA_SRC decode with its errata (`perf_ibs_parse_ld_st_data()`,
//! `perf_ibs_get_mem_lvl()`, `perf_ibs_get_op_data2()`, `perf_ibs_cache_hit_st_valid()`).
//! Register layouts are hardware ABI and live in named accessors; config bits the kernel
//! publishes in `format/` are always taken from sysfs.

mod caps;
mod classify;
mod config;
mod decode;
mod effective;
mod regs;
#[cfg(test)]
mod testraw;
#[cfg(test)]
mod vectors;

pub use caps::{CpuModel, IbsCaps};
pub use classify::{IbsInput, classify};
pub use config::{IbsConfig, IbsEventConfig, IbsEventError, KernelFilter};
pub use decode::decode_data_src;
pub use effective::{
    ForcedBy, IbsEffective, KernelVersion, L3MissOnly, host_kernel, parse_release,
};
pub use regs::{DcPageSize, IbsDataSrc, IbsOpRaw, OpCtl, OpData, OpData2, OpData3, RawError};

/// Defines `const fn name(self) -> bool` accessors for single bits of a register newtype.
macro_rules! flags {
    ($ty:ident { $($(#[$doc:meta])* $name:ident = $bit:literal;)* }) => {
        impl $ty {
            $(
                $(#[$doc])*
                #[inline]
                pub const fn $name(self) -> bool {
                    (self.0 as u64) >> $bit & 1 == 1
                }
            )*
        }
    };
}

/// Defines `const fn name(self) -> T` accessors for multi-bit fields (`lo`, `width`).
macro_rules! fields {
    ($ty:ident { $($(#[$doc:meta])* $name:ident: $out:ty = $lo:literal, $width:literal;)* }) => {
        impl $ty {
            $(
                $(#[$doc])*
                #[inline]
                pub const fn $name(self) -> $out {
                    // Masked to `width` bits first, so the cast cannot truncate.
                    ((self.0 as u64) >> $lo & ((1u64 << $width) - 1)) as $out
                }
            )*
        }
    };
}

use fields;
use flags;
