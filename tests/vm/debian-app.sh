#!/bin/bash
# A real program under one promoter, run inside the Debian guest (`tests/vm/rig.sh --guest
# debian --app APP SCENARIO...`) by pghot-rig.service. Parameters in /etc/pghot-rig.conf
# (RIG_*), the scenario on the kernel command line (pghot.scenario=).
#
# The program is loaded, its own memory moved to the slow node 2 (`migratepages PID 0,1 2`
# without CAP_SYS_NICE, so pages it shares stay; its default policy still allows promotion),
# then the promoter starts and the measured phase runs in rounds. The slow node is really slow: the ibs-emu QEMU plugin spins on each of its
# accesses, in every scenario, and keeps a modelled memory clock (reset at the measured
# phase's start, read at its end through the pghot.ctl port).
#   PGHOT-APP-ROUND n=... ops_per_s=... p50_ms=... p99_ms=...   one per round
#   PGHOT-APP-SNAP n=... samples_sent_dropped=SENT/DROPPED         after each round's snapshot
#                  [heat_floor=F promoted=N moved_back=M short=S raises=R] (pghotd scenarios)
#   RESULT {json}                                               the scenario's figures
#   PGHOT-RIG-ERROR text                                        something went wrong
set -u
export LC_ALL=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null # written by the host
. /etc/pghot-rig.conf
# shellcheck source=tests/vm/guest-damon.sh
. /opt/pghot-rig/guest-damon.sh
# shellcheck source=tests/vm/guest-lib.sh
. /opt/pghot-rig/guest-lib.sh
scenario=$1
work=/run/pghot-rig
mkdir -p "$work"
# Errors go to a file as well as the console: err also runs inside $(...) (a round), where
# neither a counter nor stdout would reach the result.
: > "$work/errors"
err() {
	echo "PGHOT-RIG-ERROR $*" >&2
	echo "$*" >> "$work/errors"
}
vm() { awk -v n="$1" '$1 == n { print $2 }' /proc/vmstat; }
# mc_stats: memcached's own counters, "name=value" a line (its LRU maintainer and crawler work
# on their own schedule: they tell a phase where the server did other work than the GETs).
mc_stats() { [ "$RIG_APP" != memcached ] || /opt/pghot-rig/mc-bench.pl stats 2> /dev/null; }
# mc_changed BEFORE AFTER: the crawler's, LRU's and eviction counters that moved, "name=+delta".
mc_changed() {
	awk -F= 'NR == FNR { b[$1] = $2; next }
		$1 ~ /crawler|lru|juggle|evict|reclaim|expired|moves_to|slab_reassign/ && $2 ~ /^[0-9]+$/ && $2 != b[$1] {
			printf "%s%s=+%d", (n++ ? " " : ""), $1, $2 - b[$1] }' <(printf '%s\n' "$1") <(printf '%s\n' "$2")
}
# cpu_s PID: utime + stime of PID in seconds (USER_HZ 100), or empty.
cpu_s() { [ -r "/proc/$1/stat" ] && awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"; }
# minflt PID: PID's minor faults, all its threads (/proc/PID/stat field 10, fs/proc/array.c
# `do_task_stat`; the fields counted from the end of the command name, which may hold spaces):
# a thread that touches a page while it moves waits on its migration entry through one
# (mm/migrate.c `migration_entry_wait`).
minflt() { sed 's/.*) //' "/proc/$1/stat" 2> /dev/null | awk '{ print $8 + 0; ok = 1 } END { if (!ok) print "null" }'; }
# tlb_shootdowns: TLB flush requests all CPUs took from others (/proc/interrupts' TLB row,
# arch/x86/kernel/irq.c `arch_show_interrupts`): moving a page of a program that runs on
# another CPU sends one; under TCG each also flushes entries of that vCPU's software TLB.
# "null" without the row (another architecture), not a count of 0.
tlb_shootdowns() { awk '$1 == "TLB:" { ok = 1; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i } END { print ok ? s : "null" }' /proc/interrupts; }
# since A B: B - A, or null when either count could not be read.
since() { if [ "$1" != null ] && [ "$2" != null ]; then echo $(($2 - $1)); else echo null; fi; }
# node_mb PID: "fast_mb slow_mb" of PID's resident memory (numa_maps N<node>= pages).
node_mb() {
	awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^N[0-9]+=/) { split(substr($i, 2), a, "="); n[a[1]] += a[2] } }
		END { printf "%.1f %.1f", (n[0] + n[1]) * 4 / 1024, n[2] * 4 / 1024 }' "/proc/$1/numa_maps" 2>/dev/null
}

