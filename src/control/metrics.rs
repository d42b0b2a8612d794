//! The OpenMetrics endpoint (`metrics_listen`, off by default), served by `pghot-metrics`.
//!
//! Names follow the Prometheus conventions (<https://prometheus.io/docs/practices/naming/>):
//! a `pghotd_` prefix, base units as the last word (`_bytes`, `_seconds`, with a `# UNIT`
//! line), `_total` on counters, and what tells series apart (node, source, drop reason,
//! promotion outcome) as a label, never in the name. Where each registry counter goes is
//! defined next to the counter (`stats::Counter::metric`); its HELP is the counter's doc
//! comment. README.md's metrics table, generated from the same definitions, maps the vmstat
//! names of `pghotctl stats` to these. Per-process counters are
//! `pghotd_pid_<field>_total{pid,comm}`; gauges have no suffix but their unit
//! (`pghotd_tracked_pages`, `pghotd_queue_depth{node}`, `pghotd_conflicts{kind}`, ...);
//! `pghotd_build_info` and the `process_*` metrics are those every Prometheus client exports.
//! Label values are escaped (`\\`, `\"`, `\n`), since comm names are chosen by the processes.
//!
//! The server (`control/http.rs`) is deliberately small: HTTP/1.0-style, one request per
//! connection, every connection multiplexed on the metrics thread with poll(2) (a scrape is one
//! snapshot, well under a millisecond plus a table scan). A client has two seconds for its whole
//! request head and ten to take the answer; at most 32 connections are held.

use std::fmt::Write as _;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;

