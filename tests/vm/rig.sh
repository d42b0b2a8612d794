#!/bin/bash
# The scenario rig: boot the 3-node tiered Linux 6.12 guest once per scenario, run
# pghot-workload against a hot set that starts on the slow node 2 under one promoter, and
# compare the promoters in one table.
#
#   tests/vm/rig.sh [OPTIONS] SCENARIO...      (SCENARIO: baseline numab2 damon pghotd-emu
#                                               pghotd-softdirty pghotd-damon all; hotplug)
#
# See tests/vm/README.md for the scenarios, the options and the table's columns, and
# tests/vm/rig-init.sh for what runs inside the guest. Needs root (apt, fetch-guest.sh).
set -euo pipefail

PGHOT_VM_PROG=rig
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

all_scenarios=(baseline numab2 damon pghotd-emu pghotd-softdirty pghotd-damon)

usage() {
	cat >&2 <<'EOF'
usage: tests/vm/rig.sh [OPTIONS] SCENARIO...
       tests/vm/rig.sh --guest debian [OPTIONS] service   (Debian with systemd; --guest debian -h)
  SCENARIO            baseline, numab2, damon, pghotd-emu, pghotd-softdirty, pghotd-damon,
                      or all (the six, in that order); pghotd-thp-split, pghotd-thp-whole and
                      numab2-thp (THP=always, the hot set shaped by --thp-shape inside 2 MiB
                      THPs; pghotd with and without --split-thp, and NUMA balancing's tiering
                      mode; not in all); hotplug (pghotd --source pagefault
                      while cpu 1 goes offline and comes back twice; not in all)
  --quick             10 s workload instead of 30 s
  --duration SECS     workload duration (overrides --quick)
  --pattern NAME      pghot-workload --pattern (default hot-scattered)
  --thp-shape NAME    the THP scenarios' hot set: aligned (default: 4 MiB as 64 KiB clusters at
                      one offset in 64 THPs), runs-64k, runs-128k, runs-256k (8 MiB as runs at
                      random page offsets), sparse (8 MiB of scattered 4 KiB pages), flat (one
                      8 MiB block: whole THPs hot); the buffer is 256 MiB
  --bar               check the pghotd-* scenarios that ran against their issues' bars
                      (pghotd-thp-split: aligned: hot set >= 95 %, MB promoted / hot MB <= 1.5;
                      runs-64k and runs-128k: hot set >= 95 %, over-promotion <= 50 % and
                      below numab2-thp's if run):
                      pghotd-emu: hot set >= 99 %, over-promotion <= 2 %, 0 hint faults, time
                      to 99 % <= numab2's if run; pghotd-softdirty: hot set >= 99 %,
                      over-promotion <= 5 %, 0 hint faults; pghotd-damon: hot set >= 99 %,
                      over-promotion below damon's if run, 0 hint faults; hotplug: both log
                      lines per cycle and no sampler giving up, cpu 1 sampled before and
                      after, none while offline,
                      cpu 0 sampled meanwhile, perf fds closed and reopened, every sample
                      counted, exit 0 within 1.2 s of SIGTERM
  --keep-console DIR  save each scenario's console as DIR/SCENARIO.console
  --workload-bin PATH use this static pghot-workload instead of building it
  --pghotd-bin PATH   use this static pghotd instead of building it
  --pghotd-args STR   extra pghotd arguments (word-split in the guest)
  --workload-args STR extra pghot-workload arguments (word-split in the guest)
  --sample-period N   pghot-workload --sample-period for pghotd-emu (default 100)
  --freq-threshold N|default
                      pghotd --freq-threshold for the pghotd-* scenarios (default 1, as in the
                      pghot series; `default` passes none, so pghotd's own default applies)
  --start placed|with pghotd-softdirty and pghotd-damon: start pghotd once the buffer is placed
                      (placed, the default) or together with the workload, before it first
                      touches its buffer (with: pghotd then sees the placement's writes too)
  --threads N         pghot-workload --threads (default 1)
  --rate-limit-mbps N one promotion rate limit for both promoters, per destination node as in
                      the kernel: numab2's kernel.numa_balancing_promote_rate_limit_MBps and
                      pghotd's --promote-rate-limit-MBps (default: each its own default)
  --damon-quota-mb N  DAMON migrate_hot size quota per reset interval (default 128)
  --damon-reset-ms N  DAMON quota reset interval (default 1000)
  --damon-max-regions N  DAMON nr_regions/max (default 1000, the sysfs default)
  --tlb-flush-ms N    run a sleeper per guest CPU that wakes every N ms, so QEMU's software
                      TLB gets flushed as a real TLB would be evicted (default 0: off; see
                      README: DAMON sees no accesses to a dense hot set without it)
  --kernel-args STR   extra guest kernel command-line arguments (e.g. loglevel=7)
  --cpu MODEL         QEMU -cpu for the guest (default max,-erms,-fsrm: see tests/vm/lib.sh;
                      `max` is the issue's recipe, with page copies 2.5 times slower)
  --scope pid|comm|churn
                      pghotd-softdirty and pghotd-damon select the workload by --pid (default)
                      or by --comm '^pghot-workload$' (a followed scope; pghotd then runs for
                      the workload's duration, as such a scope does not end with its
                      processes); churn: comm, and a second small pghot-workload joins the
                      scope 2 s in and leaves 3 s later; --softdirty-scope is an older name
  -v, --verbose       stream each guest's console to stderr
Environment: CARGO_TARGET_DIR (cargo's, default target/), PGHOT_VM_VMLINUZ + PGHOT_VM_BUSYBOX
(skip fetch-guest.sh), PGHOT_VM_TIMEOUT (seconds per guest, default 3 x duration + 180).
EOF
	exit 2
}

# --- options ------------------------------------------------------------------------------
# --guest debian hands the whole run to debian-rig.sh (the Debian guest with systemd); the
# default guest, busybox, is this script's.
guest=busybox
rest=()
while [ $# -gt 0 ]; do
	case $1 in
	--guest) [ $# -ge 2 ] || { log "--guest needs a value (busybox or debian)"; usage; }; guest=$2; shift ;;
	*) rest+=("$1") ;;
	esac
	shift
done
set -- ${rest[@]+"${rest[@]}"}
case $guest in
busybox) ;;
debian) exec "$here/debian-rig.sh" "$@" ;;
*) log "--guest must be busybox or debian, not '$guest'"; usage ;;
esac
duration=30
duration_set=0
pattern="hot-scattered"
thp_shape=aligned
bar=0
keep_dir=
workload_bin=
pghotd_bin=
pghotd_args=
workload_args=
sample_period=100
# The pghot series' benchmarks all run pghot with freq_threshold=1 ("promote on 1st access, like
# NUMAB2"); pghotd's own default is 2.
freq_threshold=1
start=placed
threads=1
rate_limit_mbps=
damon_quota_mb=128
damon_reset_ms=1000
damon_max_regions=1000
tlb_flush_ms=0
scope=pid
kernel_args=
verbose=0
scenarios=()

need_arg() { [ $# -ge 2 ] || { log "$1 needs a value"; usage; }; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
while [ $# -gt 0 ]; do
	case $1 in
	--quick) [ "$duration_set" = 1 ] || duration=10 ;;
	--duration) need_arg "$@"; duration=$2; duration_set=1; shift ;;
	--pattern) need_arg "$@"; pattern=$2; shift ;;
	--thp-shape) need_arg "$@"; thp_shape=$2; shift ;;
	--bar) bar=1 ;;
	--keep-console) need_arg "$@"; keep_dir=$2; shift ;;
	--workload-bin) need_arg "$@"; workload_bin=$2; shift ;;
	--pghotd-bin) need_arg "$@"; pghotd_bin=$2; shift ;;
	--pghotd-args) need_arg "$@"; pghotd_args=$2; shift ;;
	--workload-args) need_arg "$@"; workload_args=$2; shift ;;
	--sample-period) need_arg "$@"; sample_period=$2; shift ;;
	--freq-threshold) need_arg "$@"; freq_threshold=$2; shift ;;
	--start) need_arg "$@"; start=$2; shift ;;
	--threads) need_arg "$@"; threads=$2; shift ;;
	--rate-limit-mbps) need_arg "$@"; rate_limit_mbps=$2; shift ;;
	--damon-quota-mb) need_arg "$@"; damon_quota_mb=$2; shift ;;
	--damon-reset-ms) need_arg "$@"; damon_reset_ms=$2; shift ;;
	--damon-max-regions) need_arg "$@"; damon_max_regions=$2; shift ;;
	--tlb-flush-ms) need_arg "$@"; tlb_flush_ms=$2; shift ;;
	--kernel-args) need_arg "$@"; kernel_args=$2; shift ;;
	--cpu) need_arg "$@"; PGHOT_VM_CPU=$2; shift ;;
	--scope | --softdirty-scope) need_arg "$@"; scope=$2; shift ;;
	-v | --verbose) verbose=1 ;;
	-h | --help) usage ;;
	all) scenarios+=("${all_scenarios[@]}") ;;
	baseline | numab2 | damon | pghotd-emu | pghotd-softdirty | pghotd-damon | pghotd-thp-split | pghotd-thp-whole | numab2-thp | hotplug) scenarios+=("$1") ;;
	-*) log "unknown option $1"; usage ;;
	*) log "unknown scenario $1 (baseline, numab2, damon, pghotd-emu, pghotd-softdirty, pghotd-damon, all, pghotd-thp-split, pghotd-thp-whole, numab2-thp, hotplug)"; usage ;;
	esac
	shift
