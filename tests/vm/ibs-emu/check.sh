#!/bin/bash
# Checks the pghot-ibs-emu QEMU plugin in the 3-node guest of tests/vm/lib.sh and calibrates its
# slow tier. Two guests:
#   1. no plugin: pghot-workload's ns per access, chase and uniform, buffer on node 0 and node 2;
#   2. the plugin (slow_ns=0): the same four; then slow_ns is set through the control port, a few
#      steps, until chase on node 2 takes TARGET_RATIO (2.2 = the seed's 320 ns CXL / 143 ns DRAM)
#      times chase on node 0; the four again with that slow_ns; then pgibs-guest check runs
#      hot-scattered on node 2 and compares the plugin's per-page counts and samples with the
#      workload's hot set (pagemap PFNs).
# Prints a summary table. See README.md.
#
#   tests/vm/ibs-emu/check.sh [-v] [--period N] [--keep DIR] [--cost]
# --cost: three more guests with the plugin doing only part of its per-access work (probe=0:
# return at once, 1: + qemu_plugin_get_hwaddr, 2: + qemu_plugin_hwaddr_phys_addr), and two with
# all of it behind the modelled cache the Debian rig loads (cache_kb=1024, direct-mapped, 8-way
# with by_task=1, and that with snoop=1, as debian-rig.sh runs it; no delays), for the cost table.
# Environment: CARGO_TARGET_DIR (default tests/vm/ibs-emu/target), PGHOT_VM_VMLINUZ +
# PGHOT_VM_BUSYBOX (skip fetch-guest.sh), PGIBS_WORKLOAD_BIN / PGIBS_GUEST_BIN (prebuilt static
# binaries), PGIBS_TIMEOUT (seconds per guest, default 900). Needs root (fetch-guest.sh's apt).
set -euo pipefail

PGHOT_VM_PROG=ibs-emu-check
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
# shellcheck source=../lib.sh
. "$here/../lib.sh"

verbose=0
period=4096
keep=
cost=0
while [ $# -gt 0 ]; do
	case $1 in
	-v) verbose=1 ;;
	--period) period=$2; shift ;;
	--keep) keep=$2; shift ;;
	--cost) cost=1 ;;
	*) die "usage: check.sh [-v] [--period N] [--keep DIR] [--cost]" ;;
	esac
	shift
done
[[ $period =~ ^[0-9]+$ ]] && [ "$period" -ge 16 ] || die "--period must be a number >= 16"

pghot_vm_guest
pghot_vm_topology 3node
target=${CARGO_TARGET_DIR:-$here/target}
export CARGO_TARGET_DIR=$target

log "building the plugin"
so=$("$here/build.sh")
static() { RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu "$@" >&2; }
workload_bin=${PGIBS_WORKLOAD_BIN:-}
if [ -z "$workload_bin" ]; then
	log "building static pghot-workload"
	(cd "$repo" && static -p pghot-workload) || die "cargo build of pghot-workload failed"
	workload_bin=$target/x86_64-unknown-linux-gnu/release/pghot-workload
fi
guest_bin=${PGIBS_GUEST_BIN:-}
if [ -z "$guest_bin" ]; then
	log "building static pgibs-guest"
	(cd "$here/guest" && static --locked) || die "cargo build of pgibs-guest failed"
	guest_bin=$target/x86_64-unknown-linux-gnu/release/pgibs-guest
fi
for b in "$workload_bin" "$guest_bin"; do
	file -L "$b" 2>/dev/null | grep -q 'dynamically linked' && die "$b: not static"
done

pghot_vm_workdir pgibs-check
work=$PGHOT_VM_WORK
root=$work/root
pghot_vm_initramfs_root "$root"
cp "$here/check-init.sh" "$root/init"
chmod 0755 "$root/init"
cp "$workload_bin" "$root/bin/pghot-workload"
cp "$guest_bin" "$root/bin/pgibs-guest"
cat > "$root/etc/pgibs.conf" <<EOF
PGIBS_PERIOD=$period
PGIBS_LAT_SIZE_MB=64
PGIBS_CHASE_HOT_MB=32
PGIBS_LAT_SECS=2
PGIBS_REPEATS=3
PGIBS_TARGET_RATIO=2.2
PGIBS_CAL_STEPS=3
PGIBS_TRUTH_SIZE_MB=64
PGIBS_TRUTH_HOT_MB=8
PGIBS_TRUTH_SECS=8
EOF
pghot_vm_pack "$root" "$work/init.gz"

timeout_s=${PGIBS_TIMEOUT:-900}
append="console=ttyS0 panic=-1 quiet numa_balancing=disable"
boot() { # NAME KERNEL-ARGS
	local t0=$SECONDS rc=0
	pghot_vm_boot "$work/init.gz" "$append $2" "$work/$1.raw" "$timeout_s" "$verbose" || rc=$?
	pghot_vm_clean_console "$work/$1.raw" "$work/$1.console"
	log "guest $1: exit $rc after $((SECONDS - t0)) s"
	[ -z "$keep" ] || { mkdir -p "$keep" && cp "$work/$1.console" "$keep/"; }
	if ! grep -q '^PGIBS-END' "$work/$1.console"; then
		tail -n 30 "$work/$1.console" >&2
		die "guest $1 did not finish"
	fi
}

