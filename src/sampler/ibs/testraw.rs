//! Test-only: builds ibs_op RAW payloads bit by bit from the documented layouts (the payload of
//! `perf_ibs_handle_irq()` and the unions of `arch/x86/include/asm/amd-ibs.h`), independently of
//! the decoder's accessors.

use super::caps::CpuModel;
use super::regs::IbsOpRaw;

/// Zen3 EPYC (Milan): erratum #1293, CacheHitSt untrusted.
pub const MILAN: CpuModel = CpuModel {
    family: 0x19,
    model: 0x01,
};
/// Zen4 EPYC (Genoa): no errata.
pub const GENOA: CpuModel = CpuModel {
    family: 0x19,
    model: 0x11,
};
pub const ZEN5: CpuModel = CpuModel {
    family: 0x1a,
    model: 0x02,
};

/// The registers of a RAW payload, in payload order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reg {
    Ctl,
    Rip,
    Data,
    Data2,
    Data3,
    LinAd,
    PhysAd,
    BrTarget,
    Data4,
}

/// `(name, register, lowest bit, width)`, copied from the register layouts of
/// `arch/x86/include/asm/amd-ibs.h` (and AMD's Processor Programming Reference for the fields
/// that header does not name).
pub const LAYOUT: &[(&str, Reg, u32, u32)] = &[
    ("OpMaxCnt", Reg::Ctl, 0, 16),
    ("L3MissOnly", Reg::Ctl, 16, 1),
    ("OpEn", Reg::Ctl, 17, 1),
    ("OpVal", Reg::Ctl, 18, 1),
    ("OpCntCtl", Reg::Ctl, 19, 1),
    ("OpMaxCntHi", Reg::Ctl, 20, 7),
    ("OpCurCnt", Reg::Ctl, 32, 27),
    ("LdLatThrsh", Reg::Ctl, 59, 4),
    ("LdLatEn", Reg::Ctl, 63, 1),
    ("CompToRetCtr", Reg::Data, 0, 16),
    ("TagToRetCtr", Reg::Data, 16, 16),
    ("OpReturn", Reg::Data, 34, 1),
    ("OpBrnTaken", Reg::Data, 35, 1),
    ("OpBrnMisp", Reg::Data, 36, 1),
    ("OpBrnRet", Reg::Data, 37, 1),
    ("OpRipInvalid", Reg::Data, 38, 1),
    ("OpBrnFuse", Reg::Data, 39, 1),
    ("OpMicrocode", Reg::Data, 40, 1),
    ("DataSrcLo", Reg::Data2, 0, 3),
    ("RmtNode", Reg::Data2, 4, 1),
    ("CacheHitSt", Reg::Data2, 5, 1),
    ("DataSrcHi", Reg::Data2, 6, 2),
    ("StrmSt", Reg::Data2, 8, 1),
    ("RmtSocket", Reg::Data2, 9, 1),
    ("LdOp", Reg::Data3, 0, 1),
    ("StOp", Reg::Data3, 1, 1),
    ("DcL1TlbMiss", Reg::Data3, 2, 1),
    ("DcL2TlbMiss", Reg::Data3, 3, 1),
    ("DcL1TlbHit2M", Reg::Data3, 4, 1),
    ("DcL1TlbHit1G", Reg::Data3, 5, 1),
    ("DcL2TlbHit2M", Reg::Data3, 6, 1),
    ("DcMiss", Reg::Data3, 7, 1),
    ("DcMisAcc", Reg::Data3, 8, 1),
    ("DcWcMemAcc", Reg::Data3, 13, 1),
    ("DcUcMemAcc", Reg::Data3, 14, 1),
    ("DcLockedOp", Reg::Data3, 15, 1),
    ("DcMissNoMabAlloc", Reg::Data3, 16, 1),
    ("DcLinAddrValid", Reg::Data3, 17, 1),
    ("DcPhyAddrValid", Reg::Data3, 18, 1),
    ("DcL2TlbHit1G", Reg::Data3, 19, 1),
    ("L2Miss", Reg::Data3, 20, 1),
    ("SwPf", Reg::Data3, 21, 1),
    ("OpMemWidth", Reg::Data3, 22, 4),
    ("OpDcMissOpenMemReqs", Reg::Data3, 26, 6),
    ("DcMissLat", Reg::Data3, 32, 16),
    ("TlbRefillLat", Reg::Data3, 48, 16),
    // Zen5 (caps bit 19) reuses OpData3 bits 4-5.
    ("PageSize", Reg::Data3, 4, 2),
];

