//! Issue 20's metrics bar: the OpenMetrics output, rendered from a snapshot with every counter
//! set, several nodes and sources, and processes whose names hold quotes, backslashes and
//! newlines, parses with the Prometheus Python client's parser; and no metric name carries a
//! unit (but as its last word) or a label value. The live endpoint is scraped and parsed the
//! same way in crates/pghotctl/tests/control.rs.

mod util;

use pghot_protocol::{Conflict, ConflictKind, NodeRow, PidCounts, PidRow, Snapshot};
use pghotd::control::metrics::{one_line, render};
use pghotd::sample::SourceKind;
use pghotd::stats::{self, Counter, LocalCounts, Metric, Stats, Unit};
use serde_json::Value;

/// Every registry counter non-zero (counter `i` holds `i + 1`), two sources, promotions to
/// nodes 0 and 1, three processes with hostile names.
fn rich_snapshot() -> Snapshot {
    let stats = Stats::new();
    for (i, &c) in Counter::ALL.iter().enumerate() {
        stats.add(c, i as u64 + 1);
    }
    let mut local = LocalCounts::default();
    for _ in 0..5 {
        local.bump_source(SourceKind::Ibs);
    }
    local.bump_source(SourceKind::SoftDirty);
    stats.absorb(&mut local);
    stats.add_promoted(0, 3, 3 * 4096);
    stats.add_promoted(1, 2, 2 << 21);
    let node = |node: u16, tier: &str| NodeRow {
        node,
        tier: tier.into(),
        cpus: 1,
        mem_total_kb: 1 << 20,
        mem_free_kb: Some(1 << 19),
        queue_depth: (tier == "lower").then_some(4),
    };
    let pid = |pid: u32, comm: &str| PidRow {
        pid,
        comm: comm.into(),
        counts: PidCounts {
            samples: u64::from(pid),
            recorded: 2,
            candidates: 1,
            promoted_pages: 1,
            promoted_bytes: 4096,
            fail: 0,
        },
        tracked_pages: 7,
        hot: 3,
        hot_slow: 1,
    };
    Snapshot {
        counters: stats.snapshot().counters,
        uptime_s: 12.25,
        paused: false,
        dry_run: false,
        sources: vec!["ibs".into(), "softdirty".into()],
        promote_rate_limit_mbps: 1024,
        tracked_pages: 21,
        max_tracked_pages: 1 << 20,
        heat_floor_samples: Some(3.5),
        fast_nodes_short: None,
        nodes: vec![
            node(0, "top"),
            node(1, "top"),
            node(2, "lower"),
            node(3, "lower"),
        ],
        pids: vec![
            pid(101, "say \"hi\""),
            pid(102, "back\\slash\\"),
            pid(103, "two\nlines} x=\"1\""),
        ],
        pids_omitted: 0,
        ranges: None,
        admission: None,
        conflicts: vec![Conflict {
            kind: ConflictKind::Demotion,
            detail: "demotion_enabled is true".into(),
            remedy: "echo false > /sys/kernel/mm/numa/demotion_enabled".into(),
        }],
    }
}

/// The family `name` of the parser's output.
fn family<'a>(families: &'a [Value], name: &str) -> &'a Value {
    families
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no family {name}"))
}

/// The value of the sample `name` whose labels include `labels`.
fn value(families: &[Value], name: &str, labels: &[(&str, &str)]) -> f64 {
    families
        .iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .find(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][k] == *v))
        .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))["value"]
        .as_f64()
        .unwrap()
}

