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
    let args = TunableArgs::parse_from(["--ibs-period", "auto"]).unwrap();
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
    let args = TunableArgs::parse_from(["--freq-threshold", "3"]).unwrap();
    c.apply_args(&args).unwrap();
    assert_eq!(c.policy.freq_threshold, 3);
    let args = TunableArgs::parse_from(["--promote-window-ms=0"]).unwrap();
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
    let args = TunableArgs::parse_from(["--damon-max-regions", "50"]).unwrap();
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
    assert!(err.contains("unknown field `freq_treshold`"), "{err}");
    let err = c
        .with_setting("migrate_batch", "many")
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
fn an_explicit_missing_config_is_an_error_the_default_is_not() {
    let err = Config::load(
        Some(Path::new("/nonexistent/p.toml")),
        &TunableArgs::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("reading config /nonexistent/p.toml"),
        "{err}"
    );
}
