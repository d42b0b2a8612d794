#!/bin/bash
# The PMU-less sources' matrix (issue 19): pghotd's softdirty and damon sources at their default
# settings against NUMA balancing's tiering mode and DAMON's migrate_hot, on several hot-set
# shapes, with pghotd started once the buffer is placed and together with the workload.
#
#   tests/vm/pmuless-matrix.sh [--duration SECS] [--threads N] [--shapes 'SHAPE...'] [-- RIG-ARGS]
#
# Shapes: block (one contiguous 32 MiB hot block, 30 % stores), scattered (32 MiB of 4 KiB pages
# scattered through the 256 MiB buffer, 30 % stores), read-only (the block, loads only: soft-dirty
# cannot see it), shifting (the block, moving to a fresh place every --shift-s seconds; the
# figures are those of the hot set at the end). For each shape, one rig.sh run gives baseline,
# numab2, damon, pghotd-softdirty and pghotd-damon with pghotd started after placement, and a
# second pghotd-softdirty and pghotd-damon with pghotd started together with the workload
# (`--start with`). pghotd runs at its own defaults (`--freq-threshold default`); the guest's
# CPUs are kept switching address spaces every 2 ms (`--tlb-flush-ms 2`: under TCG nothing
# else clears the software TLB, so accessed bits would never be set again; see README.md).
#
# Prints one table: per shape, start and scenario, the hot set on fast nodes, over-promotion, MB
# promoted, time to 99 %, the promoter's CPU per second of workload, and the workload's ns per
# access against baseline's in the same shape (what the promoter cost the program: the rig's
# slow node is no slower than the others, so a promoter cannot make it faster here).
# The rigs' own output goes to $PGHOT_MATRIX_LOG (default /tmp/pmuless-matrix.log).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
duration=30
threads=2
shift_s=10
shapes="block scattered read-only shifting"
while [ $# -gt 0 ]; do
	case $1 in
	--duration) duration=$2; shift ;;
	--threads) threads=$2; shift ;;
	--shapes) shapes=$2; shift ;;
	--shift-s) shift_s=$2; shift ;;
	--) shift; break ;;
	-h | --help) sed -n '2,21p' "$0" >&2; exit 2 ;;
	*) echo "pmuless-matrix: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
log=${PGHOT_MATRIX_LOG:-/tmp/pmuless-matrix.log}
: > "$log"
results=$(mktemp)
trap 'rm -f "$results"' EXIT

shape_args() {
	case $1 in
	block) echo "--pattern hot-block" ;;
	scattered) echo "--pattern hot-scattered" ;;
	read-only) echo "--pattern hot-block --workload-args --write-pct=0" ;;
	shifting) echo "--pattern hot-block --workload-args --shift-s=$shift_s" ;;
	*) echo "pmuless-matrix: unknown shape $1" >&2; exit 2 ;;
	esac
}

status=0
for shape in $shapes; do
	for start in placed with; do
		if [ "$start" = placed ]; then
			scenarios=(baseline numab2 damon pghotd-softdirty pghotd-damon)
		else
			scenarios=(pghotd-softdirty pghotd-damon)
		fi
		# shellcheck disable=SC2046 # shape_args is word-split on purpose
		if ! out=$("$here/rig.sh" --duration "$duration" --threads "$threads" --tlb-flush-ms 2 \
			--freq-threshold default --start "$start" $(shape_args "$shape") "$@" "${scenarios[@]}" 2>>"$log"); then
			echo "pmuless-matrix: $shape/$start: rig.sh failed (see $log)" >&2
			status=1
		fi
		echo "$out" >> "$log"
		grep '^RESULT ' <<< "$out" | sed 's/^RESULT //' |
			jq -c --arg shape "$shape" --arg start "$start" '. + {shape: $shape, start: $start}' >> "$results"
	done
done

printf '| shape | pghotd started | promoter | hot set fast %% | over-promotion %% | MB promoted | time to 99 %% s | promoter CPU per s | ns/access (vs baseline) |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
jq -rs '
	(map(select(.scenario == "baseline") | {key: .shape, value: .ns_per_access}) | from_entries) as $base
	| .[] | select(.scenario != "baseline" or .start == "placed")
	| def r(n): if . == null then "-" else (. * pow(10; n) | round / pow(10; n) | tostring) end;
	  ($base[.shape]) as $b
	| [ .shape,
	    (if (.scenario | startswith("pghotd-")) then .start else "-" end),
	    .scenario, (.hot_fast_pct | r(1)), (.over_promotion_pct | r(1)), (.mb_promoted | r(1)),
	    (.time_to_99_s | r(2)),
	    (if .promoter_cpu_s != null and .duration_s > 0 then (.promoter_cpu_s / .duration_s | r(3)) else "-" end)
	      + (if .promoter_cpu_from == "workload-stime" then " (task sys)" else "" end),
	    (.ns_per_access | r(0)) + (if $b != null and $b > 0 and .scenario != "baseline"
	      then " (\((.ns_per_access / $b - 1) * 100 | r(1)) %)" else "" end) ]
	| "| " + join(" | ") + " |"' "$results"
exit "$status"
