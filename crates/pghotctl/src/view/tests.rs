//! Golden-text tests of the view, drawn into ratatui's TestBackend from fixed snapshots.

use super::*;
use pghot_protocol::PidCounts;
use pghot_protocol::{NodeRow, RangeRow, RangesView};

fn snapshot(uptime_s: f64, total: u64, dropped: u64, bytes0: u64, samples: [u64; 3]) -> Snapshot {
    let pid = |pid: u32, comm: &str, samples: u64, hot: u64, hot_slow: u64, promoted: u64| PidRow {
        pid,
        comm: comm.into(),
        counts: PidCounts {
            samples,
            recorded: samples,
            candidates: promoted,
            promoted_pages: promoted,
            promoted_bytes: promoted * 4096,
            fail: pid as u64 % 3,
        },
        tracked_pages: hot * 2,
        hot,
        hot_slow,
    };
    Snapshot {
        counters: [
            ("hwhint_total_events".to_string(), total),
            ("hwhint_dropped_events".to_string(), dropped),
            ("pgpromote_bytes_node0".to_string(), bytes0),
        ]
        .into_iter()
        .collect(),
        uptime_s,
        paused: false,
        dry_run: true,
        sources: vec!["trace:/run/pghot.fifo".into()],
        promote_rate_limit_mbps: 64,
        tracked_pages: 12_345,
        max_tracked_pages: 1 << 20,
        heat_floor_samples: None,
        fast_nodes_short: None,
        nodes: vec![
            NodeRow {
                node: 0,
                tier: "top".into(),
                cpus: 1,
                mem_total_kb: 1_030_716,
                mem_free_kb: Some(515_358),
                queue_depth: None,
            },
            NodeRow {
                node: 2,
                tier: "lower".into(),
                cpus: 0,
                mem_total_kb: 1_048_576,
                mem_free_kb: Some(943_718),
                queue_depth: Some(3),
            },
        ],
        pids: vec![
            pid(4242, "redis-server", samples[0], 512, 40, 2560),
            pid(977, "postgres", samples[1], 1200, 900, 256),
            pid(31337, "memcached", samples[2], 8, 8, 0),
        ],
        pids_omitted: 0,
        ranges: None,
        admission: None,
        conflicts: Vec::new(),
    }
}

fn app() -> App {
    let mut app = App::default();
    app.update(snapshot(60.0, 100_000, 100, 0, [50_000, 20_000, 1_000]));
    app.update(snapshot(
        62.0,
        124_000,
        124,
        20 << 20,
        [62_000, 30_000, 1_100],
    ));
    app
}

fn draw(app: &App, w: u16, h: u16) -> String {
    draw_text(app, w, h)
}

