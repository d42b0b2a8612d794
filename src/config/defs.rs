//! Every setting, one row each: key, type and range, where the value lives, flag, help, docs,
//! and whether `config set` may change it while the daemon runs. The file parser, the flags,
//! `config get`/`set`, `--check-config`, the README's tables and pghotd.toml(5) all read this
//! table; CONTRIBUTING.md ("Adding a setting") shows how to add a row.
//!
//! Defaults are not repeated here: each stage's settings struct owns its `Default` (and
//! [`Config::default`] the rest), and the docs read the default from there. A row states the
//! default in words only where the value does not say it (an unset node means "the nearest").
//!
//! The order is the flags' order in `--help` and the keys' order in `config get`; a `[table]`'s
//! rows must come after the top-level keys only in the generated docs, which group by table.

use std::path::{Path, PathBuf};

use super::setting::{Field, Setting, Written, field, text, texts};
use crate::admission::config::SplitHistogram;
use crate::conflicts::ConflictPolicy;
use crate::cpushare::CpuPolicy;
use crate::sampler::SourceSpec;

/// A node id: the kernel's MAX_NUMNODES is at most 1 << CONFIG_NODES_SHIFT (10).
const NODE: (i64, i64) = (0, 1023);
/// A pid: PID_MAX_LIMIT on 64-bit kernels is 4 * 1024 * 1024 (include/linux/threads.h).
const PID: (i64, i64) = (1, (1 << 22) - 1);

