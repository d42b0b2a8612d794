//! The fuzz targets of `pghot_fuzz` under proptest: a fixed, short budget in `cargo test`
//! (`PGHOT_FUZZ_CASES` per strategy, default 1500; the long runs use cargo-fuzz, see
//! `fuzz/README.md`). Each target gets random bytes and a structured strategy that produces
//! mostly well-formed input with damage, since random bytes rarely get past a text parser's
//! first field. Failures are shrunk by proptest; a minimal input found by either harness is
//! added to `regressions` below.

use pghot_fuzz as fuzz;
use pghotd::sampler::hwplan::{ibs_decoding_plan, ibs_raw};
use pghotd::sampler::ibs::CpuModel;
use pghotd::sampler::perf::record::build;
use proptest::prelude::*;
use proptest::test_runner::Config;

fn cases() -> u32 {
    std::env::var("PGHOT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    }
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// Overwrites a few bytes of `base` at chosen positions (positions wrap around).
fn damaged(base: Vec<u8>, hits: Vec<(usize, u8)>) -> Vec<u8> {
    let mut out = base;
    if !out.is_empty() {
        let n = out.len();
        for (at, b) in hits {
            out[at % n] = b;
        }
    }
    out
}

/// Well-formed IBS sample records (random registers) and LOST/THROTTLE records in a ring,
/// some bytes damaged.
fn perf_input() -> impl Strategy<Value = Vec<u8>> {
    let record = prop_oneof![
        8 => (any::<[u64; 7]>(), any::<u32>(), any::<u16>(), any::<u64>()).prop_map(
            |(msrs, caps, misc, phys)| {
                let raw = ibs_raw(caps, msrs);
                let mut s = build::empty();
                s.misc = misc & 7;
                s.pid = 4242;
                s.addr = msrs[5];
                s.phys_addr = phys;
                s.raw = Some(&raw);
                build::sample(ibs_decoding_plan(CpuModel::UNKNOWN).format, &s)
            }
        ),
        1 => any::<u64>().prop_map(build::lost),
        1 => (any::<bool>(), any::<u64>()).prop_map(|(u, t)| build::throttle(u, t)),
    ];
    (
        0u8..3,
        proptest::collection::vec(record, 0..8),
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
    )
        .prop_map(|(plan, records, hits)| {
            let mut out = vec![plan];
            out.extend_from_slice(&(1u64 << 10 | 1 << 7).to_le_bytes()); // RAW | TID
            let ring: Vec<u8> = records.concat();
            out.extend(damaged(ring, hits));
            out
        })
}

/// perf.data files in perf's layout (an IBS event under a random PMU type, random CPUID family
/// and model, random sample records), or the page-fault file perf wrote here, with a few bytes
/// damaged and sometimes cut short.
fn perf_data_input() -> impl Strategy<Value = Vec<u8>> {
    use pghotd::sampler::perfdata::build::{Event, PerfDataFile};
    let fixture = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/perfdata/pagefaults.data"),
    )
    .expect("tests/fixtures/perfdata/pagefaults.data");
    let built = (
        any::<u32>(),
        (0u32..0x30, 0u32..0x100),
        proptest::collection::vec((any::<[u64; 7]>(), any::<u32>()), 0..6),
    )
        .prop_map(|(pmu_type, (family, model), samples)| {
            let plan = ibs_decoding_plan(CpuModel::UNKNOWN);
            let records = samples
                .iter()
                .map(|(msrs, caps)| {
                    let raw = ibs_raw(*caps, *msrs);
                    let mut s = build::empty();
                    (s.misc, s.pid, s.addr) = (2, 4242, msrs[5]);
                    s.raw = Some(&raw);
                    build::sample(plan.format, &s)
                })
                .collect();
            PerfDataFile {
                events: vec![Event {
                    name: "ibs_op//".into(),
                    pmu_type,
                    config: 0,
                    sample_type: plan.format.bits(),
                    period: 4096,
                    ids: vec![1],
                }],
                pmus: vec![(pmu_type, "ibs_op".into())],
                cpuid: Some(format!("AuthenticAMD,{family},{model},1")),
                records,
            }
            .to_bytes()
        });
    (
        prop_oneof![built, Just(fixture)],
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        any::<Option<usize>>(),
    )
        .prop_map(|(file, hits, cut)| {
            let mut out = damaged(file, hits);
            if let Some(cut) = cut {
                out.truncate(cut % (out.len() + 1));
            }
            out
        })
}

fn trace_line() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| format!("{n:#x}")),
        Just("-".to_string()),
        prop::sample::select(vec!["L", "S", "l1", "dram", "extmem", "unknown", "#", "0x"])
            .prop_map(str::to_string),
        "[0-9a-zx#-]{0,24}",
    ];
    proptest::collection::vec(field, 0..12).prop_map(|f| f.join(" "))
}

