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
cargo test --workspace --all-targets
# The agent without TPM support (no libtss2): its unit tests, and tests/binary.rs on its
# executable (links no libtss2, refuses every TPM option with exit code 2).
cargo test -p gatehouse-agent --no-default-features
scripts/test-install-script.sh
