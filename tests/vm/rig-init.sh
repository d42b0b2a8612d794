#!/bin/busybox sh
# shellcheck shell=sh
# /init of the scenario rig's guest: tests/vm/rig.sh packs this file as /init, next to busybox,
# /bin/pghotd, /bin/pghot-workload and /etc/pghot-rig.conf (the parameters, RIG_*), and boots
# one guest per scenario with `pghot.scenario=NAME` on the kernel command line.
#
# It runs the workload with the scenario's promoter (baseline: none; numab2:
# kernel.numa_balancing=2; damon: a DAMON paddr migrate_hot scheme over the slow node; pghotd-emu:
# pghotd fed by the workload's emitted samples through a FIFO; pghotd-softdirty / pghotd-damon:
# pghotd --source softdirty / damon --pid <workload>, started once the buffer is placed), streams the workload's output to
# the console and ends with machine-readable lines the host parses. The hotplug scenario has no
# tiering workload: pghotd --source pagefault while cpu 1 goes offline and back (run_hotplug),
# with a RESULT line of its own.
#   PGHOT-RIG-BEGIN key=value...        what runs
#   t=... / RESULT {json}               the workload's own lines
#   PGHOT-RIG-PGHOTD {json}             pghotd's --stats-json (pghotd-*)
#   PGHOT-RIG-STATS key=value...        vmstat deltas (vm_*), CPU seconds, timings
#   PGHOT-RIG-ERROR text                something went wrong (the run still ends with STATS)
#   PGHOT-RIG-END
# Informational lines start with "rig: ". Then poweroff -f.

# shellcheck source=/dev/null # written by pghot_vm_initramfs_root (lib.sh)
. /etc/pghot-vm-mounts.sh
# Keep printk off the console so it cannot interleave with the parsed lines.
dmesg -n 1

