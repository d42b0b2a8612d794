//! pghotd's control protocol: the wire types, the client, and the ids and paths the daemon and
//! its tools (`pghotctl`) share. It depends on no part of the daemon.
//!
//! One JSON object per line in each direction. A request names its protocol version and what
//! it wants: `{"v":1,"req":"stats"}`. The answer is `{"ok":PAYLOAD}` or
//! `{"error":{"kind":KIND,"message":TEXT}}`. Requests are at most [`MAX_REQUEST_BYTES`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub mod client;
mod unique;
pub mod views;

pub use views::{Conflict, ConflictKind, PidCounts};

/// A NUMA node id, as the kernel numbers nodes (`/sys/devices/system/node/nodeN`).
pub type NodeId = u16;

/// Where the control socket lives unless `control_socket` says otherwise (FHS: runtime state
/// under /run; systemd's `RuntimeDirectory=pghotd` makes the directory).
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/pghotd/pghotd.sock";

pub const PROTOCOL_VERSION: u32 = 1;

/// Longest request line, newline included; longer ones get a `too_large` error.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// Default number of process rows in a `top` answer.
pub const DEFAULT_TOP_PIDS: usize = 50;

/// What a client asks for. Serialized as `{"v":1,"req":"<name>",...fields}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "req", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Sources, targets, tiers, uptime, paused or not.
    Status,
    /// Every counter, per node and per process.
    Stats,
    /// The `top` view: header figures, the busiest processes, and the hottest ranges of `pid`.
    Top {
        #[serde(default)]
        pid: Option<u32>,
        #[serde(default = "default_top_pids")]
        limit: usize,
    },
    /// Current value of one tunable, or all when `key` is absent.
    ConfigGet {
        #[serde(default)]
        key: Option<String>,
    },
    /// Sets a runtime tunable; `value` is TOML, validated like the config file.
    ConfigSet {
        key: String,
        value: String,
    },
    Pause,
    Resume,
    /// Re-reads the config file given at start.
    Reload,
    /// Moves every page of `pid` on the `from` nodes to `to`, rate-limited like promotions.
    Migrate {
        pid: u32,
        from: Vec<NodeId>,
        to: NodeId,
    },
    /// Streams received samples as pghot-trace v1 text after the `ok` line, for
    /// `duration_s` seconds (or until the client hangs up).
    Record {
        #[serde(default)]
        duration_s: Option<f64>,
    },
}

fn default_top_pids() -> usize {
    DEFAULT_TOP_PIDS
}

impl Request {
    /// Whether the request changes the daemon (or, for `record`, reveals other processes'
    /// addresses): only root or members of the `pghot` group may make it.
    pub fn is_privileged(&self) -> bool {
        matches!(
            self,
            Request::ConfigSet { .. }
                | Request::Pause
                | Request::Resume
                | Request::Reload
                | Request::Migrate { .. }
                | Request::Record { .. }
        )
    }

    /// The request as one line, newline included.
    pub fn to_line(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("v".into(), PROTOCOL_VERSION.into());
        }
        let mut line = v.to_string();
        line.push('\n');
        line
    }
}

/// Why a request failed; the `kind` of an error response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Not JSON, not an object, missing or wrong fields.
    BadRequest,
    /// Longer than [`MAX_REQUEST_BYTES`].
    TooLarge,
    UnsupportedVersion,
    UnknownRequest,
    /// Needs root or the `pghot` group.
    PermissionDenied,
    /// A value failed validation (the message names the key and the allowed range).
    InvalidValue,
    /// The key exists but cannot change while the daemon runs.
    NeedsRestart,
    /// Something of which there can be only one (a recording) is running, or too many
    /// connections are open.
    Busy,
    /// The request was valid and failed (e.g. the config file does not parse).
    Failed,
    /// The daemon is stopping.
    ShuttingDown,
}

impl ErrorKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::UnsupportedVersion => "unsupported_version",
            ErrorKind::UnknownRequest => "unknown_request",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::InvalidValue => "invalid_value",
            ErrorKind::NeedsRestart => "needs_restart",
            ErrorKind::Busy => "busy",
            ErrorKind::Failed => "failed",
            ErrorKind::ShuttingDown => "shutting_down",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ErrorBody {
    pub kind: ErrorKind,
    pub message: String,
}

impl ErrorBody {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            kind,
            message: message.into(),
        }
    }
}