# node_free_mb N: MB free on node N; fast_free_mb: on the fast nodes (0 and 1) together.
node_free_mb() { awk '$3 == "MemFree:" { printf "%d", $4 / 1024 }' "/sys/devices/system/node/node$1/meminfo"; }
fast_free_mb() { echo $(($(node_free_mb 0) + $(node_free_mb 1))); }
# node_file_mb N: node N's page cache, MB (Active(file) + Inactive(file)): what kswapd can free
# there with demotion off and no swap, and so the room NUMA balancing's promotions can get below
# the high watermark (mm/migrate.c `migrate_misplaced_folio_prepare` wakes kswapd, which
# reclaims up to the promo watermark).
node_file_mb() { awk '$3 ~ /^(Active|Inactive)\(file\):$/ { kb += $4 } END { printf "%d", kb / 1024 }' "/sys/devices/system/node/node$1/meminfo"; }
# node_watermarks_mb N: "min low high promo" of node N's zones together, MB (/proc/zoneinfo;
# promo is the watermark kswapd reclaims up to in NUMA balancing's tiering mode,
# mm/vmscan.c `pgdat_balanced`).
node_watermarks_mb() {
	awk -v node="$1" '$1 == "Node" { on = ($2 == node ",") }
		on && $1 ~ /^(min|low|high|promo)$/ && NF == 2 { w[$1] += $2 }
		END { printf "%.1f %.1f %.1f %.1f", w["min"] / 256, w["low"] / 256, w["high"] / 256, w["promo"] / 256 }' /proc/zoneinfo
}
# node_pcp_mb N: node N's pages on the per-CPU free lists, MB (the `count:` of each zone's
# `pagesets` in /proc/zoneinfo, mm/vmstat.c `zoneinfo_show_print`): freed pages parked there
# are not in MemFree until drained to the buddy lists.
node_pcp_mb() {
	awk -v node="$1" '$1 == "Node" { on = ($2 == node ",") }
		on && $1 == "count:" { c += $2 }
		END { printf "%d", c / 256 }' /proc/zoneinfo
}
# per_cpu_lists_shrink: each per-CPU list may hold up to pcp->high_max pages, an eighth of its
# zone shared among the node's CPUs by default (mm/page_alloc.c `zone_set_pageset_high_and_batch`
# and `zone_highsize`, MIN_PERCPU_PAGELIST_HIGH_FRACTION), and gives them back to MemFree only
# as a free on that CPU finds the list over pcp->high or as vmstat's periodic decay lowers it
# (`decay_pcp_high`, an eighth a second). With vm.percpu_pagelist_high_fraction set, high_min =
# high_max = max(zone pages / fraction / CPUs, 4 batches): with 8192 each list holds at most 4
# batches (252 pages, about 1 MB, for a 1 GiB zone), so the lists drain within seconds and stay
# small through the phase, for every promoter alike. Documentation/admin-guide/sysctl/vm.rst;
# 0, the default, brings the kernel's own sizing back (fast_tier_empty).
lists_fraction0=0
per_cpu_lists_shrink() {
	local waited=0
	lists_fraction0=$(sysctl -n vm.percpu_pagelist_high_fraction) || lists_fraction0=0
	sysctl -q vm.percpu_pagelist_high_fraction=8192 ||
		{ err "setting vm.percpu_pagelist_high_fraction=8192 failed"; return; }
	while [ $(($(node_pcp_mb 0) + $(node_pcp_mb 1))) -gt 4 ] && [ "$waited" -lt 60 ]; do
		sleep 1
		waited=$((waited + 1))
	done
	info "per-CPU free lists: vm.percpu_pagelist_high_fraction $lists_fraction0 -> 8192; after ${waited} s $(node_pcp_mb 0) and $(node_pcp_mb 1) MB on nodes 0 and 1"
}
# fast_tier_fill: with RIG_FAST_FREE_MB, leaves about that much free on each fast node by
# reserving 2 MiB HugeTLB pages there (Documentation/admin-guide/mm/hugetlbpage.rst, the
# per-node nr_hugepages): memory no promoter can take and no reclaim can free, so every promoter
# meets the same full fast tier, as on a server whose DRAM holds other work. fast_tier_empty
# gives it back.
hugetlb_nr() { echo "/sys/devices/system/node/node$1/hugepages/hugepages-2048kB/nr_hugepages"; }
# Reserving the pages makes the kernel reclaim and compact to find them, which frees more (page
# cache, pages it drops while compacting): one reservation sized from the free memory before it
# left 33 and 54 MB free where 12 were asked (t28a). So it reserves again from what is free then,
# up to 8 times, until a node is within one HugeTLB page of N or gives no more; a node left
# short (29 and 36 MB where 38 and 54 were asked, t35t and t35m) gets pages back the same way.
# Freed pages wait on the per-CPU free lists, outside MemFree, until drained: 23-36 MB a fast
# node after the program's move to node 2, and 35 MB drained into node 1's MemFree between two
# tries (t37h; BENCHMARKS.md, "Where it goes: the per-CPU free lists"). So the fill first
# shrinks the lists (per_cpu_lists_shrink) and keeps them small until fast_tier_empty; each
# try's figures and each node's free memory and lists at the phase's start are logged.
fast_tier_fill() {
	[ -n "$RIG_FAST_FREE_MB" ] || return 0
	local n free0 free want got have try tries
	per_cpu_lists_shrink
	for n in 0 1; do
		free0=$(node_free_mb "$n") free=$free0 have=0 tries=
		for try in 1 2 3 4 5 6 7 8; do
			[ "$free" -gt $((RIG_FAST_FREE_MB + 2)) ] || [ "$free" -lt $((RIG_FAST_FREE_MB - 2)) ] || break
			want=$((have + (free - RIG_FAST_FREE_MB) / 2))
			[ "$want" -ge 0 ] || want=0
			echo "$want" > "$(hugetlb_nr "$n")" || err "node $n: reserving $want HugeTLB pages failed"
			# What each try asked, got and left: whether a miss is the fill's or a later drift.
			got=$(cat "$(hugetlb_nr "$n")") free=$(node_free_mb "$n")
			tries="$tries $want/$got/$free/$(node_pcp_mb "$n")"
			[ "$got" -ne "$have" ] || break
			have=$got
		done
		info "node $n: $free0 MB free; $have 2 MiB HugeTLB pages reserved in $try tries (asked/got/MB free/MB on per-CPU lists after each:${tries:- none}); now $free MB free, $(node_file_mb "$n") MB of page cache; watermarks MB $(node_watermarks_mb "$n")"
	done
	# Whether reclaim on a full fast node may demote to the slow one, and whether it may swap
	# (with neither it can free page cache only). Documentation/ABI/testing/sysfs-kernel-mm-numa.
	info "demotion_enabled=$(cat /sys/kernel/mm/numa/demotion_enabled 2> /dev/null) $(grep '^SwapTotal:' /proc/meminfo | tr -s ' ')"
}
fast_tier_empty() {
	[ -n "$RIG_FAST_FREE_MB" ] || return 0
	echo 0 > "$(hugetlb_nr 0)" && echo 0 > "$(hugetlb_nr 1)" || err "giving the HugeTLB pages back failed"
	sysctl -q vm.percpu_pagelist_high_fraction="$lists_fraction0" ||
		err "restoring vm.percpu_pagelist_high_fraction=$lists_fraction0 failed"
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
# field_or_null LINE KEY: the same, or null for a field the line lacks (a JSON number or null).
field_or_null() { local v; v=$(field "$1" "$2"); echo "${v:-null}"; }

# pghotd_round_state: for a pghotd scenario, " heat_floor=F promoted=N moved_back=M short=S
# raises=R" from `pghotctl stats` (the floor as it stands, in samples, or "-" without one;
# pgpromote_success and pgdemote_below_floor so far; the fast nodes short of hot_share_room_mb,
# "-" while it is off; pghot_cpu_raises so far, the times a thread at SCHED_IDLE starved and
# went back to the unit's policy under cpu_policy "auto"), to read a round's hot-set share against; nothing otherwise.
# Counters only: `--json` and `--pids` make pghotd read its whole table, seconds in this guest.
pghotd_round_state() {
	case $scenario in pghotd-*) ;; *) return 0 ;; esac
	pghotctl stats 2> /dev/null | awk '
		{ v[$1] = $2 }
		END {
			printf " heat_floor=%s promoted=%s moved_back=%s short=%s raises=%s", \
				("heat_floor_samples" in v ? v["heat_floor_samples"] : "-"), \
				("pgpromote_success" in v ? v["pgpromote_success"] : "-"), \
				("pgdemote_below_floor" in v ? v["pgdemote_below_floor"] : "-"), \
				("fast_nodes_short" in v ? v["fast_nodes_short"] : "-"), \
				("pghot_cpu_raises" in v ? v["pghot_cpu_raises"] : "-")
		}'
}

