#!/usr/bin/env bash
# End to end on CPU: a worker group under mpirun + the coordinator + the client.
#   serve_e2e_test.sh BIN_DIR MODEL.gguf RANKS
# Checks: streamed greedy output equals the engine's direct greedy output; concurrent requests
# all complete; a request past its deadline is cancelled and its sequence freed; a killed worker
# group makes requests fail with UNAVAILABLE (no hang), health says NOT_SERVING, and a restarted
# group rejoins and serves again; the metrics endpoint answers. The leader serves steps on its step
# channel too (k3-worker --step-port): the coordinator runs every step over it, and finds it again
# after the restart.
set -uo pipefail
bin=$1 model=$2 ranks=${3:-2}
work=$(mktemp -d)
. "$(dirname "$0")/../e2e/common.sh"
read -r wport cport mport sport < <(ports 4 | xargs)
start_group() {
  mpirun --oversubscribe --allow-run-as-root -np "$ranks" -x OMP_NUM_THREADS "$bin/k3-worker" --model "$model" \
    --serve "127.0.0.1:$wport" --step-port "$sport" --max-seqs 4 --cache-tokens 4096 --timeout-ms 20000 \
    > "$work/worker.log" 2>&1 &
  gpid=$!
  pids+=("$gpid")
  wait_for "$work/worker.log" "LEADER READY" 60 || fail "worker group did not start"
}

prompt="2560 2802 3674 2368 3177 3414 922 227 1229"
start_group
"$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$wport" --listen "127.0.0.1:$cport" \
  --metrics-port "$mport" > "$work/coord.log" 2>&1 &
pids+=($!)
wait_for "$work/coord.log" "COORDINATOR READY" 30 || fail "coordinator did not start"
k3() { "$bin/k3" "$@" --server "127.0.0.1:$cport"; }
for _ in $(seq 1 50); do k3 health > /dev/null 2>&1 && break; sleep 0.2; done
k3 health || fail "health"

# 1. Greedy through the whole system equals the engine's own greedy run.
want=$("$bin/k3-run" --model "$model" --prompt "$prompt" --gen 8 | sed -n 's/^seq 0: //p')
got=$(k3 generate --ids "$prompt" --max-tokens 8 --ignore-eos 2>/dev/null | tr -s ' ' | sed 's/^ //')
echo "engine: $want"
echo "served: $got"
[ -n "$want" ] && [ "$want" = "$got" ] || fail "served greedy output differs from the engine's"
tr ' ' '\n' <<< "$prompt" > "$work/prompt.txt"  # --ids-file: prompts too long for one argument
got=$(k3 generate --ids-file "$work/prompt.txt" --max-tokens 8 --ignore-eos 2>/dev/null | tr -s ' ' | sed 's/^ //')
[ "$want" = "$got" ] || fail "--ids-file gave $got, --ids $want"

grep -q "steps over the step channel 127.0.0.1:$sport" "$work/coord.log" || fail "the coordinator is not on the step channel"

# 2. Concurrent requests: all complete.
k3 load --requests 8 --concurrency 4 --ids "$prompt" --max-tokens 6 --ignore-eos || fail "load"

# 3. Deadline: the call ends with DEADLINE_EXCEEDED and the sequence is freed.
out=$(k3 generate --ids "$prompt" --max-tokens 3000 --ignore-eos --timeout-s 0.5 2>&1)
echo "$out" | grep -q "DEADLINE_EXCEEDED" || fail "no deadline error: $out"
for _ in $(seq 1 50); do k3 stats | grep -q "running: " || break; sleep 0.1; done
k3 stats | grep -q "requests_running: [1-9]" && fail "a cancelled request is still running"

# 4. Metrics, with per-group health.
curl -sf "http://127.0.0.1:$mport/metrics" > "$work/metrics.txt" || fail "metrics endpoint"
grep -q "k3_requests_total" "$work/metrics.txt" || fail "metrics: no k3_requests_total"
grep -q "k3_worker_group_up{address=\"127.0.0.1:$wport\"} 1" "$work/metrics.txt" || fail "metrics: no per-group health"

# 5. Kill the worker group: requests fail cleanly, health says so, a restart rejoins.
kill -9 "$gpid"; pkill -9 -f "k3-worker --model $model --serve 127.0.0.1:$wport" 2>/dev/null
sleep 2
out=$(timeout 30 "$bin/k3" generate --ids "$prompt" --max-tokens 4 --server "127.0.0.1:$cport" 2>&1)
echo "$out" | grep -q "UNAVAILABLE" || fail "expected UNAVAILABLE with the group down, got: $out"
k3 health && fail "health should be NOT_SERVING"
start_group
for _ in $(seq 1 50); do k3 health > /dev/null 2>&1 && break; sleep 0.2; done
k3 health || fail "the restarted group did not rejoin"
got2=$(k3 generate --ids "$prompt" --max-tokens 8 --ignore-eos 2>/dev/null | tr -s ' ' | sed 's/^ //')
[ "$want" = "$got2" ] || fail "after the restart: $got2"
[ "$(grep -c "steps over the step channel 127.0.0.1:$sport" "$work/coord.log")" -ge 2 ] ||
  fail "the coordinator did not find the restarted group's step channel"
echo "1 passed, 0 failed"