done
[ ${#scenarios[@]} -gt 0 ] || usage
# Run each scenario once, in the order given.
mapfile -t scenarios < <(printf '%s\n' "${scenarios[@]}" | awk '!seen[$0]++')
case $scope in pid | comm | churn) ;; *) log "--scope must be pid, comm or churn, not '$scope'"; usage ;; esac
case $thp_shape in
aligned | runs-64k | runs-128k | runs-256k | sparse | flat) ;;
*) log "--thp-shape must be aligned, runs-64k, runs-128k, runs-256k, sparse or flat, not '$thp_shape'"; usage ;;
esac
[ -z "$rate_limit_mbps" ] || { is_uint "$rate_limit_mbps" && [ "$rate_limit_mbps" -gt 0 ]; } || {
	log "--rate-limit-mbps must be a positive number of MB/s, not '$rate_limit_mbps'"
	usage
}
is_uint "$tlb_flush_ms" || { log "--tlb-flush-ms must be a number of milliseconds, not '$tlb_flush_ms'"; usage; }
case $start in placed | with) ;; *) log "--start must be placed or with, not '$start'"; usage ;; esac
[ "$freq_threshold" = default ] || is_uint "$freq_threshold" && [ "$freq_threshold" != 0 ] ||
	{ log "--freq-threshold must be a positive integer or default, not '$freq_threshold'"; usage; }
