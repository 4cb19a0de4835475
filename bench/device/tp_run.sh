#!/usr/bin/env bash
# The GPU engine over 1 and 2 GPUs on the GPU machine (nvidia-h200-x2), binaries built here and
# packed by bench/device/tp_pack.sh (carry: .k3carry). Uses the image's own mpirun and NCCL.
#   bash bench/device/tp_run.sh [kernels] [gemm] [gemv] [tests] [bench2] [bench1]     (default: tests bench2 bench1)
# kernels: kernels_cuda_test (--gtest_filter=$K3_KERNEL_FILTER, default all) on GPU 0.
# tests:  engine_cuda_tp_test under mpirun -np 2 (2 ranks vs 1 rank, golden bars), with the
#         single-GPU engine_cuda_test beside it on GPU 1; k3-worker --backend cpu vs cuda.
# bench2: decode bench, 2 ranks (one GPU each), 8-layer real-width slice, ctx K3_BENCH_CTX.
# bench1: the same on one GPU.
# Writes under $OUT: run.log, tp_test.txt, engine_test.txt, worker.txt, bench_2gpu.txt, bench_1gpu.txt.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
PHASES=${*:-tests bench2 bench1}
C=$PWD/.k3carry
B=/tmp/k3bin
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_DEBUG=WARN
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export K3_SHARED_DIR=$C/shared
# Tests built here look for the golden data at /work/main/../shared (their compile-time path).
[ -e /work/shared/data/golden/k3-golden-a.gguf ] || { mkdir -p /work/shared/data && ln -sfn "$C/shared/data/golden" /work/shared/data/golden; }
stamp machine
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv,noheader || true
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
k3_find_missing_libs "$B"  # the image's own Open MPI, NCCL, CUDA runtime
ldd $B/* | grep "not found" && echo "MISSING LIBRARIES"
mpirun --version | head -1
MPI="mpirun -np 2 --bind-to none -x K3_PDL=${K3_PDL:-1} -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x NCCL_DEBUG -x K3_SHARED_DIR -x OMPI_MCA_btl_vader_single_copy_mechanism"
G=$C/shared/data/golden
TP_RC=- ENG_RC=- W_CPU=- W_CUDA=- B2_RC=- B1_RC=-

if [[ " $PHASES " == *" kernels "* ]]; then
  stamp "kernels_cuda_test --gtest_filter=${K3_KERNEL_FILTER:-*}"
  CUDA_VISIBLE_DEVICES=0 timeout 240 $B/kernels_cuda_test --gtest_color=no --gtest_filter="${K3_KERNEL_FILTER:-*}" > "$OUT/kernels.txt" 2>&1
  echo "kernels rc=$?"; grep -E '^\[  (PASSED|FAILED) |FAILED|Failure' "$OUT/kernels.txt" | head -30
fi
if [[ " $PHASES " == *" gemm "* ]]; then
  stamp "k3_cuda_gemm_bench"
  CUDA_VISIBLE_DEVICES=0 timeout ${K3_GEMM_TIMEOUT:-200} $B/k3_cuda_gemm_bench "$OUT/gemm_bench.csv" ${K3_GEMM_ARGS:-} > "$OUT/gemm_bench.txt" 2>&1
  echo "gemm bench rc=$?"; grep -E 'TFLOP/s|MoeGroupTokens' "$OUT/gemm_bench.txt" | sed -E 's/ +/ /g' | cut -c1-200 | head -40
fi
if [[ " $PHASES " == *" gemv "* ]]; then
  stamp "k3_cuda_gemv_bench"
  CUDA_VISIBLE_DEVICES=0 timeout ${K3_GEMV_TIMEOUT:-200} $B/k3_cuda_gemv_bench ${K3_GEMV_ARGS:-} > "$OUT/gemv_bench.txt" 2>&1
  echo "gemv bench rc=$?"; tail -60 "$OUT/gemv_bench.txt"
fi
if [[ " $PHASES " == *" tests "* ]]; then
  stamp "engine_cuda_test on GPU 1 (background) + engine_cuda_tp_test, 2 ranks"
  ( CUDA_VISIBLE_DEVICES=1 timeout 240 $B/engine_cuda_test --gtest_color=no > "$OUT/engine_test.txt" 2>&1; echo "rc=$?" >> "$OUT/engine_test.txt" ) &
  BG=$!
  timeout 240 $MPI $B/engine_cuda_tp_test --gtest_color=no 2>&1 | tee "$OUT/tp_test.txt" | grep -vE '^\[ *RUN'
  TP_RC=${PIPESTATUS[0]}
  wait $BG
  ENG_RC=$(tail -1 "$OUT/engine_test.txt")
  stamp "k3-worker: 2 ranks, cpu vs cuda, golden model, prompt 1, 16 tokens"
  P=$(sed -n 2p $G/prompts-a.txt)
  { echo "## cpu"; OMP_NUM_THREADS=8 timeout 120 $MPI -x OMP_NUM_THREADS $B/k3-worker --model $G/k3-golden-a.gguf --prompt "$P" --gen 16; echo "rc=$?";
    echo "## cuda"; timeout 120 $MPI $B/k3-worker --backend cuda --model $G/k3-golden-a.gguf --prompt "$P" --gen 16; echo "rc=$?"; } > "$OUT/worker.txt" 2>&1
  grep -E "^## |generated|tokens/s|rc=|rank [0-9]:" "$OUT/worker.txt"
  W_CPU=$(awk '/^## cpu/{f=1} /^## cuda/{f=0} f && /^generated/' "$OUT/worker.txt")
  W_CUDA=$(awk '/^## cuda/{f=1} f && /^generated/' "$OUT/worker.txt")
fi
BENCH="$B/k3_cuda_decode_bench --preset slice --layers ${K3_BENCH_LAYERS:-8} --quant UD-IQ1_S ${K3_BENCH_ARGS:---ctx ${K3_BENCH_CTX:-4096,16384} --batches 1 --steps 32}"
if [[ " $PHASES " == *" bench2 "* ]]; then
  stamp "decode bench, 2 GPUs: $BENCH"
  BENCH2=$BENCH
  [ -n "${K3_BENCH2_ARGS:-}" ] && BENCH2="$B/k3_cuda_decode_bench --preset slice --layers ${K3_BENCH_LAYERS:-8} --quant UD-IQ1_S $K3_BENCH2_ARGS"
  echo "$BENCH2"
  timeout ${K3_BENCH2_TIMEOUT:-300} $MPI $BENCH2 2>&1 | grep --line-buffered -v "synthetic layer" | tee "$OUT/bench_2gpu.txt"
  B2_RC=${PIPESTATUS[0]}
fi
if [[ " $PHASES " == *" bench1 "* ]]; then
  stamp "decode bench, 1 GPU: $BENCH"
  REM=$(( ${K3_DEADLINE:-585} - ($(date +%s) - T0) ))  # the whole call stays inside the device's 600 s
  echo "time left for it: ${REM}s"
  CUDA_VISIBLE_DEVICES=0 timeout $REM $BENCH 2>&1 | grep --line-buffered -v "synthetic layer" | tee "$OUT/bench_1gpu.txt"
  B1_RC=${PIPESTATUS[0]}
fi
stamp summary
echo "tp test rc=$TP_RC: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tp_test.txt" 2>/dev/null | tr '\n' ' ')"
grep -E 'worst row|relL2' "$OUT/tp_test.txt" 2>/dev/null | head -40
echo "engine_cuda_test (1 GPU) $ENG_RC: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/engine_test.txt" 2>/dev/null | tr '\n' ' ')"
echo "k3-worker cpu : $W_CPU"
echo "k3-worker cuda: $W_CUDA"
[ -n "$W_CPU" ] && [ "$W_CPU" = "$W_CUDA" ] && echo "k3-worker: cuda == cpu"
echo "bench 2 GPUs rc=$B2_RC; bench 1 GPU rc=$B1_RC"
grep -hE '^\| [12] \||^prefill|^weights|^ranks' "$OUT/bench_2gpu.txt" "$OUT/bench_1gpu.txt" 2>/dev/null
stamp done
