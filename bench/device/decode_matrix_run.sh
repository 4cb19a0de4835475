#!/usr/bin/env bash
# Decode on the real-width 8-layer slice (UD-IQ1_S) over the configurations of an issue-9 results
# file, on the GPU machine (nvidia-h200-x2), plus the all-reduce bench. Binaries built HERE in
# build/cuda, packed into .k3kern (carry it):
#   here:   bash bench/device/decode_matrix_run.sh pack
#   there:  bash bench/device/decode_matrix_run.sh [4k] [peer] [long]       (default: all three)
# 4k:   1 GPU and 2 ranks, context 4096, batches 1 and 16 with int8 expert inputs, batch 1 exact
#       experts (the engine's default MLA decode: tensor cores)
# peer: k3_allreduce_bench (NCCL vs the peer all-reduce, eager and in a graph), and the 2-rank
#       batch-1 decode with the peer path off (K3_PEER_ALLREDUCE=0) beside it
# long: 1 GPU, prefill 4096 (chunk 4096) then batch 64 at 4k; batch 1 at 128k, int8 experts
# Writes $OUT/d_*.txt and prints each call's table rows.
set -uo pipefail
if [ "${1:-}" = pack ]; then
  exec bash bench/device/pack_bins.sh .k3kern k3_cuda_decode_bench k3_allreduce_bench
fi
PHASES=${*:-4k peer long}
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=/tmp/k3kern
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$PWD/.k3kern" "$B" || exit 1
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
S="--preset slice --layers 8 --quant UD-IQ1_S"
MPI="mpirun -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x OMPI_MCA_btl_vader_single_copy_mechanism"
i=0
run() {  # run LABEL COMMAND...
  i=$((i + 1)); echo "### [$i] $1: ${*:2}"
  timeout 240 "${@:2}" > "$OUT/d_$i.txt" 2>&1; echo "rc=$?"
  grep -E "^\||^prefill|^weights|^ranks" "$OUT/d_$i.txt" | grep -v "^|---"
}
if [[ " $PHASES " == *" 4k "* ]]; then
  CUDA_VISIBLE_DEVICES=0 run "1 GPU int8" $B/k3_cuda_decode_bench $S --ctx 4096 --steps 32 --batches 1,16 --int8-experts
  CUDA_VISIBLE_DEVICES=0 run "1 GPU exact experts" $B/k3_cuda_decode_bench $S --ctx 4096 --steps 32 --batches 1
  run "2 ranks int8" $MPI $B/k3_cuda_decode_bench $S --ctx 4096 --steps 32 --batches 1,16 --int8-experts
  run "2 ranks exact experts" $MPI $B/k3_cuda_decode_bench $S --ctx 4096 --steps 32 --batches 1
fi
if [[ " $PHASES " == *" peer "* ]]; then
  run "all-reduce bench" $MPI $B/k3_allreduce_bench 1000
  grep -vE "^\s*$" "$OUT/d_$i.txt" | tail -12
  run "2 ranks int8, NCCL only" $MPI -x K3_PEER_ALLREDUCE=0 $B/k3_cuda_decode_bench $S --ctx 4096 --steps 32 --batches 1 --int8-experts
fi
if [[ " $PHASES " == *" long "* ]]; then
  CUDA_VISIBLE_DEVICES=0 run "1 GPU prefill + b64" $B/k3_cuda_decode_bench $S --prefill 4096 --chunk 4096 --ctx 4096 --batches 64 --steps 16 --int8-experts
  CUDA_VISIBLE_DEVICES=0 run "1 GPU 128k" $B/k3_cuda_decode_bench $S --chunk 4096 --ctx 131072 --batches 1 --steps 8 --int8-experts
fi