pub static SETTINGS: &[Setting] = &[
    Setting::texts("enabled_sources", SOURCES)
        .flag("source", "SPEC")
        .help(
            "Sample source; repeat for several: trace:PATH (PATH may be a FIFO or - for stdin), \
             perfdata:PATH (a file perf record wrote), damon (needs --pid) or softdirty \
             (needs --pid, --cgroup or --comm)",
        )
        .allowed(
            "`auto`, `ibs`, `pebs`, `damon`, `softdirty`, `pagefault`, `trace:PATH`, \
             `perfdata:PATH`",
        )
        .doc(
            "sample sources; `auto` takes the first of `ibs`, `pebs`, `damon`, `softdirty` and \
             `pagefault` that works here",
        ),
    Setting::int("target_nid", NODE.0, NODE.1, field!(target_nid))
        .flag("target-nid", "NODE")
        .help("Promote to this node instead of the top-tier node nearest the accessing CPU")
        .default_is("nearest top-tier node of the accessing CPU")
        .allowed("a top-tier memory node")
        .doc("promotion destination")
        .runtime(),
    Setting::int(
        "freq_threshold",
        1,
        u16::MAX as i64,
        field!(policy.freq_threshold),
    )
    .flag("freq-threshold", "N")
    .help(
        "Samples within the window that make a lower-tier page a candidate [default: \
             {default}]",
    )
    .doc("samples within the window that make a lower-tier page a candidate")
    .runtime(),
    Setting::int(
        "promote_window_ms",
        1,
        3_600_000,
        field!(policy.promote_window_ms),
    )
    .flag("promote-window-ms", "MS")
    .help(
        "A page's count restarts when its previous sample is older than this [default: \
             {default}]",
    )
    .doc("the count restarts when the previous sample is older than this")
    .runtime(),
    Setting::int("window_samples", 0, 1 << 24, field!(policy.window_samples))
        .flag("window-samples", "N")
        .help(
            "Widen promote_window_ms, when samples are sparse, to hold this many recorded samples \
             (and 16 mean gaps between two samples of one page); 0 keeps it fixed [default: \
             {default}]",
        )
        .doc(
            "when samples are sparse, the window widens (up to 10 minutes) to hold this many \
         recorded lower-tier samples, so a page qualifies by its share of the samples, and 16 \
         mean gaps between two samples of one tracked lower-tier page, so a page's first \
         sample is remembered until its second; 0 keeps pghot's fixed window",
        )
        .runtime(),
    Setting::int(
        "promote_rate_limit_MBps",
        1,
        1 << 30,
        field!(migrator.promote_rate_limit_mbps),
    )
    .flag("promote-rate-limit-MBps", "MBPS")
    .help("Promotion rate limit per destination node, MiB/s [default: {default}]")
    .doc("promotion budget per destination node, MiB/s (one second of burst)")
    .runtime(),
    Setting::int(
        "promote_min_free_pct",
        0,
        50,
        field!(migrator.promote_min_free_pct),
    )
    .flag("promote-min-free-pct", "PCT")
    .help("Keep this percentage of a destination node's memory free [default: {default}]")
    .doc("keep this share of the destination's memory free")
    .runtime(),
    Setting::int(
        "promote_thp_min_samples_pct",
        0,
        100,
        field!(migrator.promote_thp_min_samples_pct),
    )
    .flag("promote-thp-min-samples-pct", "PCT")
    .help(
        "Move a THP or mTHP whole only once its pages hold as many samples as this \
         percentage of its 4 KiB pages would need to move alone (freq_threshold each); 0 moves \
         it at its first hot page, as NUMA balancing does (with admission.split, admission \
         decides) [default: {default}]",
    )
    .doc("a THP moves whole only once its pages hold as many samples as this share of its 4 KiB pages would need to move alone (`freq_threshold` each; 0: at its first hot page)")
    .runtime(),
    Setting::int(
        "migrate_interval_ms",
        1,
        60_000,
        field!(migrator.migrate_interval_ms),
    )
    .flag("migrate-interval-ms", "MS")
    .help(
        "Fewer than migrate_batch candidates wait at least this long to share one move_pages \
             call (with migrate_hold_ms, the longer); demotion checks the fast nodes this often \
             [default: {default}]",
    )
    .doc("a trickle of candidates waits at least this long to share one move_pages call (with `migrate_hold_ms`, the longer); demotion looks this often")
    .runtime(),
    Setting::int(
        "migrate_hold_ms",
        0,
        60_000,
        field!(migrator.migrate_hold_ms),
    )
    .flag("migrate-hold-ms", "MS")
    .help(
        "Fewer than migrate_batch candidates wait this long from the first (at least \
             migrate_interval_ms) to share one move_pages call, and a trickle too thin to bring \
             8 in that time waits until it has, up to ten times as long: each call flushes the \
             process's TLB on every CPU it runs on [default: {default}]",
    )
    .doc("fewer than migrate_batch candidates wait this long from the first (at least `migrate_interval_ms`) to share one move_pages call; a trickle too thin to bring 8 in that time waits until it has, up to ten times as long")
    .runtime(),
    Setting::int("migrate_batch", 1, 65_536, field!(migrator.migrate_batch))
        .flag("migrate-batch", "N")
        .help("Migrators move candidates at once when this many wait [default: {default}]")
        .doc("migrators move candidates at once when this many wait")
        .runtime(),
    Setting::int(
        "max_tracked_pages",
        1024,
        1 << 32,
        field!(max_tracked_pages),
    )
    .flag("max-tracked-pages", "N")
    .help(
        "Most pages the hotness table tracks (32 bytes each; at most a quarter of MemTotal) \
         [default: {default}]",
    )
    .allowed("{range}; the table (32 bytes a page) at most a quarter of MemTotal")
    .doc("hotness table bound (32 bytes per page)"),
    Setting::int(
        "heat_halflife_ms",
        1,
        3_600_000,
        field!(policy.heat_halflife_ms),
    )
    .flag("heat-halflife-ms", "MS")
    .help("Heat used to rank pages halves every this many ms [default: {default}]")
    .doc("decay of the heat used to rank pages")
    .runtime(),
    Setting::int("hot_share_pct", 0, 100, field!(policy.hot_share_pct))
        .flag("hot-share-pct", "PCT")
        .help(
            "A candidate must also be among the hottest tracked pages (of every managed process \
             together) that hold this percentage of their heat (promoted pages included), so \
             promotion stops where the hot set ends; pair it with a heat_halflife_ms that spans \
             several samples of a hot page; 0 or 100: off [default: {default}]",
        )
        .doc(
            "a candidate must also be among the hottest tracked pages (of every managed process \
             together) that hold this share of their heat (promoted pages included): promotion \
             stops where the hot set ends; pair it with a `heat_halflife_ms` spanning several \
             samples of a hot page; 0 or 100: off",

        )
        .runtime(),
    Setting::int(
        "demote_below_floor_pct",
        0,
        99,
        field!(policy.demote_below_floor_pct),
    )
    .flag("demote-below-floor-pct", "PCT")
    .help(
        "Move a page pghotd promoted back to its lower tier once its heat falls under this \
         percentage of the hot_share_pct floor (the lowest drawn in the last 20 s of \
         samples), whatever the free memory (with hot_share_room_mb, only what a short fast \
         node lacks) and within promote_rate_limit_MBps (not while paused), except a page in \
         a large folio, or one it moved back before and promoted again above 80 % of that \
         share; corrects promotions made on a few samples; needs hot_share_pct; 0: off \
         [default: {default}]",
    )
    .doc(
        "move a page pghotd promoted back to its lower tier once its heat falls under this \
         percentage of the `hot_share_pct` floor (the lowest drawn in the last 20 s of \
         samples), whatever the free memory (with `hot_share_room_mb`, only what a short \
         fast node lacks) and within `promote_rate_limit_MBps`, not while paused \
         (`pgdemote_below_floor`); a page in a \
         large folio stays (`pgdemote_held_large_folio`: moving it moves the folio), and so \
         does one pghotd moved back before and promoted again, until under 80 % of that share \
         (it came back: it sits at the hot set's edge); corrects promotions made on a few \
         samples; needs `hot_share_pct`; 0: off",
    )
    .runtime(),
    Setting::int(
        "hot_share_room_mb",
        0,
        1 << 20,
        field!(policy.hot_share_room_mb),
    )
    .flag("hot-share-room-mb", "MIB")
    .help(
        "While a fast node has this many MiB or more free above promote_min_free_pct, \
         hot_share_pct and demote_below_floor_pct stand aside for it: every candidate bound \
         there is promoted and nothing goes back; a node is short under it and has room again \
         a quarter above it, and a short node moves back only what it lacks; needs \
         hot_share_pct; 0: they always act [default: {default}]",
    )
    .doc(
        "while a fast node has this many MiB or more free above `promote_min_free_pct`, \
         `hot_share_pct` and `demote_below_floor_pct` stand aside for it: every candidate \
         bound there is promoted and nothing goes back (`pghotd_fast_nodes_short`); a node is \
         short under it and has room again a quarter above it, and a short node moves back \
         only what it lacks; needs `hot_share_pct`; 0: they always act",
    )
    .runtime(),
    Setting::ints("pids", PID.0, PID.1, field!(pids))
        .flag("pid", "PID")
        .help("Manage only this process; repeat for several [default: {default}]")
        .default_is("every process")
        .doc("processes to manage; see \"Which processes\""),
    Setting::switch("dry_run", field!(migrator.dry_run))
        .flag("dry-run", "")
        .help("Decide and count, but move nothing; trace pids need not exist")
        .doc("decide and count, move nothing"),
    Setting::switch("demote", field!(migrator.demote))
        .flag("demote", "")
        .help(
            "Move the coldest pages pghotd promoted back to the lower tier when a fast node falls \
             under demote_free_pct free [default: {default}]",
        )
        .default_is("off")
        .doc(
            "move the coldest pages pghotd promoted back to the lower tier when a fast node falls \
             under `demote_free_pct` free (`pgdemote_success`)",
        )
        .runtime(),
    Setting::int("demote_free_pct", 1, 60, field!(migrator.demote_free_pct))
        .flag("demote-free-pct", "PCT")
        .help(
            "Low watermark for demotion, % of a fast node's memory kept free [default: {default}]",
        )
        .allowed("{range}, above `promote_min_free_pct`")
        .doc("demotion's low watermark, % of a fast node's memory")
        .runtime(),
    Setting::bool("move_shared", field!(migrator.move_shared))
        .flag("move-shared", "BOOL")
        .help(
            "Also promote pages other processes map (MPOL_MF_MOVE_ALL; needs CAP_SYS_NICE) \
             [default: {default}]",
        )
        .doc(
            "also promote pages that other processes map too (a database's shared buffers, a \
             forked server's heap) with MPOL_MF_MOVE_ALL, which needs CAP_SYS_NICE; off, they \
             count as `pgpromote_fail_shared`",
        ),
    Setting::text("conflicts", CONFLICTS)
        .flag("conflicts", "warn|refuse")
        .help(
            "When the kernel (numa_balancing tiering, demotion), a DAMON migrate_hot/cold \
             scheme or another pghotd also moves pages: warn (log it, run) or refuse (exit 3 at \
             start) [default: {default}]",
        )
        .allowed("`\"warn\"`, `\"refuse\"`")
        .doc(
            "what a competing promoter found at start does: `\"warn\"` logs it once with the \
             remedy and runs, `\"refuse\"` exits 3; found later, one is logged either way \
             (`pghotctl status`, `pghotd_conflicts`)",
        ),
    Setting::text("cpu_policy", CPU_POLICY)
        .flag("cpu-policy", "auto|idle|inherit")
        .help(
            "How pghotd's sampling and migrating threads share the CPU with the managed programs: \
             auto (SCHED_IDLE, back to the policy pghotd started with while a thread waits for \
             a CPU over 50 ms a run and a quarter of the time), idle (SCHED_IDLE always) or \
             inherit (the policy pghotd started with, the unit's SCHED_BATCH) [default: \
             {default}]",
        )
        .allowed("`\"auto\"`, `\"idle\"`, `\"inherit\"`")
        .doc(
            "`\"auto\"`: the sampling, migrating and conflict-checking threads run at \
             SCHED_IDLE, so that a \
             managed program's wake-ups preempt them at once, and a thread that since its last \
             look (at most once a second) waited for a CPU over 50 ms a run on average and a \
             quarter of the time goes back to the policy pghotd started with for 30 s \
             (doubled, up to 8 min, while it starves again at once; `pghot_cpu_raises`); \
             `\"idle\"`: SCHED_IDLE always, which on a machine with no idle CPU promotes \
             nothing; `\"inherit\"`: the policy pghotd started with (the unit's \
             `CPUSchedulingPolicy=batch`). The control, metrics and sd_notify threads keep the \
             started policy",
        )
        .runtime(),
    Setting::path("sysfs_root", SYSFS_ROOT)
        .flag("sysfs-root", "DIR")
        .help(
            "Read the topology from this copy of /sys (e.g. a snapshot of the box a trace came \
             from)",
        )
        .allowed("a directory")
        .doc("where topology (and DAMON's sysfs) is read from"),
    Setting::int("perf.ring_pages", 1, 1 << 14, field!(perf.ring_pages))
        .flag("perf-ring-pages", "PAGES")
        .help("Data pages of each CPU's perf ring buffer, a power of two [default: {default}]")
        .allowed("{range}, a power of two")
        .check(power_of_two)
        .doc("data pages of each CPU's perf ring buffer, for every perf source"),
    Setting::int("pagefault.period", 1, 1 << 30, field!(pagefault.period))
        .flag("pagefault-period", "N")
        .help("The pagefault source samples one of every N faults per CPU [default: {default}]")
        .doc("the pagefault source samples one of every `period` faults per CPU"),
    // The op PMU's minimum period; the maximum is the extended-count one (0x7FFFFF0), checked
    // against the PMU's caps when the source opens.
    Setting::int_or("ibs.period", 0x90, 0x7ff_fff0, "auto", IBS_PERIOD)
        .flag("ibs-period", "N|auto")
        .help(
            "IBS: ops (or cycles) between samples, rounded down to a multiple of 16, or \"auto\" \
             to adapt it to the daemon's CPU budget [default: {default}]",
        )
        .allowed(
            "{range}, rounded down to a multiple of 16 (above 0xFFFF0 only with extended \
             counts), or `\"auto\"`",
        )
        .doc("IBS: ops (or cycles) between samples; `\"auto\"` adapts it to `cpu_budget_pct`"),
    Setting::int("ibs.cpu_budget_pct", 1, 100, field!(ibs_cpu_budget_pct))
        .flag("ibs-cpu-budget-pct", "PCT")
        .help("IBS with --ibs-period auto: daemon CPU allowed, % of one core [default: {default}]")
        .doc(
            "with `period = \"auto\"`, the daemon CPU (% of one core, migration included) the \
             adaptive period may use; a `pghot-period` thread re-decides every second and the \
             CPU samplers apply it live (PERF_EVENT_IOC_PERIOD)",
        ),
    Setting::bool("ibs.count_ops", field!(ibs.count_ops))
        .flag("ibs-count-ops", "BOOL")
        .help("IBS: count dispatched ops (true) or cycles (false) [default: {default}]")
        .doc("count dispatched ops, else cycles (`cnt_ctl`)"),
    Setting::bool("ibs.l3miss_only", field!(ibs.l3miss_only))
        .flag("ibs-l3miss-only", "BOOL")
        .help("IBS: keep only ops that missed L3 (Zen4+) [default: {default}]")
        .default_is("on where the PMU has it")
        .doc("keep only ops that missed L3 (Zen4+); `true` on an older PMU is an error"),
    Setting::int("ibs.ldlat", 128, 2048, field!(ibs.ldlat))
        .flag("ibs-ldlat", "CYCLES")
        .help(
            "IBS: load-latency threshold in cycles, {range} (Zen5, Linux 6.15+); stores are \
             then not sampled, and Linux 6.15 to 7.0 also turn on l3miss_only [default: \
             {default}]",
        )
        .default_is("off")
        .doc(
            "load-latency threshold in cycles (Zen5 and Linux 6.15+); the kernel then samples \
             only loads that missed the data cache, never stores, and Linux 6.15 to 7.0 (7.1+: \
             Zen5 only) force `l3miss_only` on",
        ),
    Setting::bool("ibs.user_only", field!(ibs.user_only))
        .flag("ibs-user-only", "BOOL")
        .help("IBS: user-space samples only [default: {default}]")
        .doc(
            "user-space samples only: the kernel filters with `swfilt` (6.14+), else pghotd drops",
        ),
    Setting::int("pebs.period", 1, 1 << 30, field!(pebs.period))
        .flag("pebs-period", "N")
        .help("PEBS: qualifying loads or stores between samples [default: {default}]")
        .doc("qualifying loads or stores between samples"),
    // The `ldlat` format field is 16 bits wide (config1:0-15).
    Setting::int("pebs.ldlat", 1, u16::MAX as i64, field!(pebs.ldlat))
        .flag("pebs-ldlat", "CYCLES")
        .help("PEBS: load-latency threshold in cycles [default: {default}]")
        .doc("load-latency threshold in cycles"),
    Setting::bool("pebs.stores", field!(pebs.stores))
        .flag("pebs-stores", "BOOL")
        .help("PEBS: also sample stores (mem-stores) [default: {default}]")
        .doc("also sample `mem-stores`"),
    Setting::int(
        "softdirty_interval_ms",
        10,
        60_000,
        field!(softdirty.interval_ms),
    )
    .flag("softdirty-interval-ms", "MS")
    .help("softdirty: time between passes over the pids [default: {default}]")
    .doc("softdirty: time between passes"),
    Setting::int(
        "softdirty_scan_budget_pages",
        1024,
        1 << 32,
        field!(softdirty.scan_budget_pages),
    )
    .flag("softdirty-scan-budget-pages", "PAGES")
    .help("softdirty: most pagemap entries read per second [default: {default}]")
    .doc("softdirty: most pagemap entries read per second (the interval stretches to stay within)"),
    Setting::int("damon_sample_us", 100, 500_000, field!(damon.sample_us))
        .flag("damon-sample-us", "US")
        .help("damon: sampling interval [default: {default}]")
        .allowed("{range}, <= `damon_aggr_us`")
        .doc("damon: sampling interval"),
    // A snapshot blocks for one aggregation interval; at most half a second keeps a stop within
    // the daemon's one-second wait, so the kdamond is always turned off.
    Setting::int("damon_aggr_us", 1000, 500_000, field!(damon.aggr_us))
        .flag("damon-aggr-us", "US")
        .help("damon: aggregation interval, also the snapshot interval [default: {default}]")
        .doc(
            "damon: aggregation interval, one snapshot each (at most 0.5 s so a stop is seen \
             within a second)",
        ),
    // DAMON itself needs at least 3 regions (damon_set_attrs() in mm/damon/core.c).
    Setting::int("damon_min_regions", 3, 1_000_000, field!(damon.min_regions))
        .flag("damon-min-regions", "N")
        .help("damon: fewest monitoring regions [default: {default}]")
        .allowed("{range}, <= `damon_max_regions`")
        .doc("damon: fewest monitoring regions"),
    Setting::int("damon_max_regions", 3, 1_000_000, field!(damon.max_regions))
        .flag("damon-max-regions", "N")
        .help("damon: most monitoring regions [default: {default}]")
        .doc("damon: most monitoring regions"),
    Setting::int("damon_max_samples", 1, 1 << 22, field!(damon.max_samples))
        .flag("damon-max-samples", "N")
        .help("damon: most samples one snapshot emits [default: {default}]")
        .doc("damon: most samples one snapshot emits"),
    Setting::path("control_socket", CONTROL_SOCKET)
        .flag("control-socket", "PATH")
        .alias("socket")
        .help("Control socket for pghotctl; an empty path turns it off [default: {default}]")
        .allowed("a path; `\"\"` turns it off")
        .doc("the socket pghotctl talks to (`--socket` on both binaries)"),
    Setting::path("readonly_socket", READONLY_SOCKET)
        .flag("readonly-socket", "PATH")
        .help(
            "A second socket that answers status, stats, top and config get but refuses every \
             change, whoever asks; mode 0660, group pghot-monitor [default: {default}]",
        )
        .default_is("off")
        .allowed("a path; `\"\"` is off")
        .doc(
            "a second socket for monitoring (mode 0660, group `pghot-monitor`): it answers \
             `status`, `stats`, `top` and `config get` and refuses every change, even to root \
             and members of `pghot`, so opening it grants no control",
        ),
    Setting::text("metrics_listen", METRICS_LISTEN)
        .flag("metrics-listen", "ADDR:PORT")
        .help("Serve OpenMetrics on this address, e.g. 127.0.0.1:9464 [default: {default}]")
        .default_is("off")
        .allowed("`ADDR:PORT`; `\"\"` is off")
        .doc("serve OpenMetrics on `http://ADDR:PORT/metrics`"),
    Setting::paths("cgroups", super::scope::CGROUPS)
        .flag("cgroup", "PATH")
        .help(
            "Manage the processes of this cgroup (v2 or v1 directory) and its descendants, \
             followed as they come and go; repeat for several; relative paths are under \
             /sys/fs/cgroup",
        )
        .default_is("none")
        .allowed("cgroup v2/v1 directories (relative: under `/sys/fs/cgroup`)")
        .doc("manage their processes and their descendants'"),
    Setting::text("comm", super::scope::COMM)
        .flag("comm", "REGEX")
        .help("Manage only processes whose command name (/proc/PID/comm) matches this regex")
        .default_is("none")
        .allowed("a regex; `\"\"` is none")
        .doc("manage only processes whose command name matches"),
    Setting::int("pid_namespace_of", PID.0, PID.1, field!(pid_namespace_of))
        .flag("pid-namespace-of", "PID")
        .help("Read --pid values inside the pid namespace of this process (e.g. a container's)")
        .default_is("none")
        .doc("read `pids` inside that process's pid namespace"),
    Setting::int("scope_refresh_ms", 10, 600_000, field!(scope_refresh_ms))
        .flag("scope-refresh-ms", "MS")
        .help(
            "How often the managed set is re-read from /proc and the cgroups; with pids \
             alone, it is re-read when one of them exits instead [default: {default}]",
        )
        .doc("how often the managed set is re-read (with `pids` alone: when one exits instead)"),
    Setting::switch("admission.split", field!(admission.split))
        .flag("split-thp", "")
        .help("Split THPs to the hot mTHP size before promoting (TierBPF); needs debugfs")
        .doc("split THPs to the hot mTHP size before promoting (needs debugfs)"),
    Setting::int(
        "admission.split_flat_entropy_pct",
        1,
        100,
        field!(admission.split_flat_entropy_pct),
    )
    .flag("split-flat-entropy-pct", "PCT")
    .help(
        "Normalized entropy (percent) at or above which THPs are promoted whole [default: \
             {default}]",
    )
    .doc(
        "normalized entropy (percent) at or above which a histogram is flat: the THP is \
             promoted whole",
    ),
    Setting::int(
        "admission.split_coverage_pct",
        1,
        100,
        field!(admission.split_coverage_pct),
    )
    .flag("split-coverage-pct", "PCT")
    .help("Share of samples the hot subpages hold (percent) [default: {default}]")
    .doc("share of samples the hot subpages hold (percent)"),
    Setting::int(
        "admission.split_heat_density_pct",
        1,
        100,
        field!(admission.split_heat_density_pct),
    )
    .flag("split-heat-density-pct", "PCT")
    .help("Share of hot subpages a chosen subfolio needs (percent) [default: {default}]")
    .doc("share of hot subpages a chosen subfolio needs (percent)"),
    Setting::int(
        "admission.split_min_samples",
        1,
        1 << 30,
        field!(admission.split_min_samples),
    )
    .flag("split-min-samples", "N")
    .help("Samples a process's histogram needs before it decides [default: {default}]")
    .doc(
        "samples a process's histogram needs before it decides; until then its THP candidates \
             wait",
    ),
    Setting::int(
        "admission.split_contention_MBps",
        0,
        1 << 30,
        field!(admission.split_contention_mbps),
    )
    .flag("split-contention-MBps", "MBPS")
    .help(
        "Split only while the slow node's estimated bandwidth reaches this; 0 is always \
             [default: {default}]",
    )
    .doc("split only while the slow node's estimated bandwidth reaches this; 0 is always"),
    Setting::text("admission.split_histogram", SPLIT_HISTOGRAM)
        .flag("split-histogram", "folded|per_folio|auto")
        .help(
            "Which subpage histogram a THP's split decision reads: the process's folded one \
             (TierBPF), the THP's own from the hotness table, or its own where it holds enough \
             samples [default: {default}]",
        )
        .allowed("`\"folded\"`, `\"per_folio\"`, `\"auto\"`")
        .doc(
            "which subpage histogram a THP's split decision reads: `\"folded\"` is the \
             paper's per-process histogram folded by offset, `\"per_folio\"` the THP's own \
             map from the hotness table's per-page counts (a THP with too few samples waits), \
             `\"auto\"` its own map where it holds enough samples, else the folded one when \
             that one splits and the THP's own samples fit it",
        ),
    Setting::int(
        "admission.sample_period",
        1,
        1 << 32,
        field!(admission.sample_period),
    )
    .flag("admission-sample-period", "N")
    .help("Accesses one sample stands for, for the bandwidth estimate [default: {default}]")
    .default_is("the perf sources' own sampling period, followed live; 1 for the other sources")
    .doc(
        "accesses one sample stands for, for the bandwidth estimate (samples/s x \
             `sample_period` x 64 B)",
    ),
    Setting::ints(
        "admission.full_duplex_nodes",
        NODE.0,
        NODE.1,
        field!(admission.full_duplex_nodes),
    )
    .flag("full-duplex-node", "NODE")
    .help("A lower-tier node on a full-duplex link (CXL); repeat for several")
    .default_is("none")
    .allowed("lower-tier memory nodes")
    .doc("lower-tier nodes on a full-duplex link (CXL), where duplex-aware admission applies"),
    // Below 50 % "dominant" would call both directions dominant at once.
    Setting::int(
        "admission.duplex_dominant_pct",
        51,
        100,
        field!(admission.duplex_dominant_pct),
    )
    .flag("duplex-dominant-pct", "PCT")
    .help(
        "Share of loads (stores) that makes a node's traffic read (write) dominant [default: \
             {default}]",
    )
    .doc("share of loads (stores) that makes a node's traffic read (write) dominant"),
    Setting::int(
        "admission.duplex_write_heavy_pct",
        1,
        100,
        field!(admission.duplex_write_heavy_pct),
    )
    .flag("duplex-write-heavy-pct", "PCT")
    .help("Write ratio (percent) at or above which a page is write-heavy [default: {default}]")
    .doc("write ratio (percent) at or above which a page is write-heavy"),
    Setting::int(
        "admission.duplex_filter_KiB",
        1,
        1 << 20,
        field!(admission.duplex_filter_kib),
    )
    .flag("duplex-filter-KiB", "KIB")
    .help("Size of each of the two Bloom filters, KiB [default: {default}]")
    .doc("size of each of the two counting Bloom filters, KiB"),
];

