# The rig's --repeat summary (debian-rig.sh): read every RESULT of a run (jq -s), one SUMMARY
# object out per scenario named in $ARGS.positional, in that order. A phase with errors (a
# load that failed, a round that did not run) measured something else: it is left out of
# every figure, its own scenario's and its rivals' (a baseline with errors gives its pass no
# ratio), and counted:
#   failed                its phases left out
#   passes                the passes it ran in without errors
#   ops_per_s_median      its median ops/s over them (the mean of the middle two for an even count),
#   ops_per_s_min, _max   and the spread
#   x_baseline            per pass, its ops/s over the same pass's baseline (null without one)
#   x_baseline_median     the median of those
#   ahead_of              per other scenario: in how many of the passes both ran it served more
#   *_median              the median of app_modelled_mem_us_per_op, hot_fast_pct,
#                         over_promotion_pct and promoter_cpu_s (nulls left out)
#   running_over_stopped  with --pause-alternate: each pair of rounds from round 3 on (pghotd
#                         stopped through the odd round, running through the even one after
#                         it), the running round's ops/s over the stopped one's, pooled over its
#                         passes: {pairs, mean, median, se (the mean's standard error, the
#                         pairs' sample deviation over the root of their count), slower (pairs
#                         whose running round served less)}; null without such pairs
def median: sort | length as $n
	| if $n == 0 then null
	elif $n % 2 == 1 then .[($n - 1) / 2]
	else (.[$n / 2 - 1] + .[$n / 2]) / 2 end;
def rounded($k): if . == null then null else (. * $k | round / $k) end;
def r2: rounded(100);
def median_of(f): [.[] | f | select(. != null)] | median | r2;
def r4: rounded(10000);
# One phase's pairs: round n (1-based, odd, from 3) stopped and round n + 1 running.
def pause_pairs: (.round_ops // []) as $o | (.round_paused // []) as $p
	| [range(2; ($o | length) - 1; 2) as $i
		| select($p[$i] == 1 and $p[$i + 1] == 0 and $o[$i] > 0)
		| $o[$i + 1] / $o[$i]];
def pair_stats: length as $n
	| if $n == 0 then null
	else (add / $n) as $m
		| {pairs: $n, mean: ($m | r4), median: (median | r4),
			se: (if $n < 2 then null else ((map(. - $m | . * .) | add) / ($n - 1) / $n | sqrt | r4) end),
			slower: (map(select(. < 1)) | length)}
	end;

(map(select((.errors // 0) != 0)) | group_by(.scenario) | map({key: .[0].scenario, value: length}) | from_entries) as $failed
| map(select((.errors // 0) == 0)) as $all
| ($all | map(select(.scenario == "baseline") | {key: "\(.pass)", value: .ops_per_s}) | from_entries) as $base
| $ARGS.positional[] as $s
| [$all[] | select(.scenario == $s)] as $mine
| select(($mine | length > 0) or ($failed[$s] // 0) > 0)
| {
	scenario: $s,
	app: $mine[0].app,
	failed: ($failed[$s] // 0),
	passes: ($mine | length),
	ops_per_s_median: ($mine | median_of(.ops_per_s)),
	ops_per_s_min: ([$mine[].ops_per_s] | min),
	ops_per_s_max: ([$mine[].ops_per_s] | max),
	x_baseline: [$mine[] | $base["\(.pass)"] as $b
		| if $b == null or $b == 0 then null else (.ops_per_s / $b | r2) end],
	app_modelled_mem_us_per_op_median: ($mine | median_of(.app_modelled_mem_us_per_op)),
	hot_fast_pct_median: ($mine | median_of(.hot_fast_pct)),
	over_promotion_pct_median: ($mine | median_of(.over_promotion_pct)),
	promoter_cpu_s_median: ($mine | median_of(.promoter_cpu_s)),
	running_over_stopped: ([$mine[] | pause_pairs[]] | pair_stats),
	ahead_of: ([$ARGS.positional[] | select(. != $s)] | map(. as $o
		| [$mine[] | . as $m | $all[] | select(.scenario == $o and .pass == $m.pass)
			| $m.ops_per_s > .ops_per_s]
		| {key: $o, value: {passes: length, ahead: map(select(.)) | length}}) | from_entries)
}
| .x_baseline_median = (.x_baseline | median_of(.))
