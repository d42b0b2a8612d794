#!/bin/bash
# A real program under one promoter, run inside the Debian guest (`tests/vm/rig.sh --guest
# debian --app APP SCENARIO...`) by pghot-rig.service. Parameters in /etc/pghot-rig.conf
# (RIG_*), the scenario on the kernel command line (pghot.scenario=).
#
# The program is loaded, its memory moved to the slow node 2 (`migratepages PID 0,1 2`, so
# its default policy still allows promotion), then the promoter starts and the measured phase
# runs in rounds. The slow node is really slow: the ibs-emu QEMU plugin spins on each of its
# accesses, in every scenario, and keeps a modelled memory clock (reset at the measured
# phase's start, read at its end through the pghot.ctl port).
#   PGHOT-APP-ROUND n=... ops_per_s=... p50_ms=... p99_ms=...   one per round
#   RESULT {json}                                               the scenario's figures
#   PGHOT-RIG-ERROR text                                        something went wrong
set -u
export LC_ALL=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null # written by the host
. /etc/pghot-rig.conf
# shellcheck source=tests/vm/guest-damon.sh
. /opt/pghot-rig/guest-damon.sh
scenario=$1
work=/run/pghot-rig
mkdir -p "$work"
errors=0
info() { echo "rig: $*"; }
err() {
	echo "PGHOT-RIG-ERROR $*"
	errors=$((errors + 1))
}
now() { cut -d' ' -f1 /proc/uptime; }
vm() { awk -v n="$1" '$1 == n { print $2 }' /proc/vmstat; }
# cpu_s PID: utime + stime of PID in seconds (USER_HZ 100), or empty.
cpu_s() { [ -r "/proc/$1/stat" ] && awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"; }
# node_mb PID: "fast_mb slow_mb" of PID's resident memory (numa_maps N<node>= pages).
node_mb() {
	awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^N[0-9]+=/) { split(substr($i, 2), a, "="); n[a[1]] += a[2] } }
		END { printf "%.1f %.1f", (n[0] + n[1]) * 4 / 1024, n[2] * 4 / 1024 }' "/proc/$1/numa_maps" 2>/dev/null
}

# --- the plugin's control port --------------------------------------------------------------
ctl_dev=
for n in /sys/class/virtio-ports/vport*/name; do
	[ "$(cat "$n" 2>/dev/null)" = pghot.ctl ] && ctl_dev=/dev/$(basename "$(dirname "$n")")
done
# ctl CMD: send CMD to the plugin, print its one-line answer.
ctl() {
	[ -n "$ctl_dev" ] || return 1
	local line
	exec 7<> "$ctl_dev" || return 1
	printf '%s\n' "$1" >&7
	read -r -t 10 line <&7
	exec 7>&-
	printf '%s\n' "$line"
}
[ -n "$ctl_dev" ] || err "no pghot.ctl port: the ibs-emu plugin is not loaded"
# field LINE KEY: KEY=VALUE out of a COUNTS line.
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# --- the program ----------------------------------------------------------------------------
app_pid=
app_load() {
	case $RIG_APP in
	redis)
		systemctl stop redis-server
		# No snapshots (their fork would copy the heap), no eviction: the heap is the data.
		printf '%s\n' 'save ""' 'appendonly no' >> /etc/redis/redis.conf
		systemctl start redis-server || err "redis-server did not start"
		app_pid=$(systemctl show -P MainPID redis-server)
		info "redis: loading ${RIG_KEYS} keys of ${RIG_VALUE_B} B (random order)"
		redis-benchmark -q -t set -n "$RIG_KEYS" -r "$RIG_KEYS" -d "$RIG_VALUE_B" -P 32 -c 4 > "$work/load.out" 2>&1 ||
			err "redis-benchmark load failed: $(tail -n 2 "$work/load.out")"
		info "redis: $(redis-cli dbsize) keys, used_memory $(redis-cli info memory | sed -n 's/^used_memory_human://p' | tr -d '\r')"
		;;
	*) err "unknown app $RIG_APP" ;;
	esac
}
# app_round N: one round of the measured phase; prints ops/s p50 p99.
app_round() {
	case $RIG_APP in
	redis)
		# GETs over the first RIG_HOT_KEYS key numbers: a subset inserted in random order, so
		# its values lie scattered through the heap.
		redis-benchmark --csv -t get -n "$RIG_ROUND_OPS" -r "$RIG_HOT_KEYS" -d "$RIG_VALUE_B" -c 4 2> /dev/null |
			awk -F'"' '$2 == "GET" { print $4, $10, $14 }'
		;;
	esac
}