/// Compares with a golden file; `PGHOTD_BLESS=1 cargo test` rewrites it (review the diff).
fn assert_golden(got: &str, name: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/view/golden")
        .join(name);
    if std::env::var_os("PGHOTD_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(got, want, "{} differs; got:\n{got}", path.display());
}

#[test]
fn processes_at_80x24() {
    assert_golden(&draw(&app(), 80, 24), "processes-80x24.txt");
}

#[test]
fn sorting_selection_ranges_and_help() {
    let mut app = app();
    app.sort = SortKey::HotSlow;
    assert_eq!(app.selected_pid(), Some(977));
    app.sort = SortKey::SamplesPerSec;
    assert_eq!(app.selected_pid(), Some(4242), "6000/s beats 5000/s");
    let mut snap = app.current.clone().unwrap();
    snap.paused = true;
    snap.ranges = Some(RangesView {
        pid: 4242,
        comm: "redis-server".into(),
        ranges: vec![
            RangeRow {
                start: 0x7f00_0000_0000,
                end: 0x7f00_0010_0000,
                pages: 256,
                heat: 1234.5,
                node: Some(2),
                slow_pages: 256,
            },
            RangeRow {
                start: 0x5555_0000_0000,
                end: 0x5555_0000_2000,
                pages: 2,
                heat: 7.0,
                node: None,
                slow_pages: 1,
            },
        ],
    });
    app.current = Some(snap);
    app.mode = Mode::Ranges(4242);
    assert_golden(&draw(&app, 80, 24), "ranges-80x24.txt");
    app.help = true;
    let got = draw(&app, 80, 24);
    assert!(got.contains("s        sort by the next column"), "\n{got}");
}

#[test]
fn degrades_when_small_or_without_a_daemon() {
    let got = draw(&app(), 40, 8);
    assert!(got.starts_with("terminal 40x8 is too small"), "\n{got}");
    let mut app = App {
        error: Some("no pghotd is listening on /run/pghotd/pghotd.sock".into()),
        ..App::default()
    };
    let got = draw(&app, 80, 24);
    assert!(got.starts_with("no pghotd is listening"), "\n{got}");
    // Data already shown stays, marked stale.
    app.current = Some(snapshot(1.0, 1, 0, 0, [1, 1, 1]));
    let got = draw(&app, 80, 24);
    assert!(
        got.lines().nth(1).unwrap().starts_with("STALE: no pghotd"),
        "\n{got}"
    );
}

#[test]
fn a_competing_promoter_is_shown_under_the_nodes() {
    let mut app = app();
    let mut snap = app.current.clone().unwrap();
    snap.conflicts = vec![pghot_protocol::Conflict {
        kind: pghot_protocol::ConflictKind::NumaBalancing,
        detail: "kernel.numa_balancing = 2 (memory tiering)".into(),
        remedy: "sysctl kernel.numa_balancing=0".into(),
    }];
    app.current = Some(snap);
    let got = draw(&app, 80, 24);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines[4].trim_end(),
        "CONFLICT kernel.numa_balancing = 2 (memory tiering)",
        "\n{got}"
    );
    assert_eq!(
        lines[5].trim_end(),
        "  fix: sysctl kernel.numa_balancing=0",
        "\n{got}"
    );
    assert!(lines[6].starts_with("┌ processes"), "\n{got}");
}

#[test]
fn the_heat_floor_is_shown_beside_the_table_while_there_is_one() {
    let mut app = app();
    let got = draw(&app, 120, 24);
    assert!(!got.contains("floor"), "\n{got}");
    let mut snap = app.current.clone().unwrap();
    snap.heat_floor_samples = Some(6.5);
    app.current = Some(snap);
    let got = draw(&app, 120, 24);
    let line = got.lines().nth(1).unwrap().trim_end();
    assert!(
        line.ends_with("tracked 12.3k of 1.0M  floor 6.5 samples"),
        "{line}"
    );
}

#[test]
fn p_asks_in_the_key_line_before_it_pauses() {
    let mut app = app();
    app.confirm_pause = true;
    let got = draw(&app, 80, 24);
    assert_eq!(got.lines().nth(23), Some(CONFIRM_PAUSE), "\n{got}");
    assert!(CONFIRM_PAUSE.contains("y pauses"));
}

#[test]
fn the_once_frame_is_the_live_frame_with_its_own_key_line() {
    let first = snapshot(60.0, 100_000, 100, 0, [50_000, 20_000, 1_000]);
    let second = snapshot(62.0, 124_000, 124, 20 << 20, [62_000, 30_000, 1_100]);
    let once = text_frame(first, second, None, 80, 24);
    let live = draw(&app(), 80, 24);
    let (once_body, once_keys) = once.trim_end_matches('\n').rsplit_once('\n').unwrap();
    let (live_body, _) = live.trim_end_matches('\n').rsplit_once('\n').unwrap();
    assert_eq!(once_body, live_body);
    assert_eq!(once_keys, "pghotctl top --once: rates over 2.0s");
    assert_eq!(once.lines().count(), 24);
}