for v in duration sample_period threads damon_quota_mb damon_reset_ms damon_max_regions; do
	if ! is_uint "${!v}" || [ "${!v}" -eq 0 ]; then
		log "--${v//_/-} must be a positive integer, not '${!v}'"
		usage
	fi
done
[[ $pattern =~ ^[A-Za-z0-9_-]+$ ]] || { log "--pattern '$pattern': letters, digits, - and _ only"; usage; }
has() {
	local s
	for s in "${scenarios[@]}"; do [ "$s" = "$1" ] && return 0; done
	return 1
}
if [ "$bar" = 1 ] && ! has pghotd-emu && ! has pghotd-softdirty && ! has pghotd-damon && ! has pghotd-thp-split && ! has hotplug; then
	log "--bar checks the pghotd-* and hotplug scenarios; add one to the scenarios"
	usage
fi
command -v jq >/dev/null || {
	log "apt-get install jq (parses the guests' JSON)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends jq >&2 ||
		{ apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends jq >&2; } ||
		die "jq is needed; apt-get install jq"
}
timeout_s=${PGHOT_VM_TIMEOUT:-$((3 * duration + 180))}

# --- guest kernel, busybox, binaries ------------------------------------------------------
t_start=$(date +%s)
pghot_vm_guest
pghot_vm_topology 3node

