#!/usr/bin/env bash
# The rig on a Debian 12 guest with systemd as init: `tests/vm/rig.sh --guest debian ...` runs
# this script (with --guest removed from the arguments). See tests/vm/README.md, "The Debian
# guest".
#
#   rig.sh --guest debian service      install the project's .deb, run pghotd as the sandboxed
#                                      service, one boolean per check: SERVICE {json}
#
# The guest is the 3-node HMAT machine of the busybox rig (lib.sh: pghot_vm_topology 3node);
# its root file system is the cached Debian image (debian-image.sh) followed by a second cpio
# holding what this run adds (/opt/pghot-rig: the .deb, a static pghot-workload, the guest's
# script; /etc/pghot-rig.conf; the unit that runs the script once multi-user.target is
# reached), both unpacked by the kernel as its initramfs, booted with
# rdinit=/lib/systemd/systemd.
set -euo pipefail

PGHOT_VM_PROG=rig-debian
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/lib.sh"

usage() {
	cat >&2 <<'EOF'
usage: tests/vm/rig.sh --guest debian [OPTIONS] service

  service               install the .deb in the guest and check pghotd as a systemd service
  container             build pghotd's image with podman (packaging/container/
                        Containerfile.prebuilt) and run it as the sidecar of a program in
                        another container, as packaging/kubernetes/sidecar*.yaml set it up:
                        one boolean per check, CONTAINER {json}
  exec                  run the script given by --exec in the guest (as root, once
                        multi-user.target is reached), its output on stderr: for investigating
  --app APP SCENARIO... a packaged program under each promoter, the slow node made slow by the
                        ibs-emu plugin: APP redis, memcached or custom; SCENARIO
                        baseline, numab2, damon,
                        pghotd-ibs-emu, pghotd-softdirty, pghotd-damon (or all); one
                        RESULT {json} each, with the ground truth (hot_fast_pct,
                        over_promotion_pct)
