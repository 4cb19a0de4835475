#!/usr/bin/env bash
# Programmatic dependent launch (kernels/cuda/launch.cuh) on and off, side by side in one call on
# nvidia-h200-x2: engine_cuda_test with PDL on GPU 1 while the decode bench runs on GPU 0 with
# K3_PDL=1 and K3_PDL=0, then the same bench over both GPUs (mpirun -np 2) both ways.
#   here:  BINS="engine_cuda_test k3_cuda_decode_bench" bash bench/device/tp_pack.sh
#   there: bash bench/device/pdl_ab_run.sh          (carry .k3carry; K3_AB_ARGS: bench arguments)
# Writes $OUT/pdl_ab.log, engine_test.txt, bench_<gpus>gpu_pdl<0|1>.txt.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/pdl_ab.log") 2>&1
C=$PWD/.k3carry
B=/tmp/k3bin
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
[ -e /work/shared/data/golden/k3-golden-a.gguf ] || { mkdir -p /work/shared/data && ln -sfn "$C/shared/data/golden" /work/shared/data/golden; }
ARGS="--preset slice --layers 8 --quant UD-IQ1_S ${K3_AB_ARGS:---ctx 4096 --batches 1,16 --steps 32 --int8-experts}"
echo "bench: k3_cuda_decode_bench $ARGS"
( CUDA_VISIBLE_DEVICES=1 K3_PDL=1 timeout 90 $B/engine_cuda_test --gtest_color=no > "$OUT/engine_test.txt" 2>&1
  echo "rc=$?" >> "$OUT/engine_test.txt" ) &
ENG=$!
for v in 1 0; do
  echo "## 1 GPU, K3_PDL=$v"
  CUDA_VISIBLE_DEVICES=0 K3_PDL=$v timeout 60 $B/k3_cuda_decode_bench $ARGS > "$OUT/bench_1gpu_pdl$v.txt" 2>&1
  echo "rc=$?"; grep -E '^\| 1 \|' "$OUT/bench_1gpu_pdl$v.txt"
done
wait $ENG
echo "## engine_cuda_test (PDL on): $(grep -E '^\[  (PASSED|FAILED) |^rc=' "$OUT/engine_test.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED|relL2' "$OUT/engine_test.txt" | head -20
for v in 1 0; do
  echo "## 2 GPUs, K3_PDL=$v"
  timeout 60 mpirun -np 2 --bind-to none -x K3_PDL=$v -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
    -x OMPI_MCA_btl_vader_single_copy_mechanism $B/k3_cuda_decode_bench $ARGS > "$OUT/bench_2gpu_pdl$v.txt" 2>&1
  echo "rc=$?"; grep -E '^\| 2 \|' "$OUT/bench_2gpu_pdl$v.txt"
done