fn trace_input() -> impl Strategy<Value = Vec<u8>> {
    (any::<u8>(), proptest::collection::vec(trace_line(), 0..6)).prop_map(|(cap, lines)| {
        let mut out = vec![cap];
        out.extend(lines.join("\n").into_bytes());
        out
    })
}

const CONFIG_KEYS: &[&str] = &[
    "enabled_sources",
    "target_nid",
    "freq_threshold",
    "promote_window_ms",
    "promote_rate_limit_MBps",
    "promote_min_free_pct",
    "migrate_interval_ms",
    "migrate_hold_ms",
    "promote_thp_min_samples_pct",
    "migrate_batch",
    "max_tracked_pages",
    "heat_halflife_ms",
    "pids",
    "dry_run",
    "sysfs_root",
    "perf.ring_pages",
    "pagefault.period",
    "ibs.period",
    "ibs.count_ops",
    "ibs.l3miss_only",
    "ibs.ldlat",
    "ibs.user_only",
    "pebs.period",
    "pebs.ldlat",
    "pebs.stores",
    "softdirty_interval_ms",
    "softdirty_scan_budget_pages",
    "damon_sample_us",
    "damon_aggr_us",
    "damon_min_regions",
    "damon_max_regions",
    "damon_max_samples",
    "control_socket",
    "metrics_listen",
];

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        (0u64..5000).prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| format!("{n:?}")),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::sample::select(vec![
            "\"auto\"",
            "\"/tmp/x\"",
            "\"127.0.0.1:9100\"",
            "[\"ibs\", \"trace:/tmp/t\"]",
            "[1, 2, 3]",
            "[]",
            "{}",
            "\"\"",
            "\"trace:\"",
            "[\"damon\"]",
        ])
        .prop_map(str::to_string),
        "\"[ -~]{0,16}\"",
    ]
}

fn config_input() -> impl Strategy<Value = Vec<u8>> {
    let line = (prop::sample::select(CONFIG_KEYS), toml_value()).prop_map(|(k, v)| {
        // `a.b = v` and `[a] b = v` both name a nested key.
        format!("{k} = {v}")
    });
    proptest::collection::vec(line, 0..6).prop_map(|l| l.join("\n").into_bytes())
}

/// A key's index and a value: a TOML value, damaged or followed by what would be a second key,
/// a table or a comment if the value were read as a document.
fn config_set_input() -> impl Strategy<Value = Vec<u8>> {
    let tail = prop_oneof![
        Just(String::new()),
        Just("\npromote_rate_limit_MBps = 1".to_string()),
        Just("\n[ibs]\nperiod = 200".to_string()),
        Just(" # comment".to_string()),
        Just("\r\nfreq_threshold = 9".to_string()),
        "[ -~\n]{0,8}",
    ];
    (any::<u8>(), toml_value(), tail).prop_map(|(pick, value, tail)| {
        let mut data = vec![pick];
        data.extend(format!("{value}{tail}").into_bytes());
        data
    })
}

fn control_input() -> impl Strategy<Value = Vec<u8>> {
    let req = prop::sample::select(pghot_protocol::KNOWN_REQUESTS);
    let extra = prop_oneof![
        Just(String::new()),
        (
            prop::sample::select(vec![
                "pid",
                "limit",
                "key",
                "value",
                "from",
                "to",
                "duration_s"
            ]),
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                any::<f64>().prop_map(|n| format!("{n:e}")),
                Just("null".to_string()),
                Just("[0, 1]".to_string()),
                "\"[ -~]{0,8}\"",
            ]
        )
            .prop_map(|(k, v)| format!(",\"{k}\":{v}")),
    ];
    let line = (req, extra.clone(), extra, 0u8..3)
        .prop_map(|(r, a, b, v)| format!("{{\"v\":{v},\"req\":\"{r}\"{a}{b}}}"));
    proptest::collection::vec(line, 0..5).prop_map(|l| l.join("\n").into_bytes())
}