Options:
  --app-pkgs 'PKG...'   --app custom: Debian packages to add to the image
  --app-load 'CMD'      --app custom: starts the program and loads its data (bash -c, as root);
                        the process it leaves running is the one watched and moved to node 2
  --app-run 'CMD'       --app custom: one round of the measured phase (bash -c); its wall
                        time is the figure (runs per second stand for ops/s)
  --duration SECS       each check's workload runs this long (default 12)
  --deb PATH            install this .deb instead of building one (packaging/build-packages.sh)
  --workload-bin PATH   a static pghot-workload instead of building one
  --exec FILE           the script the exec scenario runs
  --dilation D          --app: memory time dilation: with the modelled cache, every miss
                        spins D x the seed's latency (143 ns fast, 320 ns slow) of host
                        time, as TCG runs the guest's code about D times slower than
                        hardware (default 50; see tests/vm/README.md)
  --slow-ns N, --fast-ns N   --app: the spins themselves, overriding --dilation
  --rounds N            --app: rounds of the measured phase (default 6)
  --round-ops N         --app: requests per round (default 20000)
  --hot-keys N          --app redis|memcached: the measured phase's GETs go to key numbers
                        below N (default 2048; the load writes 262144 random key numbers, of
                        which about 63 % distinct, values of 1 KiB scattered through the heap)
  --pipeline N          --app redis: GETs in flight per connection (redis-benchmark -P,
                        default 16): with fewer system calls per GET, more of Redis's time is
                        memory, as on a busy server
  --period N            --app: the plugin's IBS op sampling period, user-mode memory
                        operations per sample per vCPU (default 10000 / D: the seed's IBS
                        period at the dilation, 200 at the default D = 50)
  --pghotd-set 'KEY = VALUE'
                        --app: a line added to /etc/pghotd/pghotd.toml for the pghotd-*
                        scenarios (repeatable; every other setting stays at its default);
                        checked on the host with pghotd --check-config first
  --pghotd-policy P     --app: the scheduling policy of pghotd's service, batch (default:
                        the unit's own) or idle (sched(7) SCHED_IDLE, a drop-in for
                        pghotd.service); pghotd's worker threads then follow its
                        cpu_policy setting (default auto: SCHED_IDLE while they get a CPU)
  --relay-policy P      --app: the relay's policy, batch or idle (chrt); default: the same
                        as --pghotd-policy
  --pause-alternate     --app, the pghotd-* scenarios: pghotd (every thread, SIGSTOP) is
                        stopped through each odd round and runs through each even one, so
                        that one boot and one placement measure what its presence costs
                        (RESULT's ops_per_s_paused and ops_per_s_running, from round 3 on)
  --fast-free-mb N      --app: leave about N MB free on each fast node (0 and 1) for the
                        measured phase, the rest held by HugeTLB pages no promoter can use
                        (default: the fast nodes as booted, with most of their 1 GiB free)
  --cache-kb N          --app: the plugin's modelled cache per vCPU in KiB (default 1024;
                        0: none): only accesses that miss it reach memory, pay the slow
                        node's delay, count as ground truth and are sampled
  --cache-ways N        --app: its ways per set, LRU (default 8, as a core's L2; 1 is the
                        direct-mapped cache of the runs before 4a4cfe7)
  --snoop 0|1           --app: 1 (default): a miss of one vCPU's cache that another vCPU's
                        holds is a hit, served cache to cache as real cores' misses are; 0:
                        every vCPU's cache on its own (the model of the runs before it)
  --profile             --app: add linux-perf and libc6-dbg to the image and sample every
                        vCPU (perf record -a, cpu-clock at 99 Hz) through the measured phase;
                        the console gets the CPU by process and library and the busiest
                        functions, pghotd's and the relay's from their unstripped binaries
  --profile-hz N        --profile's rate per vCPU (default 99): pghotd takes a few per cent
                        of a vCPU beside a busy program, a few hundred samples a phase at 99
  --vcpus N             the guest's CPUs, 2 to 8 (default 2), alternating between the DRAM
                        nodes 0 and 1: with more than 2 the promoter and the relay need not
                        take a vCPU from the program or its client, as on a server with cores
                        to spare (the host's own cores are shared by all of them all the same)
  --repeat N            run the scenarios N times (default 1), each pass in a new order (the
                        list rotated by one a pass), so that a phase on a slowed host is one
                        of N; --app adds a summary: each promoter's median ops/s, its ratio
                        to the same pass's baseline, and the passes it beat each rival in
  --keep-console DIR    save the cleaned console as DIR/SCENARIO.console (DIR/SCENARIO.pN.console
                        with --repeat)
  -v, --verbose         stream the guest's console to stderr
Environment: CARGO_TARGET_DIR, PGHOT_VM_CACHE (image cache, default /var/cache/pghot-vm),
PGHOT_VM_TIMEOUT (seconds for the guest, default 900).
Exit status: 0 when every check holds; 1 when one does not or the guest gave no answer; 2 for
bad usage.
EOF
	exit 2
}

duration=12
deb=
workload_bin=
keep_dir=
exec_file=
app=
app_pkgs=
app_load=
app_run=
slow_ns=
fast_ns=
dilation=50
rounds=6
round_ops=20000
period=
cache_kb=1024
cache_ways=8
snoop=1
hot_keys=2048
pipeline=16
pghotd_set=()
fast_free_mb=
pghotd_policy=batch
relay_policy=
pause_alternate=0
profile=0
profile_hz=99
repeat=1
vcpus=2
verbose=0
scenarios=()
need_arg() { [ $# -ge 2 ] || { log "$1 needs a value"; usage; }; }
while [ $# -gt 0 ]; do
	case $1 in
	--duration) need_arg "$@"; duration=$2; shift ;;
	--deb) need_arg "$@"; deb=$2; shift ;;
	--workload-bin) need_arg "$@"; workload_bin=$2; shift ;;
	--keep-console) need_arg "$@"; keep_dir=$2; shift ;;
	--exec) need_arg "$@"; exec_file=$2; shift ;;
	--app) need_arg "$@"; app=$2; shift ;;
	--app-pkgs) need_arg "$@"; app_pkgs=$2; shift ;;
	--app-load) need_arg "$@"; app_load=$2; shift ;;
	--app-run) need_arg "$@"; app_run=$2; shift ;;
	--slow-ns) need_arg "$@"; slow_ns=$2; shift ;;
	--fast-ns) need_arg "$@"; fast_ns=$2; shift ;;
	--dilation) need_arg "$@"; dilation=$2; shift ;;
	--rounds) need_arg "$@"; rounds=$2; shift ;;
	--round-ops) need_arg "$@"; round_ops=$2; shift ;;
	--period) need_arg "$@"; period=$2; shift ;;
	--cache-kb) need_arg "$@"; cache_kb=$2; shift ;;
	--cache-ways) need_arg "$@"; cache_ways=$2; shift ;;
	--snoop) need_arg "$@"; snoop=$2; shift ;;
	--hot-keys) need_arg "$@"; hot_keys=$2; shift ;;
	--pipeline) need_arg "$@"; pipeline=$2; shift ;;
	--pghotd-set) need_arg "$@"; pghotd_set+=("$2"); shift ;;
	--fast-free-mb) need_arg "$@"; fast_free_mb=$2; shift ;;
	--pghotd-policy) need_arg "$@"; pghotd_policy=$2; shift ;;
	--relay-policy) need_arg "$@"; relay_policy=$2; shift ;;
	--profile) profile=1 ;;
	--profile-hz) need_arg "$@"; profile_hz=$2; shift ;;
	--pause-alternate) pause_alternate=1 ;;
	--repeat) need_arg "$@"; repeat=$2; shift ;;
	--vcpus) need_arg "$@"; vcpus=$2; shift ;;
	-v | --verbose) verbose=1 ;;
	-h | --help) usage ;;
	service | container | exec | baseline | numab2 | damon | pghotd-ibs-emu | pghotd-softdirty | pghotd-damon) scenarios+=("$1") ;;
	all) scenarios+=(baseline numab2 damon pghotd-ibs-emu pghotd-softdirty pghotd-damon) ;;
	-*) log "unknown option $1 (for the Debian guest)"; usage ;;
	*) log "unknown scenario $1 for the Debian guest (service)"; usage ;;
	esac
	shift
