#!/bin/bash
# Boot a Debian 6.12 kernel in QEMU (TCG) with a tiered-memory NUMA topology and save a plain
# copy of the sysfs files pghotd reads, laid out relative to a sysfs root, as a test fixture.
#
#   tests/vm/capture-sysfs.sh 3node|4node DEST
#
# Topologies (1 GiB per node, -smp 2, node N's CPU is cpu N, HMAT on):
#   3node  two DRAM nodes (0, 1) and one CPU-less node 2 behind node 0
#          distances 0-1=12 0-2=50 1-2=50
#   4node  two DRAM nodes (0, 1) and two CPU-less nodes, 2 near 0 and 3 near 1
#          distances 0-1=12 0-2=50 1-3=50 0-3=60 1-2=60 2-3=70
# The HMAT latency/bandwidth entries make the CPU-less nodes slower (300 ns, 20 GB/s from their
# near initiator against 100 ns, 100 GB/s for local DRAM), so the kernel puts them in a lower
# memory tier than nodes 0-1 (tier 4).
#
# The guest's /init cats each file into /tmp/snap (sysfs cannot be archived directly), then
# prints tar | gzip | base64 between two marker lines on the serial console and powers off.
# The host decodes that into DEST, which ends up holding devices/... and CAPTURED.txt (kernel
# version, date, the QEMU command line and the guest's NUMA/tiering dmesg lines). A DEST that
# already holds a previous capture is replaced; any other non-empty DEST is refused.
#
# The kernel and busybox come from fetch-guest.sh (see there for PGHOT_VM_CACHE and
# PGHOT_VM_KERNEL); set PGHOT_VM_VMLINUZ and PGHOT_VM_BUSYBOX to skip it. PGHOT_VM_TIMEOUT
# (seconds, default 300) bounds the boot. Needs root only for fetch-guest.sh.
set -euo pipefail

PGHOT_VM_PROG=capture-sysfs
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

usage() {
	echo "usage: $0 3node|4node DEST" >&2
	exit 2
}
[ $# -eq 2 ] || usage
topology=$1
dest=$2

# --- topology (lib.sh) --------------------------------------------------------------------
pghot_vm_topology "$topology" || usage

# --- destination --------------------------------------------------------------------------
if [ -e "$dest" ]; then
	[ -d "$dest" ] || die "$dest: exists and is not a directory"
	if [ -n "$(ls -A "$dest")" ] && [ ! -f "$dest/CAPTURED.txt" ]; then
		die "$dest: not empty and holds no previous capture (CAPTURED.txt); refusing to replace it"
	fi
fi

# --- guest kernel and busybox -------------------------------------------------------------
pghot_vm_guest

pghot_vm_workdir pghot-capture
work=$PGHOT_VM_WORK

# --- initramfs ----------------------------------------------------------------------------
root=$work/initramfs
pghot_vm_initramfs_root "$root"
cat > "$root/init" <<'INIT'
#!/bin/busybox sh
. /etc/pghot-vm-mounts.sh
# Keep printk off the console so it cannot interleave with the base64 stream.
dmesg -n 1

S=/tmp/snap
# copy PATH...: cat /sys/PATH into $S/PATH, skipping files this kernel does not have.
copy() {
	for f in "$@"; do
		[ -f "/sys/$f" ] || continue
		mkdir -p "$S/${f%/*}"
		cat "/sys/$f" > "$S/$f"
	done
}

cd /sys
N=devices/system/node
copy $N/online $N/possible $N/has_cpu $N/has_memory $N/has_normal_memory
for n in $N/node[0-9]*; do
	[ -d "$n" ] || continue
	copy $n/cpulist $n/distance $n/meminfo
	# memoryM under a node is a symlink; the fixture keeps only its name.
	for m in $n/memory[0-9]*; do
		[ -e "$m" ] || continue
		mkdir -p "$S/$m"
		: > "$S/$m/.keep"
	done
done
copy devices/system/memory/block_size_bytes
for m in devices/system/memory/memory[0-9]*; do
	[ -d "$m" ] && copy $m/phys_index $m/state $m/online
done
for t in devices/virtual/memory_tiering/memory_tier[0-9]*; do
	[ -d "$t" ] && copy $t/nodelist
done
copy devices/system/cpu/online

mkdir -p /tmp/meta
uname -r > /tmp/meta/uname
dmesg | grep -i -E "demotion|tier|numa|hmat" > /tmp/meta/dmesg

echo
echo PGHOT-SNAPSHOT-BEGIN
tar cf - -C /tmp snap meta | gzip -9 | base64
echo PGHOT-SNAPSHOT-END
poweroff -f
INIT
chmod 0755 "$root/init"
pghot_vm_pack "$root" "$work/initramfs.gz"

# --- boot ---------------------------------------------------------------------------------
timeout_s=${PGHOT_VM_TIMEOUT:-300}
log "booting $topology guest ($(basename "$PGHOT_VM_VMLINUZ"))"
rc=0
pghot_vm_boot "$work/initramfs.gz" "console=ttyS0 panic=-1 quiet" "$work/console.raw" "$timeout_s" || rc=$?
pghot_vm_clean_console "$work/console.raw" "$work/console.log"
if [ "$rc" -ne 0 ] || ! grep -q '^PGHOT-SNAPSHOT-END$' "$work/console.log"; then
	tail -n 40 "$work/console.log" >&2
	[ "$rc" -eq 124 ] && die "guest did not power off within ${timeout_s}s (PGHOT_VM_TIMEOUT)"
	die "guest produced no complete snapshot (qemu exit status $rc)"
fi

# --- decode -------------------------------------------------------------------------------
mkdir "$work/out"
sed -n '/^PGHOT-SNAPSHOT-BEGIN$/,/^PGHOT-SNAPSHOT-END$/{/^PGHOT-SNAPSHOT-/d;p;}' "$work/console.log" |
	base64 -d | tar xzf - -C "$work/out" --no-same-owner --no-same-permissions
[ -f "$work/out/snap/devices/system/node/online" ] || die "snapshot has no devices/system/node/online"
find "$work/out/snap" -type d -exec chmod 0755 {} +
find "$work/out/snap" -type f -exec chmod 0644 {} +

{
	echo "# sysfs snapshot captured by tests/vm/capture-sysfs.sh $topology"
	echo
	echo "kernel: $(cat "$work/out/meta/uname")"
	echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "qemu: $(qemu-system-x86_64 --version | head -n 1)"
	echo
	echo "## qemu command line"
	echo
	echo "(the -initrd file is the temporary initramfs capture-sysfs.sh builds and deletes)"
	echo
	printf '%q ' "${PGHOT_VM_QEMU[@]}" | sed 's/ $//'
	echo
	echo
	echo '## guest: dmesg | grep -i -E "demotion|tier|numa|hmat"'
	echo
	cat "$work/out/meta/dmesg"
} > "$work/out/snap/CAPTURED.txt"

# Replace a previous capture in place (the checks above ensure DEST is empty or holds one).
rm -rf "$dest/devices" "$dest/CAPTURED.txt"
mkdir -p "$dest"
cp -R "$work/out/snap/." "$dest/"
log "wrote $dest ($(find "$dest" -type f | wc -l) files)"