# --- the program ----------------------------------------------------------------------------
app_pid=
app_load() {
	# The image's other servers stay out of the phase: an idle redis-server alone took 10 % of
	# a vCPU under TCG (its serverCron, 14 s in a 134 s MariaDB phase), the same for every
	# promoter but taken from the program. A custom load command starts what it needs.
	local other keep=
	case $RIG_APP in
	redis) keep=redis-server ;;
	memcached) keep=memcached ;;
	esac
	for other in redis-server memcached; do
		[ "$other" = "$keep" ] || systemctl stop "$other" 2> /dev/null
	done
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
	memcached)
		# Room for the whole data set (Debian's default is 64 MB, which would evict).
		sed -i 's/^-m .*/-m 1024/' /etc/memcached.conf
		# No LRU crawler (memcached.c `NO_LRU_CRAWLER`): its expiry scan reads every item's
		# header once per crawl, on a timer of its own that the phase does not set. In t31m one
		# crawl (262,143 items checked) fell inside the phases of both pghotd scenarios and only
		# at the end of baseline's (1,736), doubling memcached's accesses and spreading its
		# hot set from 1,384 pages to 17,890: a different phase, not a promoter's doing. The
		# LRU maintainer, which moves items as GETs touch them, stays.
		grep -qx -- '-o no_lru_crawler' /etc/memcached.conf || echo '-o no_lru_crawler' >> /etc/memcached.conf
		systemctl restart memcached || err "memcached did not start"
		app_pid=$(systemctl show -P MainPID memcached)
		# Debian's unit is Type=simple: systemctl returns once memcached is started, not once it
		# listens, and a load that connected first was refused (m18's pass 1 measured an empty
		# server).
		wait_for 30 bash -c 'exec 3<> /dev/tcp/127.0.0.1/11211' || err "memcached did not listen on 127.0.0.1:11211 within 30 s"
		info "memcached: loading ${RIG_KEYS} keys of ${RIG_VALUE_B} B (random order)"
		/opt/pghot-rig/mc-bench.pl load "$RIG_KEYS" "$RIG_VALUE_B" > "$work/load.out" 2>&1 ||
			err "mc-bench.pl load failed: $(tail -n 2 "$work/load.out")"
		;;
	custom)
		# The load command runs in a scope of its own: what it leaves running there is the
		# program (the process with the most resident memory, if several).
		systemd-run --quiet --scope --unit=pghot-app bash -c "$RIG_APP_LOAD" > "$work/load.out" 2>&1 ||
			err "the load command failed: $(tail -n 2 "$work/load.out")"
		local cg
		cg=$(systemctl show -P ControlGroup pghot-app.scope)
		app_pid=$(for p in $(cat "/sys/fs/cgroup$cg/cgroup.procs" 2> /dev/null); do
			echo "$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2> /dev/null) $p"
		done | sort -n | tail -n 1 | cut -d' ' -f2)
		[ -n "$app_pid" ] || err "the load command left no process running (scope pghot-app)"
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
		redis-benchmark --csv -t get -n "$RIG_ROUND_OPS" -r "$RIG_HOT_KEYS" -d "$RIG_VALUE_B" -c 4 -P "$RIG_PIPELINE" 2> /dev/null |
			awk -F'"' '$2 == "GET" { print $4, $10, $14 }'
		;;
	memcached)
		# Multi-gets of 16 keys over the first RIG_HOT_KEYS keys; ops are keys.
		/opt/pghot-rig/mc-bench.pl get "$RIG_HOT_KEYS" $((RIG_ROUND_OPS / 16)) 16 2> "$work/round.err" ||
			err "mc-bench.pl get failed: $(tail -n 2 "$work/round.err")"
		;;
	custom)
		# One run of the run command per round: its wall time is the figure (runs per second
		# as ops/s; no latency percentiles).
		local a b
		a=$(now)
		bash -c "$RIG_APP_RUN" > "$work/run.$1.out" 2>&1 || err "the run command failed: $(tail -n 2 "$work/run.$1.out")"
		b=$(now)
		awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f - -\n", 1 / (b - a > 0 ? b - a : 0.01) }'
		;;
	esac
}