info() { echo "rig: $*"; }
err() {
	echo "PGHOT-RIG-ERROR $*"
	errors=$((errors + 1))
}
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# secs_of "XmY.ZZZs" -> seconds (busybox `times` format)
secs_of() { echo "$1" | awk '{ split($1, a, "m"); sub("s", "", a[2]); printf "%.2f", a[1] * 60 + a[2] }'; }
# children_cpu FILE -> "user sys" seconds from the children line of a saved `times`
children_cpu() {
	if [ -s "$1" ]; then
		line=$(sed -n 2p "$1")
		echo "$(secs_of "${line%% *}") $(secs_of "${line##* }")"
	else
		echo "- -"
	fi
}
# stat_cpu PID -> utime+stime of PID in seconds (USER_HZ is 100), or "-"
stat_cpu() {
	if [ -r "/proc/$1/stat" ]; then
		# comm is the 2nd field in parentheses; kernel thread names hold no spaces.
		awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"
	else
		echo -
	fi
}
# wait_line FILE REGEX SECS [PID...]: wait until FILE has a line matching REGEX; give up after
# SECS or when any PID has exited.
wait_line() {
	wl_file=$1
	wl_regex=$2
	wl_secs=$3
	shift 3
	wait_line_count "$wl_file" "$wl_regex" 1 "$wl_secs" "$@"
}
# wait_line_count FILE REGEX N SECS [PID...]: wait_line for N lines matching REGEX.
wait_line_count() {
	file=$1
	regex=$2
	want=$3
	limit=$(($4 * 10))
	shift 4
	n=0
	while c=$(grep -c -E "$regex" "$file" 2>/dev/null); [ "${c:-0}" -lt "$want" ]; do
		[ "$n" -ge "$limit" ] && return 1
		for p in "$@"; do
			alive "$p" || return 1
		done
		sleep 0.1
		n=$((n + 1))
	done
}
# alive PID: PID exists and is not a zombie.
alive() {
	[ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
# wait_pid_exit PID SECS: wait for PID (a child of this shell) for at most SECS; 1 on timeout.
wait_pid_exit() {
	n=0
	while alive "$1"; do
		[ "$n" -ge $(($2 * 10)) ] && return 1
		sleep 0.1
		n=$((n + 1))
	done
	wait "$1" 2>/dev/null
	return 0
}
# put, damon_on, damon_off: tests/vm/guest-damon.sh (shared with the Debian guest).
# shellcheck source=tests/vm/guest-damon.sh
. /etc/pghot-damon.sh
# pghotd_start ARGS...: runs pghotd with ARGS plus the common ones in the background; sets
# pghotd_sub (the subshell, whose `times` is pghotd's CPU) and pghotd_pid.
pghotd_start() {
	[ -z "$RIG_RATE_LIMIT_MBPS" ] || set -- "$@" --promote-rate-limit-MBps "$RIG_RATE_LIMIT_MBPS"
	# `default`: pghotd's own threshold.
	[ "$RIG_FREQ_THRESHOLD" = default ] || set -- "$@" --freq-threshold "$RIG_FREQ_THRESHOLD"
	# shellcheck disable=SC2086
	(
		/bin/pghotd "$@" --stats-json /tmp/pghotd.json $RIG_PGHOTD_ARGS > /tmp/pghotd.log 2>&1
		echo $? > /tmp/pghotd.rc
		times > /tmp/pghotd.times
	) &
	pghotd_sub=$!
	sleep 0.2
	pghotd_pid=$(pidof pghotd)
	info "pghotd pid ${pghotd_pid:--}: pghotd $* --stats-json /tmp/pghotd.json $RIG_PGHOTD_ARGS"
}
# start_watcher: pghotd --source softdirty|damon on the workload (pid or scope). pghotd ends by
# itself when the workload exits, unless it follows a scope (an empty one may fill again): then
# it runs for the workload's duration.
start_watcher() {
	if [ "$RIG_SCOPE" != pid ]; then
		pghotd_start --source "${scenario#pghotd-}" --comm '^pghot-workload$' --duration "$RIG_DURATION"
		if [ "$RIG_SCOPE" = churn ]; then
			# A second process in scope for 3 s (its output is not the run's): pghotd must take
			# it in and let it go, and keep following the first.
			(
				sleep 2
				info "churn: a second pghot-workload joins the scope for 3 s"
				/bin/pghot-workload --size-mb 16 --hot-mb 4 --pattern hot-scattered --node "$RIG_NODE" --duration 3 > /dev/null 2>&1
				info "churn: the second pghot-workload left the scope (exit $?)"
			) &
		fi
	else
		pghotd_start --source "${scenario#pghotd-}" --pid "$wl_pid"
	fi
	if [ "$scenario" = pghotd-damon ]; then
		# pghotd's kdamond is a kernel thread: its CPU is not in pghotd's times, and it is gone
		# once pghotd turns it off, so sample it while it runs.
		(
			while alive "$pghotd_sub"; do
				for k in /sys/kernel/mm/damon/admin/kdamonds/[0-9]*; do
					p=$(cat "$k/pid" 2>/dev/null)
					[ -n "$p" ] && [ "$p" -gt 0 ] 2>/dev/null && stat_cpu "$p" > /tmp/kdamond.cpu.new && mv /tmp/kdamond.cpu.new /tmp/kdamond.cpu
				done
				sleep 0.25
			done
		) &
	fi
}
# pghotd_report: the tail of pghotd's log and its --stats-json, for the host.
pghotd_report() {
	info "pghotd log (last 40 lines):"
	tail -n 40 /tmp/pghotd.log | sed 's/^/pghotd: /'
	if [ -s /tmp/pghotd.json ]; then
		echo "PGHOT-RIG-PGHOTD $(tr -d '\n' < /tmp/pghotd.json)"
	else
		err "pghotd wrote no --stats-json"
	fi
}
# perf_fds PID: how many perf event fds PID holds (links to anon_inode:[perf_event]).
perf_fds() {
	k=0
	for f in /proc/"$1"/fd/*; do
		case $(readlink "$f" 2>/dev/null) in
		*perf_event*) k=$((k + 1)) ;;
		esac
	done
	echo "$k"
}
# cpu_samples FILE CPU FROM TO: recorded samples (pghot-trace lines) on CPU with a time
# (CLOCK_MONOTONIC ns, which is /proc/uptime in a guest that never suspends) in [FROM, TO) s.
cpu_samples() {
	awk -v cpu="$2" -v from="$3" -v to="$4" '
		$1 ~ /^[0-9]+$/ && $2 == cpu && $1 / 1e9 >= from && $1 / 1e9 < to { n++ }
		END { print n + 0 }' "$1"
}
# run_hotplug: the CPU hotplug scenario. pghotd --source pagefault (one perf sampler per
# CPU) records the faults of short-lived loaders, one pinned to each CPU, while cpu 1 goes
# offline and comes back RIG_HOTPLUG_CYCLES times; then SIGTERM. Ends with a RESULT line of
# its own (no tier figures) that rig.sh checks with --bar hotplug.
run_hotplug() {
	online=/sys/devices/system/cpu/cpu1/online
	# RIG_DURATION split over the phases (cpu 1 on, then off and on again per cycle), >= 2 s each.
	phase=$(awk -v d="$RIG_DURATION" -v c="$RIG_HOTPLUG_CYCLES" 'BEGIN { p = int(d / (2 * c + 1)); print (p < 2 ? 2 : p) }')
	[ -w "$online" ] || err "$online is not writable: cpu 1 cannot go offline"
	info "hotplug: cpus online $(cat /sys/devices/system/cpu/online); $RIG_HOTPLUG_CYCLES cycles of cpu 1 offline/online, ${phase} s per phase"
	# Loaders: fresh processes that fault in 4 MiB each, from user mode, pinned to cpu 0 and
	# cpu 1 in turn; taskset fails while cpu 1 is offline (then the loop naps).
	(
		while [ ! -e /tmp/loader.stop ]; do
			taskset -c 0 /bin/pghot-workload --size-mb 4 --pattern uniform --node 0 --duration 0.05 --report-ms 1000 > /dev/null 2>&1
			taskset -c 1 /bin/pghot-workload --size-mb 4 --pattern uniform --node 0 --duration 0.05 --report-ms 1000 > /dev/null 2>&1 || sleep 0.05
		done
	) &
	loader=$!
	cat /proc/vmstat > /tmp/vmstat.before
	t_start=$(uptime_s)
	pghotd_start --source pagefault --dry-run --record /tmp/rec.trace
	wait_line /tmp/pghotd.log 'sampling on cpu' 20 "$pghotd_sub" || err "pghotd did not log 'sampling on cpu' within 20 s"
	fds_start=$(perf_fds "$pghotd_pid")
	fds="$fds_start"
	sleep "$phase"
	t_first_off=
	t_last_on=
	offline_s=0
	i=1
	while [ "$i" -le "$RIG_HOTPLUG_CYCLES" ]; do
		t_off=$(uptime_s)
		[ -n "$t_first_off" ] || t_first_off=$t_off
		echo 0 > "$online" || err "cycle $i: echo 0 > $online failed"
		t_offline=$(uptime_s)
		# The sampler looks at the CPU list every 500 ms.
		wait_line_count /tmp/pghotd.log 'cpu 1 went offline' "$i" 5 "$pghotd_sub" ||
			err "cycle $i: pghotd did not log 'cpu 1 went offline' within 5 s"
		sleep "$phase"
		fds="$fds,$(perf_fds "$pghotd_pid")"
		t_on=$(uptime_s)
		echo 1 > "$online" || err "cycle $i: echo 1 > $online failed"
		wait_line_count /tmp/pghotd.log 'cpu 1 came online' "$i" 5 "$pghotd_sub" ||
			err "cycle $i: pghotd did not log 'cpu 1 came online' within 5 s"
		t_last_on=$(uptime_s)
		offline_s=$(awk -v a="$offline_s" -v b="$t_offline" -v c="$t_on" 'BEGIN { printf "%.2f", a + c - b }')
		echo "$t_offline $t_on" >> /tmp/offline.windows
		sleep "$phase"
		fds="$fds,$(perf_fds "$pghotd_pid")"
		i=$((i + 1))
	done
	touch /tmp/loader.stop
	wait "$loader"
	pghotd_alive=0
	alive "$pghotd_pid" && pghotd_alive=1
	[ "$pghotd_alive" = 1 ] || err "pghotd exited before SIGTERM"
	t_term=$(uptime_s)
	kill -TERM "$pghotd_pid" 2>/dev/null
	if ! wait_pid_exit "$pghotd_sub" 10; then
		err "pghotd still running 10 s after SIGTERM; sending SIGKILL"
		kill -KILL "$pghotd_pid" 2>/dev/null
		wait "$pghotd_sub" 2>/dev/null
	fi
	t_exit=$(uptime_s)
	pghotd_rc=$(cat /tmp/pghotd.rc 2>/dev/null || echo -)
	[ "$pghotd_rc" = 0 ] || err "pghotd exited with status $pghotd_rc"
	cat /proc/vmstat > /tmp/vmstat.after
	pghotd_report
	[ -s /tmp/rec.trace ] || err "pghotd recorded nothing (/tmp/rec.trace)"
	recorded=$(grep -c '^[0-9]' /tmp/rec.trace 2>/dev/null)
	recorded=${recorded:-0}
	cpu1_before=$(cpu_samples /tmp/rec.trace 1 0 "$t_first_off")
	cpu1_after=$(cpu_samples /tmp/rec.trace 1 "$t_last_on" "$t_exit")
	# Samples on cpu 1 stamped inside an offline window (none can be taken there).
	cpu1_offline=0
	cpu0_offline=0
	while read -r a b; do
		cpu1_offline=$((cpu1_offline + $(cpu_samples /tmp/rec.trace 1 "$a" "$b")))
		cpu0_offline=$((cpu0_offline + $(cpu_samples /tmp/rec.trace 0 "$a" "$b")))
	done < /tmp/offline.windows
	went=$(grep -c 'cpu 1 went offline' /tmp/pghotd.log)
	came=$(grep -c 'cpu 1 came online' /tmp/pghotd.log)
	went=${went:-0}
	came=${came:-0}
	# A CPU sampler that gave up by itself (an fd error) rather than being stopped.
	gave_up=$(grep -c -E 'sampler stops|is not sampled any more' /tmp/pghotd.log)
	gave_up=${gave_up:-0}
	term_s=$(awk -v a="$t_term" -v b="$t_exit" 'BEGIN { printf "%.2f", b - a }')
	echo "RESULT {\"hotplug_cycles\":$RIG_HOTPLUG_CYCLES,\"phase_s\":$phase,\"offline_s\":$offline_s,\"went_offline_logged\":$went,\"came_online_logged\":$came,\"samplers_gave_up\":$gave_up,\"cpu1_samples_before\":$cpu1_before,\"cpu1_samples_offline\":$cpu1_offline,\"cpu0_samples_offline\":$cpu0_offline,\"cpu1_samples_after\":$cpu1_after,\"recorded\":$recorded,\"perf_fds\":\"$fds\",\"alive_before_term\":$pghotd_alive,\"pghotd_rc\":\"$pghotd_rc\",\"term_exit_s\":$term_s}"
	cpu=$(children_cpu /tmp/pghotd.times)
	vm=$(awk 'NR == FNR { b[$1] = $2; next } $1 ~ /^(numa_|pgmigrate_)/ { printf " vm_%s=%d", $1, $2 - b[$1] }' /tmp/vmstat.before /tmp/vmstat.after)
	echo "PGHOT-RIG-STATS scenario=hotplug errors=$errors promoter=pghotd pghotd_rc=$pghotd_rc pghotd_utime_s=${cpu% *} pghotd_stime_s=${cpu#* }$vm boot_s=$t_init workload_s=$(awk -v a="$t_start" -v b="$t_exit" 'BEGIN { printf "%.2f", b - a }') guest_s=$(uptime_s)"
}
finish() {
	echo "PGHOT-RIG-END"
	sync
	poweroff -f
}

errors=0
t_init=$(uptime_s)

# --- parameters ---------------------------------------------------------------------------
RIG_DURATION=30
RIG_PATTERN="hot-scattered"
RIG_SIZE_MB=256
RIG_HOT_MB=32
RIG_NODE=2
RIG_TARGET_NID=0
RIG_THREADS=1
RIG_REPORT_MS=250
RIG_SAMPLE_PERIOD=100
RIG_FREQ_THRESHOLD=2
RIG_START=placed
RIG_RATE_LIMIT_MBPS=
RIG_DAMON_QUOTA_MB=128
RIG_DAMON_MAX_REGIONS=1000
RIG_DAMON_RESET_MS=1000
RIG_TLB_FLUSH_MS=0
RIG_SCOPE=pid
RIG_WORKLOAD_ARGS=
RIG_PGHOTD_ARGS=
RIG_HOTPLUG_CYCLES=2
RIG_THP_SHAPE=aligned
# shellcheck disable=SC1091
[ -r /etc/pghot-rig.conf ] && . /etc/pghot-rig.conf

scenario=
read -r cmdline < /proc/cmdline
for arg in $cmdline; do
	case $arg in
	pghot.scenario=*) scenario=${arg#pghot.scenario=} ;;
	esac
done

echo
echo "PGHOT-RIG-BEGIN scenario=${scenario:-none} kernel=$(uname -r) duration_s=$RIG_DURATION pattern=$RIG_PATTERN threads=$RIG_THREADS start=$RIG_START freq_threshold=$RIG_FREQ_THRESHOLD size_mb=$RIG_SIZE_MB hot_mb=$RIG_HOT_MB node=$RIG_NODE tlb_flush_ms=$RIG_TLB_FLUSH_MS boot_s=$t_init"
tiers=
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do
	[ -r "$t/nodelist" ] && tiers="$tiers ${t##*/}=$(cat "$t/nodelist")"
done
info "memory tiers:$tiers; cmdline: $(cat /proc/cmdline)"
case $scenario in
baseline | numab2 | damon | pghotd-emu | pghotd-softdirty | pghotd-damon | pghotd-thp-split | pghotd-thp-whole | numab2-thp | hotplug) ;;
*)
	err "unknown or missing pghot.scenario '$scenario'"
	finish
	;;
esac
[ -r "/sys/devices/system/node/node$RIG_NODE/cpulist" ] || err "node $RIG_NODE does not exist"

if [ "$scenario" = hotplug ]; then
	run_hotplug
	finish
fi

# --- scenario set-up before the workload --------------------------------------------------
if [ "$scenario" = numab2 ] || [ "$scenario" = numab2-thp ]; then
	echo 2 > /proc/sys/kernel/numa_balancing || err "cannot set kernel.numa_balancing=2"
	if [ -n "$RIG_RATE_LIMIT_MBPS" ]; then
		echo "$RIG_RATE_LIMIT_MBPS" > /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps ||
			err "cannot set kernel.numa_balancing_promote_rate_limit_MBps=$RIG_RATE_LIMIT_MBPS"
	fi
	hot=$(cat /sys/kernel/debug/sched/numa_balancing/hot_threshold_ms 2>/dev/null || echo -)
	info "numa_balancing=$(cat /proc/sys/kernel/numa_balancing) promote_rate_limit_MBps=$(cat /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps 2>/dev/null) hot_threshold_ms=$hot"
else
	echo 0 > /proc/sys/kernel/numa_balancing 2>/dev/null
	info "numa_balancing=$(cat /proc/sys/kernel/numa_balancing)"
fi
info "demotion_enabled=$(cat /sys/kernel/mm/numa/demotion_enabled 2>/dev/null) thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled)"

# The TierBPF scenarios: THP=always, the hot set shaped by RIG_THP_SHAPE inside 2 MiB THPs
# (aligned: 4 MiB as 64 KiB clusters at one offset in 64 of the buffer's 128 THPs; runs-*: 8 MiB
# as runs at random page offsets; sparse: 8 MiB of scattered 4 KiB pages; flat: one 8 MiB block,
# four THPs hot through and through), fed by emulated samples like pghotd-emu; pghotd-thp-split
# runs pghotd with --split-thp, pghotd-thp-whole without admission, numab2-thp the kernel's
# NUMA balancing tiering mode on the same shape.
case $scenario in
pghotd-thp-* | numab2-thp)
	echo always > /sys/kernel/mm/transparent_hugepage/enabled || err "cannot set THP=always"
	case ${RIG_THP_SHAPE:-aligned} in
	aligned) RIG_PATTERN=hot-clusters RIG_HOT_MB=4 ;;
	runs-64k | runs-128k | runs-256k) RIG_PATTERN=$RIG_THP_SHAPE RIG_HOT_MB=8 ;;
	sparse) RIG_PATTERN=hot-scattered RIG_HOT_MB=8 ;;
	flat) RIG_PATTERN=hot-block RIG_HOT_MB=8 ;;
	*) err "unknown RIG_THP_SHAPE '$RIG_THP_SHAPE'" ;;
	esac
	info "thp shape ${RIG_THP_SHAPE:-aligned}: --pattern $RIG_PATTERN --hot-mb $RIG_HOT_MB"
	RIG_WORKLOAD_ARGS="$RIG_WORKLOAD_ARGS --thp"
	info "thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled) khugepaged scan_sleep_ms=$(cat /sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs) split_huge_pages=$([ -e /sys/kernel/debug/split_huge_pages ] && echo present || echo missing)"
	;;
