//! The QEMU rig's `--repeat` summary (tests/vm/passes.jq, called by tests/vm/debian-rig.sh):
//! run on RESULT lines written by hand, every expected figure worked out by hand beside it.

mod util;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Runs passes.jq over `results` (one RESULT object each) for `scenarios`.
fn summarize(results: &[Value], scenarios: &[&str]) -> Vec<Value> {
    let program = util::workspace_root().join("tests/vm/passes.jq");
    let mut child = Command::new("jq")
        .args(["-cs", "--args", "-f"])
        .arg(&program)
        .args(scenarios)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("jq runs");
    {
        let mut stdin = child.stdin.take().unwrap();
        for r in results {
            writeln!(stdin, "{r}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "jq failed: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A JSON number as f64 (jq writes 1.0 as 1).
fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn nums(v: &Value) -> Vec<Option<f64>> {
    v.as_array().expect("an array").iter().map(num).collect()
}

fn result(scenario: &str, pass: u32, ops: f64, us_per_op: f64, cpu: Option<f64>) -> Value {
    json!({"scenario": scenario, "app": "redis", "pass": pass, "ops_per_s": ops,
        "app_modelled_mem_us_per_op": us_per_op, "hot_fast_pct": 50.0,
        "over_promotion_pct": 100.0, "promoter_cpu_s": cpu})
}

#[test]
fn medians_ratios_to_the_same_pass_and_passes_ahead_without_failed_phases() {
    if !util::tool_present("jq") {
        return;
    }
    // Three passes; numab2's second phase ran with an error (its load failed: an empty server
    // answers fast), so only passes 1 and 3 count for it, and it is counted as failed.
    let mut failed = result("numab2", 2, 9000.0, 1.0, None);
    failed["errors"] = json!(1);
    let results = [
        result("baseline", 1, 1000.0, 8.0, None),
        result("numab2", 1, 1500.0, 5.0, None),
        failed,
        result("pghotd-ibs-emu", 1, 1400.0, 4.5, Some(10.0)),
        result("pghotd-ibs-emu", 2, 1800.0, 4.3, Some(14.0)),
        result("baseline", 2, 1200.0, 7.0, None),
        result("baseline", 3, 1100.0, 7.5, None),
        result("numab2", 3, 1200.0, 6.0, None),
        result("pghotd-ibs-emu", 3, 1300.0, 4.4, Some(12.0)),
    ];
    let got = summarize(&results, &["baseline", "numab2", "pghotd-ibs-emu"]);
    assert_eq!(got.len(), 3);
    let (base, numab2, pghotd) = (&got[0], &got[1], &got[2]);

    assert_eq!(base["scenario"], "baseline");
    assert_eq!(num(&base["ops_per_s_median"]), Some(1100.0)); // 1000, 1100, 1200
    assert_eq!(nums(&base["x_baseline"]), [Some(1.0), Some(1.0), Some(1.0)]);
    assert_eq!(base["promoter_cpu_s_median"], Value::Null);

    // An even count: the mean of the middle two, (1200 + 1500) / 2.
    assert_eq!(numab2["passes"], 2);
    assert_eq!(numab2["failed"], 1);
    assert_eq!(base["failed"], 0);
    assert_eq!(num(&numab2["ops_per_s_median"]), Some(1350.0));
    assert_eq!(num(&numab2["ops_per_s_min"]), Some(1200.0));
    assert_eq!(num(&numab2["ops_per_s_max"]), Some(1500.0));
    // 1500 / 1000 in pass 1, 1200 / 1100 = 1.0909 in pass 3.
    assert_eq!(nums(&numab2["x_baseline"]), [Some(1.5), Some(1.09)]);
    assert_eq!(num(&numab2["app_modelled_mem_us_per_op_median"]), Some(5.5));

    // In results' order: passes 1, 2, 3: 1400 / 1000, 1800 / 1200, 1300 / 1100 = 1.1818.
    assert_eq!(
        nums(&pghotd["x_baseline"]),
        [Some(1.4), Some(1.5), Some(1.18)]
    );
    assert_eq!(num(&pghotd["x_baseline_median"]), Some(1.4));
    assert_eq!(num(&pghotd["ops_per_s_median"]), Some(1400.0));
    assert_eq!(num(&pghotd["promoter_cpu_s_median"]), Some(12.0));
    assert_eq!(num(&pghotd["app_modelled_mem_us_per_op_median"]), Some(4.4));
    // Against numab2 only where both ran without errors: pass 1 (1400 < 1500) and pass 3
    // (1300 > 1200); its failed pass 2 (9000) is not a pass pghotd lost.
    assert_eq!(
        pghotd["ahead_of"],
        json!({"baseline": {"passes": 3, "ahead": 3}, "numab2": {"passes": 2, "ahead": 1}})
    );
    // numab2 against baseline: 1500 > 1000 and 1200 > 1100.
    assert_eq!(
        numab2["ahead_of"]["baseline"],
        json!({"passes": 2, "ahead": 2})
    );
}

#[test]
fn a_pass_without_a_sound_baseline_has_no_ratio_and_a_tie_is_not_ahead() {
    if !util::tool_present("jq") {
        return;
    }
    // Pass 1's baseline ran with an error: no ratio for pass 1 either.
    let mut failed_base = result("baseline", 1, 1000.0, 8.0, None);
    failed_base["errors"] = json!(2);
    let results = [
        failed_base,
        result("numab2", 1, 2000.0, 5.0, None),
        result("damon", 1, 2000.0, 4.0, Some(20.0)),
        result("baseline", 2, 1000.0, 8.0, None),
        result("damon", 2, 2500.0, 4.2, Some(21.0)),
    ];
    let got = summarize(&results, &["numab2", "damon", "pghotd-softdirty"]);
    // No result for pghotd-softdirty: no summary for it.
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["failed"], 0);
    assert_eq!(nums(&got[0]["x_baseline"]), [None]);
    assert_eq!(got[0]["x_baseline_median"], Value::Null);
    assert_eq!(nums(&got[1]["x_baseline"]), [None, Some(2.5)]);
    assert_eq!(num(&got[1]["x_baseline_median"]), Some(2.5));
    // 2000 against 2000 in pass 1.
    assert_eq!(
        got[1]["ahead_of"],
        json!({"numab2": {"passes": 1, "ahead": 0}, "pghotd-softdirty": {"passes": 0, "ahead": 0}})
    );
    // (20 + 21) / 2
    assert_eq!(num(&got[1]["promoter_cpu_s_median"]), Some(20.5));
}

/// A `--pause-alternate` phase: `rounds` as (ops/s, stopped).
fn paused_result(pass: u32, rounds: &[(f64, u8)], errors: u32) -> Value {
    let mut r = result("pghotd-ibs-emu", pass, 1.0, 1.0, Some(5.0));
    r["round_ops"] = json!(rounds.iter().map(|r| r.0).collect::<Vec<_>>());
    r["round_paused"] = json!(rounds.iter().map(|r| r.1).collect::<Vec<_>>());
    r["errors"] = json!(errors);
    r
}

#[test]
fn pause_alternate_pairs_pool_over_sound_passes_from_round_three() {
    if !util::tool_present("jq") {
        return;
    }
    let results = [
        result("baseline", 1, 1.0, 1.0, None),
        // Rounds 1-2 (from the fill) and the unpaired round 9 are not pairs: 1.9 / 2.0 = 0.95,
        // 2.1 / 2.0 = 1.05, 3.0 / 4.0 = 0.75.
        paused_result(
            1,
            &[
                (5.0, 1),
                (5.0, 0),
                (2.0, 1),
                (1.9, 0),
                (2.0, 1),
                (2.1, 0),
                (4.0, 1),
                (3.0, 0),
                (9.0, 1),
            ],
            0,
        ),
        // A stopped round that served nothing gives no ratio; then 2.2 / 2.0 = 1.1.
        paused_result(
            2,
            &[(1.0, 1), (1.0, 0), (0.0, 1), (1.0, 0), (2.0, 1), (2.2, 0)],
            0,
        ),
        // A phase with errors is left out (its 0.5 would count).
        paused_result(3, &[(1.0, 1), (1.0, 0), (1.0, 1), (0.5, 0)], 1),
        // Not alternated: no pairs.
        paused_result(4, &[(1.0, 0), (1.0, 0), (1.0, 0), (0.5, 0)], 0),
    ];
    let got = summarize(&results, &["baseline", "pghotd-ibs-emu"]);
    assert_eq!(got[0]["running_over_stopped"], Value::Null);
    let pairs = &got[1]["running_over_stopped"];
    // 0.95, 1.05, 0.75, 1.1: mean 3.85 / 4 = 0.9625, median (0.95 + 1.05) / 2 = 1.0; squared
    // deviations 0.00015625 + 0.00765625 + 0.04515625 + 0.01890625 = 0.071875, / 3 / 4 =
    // 0.00598958, whose root is 0.0774; 0.95 and 0.75 are slower.
    assert_eq!(pairs["pairs"], 4);
    assert_eq!(num(&pairs["mean"]), Some(0.9625));
    assert_eq!(num(&pairs["median"]), Some(1.0));
    assert_eq!(num(&pairs["se"]), Some(0.0774));
    assert_eq!(pairs["slower"], 2);
}
