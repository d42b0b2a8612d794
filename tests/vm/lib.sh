# shellcheck shell=bash
# Shared pieces of the QEMU scripts in tests/vm/ (sourced, not run): the tiered NUMA topologies,
# the guest kernel and busybox, the initramfs, the boot and the console clean-up.
#
# A script sets PGHOT_VM_PROG (its name for messages) and then sources this file:
#   here=$(cd "$(dirname "$0")" && pwd); . "$here/lib.sh"
# Nothing here runs at source time except defining functions and empty globals.

PGHOT_VM_PROG=${PGHOT_VM_PROG:-pghot-vm}
PGHOT_VM_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PGHOT_VM_TOPO=()      # set by pghot_vm_topology
# The guest CPU. QEMU's TCG runs `rep movsb`/`rep stosb` one byte per loop, so a kernel that
# sees ERMS or FSRM (as `-cpu max` offers) copies and clears pages with the slowest code it
# could pick here, the fastest on real hardware: a 4 KiB page migration took about 40 us, 16
# with both turned off (the kernel then copies with its unrolled loop). Off, migration costs
# the guest's processes less, relative to their own code, as on real hardware; it speeds up
# every promoter's moves (NUMAB2's in its task) and the guest's page clearing alike.
PGHOT_VM_CPU=${PGHOT_VM_CPU:-max,-erms,-fsrm}
PGHOT_VM_QEMU=()      # the last command pghot_vm_boot ran
PGHOT_VM_EXTRA=()     # more QEMU arguments for pghot_vm_boot (e.g. pghot_vm_ibs_emu_args)
PGHOT_VM_MEMDEV_MB=   # set by pghot_vm_topology: the node backends' MiB, ':'-separated
PGHOT_VM_QEMU_PID=    # set while a guest runs; pghot_vm_kill_guest ends it

log() { printf '%s: %s\n' "$PGHOT_VM_PROG" "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# pghot_vm_topology 3node|4node [VCPUS]: fill PGHOT_VM_TOPO with the QEMU arguments of the
# topology. 1 GiB per node, -smp VCPUS (default 2; cpu I on node I % 2, so node N's first CPU is
# cpu N), HMAT on:
#   3node  two DRAM nodes (0, 1) and one CPU-less node 2 behind node 0
#          distances 0-1=12 0-2=50 1-2=50
#   4node  two DRAM nodes (0, 1) and two CPU-less nodes, 2 near 0 and 3 near 1
#          distances 0-1=12 0-2=50 1-3=50 0-3=60 1-2=60 2-3=70
# The HMAT latency/bandwidth entries make the CPU-less nodes slower (300 ns, 20 GB/s from their
# near initiator against 100 ns, 100 GB/s for local DRAM), so the kernel puts them in a lower
# memory tier (memory_tier67) than nodes 0-1 (memory_tier4). Returns 1 for an unknown name.
pghot_vm_topology() {
	PGHOT_VM_TOPO=()
	local vcpus=${2:-2} cpus0= cpus1= i
	[[ $vcpus =~ ^[2-8]$ ]] || return 1
	for ((i = 0; i < vcpus; i++)); do
		if ((i % 2 == 0)); then cpus0+=" $i"; else cpus1+=" $i"; fi
	done
	case $1 in
	3node)
		PGHOT_VM_MEMDEV_MB=1024:1024:1024
		PGHOT_VM_TOPO+=(-m 3G -smp "$vcpus" -machine hmat=on)
		_pghot_vm_mem_node 0 "$cpus0" 0
		_pghot_vm_mem_node 1 "$cpus1" 1
		_pghot_vm_mem_node 2 "" 0
		PGHOT_VM_TOPO+=(-numa "dist,src=0,dst=1,val=12" -numa "dist,src=0,dst=2,val=50" -numa "dist,src=1,dst=2,val=50")
		_pghot_vm_hmat_lb 0 0 100 100G
		_pghot_vm_hmat_lb 1 1 100 100G
		_pghot_vm_hmat_lb 0 1 140 60G
		_pghot_vm_hmat_lb 1 0 140 60G
		_pghot_vm_hmat_lb 0 2 300 20G
		;;
	4node)
		PGHOT_VM_MEMDEV_MB=1024:1024:1024:1024
		PGHOT_VM_TOPO+=(-m 4G -smp "$vcpus" -machine hmat=on)
		_pghot_vm_mem_node 0 "$cpus0" 0
		_pghot_vm_mem_node 1 "$cpus1" 1
		_pghot_vm_mem_node 2 "" 0
		_pghot_vm_mem_node 3 "" 1
		PGHOT_VM_TOPO+=(-numa "dist,src=0,dst=1,val=12" -numa "dist,src=0,dst=2,val=50" -numa "dist,src=0,dst=3,val=60")
		PGHOT_VM_TOPO+=(-numa "dist,src=1,dst=2,val=60" -numa "dist,src=1,dst=3,val=50" -numa "dist,src=2,dst=3,val=70")
		_pghot_vm_hmat_lb 0 0 100 100G
		_pghot_vm_hmat_lb 1 1 100 100G
		_pghot_vm_hmat_lb 0 1 140 60G
		_pghot_vm_hmat_lb 1 0 140 60G
		_pghot_vm_hmat_lb 0 2 300 20G
		_pghot_vm_hmat_lb 1 3 300 20G
		_pghot_vm_hmat_lb 1 2 360 15G
		_pghot_vm_hmat_lb 0 3 360 15G
		;;
	*)
		return 1
		;;
	esac
}

