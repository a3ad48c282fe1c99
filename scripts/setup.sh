#!/usr/bin/env bash
# Idempotent machine setup for building and testing Gatehouse on Debian, as root:
# system packages (TPM stack for the tpm attestor's tests, pkg-config for -sys crates,
# ssh-keygen for the third-party example's host keys) and the wasm32-wasip2 Rust target the
# attestor components build for, with rustfmt and clippy for the checks.
set -euo pipefail

packages=(pkg-config libtss2-dev swtpm swtpm-tools build-essential ca-certificates openssh-client)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
if ! command -v rustup >/dev/null 2>&1; then
  echo "setup: a rustup-managed Rust toolchain is required (cargo and rustup on PATH)" >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! rustup component list --installed | grep -q "^$component"; then
    rustup component add "$component"
  fi
done
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  echo "setup: adding the wasm32-wasip2 target"
  rustup target add wasm32-wasip2
fi
