//! `pgibs-guest misses APP-PID`: whose misses of the modelled cache, and whose evictions caused
//! the program's (the plugin's control command MISSES, plugin argument `by_task=1`; see the
//! plugin's README.md, "Whose misses"), as one line `PGIBS-MISSES {json}` for the rig's RESULT.
//!
//! The plugin counts by tgid; this names each one by its /proc/TGID/comm while it still runs
//! (so call it before the promoter and the relay stop). A tgid that has exited is
//! `(exited)` (redis-benchmark runs one process a round), 0 is `(idle)`: the swapper, which
//! the channel names as tgid 0, and the time before the channel's first switch on a vCPU.

use std::collections::HashMap;
use std::path::Path;

use pghotd::safefs::read_text;
use serde_json::{Value, json};

use crate::{Ctl, Res};

/// One (task, cause) pair of the MISSES answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    pub task: u32,
    /// The task whose miss evicted the line this miss fetched again; `None`: no refetch.
    pub cause: Option<u32>,
    pub user: u64,
    pub kernel: u64,
}

/// The MISSES answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misses {
    pub overflow: u64,
    pub pairs: Vec<Pair>,
    /// Misses of the pairs the answer did not list one by one: (user, kernel).
    pub rest: (u64, u64),
}

fn num<T: std::str::FromStr>(s: &str, what: &str) -> Res<T> {
    s.parse().map_err(|_| format!("MISSES: bad {what} {s:?}"))
}

/// Parses `MISSES overflow=N pairs=P task:cause:user:kernel... rest=user:kernel`.
pub fn parse(line: &str) -> Res<Misses> {
    let mut words = line.split_ascii_whitespace();
    if words.next() != Some("MISSES") {
        return Err(format!("not a MISSES answer: {line}"));
    }
    let mut m = Misses {
        overflow: 0,
        pairs: Vec::new(),
        rest: (0, 0),
    };
    for w in words {
        if let Some(v) = w.strip_prefix("overflow=") {
            m.overflow = num(v, "overflow")?;
        } else if w.starts_with("pairs=") {
            // The count of every pair, listed or not: only informative.
        } else if let Some(v) = w.strip_prefix("rest=") {
            let (u, k) = v.split_once(':').ok_or(format!("MISSES: bad rest {v:?}"))?;
            m.rest = (num(u, "rest")?, num(k, "rest")?);
        } else {
            let f: Vec<&str> = w.split(':').collect();
            let [task, cause, user, kernel] = f[..] else {
                return Err(format!("MISSES: bad pair {w:?}"));
            };
            m.pairs.push(Pair {
                task: num(task, "task")?,
                cause: if cause == "-" {
                    None
                } else {
                    Some(num(cause, "cause")?)
                },
                user: num(user, "user count")?,
                kernel: num(kernel, "kernel count")?,
            });
        }
    }
    Ok(m)
}

/// A tgid's name: its comm while it runs.
fn comm_of(tgid: u32) -> String {
    if tgid == 0 {
        return "(idle)".into();
    }
    match read_text(Path::new(&format!("/proc/{tgid}/comm")), 64) {
        Ok(c) => c.trim_end().to_string(),
        Err(_) => "(exited)".into(),
    }
}

/// (user, kernel) per name, the `limit` names with most misses (JSON objects list their keys
/// in name order; the counts say which came first).
fn top(m: HashMap<String, (u64, u64)>, limit: usize) -> Value {
    let mut v: Vec<_> = m.into_iter().collect();
    v.sort_by(|a, b| (b.1.0 + b.1.1).cmp(&(a.1.0 + a.1.1)).then(a.0.cmp(&b.0)));
    v.truncate(limit);
    Value::Object(
        v.into_iter()
            .map(|(n, (u, k))| (n, json!([u, k])))
            .collect(),
    )
}