# _pghot_vm_hmat_lb I T LATENCY_NS BANDWIDTH: latency and bandwidth from initiator I to target T.
_pghot_vm_hmat_lb() {
	PGHOT_VM_TOPO+=(-numa "hmat-lb,initiator=$1,target=$2,hierarchy=memory,data-type=access-latency,latency=$3")
	PGHOT_VM_TOPO+=(-numa "hmat-lb,initiator=$1,target=$2,hierarchy=memory,data-type=access-bandwidth,bandwidth=$4")
}

# _pghot_vm_mem_node N 'CPU...' INITIATOR: a 1 GiB node backed by its own RAM object, holding
# the CPUs listed (none: ""); QEMU takes one `cpus=` per CPU (docs/system/invocation: -numa node).
_pghot_vm_mem_node() {
	local n=$1 initiator=$3 cpus= c
	for c in $2; do cpus+="cpus=$c,"; done
	PGHOT_VM_TOPO+=(-object "memory-backend-ram,id=m$n,size=1G")
	PGHOT_VM_TOPO+=(-numa "node,memdev=m$n,${cpus}nodeid=$n,initiator=$initiator")
}

# pghot_vm_guest: make sure PGHOT_VM_VMLINUZ and PGHOT_VM_BUSYBOX name a kernel and a busybox
# (running fetch-guest.sh, which also installs qemu and cpio, unless both are already set), and
# that qemu-system-x86_64 and cpio are installed.
pghot_vm_guest() {
	if [ -z "${PGHOT_VM_VMLINUZ:-}" ] || [ -z "${PGHOT_VM_BUSYBOX:-}" ]; then
		local out
		out=$("$PGHOT_VM_HERE/fetch-guest.sh") || die "tests/vm/fetch-guest.sh failed"
		eval "$out"
	fi
	[ -r "$PGHOT_VM_VMLINUZ" ] || die "$PGHOT_VM_VMLINUZ: kernel image not readable"
	[ -x "$PGHOT_VM_BUSYBOX" ] || die "$PGHOT_VM_BUSYBOX: busybox not executable"
	command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found; run tests/vm/fetch-guest.sh as root"
	command -v cpio >/dev/null || die "cpio not found; run tests/vm/fetch-guest.sh as root"
}

# pghot_vm_workdir PREFIX: make a temporary work directory (in PGHOT_VM_WORK) that an EXIT trap
# removes, together with any guest still running.
pghot_vm_workdir() {
	PGHOT_VM_WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	trap pghot_vm_cleanup EXIT
	trap 'exit 130' INT TERM
}

# shellcheck disable=SC2317 # run by the EXIT trap
pghot_vm_cleanup() {
	pghot_vm_kill_guest
	rm -rf "$PGHOT_VM_WORK"
}

# pghot_vm_initramfs_root DIR: create DIR as an initramfs tree holding busybox, the empty mount
# points and /etc/pghot-vm-mounts.sh (sourced by every /init: busybox applets, devtmpfs first so
# redirections work, then proc, sysfs, tmpfs, debugfs); the caller adds /init and the rest.
pghot_vm_initramfs_root() {
	local root=$1
	mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc}
	cp "$PGHOT_VM_BUSYBOX" "$root/bin/busybox"
	cat > "$root/etc/pghot-vm-mounts.sh" <<'MOUNTS'
/bin/busybox --install -s
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
MOUNTS
}

# pghot_vm_pack DIR OUT: pack the initramfs tree DIR into the gzip'ed newc cpio OUT (files owned
# by root, in a stable order).
pghot_vm_pack() {
	(cd "$1" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -1) > "$2"
}