# --- the promoter ---------------------------------------------------------------------------
promoter_pid=
relay_pid=
fifo=/run/pghot-ibs.fifo
# pghotd_start SOURCE [KEY = VALUE]: the installed service, watching the program only, SOURCE
# its source, the source's own setting if given (unless --pghotd-set sets that key).
pghotd_start() {
	printf '%s\n' "enabled_sources = [$1]" "pids = [$app_pid]" > /etc/pghotd/pghotd.toml
	if [ -n "${2:-}" ] && ! printf '%s\n' "${RIG_PGHOTD_SET:-}" | grep -q "^ *${2%% *} *="; then
		printf '%s\n' "$2" >> /etc/pghotd/pghotd.toml
	fi
	# --pghotd-set: the lines the run asked for, the same for every app.
	[ -z "${RIG_PGHOTD_SET:-}" ] || printf '%s\n' "$RIG_PGHOTD_SET" >> /etc/pghotd/pghotd.toml
	# --pghotd-policy idle: a drop-in, as an administrator would change the unit's policy.
	if [ "${RIG_PGHOTD_POLICY:-batch}" != batch ]; then
		mkdir -p /etc/systemd/system/pghotd.service.d
		printf '[Service]\nCPUSchedulingPolicy=%s\n' "$RIG_PGHOTD_POLICY" > /etc/systemd/system/pghotd.service.d/policy.conf
		systemctl daemon-reload
	fi
	systemctl start pghotd || err "pghotd did not start"
	promoter_pid=$(systemctl show -P MainPID pghotd)
}
promoter_start() {
	case $scenario in
	baseline) ;;
	numab2) sysctl -q kernel.numa_balancing=2 ;;
	damon)
		damon_on
		promoter_pid=$kdamond_pid
		;;
	pghotd-softdirty | pghotd-damon)
		pghotd_start "\"${scenario#pghotd-}\""
		;;
	pghotd-ibs-emu)
		# The plugin's samples reach pghotd as a real IBS sampler's would, with the pid of the
		# process whose page it was: the relay reads them from the samples port and writes
		# pghot-trace lines into a FIFO that the service's trace: source reads.
		# pghotd opens the FIFO without waiting for a writer. The relay attributes samples to
		# the program only (--only: pghotd's `pids` scope would drop any other's), so a record
		# costs the guest one pagemap read at most (see relay.rs).
		# A hardware sampler's source promotes on its first sample, as the pghot series' IBS
		# benchmarks on linux-mm do (pghot_freq_threshold=1, "promote on 1st access, like
		# NUMAB2"): one sampled access in RIG_PERIOD on the slow tier is already rare evidence,
		# where softdirty and damon report every page they see touched.
		rm -f "$fifo" && mkfifo -m 0600 "$fifo" || err "mkfifo $fifo failed"
		pghotd_start "\"trace:$fifo\"" "freq_threshold = 1"
		# The relay stands in for the PMU, which takes none of the program's CPU: SCHED_BATCH,
		# as the service's threads are (systemd/pghotd.service), so its wake-ups every batch
		# do not preempt the program. (SCHED_IDLE, tried in r17b, BENCHMARKS.md "pghotd and
		# the relay at SCHED_BATCH", spread each batch over more, shorter slices between the
		# program's.) --relay-policy idle: SCHED_IDLE, as pghotd's own threads run with
		# cpu_policy "auto" while they get a CPU.
		chrt "--${RIG_RELAY_POLICY:-${RIG_PGHOTD_POLICY:-batch}}" 0 /opt/pghot-rig/pgibs-guest relay "$fifo" "$RIG_PERIOD" "$work/relay.stats" --only "$app_pid" > "$work/relay.out" 2>&1 &
		relay_pid=$!
		# The phase starts once samples flow to pghotd (as NUMA balancing and DAMON are at
		# work the moment they are switched on): up to 20 s for the relay under TCG.
		for _ in $(seq 200); do
			grep -q '^relay: ready' "$work/relay.out" 2> /dev/null && break
			kill -0 "$relay_pid" 2> /dev/null || err "the relay ended: $(tail -n 2 "$work/relay.out")"
			sleep 0.1
		done
		grep -q '^relay: ready' "$work/relay.out" || err "the relay was not ready within 20 s"
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
# thread_ticks PID: one line per thread of PID, "tid comm utime stime voluntary nonvoluntary"
# (USER_HZ ticks; context switches from its status file).
thread_ticks() {
	[ -n "$1" ] && [ -d "/proc/$1/task" ] || return 0
	for t in /proc/"$1"/task/*; do
		awk -v tid="${t##*/}" '
			FNR == NR { sub(/^[^(]*\(/, ""); c = $0; sub(/\).*/, "", c); sub(/^[^)]*\) /, ""); u = $12; s = $13; next }
			$1 == "voluntary_ctxt_switches:" { v = $2 }
			$1 == "nonvoluntary_ctxt_switches:" { n = $2 }
			END { if (c != "") print tid, c, u, s, v + 0, n + 0 }' "$t/stat" "$t/status" 2> /dev/null
	done
}
# thread_wakes BEFORE AFTER: "comm:voluntary/nonvoluntary,..." the context switches each thread
# name made between two thread_ticks listings, most voluntary first. A voluntary switch is a
# wait, so one wake-up to follow it: under TCG each costs the guest a millisecond or more of a
# vCPU (BENCHMARKS.md, "pghotd's idle cost"), whatever the thread then does.
thread_wakes() {
	awk 'NR == FNR { v[$1] = $5; n[$1] = $6; next }
		{ tv[$2] += $5 - v[$1]; tn[$2] += $6 - n[$1] }
		END { for (k in tv) printf "%d %s:%d/%d\n", tv[k], k, tv[k], tn[k] }' <(printf '%s\n' "$1") <(printf '%s\n' "$2") |
		sort -rn | cut -d' ' -f2- | paste -sd, -
}
# thread_cpu BEFORE AFTER [sys]: "comm:seconds,..." busiest first, the CPU (utime + stime, or
# stime alone with `sys`) each thread name took between two thread_ticks listings (a thread
# missing from BEFORE started since): where a promoter's CPU went in the phase, and how much
# of it in the kernel (system calls, page migration).
thread_cpu() {
	awk -v sys="${3:-}" 'NR == FNR { u[$1] = $3; s[$1] = $4; next }
		{ d = (sys ? 0 : $3 - u[$1]) + $4 - s[$1]; t[$2] += d }
		END { for (k in t) printf "%s:%.2f\n", k, t[k] / 100 }' <(printf '%s\n' "$1") <(printf '%s\n' "$2") |
		sort -t: -k2 -rn | paste -sd, -
}
# proc_ticks: "pid comm ticks" (utime + stime) of every process now, kernel threads included.
proc_ticks() {
	for f in /proc/[0-9]*/stat; do
		awk '{ p = $1; sub(/^[^(]*\(/, ""); c = $0; sub(/\).*/, "", c); sub(/^[^)]*\) /, ""); gsub(/ /, "_", c); print p, c, $12 + $13 }' "$f" 2> /dev/null
	done
}
# busiest BEFORE AFTER: "comm:seconds,..." of the eight names (summed over their processes;
# kernel workers as one, their names change with the work queue) that took the most CPU between
# two proc_ticks listings: who shared the guest's vCPUs with the program in the phase.
busiest() {
	awk 'NR == FNR { b[$1] = $3; next }
		{ c = $2; if (c ~ /^kworker\//) c = "kworker"; t[c] += $3 - b[$1] }
		END { for (k in t) if (t[k] > 0) printf "%.2f %s\n", t[k] / 100, k }' <(printf '%s\n' "$1") <(printf '%s\n' "$2") |
		sort -rn | head -n 8 | awk '{ printf "%s%s:%s", (NR > 1 ? "," : ""), $2, $1 }'
}
# cpu_split BEFORE AFTER: the guest's CPU time by kind between two /proc/stat "cpu" lines, as
# JSON seconds (user includes nice; irq and softirq as the kernel accounts them).
cpu_split() {
	awk 'NR == 1 { for (i = 2; i <= NF; i++) a[i] = $i; next }
		{ for (i = 2; i <= NF; i++) d[i] = ($i - a[i]) / 100
		  printf "{\"user\":%.2f,\"system\":%.2f,\"irq\":%.2f,\"softirq\":%.2f,\"idle\":%.2f}", d[2] + d[3], d[4], d[7], d[8], d[5] + d[6] }' \
		<(printf '%s\n' "$1") <(printf '%s\n' "$2")
}
# ctxsw PID: "voluntary nonvoluntary" context switches of PID's threads together; a
# nonvoluntary one is the program preempted (by a promoter, the relay, the load generator).
ctxsw() {
	cat /proc/"$1"/task/*/status 2> /dev/null |
		awk '/^voluntary_ctxt_switches:/ { v += $2 } /^nonvoluntary_ctxt_switches:/ { n += $2 } END { print v + 0, n + 0 }'
}
# migrations PID: how many times the scheduler moved the process's threads to another CPU
# (se.nr_migrations of /proc/PID/task/TID/sched, kernel/sched/debug.c `proc_sched_show_task`),
# summed. Each move leaves the modelled cache of the vCPU it ran on behind (the plugin's cache
# is per vCPU): its lines are fetched again on the new one, from memory without `snoop`, from
# the old vCPU's cache with it.
# "null" when the kernel gives no sched file (CONFIG_SCHED_DEBUG off): unknown, not none.
migrations() {
	cat /proc/"$1"/task/*/sched 2> /dev/null |
		awk '$1 == "se.nr_migrations" { m += $3; n++ } END { print n ? m : "null" }'
}
# profile_start, profile_stop: with --profile, perf samples every vCPU through the phase;
# profile_report prints where the time went (after the phase: perf report is slow under TCG).
perf_pid=
profile_start() {
	[ "${RIG_PROFILE:-0}" = 1 ] || return 0
	command -v perf > /dev/null || { err "--profile: no perf in the image"; return 0; }
	perf record -a -F "${RIG_PROFILE_HZ:-99}" -e cpu-clock -o "$work/perf.data" > "$work/perf.out" 2>&1 &
	perf_pid=$!
}
profile_stop() {
	[ -n "$perf_pid" ] || return 0
	kill -INT "$perf_pid" 2> /dev/null
	wait "$perf_pid" 2> /dev/null
}
profile_report() {
	[ -n "$perf_pid" ] || return 0
	# The rest of the file system beside the unstripped binaries (kernel symbols included).
	local fs=/opt/pghot-rig/symfs d
	for d in lib lib64 proc usr/lib usr/sbin; do [ -e "$fs/$d" ] || ln -s "/$d" "$fs/$d"; done
	cp -rsn /usr/bin/. "$fs/usr/bin/" 2> /dev/null
	local r=(perf report -i "$work/perf.data" --stdio --symfs="$fs" --kallsyms=/proc/kallsyms --percent-limit 0.5)
	"${r[@]}" --sort comm,dso 2> /dev/null | grep -v '^#' | grep . | head -n 40 | sed 's/^/rig: profile: /'
	"${r[@]}" --sort comm,sym 2> /dev/null | grep -v '^#' | grep . | head -n 80 | sed 's/^/rig: profile: /'
	# The promoter's threads and the relay on their own: their functions as shares of them.
	# Every thread's name, however little it ran: pghotd's threads each take well under the
	# 0.5 % the tables above stop at beside a busy program.
	local ours comms
	comms=$(perf report -i "$work/perf.data" --stdio --sort comm 2> /dev/null | awk '$1 ~ /%$/ { print $2 }')
	ours=$(grep -E '^(pghot|pgibs)' <<< "$comms" | paste -sd, -)
	[ -z "$ours" ] || "${r[@]}" --comms "$ours" --percentage relative --sort comm,dso,sym 2> /dev/null |
		grep -v '^#' | grep . | head -n 60 | sed 's/^/rig: profile: ours: /'
	# The promoter's threads alone, down to 0.2 % of them (the relay's and the rig's snapshots
	# above take most of "ours" and hide the promoter's kernel work).
	local promoter
	promoter=$(grep -E '^pghot' <<< "$comms" | grep -vx pghotctl | paste -sd, -)
	[ -z "$promoter" ] || perf report -i "$work/perf.data" --stdio --symfs="$fs" --kallsyms=/proc/kallsyms \
		--percent-limit 0.2 --comms "$promoter" --percentage relative --sort comm,dso,sym 2> /dev/null |
		grep -v '^#' | grep . | head -n 150 | sed 's/^/rig: profile: promoter: /'
}
promoter_stop() {
	case $scenario in
	numab2) sysctl -q kernel.numa_balancing=0 ;;
	damon) damon_off ;;
	pghotd-*) systemctl stop pghotd ;;
	esac
	[ -z "$relay_pid" ] || kill "$relay_pid" 2> /dev/null
}

