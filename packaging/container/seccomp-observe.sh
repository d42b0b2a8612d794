#!/usr/bin/env bash
# Lists the system calls a static pghotd (build-prebuilt.sh's) makes, by running it under
# strace through each source that works on the machine and every control-socket, metrics and
# signal path; seccomp.json allows these and the ones named in its comment. Run as root:
#   packaging/container/seccomp-observe.sh DIR     (DIR from build-prebuilt.sh)
# Prints one system call name per line. Needs strace and curl; sources the machine lacks
# (DAMON, a PMU) are skipped with a note on stderr.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
bin=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
sysfs=$repo/tests/fixtures/sysfs/qemu-3node
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
log() { echo "seccomp-observe: $*" >&2; }

# A process to watch: writes a 16 MiB buffer over and over (softdirty, pagefault, move_pages).
python3 -c '
import time
b = bytearray(16 << 20)
while True:
    for i in range(0, len(b), 4096):
        b[i] = (b[i] + 1) & 255
    time.sleep(0.05)
' &
target=$!
# A trace that names the target's pages on the snapshot's lower-tier node 2, twice each.
{
	echo "# pghot-trace v1"
	t=1000000000
	for round in 1 2; do
		for page in $(seq 0 63); do
			t=$((t + 100))
			printf '%d 0 %d %d %#x - L extmem 2\n' "$t" "$target" "$target" $((0x7f0000000000 + page * 4096))
		done
	done
} > "$work/in.trace"

# run NAME ARGS...: pghotd under strace with a control socket and metrics, asked everything
# a client can ask while it runs, then reloaded and stopped.
run() {
	local name=$1
	shift
	local sock=$work/$name.sock port
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	strace -f -qq -o "$work/$name.strace" "$bin/pghotd" --socket "$sock" --metrics-listen "127.0.0.1:$port" \
		--stats-json "$work/$name.json" "$@" > "$work/$name.log" 2>&1 &
	local pid=$!
	for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
	if [ -S "$sock" ]; then
		for req in status stats "stats --pids" "config get" "config set freq_threshold 3" pause resume \
			"top --once" "top --json"; do
			# shellcheck disable=SC2086 # the request's words
			"$bin/pghotctl" --socket "$sock" $req > /dev/null 2>&1 || true
		done
		curl -s -m 5 "http://127.0.0.1:$port/metrics" > /dev/null || true
		kill -HUP "$pid" 2>/dev/null || true
		sleep 1
		kill -TERM "$pid" 2>/dev/null || true
	fi
	wait "$pid" || true
	log "$name: $(tail -n 1 "$work/$name.log")"
}

run trace --source "trace:$work/in.trace" --sysfs-root "$sysfs" --pid "$target" --freq-threshold 1 --duration 4
mkfifo "$work/in.fifo"
(sleep 2; cat "$work/in.trace"; sleep 2) > "$work/in.fifo" &
run fifo --source "trace:$work/in.fifo" --sysfs-root "$sysfs" --pid "$target" --freq-threshold 1 --duration 6
run softdirty --source softdirty --pid "$target" --softdirty-interval-ms 200 --duration 4
run pagefault --source pagefault --pid "$target" --duration 4
run perfdata --source "perfdata:$repo/tests/fixtures/perfdata/pagefaults.data" --sysfs-root "$sysfs" --dry-run --duration 4
if [ -d /sys/kernel/mm/damon/admin ]; then
	run damon --source damon --pid "$target" --duration 6
else
	log "damon: skipped (no DAMON sysfs)"
fi
run auto --pid "$target" --duration 4

cat "$work"/*.strace | sed -n 's/^[0-9]\+ \+\([a-z_0-9]\+\)(.*/\1/p' | sort -u
