//! The configuration's behaviour, with expected values written out by hand (from the README
//! and the man page), not read from the table.

use super::*;

pub(super) fn from_file(text: &str) -> Result<Config, ConfigError> {
    let mut c = Config::default();
    c.apply_file(Path::new("/etc/pghotd/pghotd.toml"), text)?;
    Ok(c)
}

#[test]
fn demote_is_off_by_default_and_its_watermark_sits_above_the_promotion_reserve() {
    let c = Config::default();
    assert!(!c.migrator.demote);
    let c = Config::default()
        .with_setting("demote", "true")
        .and_then(|c| c.with_setting("demote_free_pct", "8"))
        .unwrap();
    assert!(c.migrator.demote);
    assert_eq!(c.migrator.demote_free_pct, 8);
    let err = c
        .with_setting("demote_free_pct", "2")
        .unwrap_err()
        .to_string();
    assert!(err.contains("demote_free_pct"), "{err}");
    assert!(err.contains("above promote_min_free_pct (2)"), "{err}");
    let err = Config::default()
        .with_setting("demote_free_pct", "0")
        .unwrap_err()
        .to_string();
    assert!(err.contains("1") && err.contains("60"), "{err}");
}

#[test]
fn defaults_match_the_seed() {
    let c = Config::default();
    assert_eq!(c.policy.freq_threshold, 2);
    assert_eq!(c.policy.promote_window_ms, 5000);
    assert_eq!(c.migrator.promote_rate_limit_mbps, 65536);
    assert_eq!(c.migrator.migrate_interval_ms, 100);
    assert_eq!(c.migrator.migrate_batch, 512);
}

#[test]
fn file_keys_are_applied() {
    let c = from_file(
        "enabled_sources = [\"trace:/tmp/a\", \"trace:-\"]\ntarget_nid = 1\nfreq_threshold = 1\n\
         promote_window_ms = 3000\npromote_rate_limit_MBps = 100\nmigrate_batch = 64\n\
         pids = [10, 20]\ndry_run = true\n",
    )
    .unwrap();
    assert_eq!(c.sources.len(), 2);
    assert_eq!(c.target_nid, Some(1));
    assert_eq!(c.policy.freq_threshold, 1);
    assert_eq!(c.policy.promote_window_ms, 3000);
    assert_eq!(c.migrator.promote_rate_limit_mbps, 100);
    assert_eq!(c.migrator.migrate_batch, 64);
    assert_eq!(c.pids, vec![10, 20]);
    assert!(c.migrator.dry_run);
}

#[test]
fn out_of_range_values_name_key_line_and_range() {
    let err = from_file("# comment\nfreq_threshold = 2\nmigrate_batch = 0\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "config /etc/pghotd/pghotd.toml line 3: migrate_batch = 0 is out of range; allowed 1..=65536"
    );
    let err = from_file("pids = [1, -5]").unwrap_err().to_string();
    assert!(err.contains("line 1: pids = -5 is out of range"), "{err}");
}

#[test]
fn unknown_keys_and_wrong_types_are_errors_with_a_line() {
    let err = from_file("freq_threshold = 2\nfreq_treshold = 3\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 2"), "{err}");
    assert!(err.contains("unknown field `freq_treshold`"), "{err}");
    let err = from_file("migrate_batch = \"many\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 1"), "{err}");
    let err = from_file("enabled_sources = [\"ibz\"]")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("enabled_sources: unknown source 'ibz'"),
        "{err}"
    );
}