bins=()
[ -n "$pghotd_bin" ] || bins+=(--bin pghotd)
[ -n "$workload_bin" ] || bins+=(--bin pghot-workload)
target_dir=${CARGO_TARGET_DIR:-$repo/target}
if [ ${#bins[@]} -gt 0 ]; then
	log "building static ${bins[*]} (CARGO_TARGET_DIR=$target_dir)"
	(cd "$repo" && CARGO_TARGET_DIR=$target_dir RUSTFLAGS='-C target-feature=+crt-static' \
		cargo build --release --target x86_64-unknown-linux-gnu "${bins[@]}" >&2) ||
		die "cargo build failed (pass --workload-bin/--pghotd-bin to use prebuilt static binaries)"
fi
pghotd_bin=${pghotd_bin:-$target_dir/x86_64-unknown-linux-gnu/release/pghotd}
workload_bin=${workload_bin:-$target_dir/x86_64-unknown-linux-gnu/release/pghot-workload}
for b in "$pghotd_bin" "$workload_bin"; do
	[ -x "$b" ] || die "$b: not an executable"
	# The initramfs has no libc: the binaries must be static.
	if file -L "$b" 2>/dev/null | grep -q 'dynamically linked'; then
		die "$b: dynamically linked; build it with RUSTFLAGS='-C target-feature=+crt-static'"
	fi
done
t_built=$(date +%s)

pghot_vm_workdir pghot-rig
work=$PGHOT_VM_WORK

# --- initramfs (one for every scenario; the scenario is on the kernel command line) -------
root=$work/initramfs
pghot_vm_initramfs_root "$root"
cp "$here/rig-init.sh" "$root/init"
cp "$here/guest-damon.sh" "$root/etc/pghot-damon.sh"
chmod 0755 "$root/init"
cp "$pghotd_bin" "$root/bin/pghotd"
cp "$workload_bin" "$root/bin/pghot-workload"
# sq STR: STR single-quoted for sh.
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{
	echo "# written by tests/vm/rig.sh"
	echo "RIG_DURATION=$duration"
	echo "RIG_PATTERN=$pattern"
	echo "RIG_SAMPLE_PERIOD=$sample_period"
	echo "RIG_FREQ_THRESHOLD=$freq_threshold"
	echo "RIG_START=$start"
	echo "RIG_THREADS=$threads"
	echo "RIG_RATE_LIMIT_MBPS=$rate_limit_mbps"
	echo "RIG_DAMON_QUOTA_MB=$damon_quota_mb"
	echo "RIG_DAMON_RESET_MS=$damon_reset_ms"
	echo "RIG_DAMON_MAX_REGIONS=$damon_max_regions"
	echo "RIG_TLB_FLUSH_MS=$tlb_flush_ms"
	echo "RIG_SCOPE=$scope"
	echo "RIG_THP_SHAPE=$thp_shape"
	echo "RIG_PGHOTD_ARGS=$(sq "$pghotd_args")"
	echo "RIG_WORKLOAD_ARGS=$(sq "$workload_args")"
} > "$root/etc/pghot-rig.conf"
pghot_vm_pack "$root" "$work/initramfs.gz"
if [ -n "$keep_dir" ]; then
	mkdir -p "$keep_dir"
fi

# --- one guest per scenario ---------------------------------------------------------------
# kv_json "k=v k=v ...": a JSON object; numeric values become numbers, "-" becomes null.
kv_json() {
	jq -cn --arg s "$1" '$s | split(" ") | map(select(length > 0) | capture("^(?<k>[^=]+)=(?<v>.*)$"))
		| map({(.k): (if .v == "-" then null else ((.v | tonumber?) // .v) end)}) | add // {}'
}

failed=()
erred=()
tcg_retries=0
results=()
for s in "${scenarios[@]}"; do
	append="console=ttyS0 panic=-1 quiet pghot.scenario=$s"
	case $s in numab2 | numab2-thp) ;; *) append="$append numa_balancing=disable" ;; esac
	[ -z "$kernel_args" ] || append="$append $kernel_args"
	log "$s: booting ($duration s workload, -cpu $PGHOT_VM_CPU, timeout ${timeout_s} s)"
	console=$work/$s.console
	# QEMU's TCG sometimes runs a stale translation of kernel text that the kernel has just
	# patched (static keys, text_poke_bp): the guest dies of "Oops: int3" in code that never
	# holds one, mostly at boot. Not pghotd's doing and not the scenario's: boot again, at
	# most twice, and say so.
	for attempt in 1 2 3; do
		t0=$(date +%s.%N)
		rc=0
		pghot_vm_boot "$work/initramfs.gz" "$append" "$work/$s.raw" "$timeout_s" "$verbose" || rc=$?
		t1=$(date +%s.%N)
		wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
		pghot_vm_clean_console "$work/$s.raw" "$console"
		grep -aq '^RESULT {' "$console" && break
		oops=$(grep -a -m1 -A5 'Oops: int3' "$console" | grep -a -m1 -o 'RIP: [^ ]*' || true)
		if [ -z "$oops" ] || [ "$attempt" = 3 ]; then
			break
		fi
		log "$s: the guest kernel died of QEMU TCG's code-patching flake (Oops: int3, $oops) after ${wall} s; booting again (attempt $((attempt + 1)) of 3)"
		tcg_retries=$((tcg_retries + 1))
	done
	if [ -n "$keep_dir" ]; then
		cp "$console" "$keep_dir/$s.console"
	fi
	wl_json=$(grep -a '^RESULT {' "$console" | tail -n 1 | cut -d' ' -f2- || true)
	stats=$(grep -a '^PGHOT-RIG-STATS ' "$console" | tail -n 1 | cut -d' ' -f2- || true)
	pghotd_json=$(grep -a '^PGHOT-RIG-PGHOTD {' "$console" | tail -n 1 | cut -d' ' -f2- || true)
	grep -a '^PGHOT-RIG-ERROR ' "$console" | sed "s/^PGHOT-RIG-ERROR /rig: $s: guest: /" >&2 || true
	if [ -z "$wl_json" ] || ! jq -e . <<< "$wl_json" > /dev/null 2>&1 || [ -z "$stats" ]; then
		why="no RESULT line from the workload"
		[ -n "$wl_json" ] && ! jq -e . <<< "$wl_json" > /dev/null 2>&1 && why="its RESULT line is not JSON"
		[ -n "$wl_json" ] && [ -z "$stats" ] && why="no PGHOT-RIG-STATS line"
		[ "$rc" = 124 ] && why="$why; the guest did not power off within ${timeout_s}s (PGHOT_VM_TIMEOUT)"
		log "$s: FAILED after ${wall} s: $why (qemu exit $rc); console tail:"
		tail -n 40 "$console" | sed 's/^/    /' >&2
		failed+=("$s")
		continue
	fi
	[ -n "$pghotd_json" ] && jq -e . <<< "$pghotd_json" > /dev/null 2>&1 || pghotd_json=null
	# Steady promotion rate: MiB on fast nodes (hot + cold) from the first report at t >= 2 s
	# (past the token bucket's one-second burst) to the last one below 95 % of the final amount.
	hot_mb=$(jq -r '.hot_mb // 0' <<< "$wl_json")
	# (No t= lines at all in hotplug: grep's status must not end the script.)
	rate=$({ grep -a '^t=' "$console" || true; } | tr '=' ' ' | awk -v hot="$hot_mb" '
		{ for (i = 1; i < NF; i++) v[$i] = $(i + 1)
		  n++; t[n] = v["t"]; f[n] = hot * v["hot_fast_pct"] / 100 + v["cold_fast_mb"] }
		END {
			if (n < 2) { print "null"; exit }
			for (i = 1; i <= n && t[i] < 2; i++) ;
			a = i; b = 0
			for (j = a; j <= n; j++) if (f[j] < 0.95 * f[n]) b = j
			if (a > n || b <= a) { print "null"; exit }
			printf "%.2f\n", (f[b] - f[a]) / (t[b] - t[a])
		}')
	guest=$(kv_json "$stats")
	vmstat=$(jq -c 'with_entries(select(.key | startswith("vm_")) | .key |= ltrimstr("vm_"))' <<< "$guest")
	guest=$(jq -c 'with_entries(select(.key | startswith("vm_") | not))' <<< "$guest")
	result=$(jq -cn --arg scenario "$s" --argjson wl "$wl_json" --argjson g "$guest" --argjson vm "$vmstat" \
		--argjson pghotd "$pghotd_json" --argjson wall "$wall" --argjson rate "$rate" '
		def num: if type == "number" then . else null end;
		def r1: if type == "number" then (. * 10 | round) / 10 else . end;
		($wl.hot_mb | num) as $hot_mb
		# THP scenarios: pghotd counts folios, not pages; vmstat base pages are exact.
		| ($scenario | startswith("pghotd-") and (startswith("pghotd-thp-") | not)) as $own
		| (if $own
			then (($pghotd.counters.pgpromote_success // null) | num)
			else ($vm.pgmigrate_success | num) end) as $pages
		| {scenario: $scenario}
		+ $wl
		+ {
			hot_fast_pct: ($wl.hot_fast_pct | num),
			over_promotion_pct: (if $hot_mb and $hot_mb > 0 and ($wl.cold_fast_mb | num) != null
				then ($wl.cold_fast_mb / $hot_mb * 100 | r1) else null end),
			mb_promoted: (if $pages != null then ($pages * 4 / 1024 | r1) else null end),
			mb_promoted_from: (if $own then "pghotd pgpromote_success" else "vmstat pgmigrate_success" end),
			promoted_per_hot_mb: (if $pages != null and $hot_mb and $hot_mb > 0
				then ($pages * 4 / 1024 / $hot_mb * 100 | round) / 100 else null end),
			time_to_90_s: $wl.time_to_90_s,
			time_to_95_s: $wl.time_to_95_s,
			time_to_99_s: $wl.time_to_99_s,
			promote_mb_per_s: $rate,
			promoter_cpu_s: $g.promoter_cpu_s,
			promoter_cpu_from: $g.promoter,
			hint_faults: $vm.numa_hint_faults,
			wall_s: $wall,
			vmstat: $vm,
			guest: $g
		}
		+ (if $pghotd != null then {pghotd: $pghotd} else {} end)')
	results+=("$result")
	guest_errors=$(jq -r '.guest.errors // 0' <<< "$result")
	if [ "$guest_errors" != 0 ]; then
		log "$s: the guest reported $guest_errors error(s) (PGHOT-RIG-ERROR lines above)"
		# pghotd's log stays in the guest's console (pghotd_report in rig-init.sh prints its
		# tail as "pghotd: " lines): show it, since that is where pghotd says why it stopped.
		if grep -aq '^pghotd: ' "$console"; then
			log "$s: the tail of pghotd's log in the guest:"
			grep -a '^pghotd: ' "$console" | sed "s/^/rig: $s: guest: /" >&2
		fi
		erred+=("$s")
	fi
	log "$s: done in ${wall} s (guest: workload $(jq -r '.guest.workload_s' <<< "$result") s, boot $(jq -r '.guest.boot_s' <<< "$result") s)"
done
t_end=$(date +%s)

# --- report -------------------------------------------------------------------------------
# fmt VALUE DECIMALS: a number with DECIMALS places; anything else unchanged ("-" for none).
fmt() {
	if [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then
		printf "%.${2}f" "$1"
	else
		printf '%s' "$1"
	fi
}
if [ ${#results[@]} -gt 0 ]; then
	echo
	printf '%-16s | %8s | %9s | %8s | %7s | %7s | %16s | %11s\n' \
		scenario "hot set" "over-" "MB" "time to" "time to" "promoter CPU s" "hint faults"
	printf '%-16s | %8s | %9s | %8s | %7s | %7s | %16s | %11s\n' \
		"" "fast %" "promo. %" promoted "90% s" "99% s" "" ""
	printf -- '-----------------+----------+-----------+----------+---------+---------+------------------+------------\n'
	for r in "${results[@]}"; do
		jq -r '[.scenario, .hot_fast_pct, .over_promotion_pct, .mb_promoted, .time_to_90_s, .time_to_99_s,
			.promoter_cpu_s, .promoter_cpu_from, .hint_faults] | map(. // "-") | @tsv' <<< "$r" |
			while IFS=$'\t' read -r name hot over mb t90 t99 cpu cpu_from faults; do
				cpu=$(fmt "$cpu" 2)
				[ "$cpu_from" = workload-stime ] && [ "$cpu" != - ] && cpu="$cpu (task sys)"
				[ "$cpu_from" = pghotd+kdamond ] && [ "$cpu" != - ] && cpu="$cpu (+kdamond)"
				printf '%-16s | %8s | %9s | %8s | %7s | %7s | %16s | %11s\n' "$name" "$(fmt "$hot" 1)" \
					"$(fmt "$over" 1)" "$(fmt "$mb" 1)" "$(fmt "$t90" 2)" "$(fmt "$t99" 2)" "$cpu" "$(fmt "$faults" 0)"
			done
	done
	echo
	baseline_stime=null
	for r in "${results[@]}"; do
		if [ "$(jq -r .scenario <<< "$r")" = baseline ]; then
			baseline_stime=$(jq '.guest.wl_stime_s // null' <<< "$r")
		fi
	done
	for i in "${!results[@]}"; do
		# numab2's "promoter CPU" is the workload's own system time; with a baseline run next
		# to it, the difference is the part NUMA balancing added.
		results[i]=$(jq -c --argjson b "$baseline_stime" 'if .scenario == "numab2" and $b != null and .promoter_cpu_s != null
			then . + {promoter_cpu_over_baseline_s: ((.promoter_cpu_s - $b) * 100 | round / 100)} else . end' <<< "${results[i]}")
		jq -r '
			def mib: if . == null then "-" else (. / 1048576 | round | tostring) end;
			if .scenario == "baseline" then
				"baseline: no promoter; the workload used \(.guest.wl_stime_s) s of system time (placement and its own move_pages queries)"
			elif .scenario == "numab2" then
				"numab2: no promoter thread, so the CPU column is the workload'"'"'s system time (NUMA scanning and hint faults run in the task)"
				+ (if .promoter_cpu_over_baseline_s != null then "; \(.promoter_cpu_over_baseline_s) s more than baseline'"'"'s" else "" end)
				+ "; numa_pte_updates \(.vmstat.numa_pte_updates), numa_pages_migrated \(.vmstat.numa_pages_migrated), pgpromote_success \(.vmstat.pgpromote_success)"
			elif .scenario == "damon" then
				"damon: CPU = kdamond; scheme sz_applied \(.guest.damon_sz_applied | mib) MiB, nr_applied \(.guest.damon_nr_applied), qt_exceeds \(.guest.damon_qt_exceeds)"
			elif .scenario == "pghotd-emu" then
				"pghotd-emu: CPU = pghotd (user \(.guest.pghotd_utime_s) + sys \(.guest.pghotd_stime_s)); \(.samples_emitted) samples emitted"
				+ (if (.duration_s // 0) > 0 then " (\(.samples_emitted / .duration_s | round)/s)" else "" end)
				+ ", \(.samples_dropped) dropped; pghotd: \(.pghotd.counters.hwhint_total_events // "-") received, \(.pghotd.counters.pghot_recorded_accesses // "-") on the slow tier, \(.pghotd.counters.pgpromote_candidate // "-") candidates, \(.pghotd.counters.pgpromote_success // "-") promoted, \(.pghotd.counters.pgpromote_ratelimited // "-") rate-limited, \(.pghotd.counters.pghot_drop_unknown_node // "-") dropped for unknown node; steady promotion \(.promote_mb_per_s // "-") MiB/s; exit \(.guest.pghotd_rc)"
			elif .scenario == "pghotd-softdirty" then
				"pghotd-softdirty: CPU = pghotd (user \(.guest.pghotd_utime_s) + sys \(.guest.pghotd_stime_s)); \(.pghotd.counters.softdirty_scans // "-") passes, \(.pghotd.counters.softdirty_pages_scanned // "-") pagemap entries read, \(.pghotd.counters.softdirty_dirty_pages // "-") dirty pages, scan time \(((.pghotd.counters.softdirty_scan_ns // 0) / 1e9 * 100 | round) / 100) s; \(.pghotd.counters.pgpromote_candidate // "-") candidates, \(.pghotd.counters.pgpromote_success // "-") promoted; exit \(.guest.pghotd_rc)"
			elif .scenario == "pghotd-damon" then
				"pghotd-damon: CPU = pghotd (user \(.guest.pghotd_utime_s) + sys \(.guest.pghotd_stime_s)) + its kdamond \(.guest.kdamond_cpu_s); \(.pghotd.counters.damon_snapshots // "-") snapshots, \(.pghotd.counters.damon_regions_seen // "-") accessed regions read, \(.pghotd.counters.source_damon_samples // "-") samples, \(.pghotd.counters.damon_credits_capped // "-") credits capped, \(.pghotd.counters.damon_retries // "-") DAMON retries; \(.pghotd.counters.pgpromote_candidate // "-") candidates, \(.pghotd.counters.pgpromote_success // "-") promoted; exit \(.guest.pghotd_rc)"
			elif .scenario == "hotplug" then
				"hotplug: \(.hotplug_cycles) cycles of cpu 1 offline \(.phase_s) s; logged went offline \(.went_offline_logged)x, came online \(.came_online_logged)x, a sampler giving up \(.samplers_gave_up)x; cpu 1 samples before \(.cpu1_samples_before), while offline \(.cpu1_samples_offline), after \(.cpu1_samples_after); cpu 0 samples while offline \(.cpu0_samples_offline); perf fds \(.perf_fds); \(.recorded) recorded, \(.pghotd.counters.source_pagefault_samples // "-") counted; exit \(.pghotd_rc) \(.term_exit_s) s after SIGTERM"
			else empty end' <<< "${results[i]}"
	done
	# The THP scenarios: issue 24's figures, one line each.
	for r in "${results[@]}"; do
		jq -r 'select(.scenario | test("^(pghotd-thp-|numab2-thp)")) | "\(.scenario) [\(.guest.thp_shape)]: \(.hot_fast_pct) % of \(.hot_mb) MiB hot on fast nodes, over-promotion \(.over_promotion_pct) %, MB promoted / hot MB \(.promoted_per_hot_mb), time to 95 % \(.time_to_95_s // "never") s; thp_split_per_folio \(.pghotd.counters.thp_split_per_folio // "-"), thp_split_folded \(.pghotd.counters.thp_split_folded // "-"), thp_split_base_pages \(.pghotd.counters.thp_split_base_pages // "-"), thp_whole_promotions \(.pghotd.counters.thp_whole_promotions // "-"), thp_recollapsed \(.pghotd.counters.thp_recollapsed // "-"), pgpromote_deferred_recollapsed \(.pghotd.counters.pgpromote_deferred_recollapsed // "-"), pghot_audit_moved_back \(.pghotd.counters.pghot_audit_moved_back // "-"), vmstat thp_collapse_alloc \(.vmstat.thp_collapse_alloc // "-"), vmstat thp_migration_success \(.vmstat.thp_migration_success // "-")"' <<< "$r"
	done
	# What the promoter cost the application beyond its accesses: time its workers waited for
	# a CPU or slept (on pages under migration, among others) instead of running.
	for r in "${results[@]}"; do
		jq -r 'select(.workers != null) | "\(.scenario): workload threads ran \(.workers.run_s) s, waited for a CPU \(.workers.runqueue_s) s, slept \(.workers.blocked_s) s (\(.workers.voluntary_switches) sleeps) in \(.duration_s) s x \(.threads)"' <<< "$r"
	done
	echo
	for r in "${results[@]}"; do
		echo "RESULT $r"
	done
fi
log "timings: fetch+build $((t_built - t_start)) s, scenarios $((t_end - t_built)) s, total $((t_end - t_start)) s$([ "$tcg_retries" = 0 ] || echo "; $tcg_retries boot(s) repeated after the TCG int3 flake")"

status=0
if [ ${#failed[@]} -gt 0 ]; then
	log "FAILED: ${failed[*]} produced no result"
	status=1
fi
if [ ${#erred[@]} -gt 0 ]; then
	log "FAILED: ${erred[*]} reported errors in the guest"
	status=1
fi

# --- the bar ------------------------------------------------------------------------------
# bar_check SCENARIO JQ: JQ prints one line per miss for the scenario's result ($n: numab2's,
# $d: damon's, $t: numab2-thp's, null when they did not run).
bar_check() {
	local name=$1 expr=$2 r mine='' numab2=null damon=null numab2_thp=null misses
	for r in "${results[@]}"; do
		case $(jq -r .scenario <<< "$r") in
		"$name") mine=$r ;;
		numab2) numab2=$r ;;
		damon) damon=$r ;;
		numab2-thp) numab2_thp=$r ;;
		esac
	done
	if [ -z "$mine" ]; then
		log "bar: NOT MET ($name produced no result)"
		status=1
		return
	fi
	misses=$(jq -r --argjson n "$numab2" --argjson d "$damon" --argjson t "$numab2_thp" "[ $expr ] | .[]" <<< "$mine")
	if [ -n "$misses" ]; then
		log "bar: NOT MET for $name:"
		while IFS= read -r m; do log "    $m"; done <<< "$misses"
		status=1
	else
		log "bar: met for $name"
	fi
}
common_bar='(if (.hot_fast_pct // -1) >= 99 then empty else "hot set on fast nodes \(.hot_fast_pct) % < 99 %" end),
	(if .hint_faults == 0 then empty else "hint faults \(.hint_faults) != 0" end)'
if [ "$bar" = 1 ]; then
	if has pghotd-emu; then
		bar_check pghotd-emu "$common_bar,
			(if .over_promotion_pct != null and .over_promotion_pct <= 2 then empty else \"over-promotion \(.over_promotion_pct) % > 2 %\" end),
			(if \$n == null then empty
			 elif .time_to_99_s == null then \"never reached 99 % (numab2: \(\$n.time_to_99_s) s)\"
			 elif \$n.time_to_99_s == null or .time_to_99_s <= \$n.time_to_99_s then empty
			 else \"time to 99 % \(.time_to_99_s) s > numab2 \(\$n.time_to_99_s) s\" end)"
	fi
	if has pghotd-softdirty; then
		bar_check pghotd-softdirty "$common_bar,
			(if .over_promotion_pct != null and .over_promotion_pct <= 5 then empty else \"over-promotion \(.over_promotion_pct) % > 5 %\" end)"
	fi
	if has pghotd-thp-split; then
		case $thp_shape in
		aligned)
			bar_check pghotd-thp-split "(if (.hot_fast_pct // -1) >= 95 then empty else \"hot clusters on fast nodes \(.hot_fast_pct) % < 95 %\" end),
			(if .promoted_per_hot_mb != null and .promoted_per_hot_mb <= 1.5 then empty else \"MB promoted / hot MB \(.promoted_per_hot_mb) > 1.5\" end)"
			;;
		runs-64k | runs-128k)
			# Issue 24: 8 MiB hot as runs at random offsets in 256 MiB.
			bar_check pghotd-thp-split "(if (.hot_fast_pct // -1) >= 95 then empty else \"hot runs on fast nodes \(.hot_fast_pct) % < 95 %\" end),
			(if .over_promotion_pct != null and .over_promotion_pct <= 50 then empty else \"over-promotion \(.over_promotion_pct) % > 50 %\" end),
			(if \$t == null or \$t.over_promotion_pct == null then empty
			 elif .over_promotion_pct < \$t.over_promotion_pct then empty
			 else \"over-promotion \(.over_promotion_pct) % not below numab2-thp's \(\$t.over_promotion_pct) %\" end)"
			;;
		*) log "bar: no bar for pghotd-thp-split with --thp-shape $thp_shape (figures only)" ;;
		esac
	fi
	if has hotplug; then
		# perf_fds: at start, then after each offline and each online phase: S,S-1,S,S-1,S...
		# shellcheck disable=SC2016 # a jq program: $c, $f and $pf are jq's
		bar_check hotplug '(.hotplug_cycles) as $c
			| (if .went_offline_logged == $c then empty else "logged \(.went_offline_logged) of \($c) \"cpu 1 went offline\"" end),
			(if .came_online_logged == $c then empty else "logged \(.came_online_logged) of \($c) \"cpu 1 came online\"" end),
			(if .samplers_gave_up == 0 then empty else "\(.samplers_gave_up) log lines of a CPU sampler giving up" end),
			(if .cpu1_samples_before > 0 then empty else "no cpu 1 samples before it went offline" end),
			(if .cpu1_samples_after > 0 then empty else "no cpu 1 samples after it came back" end),
			(if .cpu1_samples_offline == 0 then empty else "\(.cpu1_samples_offline) cpu 1 samples while it was offline" end),
			(if .cpu0_samples_offline > 0 then empty else "no cpu 0 samples while cpu 1 was offline" end),
			(.perf_fds as $pf | ($pf | split(",") | map(tonumber)) as $f
			 | if ($f | length) == 2 * $c + 1 and $f[0] > 0
				and ([range(1; $f | length)] | all(. as $i | $f[$i] == (if $i % 2 == 1 then $f[0] - 1 else $f[0] end)))
			   then empty else "perf fds \($pf), want start,start-1,start,... per cycle" end),
			(if .recorded > 0 and .pghotd.counters.source_pagefault_samples == .recorded then empty
			 else "recorded \(.recorded) samples, counted \(.pghotd.counters.source_pagefault_samples)" end),
			(if .alive_before_term == 1 then empty else "pghotd exited before SIGTERM" end),
			(if .pghotd_rc == "0" then empty else "pghotd exit status \(.pghotd_rc)" end),
			(if .term_exit_s <= 1.2 then empty else "exit \(.term_exit_s) s after SIGTERM > 1.2 s" end)'
	fi
	if has pghotd-damon; then
		bar_check pghotd-damon "$common_bar,
			(if .over_promotion_pct == null then \"no over-promotion figure\"
			 elif \$d == null or \$d.over_promotion_pct == null then empty
			 elif .over_promotion_pct < \$d.over_promotion_pct then empty
			 else \"over-promotion \(.over_promotion_pct) % not below damon's \(\$d.over_promotion_pct) %\" end)"
	fi
fi
exit "$status"
