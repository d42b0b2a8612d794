//! The counter registry: one set of monotonic atomics shared by every stage.
//!
//! Names are the pghot series' vmstat names (`pghot_recorded_accesses`, `hwhint_extmem_accesses`,
//! `pgpromote_success`, ...) so a pghotd run reads like the pghot kernel's counters. Counters only
//! ever grow; readers compute rates from two snapshots (a `Serialize` that reset them would let two
//! readers steal each other's deltas).
//!
//! Each counter also says where it goes in the OpenMetrics output (`control::metrics`): a
//! family of its own, or one label value of a shared family (a drop reason, a promotion
//! outcome, a node, a source), in base units. The vmstat names stay what `pghotctl stats` and
//! `--stats-json` show; README.md's metrics table maps one to the other.
//!
//! Hot-path writers do not touch these atomics per sample: each sampler thread keeps a
//! [`LocalCounts`] and folds it in every few thousand samples (see `ingest`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sample::SourceKind;
use crate::topology::NodeId;

/// How a counter's value is exported: the unit is the metric name's last word before `_total`
/// (Prometheus and OpenMetrics name their units as a suffix, in base units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count of things; no suffix.
    Count,
    /// Bytes: `_bytes`.
    Bytes,
    /// Held in nanoseconds, exported in seconds: `_seconds`.
    Nanoseconds,
}

impl Unit {
    /// The OpenMetrics unit (`# UNIT`), which is also the name's suffix; `""` for a count.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Count => "",
            Unit::Bytes => "bytes",
            Unit::Nanoseconds => "seconds",
        }
    }
}

/// A metric family several counters share, each counter one value of its label: the drop
/// reasons, the promotion outcomes, the per-node and per-source counters.
#[derive(Debug)]
pub struct Family {
    /// The name between `pghotd_` and the unit (and `_total`).
    pub name: &'static str,
    pub unit: Unit,
    /// The label whose values tell the family's counters apart.
    pub label: &'static str,
    /// The family's doc comment (HELP).
    pub help: &'static str,
}

/// Where a counter goes in the OpenMetrics output (`control::metrics`).
#[derive(Debug, Clone, Copy)]
pub enum Metric {
    /// A family of its own, `pghotd_<name>[_<unit>]_total`, whose HELP is the counter's doc
    /// comment; with a `source` label when only one source has such a counter.
    Own {
        name: &'static str,
        unit: Unit,
        label: Option<(&'static str, &'static str)>,
    },
    /// One value of a shared family's label.
    Of(&'static Family, &'static str),
}

impl Metric {
    const fn count(name: &'static str) -> Metric {
        Metric::Own {
            name,
            unit: Unit::Count,
            label: None,
        }
    }

    const fn bytes(name: &'static str) -> Metric {
        Metric::Own {
            name,
            unit: Unit::Bytes,
            label: None,
        }
    }

    const fn nanoseconds(name: &'static str) -> Metric {
        Metric::Own {
            name,
            unit: Unit::Nanoseconds,
            label: None,
        }
    }

    const fn of(family: &'static Family, value: &'static str) -> Metric {
        Metric::Of(family, value)
    }

    /// The same metric labelled `source="<kind>"`: a counter only that source has. For a
    /// family of its own only (a shared family has its label already).
    const fn of_source(self, kind: SourceKind) -> Metric {
        match self {
            Metric::Own { name, unit, .. } => Metric::Own {
                name,
                unit,
                label: Some(("source", kind.name())),
            },
            Metric::Of(..) => panic!("of_source on a shared family"),
        }
    }
}

/// `pghotd_<name>[_<unit>]`: the family name, without a counter's `_total`.
pub fn family_name(name: &str, unit: Unit) -> String {
    match unit {
        Unit::Count => format!("pghotd_{name}"),
        unit => format!("pghotd_{name}_{}", unit.name()),
    }
}

