#!/usr/bin/env bash
# The agent's install script end to end, with the agent built without TPM support (which
# links no libtss2): against a real host on loopback (`gatehouse serve --dev`), the script
# `gatehouse-agent install-script` writes runs in a throwaway root (ROOT=, with `systemctl`
# stubbed on PATH and a TPM device that is a plain file): it installs the binary, the trust file
# and the agent's unit (no helper: this build has no TPM support, so the node key is a file),
# joins with a token read from standard input, and restarts the unit; run again (an upgrade) it
# answers "already joined as <node>" and restarts it again; a tpm script on a machine without a
# TPM stops before it installs anything or reads a token, and with this build on a machine with
# a TPM it stops before the binary is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

# GATEHOUSE_BIN_DIR: `gatehouse` and the agent without TPM support, built already (skips the
# builds).
bin=${GATEHOUSE_BIN_DIR:-}
if [ -z "$bin" ]; then
  # The host as the test suite builds it: with every workspace target selected the features
  # are the suite's, so after `cargo test --workspace --all-targets` only the executables are
  # linked (`cargo build --bin gatehouse` alone resolves other features and rebuilds wasmtime
  # and the rest). Then the agent without TPM support, as `cargo test -p gatehouse-agent
  # --no-default-features` builds it; it replaces target/debug/gatehouse-agent.
  cargo build --workspace --all-targets
  cargo test -p gatehouse-agent --no-default-features --no-run
  bin=${CARGO_TARGET_DIR:-$PWD/target}/debug
fi
"$bin/gatehouse-agent" --version | grep -q '(without TPM support)$' \
  || { echo "test-install-script: $bin/gatehouse-agent is not the build without TPM support" >&2; exit 1; }
if ldd "$bin/gatehouse-agent" | grep -E 'libtss2|libcrypto|libssl'; then
  echo "test-install-script: the agent without TPM support links the TSS or OpenSSL" >&2
  exit 1
fi

work=$(mktemp -d)
host=""
cleanup() {
  [ -n "$host" ] && kill "$host" 2>/dev/null && wait "$host" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "test-install-script: $*" >&2; exit 1; }

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/gatehouse" serve --dev --data-dir "$work/host" --listen "127.0.0.1:$port" 2>"$work/host.log" &
host=$!
for _ in $(seq 300); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "$host" 2>/dev/null || fail "the host exited: $(cat "$work/host.log")"
  sleep 0.1
done
server="https://127.0.0.1:$port"
"$bin/gatehouse" token create --role node --uses 1 --ttl 10m --data-dir "$work/host" > "$work/token"

"$bin/gatehouse-agent" install-script --server "$server" --ca "$work/host/join-trust.json" \
  --out "$work/install.sh"
mkdir "$work/stub"
cat > "$work/stub/systemctl" <<'STUB'
#!/bin/sh
echo "systemctl $*" >> "$SYSTEMCTL_LOG"
STUB
chmod 0755 "$work/stub/systemctl"

root=$work/root
# A machine with a TPM device (a plain file: nothing opens it, this build cannot).
tpm_device=$work/tpm-device
touch "$tpm_device"
run_script() {
  env ROOT="$root" TPM_DEVICE="$tpm_device" GATEHOUSE_AGENT_BIN="$bin/gatehouse-agent" \
    SYSTEMCTL_LOG="$work/systemctl.log" PATH="$work/stub:$PATH" sh "$1"
}

# 1. The first run installs and joins; the build without TPM support keeps a file key and
# installs no helper, and says so.
run_script "$work/install.sh" < "$work/token" > "$work/first.out" 2> "$work/first.err" \
  || fail "first run: $(cat "$work/first.out" "$work/first.err")"
grep -q "the node key stays a file on this machine with a TPM" "$work/first.err" \
  || fail "no word of the build: $(cat "$work/first.err")"
data=$root/var/lib/gatehouse-agent
[ -x "$root/usr/local/bin/gatehouse-agent" ] || fail "no binary installed"
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))' \
  "$root/etc/gatehouse-agent/trust.json" "$work/host/join-trust.json" || fail "trust.json differs"
[ -s "$data/identity.json" ] || fail "no identity: $(cat "$work/first.out")"
[ ! -e "$data/join.token" ] || fail "the token file was left behind"
grep -q "^node key: a file" "$work/first.out" || fail "no TPM, so a file key: $(cat "$work/first.out")"
unit=$root/etc/systemd/system/gatehouse-agent.service
grep -q "ExecStart=/usr/local/bin/gatehouse-agent run --server $server --ca /etc/gatehouse-agent/trust.json --dir /var/lib/gatehouse-agent --tpm none" "$unit" \
  || fail "agent unit: $(cat "$unit")"
grep -q "ExecStart=/usr/local/bin/gatehouse-agent helper" "$root/etc/systemd/system/gatehouse-agent-helper.service" \
  || fail "no helper unit"
node=$("$bin/gatehouse-agent" status --dir "$data" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["nodeId"])')
[ -n "$node" ] || fail "status names no node"
"$bin/gatehouse-agent" status --dir "$data" | grep -q "^node $node (role node), certificate .* expires in .*, node key a file, no AK statement, agent built without TPM support$" \
  || fail "status line: $("$bin/gatehouse-agent" status --dir "$data")"
printf 'systemctl daemon-reload\nsystemctl enable gatehouse-agent.service\nsystemctl restart gatehouse-agent.service\n' > "$work/expected"
cmp -s "$work/systemctl.log" "$work/expected" || fail "systemctl calls: $(cat "$work/systemctl.log")"

# 2. Run again (an upgrade): no token needed, the join answers "already joined", units restart.
run_script "$work/install.sh" < /dev/null > "$work/second.out" || fail "second run: $(cat "$work/second.out")"
grep -qx "already joined as $node" "$work/second.out" || fail "second run: $(cat "$work/second.out")"
[ "$(grep -c 'systemctl restart gatehouse-agent.service' "$work/systemctl.log")" = 2 ] || fail "not restarted"

# 3. A tpm script on a machine without a TPM stops first, installing nothing.
"$bin/gatehouse-agent" install-script --server "$server" --ca "$work/host/join-trust.json" \
  --attestor tpm --out "$work/tpm.sh"
root=$work/root-tpm
tpm_device=$work/no-tpm
status=0
echo "not a token" | run_script "$work/tpm.sh" > "$work/tpm.out" 2>&1 || status=$?
[ "$status" = 2 ] || fail "tpm script without a TPM: exit $status: $(cat "$work/tpm.out")"
grep -q "no TPM at $work/no-tpm" "$work/tpm.out" || fail "$(cat "$work/tpm.out")"
[ ! -e "$root" ] || fail "the tpm script installed something without a TPM"

# 4. A tpm script with the build without TPM support, on a machine with a TPM: it stops before
# the binary is installed.
tpm_device=$work/tpm-device
status=0
run_script "$work/tpm.sh" < /dev/null > "$work/tpm-build.out" 2>&1 || status=$?
[ "$status" = 2 ] || fail "tpm script with the build without TPM support: exit $status: $(cat "$work/tpm-build.out")"
grep -q "(without TPM support): a tpm join needs the TPM build" "$work/tpm-build.out" || fail "$(cat "$work/tpm-build.out")"
[ -z "$(ls -A "$root/usr/local/bin")" ] || fail "the tpm script installed the build without TPM support"
[ ! -e "$root/var/lib/gatehouse-agent/identity.json" ] || fail "the tpm script joined"

echo "test-install-script: ok (node $node)"
