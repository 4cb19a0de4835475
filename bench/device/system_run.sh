#!/usr/bin/env bash
# The whole system on the GPU machine: a worker group of 1 and of 2 GPU ranks (k3-worker
# --backend cuda --serve), the coordinator and the client, on the golden model. Checks that the
# served greedy ids equal the GPU engine's own greedy run and the CPU's (from the CPU e2e test),
# and compares decode tokens/s seen by the client with the engine's own figure (batch 1).
# Carry .k3sys (bench/device/system_pack.sh). Writes $OUT/system.log.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/system.log") 2>&1
C=$PWD/.k3sys
B=/tmp/k3sys
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
k3_find_missing_libs "$B"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
model=$C/golden/k3-golden-a.gguf
prompt="2560 2802 3674 2368 3177 3414 922 227 1229"
cpu_want="2622 2758 2933 190 3029 3498 440 3177"
MPIX="-x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x OMPI_MCA_btl_vader_single_copy_mechanism"
for ranks in 1 2; do
  echo "=== $ranks GPU rank(s)"
  own=$(timeout 120 mpirun -np $ranks --bind-to none $MPIX $B/k3-worker --backend cuda --model $model --prompt "$prompt" --gen 64 2>&1 | tee $OUT/own$ranks.txt | grep -E "generated|decode")
  echo "engine alone: $own"
  mpirun -np $ranks --bind-to none $MPIX $B/k3-worker --backend cuda --model $model --serve 127.0.0.1:5106$ranks \
    --max-seqs 4 --cache-tokens 4096 > $OUT/worker$ranks.log 2>&1 &
  wpid=$!
  for _ in $(seq 1 600); do grep -q "LEADER READY" $OUT/worker$ranks.log && break; sleep 0.1; done
  $B/k3-coordinator --model $model --workers 127.0.0.1:5106$ranks --listen 127.0.0.1:5105$ranks > $OUT/coord$ranks.log 2>&1 &
  cpid=$!
  for _ in $(seq 1 100); do $B/k3 health --server 127.0.0.1:5105$ranks > /dev/null 2>&1 && break; sleep 0.1; done
  got=$($B/k3 generate --server 127.0.0.1:5105$ranks --ids "$prompt" --max-tokens 8 --ignore-eos 2>/dev/null | xargs)
  echo "served greedy: $got"
  [ "$got" = "$cpu_want" ] && echo "SERVED == CPU ENGINE: yes" || echo "SERVED == CPU ENGINE: NO (cpu: $cpu_want)"
  $B/k3 generate --server 127.0.0.1:5105$ranks --ids "$prompt" --max-tokens 64 --ignore-eos 2>&1 >/dev/null | tail -1
  $B/k3 load --server 127.0.0.1:5105$ranks --requests 16 --concurrency 4 --ids "$prompt" --max-tokens 32 --ignore-eos
  kill $cpid; kill $wpid; sleep 2; kill -9 $wpid 2>/dev/null; pkill -9 -f k3-worker; sleep 1
done
echo "=== done"