# --- the promoter ---------------------------------------------------------------------------
promoter_pid=
promoter_start() {
	case $scenario in
	baseline) ;;
	numab2) sysctl -q kernel.numa_balancing=2 ;;
	damon)
		damon_on
		promoter_pid=$kdamond_pid
		;;
	pghotd-softdirty | pghotd-damon)
		printf '%s\n' "enabled_sources = [\"${scenario#pghotd-}\"]" "pids = [$app_pid]" > /etc/pghotd/pghotd.toml
		systemctl start pghotd || err "pghotd did not start"
		promoter_pid=$(systemctl show -P MainPID pghotd)
		;;
	*) err "unknown scenario $scenario" ;;
	esac
}
promoter_cpu() {
	case $scenario in
	pghotd-*) systemctl show -P CPUUsageNSec pghotd | awk '{ printf "%.2f", $1 / 1e9 }' ;;
	damon) cpu_s "$promoter_pid" ;;
	esac
}
promoter_stop() {
	case $scenario in
	numab2) sysctl -q kernel.numa_balancing=0 ;;
	damon) damon_off ;;
	pghotd-*) systemctl stop pghotd ;;
	esac
}

apt-get install -y -q /opt/pghot-rig/pghotd.deb > "$work/apt.out" 2>&1 || err "installing pghotd.deb failed"
app_load
[ -n "$app_pid" ] && [ -d "/proc/$app_pid" ] || err "no $RIG_APP process"
info "$RIG_APP pid $app_pid before migratepages: fast/slow MB $(node_mb "$app_pid")"
migratepages "$app_pid" 0,1 2 || err "migratepages $app_pid 0,1 2 failed"
read -r fast0 slow0 <<< "$(node_mb "$app_pid")"
info "$RIG_APP pid $app_pid on the slow node: fast/slow MB $fast0 $slow0"
# The plugin booted disarmed: from here on every access is counted and the slow node is slow,
# the same for every promoter (the load and the move to node 2 ran at the emulator's speed).
[ "$(ctl ARM)" = OK ] || err "the plugin refused ARM"
[ "$(ctl "SLOW_NS $RIG_SLOW_NS")" = OK ] || err "the plugin refused SLOW_NS $RIG_SLOW_NS"
info "plugin armed: $(ctl STATS)"
vm_before=$(cat /proc/vmstat)
app_cpu0=$(cpu_s "$app_pid")
promoter_start
ctl RESET > /dev/null || err "the plugin's RESET failed"
t0=$(now)
for n in $(seq 1 "$RIG_ROUNDS"); do
	read -r ops p50 p99 <<< "$(app_round "$n")"
	echo "PGHOT-APP-ROUND n=$n t=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') ops_per_s=${ops:-0} p50_ms=${p50:--} p99_ms=${p99:--} fast_slow_mb=$(node_mb "$app_pid" | tr ' ' /)"
	printf '%s %s %s\n' "$ops" "$p50" "$p99" >> "$work/rounds"
done
t1=$(now)
counts=$(ctl STATS)
cpu=$(promoter_cpu)
promoter_stop
read -r fast1 slow1 <<< "$(node_mb "$app_pid")"
delta() { awk -v n="$1" -v b="$(printf '%s\n' "$vm_before" | awk -v n="$1" '$1 == n { print $2 }')" '$1 == n { print $2 - b }' /proc/vmstat; }
# The last half of the rounds: the program's speed once the promoter had its chance.
read -r ops_all ops_last p50_last p99_last <<< "$(awk '{ o[NR] = $1; p5[NR] = $2; p9[NR] = $3; s += $1 }
	END { h = int(NR / 2) + 1; for (i = h; i <= NR; i++) { l += o[i]; a += p5[i]; b += p9[i] }; k = NR - h + 1
	printf "%.1f %.1f %.3f %.3f", s / NR, l / k, a / k, b / k }' "$work/rounds")"
echo "RESULT $(printf '{"scenario":"%s","app":"%s","ops_per_s":%s,"ops_per_s_all_rounds":%s,"p50_ms":%s,"p99_ms":%s,"rounds":%s,"measured_s":%s,"mb_promoted":%s,"hint_faults":%s,"promoter_cpu_s":%s,"app_cpu_s":%s,"modelled_mem_ms":%s,"modelled_mem_us_per_op":%s,"user_accesses_fast":%s,"user_accesses_slow":%s,"slow_ns":%s,"app_fast_mb_before":%s,"app_slow_mb_before":%s,"app_fast_mb_after":%s,"app_slow_mb_after":%s,"hot_fast_pct":null,"over_promotion_pct":null,"errors":%s}' \
	"$scenario" "$RIG_APP" "$ops_last" "$ops_all" "$p50_last" "$p99_last" "$RIG_ROUNDS" \
	"$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
	"$(awk -v p="$(delta pgmigrate_success)" 'BEGIN { printf "%.1f", p * 4 / 1024 }')" "$(delta numa_hint_faults)" \
	"${cpu:-null}" "$(awk -v a="$app_cpu0" -v b="$(cpu_s "$app_pid")" 'BEGIN { printf "%.2f", b - a }')" \
	"$(awk -v m="$(field "$counts" modelled_ns)" 'BEGIN { printf "%.1f", m / 1e6 }')" \
	"$(awk -v m="$(field "$counts" modelled_ns)" -v n=$((RIG_ROUNDS * RIG_ROUND_OPS)) 'BEGIN { printf "%.1f", m / 1e3 / n }')" \
	"$(field "$counts" fast_user)" "$(field "$counts" slow_user)" "$(field "$counts" slow_ns)" \
	"$fast0" "$slow0" "$fast1" "$slow1" "$errors")"
