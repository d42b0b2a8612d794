#!/bin/busybox sh
# shellcheck shell=sh
# /init of tests/vm/ibs-emu/check.sh's guest. check.sh packs it with busybox, /bin/pghot-workload,
# /bin/pgibs-guest and /etc/pgibs.conf (PGIBS_*), and boots it twice: `pgibs.mode=noplugin`
# (no plugin: the latency baseline) and `pgibs.mode=plugin` (the plugin loaded with slow_ns=0,
# its ports pghot.ctl and pghot.samples present); with check.sh --cost also `pgibs.mode=cost
# pgibs.label=L` (the plugin doing part of its work, or all of it behind a modelled cache; L names
# the variant in the lines). Lines for the host:
#   PGIBS-LAT mode=M pattern=P node=N slow_ns=S ns=X    one latency measurement
#   PGIBS-OPS pattern=P node=N ... user_ops_per_access=X   plugin callbacks per workload access
#   PGIBS-CAL step=I slow_ns=S node0=X node2=Y ratio=R   a calibration step
#   PGIBS-TRUTH / PGIBS-SAMPLES / PGIBS-ARRIVAL / PGIBS-COUNTS   from pgibs-guest check
#   PGIBS-ERROR text
#   PGIBS-END
# shellcheck source=/dev/null # written by pghot_vm_initramfs_root (lib.sh)
. /etc/pghot-vm-mounts.sh
dmesg -n 1
export PATH=/sbin:/usr/sbin:/bin:/usr/bin
# End the BIOS's "Booting from ROM.." line, so the first line of ours starts a line.
echo
# shellcheck source=/dev/null # written by check.sh
. /etc/pgibs.conf

mode=$(sed -n 's/.*pgibs\.mode=\([a-z0-9]*\).*/\1/p' /proc/cmdline)
slow_ns=0

# lat1 PATTERN NODE -> ns per access of one run (pghot-workload's RESULT), or "-". Pinned to cpu 0
# (node 0's CPU), so node 0 is local memory and node 2 the CPU-less node behind it.
lat1() {
	case $1 in
	chase) extra="--hot-mb $PGIBS_CHASE_HOT_MB" ;;
	*) extra="" ;;
	esac
	[ "$mode" != plugin ] || ctl RESET > /dev/null
	# shellcheck disable=SC2086 # $extra is two words or none
	taskset -c 0 /bin/pghot-workload --size-mb "$PGIBS_LAT_SIZE_MB" $extra --pattern "$1" \
		--node "$2" --duration "$PGIBS_LAT_SECS" --report-ms 1000 > /tmp/lat.out 2>&1
	ns=$(sed -n 's/^RESULT .*"ns_per_access":\([0-9.]*\).*/\1/p' /tmp/lat.out)
	if [ "$mode" = plugin ] && [ -n "$ns" ]; then
		# User-mode memory operations (plugin callbacks) per workload access: the plugin's cost
		# per callback is the latency it adds divided by these.
		acc=$(sed -n 's/^RESULT .*"accesses":\([0-9]*\).*/\1/p' /tmp/lat.out)
		ctl STATS | awk -v acc="$acc" -v p="$1" -v n="$2" '{
			for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
			printf "PGIBS-OPS pattern=%s node=%s slow_ns=%s accesses=%s user_ops=%d user_ops_per_access=%.2f all_ops=%d\n",
				p, n, f["slow_ns"], acc, f["fast_user"] + f["slow_user"], (f["fast_user"] + f["slow_user"]) / acc, f["accesses"]
		}' >&2
	fi
	if [ -z "$ns" ]; then
		echo "PGIBS-ERROR pghot-workload $1 node $2: $(tail -n 3 /tmp/lat.out | tr '\n' ' ')" >&2
		ns=-
	fi
	echo "$ns"
}

min2() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || (b != "-" && b + 0 < a + 0)) print b; else print a }'; }

# lat PATTERN NODE -> the lowest of PGIBS_REPEATS runs: the host may be busy with other work
# (other guests), which only ever adds time.
lat() {
	best=-
	r=0
	while [ "$r" -lt "$PGIBS_REPEATS" ]; do
		best=$(min2 "$best" "$(lat1 "$1" "$2")")
		r=$((r + 1))
	done
	echo "$best"
}

# pair PATTERN -> "L0 L2": node 0 and node 2 in turn, PGIBS_REPEATS times, the lowest of each
# (taken close together in time, as the host's load drifts).
pair() {
	b0=-
	b2=-
	r=0
	while [ "$r" -lt "$PGIBS_REPEATS" ]; do
		b0=$(min2 "$b0" "$(lat1 "$1" 0)")
		b2=$(min2 "$b2" "$(lat1 "$1" 2)")
		r=$((r + 1))
	done
	echo "$b0 $b2"
}

