#!/usr/bin/env bash
# Sets the machine up and runs every test: unit tests, the integration suite (fixture
# components built from source, SQLite always, PostgreSQL when DATABASE_URL is set).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time on stderr: CI allows 90 minutes on 2 cores, and a cold run here has
# taken 57 of them, so where the time goes must be readable from any run's log.
step() {
  local started=$SECONDS
  "$@"
  echo "test: $((SECONDS - started)) s: $*" >&2
}

step scripts/setup.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

if [ -z "${DATABASE_URL:-}" ]; then
  echo "test: DATABASE_URL is not set; the PostgreSQL tests are skipped (CI sets it)" >&2
fi
# Formatting first: it takes seconds and fails for reasons a test run would hide. Clippy runs
# last (scripts/lint.sh), once the tests have built what its check build can reuse.
step scripts/fmt-check.sh

# The SDK is publishable: its WIT travels with it (sdk/attestor/wit, kept equal to wit/ by a
# test in tests/artifacts). --no-verify: this script builds and tests those same sources.
step cargo package -p gatehouse-sdk --no-verify --allow-dirty

step cargo test --workspace --all-targets
# The components' unit tests, natively, with the SDK test kit; the example's own tests, as its
# author runs them.
# Each guest workspace has its own Cargo.lock and so its own target directory (see lint.sh).
root_target="${CARGO_TARGET_DIR:-$PWD/target}"
step env CARGO_TARGET_DIR="$root_target/ws/attestors" cargo test --workspace --manifest-path attestors/Cargo.toml
step env CARGO_TARGET_DIR="$root_target/ws/examples" cargo test --manifest-path examples/attestor/Cargo.toml
# The agent without TPM support (no libtss2): its unit tests, and tests/binary.rs on its
# executable (links no libtss2, refuses every TPM option with exit code 2).
step cargo test -p gatehouse-agent --no-default-features
step scripts/test-install-script.sh
# Lints of all four workspaces (clippy -D warnings): about 6 minutes after the builds above.
step scripts/lint.sh
