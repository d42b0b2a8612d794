# shellcheck shell=bash
# Helpers shared by the Debian guest's check scripts (debian-service.sh, debian-container.sh),
# installed next to them as /opt/pghot-rig/guest-lib.sh.

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
