# shellcheck shell=bash
# Helpers shared by the Debian guest's scripts (debian-service.sh, debian-container.sh,
# debian-app.sh), installed next to them as /opt/pghot-rig/guest-lib.sh.

info() { echo "rig: $*"; }
figure() { echo "SERVICE-FIGURE $1 $2"; }
now() { cut -d' ' -f1 /proc/uptime; }
# json_num FILE KEY: a number field of the workload's RESULT line.
json_num() { sed -n 's/^RESULT //p' "$1" | grep -o "\"$2\":[-0-9.e]*" | head -n 1 | cut -d: -f2; }
# ge A B: A >= B (decimals).
ge() { awk -v a="${1:-0}" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
# wait_for SECS CMD...: run CMD every 0.1 s until it succeeds; 1 after SECS.
wait_for() {
	local end
	end=$(awk -v t="$(now)" -v s="$1" 'BEGIN { print t + s }')
	shift
	until "$@" >/dev/null 2>&1; do
		ge "$(now)" "$end" && return 1
		sleep 0.1
	done
}
# check NAME OK DETAIL: one SERVICE-CHECK line; OK is 0 (true) or anything else (false). A
# false one is followed by what the script's explain_failure prints.
check() {
	local name=$1 ok=$2
	shift 2
	if [ "$ok" = 0 ]; then
		echo "SERVICE-CHECK $name true $*"
	else
		echo "SERVICE-CHECK $name false $*"
		explain_failure
	fi
}
# policies PID: the scheduling policies of PID's threads, each once (/proc/PID/task/TID/stat
# field 41; numbers from include/uapi/linux/sched.h: 0 SCHED_NORMAL, 3 SCHED_BATCH, 5 SCHED_IDLE).
policies() {
	[ -n "$1" ] && [ -d "/proc/$1/task" ] || return 0
	for t in /proc/"$1"/task/*; do
		sed 's/^.*) //' "$t/stat" 2> /dev/null | awk '{ print $39 }'
	done | sort -u | awk '{ n = $1 == 0 ? "normal" : $1 == 3 ? "batch" : $1 == 5 ? "idle" : "policy" $1
		printf "%s%s", (NR > 1 ? "," : ""), n }'
}