use super::http::{self, Head, MAX_HEAD_BYTES};
use super::plane::ControlPlane;
use super::{ControlError, ServiceThread};
use crate::sample::SourceKind;
use crate::stats::{self, Counter, Metric, Unit};
use pghot_protocol::Snapshot;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Escapes a label value or HELP text (OpenMetrics' `escaped-string`).
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A doc comment as one line: its lines joined, runs of spaces made one.
pub fn one_line(doc: &str) -> String {
    doc.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One registry counter as exported: the name `pghotctl stats` shows and where it goes.
struct Series {
    /// The vmstat name (`pgpromote_bytes_node0`).
    stats: String,
    /// The family name without `_total` (`pghotd_promoted_bytes`).
    family: String,
    unit: Unit,
    /// The family's HELP: the counter's doc comment, or the shared family's.
    help: &'static str,
    /// What the series itself counts (README.md): the counter's doc comment.
    doc: &'static str,
    label: Option<(&'static str, String)>,
}

/// Every registry counter as a series: the global counters, the per-source sample counts and,
/// for each of `nodes`, the per-node counters.
fn registry_series<N: std::fmt::Display>(nodes: &[N]) -> Vec<Series> {
    let mut out = Vec::new();
    for &c in Counter::ALL {
        out.push(match c.metric() {
            Metric::Own { name, unit, label } => Series {
                stats: c.name().to_string(),
                family: stats::family_name(name, unit),
                unit,
                help: c.help(),
                doc: c.help(),
                label: label.map(|(k, v)| (k, v.to_string())),
            },
            Metric::Of(family, value) => Series {
                stats: c.name().to_string(),
                family: stats::family_name(family.name, family.unit),
                unit: family.unit,
                help: family.help,
                doc: c.help(),
                label: Some((family.label, value.to_string())),
            },
        });
    }
    let f = &stats::SOURCE_SAMPLES;
    for &kind in SourceKind::ALL {
        out.push(Series {
            stats: stats::source_samples_name(kind),
            family: stats::family_name(f.name, f.unit),
            unit: f.unit,
            help: f.help,
            doc: f.help,
            label: Some((f.label, kind.name().to_string())),
        });
    }
    for per in stats::PER_NODE {
        let f = per.family;
        for node in nodes {
            out.push(Series {
                stats: per.stats_name(node),
                family: stats::family_name(f.name, f.unit),
                unit: f.unit,
                help: f.help,
                doc: f.help,
                label: Some((f.label, node.to_string())),
            });
        }
    }
    out
}

/// `series` by family, each family where its first series is.
fn by_family(series: &[Series]) -> Vec<Vec<&Series>> {
    let mut families: Vec<Vec<&Series>> = Vec::new();
    for s in series {
        match families.iter_mut().find(|f| f[0].family == s.family) {
            Some(f) => f.push(s),
            None => families.push(vec![s]),
        }
    }
    families
}

/// A counter's value in its exported unit: nanoseconds as seconds, exactly.
fn value_text(unit: Unit, v: u64) -> String {
    match unit {
        Unit::Nanoseconds => format!("{}.{:09}", v / 1_000_000_000, v % 1_000_000_000),
        Unit::Count | Unit::Bytes => v.to_string(),
    }
}

struct Writer {
    out: String,
}

impl Writer {
    /// The metadata of a family: `unit` is `""` or the last word of `name`.
    fn family(&mut self, name: &str, kind: &str, unit: &str, help: &str) {
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        if !unit.is_empty() {
            let _ = writeln!(self.out, "# UNIT {name} {unit}");
        }
        let _ = writeln!(self.out, "# HELP {name} {}", escape(&one_line(help)));
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// Renders a snapshot as an OpenMetrics text exposition, `# EOF` included, with this
/// process's own CPU time and memory.
pub fn render(snap: &Snapshot) -> String {
    let mut w = Writer {
        out: String::with_capacity(16384),
    };
    w.counters(snap);
    w.gauges(snap);
    w.conflicts(snap);
    w.nodes(snap);
    w.pids(snap);
    w.build_info();
    w.process(read_process().as_ref());
    w.out.push_str("# EOF\n");
    w.out
}

/// What `/proc/self/stat` says of pghotd: CPU time and memory, as Prometheus clients export
/// them (`process_cpu_seconds_total` is utime + stime over the clock tick, the resident set is
/// its pages times the page size).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Process {
    cpu_seconds: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
}

/// Reads `/proc/self/stat` (a regular file, bounded); `None` if it cannot be read or parsed,
/// and the scrape goes on without the `process_*` metrics.
fn read_process() -> Option<Process> {
    let stat: procfs::process::Stat =
        crate::safefs::read_proc(Path::new("/proc/self/stat"), crate::safefs::limit::STAT)
            .map_err(|e| tracing::debug!("metrics: reading /proc/self/stat: {e}"))
            .ok()?;
    let ticks = procfs::ticks_per_second().max(1);
    Some(Process {
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks as f64,
        resident_bytes: stat.rss.saturating_mul(procfs::page_size()),
        virtual_bytes: stat.vsize,
    })
}

/// The families of a snapshot, in the order `render` writes them.
impl Writer {
    /// The registry's counters, by family; the per-node ones for every top-tier node, and for
    /// any other node something was promoted to.
    fn counters(&mut self, snap: &Snapshot) {
        // A destination's series exists from the start (a rate over a series that appears
        // with its first promotion misses that promotion).
        let nodes: Vec<_> = snap
            .nodes
            .iter()
            .filter(|n| {
                n.tier == "top"
                    || stats::PER_NODE
                        .iter()
                        .any(|per| snap.counter(&per.stats_name(n.node)) != 0)
            })
            .map(|n| n.node)
            .collect();
        let series = registry_series(&nodes);
        for family in by_family(&series) {
            let first = family[0];
            self.family(&first.family, "counter", first.unit.name(), first.help);
            let total = format!("{}_total", first.family);
            for s in family {
                let labels: Vec<(&str, &str)> =
                    s.label.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let value = value_text(s.unit, snap.counter(&s.stats));
                self.sample(&total, &labels, value);
            }
        }
    }

    /// The table's size, the pause switch and the uptime.
    fn gauges(&mut self, snap: &Snapshot) {
        let gauges: [(&str, &str, u64); 3] = [
            (
                "pghotd_tracked_pages",
                "pages in the hotness table",
                snap.tracked_pages,
            ),
            (
                "pghotd_max_tracked_pages",
                "hotness table bound (max_tracked_pages)",
                snap.max_tracked_pages,
            ),
            (
                "pghotd_paused",
                "1 while promotion is paused",
                u64::from(snap.paused),
            ),
        ];
        for (name, help, value) in gauges {
            self.family(name, "gauge", "", help);
            self.sample(name, &[], value);
        }
        self.family(
            "pghotd_uptime_seconds",
            "gauge",
            "seconds",
            "seconds since pghotd started",
        );
        self.sample(
            "pghotd_uptime_seconds",
            &[],
            format!("{:.3}", snap.uptime_s),
        );
        // Only while there is one: a 0 would read as "every page qualifies".
        if let Some(floor) = snap.heat_floor_samples {
            self.family(
                "pghotd_heat_floor",
                "gauge",
                "",
                "heat in samples a page needs to be promoted under hot_share_pct (halves every \
                 heat_halflife_ms; of the pages at its whole count, the share its fraction \
                 leaves pass); absent while hot_share_pct is off or nothing is ranked yet",
            );
            self.sample("pghotd_heat_floor", &[], format!("{floor:.3}"));
        }
        if let Some(short) = snap.fast_nodes_short {
            self.family(
                "pghotd_fast_nodes_short",
                "gauge",
                "",
                "fast nodes short of hot_share_room_mb at their last reading (hot_share_pct \
                 acts while one is); absent while hot_share_room_mb is off",
            );
            self.sample("pghotd_fast_nodes_short", &[], short.to_string());
        }
    }

    /// One sample per kind of competing promoter: 1 while one is found, else 0.
    fn conflicts(&mut self, snap: &Snapshot) {
        self.family(
            "pghotd_conflicts",
            "gauge",
            "",
            "competing promoters of a kind found at the last check (see pghotctl status)",
        );
        for kind in pghot_protocol::ConflictKind::ALL {
            let found = snap.conflicts.iter().filter(|c| c.kind == kind).count();
            self.sample("pghotd_conflicts", &[("kind", kind.name())], found);
        }
    }

    /// Per node: the migrator's queue depth, memory size and free memory.
    fn nodes(&mut self, snap: &Snapshot) {
        self.family(
            "pghotd_queue_depth",
            "gauge",
            "",
            "candidates waiting for a lower-tier node's migrator",
        );
        for n in &snap.nodes {
            if let Some(d) = n.queue_depth {
                self.sample("pghotd_queue_depth", &[("node", &n.node.to_string())], d);
            }
        }
        // Samples follow their own family's # TYPE line.
        type Field = fn(&pghot_protocol::NodeRow) -> Option<u64>;
        let memory: [(&str, &str, Field); 2] = [
            (
                "pghotd_node_memory_size_bytes",
                "memory of a node (MemTotal)",
                |n| Some(n.mem_total_kb),
            ),
            (
                "pghotd_node_memory_free_bytes",
                "free memory of a node (MemFree)",
                |n| n.mem_free_kb,
            ),
        ];
        for (name, help, kb) in memory {
            self.family(name, "gauge", "bytes", help);
            for n in &snap.nodes {
                let node = n.node.to_string();
                let labels = [("node", node.as_str()), ("tier", n.tier.as_str())];
                if let Some(kb) = kb(n) {
                    self.sample(name, &labels, kb.saturating_mul(1024));
                }
            }
        }
    }

    /// Per process: its counters and its table gauges, labelled by pid and comm.
    fn pids(&mut self, snap: &Snapshot) {
        type Field = fn(&pghot_protocol::PidRow) -> u64;
        let pid_counters: [(&str, Unit, &str, Field); 6] = [
            (
                "samples",
                Unit::Count,
                "samples of the process that passed the filters",
                |p| p.counts.samples,
            ),
            (
                "recorded",
                Unit::Count,
                "lower-tier samples of the process recorded into the hotness table",
                |p| p.counts.recorded,
            ),
            (
                "candidates",
                Unit::Count,
                "promotion candidates of the process",
                |p| p.counts.candidates,
            ),
            (
                "promoted_pages",
                Unit::Count,
                "pages of the process promoted",
                |p| p.counts.promoted_pages,
            ),
            (
                "promoted",
                Unit::Bytes,
                "bytes of the process promoted",
                |p| p.counts.promoted_bytes,
            ),
            (
                "promote_failures",
                Unit::Count,
                "pages of the process whose promotion failed (any reason but the watermark)",
                |p| p.counts.fail,
            ),
        ];
        let pid_gauges: [(&str, &str, Field); 3] = [
            (
                "tracked_pages",
                "pages of the process in the hotness table",
                |p| p.tracked_pages,
            ),
            (
                "hot_pages",
                "pages of the process at or above freq_threshold",
                |p| p.hot,
            ),
            (
                "hot_slow_pages",
                "hot pages of the process on a lower tier",
                |p| p.hot_slow,
            ),
        ];
        let labels = |p: &pghot_protocol::PidRow| (p.pid.to_string(), p.comm.clone());
        for (field, unit, help, get) in pid_counters {
            let family = stats::family_name(&format!("pid_{field}"), unit);
            self.family(&family, "counter", unit.name(), help);
            for p in &snap.pids {
                let (pid, comm) = labels(p);
                self.sample(
                    &format!("{family}_total"),
                    &[("pid", &pid), ("comm", &comm)],
                    get(p),
                );
            }
        }
        for (field, help, get) in pid_gauges {
            let family = format!("pghotd_pid_{field}");
            self.family(&family, "gauge", "", help);
            for p in &snap.pids {
                let (pid, comm) = labels(p);
                self.sample(&family, &[("pid", &pid), ("comm", &comm)], get(p));
            }
        }
    }

    /// `pghotd_build_info`: an OpenMetrics info family, one sample of value 1.
    fn build_info(&mut self) {
        self.family(
            "pghotd_build",
            "info",
            "",
            "the pghotd build: its version and target architecture",
        );
        self.sample(
            "pghotd_build_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("arch", std::env::consts::ARCH),
            ],
            1,
        );
    }

    /// The `process_*` metrics of Prometheus clients; none when `/proc/self/stat` failed.
    fn process(&mut self, process: Option<&Process>) {
        let Some(p) = process else {
            return;
        };
        self.family(
            "process_cpu_seconds",
            "counter",
            "seconds",
            "Total user and system CPU time spent in seconds.",
        );
        self.sample("process_cpu_seconds_total", &[], p.cpu_seconds);
        self.family(
            "process_resident_memory_bytes",
            "gauge",
            "bytes",
            "Resident memory size in bytes.",
        );
        self.sample("process_resident_memory_bytes", &[], p.resident_bytes);
        self.family(
            "process_virtual_memory_bytes",
            "gauge",
            "bytes",
            "Virtual memory size in bytes.",
        );
        self.sample("process_virtual_memory_bytes", &[], p.virtual_bytes);
    }
}

/// README.md's metrics table: every name of `pghotctl stats` (per node and per source with
/// `N` and each source) and the metric it is exported as.
pub fn readme_table() -> String {
    let cell = |t: &str| t.replace('|', "\\|");
    let mut out =
        String::from("| `pghotctl stats` | metric | labels | meaning |\n|---|---|---|---|\n");
    for s in registry_series(&["N"]) {
        let label = s
            .label
            .as_ref()
            .map_or(String::new(), |(k, v)| format!("`{k}=\"{v}\"`"));
        let _ = writeln!(
            out,
            "| `{}` | `{}_total` | {label} | {} |",
            s.stats,
            s.family,
            cell(&one_line(s.doc))
        );
    }
    out
}

/// The marker README.md's generated metrics table starts after, and the one it ends before.
const README_BEGIN: &str = "<!-- metrics: counters ";
const README_END: &str = "<!-- end metrics -->";

/// `readme` with its metrics table replaced by what the definitions say now.
pub fn readme_with_table(readme: &str) -> String {
    crate::config::docs::replace_generated(readme, README_BEGIN, README_END, |_| readme_table())
}

/// Binds the metrics address before any thread starts.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, ControlError> {
    TcpListener::bind(addr).map_err(|source| ControlError::MetricsBind { addr, source })
}

pub struct MetricsServer(ServiceThread);

impl MetricsServer {
    pub fn spawn(listener: TcpListener, plane: Arc<ControlPlane>) -> io::Result<MetricsServer> {
        listener.set_nonblocking(true)?;
        ServiceThread::spawn("pghot-metrics", move |stop| {
            http::serve(&listener, &stop, &|head| respond(head, &plane));
        })
        .map(MetricsServer)
    }

    /// Stops the thread (within 100 ms) and closes every connection, whatever its client does.
    pub fn shutdown(self) {
        self.0.shutdown();
    }
}

/// The whole response to a request head: status line, headers and body.
fn respond(head: &Head, plane: &ControlPlane) -> Vec<u8> {
    let (status, ctype, body) = match *head {
        Head::Request {
            method: "GET",
            target: "/metrics" | "/",
        } => (
            "200 OK",
            CONTENT_TYPE,
            render(&plane.snapshot(usize::MAX, None)),
        ),
        Head::Request { method: "GET", .. } => {
            ("404 Not Found", "text/plain", "try /metrics\n".to_string())
        }
        Head::Request { .. } => (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n".to_string(),
        ),
        Head::TooLarge => (
            "431 Request Header Fields Too Large",
            "text/plain",
            format!("request head over {MAX_HEAD_BYTES} bytes\n"),
        ),
        Head::Bad | Head::Incomplete => (
            "400 Bad Request",
            "text/plain",
            "GET /metrics\n".to_string(),
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pidstats::PidCounts;
    use pghot_protocol::{NodeRow, PidRow};

    fn node(node: u16, tier: &str) -> NodeRow {
        NodeRow {
            node,
            tier: tier.into(),
            cpus: 0,
            mem_total_kb: 4,
            mem_free_kb: Some(1),
            queue_depth: (tier == "lower").then_some(9),
        }
    }

    #[test]
    fn names_labels_and_escaping() {
        let snap = Snapshot {
            counters: [
                ("pgpromote_success".to_string(), 7),
                ("pgpromote_fail_shared".to_string(), 3),
                ("pghot_drop_pid_zero".to_string(), 4),
                ("hwhint_total_events".to_string(), 12),
                ("source_ibs_samples".to_string(), 8),
                ("softdirty_scan_ns".to_string(), 1_500_000_001),
                ("pgpromote_success_node0".to_string(), 5),
                ("pgpromote_bytes_node0".to_string(), 20480),
                ("pgpromote_success_node1".to_string(), 2),
            ]
            .into_iter()
            .collect(),
            uptime_s: 1.5,
            paused: true,
            dry_run: false,
            sources: vec![],
            promote_rate_limit_mbps: 1,
            tracked_pages: 3,
            max_tracked_pages: 1024,
            heat_floor_samples: Some(2.5),
            fast_nodes_short: Some(1),
            nodes: vec![node(0, "top"), node(1, "lower"), node(2, "lower")],
            pids: vec![PidRow {
                pid: 42,
                comm: "a\"b\\c".into(),
                counts: PidCounts {
                    samples: 11,
                    ..PidCounts::default()
                },
                tracked_pages: 1,
                hot: 1,
                hot_slow: 0,
            }],
            pids_omitted: 0,
            ranges: None,
            admission: None,
            conflicts: vec![pghot_protocol::Conflict {
                kind: pghot_protocol::ConflictKind::NumaBalancing,
                detail: "kernel.numa_balancing = 2".into(),
                remedy: "sysctl kernel.numa_balancing=0".into(),
            }],
        };
        let text = render(&snap);
        for line in [
            "# TYPE pghotd_events counter",
            "# HELP pghotd_events Every sample handed to pghotd by any source, and every event a \
             source dropped or lost before making a sample of it: total = useful + dropped.",
            "pghotd_events_total 12",
            "# TYPE pghotd_promote_outcomes counter",
            "pghotd_promote_outcomes_total{outcome=\"success\"} 7",
            "pghotd_promote_failures_total{reason=\"shared\"} 3",
            "pghotd_dropped_samples_total{reason=\"pid_zero\"} 4",
            "pghotd_source_samples_total{source=\"ibs\"} 8",
            "pghotd_source_samples_total{source=\"pebs\"} 0",
            "# UNIT pghotd_source_scan_seconds seconds",
            "pghotd_source_scan_seconds_total{source=\"softdirty\"} 1.500000001",
            "# TYPE pghotd_promoted_bytes counter",
            "# UNIT pghotd_promoted_bytes bytes",
            "pghotd_promoted_bytes_total{node=\"0\"} 20480",
            "pghotd_promoted_pages_total{node=\"0\"} 5",
            // Not a top-tier node, but something was promoted there.
            "pghotd_promoted_pages_total{node=\"1\"} 2",
            "pghotd_queue_depth{node=\"2\"} 9",
            "pghotd_paused 1",
            "# TYPE pghotd_heat_floor gauge",
            "pghotd_heat_floor 2.500",
            "# TYPE pghotd_fast_nodes_short gauge",
            "pghotd_fast_nodes_short 1",
            "# TYPE pghotd_conflicts gauge",
            "pghotd_conflicts{kind=\"numa_balancing\"} 1",
            "pghotd_conflicts{kind=\"pghotd\"} 0",
            "pghotd_node_memory_free_bytes{node=\"2\",tier=\"lower\"} 1024",
            "pghotd_pid_samples_total{pid=\"42\",comm=\"a\\\"b\\\\c\"} 11",
            "# TYPE pghotd_build info",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        // A lower-tier node nothing was promoted to has no promotion series.
        assert!(!text.contains("_total{node=\"2\"}"), "{text}");
        assert!(text.contains("\npghotd_build_info{version=\""), "{text}");
        assert!(text.contains("\nprocess_cpu_seconds_total "), "{text}");
        assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    /// Every name of a registry snapshot is exported, as one series, and no two series share a
    /// family and label.
    #[test]
    fn every_registry_counter_is_one_series() {
        let stats = crate::stats::Stats::new();
        stats.add_promoted(0, 1, 4096);
        stats.add_promoted(3, 1, 4096);
        let names = stats.snapshot().counters;
        let series = registry_series(&[0, 3]);
        let mut exported: Vec<&str> = series.iter().map(|s| s.stats.as_str()).collect();
        exported.sort_unstable();
        let want: Vec<&str> = names.keys().map(String::as_str).collect();
        assert_eq!(exported, want);
        let mut keys: Vec<(&str, Option<&(&str, String)>)> = series
            .iter()
            .map(|s| (s.family.as_str(), s.label.as_ref()))
            .collect();
        keys.sort_unstable();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "a family and label twice");
        // Every shared family has its counters.
        for f in stats::FAMILIES {
            let name = stats::family_name(f.name, f.unit);
            assert!(series.iter().any(|s| s.family == name), "{name} unused");
        }
        // A family of one counter's own is no other counter's family.
        for family in by_family(&series) {
            let own = family
                .iter()
                .filter(|s| {
                    Counter::ALL
                        .iter()
                        .any(|c| c.name() == s.stats && matches!(c.metric(), Metric::Own { .. }))
                })
                .count();
            assert!(own == 0 || family.len() == 1, "{}", family[0].family);
        }
    }

    /// README.md's metrics table is the generated one; `PGHOTD_UPDATE_README=1` rewrites it.
    #[test]
    fn the_readme_metrics_table_is_generated_from_the_counters() {
        let readme =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
                .unwrap();
        assert!(
            readme.contains(README_BEGIN),
            "README.md has no metrics table"
        );
        crate::config::docs::assert_readme_generated(
            readme_with_table,
            "metrics table",
            "src/stats.rs",
            "control::metrics::tests::the_readme",
        );
    }

    #[test]
    fn process_metrics_come_from_proc_self_stat() {
        let p = read_process().expect("/proc/self/stat");
        assert!(
            p.resident_bytes > 0 && p.virtual_bytes >= p.resident_bytes,
            "{p:?}"
        );
        assert!(p.cpu_seconds >= 0.0, "{p:?}");
    }
}
