#!/usr/bin/env bash
# End to end on CPU, loopback only: what a worker group does when its coordinator dies.
#   coordinator_death_e2e_test.sh BIN_DIR MODEL.gguf
# Checks:
#   1. k3-worker --coordinator-timeout 3 (2 ranks): after the coordinator is killed with SIGKILL
#      the group shuts down by itself (every rank through the shutdown step): mpirun exits with
#      status 0 within the timeout plus a few seconds, no earlier than about the timeout, and the
#      leader's log says why; no k3-worker of the group is left.
#   2. Without a timeout (the default, 0) the group keeps waiting: a coordinator killed in the
#      middle of a request, then restarted, finds the group serving, the sequence the dead one
#      left freed (the leader's log says so) and its greedy output equal to the engine's (that
#      coordinator polls for step replies, --step-poll-us: the same steps by the other wait).
set -uo pipefail
bin=$1 model=$2
if [ ! -f "$model" ]; then
  echo "skipped: no $model"
  exit 0
fi
work=$(mktemp -d)
. "$(dirname "$0")/../e2e/common.sh"
read -r wport cport < <(ports 2 | xargs)
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
start_coordinator() {  # log [more k3-coordinator options]
  local log=$1; shift
  "$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$wport" --listen "127.0.0.1:$cport" "$@" > "$work/$log" 2>&1 &
  cpid=$!
  pids+=("$cpid")
  wait_for "$work/$log" "COORDINATOR READY" 30 || fail "coordinator did not start"
  for _ in $(seq 1 50); do k3 health > /dev/null 2>&1 && break; sleep 0.2; done
  k3 health > /dev/null || fail "coordinator: health"
}
k3() { "$bin/k3" "$@" --server "127.0.0.1:$cport"; }
start=$(date +%s)
prompt="2560 2802 3674 2368 3177 3414 922 227 1229"
want=$("$bin/k3-run" --model "$model" --prompt "$prompt" --gen 6 | sed -n 's/^seq 0: //p')
[ -n "$want" ] || fail "k3-run gave no output"

# ---- 1. --coordinator-timeout: the group ends cleanly when its coordinator is gone ------------
timeout_s=3
mpirun --oversubscribe --allow-run-as-root -np 2 -x OMP_NUM_THREADS "$bin/k3-worker" --model "$model" \
  --serve "127.0.0.1:$wport" --max-seqs 4 --cache-tokens 4096 --timeout-ms 20000 \
  --coordinator-timeout "$timeout_s" > "$work/worker-timeout.log" 2>&1 &
gpid=$!
pids+=("$gpid")
wait_for "$work/worker-timeout.log" "LEADER READY" 60 || fail "worker group did not start"
start_coordinator coord1.log
got=$(k3 generate --ids "$prompt" --max-tokens 6 --ignore-eos 2>/dev/null | tr -s ' ' | sed 's/^ //')
[ "$want" = "$got" ] || fail "part 1: got '$got', the engine says '$want'"
# Served for longer than the timeout: a live coordinator keeps the group up.
sleep $(( timeout_s + 1 ))
kill -0 "$gpid" 2>/dev/null || fail "the group ended although its coordinator was alive"
{ kill -9 "$cpid"; wait "$cpid"; } 2>/dev/null
t0=$(now_ms)
for _ in $(seq 1 $(( (timeout_s + 12) * 10 ))); do kill -0 "$gpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$gpid" 2>/dev/null && fail "the group is still up $(( timeout_s + 12 )) s after its coordinator died"
wait "$gpid"
rc=$?
ms=$(( $(now_ms) - t0 ))
echo "part 1: the group ended ${ms} ms after the coordinator was killed (timeout ${timeout_s} s), exit status $rc"
[ "$rc" -eq 0 ] || fail "mpirun exited with $rc (the group must end cleanly, status 0)"
[ "$ms" -ge $(( (timeout_s - 1) * 1000 )) ] || fail "the group ended after $ms ms, before its timeout"
grep -q "no call from a coordinator for $timeout_s s (--coordinator-timeout): shutting the worker group down" \
  "$work/worker-timeout.log" || fail "the leader's log does not say why it ended"
pgrep -f "k3-worker --model $model --serve 127.0.0.1:$wport" > /dev/null && fail "a rank of the group is left"

# ---- 2. no timeout: the group waits, and a restarted coordinator uses it again ------------------
mpirun --oversubscribe --allow-run-as-root -np 1 -x OMP_NUM_THREADS "$bin/k3-worker" --model "$model" \
  --serve "127.0.0.1:$wport" --max-seqs 1 --cache-tokens 4096 --timeout-ms 20000 > "$work/worker-wait.log" 2>&1 &
gpid=$!
pids+=("$gpid")
wait_for "$work/worker-wait.log" "LEADER READY" 60 || fail "worker group (no timeout) did not start"
start_coordinator coord2.log
# Killed in the middle of a long request: its sequence (the group's only slot) stays behind.
k3 generate --ids "$prompt" --max-tokens 2000 --ignore-eos --timeout-s 60 > /dev/null 2>&1 &
lpid=$!
for _ in $(seq 1 50); do k3 stats 2>/dev/null | grep -q "requests_running: 1" && break; sleep 0.1; done
k3 stats 2>/dev/null | grep -q "requests_running: 1" || fail "the long request is not running"
sleep 1
{ kill -9 "$cpid"; wait "$cpid"; } 2>/dev/null
wait "$lpid" 2>/dev/null
sleep $(( timeout_s + 2 ))
kill -0 "$gpid" 2>/dev/null || fail "without --coordinator-timeout the group ended"
start_coordinator coord3.log --step-poll-us 20000
got=$(k3 generate --ids "$prompt" --max-tokens 6 --ignore-eos --timeout-s 30 2>"$work/gen3.err" | tr -s ' ' | sed 's/^ //')
[ "$want" = "$got" ] || fail "part 2, restarted coordinator: got '$got' ($(cat "$work/gen3.err"))"
grep -q "a new coordinator took over: freed 1 sequence(s) the previous one left" "$work/worker-wait.log" ||
  fail "the leader did not free the dead coordinator's sequence"
echo "part 2: a restarted coordinator got the engine's output from the waiting group"
echo "coordinator death e2e: $(( $(date +%s) - start )) s"
echo "1 passed, 0 failed"