#[test]
fn ibs_period_is_a_number_or_auto() {
    let c = from_file("[ibs]\nperiod = \"auto\"\ncpu_budget_pct = 3\n").unwrap();
    assert!(c.ibs_period_auto);
    assert_eq!(c.ibs_cpu_budget_pct, 3);
    let c = from_file("[ibs]\nperiod = 20000\n").unwrap();
    assert_eq!((c.ibs_period_auto, c.ibs.period), (false, 20000));
    let err = from_file("[ibs]\nperiod = \"fast\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 2: ibs.period: 'fast' is neither a number"),
        "{err}"
    );
    let err = from_file("[ibs]\nperiod = 16\n").unwrap_err().to_string();
    assert!(
        err.contains("ibs.period = 16 is out of range; allowed 144..="),
        "{err}"
    );
    let args = SettingArgs::parse_from(["--ibs-period", "auto"]).unwrap();
    let mut c = Config::default();
    c.apply_args(&args).unwrap();
    assert!(c.ibs_period_auto);
}

#[test]
fn perf_tables_are_read_and_checked() {
    let c = from_file("[perf]\nring_pages = 256\n[pagefault]\nperiod = 4\n").unwrap();
    assert_eq!((c.perf.ring_pages, c.pagefault.period), (256, 4));
    let err = from_file("freq_threshold = 2\n[perf]\nring_pages = 100\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 3: perf.ring_pages: 100 is not a power of two"),
        "{err}"
    );
    let err = from_file("[pagefault]\nperiod = 0\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pagefault.period = 0 is out of range"),
        "{err}"
    );
    let err = from_file("[perf]\nring_page = 2\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `ring_page`"), "{err}");
}

#[test]
fn flags_override_the_file_and_are_validated() {
    let mut c = from_file("freq_threshold = 5\n").unwrap();
    let args = SettingArgs::parse_from(["--freq-threshold", "3"]).unwrap();
    c.apply_args(&args).unwrap();
    assert_eq!(c.policy.freq_threshold, 3);
    let args = SettingArgs::parse_from(["--promote-window-ms=0"]).unwrap();
    let err = c.apply_args(&args).unwrap_err().to_string();
    assert_eq!(
        err,
        "flag --promote-window-ms: promote_window_ms = 0 is out of range; allowed 1..=3600000"
    );
}

#[test]
fn software_source_keys_are_applied_and_checked() {
    let c = from_file(
        "enabled_sources = [\"damon\", \"softdirty\"]\nsoftdirty_interval_ms = 500\n\
         softdirty_scan_budget_pages = 4096\ndamon_sample_us = 1000\ndamon_aggr_us = 50000\n\
         damon_min_regions = 5\ndamon_max_regions = 50\ndamon_max_samples = 100\n",
    )
    .unwrap();
    assert_eq!(c.sources, vec![SourceSpec::Damon, SourceSpec::SoftDirty]);
    assert_eq!(c.softdirty.interval_ms, 500);
    assert_eq!(c.softdirty.scan_budget_pages, 4096);
    assert_eq!(c.damon.sample_us, 1000);
    assert_eq!(c.damon.aggr_us, 50000);
    assert_eq!(c.damon.min_regions, 5);
    assert_eq!(c.damon.max_regions, 50);
    assert_eq!(c.damon.max_samples, 100);
    let err = from_file("damon_aggr_us = 600000\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 1: damon_aggr_us = 600000 is out of range; allowed 1000..=500000"),
        "{err}"
    );
    let err = from_file("damon_sample_us = 20000\ndamon_aggr_us = 10000\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 1: damon_sample_us: the sampling interval (20000 us)"),
        "{err}"
    );
    // A flag that breaks the file's setting is named.
    let mut c = from_file("damon_min_regions = 100\n").unwrap();
    let args = SettingArgs::parse_from(["--damon-max-regions", "50"]).unwrap();
    let err = c.apply_args(&args).unwrap_err().to_string();
    assert_eq!(
        err,
        "flag --damon-max-regions: damon_min_regions: damon_min_regions (100) must not exceed damon_max_regions (50)"
    );
    let err = from_file("softdirty_interval_ms = 5\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("softdirty_interval_ms = 5 is out of range"),
        "{err}"
    );
}