/// HTTP request heads as scrapers send them, some damaged, some cut short, some padded.
fn metrics_head_input() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec!["GET", "POST", "HEAD", "get", ""]);
    let target = prop::sample::select(vec!["/metrics", "/", "/x?y=1", "*", "", "/a b"]);
    let version = prop::sample::select(vec![" HTTP/1.1", " HTTP/1.0", "", " HTTP/", " FTP/1"]);
    let eol = prop::sample::select(vec!["\r\n", "\n", "\r"]);
    let headers = proptest::collection::vec("[ -~]{0,24}", 0..4);
    (method, target, version, eol, headers, any::<bool>())
        .prop_map(|(m, t, v, eol, headers, blank)| {
            let mut text = format!("{m} {t}{v}{eol}");
            for h in headers {
                text.push_str(&format!("{h}{eol}"));
            }
            if blank {
                text.push_str(eol);
            }
            text.into_bytes()
        })
        .prop_flat_map(|base| {
            let n = base.len();
            (
                Just(base),
                proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
                0..=n,
                prop_oneof![8 => Just(0usize), 1 => Just(1), 1 => Just(2)],
            )
        })
        .prop_map(|(base, hits, cut, pad)| {
            let mut out = damaged(base, hits);
            out.truncate(cut.max(out.len() / 2));
            // Sometimes past the head bound.
            out.extend(std::iter::repeat_n(b'a', pad * 4500));
            out
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn metrics_head_random(data in bytes(512)) { fuzz::metrics_head(&data) }

    #[test]
    fn metrics_head_structured(data in metrics_head_input()) { fuzz::metrics_head(&data) }

    #[test]
    fn perf_records_random(data in bytes(1024)) { fuzz::perf_records(&data) }

    #[test]
    fn perf_records_structured(data in perf_input()) { fuzz::perf_records(&data) }

    #[test]
    fn perf_data_random(data in bytes(1024)) { fuzz::perf_data(&data) }

    #[test]
    fn perf_data_structured(data in perf_data_input()) { fuzz::perf_data(&data) }

    #[test]
    fn ibs_raw_random(data in bytes(128)) { fuzz::ibs_raw(&data) }

    #[test]
    fn ibs_raw_structured(
        fields in any::<[u64; 5]>(), caps in any::<u32>(), msrs in any::<[u64; 7]>()
    ) {
        let mut data: Vec<u8> = fields.iter().flat_map(|f| f.to_le_bytes()).collect();
        data.extend(ibs_raw(caps, msrs));
        fuzz::ibs_raw(&data)
    }

    #[test]
    fn trace_random(data in bytes(512)) { fuzz::trace(&data) }

    #[test]
    fn trace_structured(data in trace_input()) { fuzz::trace(&data) }

    #[test]
    fn config_random(data in bytes(256)) { fuzz::config(&data) }

    #[test]
    fn config_structured(data in config_input()) { fuzz::config(&data) }

    #[test]
    fn config_set_random(data in bytes(64)) { fuzz::config_set(&data) }

    #[test]
    fn config_set_structured(data in config_set_input()) { fuzz::config_set(&data) }

    #[test]
    fn control_random(data in bytes(512)) { fuzz::control(&data) }

    #[test]
    fn control_structured(data in control_input()) { fuzz::control(&data) }
}

/// Inputs that once broke a target, named by what they broke.
mod regressions {
    use super::fuzz;

    /// `record` with a duration past what `Duration` holds panicked the connection thread
    /// (`Duration::from_secs_f64` on 1e300).
    #[test]
    fn record_duration_beyond_duration_max() {
        fuzz::control(b"{\"v\":1,\"req\":\"record\",\"duration_s\":1e300}\n");
    }

    /// A head that ends with `\n\r\n` (a bare LF line, then CRLF) ends at its blank line too.
    #[test]
    fn metrics_head_mixed_line_ends() {
        fuzz::metrics_head(b"GET /metrics\n\r\nHost: x\r\n\r\n");
    }

    /// A file may raise `damon_min_regions` above the default `damon_max_regions` with the
    /// maximum after it; set key by key in `config get`'s order, the minimum came first and was
    /// refused against the default maximum (found by `config_structured`).
    #[test]
    fn config_keys_checked_against_each_other_round_trip() {
        fuzz::config(b"damon_min_regions = 1001\ndamon_max_regions = 2000");
    }

    /// An off control socket reads back as null from `config get`; the round trip must turn it
    /// into `""` again rather than drop it (found by `config_structured`).
    #[test]
    fn control_socket_off_round_trips() {
        fuzz::config(b"control_socket = \"\"");
    }

    /// `config set control_socket <DEL>` read back from `config get` as the JSON string `"<DEL>"`,
    /// which TOML refuses (a basic string must escape DEL); the setter then took the quotes as
    /// part of the path (found by `config_set_random`).
    #[test]
    fn config_set_text_with_del_round_trips() {
        let control_socket = pghotd::config::SETTINGS
            .iter()
            .position(|s| s.key == "control_socket")
            .unwrap();
        fuzz::config_set(&[control_socket as u8, 0x7f]);
    }

    /// `config set freq_threshold "3\npromote_rate_limit_MBps = 1"` was parsed as a document
    /// and set the rate limit too (key 2 of the table is freq_threshold).
    #[test]
    fn config_set_value_with_a_second_key() {
        fuzz::config_set(b"\x023\npromote_rate_limit_MBps = 1");
        fuzz::config_set(b"\x023\n[ibs]\nperiod = 200");
    }
}
