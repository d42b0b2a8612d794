#!/bin/bash
# pghotd's cost when there is nothing to do: CPU time and wake-ups per thread over SECS seconds
# (default 30) of a daemon that reads an empty trace FIFO, manages one sleeping process and has
# a migrator (the 3-node fixture topology), measured with `perf stat --per-thread`.
#   benches/idle-cost.sh [PGHOTD-BINARY] [SECS]      (as root; perf installed)
# Prints one row per thread and a total. BENCHMARKS.md, "pghotd's idle cost", has the figures.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/target/release/pghotd}
secs=${2:-30}
[ -x "$bin" ] || { echo "no pghotd at $bin (cargo build --release)" >&2; exit 2; }
command -v perf > /dev/null || { echo "perf is needed (apt install linux-perf)" >&2; exit 2; }
dir=$(mktemp -d)
mkfifo "$dir/trace"
sleep $((secs + 30)) &
victim=$!
"$bin" --source "trace:$dir/trace" --pid "$victim" --sysfs-root "$here/tests/fixtures/sysfs/qemu-3node" \
	--control-socket "$dir/ctl.sock" > "$dir/log" 2>&1 &
daemon=$!
trap 'kill $daemon $victim 2> /dev/null; rm -rf "$dir"' EXIT
sleep 3
kill -0 "$daemon" 2> /dev/null || { cat "$dir/log" >&2; exit 1; }
# perf stat -x, --per-thread: comm-tid,value,unit,event,...
perf stat -x, -e task-clock,context-switches --per-thread -p "$daemon" -- sleep "$secs" 2> "$dir/stat"
awk -F, -v secs="$secs" '
	$4 ~ /^task-clock/ { ms[$1] = $2 }
	$4 ~ /^context-switches/ { cs[$1] = $2 }
	END {
		printf "%-24s %12s %14s\n", "thread", "CPU ms", "wake-ups/s"
		for (t in ms) {
			# A thread that never ran in the window: perf says "<not counted>".
			if (ms[t] !~ /^[0-9.]+$/) { ms[t] = 0; cs[t] = 0 }
			name = t; sub(/-[0-9]+$/, "", name)
			printf "%-24s %12.2f %14.1f\n", name, ms[t], cs[t] / secs
			tm += ms[t]; tc += cs[t]
		}
		printf "%-24s %12.2f %14.1f   (%.3f %% of a core)\n", "total", tm, tc / secs, tm / (secs * 10)
	}' "$dir/stat"