#[test]
fn config_set_validates_like_the_file() {
    let c = Config::default();
    let next = c.with_setting("freq_threshold", "3").unwrap();
    assert_eq!(next.policy.freq_threshold, 3);
    let err = c
        .with_setting("freq_threshold", "0")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "config set: freq_threshold = 0 is out of range; allowed 1..=65535"
    );
    let err = c
        .with_setting("freq_treshold", "3")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "config set: unknown key 'freq_treshold' (pghotctl config get lists them)"
    );
    let err = c
        .with_setting("migrate_batch", "many")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("migrate_batch: \"many\" is not one TOML value"),
        "{err}"
    );
    let err = c
        .with_setting("migrate_batch", "\"many\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid type: string \"many\""), "{err}");
    let err = c
        .with_setting("metrics_listen", "nowhere")
        .unwrap_err()
        .to_string();
    assert!(err.contains("'nowhere' is not ADDR:PORT"), "{err}");
    let next = c.with_setting("metrics_listen", "127.0.0.1:9464").unwrap();
    assert_eq!(next.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
    let next = c.with_setting("control_socket", "\"\"").unwrap();
    assert_eq!(next.control_socket, None);
    let next = c.with_setting("perf.ring_pages", "128").unwrap();
    assert_eq!(next.perf.ring_pages, 128);
}

#[test]
fn config_set_reads_what_config_get_shows_and_refuses_broken_quotes() {
    let c = Config::default();
    // DEL (U+007F) is bare in a JSON string (RFC 8259 escapes only U+0000..=U+001F) but a TOML
    // basic string must escape it (toml.io v1.0.0, "String"): the JSON form is taken as JSON.
    let next = c
        .with_setting("control_socket", "\"/run/a\u{7f}b\"")
        .unwrap();
    assert_eq!(
        next.control_socket.as_deref(),
        Some(std::path::Path::new("/run/a\u{7f}b"))
    );
    // A bare word is still the word itself.
    let next = c.with_setting("control_socket", "/run/x.sock").unwrap();
    assert_eq!(
        next.control_socket.as_deref(),
        Some(std::path::Path::new("/run/x.sock"))
    );
    // Quoted text that neither TOML nor JSON reads is refused, never taken quotes and all.
    for value in ["\"/run/open", "'/run/a\u{7f}b'", "\"a\\qb\""] {
        let err = c
            .with_setting("control_socket", value)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is quoted but is neither a TOML nor a JSON string"),
            "{value:?}: {err}"
        );
    }
}

#[test]
fn config_set_takes_one_value_never_a_document() {
    let c = Config::default();
    // A second key smuggled in after a newline, a table, a comment, a key of its own: each is
    // refused and names the key and the value, with no doubled word.
    for value in [
        "3\npromote_rate_limit_MBps = 1",
        "3\n[ibs]\nperiod = 200",
        "3 # a comment",
        "3\n# a comment",
        "freq_threshold = 3",
        "[table]",
        "{ a = 1 }",
        "3 3",
        "nan",
        "inf",
        "-nan",
        "3.5",
        "99999999999999999999999",
        "\"3\"",
    ] {
        let err = c
            .with_setting("freq_threshold", value)
            .map(|n| n.values())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config set: freq_threshold"),
            "{value:?}: {err}"
        );
        assert!(!err.contains("config config"), "{value:?}: {err}");
    }
    // Text keys take a bare word as one string, newline and all: it is never parsed as TOML.
    let next = c.with_setting("comm", "a\nfreq_threshold = 9").unwrap();
    assert_eq!(next.comm.as_deref(), Some("a\nfreq_threshold = 9"));
    assert_eq!(next.policy.freq_threshold, c.policy.freq_threshold);
    let next = c.with_setting("ibs.period", "auto").unwrap();
    assert!(next.ibs_period_auto);
    let next = c.with_setting("freq_threshold", " 7 ").unwrap();
    assert_eq!(next.policy.freq_threshold, 7);
    // Lists stay lists; a table where a list belongs is refused.
    let next = c.with_setting("pids", "[1, 2]").unwrap();
    assert_eq!(next.pids, vec![1, 2]);
    assert!(c.with_setting("pids", "[1]\n[admission]").is_err());
    let err = c.with_setting("ibs", "1").unwrap_err().to_string();
    assert!(err.contains("unknown key 'ibs'"), "{err}");
}