/// One answer line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Ok(serde_json::Value),
    Error(ErrorBody),
}

impl Response {
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_else(|e| {
            format!(r#"{{"error":{{"kind":"failed","message":"encoding the answer: {e}"}}}}"#)
        });
        line.push('\n');
        line
    }
}

/// Parses one request line (without its newline). Errors name the problem.
pub fn parse_request(line: &str) -> Result<Request, ErrorBody> {
    let unique::Unique(value) = serde_json::from_str(line).map_err(|e| {
        // A data error is JSON that says a key twice (see `unique`).
        let what = if e.is_data() { "refused" } else { "not JSON" };
        ErrorBody::new(ErrorKind::BadRequest, format!("{what}: {e}"))
    })?;
    let serde_json::Value::Object(mut obj) = value else {
        return Err(ErrorBody::new(
            ErrorKind::BadRequest,
            "a request is a JSON object such as {\"v\":1,\"req\":\"status\"}",
        ));
    };
    match obj.remove("v") {
        Some(v) if v.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => {}
        Some(v) => {
            return Err(ErrorBody::new(
                ErrorKind::UnsupportedVersion,
                format!(
                    "protocol version {v} is not supported; this daemon speaks v{PROTOCOL_VERSION}"
                ),
            ));
        }
        None => {
            return Err(ErrorBody::new(
                ErrorKind::BadRequest,
                format!("missing \"v\": the protocol version ({PROTOCOL_VERSION})"),
            ));
        }
    }
    match obj.get("req") {
        Some(serde_json::Value::String(name)) if !KNOWN_REQUESTS.contains(&name.as_str()) => {
            return Err(ErrorBody::new(
                ErrorKind::UnknownRequest,
                format!(
                    "unknown request '{name}' (known: {})",
                    KNOWN_REQUESTS.join(", ")
                ),
            ));
        }
        Some(serde_json::Value::String(_)) => {}
        _ => {
            return Err(ErrorBody::new(
                ErrorKind::BadRequest,
                "missing \"req\": the request name (e.g. \"status\")",
            ));
        }
    }
    let keys: Vec<String> = obj.keys().cloned().collect();
    let req: Request = serde_json::from_value(serde_json::Value::Object(obj))
        .map_err(|e| ErrorBody::new(ErrorKind::BadRequest, e.to_string()))?;
    // serde ignores extra fields of field-less variants even under deny_unknown_fields; every
    // field a request has is in its serialized form (absent options as null).
    let known = serde_json::to_value(&req).unwrap_or_default();
    if let Some(extra) = keys.iter().find(|k| known.get(k.as_str()).is_none()) {
        return Err(ErrorBody::new(
            ErrorKind::BadRequest,
            format!(
                "unknown field `{extra}` in a '{}' request",
                keys_req(&known)
            ),
        ));
    }
    Ok(req)
}

fn keys_req(v: &serde_json::Value) -> &str {
    v.get("req").and_then(|r| r.as_str()).unwrap_or("?")
}

/// Request names, as on the wire.
pub const KNOWN_REQUESTS: &[&str] = &[
    "status",
    "stats",
    "top",
    "config_get",
    "config_set",
    "pause",
    "resume",
    "reload",
    "migrate",
    "record",
];

/// A memory node as the control plane shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    pub node: NodeId,
    /// `top` or `lower`.
    pub tier: String,
    pub cpus: usize,
    pub mem_total_kb: u64,
    /// `None` when the node's meminfo cannot be read.
    pub mem_free_kb: Option<u64>,
    /// Candidates waiting for this node's migrator (lower-tier nodes only).
    pub queue_depth: Option<usize>,
}

/// One process: its counters plus what the hotness table holds for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PidRow {
    pub pid: u32,
    /// From /proc/PID/comm; empty when the process is gone (or in a replayed trace).
    pub comm: String,
    #[serde(flatten)]
    pub counts: PidCounts,
    /// Pages of the process in the hotness table.
    pub tracked_pages: u64,
    /// Tracked pages whose decayed heat is at least `freq_threshold` samples.
    pub hot: u64,
    /// Hot pages still on a lower-tier node.
    pub hot_slow: u64,
}