# --- ground truth ---------------------------------------------------------------------------
# snap N: the program's pages and their frames now (pgibs-guest snap), for the truth.
snaps=()
snap() {
	/opt/pghot-rig/pgibs-guest snap "$app_pid" "$work/snap.$1" > /dev/null || err "pagemap snapshot $1 of pid $app_pid failed"
	snaps+=("$work/snap.$1")
}
# jnum JSON KEY: a number (or array) out of a flat JSON object.
jnum() {
	local v
	v=$(printf '%s\n' "$1" | sed -n "s/.*\"$2\":\(\[[^]]*\]\|[-0-9.]*\).*/\1/p")
	printf '%s\n' "${v:-null}"
}

apt-get install -y -q /opt/pghot-rig/pghotd.deb > "$work/apt.out" 2>&1 || err "installing pghotd.deb failed"
app_load
[ -n "$app_pid" ] && [ -d "/proc/$app_pid" ] || err "no $RIG_APP process"
info "$RIG_APP pid $app_pid before migratepages: fast/slow MB $(node_mb "$app_pid")"
# Only the program's own pages: with CAP_SYS_NICE migrate_pages(2) also moves pages other
# processes map (mm/mempolicy.c `kernel_migrate_pages`: MPOL_MF_MOVE_ALL when capable), and
# libc's page cache on the slow node slowed every process in the guest, the load generator and
# the promoter included. Without it (dropped from the bounding and inheritable sets, so the
# exec cannot regain it) root still passes the ptrace check and moves the private pages.
setpriv --inh-caps=-sys_nice --bounding-set=-sys_nice migratepages "$app_pid" 0,1 2 ||
	err "migratepages $app_pid 0,1 2 failed"