#[test]
fn an_empty_control_socket_flag_turns_the_socket_off() {
    let args = SettingArgs::parse_from(["--control-socket", ""]).unwrap();
    let mut c = Config::default();
    c.apply_args(&args).unwrap();
    assert_eq!(c.control_socket, None);
    let args = SettingArgs::parse_from(["--socket", ""]).unwrap();
    let mut c = Config::default();
    c.apply_args(&args).unwrap();
    assert_eq!(c.control_socket, None);
    // Other paths still say what is wrong with an empty one.
    let args = SettingArgs::parse_from(["--sysfs-root", ""]).unwrap();
    let err = Config::default().apply_args(&args).unwrap_err().to_string();
    assert!(err.contains("flag --sysfs-root: sysfs_root:"), "{err}");
}

#[test]
fn a_check_after_parsing_names_where_the_value_came_from() {
    let topology = crate::topology::Topology::read(crate::topology::SysfsRoot::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/qemu-3node"),
    ))
    .unwrap();
    let set = Config::default().with_setting("target_nid", "2").unwrap();
    let err = set.check_against(&topology).unwrap_err().to_string();
    assert!(
        err.starts_with("config set: target_nid: node 2 is not a top-tier memory node"),
        "{err}"
    );
    let file = from_file("freq_threshold = 2\ntarget_nid = 2\n").unwrap();
    let err = file.check_against(&topology).unwrap_err().to_string();
    assert!(
        err.starts_with("config /etc/pghotd/pghotd.toml line 2: target_nid"),
        "{err}"
    );
    let mut c = Config::default();
    c.apply_args(&SettingArgs::parse_from(["--target-nid", "2"]).unwrap())
        .unwrap();
    let err = c.check_against(&topology).unwrap_err().to_string();
    assert!(err.starts_with("flag --target-nid: target_nid"), "{err}");
}

#[test]
fn an_explicit_missing_config_is_an_error_the_default_is_not() {
    let err = Config::load(
        Some(Path::new("/nonexistent/p.toml")),
        &SettingArgs::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("reading config /nonexistent/p.toml"),
        "{err}"
    );
}

/// README.md's settings tables are the generated ones; `PGHOTD_UPDATE_README=1` rewrites them.
#[test]
fn the_readme_settings_tables_are_generated_from_the_table() {
    docs::assert_readme_generated(
        docs::readme_with_tables,
        "settings tables",
        "src/config/defs.rs",
        "config::tests::the_readme",
    );
}

/// The settings rows of README.md's tables, read from the file itself: (key, default cell).
fn readme_defaults() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(path).unwrap();
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in readme.lines() {
        if line.starts_with("| key | default |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let cells: Vec<String> = line
            .replace("\\|", "\u{1}")
            .split(" | ")
            .map(|c| {
                c.trim_matches(|ch| ch == '|' || ch == ' ')
                    .replace('\u{1}', "|")
            })
            .collect();
        // `key`, or `[table] key` for a key of a TOML table.
        let key = cells[0].trim_matches('`');
        let key = match key.strip_prefix('[').and_then(|k| k.split_once("] ")) {
            Some((table, name)) => format!("{table}.{name}"),
            None => key.to_string(),
        };
        rows.push((key, cells[1].clone()));
    }
    rows
}

/// What the README's default cell must say for a value `Config::default()` holds: its items
/// as text, or `None` when the code holds no value (null, an empty list) and the README has
/// to say in words what happens.
fn code_default_items(value: &serde_json::Value) -> Option<Vec<String>> {
    let item = |v: &serde_json::Value| match v {
        serde_json::Value::String(t) => t.clone(),
        other => other.to_string(),
    };
    match value {
        serde_json::Value::Null => None,
        serde_json::Value::Array(v) if v.is_empty() => None,
        serde_json::Value::Array(v) => Some(v.iter().map(item).collect()),
        other => Some(vec![item(other)]),
    }
}

