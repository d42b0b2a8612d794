//! The OpenMetrics endpoint (`metrics_listen`, off by default), served by `pghot-metrics`.
//!
//! Names: every registry counter `<name>` is `pghotd_<name>_total`; the per-node counters
//! `<name>_node<N>` are `pghotd_<name>_node_total{node="N"}`; per-process counters are
//! `pghotd_pid_<field>_total{pid,comm}` with the field names of `stats --json`; gauges have no
//! suffix (`pghotd_tracked_pages`, `pghotd_queue_depth{node}`, `pghotd_conflicts{kind}`, ...).
//! Label values are escaped (`\\`, `\"`, `\n`), since comm names are chosen by the processes.
//!
//! The server (`control/http.rs`) is deliberately small: HTTP/1.0-style, one request per
//! connection, every connection multiplexed on the metrics thread with poll(2) (a scrape is one
//! snapshot, well under a millisecond plus a table scan). A client has two seconds for its whole
//! request head and ten to take the answer; at most 32 connections are held.

use std::fmt::Write as _;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use super::http::{self, Head, MAX_HEAD_BYTES};
use super::plane::ControlPlane;
use super::{ControlError, ServiceThread};
use pghot_protocol::Snapshot;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Escapes a label value.
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

/// Splits `pgpromote_bytes_node3` into (`pgpromote_bytes_node`, 3).
fn node_suffix(name: &str) -> Option<(&str, &str)> {
    let i = name.rfind("_node")? + "_node".len();
    let digits = &name[i..];
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then(|| (&name[..i], digits))
}

struct Writer {
    out: String,
}