log "guest 1: no plugin"
PGHOT_VM_EXTRA=()
boot noplugin pgibs.mode=noplugin
log "guest 2: the plugin ($so, period=$period)"
mkdir -p "$work/sock"
PGHOT_VM_EXTRA=()
pghot_vm_ibs_emu_args "$so" "$work/sock" "period=$period"
boot plugin pgibs.mode=plugin
consoles=("$work/noplugin.console" "$work/plugin.console")
if [ "$cost" = 1 ]; then
	for probe in 0 1 2; do
		log "guest: the plugin with probe=$probe"
		PGHOT_VM_EXTRA=()
		pghot_vm_ibs_emu_args "$so" "$work/sock" "period=$period" "probe=$probe"
		boot "probe$probe" "pgibs.mode=cost pgibs.label=probe$probe"
		consoles+=("$work/probe$probe.console")
	done
	# The modelled cache as the Debian rig runs it (debian-rig.sh: cache_kb 1024, cache_ways 8,
	# by_task=1, snoop=1), without snoop (the rig's model before d4e2798) and direct-mapped
	# (cache_ways 1, before 4a4cfe7). slow_ns and fast_ns stay 0: this is the bookkeeping's
	# cost, not the dilation's. The workload misses the cache on most accesses, so each of
	# them looks the other vCPU's set up with snoop: its cost at the most.
	for cache in "cache1 cache_kb=1024 cache_ways=1" "cache8 cache_kb=1024 cache_ways=8 by_task=1" "cache8s cache_kb=1024 cache_ways=8 by_task=1 snoop=1"; do
		# shellcheck disable=SC2086 # a label and plugin arguments, none with spaces
		set -- $cache
		label=$1
		shift
		log "guest: the plugin with $*"
		PGHOT_VM_EXTRA=()
		pghot_vm_ibs_emu_args "$so" "$work/sock" "period=$period" "$@"
		boot "$label" "pgibs.mode=cost pgibs.label=$label"
		consoles+=("$work/$label.console")
	done
fi

# -o: the guest's first line can follow the BIOS's "Booting from ROM.." on the same line.
cat "${consoles[@]}" | grep -aoE '(PGIBS-|pgibs: |pghot-ibs-emu: ).*' > "$work/lines"
if grep -q '^PGIBS-ERROR' "$work/lines"; then
	grep '^PGIBS-ERROR' "$work/lines" >&2
	status=1
else
	status=0
fi

# --- summary ------------------------------------------------------------------------------
lat() { # MODE PATTERN NODE
	sed -n "s/^PGIBS-LAT mode=$1 pattern=$2 node=$3 slow_ns=[0-9]* ns=\([0-9.-]*\)$/\1/p" "$work/lines" | tail -n 1
}
field() { # LINE-PREFIX KEY
	grep "^$1 " "$work/lines" | tail -n 1 | tr ' ' '\n' | sed -n "s/^$2=//p"
}
cal=$(field PGIBS-CALIBRATED slow_ns)
echo
echo "pghot-ibs-emu check, $(date -u +%Y-%m-%d), period=$period, calibrated slow_ns=$cal"
echo
printf '%-10s %-5s %12s %12s %14s\n' pattern node "no plugin" "plugin" "plugin+slow"
printf '%-10s %-5s %12s %12s %14s\n' "" "" "ns/access" "slow_ns=0" "slow_ns=$cal"
for p in chase uniform; do
	for n in 0 2; do
		printf '%-10s %-5s %12s %12s %14s\n' "$p" "$n" "$(lat noplugin $p $n)" "$(lat plugin $p $n)" "$(lat calibrated $p $n)"
	done
done
for m in noplugin plugin calibrated; do
	for p in chase uniform; do
		a=$(lat $m $p 0) b=$(lat $m $p 2)
		printf 'node2/node0 %-10s %-8s %s\n' "$m" "$p" "$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "-" }')"
	done
done
echo
grep '^PGIBS-CAL ' "$work/lines" || true
echo
# One line per pattern, node and slow_ns (the first of the repeats).
grep '^PGIBS-OPS ' "$work/lines" | awk '!seen[$2 $3 $4]++' || true
if [ "$cost" = 1 ]; then
	# The plugin's cost per callback: the time it adds to a workload access over the callbacks
	# (user-mode memory operations) that access makes (PGIBS-OPS of the slow_ns=0 runs).
	echo
	printf '%-28s %12s %12s\n' "per-access work (node 0)" "chase ns" "uniform ns"
	row() { printf '%-28s %12s %12s\n' "$1" "$(lat "$2" chase 0)" "$(lat "$2" uniform 0)"; }
	row "no plugin" noplugin
	row "probe=0 empty callback" probe0
	row "probe=1 + get_hwaddr" probe1
	row "probe=2 + hwaddr_phys_addr" probe2
	row "probe=3 everything" plugin
	row "1 MiB cache, direct-mapped" cache1
	row "1 MiB cache, 8-way, by_task" cache8
	row "the same with snoop" cache8s
	for p in chase uniform; do
		ops=$(grep "^PGIBS-OPS pattern=$p node=0 slow_ns=0 " "$work/lines" | head -n 1 | tr ' ' '\n' | sed -n 's/^user_ops_per_access=//p')
		for m in probe0 probe1 probe2 plugin cache1 cache8 cache8s; do
			printf 'ns per callback %-8s %-8s %s\n' "$p" "$m" "$(awk -v a="$(lat noplugin "$p" 0)" -v b="$(lat "$m" "$p" 0)" -v o="$ops" 'BEGIN { if (o > 0) printf "%.1f (%.2f callbacks per access)", (b - a) / o, o; else print "-" }')"
		done
	done
fi
echo
grep -E '^PGIBS-(TRUTH|TRUTH-OTHERS|SAMPLES|ARRIVAL|COUNTS) ' "$work/lines" || { echo "no check lines" >&2; status=1; }
grep -E '^(pgibs:|pghot-ibs-emu:)' "$work/lines" || true
exit "$status"
