//! The sample: one memory access, whatever produced it.
//!
//! The sampler produces [`Sample`]s, the ingest path consumes them, and the counters are kept
//! per [`SourceKind`]; the type lives here so that none of them owns it.

use crate::topology::NodeId;

/// Load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessOp {
    Load,
    Store,
}

/// Where the sampled access was served from, as the hardware reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataSource {
    L1,
    L2,
    L3,
    /// Another core's or socket's cache.
    PeerCache,
    LocalDram,
    RemoteDram,
    /// Extension memory: CXL or another slow tier.
    ExtMem,
    Unknown,
}

impl DataSource {
    /// Served from some cache: says nothing about which memory the page sits in.
    pub fn is_cache(self) -> bool {
        matches!(
            self,
            DataSource::L1 | DataSource::L2 | DataSource::L3 | DataSource::PeerCache
        )
    }
}

/// Which kind of source produced a sample; samples are counted per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    Trace,
    Ibs,
    Pebs,
    PageFault,
    Damon,
    SoftDirty,
}

impl SourceKind {
    pub const ALL: &'static [SourceKind] = &[
        SourceKind::Trace,
        SourceKind::Ibs,
        SourceKind::Pebs,
        SourceKind::PageFault,
        SourceKind::Damon,
        SourceKind::SoftDirty,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            SourceKind::Trace => "trace",
            SourceKind::Ibs => "ibs",
            SourceKind::Pebs => "pebs",
            SourceKind::PageFault => "pagefault",
            SourceKind::Damon => "damon",
            SourceKind::SoftDirty => "softdirty",
        }
    }
}

/// One memory access sample, whatever produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Sample time in nanoseconds; the hotness table's only clock.
    pub time_ns: u64,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    /// Linear (virtual) address of the data access; 0 when the hardware gave none.
    pub vaddr: u64,
    pub paddr: Option<u64>,
    pub op: AccessOp,
    pub served_from: DataSource,
    /// The page's current NUMA node, when the source knows it.
    pub node: Option<NodeId>,
    /// Access latency in core cycles, when the hardware reports it.
    pub latency: Option<u32>,
    pub source: SourceKind,
}

impl Sample {
    /// An access known by its address alone: no physical address, data source, node or
    /// latency (software sources, emulated samples, a perf record before its decoder runs).
    #[inline]
    pub fn at_address(
        (time_ns, cpu): (u64, u32),
        (pid, tid): (u32, u32),
        vaddr: u64,
        op: AccessOp,
        source: SourceKind,
    ) -> Sample {
        Sample {
            time_ns,
            cpu,
            pid,
            tid,
            vaddr,
            paddr: None,
            op,
            served_from: DataSource::Unknown,
            node: None,
            latency: None,
            source,
        }
    }
}