esac
wl_args="--size-mb $RIG_SIZE_MB --hot-mb $RIG_HOT_MB --pattern $RIG_PATTERN --node $RIG_NODE --duration $RIG_DURATION --threads $RIG_THREADS --report-ms $RIG_REPORT_MS"
if [ "$scenario" = pghotd-emu ] || [ "${scenario#pghotd-thp-}" != "$scenario" ]; then
	mkfifo /tmp/samples.fifo
	wl_args="$wl_args --emit-samples /tmp/samples.fifo --sample-period $RIG_SAMPLE_PERIOD"
fi
wl_args="$wl_args $RIG_WORKLOAD_ARGS"

# QEMU's TCG keeps a large software TLB that is flushed on every CR3 write, and x86 clears
# accessed bits without a TLB flush: a workload alone on its CPU with a dense hot set never sets
# them again, so DAMON (and anything else reading accessed bits) sees no accesses. A sleeper per
# CPU that wakes every RIG_TLB_FLUSH_MS forces address-space switches, as real TLB pressure would.
if [ "$RIG_TLB_FLUSH_MS" -gt 0 ]; then
	cpu=0
	while [ -d "/sys/devices/system/cpu/cpu$cpu" ]; do
		taskset -c "$cpu" sh -c "while :; do usleep $((RIG_TLB_FLUSH_MS * 1000)); done" &
		cpu=$((cpu + 1))
	done
	info "tlb flusher: one sleeper per CPU ($cpu), every $RIG_TLB_FLUSH_MS ms"