macro_rules! families {
    ($($(#[doc = $doc:literal])* $id:ident => $name:literal, $unit:ident, $label:literal;)*) => {
        $(
            $(#[doc = $doc])*
            pub const $id: Family = Family {
                name: $name,
                unit: Unit::$unit,
                label: $label,
                help: concat!($($doc, "\n"),*),
            };
        )*

        /// Every shared family.
        pub const FAMILIES: &[&Family] = &[$(&$id,)*];
    };
}

families! {
    /// Samples handed to pghotd, by source (events a source dropped before making a sample of
    /// them are not in here: see pghotd_source_dropped_samples_total).
    SOURCE_SAMPLES => "source_samples", Count, "source";
    /// Useful samples by where the access was served from: top-tier memory (dram), lower-tier
    /// memory (extmem), or a cache, which says nothing about memory placement.
    ACCESSES => "accesses", Count, "served_from";
    /// Hardware samples dropped by their source before they became samples, by reason.
    SOURCE_DROPPED_SAMPLES => "source_dropped_samples", Count, "reason";
    /// Layouts newer than pghotd knows, met and tolerated while decoding a sample, by note;
    /// counted whether the sample is then kept or dropped.
    DECODE_NOTES => "decode_notes", Count, "note";
    /// Samples dropped by pghotd's filters before the hotness table, by reason.
    DROPPED_SAMPLES => "dropped_samples", Count, "reason";
    /// Promotion candidates by outcome, failures aside: each candidate ends in exactly one
    /// outcome here or one reason of pghotd_promote_failures_total.
    PROMOTE_OUTCOMES => "promote_outcomes", Count, "outcome";
    /// Promotion candidates that failed or were held back, by reason.
    PROMOTE_FAILURES => "promote_failures", Count, "reason";
    /// Pages promoted, by destination node.
    PROMOTED_PAGES => "promoted_pages", Count, "node";
    /// Bytes promoted, by destination node.
    PROMOTED => "promoted", Bytes, "node";
    /// Candidates deferred by duplex-aware admission, by the page's kind of traffic.
    ADMISSION_DEFERRALS => "admission_deferrals", Count, "reason";
    /// THPs split (and verified), by the size of the folios they were split to.
    THP_SPLITS => "thp_splits", Count, "folio_bytes";
    /// Subfolios after a split: selected for promotion, or left on the slow tier.
    THP_SUBFOLIOS => "thp_subfolios", Count, "decision";
    /// THP split decisions, by the histogram they were made on.
    THP_SPLIT_DECISIONS => "thp_split_decisions", Count, "histogram";
    /// THPs promoted whole instead of split, by reason (fail_*: the split failed).
    THP_KEPT_WHOLE => "thp_kept_whole", Count, "reason";
    /// THPs (or regions of them) whose candidates were deferred, by reason.
    THP_DEFERRED => "thp_deferred", Count, "reason";
    /// Moves refused before move_pages(2), by reason.
    SCOPE_REFUSALS => "scope_refusals", Count, "reason";
}

/// A counter kept per node: its stats name is `<prefix><node>`.
#[derive(Debug)]
pub struct PerNode {
    pub prefix: &'static str,
    pub family: &'static Family,
}

impl PerNode {
    /// The name `pghotctl stats` and `--stats-json` use.
    pub fn stats_name(&self, node: impl std::fmt::Display) -> String {
        format!("{}{node}", self.prefix)
    }
}

/// Pages promoted to a node (`pgpromote_success` by destination).
pub const PROMOTED_PAGES_PER_NODE: PerNode = PerNode {
    prefix: "pgpromote_success_node",
    family: &PROMOTED_PAGES,
};

/// Bytes promoted to a node.
pub const PROMOTED_BYTES_PER_NODE: PerNode = PerNode {
    prefix: "pgpromote_bytes_node",
    family: &PROMOTED,
};

/// Every per-node counter.
pub const PER_NODE: [&PerNode; 2] = [&PROMOTED_PAGES_PER_NODE, &PROMOTED_BYTES_PER_NODE];

/// The stats name of a source's sample count (family [`SOURCE_SAMPLES`]).
pub fn source_samples_name(kind: SourceKind) -> String {
    format!("source_{}_samples", kind.name())
}

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal as $metric:expr,)*) => {
        /// Every global counter, in the order they are reported.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Counter {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Counter {
            /// All counters, in report order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)*];

            /// The counter's name as reported in stats and JSON.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Counter::$variant => $name,)*
                }
            }

            /// The counter's doc comment, lines and all: the metric's HELP and the README's
            /// meaning.
            pub const fn help(self) -> &'static str {
                match self {
                    $(Counter::$variant => concat!($($doc, "\n"),*),)*
                }
            }

            /// Where the counter goes in the OpenMetrics output.
            pub const fn metric(self) -> Metric {
                match self {
                    $(Counter::$variant => $metric,)*
                }
            }
        }
    };
}