read -r fast0 slow0 <<< "$(node_mb "$app_pid")"
info "$RIG_APP pid $app_pid on the slow node: fast/slow MB $fast0 $slow0"
# Whether the cpu controller splits the CPU between cgroups (then the program, pghotd and the
# relay, each in its own service's cgroup, meet as groups, not as tasks with their policies):
# the controllers enabled below the root.
info "cgroup controllers below the root: $(cat /sys/fs/cgroup/cgroup.subtree_control 2> /dev/null); $RIG_APP in $(cut -d: -f3 "/proc/$app_pid/cgroup" 2> /dev/null), the rig in $(cut -d: -f3 /proc/self/cgroup)"
info "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled); $RIG_APP: $(grep -E '^(AnonHugePages|THPeligible)' "/proc/$app_pid/smaps_rollup" 2> /dev/null | tr -s ' ' | paste -sd' ') $(grep -c 'THPeligible: *1' "/proc/$app_pid/smaps" 2> /dev/null) THP-eligible mappings"
# The plugin learns which process each vCPU runs from the guest's scheduler, as the kernel's
# IBS handler takes the pid from `current` (pgibs-guest taskchan: a BPF program on every
# context switch; see taskchan.rs): in every scenario, so that every promoter runs beside its
# cost, and started before the promoter so that the relay finds each sample's process named.
/opt/pghot-rig/pgibs-guest taskchan > "$work/taskchan.out" 2>&1 &
wait_for 20 grep -q '^PGIBS-TASKCHAN ' "$work/taskchan.out" ||
	err "the task channel did not start within 20 s: $(tail -n 3 "$work/taskchan.out")"
info "task channel: $(cat "$work/taskchan.out")"
# The plugin booted disarmed: from here on every access is counted and the slow node is slow,
# the same for every promoter (the load and the move to node 2 ran at the emulator's speed).
[ "$(ctl ARM)" = OK ] || err "the plugin refused ARM"
[ "$(ctl "SLOW_NS $RIG_SLOW_NS")" = OK ] || err "the plugin refused SLOW_NS $RIG_SLOW_NS"
[ "$(ctl "FAST_NS $RIG_FAST_NS")" = OK ] || err "the plugin refused FAST_NS $RIG_FAST_NS"
info "plugin armed: $(ctl STATS)"
# The promoter starts before the fill, as a service starts at boot before the workloads that
# fill DRAM: pghotd places its table on the fast tier at start (src/placement.rs), which it
# could not do with the fast nodes already full.
promoter_start
fast_tier_fill
# Every promoter's phase starts from the placement migratepages left: one started before the
# fill may move pages while the fast nodes still have room (t32a: DAMON's migrate_hot moved
# nearly all of Redis there during the fill, and its phase began with 14 of 1,511 hot pages
# on the slow node). What moved is reported and moved back, as the first move did it.
read -r fast_fill slow_fill <<< "$(node_mb "$app_pid")"
moved_early_mb=$(awk -v a="$fast_fill" -v b="$fast0" 'BEGIN { d = a - b; printf "%.1f", (d > 0 ? d : 0) }')
if awk -v d="$moved_early_mb" 'BEGIN { exit !(d >= 1) }'; then
	setpriv --inh-caps=-sys_nice --bounding-set=-sys_nice migratepages "$app_pid" 0,1 2 ||
		err "migratepages $app_pid 0,1 2 (after the fill) failed"
	info "$RIG_APP: $moved_early_mb MB moved to the fast nodes before the phase (fast/slow MB $fast_fill $slow_fill after the fill); moved back: fast/slow MB $(node_mb "$app_pid")"
fi
# Against the fill's own line: how far each node drifted between the fill and the phase.
[ -z "$RIG_FAST_FREE_MB" ] || info "fast nodes at the phase's start: $(node_free_mb 0) and $(node_free_mb 1) MB free, $(node_pcp_mb 0) and $(node_pcp_mb 1) MB on per-CPU lists"
vm_before=$(cat /proc/vmstat)
app_cpu0=$(cpu_s "$app_pid")
free0=$(fast_free_mb)
ctl RESET > /dev/null || err "the plugin's RESET failed"
snap 0
ticks0=$(thread_ticks "$promoter_pid")
# Before the phase's CPU accounting starts: perl's start-up is not the phase's.
mc0=$(mc_stats)
procs0=$(proc_ticks)
stat0=$(head -n 1 /proc/stat)
read -r vol0 nonvol0 <<< "$(ctxsw "$app_pid")"
relay_sw0=
if [ -n "$relay_pid" ]; then relay_sw0=$(ctxsw "$relay_pid"); fi
mig0=$(migrations "$app_pid")
minflt0=$(minflt "$app_pid") tlb0=$(tlb_shootdowns)
profile_start
t0=$(now)
round_ops=() round_paused=()
for n in $(seq 1 "$RIG_ROUNDS"); do
	# --pause-alternate: pghotd stopped (SIGSTOP stops every thread; its queues and the relay's
	# FIFO hold what comes meanwhile) through the odd rounds, so that its presence is measured
	# against itself absent in the same boot, with the same placement.
	paused=0
	if [ "${RIG_PAUSE_ALTERNATE:-0}" = 1 ] && [[ $scenario == pghotd-* ]] && [ $((n % 2)) = 1 ] &&
		kill -STOP "$promoter_pid"; then
		paused=1
	fi
	read -r ops p50 p99 <<< "$(app_round "$n")"
	[ "$paused" = 0 ] || kill -CONT "$promoter_pid" || err "pghotd ($promoter_pid) could not be continued"
	# The plugin's samples so far, sent into the guest and dropped (its ring full: the port not
	# drained fast enough), to see when samples go missing.
	c=$(ctl STATS)
	echo "PGHOT-APP-ROUND n=$n t=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') ops_per_s=${ops:-0} p50_ms=${p50:--} p99_ms=${p99:--} fast_slow_mb=$(node_mb "$app_pid" | tr ' ' /) samples_sent_dropped=$(field "$c" samples_sent)/$(field "$c" samples_dropped) paused=$paused"
	printf '%s %s %s %s\n' "$ops" "$p50" "$p99" "$paused" >> "$work/rounds"
	round_ops+=("${ops:-0}") round_paused+=("$paused")
	snap "$n"
	c=$(ctl STATS)
	echo "PGHOT-APP-SNAP n=$n samples_sent_dropped=$(field "$c" samples_sent)/$(field "$c" samples_dropped)$(pghotd_round_state)"