#[test]
fn issue_20_metrics_parse_with_the_prometheus_client_parser() {
    let snap = rich_snapshot();
    let families = util::openmetrics(&render(&snap));
    // Every registry counter, where its definition says, with its value and its HELP.
    for &c in Counter::ALL {
        let (name, unit, label, help) = match c.metric() {
            Metric::Own { name, unit, label } => (name, unit, label, c.help()),
            Metric::Of(f, v) => (f.name, f.unit, Some((f.label, v)), f.help),
        };
        let fam = stats::family_name(name, unit);
        let f = family(&families, &fam);
        assert_eq!(f["type"], "counter", "{fam}");
        assert_eq!(f["unit"], unit.name(), "{fam}");
        assert_eq!(f["help"], one_line(help), "{fam}");
        let held = snap.counter(c.name()) as f64;
        assert!(held > 0.0, "{}", c.name());
        let want = match unit {
            Unit::Nanoseconds => held / 1e9,
            Unit::Count | Unit::Bytes => held,
        };
        let labels: Vec<(&str, &str)> = label.into_iter().collect();
        let got = value(&families, &format!("{fam}_total"), &labels);
        assert!((got - want).abs() < 1e-12, "{}: {got} != {want}", c.name());
    }
    assert_eq!(
        value(
            &families,
            "pghotd_source_samples_total",
            &[("source", "ibs")]
        ),
        5.0
    );
    assert_eq!(
        value(
            &families,
            "pghotd_source_samples_total",
            &[("source", "pebs")]
        ),
        0.0
    );
    assert_eq!(
        value(&families, "pghotd_promoted_bytes_total", &[("node", "1")]),
        f64::from(2u32 << 21)
    );
    assert_eq!(
        value(&families, "pghotd_promoted_pages_total", &[("node", "0")]),
        3.0
    );
    assert_eq!(family(&families, "pghotd_promoted_bytes")["unit"], "bytes");
    // Hostile process names come back as they were.
    for (pid, comm) in [
        ("101", "say \"hi\""),
        ("102", "back\\slash\\"),
        ("103", "two\nlines} x=\"1\""),
    ] {
        assert_eq!(
            value(
                &families,
                "pghotd_pid_samples_total",
                &[("pid", pid), ("comm", comm)]
            ),
            pid.parse::<f64>().unwrap()
        );
    }
    assert_eq!(
        value(
            &families,
            "pghotd_pid_promoted_bytes_total",
            &[("pid", "101")]
        ),
        4096.0
    );
    assert_eq!(
        value(&families, "pghotd_conflicts", &[("kind", "demotion")]),
        1.0
    );
    assert_eq!(
        value(
            &families,
            "pghotd_node_memory_free_bytes",
            &[("node", "3"), ("tier", "lower")]
        ),
        f64::from(1 << 29)
    );
    assert_eq!(
        family(&families, "pghotd_uptime_seconds")["unit"],
        "seconds"
    );
    // What every Prometheus client exports.
    assert_eq!(family(&families, "pghotd_build")["type"], "info");
    assert_eq!(
        value(
            &families,
            "pghotd_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    let cpu = family(&families, "process_cpu_seconds");
    assert_eq!(
        (&cpu["type"], &cpu["unit"]),
        (&"counter".into(), &"seconds".into())
    );
    assert!(value(&families, "process_cpu_seconds_total", &[]) >= 0.0);
    assert!(value(&families, "process_resident_memory_bytes", &[]) > 0.0);
}

#[test]
fn issue_20_no_metric_name_has_a_unit_or_label_value_in_it() {
    let families = util::openmetrics(&render(&rich_snapshot()));
    // Label values that say which series, not what it counts: every value but the free text
    // of a process's name and the build's version.
    let mut values: Vec<String> = Vec::new();
    for s in families
        .iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
    {
        for (k, v) in s["labels"].as_object().unwrap() {
            if !["pid", "comm", "version", "arch"].contains(&k.as_str()) {
                values.push(v.as_str().unwrap().to_string());
            }
        }
    }
    values.sort_unstable();
    values.dedup();
    // Reasons, outcomes and notes must be found here (the test sees what it checks).
    for v in [
        "shared",
        "pid_zero",
        "success",
        "ibs",
        "0",
        "numa_balancing",
    ] {
        assert!(values.iter().any(|x| x == v), "{v} not among {values:?}");
    }
    let sources: Vec<&str> = SourceKind::ALL.iter().map(|k| k.name()).collect();
    for f in &families {
        let name = f["name"].as_str().unwrap();
        assert!(
            name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{name}: a digit (a node number?) or an odd character"
        );
        // `pghotd_` is the namespace; the conflict kind `pghotd` is another matter.
        let words: Vec<&str> = name
            .strip_prefix("pghotd_")
            .unwrap_or(name)
            .split('_')
            .collect();
        assert!(!words.contains(&"total"), "{name}: `total` before the end");
        for w in &words {
            assert!(!sources.contains(w), "{name}: source {w} in the name");
            assert!(
                ![
                    "ns",
                    "us",
                    "ms",
                    "kb",
                    "kib",
                    "mb",
                    "mib",
                    "gb",
                    "gib",
                    "nanoseconds"
                ]
                .contains(w),
                "{name}: {w} is not a base unit"
            );
        }
        // A base unit is the last word, and declared.
        for unit in ["bytes", "seconds"] {
            if let Some(i) = words.iter().position(|w| *w == unit) {
                assert_eq!(i, words.len() - 1, "{name}: {unit} before the end");
                assert_eq!(f["unit"], unit, "{name}: no # UNIT {unit}");
            }
        }
        for v in &values {
            // The pause switch is not a count of the `paused` outcome.
            if (name, v.as_str()) == ("pghotd_paused", "paused") {
                continue;
            }
            let v_words: Vec<&str> = v.split('_').collect();
            assert!(
                !words
                    .windows(v_words.len())
                    .any(|w| w == v_words.as_slice()),
                "{name}: label value {v} in the name"
            );
        }
    }
}