/// The summary: every task's misses by name (the ten with most), and the program's own
/// split into no refetch, its own evictions and each other name's.
pub fn summary(m: &Misses, app: u32, name: impl Fn(u32) -> String) -> Value {
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut name_of = |tgid: u32| names.entry(tgid).or_insert_with(|| name(tgid)).clone();
    let mut tasks: HashMap<String, (u64, u64)> = HashMap::new();
    let mut by: HashMap<String, (u64, u64)> = HashMap::new();
    let (mut app_all, mut app_cold, mut app_self) = ((0, 0), (0, 0), (0, 0));
    let add = |into: &mut (u64, u64), p: &Pair| {
        into.0 += p.user;
        into.1 += p.kernel;
    };
    for p in &m.pairs {
        add(tasks.entry(name_of(p.task)).or_default(), p);
        if p.task != app {
            continue;
        }
        add(&mut app_all, p);
        match p.cause {
            None => add(&mut app_cold, p),
            Some(c) if c == app => add(&mut app_self, p),
            Some(c) => add(by.entry(name_of(c)).or_default(), p),
        }
    }
    json!({
        "overflow": m.overflow,
        "unlisted": [m.rest.0, m.rest.1],
        "by_task": top(tasks, 10),
        "app": {
            "misses": [app_all.0, app_all.1],
            "no_refetch": [app_cold.0, app_cold.1],
            "refetch_self": [app_self.0, app_self.1],
            "refetch_by": top(by, 10),
        },
    })
}

/// Asks the plugin and prints `PGIBS-MISSES {json}`.
pub fn report(app: u32) -> Res<()> {
    let line = Ctl::open_retrying()?.line("MISSES")?;
    let m = parse(&line)?;
    println!("PGIBS-MISSES {}", summary(&m, app, comm_of));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_plugins_answer_and_refuses_what_is_not_one() {
        let m = parse("MISSES overflow=2 pairs=3 5:-:7:1 5:9:4:0 rest=3:2").unwrap();
        assert_eq!(m.overflow, 2);
        assert_eq!(m.rest, (3, 2));
        assert_eq!(
            m.pairs,
            vec![
                Pair {
                    task: 5,
                    cause: None,
                    user: 7,
                    kernel: 1
                },
                Pair {
                    task: 5,
                    cause: Some(9),
                    user: 4,
                    kernel: 0
                },
            ]
        );
        for (bad, says) in [
            ("COUNTS pages=1", "not a MISSES"),
            (
                "ERR MISSES needs the plugin argument by_task=1",
                "not a MISSES",
            ),
            ("MISSES 5:-:7", "bad pair"),
            ("MISSES 5:x:7:1", "bad cause"),
            ("MISSES rest=4", "bad rest"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// Twelve names with 1..=12 misses: the ten with most stay, 1 and 2 go.
    #[test]
    fn only_the_ten_names_with_most_misses_are_kept() {
        let m: HashMap<String, (u64, u64)> =
            (1..=12u64).map(|n| (format!("t{n}"), (n, 0))).collect();
        let Value::Object(kept) = top(m, 10) else {
            panic!("not an object")
        };
        let mut names: Vec<&str> = kept.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "t10", "t11", "t12", "t3", "t4", "t5", "t6", "t7", "t8", "t9"
            ]
        );
    }

    /// By hand: the program (tgid 5) missed 7+1 with no refetch, 4 fetching again lines the
    /// daemon (9) evicted, 2 of its own; the daemon and a second daemon process of the same
    /// name sum under one name; the idle tgid 0 is named.
    #[test]
    fn the_summary_names_who_evicted_the_programs_lines() {
        let m = parse(
            "MISSES overflow=0 pairs=6 5:-:7:1 5:9:4:0 5:5:2:0 9:-:10:3 11:5:1:0 0:-:0:6 rest=0:0",
        )
        .unwrap();
        let name = |t: u32| match t {
            5 => "redis-server".to_string(),
            9 | 11 => "pghotd".to_string(),
            0 => "(idle)".to_string(),
            _ => "(exited)".to_string(),
        };
        let got = summary(&m, 5, name);
        assert_eq!(
            got,
            json!({
                "overflow": 0,
                "unlisted": [0, 0],
                "by_task": {"redis-server": [13, 1], "pghotd": [11, 3], "(idle)": [0, 6]},
                "app": {
                    "misses": [13, 1],
                    "no_refetch": [7, 1],
                    "refetch_self": [2, 0],
                    "refetch_by": {"pghotd": [4, 0]},
                },
            })
        );
        // A comm with a quote, a backslash and a control character stays one JSON string.
        let odd = summary(&m, 5, |_| "a\"b\\c\u{1}".to_string()).to_string();
        let back: Value = serde_json::from_str(&odd).unwrap();
        assert_eq!(back["by_task"]["a\"b\\c\u{1}"], json!([24, 10]));
        assert_eq!(comm_of(0), "(idle)");
        assert_ne!(comm_of(std::process::id()), "(exited)");
        assert_eq!(comm_of(u32::MAX - 1), "(exited)");
    }
}