done
t1=$(now)
profile_stop
stat1=$(head -n 1 /proc/stat)
procs1=$(proc_ticks)
read -r vol1 nonvol1 <<< "$(ctxsw "$app_pid")"
mig1=$(migrations "$app_pid")
minflt1=$(minflt "$app_pid") tlb1=$(tlb_shootdowns)
[ "$RIG_APP" != memcached ] || info "memcached's counters in the phase: $(mc_changed "$mc0" "$(mc_stats)")"
info "scheduling policy: $RIG_APP $(policies "$app_pid"), promoter ${promoter_pid:+$(policies "$promoter_pid")}, relay ${relay_pid:+$(policies "$relay_pid")}"
guest_cpu=$(cpu_split "$stat0" "$stat1")
busiest=$(busiest "$procs0" "$procs1")
info "guest CPU in the phase (s): $guest_cpu; busiest: $busiest; $RIG_APP context switches: $((vol1 - vol0)) voluntary, $((nonvol1 - nonvol0)) nonvoluntary; moves between CPUs: $(since "$mig0" "$mig1"); minor faults: $(since "$minflt0" "$minflt1"); TLB shootdowns (all CPUs): $(since "$tlb0" "$tlb1")"
counts=$(ctl STATS)
# Whose misses of the modelled cache, and whose evictions made the program's (plugin argument
# by_task=1): while the promoter and the relay still run, so that their tgids have names.
misses=null
if [ "${RIG_CACHE_KB:-0}" != 0 ]; then
	misses=$(/opt/pghot-rig/pgibs-guest misses "$app_pid" | sed -n 's/^PGIBS-MISSES //p')
	[ -n "$misses" ] || { err "no miss attribution (pgibs-guest misses failed)"; misses=null; }
	info "misses by task: $misses"
fi
cpu=$(promoter_cpu)
ticks1=$(thread_ticks "$promoter_pid")
threads=$(thread_cpu "$ticks0" "$ticks1")
threads_sys=$(thread_cpu "$ticks0" "$ticks1" sys)
wakes=$(thread_wakes "$ticks0" "$ticks1")
info "promoter threads in the phase (CPU s): ${threads:-none}; of it in the kernel: ${threads_sys:-none}"
info "promoter threads' context switches in the phase (voluntary/nonvoluntary): ${wakes:-none}"
# Where the promoter's own memory sits: on a full fast tier its allocations fall to node2 too,
# and there the modelled slow tier makes its table's misses slow.
case $scenario in
pghotd-*) info "promoter memory (fast/slow MB): $(node_mb "$promoter_pid" | tr ' ' /)" ;;
esac
case $scenario in
# pghotd's own account (every non-zero counter), for reading the figures against.
pghotd-*) pghotctl stats 2>&1 | awk '$NF != "0"' | sed 's/^/rig: pghotd stats: /' ;;
esac
# What the damon source said about how it reads DAMON's regions (its tracepoint, or
# tried_regions and why).
[ "$scenario" != pghotd-damon ] ||
	journalctl -q -u pghotd -o cat 2> /dev/null | grep -m 4 'damon: ' | sed 's/^/rig: pghotd log: /'
