#!/usr/bin/env bash
# The main job: sets the machine up, builds Gatehouse, runs the host with the built-in
# attestors on SQLite (`gatehouse serve --dev`), creates a join token, joins a machine with
# `gatehouse-agent` over HTTPS, and prints the certificate's SPIFFE ID. Then stops the host.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

cargo build --release --bin gatehouse --bin gatehouse-agent
bin=target/release

data=${GATEHOUSE_DEMO_DIR:-$PWD/data/demo}
agent_dir=$data-agent
port=${GATEHOUSE_DEMO_PORT:-8443}
rm -rf "$agent_dir"
mkdir -p "$data"

"$bin/gatehouse" serve --dev --data-dir "$data" --listen "127.0.0.1:$port" &
host=$!
trap 'kill $host 2>/dev/null; wait $host 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  kill -0 $host 2>/dev/null || { echo "demo: the host exited" >&2; exit 1; }
  sleep 0.1
done

"$bin/gatehouse" attestors list --data-dir "$data"
"$bin/gatehouse" token create --role node --uses 1 --ttl 10m --data-dir "$data" > "$data/demo.token"
chmod 600 "$data/demo.token"

"$bin/gatehouse-agent" join --server "https://127.0.0.1:$port" --ca "$data/join-trust.json" \
  --token-file "$data/demo.token" --out "$agent_dir"

echo "--- the node certificate"
openssl x509 -in "$agent_dir/node.crt" -noout -subject -issuer -enddate -ext subjectAltName 2>/dev/null \
  || cat "$agent_dir/identity.json"
echo "--- the last events"
"$bin/gatehouse" events --data-dir "$data" | tail -n 3