/// caps bits (`IBS_CAPS_*`) the tests need by name.
pub const AVAIL: u32 = 1 << 0;
pub const OPSAM: u32 = 1 << 2;
pub const OPCNT: u32 = 1 << 4;
pub const BRNTRGT: u32 = 1 << 5;
pub const RIPINVALIDCHK: u32 = 1 << 7;
pub const OPDATA4: u32 = 1 << 10;
pub const ZEN4: u32 = 1 << 11;
pub const OPDTLBPGSIZE: u32 = 1 << 19;
/// Zen3 without the optional registers.
pub const CAPS_ZEN3: u32 = AVAIL | OPSAM | OPCNT | RIPINVALIDCHK;
pub const CAPS_ZEN4: u32 = CAPS_ZEN3 | ZEN4;

/// A RAW payload under construction.
#[derive(Debug, Clone)]
pub struct RawBuilder {
    caps: u32,
    regs: [u64; 9],
}

impl RawBuilder {
    pub fn new(caps: u32) -> Self {
        RawBuilder { caps, regs: [0; 9] }
    }

    /// Sets a named field of [`LAYOUT`]; panics on an unknown name or a too-wide value.
    pub fn set(mut self, name: &str, value: u64) -> Self {
        let &(_, reg, lo, width) = LAYOUT
            .iter()
            .find(|(n, ..)| *n == name)
            .unwrap_or_else(|| panic!("no field {name}"));
        assert!(
            width == 64 || value >> width == 0,
            "{name}: {value:#x} too wide"
        );
        let mask = (u64::MAX >> (64 - width)) << lo;
        let slot = &mut self.regs[reg as usize];
        *slot = (*slot & !mask) | (value << lo);
        self
    }

    pub fn on(self, names: &[&str]) -> Self {
        names.iter().fold(self, |b, name| b.set(name, 1))
    }

    pub fn reg(mut self, reg: Reg, value: u64) -> Self {
        self.regs[reg as usize] = value;
        self
    }

    /// Sets the 5-bit DataSrc over its two pieces (bits 0-2 and 6-7).
    pub fn data_src(self, v: u64) -> Self {
        self.set("DataSrcLo", v & 7).set("DataSrcHi", v >> 3)
    }

    /// caps (LE u32), the seven op MSRs, then BrTarget and OpData4 as caps announces them.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = self.caps.to_le_bytes().to_vec();
        let optional = [(BRNTRGT, Reg::BrTarget), (OPDATA4, Reg::Data4)];
        let present = optional.iter().filter(|(bit, _)| self.caps & bit != 0);
        let regs = self.regs[..7]
            .iter()
            .chain(present.map(|&(_, r)| &self.regs[r as usize]));
        for reg in regs {
            out.extend_from_slice(&reg.to_le_bytes());
        }
        out
    }

    pub fn parse(&self) -> IbsOpRaw {
        IbsOpRaw::parse(&self.bytes()).unwrap()
    }
}

/// A valid user-mode load that missed L1 and L2, with both addresses valid.
pub fn user_load(caps: u32) -> RawBuilder {
    RawBuilder::new(caps)
        .on(&[
            "OpEn",
            "OpVal",
            "LdOp",
            "DcMiss",
            "L2Miss",
            "DcLinAddrValid",
            "DcPhyAddrValid",
        ])
        .set("DcMissLat", 420)
        .reg(Reg::Rip, 0x40_1234)
        .reg(Reg::LinAd, 0x7f00_dead_b000)
        .reg(Reg::PhysAd, 0x80_0000_b000)
}