done
[ ${#scenarios[@]} -gt 0 ] || usage
[[ $pghotd_policy =~ ^(batch|idle)$ ]] || { log "--pghotd-policy $pghotd_policy: batch or idle"; usage; }
relay_policy=${relay_policy:-$pghotd_policy}
[[ $relay_policy =~ ^(batch|idle)$ ]] || { log "--relay-policy $relay_policy: batch or idle"; usage; }
# Each scenario once a pass, in the order given (--repeat runs them again).
mapfile -t scenarios < <(printf '%s\n' "${scenarios[@]}" | awk '!seen[$0]++')
for s in "${scenarios[@]}"; do
	[ "$s" != exec ] || [ -r "$exec_file" ] || { log "the exec scenario needs --exec FILE"; usage; }
	case $s in
	service | container | exec) ;;
	*) [[ $app =~ ^(redis|memcached|custom)$ ]] || { log "scenario $s needs --app redis, memcached or custom"; usage; } ;;
	esac
done
if [ "$app" = custom ]; then
	[ -n "$app_load" ] && [ -n "$app_run" ] || { log "--app custom needs --app-load and --app-run"; usage; }
	# The default round size counts requests; a custom round is one run of --app-run.
	round_ops=1
	for p in $app_pkgs; do
		[[ $p =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || { log "--app-pkgs: '$p' is not a Debian package name"; usage; }
	done
elif [ -n "$app_pkgs$app_load$app_run" ]; then
	log "--app-pkgs, --app-load and --app-run go with --app custom"; usage
fi
[[ $dilation =~ ^[0-9]+$ ]] || { log "--dilation must be a whole number"; usage; }
slow_ns=${slow_ns:-$((320 * dilation))}
fast_ns=${fast_ns:-$((143 * dilation))}
# The guest runs D times slower, so a hardware period's samples per second of the program's run
# take a D times shorter period (tests/vm/README.md, "Time dilation").
period=${period:-$((10000 / (dilation > 0 ? dilation : 1)))}
for v in slow_ns fast_ns rounds round_ops period cache_kb cache_ways hot_keys pipeline; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { log "--${v//_/-} must be a whole number"; usage; }
done
[ "$pipeline" -ge 1 ] || { log "--pipeline must be at least 1"; usage; }
case $cache_ways in 1 | 2 | 4 | 8 | 16) ;; *) log "--cache-ways must be 1, 2, 4, 8 or 16"; usage ;; esac
case $snoop in 0 | 1) ;; *) log "--snoop must be 0 or 1"; usage ;; esac
[ -z "$fast_free_mb" ] || [[ $fast_free_mb =~ ^[0-9]+$ ]] || { log "--fast-free-mb must be a whole number"; usage; }
[[ $vcpus =~ ^[2-8]$ ]] || { log "--vcpus must be a whole number from 2 to 8"; usage; }
[[ $profile_hz =~ ^[0-9]+$ ]] && [ "$profile_hz" -ge 1 ] && [ "$profile_hz" -le 4000 ] || { log "--profile-hz must be a whole number from 1 to 4000"; usage; }
[[ $repeat =~ ^[0-9]+$ ]] && [ "$repeat" -ge 1 ] && [ "$repeat" -le 20 ] || { log "--repeat must be a whole number from 1 to 20"; usage; }
[[ $duration =~ ^[0-9]+$ ]] && [ "$duration" -ge 5 ] || { log "--duration must be a whole number of seconds >= 5"; usage; }
[ "$(id -u)" -eq 0 ] || die "must run as root (apt, mmdebstrap, the image cache)"
command -v jq >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends jq >&2 || die "jq is needed"
timeout_s=${PGHOT_VM_TIMEOUT:-900}

