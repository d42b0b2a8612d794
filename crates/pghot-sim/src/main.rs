//! pghot-sim: the policy lab. Runs the pghot series' workload shapes against pghotd's real hotness
//! table and migrator on a simulated two-tier memory, and reports coverage of the hot set,
//! over-promotion, promoted bytes, time to 90/99 % and the daemon's CPU.
//!
//! ```text
//! pghot-sim --workload pointer-chase --period auto --json
//! pghot-sim --compare pointer-chase      # the pghot series' table, its figures next to ours
//! pghot-sim --thp-matrix                 # THP shapes x THP admission policies (issue 24)
//! ```

use std::process::ExitCode;

use clap::Parser;

use pghot_sim::seed;
use pghot_sim::thp::{ThpParams, ThpPolicy, ThpShape, run_thp, thp_table};
use pghot_sim::workload::Shape;
use pghot_sim::{CostModel, PeriodSetting, PghotdPolicy, Policy, Report, SimParams, run};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PolicyArg {
    Baseline,
    Numab2,
    Damon,
    Pghotd,
}

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Policy lab: pghotd's real code on a simulated two-tier memory"
)]
struct Args {
    /// Workload shape.
    #[arg(long, value_enum, default_value = "pointer-chase")]
    workload: Shape,
    /// Who promotes.
    #[arg(long, value_enum, default_value = "pghotd")]
    policy: PolicyArg,
    /// pghotd's sampling period: "auto" or a number of ops.
    #[arg(long, default_value = "auto", value_parser = parse_period)]
    period: PeriodArg,
    /// CPU budget of the auto period, % of one core (above 0, at most 100; the default is the
    /// daemon's ibs.cpu_budget_pct).
    #[arg(long, default_value_t = daemon_budget_pct(), value_parser = in_range(0.0, 100.0))]
    cpu_budget_pct: f64,
    /// Samples within the window that make a page a candidate (1..=65535, as the daemon's;
    /// the default is the daemon's).
    #[arg(long, default_value_t = pghotd::hotness::HotnessConfig::default().freq_threshold,
          value_parser = clap::value_parser!(u16).range(1..))]
    freq_threshold: u16,
    /// Promotion window, ms (1..=3600000, as the daemon's; the default is the daemon's).
    #[arg(long, default_value_t = pghot_sim::default_promote_window_ms(),
          value_parser = clap::value_parser!(u32).range(1..=3_600_000))]
    promote_window_ms: u32,
    /// Demote the coldest pages pghotd promoted when the fast tier runs low.
    #[arg(long)]
    demote: bool,
    /// Heat half-life, ms (1..=3600000, as the daemon's; the default is the daemon's).
    #[arg(long, default_value_t = pghotd::hotness::HotnessConfig::default().heat_halflife_ms,
          value_parser = clap::value_parser!(u32).range(1..=3_600_000))]
    heat_halflife_ms: u32,
    /// Candidates must be among the hottest pages holding this share of the heat (0..=100, as
    /// the daemon's `hot_share_pct`; the default is the daemon's).
    #[arg(long, default_value_t = pghotd::hotness::HotnessConfig::default().hot_share_pct,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    hot_share_pct: u8,
    /// Move promoted pages back once their heat falls under this % of the `hot_share_pct`
    /// floor (0..=99, as the daemon's `demote_below_floor_pct`; the default is the daemon's).
    #[arg(long, default_value_t = pghotd::hotness::HotnessConfig::default().demote_below_floor_pct,
          value_parser = clap::value_parser!(u8).range(0..=99))]
    demote_below_floor_pct: u8,
    /// Divide every size (pages, sample and migration rates) by this (1 to 2^20).
    #[arg(long, default_value_t = 64.0, value_parser = scale)]
    scale: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated seconds (at most a day).
    #[arg(long, default_value_t = 240.0, value_parser = in_range(0.0, MAX_DURATION_S))]
    duration: f64,
    /// Seconds between timeline rows; a run of more rows than pghot_sim::MAX_TIMELINE_ROWS
    /// spreads them wider.
    #[arg(long, default_value_t = 10.0, value_parser = in_range(0.0, MAX_DURATION_S))]
    report_every: f64,
    /// Daemon CPU per 4 KiB page moved, ns (default 2500, at most 1 s).
    #[arg(long, value_parser = in_range(0.0, 1e9))]
    migrate_cpu_ns: Option<f64>,
    /// Print one JSON object per run instead of tables.
    #[arg(long)]
    json: bool,
    /// Print the timeline of each run too.
    #[arg(long)]
    timeline: bool,
    /// Run the comparison set for this workload: baseline, NUMAB2, DAMON, pghot at periods
    /// 10000 and 5008 (threshold 1, like the pghot series), and pghotd's policies; for
    /// pointer-chase, zipf and graph also the series' figures next to the model's, with the
    /// error.
    #[arg(long, value_enum)]
    compare: Option<Shape>,
    /// Run the THP lab instead: every `--thp-shape` (all of them if none is given) under
    /// NUMAB2's model, pghotd without admission and pghotd --split-thp with each
    /// split_histogram, over 256 MiB of THPs for `--duration` s (use 10 for the rig's --quick).
    #[arg(long)]
    thp_matrix: bool,
    /// A THP lab shape; repeat for several.
    #[arg(long, value_enum)]
    thp_shape: Vec<ThpShape>,
}

