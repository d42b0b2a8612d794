#!/usr/bin/env bash
# Build (or reuse) the Debian 12 root file system the rig boots with systemd as init
# (`rig.sh --guest debian`), packed as a gzip'ed newc cpio that the kernel unpacks as its
# initramfs (`rdinit=/lib/systemd/systemd`): the rig's Debian 6.12 kernel has virtio-blk and
# ext4 only as modules, and a root file system in the initramfs needs neither.
#
# Usage: debian-image.sh [PACKAGE...]
#   The image always holds systemd (init), udev, passwd (useradd), procps, numactl and
#   Debian's programs the real-program scenarios run (redis-server, memcached, sysbench,
#   stress-ng); PACKAGE... adds more (rig.sh --app-pkgs).
#
# Cache: $PGHOT_VM_CACHE/debian/KEY/ (default /var/cache/pghot-vm), KEY = a hash of the suite,
# the mirrors, the package list and this script's image recipe version. In it:
#   rootfs.cpio.gz   the image
#   packages.txt     every installed package and version (dpkg-query), the record of what the
#                    image holds; rebuilding from the same mirror state gives the same list
#   include.txt      the packages asked for
# Reproducibility: mmdebstrap runs with SOURCE_DATE_EPOCH (the newest Release file's date is
# not known before the download, so it is fixed here) and the cpio is packed in a stable
# order with fixed owners; the package versions are whatever the mirror holds at build time
# and are recorded in packages.txt. An image whose packages.txt exists is reused as is.
#
# Prints `PGHOT_VM_DEBIAN_IMAGE=path` and `PGHOT_VM_DEBIAN_PACKAGES=path` on stdout (for
# `eval`); progress on stderr. Needs root on a Debian bookworm host (installs mmdebstrap and
# cpio through apt when missing).
set -euo pipefail

cache=${PGHOT_VM_CACHE:-/var/cache/pghot-vm}
suite=bookworm
mirrors=(
	"deb ${PGHOT_VM_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite main"
	"deb ${PGHOT_VM_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite-updates main"
	"deb ${PGHOT_VM_DEBIAN_SECURITY:-http://deb.debian.org/debian-security} $suite-security main"
)
# Bump when the customisation below changes, so cached images are rebuilt.
recipe=3
base=(systemd systemd-sysv udev passwd procps numactl
	redis-server redis-tools memcached sysbench stress-ng)

log() { printf 'debian-image: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}
[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap builds the tree with real owners and device nodes)"

for p in "$@"; do
	[[ $p =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || die "'$p' is not a Debian package name"
done
mapfile -t packages < <(printf '%s\n' "${base[@]}" "$@" | LC_ALL=C sort -u)

missing=
command -v mmdebstrap >/dev/null || missing="$missing mmdebstrap"
command -v cpio >/dev/null || missing="$missing cpio"
if [ -n "$missing" ]; then
	log "apt-get install$missing"
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2 ||
		{ apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2; } ||
		die "apt-get install$missing failed"
fi

key=$(printf '%s\n' "recipe=$recipe" "$suite" "${mirrors[@]}" "${packages[@]}" | sha256sum | cut -c1-16)
dir=$cache/debian/$suite-$key
if [ -s "$dir/rootfs.cpio.gz" ] && [ -s "$dir/packages.txt" ]; then
	log "reusing $dir ($(wc -l < "$dir/packages.txt") packages)"
else
	log "building a $suite root file system with ${packages[*]} (about a minute)"
	mkdir -p "$cache/debian"
	tmp=$(mktemp -d "$cache/debian/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	include=$(
		IFS=,
		echo "${packages[*]}"
	)
	# The customisation, run inside the finished tree ($1):
	# - no login prompts or first-boot questions on the serial console, which carries the
	#   rig's machine-readable lines;
	# - two unprivileged users for the service checks: pghot-user joins group pghot once the
	#   package created it, pghot-outsider never does;
	# - a hostname and an empty fstab (the root is the initramfs).
	SOURCE_DATE_EPOCH=1700000000 mmdebstrap --variant=apt --mode=root \
		--include="$include" \
		--customize-hook='chroot "$1" systemctl mask serial-getty@ttyS0.service getty@tty1.service systemd-firstboot.service' \
		--customize-hook='chroot "$1" useradd --create-home --shell /bin/sh pghot-user' \
		--customize-hook='chroot "$1" useradd --create-home --shell /bin/sh pghot-outsider' \
		--customize-hook='echo pghot-guest > "$1/etc/hostname"; : > "$1/etc/fstab"' \
		--customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version} \${Architecture}\n" > "$1/.packages.txt"' \
		"$suite" "$tmp/root" "${mirrors[@]}" >&2 ||
		die "mmdebstrap failed (see above)"
	mv "$tmp/root/.packages.txt" "$tmp/packages.txt"
	printf '%s\n' "${packages[@]}" > "$tmp/include.txt"
	# Owners are kept (redis's data directory, the users' homes); --reproducible drops the
	# inode and device numbers of the build host.
	(cd "$tmp/root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet --reproducible) |
		gzip -1 -n > "$tmp/rootfs.cpio.gz"
	rm -rf "$tmp/root"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	trap - EXIT
	log "built $dir: $(du -h "$dir/rootfs.cpio.gz" | cut -f1), $(wc -l < "$dir/packages.txt") packages"
fi
printf 'PGHOT_VM_DEBIAN_IMAGE=%s\n' "$dir/rootfs.cpio.gz"
printf 'PGHOT_VM_DEBIAN_PACKAGES=%s\n' "$dir/packages.txt"