/// A run of adjacent tracked pages of one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeRow {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
    pub pages: u64,
    /// Sum of the pages' decayed heat (samples).
    pub heat: f64,
    /// The node of all its pages, `None` when they are on several.
    pub node: Option<NodeId>,
    /// Pages on a lower-tier node.
    pub slow_pages: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangesView {
    pub pid: u32,
    pub comm: String,
    pub ranges: Vec<RangeRow>,
}

/// The figures `stats`, `top` and the metrics show, from one moment. The same type for all
/// three so their names cannot drift apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The counter registry, the same `{"counters": {...}}` as `pghotd --stats-json`.
    pub counters: BTreeMap<String, u64>,
    pub uptime_s: f64,
    pub paused: bool,
    pub dry_run: bool,
    pub sources: Vec<String>,
    #[serde(rename = "promote_rate_limit_MBps")]
    pub promote_rate_limit_mbps: u64,
    pub tracked_pages: u64,
    pub max_tracked_pages: u64,
    /// The heat, in samples, a page needs to be promoted under `hot_share_pct` as the floor
    /// stands now (it halves every `heat_halflife_ms` between draws); of the pages with its
    /// whole number of samples, the share its fraction leaves passes (each page's rank adds a
    /// fixed part of a sample to its heat); absent while
    /// `hot_share_pct` is off or no floor is drawn yet (and from daemons before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heat_floor_samples: Option<f64>,
    /// Fast nodes short of `hot_share_room_mb` at their migrator's last reading: while one
    /// is, `hot_share_pct` acts; absent while `hot_share_room_mb` is off (and from daemons
    /// before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_nodes_short: Option<u32>,
    pub nodes: Vec<NodeRow>,
    /// Processes, busiest (most samples) first.
    pub pids: Vec<PidRow>,
    /// Processes with counters that did not fit `limit` (top only).
    #[serde(default)]
    pub pids_omitted: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<RangesView>,
    /// Migration admission (THP splitting, duplex), when configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<crate::views::AdmissionView>,
    /// Competing promoters found at the last check (absent from daemons before they were
    /// checked: none).
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
}

impl Snapshot {
    pub fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }
}

/// `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub pid: u32,
    pub version: String,
    pub uptime_s: f64,
    pub paused: bool,
    pub dry_run: bool,
    pub config_file: Option<String>,
    pub sources: Vec<String>,
    /// Why these sources: the flag or file that named them.
    pub sources_from: String,
    /// `target_nid`, or a sentence for the default.
    pub target: String,
    pub topology: String,
    pub nodes: Vec<NodeRow>,
    pub socket: String,
    /// The read-only socket, if on (absent from older daemons: off).
    #[serde(default)]
    pub readonly_socket: Option<String>,
    pub metrics_listen: Option<String>,
    /// Competing promoters found at the last check (absent from older daemons: none).
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
}

/// `reload` and `config set`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReloadReport {
    pub file: Option<String>,
    /// Keys whose new value is now in effect.
    pub applied: Vec<String>,
    /// Keys whose new value waits for a restart (the running value is kept).
    pub needs_restart: Vec<String>,
}

