#!/bin/busybox sh
# shellcheck shell=sh
# /init of tests/vm/ibs-emu/check.sh's guest. check.sh packs it with busybox, /bin/pghot-workload,
# /bin/pgibs-guest and /etc/pgibs.conf (PGIBS_*), and boots it twice: `pgibs.mode=noplugin`
# (no plugin: the latency baseline) and `pgibs.mode=plugin` (the plugin loaded with slow_ns=0,
# its ports pghot.ctl and pghot.samples present). Lines for the host:
#   PGIBS-LAT mode=M pattern=P node=N slow_ns=S ns=X    one latency measurement
#   PGIBS-CAL step=I slow_ns=S node0=X node2=Y ratio=R   a calibration step
#   PGIBS-TRUTH / PGIBS-SAMPLES / PGIBS-ARRIVAL / PGIBS-COUNTS   from pgibs-guest check
#   PGIBS-ERROR text
#   PGIBS-END
# shellcheck source=/dev/null # written by pghot_vm_initramfs_root (lib.sh)
. /etc/pghot-vm-mounts.sh
dmesg -n 1
# shellcheck source=/dev/null # written by check.sh
. /etc/pgibs.conf

mode=$(sed -n 's/.*pgibs\.mode=\([a-z0-9]*\).*/\1/p' /proc/cmdline)
slow_ns=0

# lat PATTERN NODE -> ns per access (pghot-workload's RESULT), or "-"
lat() {
	case $1 in
	chase) extra="--hot-mb $PGIBS_CHASE_HOT_MB" ;;
	*) extra="" ;;
	esac
	# shellcheck disable=SC2086 # $extra is two words or none
	/bin/pghot-workload --size-mb "$PGIBS_LAT_SIZE_MB" $extra --pattern "$1" --node "$2" \
		--duration "$PGIBS_LAT_SECS" --report-ms 1000 > /tmp/lat.out 2>&1
	ns=$(sed -n 's/^RESULT .*"ns_per_access":\([0-9.]*\).*/\1/p' /tmp/lat.out)
	if [ -z "$ns" ]; then
		echo "PGIBS-ERROR pghot-workload $1 node $2: $(tail -n 3 /tmp/lat.out | tr '\n' ' ')"
		ns=-
	fi
	echo "$ns"
}

# measure MODE: chase and uniform on nodes 0 and 2
measure() {
	for p in chase uniform; do
		for n in 0 2; do
			echo "PGIBS-LAT mode=$1 pattern=$p node=$n slow_ns=$slow_ns ns=$(lat "$p" "$n")"
		done
	done
}

ctl() { /bin/pgibs-guest ctl "$@"; }

case $mode in
noplugin)
	measure noplugin
	;;
plugin)
	ctl STATS | sed 's/^/pgibs: /'
	measure plugin
	# Calibrate slow_ns so that chase on node 2 takes PGIBS_TARGET_RATIO times chase on node 0.
	# The node-2 latency grows about linearly with slow_ns (one slow access per chase step plus
	# the callback's own), so each step moves slow_ns by the remaining gap.
	i=1
	while [ "$i" -le "$PGIBS_CAL_STEPS" ]; do
		l0=$(lat chase 0)
		l2=$(lat chase 2)
		ratio=$(awk -v a="$l0" -v b="$l2" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "-" }')
		echo "PGIBS-CAL step=$i slow_ns=$slow_ns node0=$l0 node2=$l2 ratio=$ratio"
		next=$(awk -v s="$slow_ns" -v a="$l0" -v b="$l2" -v r="$PGIBS_TARGET_RATIO" \
			'BEGIN { n = s + (r * a - b); if (n < 0) n = 0; printf "%d", n }')
		if [ "$i" -lt "$PGIBS_CAL_STEPS" ]; then
			slow_ns=$next
			ctl "SLOW_NS $slow_ns" > /dev/null || echo "PGIBS-ERROR SLOW_NS $slow_ns failed"
		fi
		i=$((i + 1))
	done
	echo "PGIBS-CALIBRATED slow_ns=$slow_ns"
	measure calibrated
	# Ground truth and samples, with the calibrated slow tier on.
	/bin/pgibs-guest check --period "$PGIBS_PERIOD" -- /bin/pghot-workload \
		--size-mb "$PGIBS_TRUTH_SIZE_MB" --hot-mb "$PGIBS_TRUTH_HOT_MB" --pattern hot-scattered \
		--node 2 --duration "$PGIBS_TRUTH_SECS" --report-ms 1000 --seed 7
	ctl STATS | sed 's/^/pgibs: /'
	;;
*)
	echo "PGIBS-ERROR no pgibs.mode on the kernel command line"
	;;
esac
echo "PGIBS-END"
poweroff -f