/// pghotd's default `ibs.cpu_budget_pct`.
fn daemon_budget_pct() -> f64 {
    f64::from(pghotd::config::Config::default().ibs_cpu_budget_pct)
}

#[derive(Debug, Clone, Copy)]
enum PeriodArg {
    Auto,
    Fixed(u64),
}

fn parse_period(s: &str) -> Result<PeriodArg, String> {
    if s == "auto" {
        return Ok(PeriodArg::Auto);
    }
    match s.parse::<u64>() {
        Ok(p) if p > 0 => Ok(PeriodArg::Fixed(p)),
        _ => Err(format!(
            "'{s}': expected \"auto\" or a period of at least 1"
        )),
    }
}

/// One simulated day: 8.64 million ticks of 10 ms, some minutes of the host's time.
const MAX_DURATION_S: f64 = 86_400.0;

/// A parser of a number above `above` and at most `max` (NaN and infinities fail too).
fn in_range(above: f64, max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |s| match s.parse::<f64>() {
        Ok(v) if v > above && v <= max => Ok(v),
        _ => Err(format!(
            "'{s}': expected a number above {above} and at most {max}"
        )),
    }
}

/// `--scale`: at least 1 (full size), at most 2^20.
fn scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (1.0..=f64::from(1u32 << 20)).contains(&v) => Ok(v),
        _ => Err(format!("'{s}': expected a number from 1 to 1048576")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.thp_matrix {
        return thp_matrix(&args);
    }
    let runs = planned_runs(&args);
    let mut reports = Vec::new();
    for params in &runs {
        let report = run(params);
        if args.json {
            if !print_json(&report) {
                return ExitCode::FAILURE;
            }
        } else if args.timeline {
            print_timeline(&report);
        }
        reports.push(report);
    }
    if !args.json {
        print_table(&reports);
        match args.compare {
            Some(Shape::PointerChase) => print_seed_comparison(&reports),
            Some(shape) => print_shape_ratios(shape, &reports),
            None => {}
        }
    }
    ExitCode::SUCCESS
}

/// The runs `args` ask for: one policy, or with `--compare` the promoters side by side on
/// the same workload.
fn planned_runs(args: &Args) -> Vec<SimParams> {
    let mut costs = CostModel::default();
    if let Some(ns) = args.migrate_cpu_ns {
        costs.migrate_cpu_ns = ns;
    }
    let base = SimParams {
        label: String::new(),
        shape: args.compare.unwrap_or(args.workload),
        scale: args.scale,
        seed: args.seed,
        duration_s: args.duration,
        policy: Policy::Baseline,
        costs,
        report_every_s: args.report_every,
    };
    let pghotd = |period, threshold, demote| PghotdPolicy {
        period,
        freq_threshold: threshold,
        promote_window_ms: args.promote_window_ms,
        demote,
        heat_halflife_ms: args.heat_halflife_ms,
        hot_share_pct: args.hot_share_pct,
        demote_below_floor_pct: args.demote_below_floor_pct,
    };
    match args.compare {
        Some(_) => {
            let auto = PeriodSetting::Auto {
                cpu_budget_pct: args.cpu_budget_pct,
            };
            [
                ("baseline", Policy::Baseline),
                ("NUMAB2-like", Policy::Numab2),
                ("DAMON-like", Policy::Damon),
                (
                    "pghot p10000 thr1",
                    Policy::Pghotd(pghotd(PeriodSetting::Fixed(10_000), 1, false)),
                ),
                (
                    "pghot p5008 thr1",
                    Policy::Pghotd(pghotd(PeriodSetting::Fixed(5008), 1, false)),
                ),
                (
                    "pghotd p5008 thr2",
                    Policy::Pghotd(pghotd(PeriodSetting::Fixed(5008), 2, args.demote)),
                ),
                (
                    "pghotd auto thr1",
                    Policy::Pghotd(pghotd(auto, 1, args.demote)),
                ),
                (
                    "pghotd auto thr2",
                    Policy::Pghotd(pghotd(auto, 2, args.demote)),
                ),
            ]
            .into_iter()
            .map(|(label, policy)| SimParams {
                label: label.into(),
                policy,
                ..base.clone()
            })
            .collect()
        }
        None => {
            let period = match args.period {
                PeriodArg::Auto => PeriodSetting::Auto {
                    cpu_budget_pct: args.cpu_budget_pct,
                },
                PeriodArg::Fixed(p) => PeriodSetting::Fixed(p),
            };
            let (label, policy) = match args.policy {
                PolicyArg::Baseline => ("baseline".to_string(), Policy::Baseline),
                PolicyArg::Numab2 => ("NUMAB2-like".to_string(), Policy::Numab2),
                PolicyArg::Damon => ("DAMON-like".to_string(), Policy::Damon),
                PolicyArg::Pghotd => (
                    format!("pghotd {}", period_name(period)),
                    Policy::Pghotd(pghotd(period, args.freq_threshold, args.demote)),
                ),
            };
            vec![SimParams {
                label,
                policy,
                ..base
            }]
        }
    }
}