relay_cpu=
relay_wakes=
if [ -n "$relay_pid" ]; then
	relay_cpu=$(cpu_s "$relay_pid")
	relay_wakes=$(awk -v a="$relay_sw0" -v b="$(ctxsw "$relay_pid")" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%d", y[1] - x[1] }')
	relay_sys=$(awk '{ printf "%.2f", $15 / 100 }' "/proc/$relay_pid/stat" 2> /dev/null)
	# The relay ends the phase with it (its figures written on SIGTERM), so they cover the
	# phase only and it takes no CPU from the truth.
	kill -TERM "$relay_pid" 2> /dev/null
	for _ in $(seq 30); do kill -0 "$relay_pid" 2> /dev/null || break; sleep 0.1; done
	kill -KILL "$relay_pid" 2> /dev/null
fi
truth=$(/opt/pghot-rig/pgibs-guest truth "${snaps[@]}" | sed -n 's/^PGIBS-GROUND //p')
[ -n "$truth" ] || err "no ground truth (pgibs-guest truth failed)"
info "ground truth: ${truth:-none}"
profile_report
# The program's mappings, to place the truth's untouched_examples.
sed "s/^/rig: maps: /" "/proc/$app_pid/maps" 2> /dev/null | head -n 80
relay='null'
if [ -n "$relay_pid" ]; then
	info "relay: $(cat "$work/relay.stats" 2> /dev/null) $(tail -n 3 "$work/relay.out")"
	relay=$(awk '{ printf "{"; for (i = 1; i <= NF; i++) { split($i, kv, "="); v = kv[2]; if (v !~ /^[0-9.]+$/) v = "\"" v "\""; printf "%s\"%s\":%s", (i > 1 ? "," : ""), kv[1], v }; printf "}" }' "$work/relay.stats" 2> /dev/null)
	[ -n "$relay" ] || relay='null'
fi
promoter_stop
free1=$(fast_free_mb)
fast_tier_empty
read -r fast1 slow1 <<< "$(node_mb "$app_pid")"
delta() { awk -v n="$1" -v b="$(printf '%s\n' "$vm_before" | awk -v n="$1" '$1 == n { print $2 }')" '$1 == n { print $2 - b }' /proc/vmstat; }
# Where the promoted pages' room came from: reclaim by kswapd or the allocating task (page cache
# here, or demotion when enabled), against the promotions and compaction's migrations.
info "vmstat over the phase: $(for k in pgpromote_success pgmigrate_success compact_migrate_scanned pgsteal_kswapd pgsteal_direct pgsteal_file pgsteal_anon pgdemote_kswapd pgdemote_direct; do printf '%s=%s ' "$k" "$(delta "$k")"; done)"
# The last half of the rounds: the program's speed once the promoter had its chance.
read -r ops_all ops_last p50_last p99_last <<< "$(awk '{ o[NR] = $1; p5[NR] = $2; p9[NR] = $3; s += $1 }
	END { h = int(NR / 2) + 1; for (i = h; i <= NR; i++) { l += o[i]; a += p5[i]; b += p9[i] }; k = NR - h + 1
	if ($2 == "-") printf "%.4f %.4f null null", s / NR, l / k; else printf "%.1f %.1f %.3f %.3f", s / NR, l / k, a / k, b / k }' "$work/rounds")"
# --pause-alternate: the rounds with pghotd stopped against those with it running, from round 3
# on (the first pair starts from the fill).
read -r ops_paused ops_running <<< "$(awk -v on="${RIG_PAUSE_ALTERNATE:-0}" 'NR >= 3 { s[$4] += $1; k[$4]++ }
	END { if (on != 1 || !k[1] || !k[0]) { print "null null"; exit }; printf "%.4f %.4f", s[1] / k[1], s[0] / k[0] }' "$work/rounds")"
echo "RESULT $(printf '{"scenario":"%s","app":"%s","ops_per_s":%s,"ops_per_s_all_rounds":%s,"ops_per_s_paused":%s,"ops_per_s_running":%s,"round_ops":[%s],"round_paused":[%s],"p50_ms":%s,"p99_ms":%s,"rounds":%s,"measured_s":%s,"mb_promoted":%s,"hint_faults":%s,"promoter_cpu_s":%s,"app_cpu_s":%s,"modelled_mem_ms":%s,"modelled_mem_us_per_op":%s,"user_accesses_fast":%s,"user_accesses_slow":%s,"slow_ns":%s,"app_fast_mb_before":%s,"app_slow_mb_before":%s,"moved_before_phase_mb":%s,"app_fast_mb_after":%s,"app_slow_mb_after":%s,"hot_fast_pct":%s,"over_promotion_pct":%s,"app_modelled_mem_ms":%s,"app_modelled_mem_us_per_op":%s,"fast_ns":%s,"relay_cpu_s":%s,"relay_sys_s":%s,"relay_wakes":%s,"promoter_threads_cpu_s":"%s","promoter_threads_sys_s":"%s","promoter_threads_ctxsw":"%s","fast_free_mb_start":%s,"fast_free_mb_end":%s,"samples_sent":%s,"samples_dropped":%s,"samples_with_task":%s,"task_switches":%s,"guest_cpu_s":%s,"busiest_cpu_s":"%s","app_ctxsw_voluntary":%s,"app_ctxsw_nonvoluntary":%s,"app_cpu_migrations":%s,"app_minflt":%s,"tlb_shootdowns":%s,"cache_kb":%s,"cache_ways":%s,"snoop":%s,"peer_hits":%s,"misses":%s,"truth":%s,"relay":%s,"errors":%s}' \
	"$scenario" "$RIG_APP" "$ops_last" "$ops_all" "$ops_paused" "$ops_running" \
	"$(IFS=,; echo "${round_ops[*]}")" "$(IFS=,; echo "${round_paused[*]}")" "$p50_last" "$p99_last" "$RIG_ROUNDS" \
	"$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
	"$(awk -v p="$(delta pgmigrate_success)" 'BEGIN { printf "%.1f", p * 4 / 1024 }')" "$(delta numa_hint_faults)" \
	"${cpu:-null}" "$(awk -v a="$app_cpu0" -v b="$(cpu_s "$app_pid")" 'BEGIN { printf "%.2f", b - a }')" \
	"$(awk -v m="$(field "$counts" modelled_ns)" 'BEGIN { printf "%.1f", m / 1e6 }')" \
	"$(awk -v m="$(field "$counts" modelled_ns)" -v n=$((RIG_ROUNDS * RIG_ROUND_OPS)) 'BEGIN { printf "%.1f", m / 1e3 / n }')" \
	"$(field "$counts" fast_user)" "$(field "$counts" slow_user)" "$(field "$counts" slow_ns)" \
	"$fast0" "$slow0" "$moved_early_mb" "$fast1" "$slow1" "$(jnum "$truth" hot_fast_pct)" "$(jnum "$truth" over_promotion_pct)" \
	"$(jnum "$truth" app_modelled_mem_ms)" "$(awk -v m="$(jnum "$truth" app_modelled_mem_ms)" -v n=$((RIG_ROUNDS * RIG_ROUND_OPS)) 'BEGIN { if (m == "null") print "null"; else printf "%.2f", m * 1e3 / n }')" \
	"$(field "$counts" fast_ns)" \
	"${relay_cpu:-null}" "${relay_sys:-null}" "${relay_wakes:-null}" "${threads:-}" "${threads_sys:-}" "${wakes:-}" "$free0" "$free1" "$(field "$counts" samples_sent)" "$(field "$counts" samples_dropped)" "$(field "$counts" samples_with_task)" "$(field "$counts" task_switches)" "${guest_cpu:-null}" "$busiest" "$((vol1 - vol0))" "$((nonvol1 - nonvol0))" "$(since "$mig0" "$mig1")" "$(since "$minflt0" "$minflt1")" "$(since "$tlb0" "$tlb1")" "$(field_or_null "$counts" cache_kb)" "$(field_or_null "$counts" cache_ways)" "$(field_or_null "$counts" snoop)" "$(field_or_null "$counts" peer_hits)" "$misses" "${truth:-null}" "$relay" "$(wc -l < "$work/errors")")"
