#!/usr/bin/env bash
# Two worker groups behind one coordinator: load spreads over both (least-loaded routing);
# with one group killed the other keeps serving and health reports 1 of 2 up; the killed group,
# restarted, rejoins and takes work again.
#   routing_e2e_test.sh BIN_DIR MODEL.gguf
set -uo pipefail
bin=$1 model=$2
work=$(mktemp -d)
. "$(dirname "$0")/../e2e/common.sh"
read -r aport bport cport < <(ports 3 | xargs)
start_group() {  # name port
  mpirun --oversubscribe --allow-run-as-root -np 1 -x OMP_NUM_THREADS "$bin/k3-worker" --model "$model" \
    --serve "127.0.0.1:$2" --max-seqs 4 --cache-tokens 4096 > "$work/$1.log" 2>&1 &
  eval "pid_$1=$!"
  pids+=($!)
  wait_for "$work/$1.log" "LEADER READY" 60 || fail "group $1 did not start"
}
start_group a "$aport"
start_group b "$bport"
"$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$aport,127.0.0.1:$bport" --listen "127.0.0.1:$cport" \
  > "$work/coord.log" 2>&1 &
pids+=($!)
wait_for "$work/coord.log" "COORDINATOR READY" 30 || fail "coordinator did not start"
k3() { "$bin/k3" "$@" --server "127.0.0.1:$cport"; }
for _ in $(seq 1 50); do k3 health 2>/dev/null | grep -q "2 of 2" && break; sleep 0.2; done
k3 health | grep -q "2 of 2" || fail "both groups should be up"
prompt="2560 2802 3674 2368 3177 3414 922 227 1229"
k3 load --requests 8 --concurrency 8 --ids "$prompt" --max-tokens 8 --ignore-eos || fail "load over two groups"
steps=$(k3 stats | grep -c "steps: [1-9]")
[ "$steps" = 2 ] || fail "expected both groups to have run steps: $(k3 stats)"
kill -9 "$pid_a"
sleep 2
k3 load --requests 4 --concurrency 2 --ids "$prompt" --max-tokens 4 --ignore-eos || fail "the surviving group should serve"
k3 health | grep -q "1 of 2" || fail "health should say 1 of 2: $(k3 health)"
start_group a "$aport"
for _ in $(seq 1 50); do k3 health 2>/dev/null | grep -q "2 of 2" && break; sleep 0.2; done
k3 health | grep -q "2 of 2" || fail "the restarted group did not rejoin"
echo "1 passed, 0 failed"