counters! {
    /// Every sample handed to pghotd by any source, and every event a source dropped or lost
    /// before making a sample of it: total = useful + dropped.
    HwhintTotalEvents => "hwhint_total_events" as Metric::count("events"),
    /// Samples that passed the filters (total minus dropped).
    HwhintUsefulEvents => "hwhint_useful_events" as Metric::count("useful_events"),
    /// Samples dropped for any reason below, plus records a source lost.
    HwhintDroppedEvents => "hwhint_dropped_events" as Metric::count("dropped_events"),
    /// Useful samples served from (or resident on) top-tier memory.
    HwhintDramAccesses => "hwhint_dram_accesses" as Metric::of(&ACCESSES, "dram"),
    /// Useful samples served from (or resident on) lower-tier memory.
    HwhintExtmemAccesses => "hwhint_extmem_accesses" as Metric::of(&ACCESSES, "extmem"),
    /// Useful samples served from a cache; they say nothing about memory placement.
    HwhintCacheAccesses => "hwhint_cache_accesses" as Metric::of(&ACCESSES, "cache"),
    /// Hardware sample dropped by its source: taken in kernel or hypervisor mode.
    HwhintKernelMode => "hwhint_kernel_mode" as Metric::of(&SOURCE_DROPPED_SAMPLES, "kernel_mode"),
    /// Hardware sample dropped by its source: taken while a guest ran.
    HwhintGuestMode => "hwhint_guest_mode" as Metric::of(&SOURCE_DROPPED_SAMPLES, "guest_mode"),
    /// Hardware sample dropped by its source: neither a load nor a store.
    HwhintNonLoadStores => "hwhint_non_load_stores" as Metric::of(&SOURCE_DROPPED_SAMPLES, "non_load_store"),
    /// Hardware sample dropped by its source: served by L1 (or Intel's line fill buffer).
    HwhintL1Hits => "hwhint_l1_hits" as Metric::of(&SOURCE_DROPPED_SAMPLES, "l1_hit"),
    /// Hardware sample dropped by its source: served by L2.
    HwhintL2Hits => "hwhint_l2_hits" as Metric::of(&SOURCE_DROPPED_SAMPLES, "l2_hit"),
    /// Hardware sample dropped by its source: no valid linear data address.
    HwhintInvalidAddr => "hwhint_invalid_addr" as Metric::of(&SOURCE_DROPPED_SAMPLES, "invalid_addr"),
    /// Hardware sample dropped by its source: kernel data address.
    HwhintKernelAddr => "hwhint_kernel_addr" as Metric::of(&SOURCE_DROPPED_SAMPLES, "kernel_addr"),
    /// Hardware sample dropped by its source: marked invalid, or a malformed RAW payload.
    HwhintInvalidSamples => "hwhint_invalid_samples" as Metric::of(&SOURCE_DROPPED_SAMPLES, "invalid_sample"),
    /// IBS samples whose RAW payload was longer than the registers its caps word announces
    /// (a kernel that appends a register pghotd does not know): decoded, the rest ignored.
    IbsRawLongerThanKnown => "ibs_raw_longer_than_known" as Metric::of(&DECODE_NOTES, "ibs_raw_longer_than_known"),
    /// IBS samples whose RAW payload did not parse, decoded from the kernel's DATA_SRC, ADDR,
    /// PHYS_ADDR and WEIGHT instead (then kept or dropped like any sample).
    IbsRawFallbackDecoded => "ibs_raw_fallback_decoded" as Metric::of(&DECODE_NOTES, "ibs_raw_fallback_decoded"),
    /// Hardware samples whose DATA_SRC `mem_region` is a value the kernel's uapi header does
    /// not define: classified from the level fields, not dropped.
    DataSrcRegionUnknown => "data_src_region_unknown" as Metric::of(&DECODE_NOTES, "data_src_region_unknown"),
    /// Lower-tier samples recorded into the hotness table.
    PghotRecordedAccesses => "pghot_recorded_accesses" as Metric::count("recorded_accesses"),
    /// Dropped: pid 0 (idle or kernel context).
    DropPidZero => "pghot_drop_pid_zero" as Metric::of(&DROPPED_SAMPLES, "pid_zero"),
    /// Dropped: no linear address in the sample.
    DropNoAddress => "pghot_drop_no_address" as Metric::of(&DROPPED_SAMPLES, "no_address"),
    /// Dropped: kernel address.
    DropKernelAddress => "pghot_drop_kernel_address" as Metric::of(&DROPPED_SAMPLES, "kernel_address"),
    /// Dropped: user address above the table's 52-bit key range.
    DropAddressRange => "pghot_drop_address_range" as Metric::of(&DROPPED_SAMPLES, "address_range"),
    /// Dropped: process outside the managed scope.
    DropOutOfScope => "pghot_drop_out_of_scope" as Metric::of(&DROPPED_SAMPLES, "out_of_scope"),
    /// Dropped: the page's node is unknown (no node in the sample, and the kernel does not
    /// know the page: not present, or the process has exited).
    DropUnknownNode => "pghot_drop_unknown_node" as Metric::of(&DROPPED_SAMPLES, "unknown_node"),
    /// Dropped: the page's node is not a memory node of this topology.
    DropBadNode => "pghot_drop_bad_node" as Metric::of(&DROPPED_SAMPLES, "bad_node"),
    /// move_pages(2) queries made to find the node of samples that carried none.
    PghotNodeQueries => "pghot_node_queries" as Metric::count("node_queries"),
    /// Samples that carried no node (nor a physical address) and took their page's node from
    /// what pghotd last knew of it (its table, or a recent query): a page the kernel moved since
    /// looks where it was. The migrators' audit runs only while such samples arrive.
    PghotBelievedNodeSamples => "pghot_believed_node_samples" as Metric::count("believed_node_samples"),
    /// Pages the table holds on a top-tier node that a migrator re-checked with the kernel
    /// (node-less samples trust the table's node; see `migrator::audit`).
    PghotAuditPages => "pghot_audit_pages" as Metric::count("audited_pages"),
    /// Of those, pages found back on a lower tier (kernel demotion, a khugepaged collapse):
    /// tracked as lower-tier again, so their next samples can promote them.
    PghotAuditMovedBack => "pghot_audit_moved_back" as Metric::count("audit_moved_back_pages"),
    /// Times a sampling or migrating thread at SCHED_IDLE waited for a CPU over 50 ms a run
    /// and a quarter of the time, and went back to the policy pghotd started with (`cpu_policy = "auto"`).
    PghotCpuRaises => "pghot_cpu_raises" as Metric::count("cpu_raises"),
    /// Records lost by a source before pghotd saw them (ring overflow).
    SourceLostRecords => "pghot_source_lost_records" as Metric::count("source_lost_records"),
    /// Tracked pages evicted (coldest first) to stay under `max_tracked_pages`.
    PghotEvictedPages => "pghot_evicted_pages" as Metric::count("evicted_pages"),
    /// Pages that crossed `freq_threshold`. Each ends in exactly one outcome below:
    /// success, ratelimited, already_toptier, no_target, queue_full, abandoned, a fail_*, or
    /// (with admission on) deferred_duplex or same_folio. THP split riders add outcomes too.
    PgpromoteCandidate => "pgpromote_candidate" as Metric::count("promote_candidates"),
    /// Candidates with no top-tier node to go to (no `target_nid`, CPU of unknown node).
    PgpromoteNoTarget => "pgpromote_no_target" as Metric::of(&PROMOTE_OUTCOMES, "no_target"),
    /// Candidates dropped because their node's migrator queue was full.
    PgpromoteQueueFull => "pgpromote_queue_full" as Metric::of(&PROMOTE_OUTCOMES, "queue_full"),
    /// Pages now on the destination node.
    PgpromoteSuccess => "pgpromote_success" as Metric::of(&PROMOTE_OUTCOMES, "success"),
    /// Pages held back by the per-node rate limit.
    PgpromoteRatelimited => "pgpromote_ratelimited" as Metric::of(&PROMOTE_OUTCOMES, "ratelimited"),
    /// Pages found already on a top-tier node when their batch ran.
    PgpromoteAlreadyToptier => "pgpromote_already_toptier" as Metric::of(&PROMOTE_OUTCOMES, "already_toptier"),
    /// Pages held back because the destination's free memory is under the watermark.
    PgpromoteFailWatermark => "pgpromote_fail_watermark" as Metric::of(&PROMOTE_FAILURES, "watermark"),
    /// The process had exited (ESRCH).
    PgpromoteFailNoProcess => "pgpromote_fail_no_process" as Metric::of(&PROMOTE_FAILURES, "no_process"),
    /// Nothing mapped there any more, or swapped out (-ENOENT).
    PgpromoteFailNotPresent => "pgpromote_fail_not_present" as Metric::of(&PROMOTE_FAILURES, "not_present"),
    /// No VMA, zero page or unmovable mapping (-EFAULT).
    PgpromoteFailFault => "pgpromote_fail_fault" as Metric::of(&PROMOTE_FAILURES, "fault"),
    /// Page shared with another process; needs MPOL_MF_MOVE_ALL (-EACCES per page).
    PgpromoteFailShared => "pgpromote_fail_shared" as Metric::of(&PROMOTE_FAILURES, "shared"),
    /// Page could not be isolated right now (-EBUSY).
    PgpromoteFailBusy => "pgpromote_fail_busy" as Metric::of(&PROMOTE_FAILURES, "busy"),
    /// The destination could not allocate (ENOMEM).
    PgpromoteFailNomem => "pgpromote_fail_nomem" as Metric::of(&PROMOTE_FAILURES, "nomem"),
    /// Destination outside the target's cpuset (whole-call EACCES).
    PgpromoteFailNotAllowed => "pgpromote_fail_not_allowed" as Metric::of(&PROMOTE_FAILURES, "not_allowed"),
    /// Destination is not an online memory node (ENODEV).
    PgpromoteFailNoNode => "pgpromote_fail_no_node" as Metric::of(&PROMOTE_FAILURES, "no_node"),
    /// pghotd may not touch that process (EPERM).
    PgpromoteFailPermission => "pgpromote_fail_permission" as Metric::of(&PROMOTE_FAILURES, "permission"),
    /// The kernel tried and left the page where it was (positive return of move_pages).
    PgpromoteFailNotMigrated => "pgpromote_fail_not_migrated" as Metric::of(&PROMOTE_FAILURES, "not_migrated"),
    /// Any other errno.
    PgpromoteFailOther => "pgpromote_fail_other" as Metric::of(&PROMOTE_FAILURES, "other"),
    /// Queued pages abandoned by a stop before their batch ran, and candidates offered after
    /// their migrator had stopped (sources record until they see the stop).
    PgpromoteAbandoned => "pgpromote_abandoned" as Metric::of(&PROMOTE_OUTCOMES, "abandoned"),
    /// Candidates held back while promotion is paused (`pghotctl pause`); offered again on
    /// their next sample.
    PgpromotePaused => "pgpromote_paused" as Metric::of(&PROMOTE_OUTCOMES, "paused"),
    /// Candidates deferred by duplex-aware admission (TierBPF Table 2); offered again on their
    /// next sample.
    PgpromoteDeferredDuplex => "pgpromote_deferred_duplex" as Metric::of(&PROMOTE_OUTCOMES, "deferred_duplex"),
    /// Candidates in a THP deferred because their process's split histogram is still too thin
    /// to say which part of a THP is hot (on a contended node); offered again on their next
    /// sample.
    PgpromoteDeferredFewSamples => "pgpromote_deferred_few_samples" as Metric::of(&PROMOTE_OUTCOMES, "deferred_few_samples"),
    /// Candidates in a sparse THP (hot 4 KiB pages, no subfolio at the heat density) left on
    /// the slow tier: the destination is contended and cannot take even the hot pages now
    /// (`thp_sparse_left`); offered again on their next sample.
    PgpromoteDeferredSparse => "pgpromote_deferred_sparse" as Metric::of(&PROMOTE_OUTCOMES, "deferred_sparse"),
    /// Candidates admitted at 4 KiB (or as a subfolio) in a range THP admission split, found
    /// in a THP again just before their move (khugepaged collapsed the range back) and still
    /// there after it was split again (`thp_recollapsed`): not moved, since moving one
    /// address moves its whole folio; offered again on their next sample.
    PgpromoteDeferredRecollapsed => "pgpromote_deferred_recollapsed" as Metric::of(&PROMOTE_OUTCOMES, "deferred_recollapsed"),
    /// Candidates in a large folio too thinly sampled to move whole: its pages hold fewer
    /// samples than `promote_thp_min_samples_pct` of them would need to move alone (splitting
    /// off); offered again on their next sample.
    PgpromoteDeferredSparseFolio => "pgpromote_deferred_sparse_folio" as Metric::of(&PROMOTE_OUTCOMES, "deferred_sparse_folio"),
    /// Candidates whose folio another candidate of the same batch moves (one address per folio).
    PgpromoteSameFolio => "pgpromote_same_folio" as Metric::of(&PROMOTE_OUTCOMES, "same_folio"),
    /// Deferred: a write-heavy page while its node's traffic is read-dominant.
    AdmissionDeferredWriteHeavy => "admission_deferred_write_heavy" as Metric::of(&ADMISSION_DEFERRALS, "write_heavy"),
    /// Deferred: a read-heavy page while its node's traffic is write-dominant.
    AdmissionDeferredReadHeavy => "admission_deferred_read_heavy" as Metric::of(&ADMISSION_DEFERRALS, "read_heavy"),
    /// Candidates found in a large folio while THP splitting is on.
    ThpSplitCandidates => "thp_split_candidates" as Metric::count("thp_split_candidates"),
    /// THPs split (and verified) to 64 KiB folios.
    ThpSplitOrder64k => "thp_split_order_64k" as Metric::of(&THP_SPLITS, "65536"),
    /// THPs split (and verified) to 128 KiB folios.
    ThpSplitOrder128k => "thp_split_order_128k" as Metric::of(&THP_SPLITS, "131072"),
    /// THPs split (and verified) to 256 KiB folios.
    ThpSplitOrder256k => "thp_split_order_256k" as Metric::of(&THP_SPLITS, "262144"),
    /// THPs split (and verified) to 512 KiB folios.
    ThpSplitOrder512k => "thp_split_order_512k" as Metric::of(&THP_SPLITS, "524288"),
    /// THPs split (and verified) to 1 MiB folios.
    ThpSplitOrder1m => "thp_split_order_1m" as Metric::of(&THP_SPLITS, "1048576"),
    /// Splits planned but not made (`dry_run`).
    ThpSplitDryRun => "thp_split_dry_run" as Metric::count("thp_dry_run_splits"),
    /// Subfolios chosen for promotion after a split (hot, or holding a candidate).
    ThpSubfoliosSelected => "thp_subfolios_selected" as Metric::of(&THP_SUBFOLIOS, "selected"),
    /// Subfolios left on the slow tier after a split.
    ThpSubfoliosLeft => "thp_subfolios_left" as Metric::of(&THP_SUBFOLIOS, "left"),
    /// Hot subfolios promoted without a candidate of their own; each also ends in an outcome.
    ThpSplitRiders => "thp_split_riders" as Metric::count("thp_split_riders"),
    /// Candidates charged at 4 KiB because their folio's size could not be read (the
    /// process exited, or page frame numbers are hidden: no CAP_SYS_ADMIN).
    FolioSizeUnknown => "folio_size_unknown" as Metric::count("folio_size_unknown"),
    /// Candidates of a large folio found too sparse to move whole within the last second,
    /// deferred without reading its pages' samples again (counted in
    /// `pgpromote_deferred_sparse_folio` too).
    FolioRecountsSkipped => "folio_recounts_skipped" as Metric::count("folio_recounts_skipped"),
    /// Large folios promoted whole (PMD THPs, one address each).
    ThpWholePromotions => "thp_whole_promotions" as Metric::count("thp_whole_promotions"),
    /// Whole: the slow node's bandwidth is under `split_contention_MBps`.
    ThpSplitUncontended => "thp_split_uncontended" as Metric::of(&THP_KEPT_WHOLE, "uncontended"),
    /// Regions whose THP candidates were deferred: the process's histogram has too few
    /// samples (`split_min_samples`) to split by, and promoting 2 MiB whole on that little
    /// evidence is what over-promotes.
    ThpSplitFewSamples => "thp_split_few_samples" as Metric::of(&THP_DEFERRED, "few_samples"),
    /// Split decisions made on the THP's own subpage map (its pages' counts in the hotness
    /// table; `split_histogram` `per_folio` or `auto`).
    ThpSplitPerFolio => "thp_split_per_folio" as Metric::of(&THP_SPLIT_DECISIONS, "per_folio"),
    /// Split decisions made on the process's folded histogram (`folded`, or `auto` where the
    /// THP's own samples were too thin).
    ThpSplitFolded => "thp_split_folded" as Metric::of(&THP_SPLIT_DECISIONS, "folded"),
    /// Hot 4 KiB pages promoted alone: their subfolio split to order 0 (sparse heat, or the
    /// edge of a run that no aligned subfolio holds at the heat density).
    ThpSplitBasePages => "thp_split_base_pages" as Metric::count("thp_split_base_pages"),
    /// Sparse THPs (no subfolio at the heat density) promoted whole: the destination is not
    /// contended and a quarter or more of the THP is hot.
    ThpSparseWhole => "thp_sparse_whole" as Metric::of(&THP_KEPT_WHOLE, "sparse"),
    /// Sparse THPs left on the slow tier: the destination is contended and cannot take even
    /// their hot pages now; their candidates wait (offered again by a later sample).
    ThpSparseLeft => "thp_sparse_left" as Metric::of(&THP_DEFERRED, "sparse"),
    /// Whole: the histogram is flat (entropy at or above `split_flat_entropy_pct`).
    ThpSplitFlat => "thp_split_flat" as Metric::of(&THP_KEPT_WHOLE, "flat"),
    /// Whole: the whole 2 MiB reaches the heat density.
    ThpSplitDense => "thp_split_dense" as Metric::of(&THP_KEPT_WHOLE, "dense"),
    /// Whole: splitting is unavailable (no debugfs, lockdown, no CAP_SYS_ADMIN); logged once.
    ThpSplitFailUnavailable => "thp_split_fail_unavailable" as Metric::of(&THP_KEPT_WHOLE, "fail_unavailable"),
    /// Whole: the split write succeeded but the folio did not split (pinned, locked).
    ThpSplitFailUnsplit => "thp_split_fail_unsplit" as Metric::of(&THP_KEPT_WHOLE, "fail_unsplit"),
    /// Whole: reading pagemap/kpageflags failed (process gone, ...).
    ThpSplitFailRegion => "thp_split_fail_region" as Metric::of(&THP_KEPT_WHOLE, "fail_region"),
    /// Whole: the split write failed otherwise.
    ThpSplitFailOther => "thp_split_fail_other" as Metric::of(&THP_KEPT_WHOLE, "fail_other"),
    /// Ranges THP admission split that khugepaged collapsed back into one THP on the slow
    /// node (mm/khugepaged.c: `hpage_collapse_scan_pmd()` finds the range's PTEs mapped,
    /// `collapse_huge_page()` copies them into a THP allocated on the node most of them sat
    /// on), taking the hot pages promoted from it along. Found either by the migrator's
    /// re-check just before move_pages of candidates admitted at 4 KiB (order 0) or as a
    /// subfolio, where moving one would move the whole 2 MiB folio, so the folio is split
    /// again to the order admitted first (`pgpromote_deferred_recollapsed` where that does
    /// not take); or by the once-a-second
    /// look at every range split, after which the range's pages believed fast are queried
    /// and tracked as lower-tier again (`pghot_audit_moved_back`). One count per range found.
    ThpRecollapsed => "thp_recollapsed" as Metric::count("thp_recollapsed_ranges"),
    /// Candidates held back because the fast tier has room only for hotter ones
    /// (capacity-aware admission); offered again on their next sample.
    PgpromoteFailCold => "pgpromote_fail_cold" as Metric::of(&PROMOTE_FAILURES, "cold"),
    /// Pages pghotd promoted earlier and moved back to a lower tier (`demote = true`, or
    /// `demote_below_floor_pct`).
    PgdemoteSuccess => "pgdemote_success" as Metric::count("demoted_pages"),
    /// Of `pgdemote_success`, pages moved back because their heat fell under
    /// `demote_below_floor_pct` of the heat floor (whatever the free memory; with
    /// `hot_share_room_mb`, only from a fast node short of it, as much as it lacks).
    PgdemoteBelowFloor => "pgdemote_below_floor" as Metric::count("demoted_below_floor_pages"),
    /// Pages under `demote_below_floor_pct` of the floor left on their fast node because they
    /// sit in a large folio there: moving one moves the whole folio (move_pages(2) migrates
    /// folios), whose other pages were promoted with it and may be hot. Counted at each
    /// re-check that finds them.
    PgdemoteHeldLargeFolio => "pgdemote_held_large_folio" as Metric::count("demote_held_large_folio_pages"),
    /// Demotions that did not happen (the page vanished, is busy, or the call failed).
    PgdemoteFail => "pgdemote_fail" as Metric::count("demote_failures"),
    /// Pages moved by an operator's `pghotctl migrate`.
    PgmigrateManualSuccess => "pgmigrate_manual_success" as Metric::count("manual_migrated_pages"),
    /// Bytes moved by `pghotctl migrate` (4 KiB per page).
    PgmigrateManualBytes => "pgmigrate_manual_bytes" as Metric::bytes("manual_migrated"),
    /// Pages `pghotctl migrate` tried and could not move.
    PgmigrateManualFail => "pgmigrate_manual_fail" as Metric::count("manual_migrate_failures"),
    /// Requests served on the control socket.
    ControlRequests => "control_requests" as Metric::count("control_requests"),
    /// Control requests answered with an error (malformed, denied, invalid, ...).
    ControlErrors => "control_errors" as Metric::count("control_errors"),
    /// Samples a `pghotctl record` stream could not take (its buffer was full).
    RecordDroppedSamples => "record_dropped_samples" as Metric::count("record_dropped_samples"),
    /// move_pages(2) calls made (query and move).
    MigratorSyscalls => "migrator_move_pages_calls" as Metric::count("move_pages_calls"),
    /// Malformed lines skipped by the trace source.
    TraceBadLines => "trace_bad_lines" as Metric::count("source_bad_lines").of_source(SourceKind::Trace),
    /// Times the kernel stopped a perf event for the rest of a tick (too many samples).
    PerfThrottleEvents => "perf_throttle_events" as Metric::count("perf_throttles"),
    /// Times the kernel restarted a throttled perf event.
    PerfUnthrottleEvents => "perf_unthrottle_events" as Metric::count("perf_unthrottles"),
    /// Perf records that could not be parsed (or a corrupt ring batch), skipped.
    PerfBadRecords => "perf_bad_records" as Metric::count("perf_bad_records"),
    /// Sample records of a perf.data file's events that pghotd does not decode, skipped.
    PerfDataSkippedSamples => "perfdata_skipped_samples" as Metric::count("perf_data_skipped_samples"),
    /// Managed pids a software source (damon, softdirty) saw exit; each is logged once.
    SourcePidExits => "source_pid_exits" as Metric::count("source_pid_exits"),
    /// DAMON snapshots taken, one per aggregation interval: whole aggregations from the
    /// kdamond's `damon_aggregated` tracepoint, or `update_schemes_tried_regions` where that
    /// cannot be read.
    DamonSnapshots => "damon_snapshots" as Metric::count("source_snapshots").of_source(SourceKind::Damon),
    /// Accessed regions read from DAMON's snapshots.
    DamonRegionsSeen => "damon_regions_seen" as Metric::count("source_regions_seen").of_source(SourceKind::Damon),
    /// Regions of DAMON's snapshots in which an access was seen (`nr_accesses` above 0).
    DamonAccessedRegions => "damon_accessed_regions" as Metric::count("source_accessed_regions").of_source(SourceKind::Damon),
    /// The pages those regions span: divided by `damon_accessed_regions`, how coarse DAMON's
    /// view of the hot memory is. Every page of an accessed region gets the same credit, so
    /// hot pages scattered inside a large region cannot be told from its cold ones.
    DamonAccessedRegionPages => "damon_accessed_region_pages" as Metric::count("source_accessed_region_pages").of_source(SourceKind::Damon),
    /// Page credits not emitted because a snapshot hit `damon_max_samples`.
    DamonCreditsCapped => "damon_credits_capped" as Metric::count("source_capped_credits").of_source(SourceKind::Damon),
    /// DAMON requests (snapshot, restart) that failed while the managed pids still ran and
    /// were tried again (EBUSY while the kdamond holds DAMON's sysfs lock, a kdamond restart).
    DamonRetries => "damon_retries" as Metric::count("source_retries").of_source(SourceKind::Damon),
    /// Aggregations read from DAMON's `damon_aggregated` tracepoint that missed records (lost
    /// in a full ring) and were dropped whole rather than credited in part.
    DamonTornAggregations => "damon_torn_aggregations" as Metric::count("source_torn_aggregations").of_source(SourceKind::Damon),
    /// Soft-dirty passes over every managed pid.
    SoftdirtyScans => "softdirty_scans" as Metric::count("source_scans").of_source(SourceKind::SoftDirty),
    /// Pagemap entries read by the soft-dirty source.
    SoftdirtyPagesScanned => "softdirty_pages_scanned" as Metric::count("source_scanned_pages").of_source(SourceKind::SoftDirty),
    /// Present pages found written (soft-dirty); one store sample each.
    SoftdirtyDirtyPages => "softdirty_dirty_pages" as Metric::count("source_written_pages").of_source(SourceKind::SoftDirty),
    /// Writable mappings a soft-dirty pass read but did not credit because they are new or
    /// grew since the pid's last pass: the kernel marks such a mapping soft-dirty as a whole
    /// (VM_SOFTDIRTY, mm/vma.c `__mmap_complete` and `do_brk_flags`), so every present page
    /// in it reads written once, whether written or not.
    SoftdirtyFreshMappings => "softdirty_fresh_mappings" as Metric::count("source_fresh_mappings").of_source(SourceKind::SoftDirty),
    /// Wall time of the soft-dirty passes (maps, pagemap, clear_refs, samples).
    SoftdirtyScanNs => "softdirty_scan_ns" as Metric::nanoseconds("source_scan").of_source(SourceKind::SoftDirty),
    /// Passes that came later than the interval to keep within `softdirty_scan_budget_pages`,
    /// or the scans within a tenth of a core.
    SoftdirtyBudgetStretches => "softdirty_budget_stretches" as Metric::count("source_budget_stretches").of_source(SourceKind::SoftDirty),
    /// Soft-dirty passes skipped over a process in a followed scope whose /proc files pghotd
    /// may not open (another user's process without CAP_DAC_OVERRIDE).
    SoftdirtyDenied => "softdirty_denied" as Metric::count("source_denied_passes").of_source(SourceKind::SoftDirty),
    /// Moves refused before move_pages: the pid is not in scope (now).
    ScopeRefusedOutOfScope => "scope_refused_out_of_scope" as Metric::of(&SCOPE_REFUSALS, "out_of_scope"),
    /// Moves refused before move_pages: the pid's number belongs to another process now.
    ScopeRefusedPidReused => "scope_refused_pid_reused" as Metric::of(&SCOPE_REFUSALS, "pid_reused"),
    /// Moves refused before move_pages: the scope tracker has not seen that process alive
    /// (a kernel thread, or a process younger than one refresh).
    ScopeRefusedUnverified => "scope_refused_unverified" as Metric::of(&SCOPE_REFUSALS, "unverified"),
}

