#!/usr/bin/env bash
# k3-launch on CPU with launch/configs/cpu-only.yaml (2 ranks + coordinator, the golden model):
#   1. --smoke-test: starts everything, serves one request, shuts down, exit 0;
#   2. SIGTERM to the launcher while serving: exit 0;
#   3. a rank killed while serving: exit 4 (a process died).
# After each: no k3-worker, k3-coordinator or mpirun of this run is left (pgrep on its ports
# and log dir, so other people's servers on this machine do not count).
#   launch_cpu_test.sh BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
# cpu-only.yaml serves ../shared/data/golden/k3-golden-a.gguf (seen from the checkout).
if [ ! -f "$src/../shared/data/golden/k3-golden-a.gguf" ]; then
  echo "skipped: no $src/../shared/data/golden/k3-golden-a.gguf"
  exit 77
fi
work=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
port() { echo $(( 20000 + (RANDOM * 7 + $$) % 40000 )); }
launcher=""
cleanup() {
  [ -n "$launcher" ] && kill "$launcher" 2>/dev/null && wait "$launcher"
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.out "$work"/logs*/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -30 "$f"; }; done; exit 1; }

# Fresh random ports and a log dir of its own for run $1.
pick() {
  name=$1
  wport=$(port); cport=$(port); mport=$(port)
  while [ "$cport" = "$wport" ]; do cport=$(port); done
  while [ "$mport" = "$wport" ] || [ "$mport" = "$cport" ]; do mport=$(port); done
  logs="$work/logs-$name"
  args=("$src/launch/configs/cpu-only.yaml" --log-dir "$logs" --ready-timeout-s 120 --grace-s 10
        --set "worker_groups.cpu0.listen=127.0.0.1:$wport" --set "coordinator.listen=127.0.0.1:$cport"
        --set "coordinator.metrics_port=$mport")
}

# Nothing of this run may be left.
expect_nothing_left() {
  sleep 0.5
  local left
  left=$(pgrep -af "k3-worker|k3-coordinator|mpirun" | grep -E "127\.0\.0\.1:($wport|$cport)|$logs" || true)
  [ -z "$left" ] || fail "$1: processes left: $left"
}

wait_ready() {  # file
  for _ in $(seq 1 1200); do
    grep -q "K3-LAUNCH READY" "$1" 2>/dev/null && return 0
    kill -0 "$launcher" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# 1. One request served, then a clean shutdown.
pick smoke
"$bin/k3-launch" "${args[@]}" --smoke-test --smoke-ids "2560 2802 3674 2368 3177" --smoke-tokens 6 > "$work/smoke.out" 2>&1
rc=$?
[ "$rc" = 0 ] || fail "smoke: exit code $rc"
grep -q "SMOKE TEST OK" "$work/smoke.out" || fail "smoke: no SMOKE TEST OK"
grep -A1 "SMOKE TEST OK" "$work/smoke.out" | tail -1 | grep -Eq "^ *[0-9]+( [0-9]+){5} *$" || fail "smoke: expected 6 token ids"
expect_nothing_left smoke
echo "smoke test: ok"

# 2. SIGTERM to the launcher while it serves.
pick sigterm
"$bin/k3-launch" "${args[@]}" > "$work/sigterm.out" 2>&1 &
launcher=$!
wait_ready "$work/sigterm.out" || fail "sigterm: never ready"
kill -TERM "$launcher"
wait "$launcher"
rc=$?
launcher=""
[ "$rc" = 0 ] || fail "sigterm: exit code $rc"
expect_nothing_left sigterm
echo "SIGTERM: ok"

# 3. A rank dies: the launcher ends everything and says so.
pick rankdies
"$bin/k3-launch" "${args[@]}" > "$work/rankdies.out" 2>&1 &
launcher=$!
wait_ready "$work/rankdies.out" || fail "rankdies: never ready"
victim=$(pgrep -f "k3-worker.*--serve 127\.0\.0\.1:$wport" | tail -1)
[ -n "$victim" ] || fail "rankdies: no rank found"
kill -9 "$victim"
wait "$launcher"
rc=$?
launcher=""
[ "$rc" = 4 ] || fail "rankdies: exit code $rc, want 4"
expect_nothing_left rankdies
echo "rank killed: ok"
echo "3 passed, 0 failed"