# --- the guest: kernel, image, .deb, workload ---------------------------------------------
t_start=$(date +%s)
pghot_vm_guest
pghot_vm_topology 3node "$vcpus"
image_pkgs=$app_pkgs
[ "$profile" -eq 0 ] || image_pkgs="$image_pkgs linux-perf libc6-dbg"
# podman and the pause process its pods need (kube play builds its infra image from catatonit).
[[ " ${scenarios[*]} " != *" container "* ]] || image_pkgs="$image_pkgs podman catatonit"
# shellcheck disable=SC2086 # package names, checked above
eval "$("$here/debian-image.sh" $image_pkgs)"
target_dir=${CARGO_TARGET_DIR:-$repo/target}
if [ -z "$deb" ]; then
	command -v cargo-deb >/dev/null || die "cargo-deb is needed to build the .deb: cargo install --locked cargo-deb@3.8.0 (or pass --deb)"
	log "building the .deb (packaging/build-packages.sh)"
	deb=$("$repo/packaging/build-packages.sh" | sed -n 1p) || die "packaging/build-packages.sh failed"
fi
[ -s "$deb" ] || die "$deb: no such .deb"
if [ ${#pghotd_set[@]} -gt 0 ]; then
	# The packaged pghotd judges the lines, so a typo stops the run here, not in the guest.
	check=$(mktemp -d)
	dpkg-deb -x "$deb" "$check" || die "$deb: dpkg-deb -x failed"
	printf '%s\n' "${pghotd_set[@]}" > "$check/pghotd.toml"
	if ! "$check/usr/bin/pghotd" --config "$check/pghotd.toml" --check-config > /dev/null 2> "$check/err"; then
		why=$(cat "$check/err")
		rm -rf "$check"
		die "--pghotd-set: $why"
	fi
	rm -rf "$check"
fi
if [ -z "$workload_bin" ]; then
	log "building a static pghot-workload"
	(cd "$repo" && CARGO_TARGET_DIR=$target_dir RUSTFLAGS='-C target-feature=+crt-static' \
		cargo build --release --target x86_64-unknown-linux-gnu --bin pghot-workload >&2) || die "cargo build failed"
	workload_bin=$target_dir/x86_64-unknown-linux-gnu/release/pghot-workload
fi
[ -x "$workload_bin" ] || die "$workload_bin: not an executable"
plugin_so=
guest_bin=
if [ -n "$app" ]; then
	[ "$period" -ge 16 ] || die "--period must be at least 16"
	log "building the ibs-emu QEMU plugin (tests/vm/ibs-emu/build.sh)"
	plugin_so=$("$here/ibs-emu/build.sh") || die "tests/vm/ibs-emu/build.sh failed"
	log "building a static pgibs-guest (the samples relay and the ground truth)"
	(cd "$here/ibs-emu/guest" && CARGO_TARGET_DIR=$target_dir RUSTFLAGS='-C target-feature=+crt-static' \
		cargo build --locked --release --target x86_64-unknown-linux-gnu >&2) || die "cargo build of pgibs-guest failed"
	guest_bin=$target_dir/x86_64-unknown-linux-gnu/release/pgibs-guest
fi
container_ctx=
if [[ " ${scenarios[*]} " == *" container "* ]]; then
	log "staging the container image's context (packaging/container/build-prebuilt.sh)"
	container_ctx=$(mktemp -d)
	CARGO_TARGET_DIR=$target_dir "$repo/packaging/container/build-prebuilt.sh" "$container_ctx/pghotd" > /dev/null ||
		die "packaging/container/build-prebuilt.sh failed"
	cp "$repo/packaging/container/seccomp.json" "$repo"/packaging/kubernetes/*.yaml "$container_ctx/"
fi
t_built=$(date +%s)

pghot_vm_workdir pghot-rig-debian
work=$PGHOT_VM_WORK
over=$work/overlay
mkdir -p -m 0755 "$over"/opt/pghot-rig "$over"/etc/systemd/system/multi-user.target.wants
cp "$deb" "$over/opt/pghot-rig/pghotd.deb"
install -m 0755 "$workload_bin" "$over/opt/pghot-rig/pghot-workload"
install -m 0755 "$here/debian-service.sh" "$over/opt/pghot-rig/service.sh"
[ -z "$exec_file" ] || install -m 0755 "$exec_file" "$over/opt/pghot-rig/exec.sh"
install -m 0755 "$here/debian-app.sh" "$over/opt/pghot-rig/app.sh"
install -m 0755 "$here/debian-container.sh" "$over/opt/pghot-rig/container.sh"
install -m 0644 "$here/guest-lib.sh" "$over/opt/pghot-rig/guest-lib.sh"
if [ -n "$container_ctx" ]; then
	cp -r "$container_ctx" "$over/opt/pghot-rig/container"
	chmod -R a+rX "$over/opt/pghot-rig/container"
	rm -rf "$container_ctx"
fi
[ -z "$guest_bin" ] || install -m 0755 "$guest_bin" "$over/opt/pghot-rig/pgibs-guest"
if [ "$profile" -eq 1 ]; then
	# perf report --symfs looks binaries up under this root by their path in the guest; the
	# .deb's pghotd is stripped, the one it was packed from is not (same build id).
	mkdir -p "$over/opt/pghot-rig/symfs/usr/bin" "$over/opt/pghot-rig/symfs/opt/pghot-rig"
	cp "$target_dir/release/pghotd" "$over/opt/pghot-rig/symfs/usr/bin/pghotd"
	[ -z "$guest_bin" ] || cp "$guest_bin" "$over/opt/pghot-rig/symfs/opt/pghot-rig/pgibs-guest"
fi
install -m 0755 "$here/mc-bench.pl" "$over/opt/pghot-rig/mc-bench.pl"
install -m 0644 "$here/guest-damon.sh" "$over/opt/pghot-rig/guest-damon.sh"
# The guest's script writes its lines to the serial console, then powers the guest off.
cat > "$over/etc/systemd/system/pghot-rig.service" <<'EOF'
[Unit]
Description=pghotd rig checks (tests/vm/debian-rig.sh)
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/opt/pghot-rig/run
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
EOF
ln -s ../pghot-rig.service "$over/etc/systemd/system/multi-user.target.wants/pghot-rig.service"
cat > "$over/opt/pghot-rig/run" <<'EOF'
#!/bin/sh
scenario=$(sed -n 's/.*pghot\.scenario=\([^ ]*\).*/\1/p' /proc/cmdline)
echo "PGHOT-RIG-BEGIN scenario=$scenario"
case $scenario in
service) /opt/pghot-rig/service.sh ;;
container) /opt/pghot-rig/container.sh ;;
exec) /opt/pghot-rig/exec.sh 2>&1 | sed 's/^/rig: exec: /' ;;
*) /opt/pghot-rig/app.sh "$scenario" ;;
esac
echo PGHOT-RIG-END
systemctl --no-block poweroff
EOF
chmod 0755 "$over/opt/pghot-rig/run"
{
	echo "# written by tests/vm/debian-rig.sh"
	echo "RIG_DURATION=$duration"
	echo "RIG_SIZE_MB=128"
	echo "RIG_HOT_MB=16"
	echo "RIG_DAMON_WATCH_S=$duration"
	echo "RIG_APP=$app"
	printf 'RIG_APP_LOAD=%q\n' "$app_load"
	printf 'RIG_APP_RUN=%q\n' "$app_run"
	echo "RIG_SLOW_NS=$slow_ns"
	echo "RIG_FAST_NS=$fast_ns"
	echo "RIG_CACHE_KB=$cache_kb"
	echo "RIG_CACHE_WAYS=$cache_ways"
	echo "RIG_PERIOD=$period"
	echo "RIG_FAST_FREE_MB=$fast_free_mb"
	echo "RIG_PROFILE=$profile"
	echo "RIG_PROFILE_HZ=$profile_hz"
	echo "RIG_PGHOTD_POLICY=$pghotd_policy"
	echo "RIG_RELAY_POLICY=$relay_policy"
	echo "RIG_PAUSE_ALTERNATE=$pause_alternate"
	printf 'RIG_PGHOTD_SET=%q\n' "$(printf '%s\n' "${pghotd_set[@]}")"
	# redis: 256 Ki SETs of 1 KiB values over 256 Ki key numbers in random order (about 166 Ki
	# distinct keys, ~180 MB of heap), then GETs over the first 16 Ki key numbers.
	# memcached: all 256 Ki keys of 1 KiB in random order (~300 MB of slabs), then multi-gets
	# over the first 16 Ki.
	echo "RIG_KEYS=262144"
	echo "RIG_VALUE_B=1024"
	echo "RIG_HOT_KEYS=$hot_keys"
	echo "RIG_PIPELINE=$pipeline"
	echo "RIG_ROUNDS=$rounds"
	echo "RIG_ROUND_OPS=$round_ops"
	echo "RIG_NODE=2"
	echo "RIG_TARGET_NID=0"
	echo "RIG_DAMON_QUOTA_MB=128"
	echo "RIG_DAMON_RESET_MS=1000"
	echo "RIG_DAMON_MAX_REGIONS=1000"
} > "$over/etc/pghot-rig.conf"
pghot_vm_pack "$over" "$work/overlay.cpio.gz"
# Two gzip'ed cpio archives one after the other: the kernel unpacks both into its rootfs.
cat "$PGHOT_VM_DEBIAN_IMAGE" "$work/overlay.cpio.gz" > "$work/initrd"
[ -z "$keep_dir" ] || mkdir -p "$keep_dir"