impl Counter {
    /// The outcomes a promotion candidate ends in, exactly one each: their sum equals
    /// `pgpromote_candidate` once the migrators have drained.
    pub const PROMOTION_OUTCOMES: &'static [Counter] = &[
        Counter::PgpromoteNoTarget,
        Counter::PgpromoteQueueFull,
        Counter::PgpromoteSuccess,
        Counter::PgpromoteRatelimited,
        Counter::PgpromoteAlreadyToptier,
        Counter::PgpromoteFailWatermark,
        Counter::PgpromoteFailCold,
        Counter::PgpromoteFailNoProcess,
        Counter::PgpromoteFailNotPresent,
        Counter::PgpromoteFailFault,
        Counter::PgpromoteFailShared,
        Counter::PgpromoteFailBusy,
        Counter::PgpromoteFailNomem,
        Counter::PgpromoteFailNotAllowed,
        Counter::PgpromoteFailNoNode,
        Counter::PgpromoteFailPermission,
        Counter::PgpromoteFailNotMigrated,
        Counter::PgpromoteFailOther,
        Counter::PgpromoteAbandoned,
        Counter::PgpromotePaused,
        Counter::PgpromoteDeferredDuplex,
        Counter::PgpromoteDeferredFewSamples,
        Counter::PgpromoteDeferredSparse,
        Counter::PgpromoteDeferredRecollapsed,
        Counter::PgpromoteDeferredSparseFolio,
        Counter::PgpromoteSameFolio,
    ];

    /// Events a source saw (or lost) and dropped before making a sample of them: records lost or
    /// malformed, and one counter per `sampler::hwsample::DropReason`. The sink adds these to
    /// `hwhint_total_events` and `hwhint_dropped_events` too, so that total = useful + dropped
    /// covers every event the kernel delivered, whatever the source.
    pub const fn is_source_drop(self) -> bool {
        matches!(
            self,
            Counter::SourceLostRecords
                | Counter::PerfBadRecords
                | Counter::HwhintKernelMode
                | Counter::HwhintGuestMode
                | Counter::HwhintNonLoadStores
                | Counter::HwhintL1Hits
                | Counter::HwhintL2Hits
                | Counter::HwhintInvalidAddr
                | Counter::HwhintKernelAddr
                | Counter::HwhintInvalidSamples
        )
    }
}