/// The pghot series' Redis and Graph500 ratios next to the model's.
fn print_shape_ratios(shape: Shape, reports: &[Report]) {
    let rows = seed::shape_ratios(shape, reports);
    if rows.is_empty() {
        return;
    }
    println!();
    println!(
        "against the pghot series' {} rows (ratios; not fitted, no bar)",
        shape.name()
    );
    println!(
        "{:<28} {:>8} {:>8} {:>8}",
        "ratio", "seed", "model", "error"
    );
    for r in rows {
        println!(
            "{:<28} {:>8.3} {:>8} {:>8}",
            r.what,
            r.seed,
            opt(r.model, 3),
            r.model.map_or("-".into(), |m| format!(
                "{:+.0}%",
                (m / r.seed - 1.0) * 100.0
            ))
        );
    }
}

/// The pghot series' pointer-chase figures next to the model's, with the error.
fn print_seed_comparison(reports: &[Report]) {
    let rows = seed::compare(seed::POINTER_CHASE, reports);
    println!();
    println!(
        "against the pghot series' pointer-chase table (fitted: bar 25 %; check: bar 2x; \
         pghot-sim/src/seed.rs)"
    );
    println!(
        "{:<4} {:<20} {:>12} {:>12} {:>8} {:<7} {:>4}",
        "row", "metric", "seed", "model", "error", "kind", "bar"
    );
    let num = |v: f64| {
        if v.abs() >= 1e5 {
            format!("{:.2}M", v / 1e6)
        } else {
            format!("{v:.1}")
        }
    };
    for c in &rows {
        println!(
            "{:<4} {:<20} {:>12} {:>12} {:>8} {:<7} {:>4}",
            c.figure.row,
            c.figure.metric.name(),
            num(c.figure.value),
            num(c.model),
            c.error_pct.map_or("-".into(), |e| format!("{e:+.0}%")),
            if c.figure.fitted { "fitted" } else { "check" },
            if c.within_bar { "ok" } else { "MISS" }
        );
    }
    let missed = rows.iter().filter(|c| !c.within_bar).count();
    println!(
        "{} of {} figures within their bar",
        rows.len() - missed,
        rows.len()
    );
}

/// Prints one report as a JSON line; false (said on stderr) when it cannot be written.
fn print_json(report: &impl serde::Serialize) -> bool {
    match serde_json::to_string(report) {
        Ok(line) => {
            println!("{line}");
            true
        }
        Err(e) => {
            eprintln!("pghot-sim: writing JSON: {e}");
            false
        }
    }
}