fi

cat /proc/vmstat > /tmp/vmstat.before

# --- the workload -------------------------------------------------------------------------
# Its output goes through a FIFO into tee: live on the console and kept in /tmp/wl.out. The
# subshell's `times` gives the workload's own user/system CPU once it has been reaped.
mkfifo /tmp/wl.pipe
tee /tmp/wl.out < /tmp/wl.pipe &
tee_pid=$!
info "workload: pghot-workload $wl_args"
t_wl_start=$(uptime_s)
# shellcheck disable=SC2086
(
	/bin/pghot-workload $wl_args
	echo $? > /tmp/wl.rc
	times > /tmp/wl.times
) > /tmp/wl.pipe 2>&1 &
wl_sub=$!

wl_pid=
n=0
while [ -z "$wl_pid" ] && [ "$n" -lt 100 ]; do
	wl_pid=$(pidof pghot-workload)
	[ -n "$wl_pid" ] || sleep 0.1
	n=$((n + 1))
done
[ -n "$wl_pid" ] || err "pghot-workload did not start"
info "workload pid ${wl_pid:--}"

# The workload gives up by itself after its duration; this only catches a hang.
( sleep $((RIG_DURATION + 120)) && echo "PGHOT-RIG-ERROR workload still running after $((RIG_DURATION + 120))s; killed" && kill -KILL "$wl_pid" ) 2>/dev/null &
watchdog=$!