# measure MODE: chase and uniform on nodes 0 and 2
measure() {
	for p in chase uniform; do
		set -- "$1" $(pair "$p")
		echo "PGIBS-LAT mode=$1 pattern=$p node=0 slow_ns=$slow_ns ns=$2"
		echo "PGIBS-LAT mode=$1 pattern=$p node=2 slow_ns=$slow_ns ns=$3"
	done
}

ctl() { /bin/pgibs-guest ctl "$@"; }

case $mode in
noplugin)
	measure noplugin
	;;
plugin)
	ctl STATS | sed 's/^/pgibs: /'
	# What the guest does with no workload: the idle CPUs' own memory accesses per second.
	echo "pgibs: cpuidle driver $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)"
	ctl RESET > /dev/null
	sleep 1
	ctl STATS | sed 's/^/PGIBS-IDLE 1s /'
	measure plugin
	# Calibrate slow_ns so that chase on node 2 takes PGIBS_TARGET_RATIO times chase on node 0:
	# f(s) = L2(s) - ratio * L0(s) is about linear in s (each chase step makes a fixed number of
	# slow accesses), so each step sets s where a least-squares line through every (s, f) so far
	# crosses 0; the first step guesses one slow access per chase step (s1 = -f(0)). The
	# measurements are noisy (other work on the host), which the fit over all points smooths.
	gap() { awk -v a="$1" -v b="$2" -v r="$PGIBS_TARGET_RATIO" 'BEGIN { printf "%.1f", b - r * a }'; }
	# shellcheck disable=SC2046 # two numbers
	points="0 $(gap $(pair chase))"
	slow_ns=$(echo "$points" | awk '{ n = -$2; if (n < 0) n = 0; printf "%d", n }')
	i=1
	while [ "$i" -le "$PGIBS_CAL_STEPS" ]; do
		ctl "SLOW_NS $slow_ns" > /dev/null || echo "PGIBS-ERROR SLOW_NS $slow_ns failed"
		l=$(pair chase)
		l0=${l% *}
		l2=${l#* }
		echo "PGIBS-CAL step=$i slow_ns=$slow_ns node0=$l0 node2=$l2 ratio=$(awk -v a="$l0" -v b="$l2" 'BEGIN { printf "%.3f", b / a }')"
		points="$points
$slow_ns $(gap "$l0" "$l2")"
		slow_ns=$(echo "$points" | awk -v s="$slow_ns" '
			{ n++; sx += $1; sy += $2; sxx += $1 * $1; sxy += $1 * $2 }
			END {
				d = n * sxx - sx * sx
				if (d == 0) { printf "%d", s; exit }
				b = (n * sxy - sx * sy) / d; a = (sy - b * sx) / n
				if (b <= 0) { printf "%d", s; exit }
				x = -a / b; if (x < 0) x = 0; printf "%d", x
			}')
		i=$((i + 1))
	done
	ctl "SLOW_NS $slow_ns" > /dev/null || echo "PGIBS-ERROR SLOW_NS $slow_ns failed"
	echo "PGIBS-CALIBRATED slow_ns=$slow_ns"
	measure calibrated
	# Ground truth and samples, with the calibrated slow tier on.
	# Not pinned: the workload's census (move_pages every second, slow under the plugin) would
	# otherwise stall its worker on the one CPU, and the sample reader needs a CPU too.
	/bin/pgibs-guest check --period "$PGIBS_PERIOD" -- /bin/pghot-workload \
		--size-mb "$PGIBS_TRUTH_SIZE_MB" --hot-mb "$PGIBS_TRUTH_HOT_MB" --pattern hot-scattered \
		--node 2 --duration "$PGIBS_TRUTH_SECS" --report-ms 1000 --seed 7
	ctl STATS | sed 's/^/pgibs: /'
	;;
cost)
	# check.sh --cost: the plugin doing only part of its per-access work (plugin arg probe=N),
	# or all of it behind a modelled cache (cache_kb=...); the label names which.
	label=$(sed -n 's/.*pgibs\.label=\([a-z0-9]*\).*/\1/p' /proc/cmdline)
	[ -n "$label" ] || echo "PGIBS-ERROR no pgibs.label on the kernel command line"
	for p in chase uniform; do
		echo "PGIBS-LAT mode=$label pattern=$p node=0 slow_ns=0 ns=$(lat "$p" 0)"
	done
	;;
*)
	echo "PGIBS-ERROR no pgibs.mode on the kernel command line"
	;;
esac
echo "PGIBS-END"
poweroff -f
