#!/bin/bash
# Builds the pghot-ibs-emu QEMU plugin in release mode and prints the path of the .so on stdout
# (cargo's output goes to stderr).
#   tests/vm/ibs-emu/build.sh            # CARGO_TARGET_DIR, default tests/vm/ibs-emu/target
# Offline first (the crates in ~/.cargo's cache, pinned by Cargo.lock); if a crate is missing
# from the cache, the second try fetches it from crates.io.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/target}
cd "$here"
if ! CARGO_TARGET_DIR=$target cargo build --release --locked --offline >&2 2>/dev/null; then
	CARGO_TARGET_DIR=$target cargo build --release --locked >&2
fi
so=$target/release/libpghot_ibs_emu.so
[ -f "$so" ] || { echo "build.sh: $so missing after the build" >&2; exit 1; }
echo "$so"
