#!/usr/bin/env bash
# Formatting and lints of all four workspaces (root, the components' `attestors/`, and the
# third-party example's attestor and agent), as every change must pass before it lands.
# scripts/test.sh (and so CI) ends with it; run alone, it is a quick check before a commit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

scripts/fmt-check.sh
cargo clippy --workspace --all-targets -- -D warnings
# Each guest workspace has its own Cargo.lock, so each gets its own target directory: in the
# root's, a crate both lockfiles build (the SDK's, via attestors/bench-tpm-verify) left two
# artifacts of one crate where rustc could pick the wrong one (CI, 2026-12-03: "multiple
# different versions of crate `gatehouse_tpm`").
root_target="${CARGO_TARGET_DIR:-$PWD/target}"
CARGO_TARGET_DIR="$root_target/ws/attestors" \
  cargo clippy --workspace --all-targets --manifest-path attestors/Cargo.toml -- -D warnings
CARGO_TARGET_DIR="$root_target/ws/examples" \
  cargo clippy --all-targets --manifest-path examples/attestor/Cargo.toml -- -D warnings
CARGO_TARGET_DIR="$root_target/ws/examples" \
  cargo clippy --all-targets --manifest-path examples/agent/Cargo.toml -- -D warnings
