#!/usr/bin/env bash
# What a crate that depends on onceflow builds: packages onceflow and its kafka-protocol fork
# (vendor/kafka-protocol) with `cargo package`, unpacks the .crate files into a scratch
# project that depends on onceflow as a user would (the packaged crates stand in for crates.io
# through the scratch project's own [patch.crates-io]; nothing of this repository's manifests
# applies there), and runs scripts/downstream/guard.rs in it: a 10-byte response declaring
# 2^31-1 elements must be a decode error. With the guard only in a [patch] of onceflow's own
# workspace, the packaged onceflow named the unguarded kafka-protocol of crates.io and this test
# aborted.
#
# onceflow's binary depends on the taxi workload crate (crates/onceflow-taxi, not on crates.io):
# packaging onceflow resolves it (its packaged lock file names every optional dependency), so
# it is packaged in the same run. The scratch project builds the client alone and never
# resolves that optional dependency, so it needs no patch for it.
#
#   scripts/check-downstream.sh        # the scratch project is target/downstream
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/downstream
rm -rf "$work"
mkdir -p "$work/crates"
# The fork's package name (its library is kafka_protocol either way).
fork=$(sed -n '/^\[package\]/,/^\[/s/^name = "\(.*\)"/\1/p' vendor/kafka-protocol/Cargo.toml)
# --no-verify: the verification build would resolve the fork from crates.io; the scratch
# project below is the verification. The packaged lock file resolves the fork from vendor/ (the
# manifest keeps its registry name).
config=()
[ "$fork" = kafka-protocol ] || config=(--config "patch.crates-io.$fork.path=\"$root/vendor/kafka-protocol\"")
# onceflow-taxi, packaged in the same run, stands in for crates.io's (see the top).
cargo package --quiet --no-verify --allow-dirty -p onceflow -p onceflow-taxi \
  --target-dir "$work/pkg" "${config[@]}"
cargo package --quiet --no-verify --allow-dirty --manifest-path vendor/kafka-protocol/Cargo.toml \
  --target-dir "$work/pkg"
for c in "$work"/pkg/package/*.crate; do
  tar -xzf "$c" -C "$work/crates"
done
onceflow_dir=$(cd "$work/crates" && ls -d onceflow-[0-9]*)
version=${onceflow_dir#onceflow-}
# The kafka-protocol package the packaged onceflow names: the fork under its own name comes from
# the packaged crates (it is not on crates.io); upstream's name comes from crates.io, as it would
# for any user.
kp=$(sed -n '/^\[dependencies.kafka-protocol\]/,/^\[/p' "$work/crates/$onceflow_dir/Cargo.toml" |
  sed -n 's/^package = "\(.*\)"/\1/p')
echo "check-downstream: onceflow $version depends on ${kp:-kafka-protocol of crates.io (upstream)}"
patch="onceflow = { path = \"$work/crates/$onceflow_dir\" }"$'\n'
if [ -n "$kp" ]; then
  dir=$(cd "$work/crates" && ls -d "$kp"-[0-9]*)
  patch+="$kp = { path = \"$work/crates/$dir\" }"$'\n'
fi
mkdir -p "$work/project/src" "$work/project/tests"
cat >"$work/project/Cargo.toml" <<TOML
[package]
name = "onceflow-downstream"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
# The guard test feeds a response to the decoder directly, an internal.
onceflow = { version = "=$version", default-features = false, features = ["unstable-internals"] }

# The packaged crates in place of crates.io's (onceflow's fork is not published from here).
[patch.crates-io]
$patch
[workspace]
TOML
echo >"$work/project/src/lib.rs"
cp scripts/downstream/guard.rs "$work/project/tests/guard.rs"
# The same dependency versions as onceflow's own build (and its target directory's artifacts).
cp Cargo.lock "$work/project/Cargo.lock"
cd "$work/project"
# onceflow's own target directory: the dependencies its debug build compiled are reused.
export CARGO_TARGET_DIR=$root/target
# Unpacked files keep the packaged mtimes, which need not be newer than an earlier build's:
# touched, onceflow and the fork are always built again (their dependencies are reused). Not
# `cargo clean -p`: in this target directory it would remove onceflow's own build too.
find "$work/crates" -type f -exec touch {} +
cargo test --quiet --test guard