/// `--thp-matrix`: every shape asked for under every THP policy.
fn thp_matrix(args: &Args) -> ExitCode {
    let shapes = if args.thp_shape.is_empty() {
        ThpShape::ALL.to_vec()
    } else {
        args.thp_shape.clone()
    };
    let mut reports = Vec::new();
    for shape in shapes {
        for policy in ThpPolicy::ALL {
            let report = run_thp(&ThpParams {
                duration_s: args.duration,
                seed: args.seed,
                ..ThpParams::new(shape, policy)
            });
            if args.json && !print_json(&report) {
                return ExitCode::FAILURE;
            }
            reports.push(report);
        }
    }
    if !args.json {
        println!(
            "THP lab: 256 MiB of THPs on the slow node, 20000 samples/s over the hot set, {} s, \
             seed {}",
            args.duration, args.seed
        );
        print!("{}", thp_table(&reports));
    }
    ExitCode::SUCCESS
}

fn period_name(p: PeriodSetting) -> String {
    match p {
        PeriodSetting::Auto { cpu_budget_pct } => format!("auto ({cpu_budget_pct}%)"),
        PeriodSetting::Fixed(p) => format!("p{p}"),
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

fn print_table(reports: &[Report]) {
    let Some(first) = reports.first() else {
        return;
    };
    println!(
        "{} at 1/{} scale, {} s, seed {} (sizes and CPU are full-size equivalents)",
        first.workload, first.scale, first.duration_s, first.seed
    );
    println!(
        "{:<20} {:>7} {:>7} {:>7} {:>7} {:>9} {:>7} {:>7} {:>6} {:>6} {:>6} {:>7}",
        "run",
        "cover%",
        "over%",
        "seed-ov",
        "fastGB",
        "promotMB",
        "t90 s",
        "t99 s",
        "cpu%",
        "peak%",
        "lat ns",
        "period"
    );
    for r in reports {
        println!(
            "{:<20} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>9.0} {:>7} {:>7} {:>6} {:>6} {:>6.0} {:>7}",
            r.label,
            r.coverage_pct,
            r.over_promotion_pct,
            r.placement_over_pct,
            r.fast_gb,
            r.promoted_mb,
            opt(r.time_to_90_s, 1),
            opt(r.time_to_99_s, 1),
            opt(r.cpu_pct, 1),
            opt(r.cpu_peak_pct, 1),
            r.latency_ns,
            r.period_final.map_or("-".into(), |p| p.to_string()),
        );
    }
    for r in reports.iter().filter(|r| !r.recovery_95_s.is_empty()) {
        let rec: Vec<String> = r.recovery_95_s.iter().map(|s| opt(*s, 1)).collect();
        println!(
            "{}: recovery to 95 % after each shift (s): {}; fast tier peak {:.1}% used, \
             watermark {}",
            r.label,
            rec.join(" "),
            r.fast_peak_used_pct,
            if r.watermark_kept { "kept" } else { "CROSSED" }
        );
    }
}

fn print_timeline(r: &Report) {
    println!("{} ({})", r.label, r.workload);
    println!(
        "{:>7} {:>7} {:>7} {:>9} {:>8} {:>6} {:>6}",
        "t s", "cover%", "over%", "promotMB", "period", "cpu%", "lat"
    );
    for row in &r.timeline {
        println!(
            "{:>7.0} {:>7.1} {:>7.1} {:>9.0} {:>8} {:>6} {:>6.0}",
            row.t_s,
            row.coverage_pct,
            row.over_promotion_pct,
            row.promoted_mb,
            row.period.map_or("-".into(), |p| p.to_string()),
            opt(row.cpu_pct, 1),
            row.latency_ns
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("pghot-sim").chain(args.iter().copied()))
    }

    #[test]
    fn values_out_of_their_range_are_refused_by_name() {
        for (flag, value) in [
            ("--freq-threshold", "0"),
            ("--freq-threshold", "65536"),
            ("--cpu-budget-pct", "100000"),
            ("--cpu-budget-pct", "0"),
            ("--cpu-budget-pct", "NaN"),
            ("--promote-window-ms", "0"),
            ("--duration", "1e12"),
            ("--duration", "inf"),
            ("--duration", "-1"),
            ("--report-every", "0"),
            ("--scale", "0.5"),
            ("--scale", "NaN"),
            ("--migrate-cpu-ns", "-5"),
        ] {
            let err = parse(&[&format!("{flag}={value}")])
                .unwrap_err()
                .to_string();
            assert!(err.contains(flag), "{flag} {value}: {err}");
        }
        let a = parse(&["--freq-threshold", "1", "--cpu-budget-pct", "100"]).unwrap();
        assert_eq!((a.freq_threshold, a.cpu_budget_pct), (1, 100.0));
        let a = parse(&["--duration", "86400", "--scale", "1"]).unwrap();
        assert_eq!((a.duration, a.scale), (86_400.0, 1.0));
    }
}