/// `migrate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrateReport {
    pub pid: u32,
    pub from: Vec<NodeId>,
    pub to: NodeId,
    /// Pages on the `from` nodes when the move started (numa_maps).
    pub pages_found: u64,
    pub moved_pages: u64,
    pub moved_bytes: u64,
    pub failed_pages: u64,
    /// Time spent waiting for the rate limit.
    pub ratelimit_wait_s: f64,
    pub elapsed_s: f64,
    /// Set when the move stopped early (daemon stopping, process gone).
    pub stopped: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_refused_at_any_depth() {
        for line in [
            r#"{"v":1,"req":"config_set","key":"freq_threshold","value":"3","key":"migrate_batch"}"#,
            r#"{"v":1,"v":1,"req":"status"}"#,
            r#"{"v":1,"req":"status","req":"pause"}"#,
            r#"{"v":1,"req":"migrate","pid":1,"from":[{"a":1,"a":2}],"to":0}"#,
        ] {
            let err = parse_request(line).unwrap_err();
            assert_eq!(err.kind, ErrorKind::BadRequest, "{line}");
            assert!(
                err.message.contains("appears twice"),
                "{line}: {}",
                err.message
            );
        }
        // Keys that differ only in escapes are the same key once decoded.
        let err = parse_request(r#"{"v":1,"req":"status","r\u0065q":"pause"}"#).unwrap_err();
        assert!(
            err.message.contains("\"req\" appears twice"),
            "{}",
            err.message
        );
        assert_eq!(
            parse_request(r#"{"v":1,"req":"config_get","key":"a"}"#).unwrap(),
            Request::ConfigGet {
                key: Some("a".into())
            }
        );
        let err = parse_request("{\"v\":1,").unwrap_err();
        assert!(err.message.starts_with("not JSON: "), "{}", err.message);
    }

    #[test]
    fn requests_round_trip_with_their_version() {
        for req in [
            Request::Status,
            Request::Top {
                pid: Some(7),
                limit: 3,
            },
            Request::ConfigSet {
                key: "freq_threshold".into(),
                value: "3".into(),
            },
            Request::Migrate {
                pid: 1,
                from: vec![2, 3],
                to: 0,
            },
        ] {
            let line = req.to_line();
            assert!(line.starts_with('{') && line.ends_with('\n'), "{line}");
            assert!(line.contains("\"v\":1"), "{line}");
            assert_eq!(parse_request(line.trim_end()).unwrap(), req);
        }
        assert_eq!(
            parse_request(r#"{"v":1,"req":"top"}"#).unwrap(),
            Request::Top {
                pid: None,
                limit: DEFAULT_TOP_PIDS
            }
        );
    }

    #[test]
    fn bad_requests_name_the_problem() {
        let cases = [
            ("nope", ErrorKind::BadRequest, "not JSON"),
            ("[1]", ErrorKind::BadRequest, "JSON object"),
            (r#"{"req":"stats"}"#, ErrorKind::BadRequest, "missing \"v\""),
            (
                r#"{"v":2,"req":"stats"}"#,
                ErrorKind::UnsupportedVersion,
                "version 2",
            ),
            (r#"{"v":1}"#, ErrorKind::BadRequest, "missing \"req\""),
            (
                r#"{"v":1,"req":"fly"}"#,
                ErrorKind::UnknownRequest,
                "unknown request 'fly'",
            ),
            (
                r#"{"v":1,"req":"stats","x":1}"#,
                ErrorKind::BadRequest,
                "unknown field `x`",
            ),
            (
                r#"{"v":1,"req":"migrate","pid":1}"#,
                ErrorKind::BadRequest,
                "missing field `from`",
            ),
        ];
        for (line, kind, text) in cases {
            let err = parse_request(line).unwrap_err();
            assert_eq!(err.kind, kind, "{line}: {err:?}");
            assert!(err.message.contains(text), "{line}: {}", err.message);
        }
    }

    #[test]
    fn responses_are_ok_or_error_objects() {
        let ok = Response::Ok(serde_json::json!({"a": 1})).to_line();
        assert_eq!(ok, "{\"ok\":{\"a\":1}}\n");
        let err = Response::Error(ErrorBody::new(ErrorKind::TooLarge, "big")).to_line();
        assert_eq!(
            err,
            "{\"error\":{\"kind\":\"too_large\",\"message\":\"big\"}}\n"
        );
        let back: Response = serde_json::from_str(err.trim_end()).unwrap();
        assert!(matches!(back, Response::Error(e) if e.kind == ErrorKind::TooLarge));
    }

    #[test]
    fn conflicts_are_optional_and_unknown_kinds_are_other() {
        // A status from a daemon that predates the conflicts check: none.
        let old = serde_json::json!({
            "pid": 1, "version": "0.1.0", "uptime_s": 1.0, "paused": false, "dry_run": false,
            "config_file": null, "sources": [], "sources_from": "x", "target": "x",
            "topology": "x", "nodes": [], "socket": "off", "metrics_listen": null
        });
        let s: StatusReport = serde_json::from_value(old).unwrap();
        assert!(s.conflicts.is_empty());
        // A kind a newer daemon adds still parses.
        let c: Conflict = serde_json::from_value(serde_json::json!({
            "kind": "autonuma_v9", "detail": "d", "remedy": "r"
        }))
        .unwrap();
        assert_eq!(c.kind, ConflictKind::Other);
        for kind in ConflictKind::ALL {
            let v = serde_json::to_value(kind).unwrap();
            assert_eq!(v, serde_json::json!(kind.name()));
            assert_eq!(serde_json::from_value::<ConflictKind>(v).unwrap(), kind);
        }
    }
}
