#!/usr/bin/env bash
# Stages the build context of Containerfile.prebuilt in DIR: pghotd and pghotctl built
# statically against glibc (`-C target-feature=+crt-static`; neither resolves host names, so
# glibc's static-NSS caveat does not apply) and the default config. Then
#   podman build -f packaging/container/Containerfile.prebuilt -t pghotd DIR
# Environment: CARGO_TARGET_DIR.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}
triple=x86_64-unknown-linux-gnu
(cd "$repo" && RUSTFLAGS='-C target-feature=+crt-static' \
	cargo build --locked --release --target "$triple" --bin pghotd --bin pghotctl >&2)
mkdir -p "$dir"
for b in pghotd pghotctl; do
	bin=$target_dir/$triple/release/$b
	# A dynamically linked binary would start on the build host and fail on `scratch`.
	if ldd "$bin" 2>/dev/null | grep -q '=>'; then
		echo "$bin is dynamically linked" >&2
		exit 1
	fi
	install -m 0755 "$bin" "$dir/$b"
done
install -m 0644 "$repo/packaging/pghotd.toml" "$dir/pghotd.toml"
install -m 0644 "$repo/packaging/container/Containerfile.prebuilt" "$dir/Containerfile"
echo "$dir"