pghotd_sub=
case $scenario in
pghotd-emu | pghotd-thp-whole)
	# pghotd opens the FIFO without waiting for a writer and ends when the writer closes.
	pghotd_start --source trace:/tmp/samples.fifo --pid "$wl_pid"
	;;
pghotd-thp-split)
	# The trace's "# sample_period N" line gives admission the period.
	pghotd_start --source trace:/tmp/samples.fifo --pid "$wl_pid" --split-thp
	;;
pghotd-softdirty | pghotd-damon)
	# RIG_START=with: pghotd starts with the workload, before its buffer is placed, as a
	# service would already be running when a program starts.
	[ "$RIG_START" != with ] || start_watcher
	;;
esac

# Wait for the buffer to be placed (the first report line). Without pghotd reading the FIFO
# the workload would wait for a reader forever: stop it.
# shellcheck disable=SC2086
if ! wait_line /tmp/wl.out '^t=' $((RIG_DURATION + 60)) "$wl_pid" $pghotd_sub; then
	if [ -n "$pghotd_sub" ] && ! alive "$pghotd_sub"; then
		err "pghotd exited before the workload started (its log follows); stopping the workload"
		kill -KILL "$wl_pid" 2>/dev/null
	else
		err "no t= line from the workload"
	fi
fi
t_placed=$(uptime_s)

