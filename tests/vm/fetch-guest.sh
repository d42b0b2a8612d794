#!/bin/sh
# Fetch what the QEMU test rig needs: qemu-system-x86 and cpio (installed through apt if
# missing), the newest Debian linux-image-6.12.*+deb12-amd64 kernel and busybox-static.
#
# The kernel and busybox are unpacked with `apt-get download` + `dpkg -x` into a cache
# directory (default /var/cache/pghot-vm, override with PGHOT_VM_CACHE); only the parts the
# rig uses are kept (vmlinuz + config, the static busybox binary). Running it again is cheap:
# anything already in the cache is reused, and a newer 6.12 build is fetched only when apt
# offers one.
#
# Set PGHOT_VM_KERNEL to a package name (e.g. linux-image-6.12.117+deb12-amd64) to pin a
# build instead of taking the newest one.
#
# Output on stdout, one `NAME=path` per line, so callers can `eval "$(fetch-guest.sh)"`:
#   PGHOT_VM_VMLINUZ=...   PGHOT_VM_KCONFIG=...   PGHOT_VM_BUSYBOX=...
# Progress goes to stderr. Needs root on a Debian bookworm host.
set -eu

cache=${PGHOT_VM_CACHE:-/var/cache/pghot-vm}
kernel_re='^linux-image-6\.12\.[0-9]+\+deb12-amd64$'

log() { printf 'fetch-guest: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get install, writes to $cache)"

apt_updated=0
apt_update() {
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update"
		apt-get update -qq >&2
		apt_updated=1
	fi
}

# 1. Host tools.
missing=
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing="$missing qemu-system-x86"
command -v cpio >/dev/null 2>&1 || missing="$missing cpio"
if [ -n "$missing" ]; then
	apt_update
	log "apt-get install$missing"
	extra=
	# A host with a newer qemu-utils (e.g. from backports, as on this project's build machines)
	# conflicts with bookworm's qemu-system: install bookworm's matching qemu-utils alongside (a
	# downgrade that keeps qemu-img) instead of letting apt remove it.
	installed_utils=$(dpkg-query -W -f='${Status} ${Version}' qemu-utils 2>/dev/null |
		awk '$3 == "installed" { print $4 }')
	candidate=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ { print $2 }')
	if [ -n "$installed_utils" ] && [ -n "$candidate" ] && [ "$installed_utils" != "$candidate" ] &&
		case "$missing" in *qemu-system-x86*) true ;; *) false ;; esac; then
		log "qemu-utils $installed_utils does not match qemu-system-x86 $candidate: installing qemu-utils=$candidate with it"
		extra="qemu-utils=$candidate --allow-downgrades"
	fi
	# Nothing else may be removed to make room (PGHOT_VM_ALLOW_REMOVE=1 lifts that, for
	# throwaway CI machines).
	no_remove=--no-remove
	[ "${PGHOT_VM_ALLOW_REMOVE:-0}" = 1 ] && no_remove=
	# shellcheck disable=SC2086
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $no_remove $missing $extra >&2; then
		if [ -z "$extra" ] || [ -n "$no_remove" ]; then
			die "apt-get install$missing failed (see above)"
		fi
		log "retrying without pinning qemu-utils (PGHOT_VM_ALLOW_REMOVE=1: apt may replace it)"
		# shellcheck disable=SC2086
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
	fi
fi

mkdir -p "$cache"

# Download package $1 and unpack it into a fresh temporary directory, printed on stdout.
# apt-get download runs as the _apt user when it can; a world-writable work directory avoids
# the "unsandboxed download" warning.
download_unpack() {
	work=$(mktemp -d "$cache/.dl.XXXXXX")
	chmod 0777 "$work"
	(cd "$work" && apt-get download -q "$1" >&2) || { rm -rf "$work"; return 1; }
	mkdir "$work/root"
	dpkg -x "$work"/*.deb "$work/root"
	printf '%s\n' "$work"
}

# 2. Kernel.
kernel_pkg=${PGHOT_VM_KERNEL:-}
if [ -z "$kernel_pkg" ]; then
	list_kernels() { apt-cache search --names-only "$kernel_re" 2>/dev/null | awk '{print $1}'; }
	kernels=$(list_kernels)
	if [ -z "$kernels" ]; then
		apt_update
		kernels=$(list_kernels)
	fi
	kernel_pkg=$(printf '%s\n' "$kernels" | sed '/^$/d' | sort -V | tail -n 1)
	if [ -z "$kernel_pkg" ]; then
		# No apt metadata (offline?): fall back to the newest kernel already cached.
		kernel_pkg=$(find "$cache" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | grep -E "$kernel_re" | sort -V | tail -n 1 || true)
		[ -n "$kernel_pkg" ] || die "apt offers no package matching $kernel_re and none is cached in $cache"
		log "apt offers no 6.12 kernel; using cached $kernel_pkg"
	fi
fi
kver=${kernel_pkg#linux-image-}
kdir=$cache/$kernel_pkg
if [ ! -s "$kdir/vmlinuz-$kver" ]; then
	log "downloading $kernel_pkg"
	work=$(download_unpack "$kernel_pkg") || die "apt-get download $kernel_pkg failed"
	[ -s "$work/root/boot/vmlinuz-$kver" ] || { rm -rf "$work"; die "$kernel_pkg has no boot/vmlinuz-$kver"; }
	rm -rf "$kdir.tmp"
	mkdir -p "$kdir.tmp"
	cp "$work/root/boot/vmlinuz-$kver" "$work/root/boot/config-$kver" "$kdir.tmp/"
	find "$work" -maxdepth 1 -name '*.deb' -printf '%f\n' > "$kdir.tmp/SOURCE"
	rm -rf "$work" "$kdir"
	mv "$kdir.tmp" "$kdir"
fi

# 3. busybox-static (any version will do; refreshed only when missing).
bdir=$cache/busybox-static
if [ ! -x "$bdir/busybox" ]; then
	if ! apt-cache policy busybox-static 2>/dev/null | grep -q 'Candidate: [0-9]'; then
		apt_update
	fi
	log "downloading busybox-static"
	work=$(download_unpack busybox-static) || die "apt-get download busybox-static failed"
	[ -x "$work/root/bin/busybox" ] || { rm -rf "$work"; die "busybox-static has no bin/busybox"; }
	rm -rf "$bdir.tmp"
	mkdir -p "$bdir.tmp"
	cp "$work/root/bin/busybox" "$bdir.tmp/busybox"
	find "$work" -maxdepth 1 -name '*.deb' -printf '%f\n' > "$bdir.tmp/SOURCE"
	rm -rf "$work" "$bdir"
	mv "$bdir.tmp" "$bdir"
fi

printf 'PGHOT_VM_VMLINUZ=%s\n' "$kdir/vmlinuz-$kver"
printf 'PGHOT_VM_KCONFIG=%s\n' "$kdir/config-$kver"
printf 'PGHOT_VM_BUSYBOX=%s\n' "$bdir/busybox"
