#!/usr/bin/env bash
# The agent's install script end to end: against a real host on loopback (`gatehouse serve
# --dev`), the script `gatehouse-agent install-script` writes runs in a throwaway root (ROOT=,
# with `systemctl` stubbed on PATH and no TPM device): it installs the binary, the trust file and
# both units, joins with a token read from standard input, and restarts the units; run again
# (an upgrade) it answers "already joined as <node>" and restarts them again; and a tpm script
# on a machine without a TPM stops before it installs anything or reads a token.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

# GATEHOUSE_BIN_DIR: binaries built already (skips the build).
bin=${GATEHOUSE_BIN_DIR:-}
if [ -z "$bin" ]; then
  cargo build --bin gatehouse --bin gatehouse-agent
  bin=${CARGO_TARGET_DIR:-$PWD/target}/debug
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
run_script() {
  env ROOT="$root" TPM_DEVICE="$work/no-tpm" GATEHOUSE_AGENT_BIN="$bin/gatehouse-agent" \
    SYSTEMCTL_LOG="$work/systemctl.log" PATH="$work/stub:$PATH" sh "$1"
}

# 1. The first run installs and joins.
run_script "$work/install.sh" < "$work/token" > "$work/first.out" || fail "first run: $(cat "$work/first.out")"
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
"$bin/gatehouse-agent" status --dir "$data" | grep -q "^node $node (role node), certificate .* expires in .*, node key a file, no AK statement$" \
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
status=0
echo "not a token" | run_script "$work/tpm.sh" > "$work/tpm.out" 2>&1 || status=$?
[ "$status" = 2 ] || fail "tpm script without a TPM: exit $status: $(cat "$work/tpm.out")"
grep -q "no TPM at $work/no-tpm" "$work/tpm.out" || fail "$(cat "$work/tpm.out")"
[ ! -e "$root" ] || fail "the tpm script installed something without a TPM"

echo "test-install-script: ok (node $node)"
