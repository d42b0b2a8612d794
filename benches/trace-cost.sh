#!/bin/bash
# The trace source's instructions per sample: pghotd reads a 200,000-line pghot-trace v1 file
# (Redis-shaped: 80 % of the samples on 3,000 of 65,536 pages of one process, each line with
# paddr and node 2, as the QEMU rig's guest relay writes them) under valgrind's cachegrind,
# with --dry-run on the 3-node fixture topology, and prints instructions per sample for the
# whole daemon and its busiest functions. Under the rig's TCG a guest instruction costs tens
# of host instructions, so this count, not native time, is what the trace source costs there.
#   benches/trace-cost.sh [PGHOTD-BINARY] [LINES]   (valgrind and python3)
# BENCHMARKS.md, "Trace lines", has the figures.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/target/release/pghotd}
lines=${2:-200000}
[ -x "$bin" ] || { echo "no pghotd at $bin (cargo build --release)" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "valgrind is needed (apt install valgrind)" >&2; exit 2; }
dir=$(mktemp -d)
sleep 600 &
victim=$!
trap 'kill $victim 2> /dev/null; rm -rf "$dir"' EXIT
python3 - "$dir/trace" "$victim" "$lines" <<'PY'
import random, sys
path, pid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(1)
base = 0x7F0000000000
frames = list(range(0x80000, 0x80000 + 65536))
random.shuffle(frames)
t = 10**12
with open(path, "w") as out:
    out.write("# pghot-trace v1: time_ns cpu pid tid vaddr paddr op src node [latency]\n")
    out.write("# sample_period 5008\n")
    for i in range(n):
        page = random.randrange(3000) if random.random() < 0.8 else random.randrange(65536)
        page = (page * 7919) % 65536
        off = random.randrange(64) * 64
        t += 50000
        op = "S" if random.random() < 0.3 else "L"
        out.write(f"{t} {i % 2} {pid} {pid} {base + page * 4096 + off:#x} "
                  f"{frames[page] * 4096 + off:#x} {op} extmem 2\n")
PY
valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$dir/cg.out" "$bin" \
	--source "trace:$dir/trace" --pid "$victim" \
	--sysfs-root "$here/tests/fixtures/sysfs/qemu-3node" \
	--control-socket "$dir/ctl.sock" --dry-run > "$dir/log" 2>&1 ||
	{ cat "$dir/log" >&2; exit 1; }
grep -q "done (SourcesEnded).* $lines samples" "$dir/log" ||
	{ echo "pghotd did not read all $lines samples:" >&2; tail -3 "$dir/log" >&2; exit 1; }
# cg_annotate's summary: "Ir" count, then the file:function. Rows of at least 10 per sample.
cg_annotate "$dir/cg.out" | awk -v n="$lines" '
	/PROGRAM TOTALS/ { gsub(",", "", $1); printf "%8.0f  %s\n", $1 / n, "whole daemon"; go = 1; next }
	go && $1 ~ /^[0-9,]+$/ {
		gsub(",", "", $1)
		if ($1 / n < 10) exit
		printf "%8.0f  %s\n", $1 / n, $NF
	}' | sed '1i instructions/sample  function'