# --- boot ---------------------------------------------------------------------------------
# The host's CPU ticks from /proc/stat's "cpu" line (proc(5)): "busy steal total". The wall
# clock of a TCG guest follows the host's: a scenario whose host was busy with something else,
# or whose hypervisor gave its vCPUs to another machine (steal), runs slower for it, so each
# RESULT carries the host's busy and steal shares over the scenario's boot.
host_ticks() {
	awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}
# host_shares "BEFORE" "AFTER": {"host_busy_pct":B,"host_steal_pct":S}, both of all host CPUs.
host_shares() {
	local b0 s0 t0 b1 s1 t1
	read -r b0 s0 t0 <<< "$1"
	read -r b1 s1 t1 <<< "$2"
	awk -v b="$((b1 - b0))" -v s="$((s1 - s0))" -v t="$((t1 - t0))" 'BEGIN {
		if (t <= 0) t = 1
		printf "{\"host_busy_pct\":%.1f,\"host_steal_pct\":%.1f}", 100 * b / t, 100 * s / t }'
}
# host_probe_ms: one fixed piece of single-threaded work on the host (awk summing 10 M terms),
# timed three times while no guest runs, the median in ms. /proc/stat's steal shows only what
# the hypervisor reports; a host slowed by what it does not (a busy neighbour on the same
# physical core, a lower clock) shows here, before the boot and after the guest is gone, so that
# a phase that ran slow throughout can be told from one whose promoter cost it.
host_probe_ms() {
	local t0 t1 ms=()
	for _ in 1 2 3; do
		t0=$(date +%s%N)
		awk 'BEGIN { for (i = 0; i < 10000000; i++) s += i % 7; if (s < 0) print s }'
		t1=$(date +%s%N)
		ms+=("$(((t1 - t0) / 1000000))")
	done
	printf '%s\n' "${ms[@]}" | sort -n | sed -n 2p
}
# Each pass runs every scenario once, the list rotated by one a pass: over N passes each
# scenario runs early and late alike, so a host that slows down or speeds up through the run
# does not favour one of them. A run's name: the scenario, with its pass under --repeat.
runs=()
for ((pass = 1; pass <= repeat; pass++)); do
	for ((i = 0; i < ${#scenarios[@]}; i++)); do
		runs+=("${scenarios[(i + pass - 1) % ${#scenarios[@]}]} $pass")
	done
done
status=0
results=()
for run in "${runs[@]}"; do
	read -r s pass <<< "$run"
	name=$s
	[ "$repeat" = 1 ] || name=$s.p$pass
	append="console=ttyS0 rdinit=/lib/systemd/systemd panic=-1 quiet systemd.show_status=0 pghot.scenario=$s"
	[ "$s" = numab2 ] || append="$append numa_balancing=disable"
	# Every program scenario runs on the same machine: the plugin (its cost and the slow node's
	# delay) is loaded whoever promotes.
	PGHOT_VM_EXTRA=()
	if [ -n "$plugin_so" ]; then
		mkdir -p "$work/sock-$name"
		# Disarmed until the guest is up (app.sh sends ARM, then SLOW_NS): with every access
		# looked up and the slow node's spun on, the kernel took minutes to unpack its 350 MB
		# root file system (soft lockups), and systemd came up 170 s after the BIOS.
		# With a cache: by_task, whose misses, and who evicted the program's lines (RESULT's
		# `misses`); snoop, a miss that another vCPU's cache holds is served from there
		# (ibs-emu/README.md, "The modelled cache"). Both need a cache.
		cache_args=()
		[ "$cache_kb" = 0 ] || cache_args=(by_task=1 snoop="$snoop")
		pghot_vm_ibs_emu_args "$plugin_so" "$work/sock-$name" slow_ns=0 armed=0 period="$period" cache_kb="$cache_kb" cache_ways="$cache_ways" "${cache_args[@]}"
	fi
	log "$name: booting Debian ($(basename "$(dirname "$PGHOT_VM_DEBIAN_IMAGE")"), timeout ${timeout_s} s$([ "$repeat" = 1 ] || echo ", pass $pass of $repeat"))"
	console=$work/$name.console
	probe0=$(host_probe_ms)
	for attempt in 1 2; do
		t0=$(date +%s)
		ticks0=$(host_ticks)
		rc=0
		pghot_vm_boot "$work/initrd" "$append" "$work/$name.raw" "$timeout_s" "$verbose" || rc=$?
		wall=$(($(date +%s) - t0))
		host=$(host_shares "$ticks0" "$(host_ticks)")
		pghot_vm_clean_console "$work/$name.raw" "$console"
		grep -aq '^PGHOT-RIG-BEGIN' "$console" && break
		# The TCG code-patching flake (README: Things to know) or any boot that never reached
		# the checks: once more.
		log "$name: the guest never reached the checks (qemu exit $rc, ${wall} s); console tail:"
		tail -n 20 "$console" | sed 's/^/    /' >&2
	done
	probe1=$(host_probe_ms)
	log "$name: host probe ${probe0} ms before the boot, ${probe1} ms after"
	[ -z "$keep_dir" ] || cp "$console" "$keep_dir/$name.console"
	grep -a '^rig: \|^PGHOT-RIG-ERROR' "$console" | sed "s/^/$name: /" >&2 || true
	[ "$s" != exec ] || continue
	case $s in
	service | container) ;;
	*)
		result=$(grep -a '^RESULT {' "$console" | tail -n 1 | cut -d' ' -f2-)
		if [ -z "$result" ] || ! jq -e . <<< "$result" > /dev/null 2>&1; then
			log "$name: FAILED: no RESULT line (qemu exit $rc, ${wall} s); console tail:"
			tail -n 30 "$console" | sed 's/^/    /' >&2
			status=1
			continue
		fi
		grep -a '^PGHOT-APP-ROUND ' "$console" | sed "s/^PGHOT-APP-ROUND /  $name: /" >&2
		result=$(jq -c --argjson wall "$wall" --argjson host "$host" --argjson pass "$pass" --argjson vcpus "$vcpus" \
			--argjson p0 "$probe0" --argjson p1 "$probe1" \
			'. + {pass: $pass, vcpus: $vcpus, wall_s: $wall, host_probe_ms_before: $p0, host_probe_ms_after: $p1} + $host' <<< "$result")
		results+=("$result")
		echo "RESULT $result"
		[ "$(jq -r '.errors' <<< "$result")" = 0 ] || status=1
		continue
		;;
	esac
	checks=$(grep -a '^SERVICE-CHECK ' "$console" | awk '{ printf "%s%s\n", $2, ($3 == "true" ? "=true" : "=false") }')
	figures=$(grep -a '^SERVICE-FIGURE ' "$console" | awk '{ print $2 "=" $3 }')
	json=$(printf '%s\n' "$checks" | jq -Rn '[inputs | select(length > 0) | split("=") | {(.[0]): (.[1] == "true")}] | add // {}')
	figs=$(printf '%s\n' "$figures" | jq -Rn '[inputs | select(length > 0) | split("=") | {(.[0]): ((.[1] | tonumber?) // .[1])}] | add // {}')
	complete=false
	grep -aq '^SERVICE-END' "$console" && complete=true
	n=$(jq 'length' <<< "$json")
	min_checks=15
	[ "$s" != container ] || min_checks=4
	all=$(jq --argjson c "$complete" --argjson m "$min_checks" '$c and length >= $m and all(.[]; .)' <<< "$json")
	echo "${s^^} $(jq -cn --argjson c "$json" --argjson f "$figs" --argjson complete "$complete" --argjson wall "$wall" \
		'$c + {all_checks_ran: $complete, figures: $f, wall_s: $wall}')"
	grep -a '^SERVICE-CHECK ' "$console" | sed 's/^SERVICE-CHECK /  /' >&2
	if [ "$all" != true ]; then
		unfinished=
		[ "$complete" = true ] || unfinished="the checks did not finish: $n ran, qemu exit $rc; "
		falses=$(jq -r '[to_entries[] | select(.value | not) | .key] | join(", ")' <<< "$json")
		log "$s: FAILED: $unfinished${falses:+false: $falses}"
		[ "$complete" = true ] || tail -n 30 "$console" | sed 's/^/    /' >&2
		status=1
	fi
done
if [ ${#results[@]} -gt 0 ]; then
	printf '%s\n' "${results[@]}" | jq -rs '
		def f(d): if . == null then "-" else (. * d | round / d | tostring) end;
		(["scenario", "app", "ops/s", "p50 ms", "p99 ms", "hot fast %", "over %", "MB promoted", "promoter CPU s", "hint faults", "app mem us/op", "guest mem us/op", "fast/slow MB after", "host probe ms"] | @tsv),
		(.[] | [.scenario, .app, (.ops_per_s | f(1)), (.p50_ms | f(1000)), (.p99_ms | f(1000)),
			(.hot_fast_pct | f(10)), (.over_promotion_pct | f(10)), (.mb_promoted | f(10)),
			(.promoter_cpu_s | f(100)), (.hint_faults | tostring), (.app_modelled_mem_us_per_op | f(100)), (.modelled_mem_us_per_op | f(10)),
			"\(.app_fast_mb_after)/\(.app_slow_mb_after)", "\(.host_probe_ms_before)/\(.host_probe_ms_after)"] | @tsv)' | column -t -s $'\t' >&2
fi
# With --repeat, one SUMMARY {json} per scenario: its median over the passes, its ratio to the
# same pass's baseline, and in how many passes it served more than each other scenario of that
# pass (the issue's question: "does it make my program faster than NUMA balancing does"); with
# --pause-alternate (one pass or more), its rounds with pghotd running against those stopped.
if { [ "$repeat" -gt 1 ] || [ "$pause_alternate" = 1 ]; } && [ ${#results[@]} -gt 0 ]; then
	summaries=$(printf '%s\n' "${results[@]}" | jq -cs --args -f "$here/passes.jq" "${scenarios[@]}")
	while IFS= read -r line; do echo "SUMMARY $line"; done <<< "$summaries"
	log "over $repeat pass(es) (ops/s by pass against the same pass's baseline; ahead: passes with more ops/s; running/stopped: --pause-alternate's pairs of rounds; phases with errors left out):"
	{
		jq -rs '
			def f: if . == null then "-" else tostring end;
			(["scenario", "passes", "failed", "ops/s median", "min-max", "x baseline median", "x baseline by pass", "app mem us/op median", "hot fast % median", "running/stopped: mean (se) slower/pairs", "passes ahead of"] | @tsv),
			(.[] | [.scenario, (.passes | f), (.failed | f), (.ops_per_s_median | f), "\(.ops_per_s_min | f)-\(.ops_per_s_max | f)", (.x_baseline_median | f),
				(.x_baseline | map(f) | join(" ")), (.app_modelled_mem_us_per_op_median | f), (.hot_fast_pct_median | f),
				(.running_over_stopped | if . == null then "-" else "\(.mean) (\(.se | f)) \(.slower)/\(.pairs)" end),
				(.ahead_of | to_entries | map("\(.key) \(.value.ahead)/\(.value.passes)") | join(", "))] | @tsv)' <<< "$summaries"
	} | column -t -s $'\t' >&2
fi
log "done in $(($(date +%s) - t_start)) s (build $((t_built - t_start)) s)"
exit "$status"