/// perf rings are 2^n data pages (perf_mmap() in kernel/events/core.c refuses other sizes).
fn power_of_two(pages: i64) -> Result<(), String> {
    if (pages as u64).is_power_of_two() {
        Ok(())
    } else {
        Err(format!(
            "{pages} is not a power of two (perf rings are 2^n pages)"
        ))
    }
}

fn path_text(p: &Path) -> Written {
    Written::Text(p.display().to_string())
}

const SOURCES: Field = Field {
    get: |c| {
        Some(Written::Texts(
            c.sources.iter().map(|s| s.to_string()).collect(),
        ))
    },
    set: |c, value| {
        c.sources = texts(value)?
            .iter()
            .map(|spec| SourceSpec::parse(spec).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        Ok(())
    },
    copy: |from, to| to.sources = from.sources.clone(),
};

const SYSFS_ROOT: Field = Field {
    get: |c| Some(path_text(&c.sysfs_root)),
    set: |c, value| {
        let dir = PathBuf::from(text(value)?);
        if !dir.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        c.sysfs_root = dir;
        Ok(())
    },
    copy: |from, to| to.sysfs_root = from.sysfs_root.clone(),
};

/// A number, or "auto": the adaptive controller sets the period live (`ibs_period_auto`).
const IBS_PERIOD: Field = Field {
    get: |c| {
        Some(if c.ibs_period_auto {
            Written::Text("auto".into())
        } else {
            Written::Int(c.ibs.period as i64)
        })
    },
    set: |c, value| {
        match value {
            Written::Int(n) => {
                c.ibs.period = u64::try_from(n).map_err(|e| e.to_string())?;
                c.ibs_period_auto = false;
            }
            // The kind admits only its word.
            _ => c.ibs_period_auto = true,
        }
        Ok(())
    },
    copy: |from, to| {
        to.ibs.period = from.ibs.period;
        to.ibs_period_auto = from.ibs_period_auto;
    },
};

/// An empty path turns the socket off; `config get` shows it as null.
const CONTROL_SOCKET: Field = Field {
    get: |c| c.control_socket.as_deref().map(path_text),
    set: |c, value| {
        c.control_socket = optional_path(value)?;
        Ok(())
    },
    copy: |from, to| to.control_socket = from.control_socket.clone(),
};

/// A path where `""` means none (a socket turned off).
fn optional_path(value: Written) -> Result<Option<PathBuf>, String> {
    let path = text(value)?;
    Ok((!path.is_empty()).then(|| PathBuf::from(path)))
}

/// Like the control socket: an empty path is off.
const READONLY_SOCKET: Field = Field {
    get: |c| c.readonly_socket.as_deref().map(path_text),
    set: |c, value| {
        c.readonly_socket = optional_path(value)?;
        Ok(())
    },
    copy: |from, to| to.readonly_socket = from.readonly_socket.clone(),
};

const CPU_POLICY: Field = Field {
    get: |c| Some(Written::Text(c.cpu_policy.name().into())),
    set: |c, value| {
        c.cpu_policy = CpuPolicy::parse(&text(value)?)?;
        Ok(())
    },
    copy: |from, to| to.cpu_policy = from.cpu_policy,
};

const CONFLICTS: Field = Field {
    get: |c| Some(Written::Text(c.conflicts.name().into())),
    set: |c, value| {
        c.conflicts = ConflictPolicy::parse(&text(value)?)?;
        Ok(())
    },
    copy: |from, to| to.conflicts = from.conflicts,
};

const SPLIT_HISTOGRAM: Field = Field {
    get: |c| Some(Written::Text(c.admission.split_histogram.name().into())),
    set: |c, value| {
        c.admission.split_histogram = SplitHistogram::parse(&text(value)?)?;
        Ok(())
    },
    copy: |from, to| to.admission.split_histogram = from.admission.split_histogram,
};

const METRICS_LISTEN: Field = Field {
    get: |c| c.metrics_listen.map(|a| Written::Text(a.to_string())),
    set: |c, value| {
        let addr = text(value)?;
        c.metrics_listen = match addr.as_str() {
            "" => None,
            addr => Some(
                addr.parse()
                    .map_err(|_| format!("'{addr}' is not ADDR:PORT (e.g. 127.0.0.1:9464)"))?,
            ),
        };
        Ok(())
    },
    copy: |from, to| to.metrics_listen = from.metrics_listen,
};
