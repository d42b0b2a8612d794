#!/bin/bash
# pghotd's cost when there is nothing to do: CPU time and wake-ups per thread over SECS seconds
# (default 30) of a daemon that reads an empty trace FIFO, manages one sleeping process and has
# a migrator (the 3-node fixture topology), measured with `perf stat --per-thread`.
# With LINES_PER_S > 0, a writer trickles that many trace lines a second into the FIFO, in
# bursts every 4 ms as the Debian rig's guest relay does (80 % on 1300 hot pages of one process
# on lower-tier node 2, the rest on 60000 others; --dry-run, so nothing moves).
#   benches/idle-cost.sh [PGHOTD-BINARY] [SECS] [LINES_PER_S]   (as root; perf and python3)
# Prints one row per thread and a total. BENCHMARKS.md, "pghotd's idle cost", has the figures.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/target/release/pghotd}
secs=${2:-30}
rate=${3:-0}
[ -x "$bin" ] || { echo "no pghotd at $bin (cargo build --release)" >&2; exit 2; }
command -v perf > /dev/null || { echo "perf is needed (apt install linux-perf)" >&2; exit 2; }
dir=$(mktemp -d)
mkfifo "$dir/trace"
sleep $((secs + 30)) &
victim=$!
dry=()
[ "$rate" -eq 0 ] || dry=(--dry-run)
"$bin" --source "trace:$dir/trace" --pid "$victim" --sysfs-root "$here/tests/fixtures/sysfs/qemu-3node" \
	--control-socket "$dir/ctl.sock" "${dry[@]}" > "$dir/log" 2>&1 &
daemon=$!
writer=
if [ "$rate" -gt 0 ]; then
	python3 - "$dir/trace" "$victim" "$rate" "$((secs + 5))" <<'PY' &
import random, sys, time
path, pid, rate, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
out = open(path, "w")
out.write("# pghot-trace v1: time_ns cpu pid tid vaddr paddr op src node [latency]\n")
start, sent = time.monotonic(), 0
while time.monotonic() - start < secs:
    lines = []
    while sent < int((time.monotonic() - start) * rate):
        page = random.randrange(1300) if random.random() < 0.8 else 1300 + random.randrange(60000)
        vaddr = 0x7F0000000000 + page * 4096 + random.randrange(64) * 64
        lines.append(f"{time.clock_gettime_ns(time.CLOCK_MONOTONIC)} 0 {pid} {pid} {vaddr:#x} - L extmem 2\n")
        sent += 1
    if lines:
        out.write("".join(lines))
        out.flush()
    time.sleep(0.004)
PY
	writer=$!
fi
trap 'kill $daemon $victim $writer 2> /dev/null; rm -rf "$dir"' EXIT
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
