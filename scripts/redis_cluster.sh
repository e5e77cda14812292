#!/usr/bin/env bash
# scripts/redis_cluster.sh [pytest args...]
#
# Runs the conformance suite on the Redis driver against a real 3-node Redis
# Cluster started here: three `redis-server --cluster-enabled yes` on free
# ports of 127.0.0.1, joined by `redis-cli --cluster create ...
# --cluster-replicas 0 --cluster-yes`, torn down (processes and data) when
# the run ends, whatever its outcome. .ci/run calls it; by hand:
#
#   bash scripts/redis_cluster.sh                 # the suite's core
#   bash scripts/redis_cluster.sh -k claim -x     # some of it
#
# Needs redis-server and redis-cli (Debian's redis-server package) and the
# ./dev venv. Exit code: pytest's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'redis_cluster: %s\n' "$*" >&2; }

for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null 2>&1 || { say "$tool is not installed"; exit 2; }
done

DIR="$(mktemp -d "${TMPDIR:-/tmp}/uj-cluster.XXXXXX")"
PIDS=()
cleanup() {
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$DIR"
}
trap cleanup EXIT

# Three free ports (the cluster bus takes port + 10000: checked free too).
read -r -a PORTS <<<"$(python3 - <<'PY'
import socket
ports = []
while len(ports) < 3:
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        port = a.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            continue
        try:
            b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        ports.append(port)
print(" ".join(map(str, ports)))
PY
)"

NODES=()
for port in "${PORTS[@]}"; do
  mkdir -p "$DIR/$port"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$DIR/$port" \
    --cluster-enabled yes --cluster-config-file "nodes-$port.conf" \
    --cluster-node-timeout 5000 --appendonly no --save "" \
    >"$DIR/$port.log" 2>&1 &
  PIDS+=("$!")
  NODES+=("127.0.0.1:$port")
done

for port in "${PORTS[@]}"; do
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis-cli -p "$port" ping >/dev/null || { say "node $port did not start"; cat "$DIR/$port.log" >&2; exit 1; }
done

say "creating a cluster of ${NODES[*]}"
redis-cli --cluster create "${NODES[@]}" --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 ||
  { cat "$DIR/create.log" >&2; exit 1; }
for _ in $(seq 1 100); do
  redis-cli -p "${PORTS[0]}" cluster info | grep -q '^cluster_state:ok' && break
  sleep 0.1
done
redis-cli -p "${PORTS[0]}" cluster info | grep -q '^cluster_state:ok' ||
  { say "the cluster did not reach cluster_state:ok"; exit 1; }

say "running the conformance suite on the cluster (redis://127.0.0.1:${PORTS[0]})"
rc=0
ULTIMATE_JOBS_TEST_REDIS="redis://127.0.0.1:${PORTS[0]}/0" \
  bash ./dev test tests/conformance/test_redis_driver.py tests/redis/test_cluster.py -p no:randomly \
    -k "not WaitingForAReplica" "$@" || rc=$?
exit "$rc"