impl Writer {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        let _ = writeln!(self.out, "# HELP {name} {help}");
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

/// Renders a snapshot as an OpenMetrics text exposition, `# EOF` included.
pub fn render(snap: &Snapshot) -> String {
    let mut w = Writer {
        out: String::with_capacity(8192),
    };
    w.counters(snap);
    w.gauges(snap);
    w.conflicts(snap);
    w.nodes(snap);
    w.pids(snap);
    w.out.push_str("# EOF\n");
    w.out
}

/// The families of a snapshot, in the order `render` writes them.
impl Writer {
    /// The registry's counters; `<name>_node<N>` ones as one family per name, by node.
    fn counters(&mut self, snap: &Snapshot) {
        let mut per_node: std::collections::BTreeMap<&str, Vec<(&str, u64)>> = Default::default();
        for (name, &value) in &snap.counters {
            if let Some((base, node)) = node_suffix(name) {
                per_node.entry(base).or_default().push((node, value));
                continue;
            }
            let family = format!("pghotd_{name}");
            self.family(&family, "counter", &format!("pghotd counter {name}"));
            self.sample(&format!("{family}_total"), &[], value);
        }
        for (base, nodes) in &per_node {
            let family = format!("pghotd_{base}");
            self.family(
                &family,
                "counter",
                &format!("pghotd counter {base}<N>, by node"),
            );
            for (node, value) in nodes {
                self.sample(&format!("{family}_total"), &[("node", node)], value);
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
            self.family(name, "gauge", help);
            self.sample(name, &[], value);
        }
        self.family(
            "pghotd_uptime_seconds",
            "gauge",
            "seconds since pghotd started",
        );
        self.sample(
            "pghotd_uptime_seconds",
            &[],
            format!("{:.3}", snap.uptime_s),
        );
    }

    /// One sample per kind of competing promoter: 1 while one is found, else 0.
    fn conflicts(&mut self, snap: &Snapshot) {
        self.family(
            "pghotd_conflicts",
            "gauge",
            "competing promoters of a kind found at the last check (see pghotctl status)",
        );
        for kind in pghot_protocol::ConflictKind::ALL {
            let found = snap.conflicts.iter().filter(|c| c.kind == kind).count();
            self.sample("pghotd_conflicts", &[("kind", kind.name())], found);
        }
    }

    /// Per node: the migrator's queue depth, memory total and free.
    fn nodes(&mut self, snap: &Snapshot) {
        self.family(
            "pghotd_queue_depth",
            "gauge",
            "candidates waiting for a lower-tier node's migrator",
        );
        for n in &snap.nodes {
            if let Some(d) = n.queue_depth {
                self.sample("pghotd_queue_depth", &[("node", &n.node.to_string())], d);
            }
        }
        // Samples follow their own family's # TYPE line.
        self.family("pghotd_node_mem_total_bytes", "gauge", "memory of a node");
        for n in &snap.nodes {
            let node = n.node.to_string();
            let labels = [("node", node.as_str()), ("tier", n.tier.as_str())];
            self.sample(
                "pghotd_node_mem_total_bytes",
                &labels,
                n.mem_total_kb * 1024,
            );
        }
        self.family(
            "pghotd_node_mem_free_bytes",
            "gauge",
            "free memory of a node",
        );
        for n in &snap.nodes {
            let node = n.node.to_string();
            let labels = [("node", node.as_str()), ("tier", n.tier.as_str())];
            if let Some(free) = n.mem_free_kb {
                self.sample("pghotd_node_mem_free_bytes", &labels, free * 1024);
            }
        }
    }

    /// Per process: its counters and its table gauges, labelled by pid and comm.
    fn pids(&mut self, snap: &Snapshot) {
        type Field = fn(&pghot_protocol::PidRow) -> u64;
        let pid_counters: [(&str, Field); 6] = [
            ("samples", |p| p.counts.samples),
            ("recorded", |p| p.counts.recorded),
            ("candidates", |p| p.counts.candidates),
            ("promoted_pages", |p| p.counts.promoted_pages),
            ("promoted_bytes", |p| p.counts.promoted_bytes),
            ("fail", |p| p.counts.fail),
        ];
        let pid_gauges: [(&str, Field); 3] = [
            ("tracked_pages", |p| p.tracked_pages),
            ("hot", |p| p.hot),
            ("hot_slow", |p| p.hot_slow),
        ];
        let labels = |p: &pghot_protocol::PidRow| (p.pid.to_string(), p.comm.clone());
        for (field, get) in pid_counters {
            let family = format!("pghotd_pid_{field}");
            self.family(&family, "counter", &format!("per-process {field}"));
            for p in &snap.pids {
                let (pid, comm) = labels(p);
                self.sample(
                    &format!("{family}_total"),
                    &[("pid", &pid), ("comm", &comm)],
                    get(p),
                );
            }
        }
        for (field, get) in pid_gauges {
            let family = format!("pghotd_pid_{field}");
            self.family(&family, "gauge", &format!("per-process {field}"));
            for p in &snap.pids {
                let (pid, comm) = labels(p);
                self.sample(&family, &[("pid", &pid), ("comm", &comm)], get(p));
            }
        }
    }
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

    #[test]
    fn names_labels_and_escaping() {
        let snap = Snapshot {
            counters: [
                ("pgpromote_success".to_string(), 7),
                ("pgpromote_success_node0".to_string(), 5),
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
            nodes: vec![NodeRow {
                node: 2,
                tier: "lower".into(),
                cpus: 0,
                mem_total_kb: 4,
                mem_free_kb: Some(1),
                queue_depth: Some(9),
            }],
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
            "# TYPE pghotd_pgpromote_success counter",
            "pghotd_pgpromote_success_total 7",
            "# TYPE pghotd_pgpromote_success_node counter",
            "pghotd_pgpromote_success_node_total{node=\"0\"} 5",
            "pghotd_queue_depth{node=\"2\"} 9",
            "pghotd_paused 1",
            "# TYPE pghotd_conflicts gauge",
            "pghotd_conflicts{kind=\"numa_balancing\"} 1",
            "pghotd_conflicts{kind=\"pghotd\"} 0",
            "pghotd_node_mem_free_bytes{node=\"2\",tier=\"lower\"} 1024",
            "pghotd_pid_samples_total{pid=\"42\",comm=\"a\\\"b\\\\c\"} 11",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
