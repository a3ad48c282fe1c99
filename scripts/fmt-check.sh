#!/usr/bin/env bash
# `cargo fmt --check` over the four workspaces: the root, the components' (`attestors/`) and the
# third-party example's attestor and agent, each its own Cargo workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
for manifest in Cargo.toml attestors/Cargo.toml examples/attestor/Cargo.toml examples/agent/Cargo.toml; do
  cargo fmt --all --check --manifest-path "$manifest"
done