/// Issue 20: the README said `enabled_sources` defaults to none while the code said `auto`.
/// Every key of the README's tables, read from README.md, against the value the code's
/// defaults hold (`config get` on `Config::default()`), not against the generator.
#[test]
fn every_readme_default_is_the_one_the_code_uses() {
    let code: std::collections::BTreeMap<&str, serde_json::Value> =
        Config::default().values().into_iter().collect();
    let rows = readme_defaults();
    let keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    let mut missing: Vec<&str> = code.keys().copied().filter(|k| !keys.contains(k)).collect();
    // Only the sections the README has tables for.
    missing.retain(|k| {
        setting(k).is_some_and(|s| {
            docs::README_TABLES
                .iter()
                .any(|(_, sections)| sections.contains(&s.section()))
        })
    });
    assert!(
        missing.is_empty(),
        "keys missing from README.md: {missing:?}"
    );
    for (key, cell) in &rows {
        let value = code
            .get(key.as_str())
            .unwrap_or_else(|| panic!("README key {key} unknown"));
        let said: Vec<String> = cell
            .split(", ")
            .map(|t| t.trim_matches('`').to_string())
            .collect();
        match code_default_items(value) {
            Some(items) => {
                // A switch may read "off" / "on".
                fn words(b: &str) -> &str {
                    match b {
                        "false" => "off",
                        "true" => "on",
                        other => other,
                    }
                }
                let same = said == items
                    || said.len() == 1 && items.len() == 1 && said[0] == words(&items[0]);
                assert!(same, "{key}: README says {cell:?}, the code holds {value}");
            }
            None => {
                // Words, not a value: "every process", "off", "none", ...
                let looks_like_a_value = cell.starts_with('`')
                    || cell.parse::<f64>().is_ok()
                    || cell == "true"
                    || cell == "false"
                    || cell.is_empty();
                assert!(
                    !looks_like_a_value,
                    "{key}: README says {cell:?}, the code holds no value ({value})"
                );
            }
        }
    }
}

/// Every key, its default as `config get` shows it and its range, as README.md and
/// `pghotd --help` gave them before the table existed (written out here by hand).
/// An allowed range, `min..=max`.
type Range = Option<(i64, i64)>;