kdamond_pid=
case $scenario in
damon) damon_on ;;
pghotd-softdirty | pghotd-damon)
	# Started after the placement, which writes every page, so that pghotd sees the workload's
	# accesses and not its first touch (RIG_START=placed); RIG_START=with started it already.
	[ "$RIG_START" = with ] || start_watcher
	;;
esac


# --- wait for the end ---------------------------------------------------------------------
wait "$wl_sub"
t_wl_end=$(uptime_s)
kill "$watchdog" 2>/dev/null
wait "$tee_pid"
wl_rc=$(cat /tmp/wl.rc 2>/dev/null || echo -)
[ "$wl_rc" = 0 ] || err "pghot-workload exited with status $wl_rc"
grep -q '^RESULT ' /tmp/wl.out || err "pghot-workload printed no RESULT line"

promoter_cpu=-
promoter_note=
extra=
case $scenario in
baseline)
	promoter_note=none
	;;
numab2 | numab2-thp)
	# NUMAB2 has no promoter thread: scanning (task_numa_work) and hint faults run in the
	# workload's own context, so its system time is the closest measure.
	promoter_note=workload-stime
	;;
damon)
	promoter_cpu=$(stat_cpu "${kdamond_pid:-0}")
	promoter_note=kdamond
	damon_off
	extra="$extra $damon_stats"
	;;
