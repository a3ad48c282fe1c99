#!/usr/bin/env bash
# Sets the machine up and runs every test: unit tests, the integration suite (fixture
# components built from source, SQLite always, PostgreSQL when DATABASE_URL is set).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

if [ -z "${DATABASE_URL:-}" ]; then
  echo "test: DATABASE_URL is not set; the PostgreSQL tests are skipped (CI sets it)" >&2
fi
# Formatting and lints first: they take seconds and fail for reasons a test run would hide.
# The components' workspace and the example's are separate workspaces, checked the same way.
cargo fmt --all --check
cargo fmt --all --check --manifest-path attestors/Cargo.toml
cargo fmt --all --check --manifest-path examples/attestor/Cargo.toml
cargo fmt --all --check --manifest-path examples/agent/Cargo.toml
cargo clippy --workspace --all-targets -- -D warnings
# The guest workspaces share the root's target directory (their host-side dependencies are the
# root's where versions agree).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo clippy --workspace --all-targets --manifest-path attestors/Cargo.toml -- -D warnings
cargo clippy --all-targets --manifest-path examples/attestor/Cargo.toml -- -D warnings
cargo clippy --all-targets --manifest-path examples/agent/Cargo.toml -- -D warnings

# The SDK is publishable: its WIT travels with it (sdk/attestor/wit, kept equal to wit/ by a
# test in tests/artifacts). --no-verify: this script builds and tests those same sources.
cargo package -p gatehouse-sdk --no-verify --allow-dirty

cargo test --workspace --all-targets
# The components' unit tests, natively, with the SDK test kit; the example's own tests, as its
# author runs them.
cargo test --workspace --manifest-path attestors/Cargo.toml
cargo test --manifest-path examples/attestor/Cargo.toml
# The agent without TPM support (no libtss2): its unit tests, and tests/binary.rs on its
# executable (links no libtss2, refuses every TPM option with exit code 2).
cargo test -p gatehouse-agent --no-default-features
scripts/test-install-script.sh