const BY_HAND: &[(&str, &str, Range)] = &[
    ("enabled_sources", r#"["auto"]"#, None),
    ("target_nid", "null", Some((0, 1023))),
    ("freq_threshold", "2", Some((1, 65535))),
    ("promote_window_ms", "5000", Some((1, 3_600_000))),
    ("window_samples", "16384", Some((0, 1 << 24))),
    ("promote_rate_limit_MBps", "65536", Some((1, 1 << 30))),
    ("promote_min_free_pct", "2", Some((0, 50))),
    ("promote_thp_min_samples_pct", "25", Some((0, 100))),
    ("migrate_interval_ms", "100", Some((1, 60_000))),
    ("migrate_hold_ms", "1000", Some((0, 60_000))),
    ("migrate_batch", "512", Some((1, 65_536))),
    ("max_tracked_pages", "1048576", Some((1024, 1 << 32))),
    ("heat_halflife_ms", "1000", Some((1, 3_600_000))),
    ("hot_share_pct", "0", Some((0, 100))),
    ("demote_below_floor_pct", "0", Some((0, 99))),
    ("hot_share_room_mb", "0", Some((0, 1 << 20))),
    ("pids", "[]", Some((1, 4_194_303))),
    ("dry_run", "false", None),
    ("demote", "false", None),
    ("demote_free_pct", "5", Some((1, 60))),
    ("move_shared", "false", None),
    ("conflicts", r#""warn""#, None),
    ("cpu_policy", r#""auto""#, None),
    ("sysfs_root", r#""/sys""#, None),
    ("perf.ring_pages", "64", Some((1, 16384))),
    ("pagefault.period", "1", Some((1, 1 << 30))),
    ("ibs.period", "10000", Some((0x90, 0x7FF_FFF0))),
    ("ibs.cpu_budget_pct", "16", Some((1, 100))),
    ("ibs.count_ops", "true", None),
    ("ibs.l3miss_only", "null", None),
    ("ibs.ldlat", "null", Some((128, 2048))),
    ("ibs.user_only", "true", None),
    ("pebs.period", "2000", Some((1, 1 << 30))),
    ("pebs.ldlat", "30", Some((1, 65535))),
    ("pebs.stores", "true", None),
    ("softdirty_interval_ms", "1000", Some((10, 60_000))),
    (
        "softdirty_scan_budget_pages",
        "1048576",
        Some((1024, 1 << 32)),
    ),
    ("damon_sample_us", "5000", Some((100, 500_000))),
    ("damon_aggr_us", "100000", Some((1000, 500_000))),
    ("damon_min_regions", "10", Some((3, 1_000_000))),
    ("damon_max_regions", "1000", Some((3, 1_000_000))),
    ("damon_max_samples", "16384", Some((1, 1 << 22))),
    ("control_socket", r#""/run/pghotd/pghotd.sock""#, None),
    ("readonly_socket", "null", None),
    ("metrics_listen", "null", None),
    ("cgroups", "[]", None),
    ("comm", "null", None),
    ("pid_namespace_of", "null", Some((1, 4_194_303))),
    ("scope_refresh_ms", "1000", Some((10, 600_000))),
    ("admission.split", "false", None),
    ("admission.split_flat_entropy_pct", "95", Some((1, 100))),
    ("admission.split_coverage_pct", "80", Some((1, 100))),
    ("admission.split_heat_density_pct", "75", Some((1, 100))),
    ("admission.split_min_samples", "64", Some((1, 1 << 30))),
    ("admission.split_contention_MBps", "0", Some((0, 1 << 30))),
    ("admission.split_histogram", r#""auto""#, None),
    ("admission.sample_period", "null", Some((1, 1 << 32))),
    ("admission.full_duplex_nodes", "[]", Some((0, 1023))),
    ("admission.duplex_dominant_pct", "70", Some((51, 100))),
    ("admission.duplex_write_heavy_pct", "50", Some((1, 100))),
    ("admission.duplex_filter_KiB", "256", Some((1, 1 << 20))),
];

#[test]
fn config_get_shows_every_key_with_the_documented_default() {
    let values = Config::default().values();
    let shown: Vec<(&str, String)> = values.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let expected: Vec<(&str, String)> = BY_HAND
        .iter()
        .map(|(k, v, _)| (*k, v.to_string()))
        .collect();
    assert_eq!(shown, expected);
}

#[test]
fn every_range_admits_its_ends_and_names_itself_past_them() {
    // The cross-key checks would refuse some ends against the other keys' defaults.
    let base = Config::default()
        .with_setting("damon_aggr_us", "500000")
        .and_then(|c| c.with_setting("damon_sample_us", "100"))
        .and_then(|c| c.with_setting("damon_max_regions", "1000000"))
        .and_then(|c| c.with_setting("damon_min_regions", "3"))
        .and_then(|c| c.with_setting("hot_share_pct", "50"))
        .unwrap();
    for &(key, _, range) in BY_HAND {
        let Some((min, max)) = range else { continue };
        let list = key == "pids" || key == "admission.full_duplex_nodes";
        let text = |n: i64| {
            if list {
                format!("[{n}]")
            } else {
                n.to_string()
            }
        };
        for ok in [min, max] {
            if let Err(e) = base.with_setting(key, &text(ok)) {
                panic!("{key} = {ok}: {e}");
            }
        }
        for bad in [min - 1, max + 1] {
            let err = base.with_setting(key, &text(bad)).unwrap_err().to_string();
            assert_eq!(
                err,
                format!("config set: {key} = {bad} is out of range; allowed {min}..={max}")
            );
        }
    }
}

#[test]
fn runtime_keys_are_the_documented_ones() {
    let mut keys: Vec<&str> = runtime_keys().collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "cpu_policy",
            "demote",
            "demote_below_floor_pct",
            "demote_free_pct",
            "freq_threshold",
            "heat_halflife_ms",
            "hot_share_pct",
            "hot_share_room_mb",
            "migrate_batch",
            "migrate_hold_ms",
            "migrate_interval_ms",
            "promote_min_free_pct",
            "promote_rate_limit_MBps",
            "promote_thp_min_samples_pct",
            "promote_window_ms",
            "target_nid",
            "window_samples",
        ]
    );
}

#[test]
fn a_runtime_change_takes_runtime_keys_and_reports_the_others() {
    let mut running = Config::default();
    let next = from_file(
        "freq_threshold = 7\ntarget_nid = 1\ndry_run = true\nmax_tracked_pages = 4096\n\
         [admission]\nsplit_min_samples = 9\n",
    )
    .unwrap();
    let change = running.set_runtime(&next);
    assert_eq!(change.applied, ["target_nid", "freq_threshold"]);
    assert_eq!(
        change.needs_restart,
        [
            "max_tracked_pages",
            "dry_run",
            "admission.split_min_samples"
        ]
    );
    assert_eq!(
        (running.policy.freq_threshold, running.target_nid),
        (7, Some(1))
    );
    assert!(!running.migrator.dry_run);
    assert_eq!(running.max_tracked_pages, 1 << 20);
    assert_eq!(running.admission.split_min_samples, 64);
    // Back to the file without target_nid: unset again, as a restart would have it.
    let change = running.set_runtime(&Config::default());
    assert_eq!(change.applied, ["target_nid", "freq_threshold"]);
    assert_eq!(running.target_nid, None);
}

#[test]
fn every_flag_sets_its_key() {
    // (flags, key, value config get shows), spelled as `pghotd --help` spelled them.
    type Case<'a> = (&'a [&'a str], &'a str, &'a str);
    let cases: &[Case] = &[
        (
            &["--source", "damon", "--source", "softdirty"],
            "enabled_sources",
            r#"["damon","softdirty"]"#,
        ),
        (&["--pid", "3", "--pid", "4"], "pids", "[3,4]"),
        (&["--dry-run"], "dry_run", "true"),
        (&["--socket", "/tmp/s"], "control_socket", r#""/tmp/s""#),
        (
            &["--promote-rate-limit-MBps", "9"],
            "promote_rate_limit_MBps",
            "9",
        ),
        (&["--ibs-period", "auto"], "ibs.period", r#""auto""#),
        (&["--ibs-count-ops", "false"], "ibs.count_ops", "false"),
        (&["--perf-ring-pages", "8"], "perf.ring_pages", "8"),
        (&["--split-thp"], "admission.split", "true"),
        (
            &["--admission-sample-period", "7"],
            "admission.sample_period",
            "7",
        ),
        (
            &["--full-duplex-node", "2", "--full-duplex-node", "3"],
            "admission.full_duplex_nodes",
            "[2,3]",
        ),
        (
            &["--duplex-filter-KiB", "64"],
            "admission.duplex_filter_KiB",
            "64",
        ),
    ];
    for (flags, key, shown) in cases {
        let mut c = Config::default();
        c.apply_args(&SettingArgs::parse_from(flags.iter().copied()).unwrap())
            .unwrap();
        let value = c.values().into_iter().find(|(k, _)| k == key).unwrap().1;
        assert_eq!(value.to_string(), *shown, "{flags:?}");
    }
    let err = SettingArgs::parse_from(["--migrate-batch", "many"]).unwrap_err();
    assert!(err.to_string().contains("'many'"), "{err}");
}

#[test]
fn every_default_reads_back_through_config_set() {
    // What `config get` shows for a default, set again, is accepted and changes nothing.
    let defaults = Config::default();
    for (key, value) in defaults.values() {
        if value.is_null() {
            continue;
        }
        let again = defaults
            .with_setting(key, &value.to_string())
            .unwrap_or_else(|e| panic!("{key} = {value}: {e}"));
        assert_eq!(again, defaults, "{key}");
    }
}

#[test]
fn every_setting_without_a_value_says_its_default_in_words() {
    let defaults = Config::default();
    for s in SETTINGS {
        let empty = match (s.field.get)(&defaults) {
            None => true,
            Some(Written::Ints(v)) => v.is_empty(),
            Some(Written::Texts(v)) => v.is_empty(),
            Some(_) => false,
        };
        assert!(
            !empty || s.default.is_some(),
            "{} needs default words",
            s.key
        );
        assert!(
            !s.flag.is_empty() && !s.help.is_empty() && !s.doc.is_empty(),
            "{}",
            s.key
        );
    }
}

#[test]
fn the_man_page_lists_each_key_under_its_table() {
    let man = docs::man_page();
    assert!(man.starts_with(".TH pghotd.toml 5 "), "{man}");
    // By hand, from the README's tables.
    for entry in [
        ".SH KEYS\n.TP\n.B enabled_sources\n",
        ".B migrate_batch\nmigrators move candidates at once when this many wait\n.br\nDefault: 512.\n\
         .br\nAllowed: 1..=65536.\n.br\nFlag: \\fB\\-\\-migrate\\-batch\\fR.\n.br\n\
         \\fIChanges while running.\\fR\n",
        ".SH [ibs]\n.TP\n.B period\n",
        ".B split_min_samples\n",
        ".br\nFlag: \\fB\\-\\-pid\\fR, once per element.\n",
    ] {
        assert!(man.contains(entry), "{entry:?} not in\n{man}");
    }
    assert_eq!(man.matches(".SH KEYS").count(), 1);
    assert!(
        man.find(".SH [perf]").unwrap() > man.find(".B scope_refresh_ms").unwrap(),
        "tables after the top-level keys"
    );
}

#[test]
fn groff_reads_the_man_page_without_warnings() {
    let Ok(mut child) = std::process::Command::new("groff")
        .args(["-man", "-ww", "-z"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("groff not installed; the man page is not linted");
        return;
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(docs::man_page().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn room_for_the_share_to_stand_aside_needs_a_share() {
    let err = Config::default()
        .with_setting("hot_share_room_mb", "24")
        .unwrap_err()
        .to_string();
    assert!(err.contains("hot_share_room_mb"), "{err}");
    assert!(err.contains("lets hot_share_pct stand aside"), "{err}");
    assert!(err.contains("hot_share_pct (0) draws none"), "{err}");
    let c = Config::default()
        .with_setting("hot_share_pct", "80")
        .and_then(|c| c.with_setting("hot_share_room_mb", "24"))
        .unwrap();
    assert_eq!(c.policy.hot_share_room_mb, 24);
}

#[test]
fn moving_back_under_the_floor_needs_a_floor() {
    let err = Config::default()
        .with_setting("demote_below_floor_pct", "70")
        .unwrap_err()
        .to_string();
    assert!(err.contains("demote_below_floor_pct"), "{err}");
    assert!(err.contains("hot_share_pct (0)"), "{err}");
    let c = Config::default()
        .with_setting("hot_share_pct", "80")
        .and_then(|c| c.with_setting("demote_below_floor_pct", "70"))
        .unwrap();
    assert_eq!(
        (c.policy.hot_share_pct, c.policy.demote_below_floor_pct),
        (80, 70)
    );
    // Taking the floor away while it is in use names the pair too.
    let err = c
        .with_setting("hot_share_pct", "0")
        .unwrap_err()
        .to_string();
    assert!(err.contains("set hot_share_pct to 1..=99"), "{err}");
}