pghotd-emu | pghotd-softdirty | pghotd-damon | pghotd-thp-split | pghotd-thp-whole)
	promoter_note=pghotd
	# The workload closed the FIFO (emu) or exited (softdirty, damon); pghotd drains its
	# migrators and exits.
	if ! wait_pid_exit "$pghotd_sub" 30; then
		err "pghotd still running 30s after the workload ended; sending SIGINT"
		kill -INT "$(pidof pghotd)" 2>/dev/null
		wait_pid_exit "$pghotd_sub" 10 || kill -KILL "$(pidof pghotd)" 2>/dev/null
		wait "$pghotd_sub" 2>/dev/null
	fi
	pghotd_rc=$(cat /tmp/pghotd.rc 2>/dev/null || echo -)
	[ "$pghotd_rc" = 0 ] || err "pghotd exited with status $pghotd_rc"
	cpu=$(children_cpu /tmp/pghotd.times)
	u=${cpu% *}
	s=${cpu#* }
	[ "$u" != - ] && promoter_cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
	extra="$extra pghotd_rc=$pghotd_rc pghotd_utime_s=$u pghotd_stime_s=$s"
	if [ "$scenario" = pghotd-damon ]; then
		kd_cpu=$(cat /tmp/kdamond.cpu 2>/dev/null || echo -)
		extra="$extra kdamond_cpu_s=$kd_cpu"
		# The promoter is pghotd and the kdamond it drives.
		[ "$kd_cpu" != - ] && [ "$promoter_cpu" != - ] && promoter_cpu=$(awk -v a="$promoter_cpu" -v b="$kd_cpu" 'BEGIN { printf "%.2f", a + b }') && promoter_note=pghotd+kdamond
	fi
	pghotd_report
	;;
esac
t_done=$(uptime_s)
cat /proc/vmstat > /tmp/vmstat.after

cpu=$(children_cpu /tmp/wl.times)
wl_utime=${cpu% *}
wl_stime=${cpu#* }
case $scenario in numab2 | numab2-thp) promoter_cpu=$wl_stime ;; esac

vm=$(awk 'NR == FNR { b[$1] = $2; next }
	$1 ~ /^(numa_|pgpromote_|pgmigrate_|pgdemote_|thp_)/ { printf " vm_%s=%d", $1, $2 - b[$1] }' \
	/tmp/vmstat.before /tmp/vmstat.after)
awk_sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
echo "PGHOT-RIG-STATS scenario=$scenario thp_shape=$RIG_THP_SHAPE errors=$errors wl_rc=$wl_rc wl_pid=${wl_pid:--} wl_utime_s=$wl_utime wl_stime_s=$wl_stime promoter=$promoter_note promoter_cpu_s=$promoter_cpu$extra$vm boot_s=$t_init placed_after_s=$(awk_sub "$t_placed" "$t_wl_start") workload_s=$(awk_sub "$t_wl_end" "$t_wl_start") teardown_s=$(awk_sub "$t_done" "$t_wl_end") guest_s=$(uptime_s)"
finish
