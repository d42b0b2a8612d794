#!/usr/bin/env bash
# Builds the .deb and the .rpm: release binaries, then the man pages (gzip'ed) and shell
# completions generated from their clap definitions (pghotd.toml(5) from the table of
# settings), then cargo deb and cargo generate-rpm (both read their metadata from
# Cargo.toml). Honours CARGO_TARGET_DIR. Prints the two package paths.
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir=${CARGO_TARGET_DIR:-$PWD/target}
assets=$target_dir/release/assets

cargo build --release --locked --bin pghotd --bin pghotctl >&2
mkdir -p "$assets"
pghotd=$target_dir/release/pghotd
pghotctl=$target_dir/release/pghotctl
"$pghotd" --generate man >"$assets/pghotd.8"
"$pghotctl" generate man >"$assets/pghotctl.1"
# pghotd.toml(5) is written from the table of settings (src/config/defs.rs).
"$pghotd" --generate toml-man >"$assets/pghotd.toml.5"
# Man pages ship gzip'ed (Debian policy 12.1, Fedora's brp-compress); -n keeps the name and
# time out, so the bytes depend only on the text.
for page in pghotd.8 pghotctl.1 pghotd.toml.5; do
    gzip -9nf "$assets/$page"
done
for bin in pghotd pghotctl; do
    gen() { if [ "$bin" = pghotd ]; then "$pghotd" --generate "$1"; else "$pghotctl" generate "$1"; fi; }
    gen bash >"$assets/$bin.bash"
    gen zsh >"$assets/_$bin"
    gen fish >"$assets/$bin.fish"
done

deb_dir=$target_dir/debian
rpm_dir=$target_dir/generate-rpm
mkdir -p "$deb_dir" "$rpm_dir"
cargo deb --no-build --locked --output "$deb_dir/pghotd.deb" >&2
cargo generate-rpm --target-dir "$target_dir" --output "$rpm_dir/pghotd.rpm" >&2
echo "$deb_dir/pghotd.deb"
echo "$rpm_dir/pghotd.rpm"