/// Number of global counters.
pub const COUNTER_COUNT: usize = Counter::ALL.len();

/// Highest node id pghotd keeps per-node counters for (the kernel's MAX_NUMNODES is 1024).
pub const MAX_NODES: usize = 1024;

/// The shared registry. Cheap to read at any time; never reset.
pub struct Stats {
    counters: [AtomicU64; COUNTER_COUNT],
    per_source: [AtomicU64; SourceKind::ALL.len()],
    promoted_bytes_per_node: Box<[AtomicU64]>,
    promoted_pages_per_node: Box<[AtomicU64]>,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        Stats {
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
            per_source: std::array::from_fn(|_| AtomicU64::new(0)),
            promoted_bytes_per_node: (0..MAX_NODES).map(|_| AtomicU64::new(0)).collect(),
            promoted_pages_per_node: (0..MAX_NODES).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn add(&self, counter: Counter, n: u64) {
        if n != 0 {
            self.counters[counter as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn get(&self, counter: Counter) -> u64 {
        self.counters[counter as usize].load(Ordering::Relaxed)
    }

    pub fn source_samples(&self, kind: SourceKind) -> u64 {
        self.per_source[kind as usize].load(Ordering::Relaxed)
    }

    /// Accounts pages that reached `node`.
    pub fn add_promoted(&self, node: NodeId, pages: u64, bytes: u64) {
        self.add(Counter::PgpromoteSuccess, pages);
        if let Some(slot) = self.promoted_bytes_per_node.get(usize::from(node)) {
            slot.fetch_add(bytes, Ordering::Relaxed);
        }
        if let Some(slot) = self.promoted_pages_per_node.get(usize::from(node)) {
            slot.fetch_add(pages, Ordering::Relaxed);
        }
    }

    pub fn promoted_bytes(&self, node: NodeId) -> u64 {
        self.promoted_bytes_per_node
            .get(usize::from(node))
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// Folds a thread's local counts into the registry and zeroes them.
    pub fn absorb(&self, local: &mut LocalCounts) {
        for (i, n) in local.counters.iter_mut().enumerate() {
            if *n != 0 {
                self.counters[i].fetch_add(*n, Ordering::Relaxed);
                *n = 0;
            }
        }
        for (i, n) in local.per_source.iter_mut().enumerate() {
            if *n != 0 {
                self.per_source[i].fetch_add(*n, Ordering::Relaxed);
                *n = 0;
            }
        }
    }

    /// A point-in-time copy of every counter, named as reported.
    pub fn snapshot(&self) -> StatsSnapshot {
        let mut counters = BTreeMap::new();
        for &c in Counter::ALL {
            counters.insert(c.name().to_string(), self.get(c));
        }
        for &kind in SourceKind::ALL {
            counters.insert(source_samples_name(kind), self.source_samples(kind));
        }
        for (node, bytes) in self.promoted_bytes_per_node.iter().enumerate() {
            let bytes = bytes.load(Ordering::Relaxed);
            if bytes != 0 {
                let pages = self.promoted_pages_per_node[node].load(Ordering::Relaxed);
                counters.insert(PROMOTED_PAGES_PER_NODE.stats_name(node), pages);
                counters.insert(PROMOTED_BYTES_PER_NODE.stats_name(node), bytes);
            }
        }
        StatsSnapshot { counters }
    }
}

/// Counters as written by `--stats-json` and read back by tests and tools.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatsSnapshot {
    pub counters: BTreeMap<String, u64>,
}

impl StatsSnapshot {
    /// A counter by name; absent counters read as zero.
    pub fn get(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }
}

/// Per-thread counts, folded into [`Stats`] in bulk so that sampler threads do not bounce a
/// shared cache line on every sample.
#[derive(Debug, Clone)]
pub struct LocalCounts {
    counters: [u64; COUNTER_COUNT],
    per_source: [u64; SourceKind::ALL.len()],
}

impl Default for LocalCounts {
    fn default() -> Self {
        LocalCounts {
            counters: [0; COUNTER_COUNT],
            per_source: [0; SourceKind::ALL.len()],
        }
    }
}

impl LocalCounts {
    #[inline]
    pub fn bump(&mut self, counter: Counter) {
        self.counters[counter as usize] += 1;
    }

    #[inline]
    pub fn add(&mut self, counter: Counter, n: u64) {
        self.counters[counter as usize] += n;
    }

    #[inline]
    pub fn bump_source(&mut self, kind: SourceKind) {
        self.per_source[kind as usize] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pgpromote_counter_but_the_candidates_is_an_outcome() {
        for &c in Counter::ALL {
            let outcome = c.name().starts_with("pgpromote_") && c != Counter::PgpromoteCandidate;
            assert_eq!(
                Counter::PROMOTION_OUTCOMES.contains(&c),
                outcome,
                "{}",
                c.name()
            );
        }
    }

    #[test]
    fn names_are_unique_and_snapshot_lists_them_all() {
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COUNTER_COUNT);
        let snap = Stats::new().snapshot();
        for name in names {
            assert_eq!(snap.counters.get(name), Some(&0), "{name} missing");
        }
    }

    #[test]
    fn absorb_moves_local_counts_and_zeroes_them() {
        let stats = Stats::new();
        let mut local = LocalCounts::default();
        local.bump(Counter::HwhintTotalEvents);
        local.bump(Counter::HwhintTotalEvents);
        local.bump_source(SourceKind::Trace);
        stats.absorb(&mut local);
        stats.absorb(&mut local);
        assert_eq!(stats.get(Counter::HwhintTotalEvents), 2);
        assert_eq!(stats.source_samples(SourceKind::Trace), 1);
    }

    #[test]
    fn promoted_bytes_are_per_node() {
        let stats = Stats::new();
        stats.add_promoted(1, 2, 8192);
        let snap = stats.snapshot();
        assert_eq!(snap.get("pgpromote_success"), 2);
        assert_eq!(snap.get("pgpromote_bytes_node1"), 8192);
        assert_eq!(snap.get("pgpromote_success_node1"), 2);
        assert_eq!(snap.get("pgpromote_bytes_node0"), 0);
    }
}