# pghot_vm_boot INITRD APPEND CONSOLE TIMEOUT_S [TEE]: boot the topology in PGHOT_VM_TOPO under
# TCG with kernel command line APPEND, serial console to the file CONSOLE (raw); the arguments
# in PGHOT_VM_EXTRA (empty unless a caller filled it) go last. TEE=1 also
# streams the console to stderr while the guest runs. Returns QEMU's exit status (124 when
# TIMEOUT_S passed; the guest is then killed). The command line is left in PGHOT_VM_QEMU.
pghot_vm_boot() {
	local initrd=$1 append=$2 console=$3 timeout_s=$4 tee=${5:-0} rc=0 tail_pid=
	PGHOT_VM_QEMU=(qemu-system-x86_64 -accel tcg -cpu "$PGHOT_VM_CPU" "${PGHOT_VM_TOPO[@]}"
		-kernel "$PGHOT_VM_VMLINUZ" -initrd "$initrd"
		-append "$append"
		-nographic -nic none -no-reboot "${PGHOT_VM_EXTRA[@]}")
	timeout --kill-after=10 "$timeout_s" "${PGHOT_VM_QEMU[@]}" < /dev/null > "$console" 2>&1 &
	PGHOT_VM_QEMU_PID=$!
	if [ "$tee" = 1 ]; then
		tail -n +1 -f --pid="$PGHOT_VM_QEMU_PID" "$console" | tr -d '\r' >&2 &
		tail_pid=$!
	fi
	wait "$PGHOT_VM_QEMU_PID" || rc=$?
	PGHOT_VM_QEMU_PID=
	if [ -n "$tail_pid" ]; then
		wait "$tail_pid" 2>/dev/null || true
	fi
	return "$rc"
}

# pghot_vm_ibs_emu_args SO SOCKDIR [KEY=VALUE...]: append to PGHOT_VM_EXTRA the QEMU arguments
# that load the pghot-ibs-emu TCG plugin SO (tests/vm/ibs-emu/build.sh prints its path) and give
# the guest its two virtio-serial ports: pghot.samples (the sample records) and pghot.ctl (the
# control protocol), backed by the unix sockets SOCKDIR/samples.sock and SOCKDIR/ctl.sock that
# QEMU serves and the plugin connects to. KEY=VALUE are more plugin arguments (period=,
# slow_ns=, ...; see tests/vm/ibs-emu/README.md). Call `pghot_vm_topology 3node` first: the slow
# range is node 2's 0x80000000-0xc0000000, ram_mb and memdev_mb (QEMU 7.2's address fix) follow
# from it. 4node is refused: its RAM past 3 GiB sits above 4 GiB in the guest (the PCI hole),
# which the address fix does not model.
pghot_vm_ibs_emu_args() {
	local so=$1 dir=$2 ram_mb=0 mb
	shift 2
	[ "$PGHOT_VM_MEMDEV_MB" = 1024:1024:1024 ] || die "pghot_vm_ibs_emu_args: call pghot_vm_topology 3node first"
	for mb in ${PGHOT_VM_MEMDEV_MB//:/ }; do ram_mb=$((ram_mb + mb)); done
	local args="file=$so,samples=$dir/samples.sock,ctl=$dir/ctl.sock,slow_lo=0x80000000,slow_hi=0xc0000000"
	args+=",ram_mb=$ram_mb,memdev_mb=$PGHOT_VM_MEMDEV_MB"
	local kv
	for kv in "$@"; do args+=",$kv"; done
	PGHOT_VM_EXTRA+=(-plugin "$args"
		-chardev "socket,id=pgibs,path=$dir/samples.sock,server=on,wait=off"
		-chardev "socket,id=pgctl,path=$dir/ctl.sock,server=on,wait=off"
		-device virtio-serial-pci
		-device virtserialport,chardev=pgibs,name=pghot.samples
		-device virtserialport,chardev=pgctl,name=pghot.ctl)
}

# pghot_vm_kill_guest: end a guest pghot_vm_boot started, if one still runs (for EXIT traps).
pghot_vm_kill_guest() {
	if [ -n "$PGHOT_VM_QEMU_PID" ] && kill -0 "$PGHOT_VM_QEMU_PID" 2>/dev/null; then
		kill "$PGHOT_VM_QEMU_PID" 2>/dev/null || true
		wait "$PGHOT_VM_QEMU_PID" 2>/dev/null || true
	fi
	PGHOT_VM_QEMU_PID=
}

# pghot_vm_clean_console RAW OUT: the serial console carries \r and escape sequences from the
# BIOS; drop them so lines can be matched.
pghot_vm_clean_console() {
	tr -d '\r' < "$1" | sed 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1bc//g' > "$2"
}
