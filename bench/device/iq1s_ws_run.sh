#!/usr/bin/env bash
# The warp-specialized IQ1_S wgmma kernel (kernels/cuda/quant_gemm/gemm_iq1s_wgmma_ws.cu,
# QuantGemmParams::warp_specialized) on a GPU in one device call: its bit-for-bit test against the
# register-A kernel with the other IQ1_S GEMM tests, the whole engine test on the golden model, the
# expert products timed both ways (k3_cuda_gemm_bench experts), and PP4096 on the real-width slice
# with the expert GEMMs on either kernel, alternated. Binaries built HERE in build/cuda:
#   here:   bash bench/device/iq1s_ws_run.sh pack   (-> .k3ws: a test binary of quant_gemm_test
#                                                     only, the engine test and the golden model,
#                                                     the gemm and decode benchmarks)
#           bash bench/device/iq1s_ws_run.sh pack engine   (-> .k3ws: the engine test with all the
#                                                     golden data, reference logits included: the
#                                                     engine phase whole)
#   there:  bash bench/device/iq1s_ws_run.sh [tests] [engine] [gemm] [prefill]   (default: all four)
# Each run's output in $OUT/<tag>.txt; K3_REPS (default "a b") names the prefill repeats; a run is
# skipped once K3_GUARD_S seconds (default 480) have passed.
set -uo pipefail
if [ "${1:-}" = pack ]; then
  dir=.k3ws golden=${K3_SHARED_DIR:-../shared}/data/golden
  if [ "${2:-}" = engine ]; then
    bash bench/device/pack_bins.sh $dir engine_cuda_test
    mkdir -p $dir/golden && cp "$golden"/*.gguf "$golden"/*.txt "$golden"/*.f32 $dir/golden/
  else
    bash bench/device/link_subset_test.sh gemm_cuda_test quant_gemm_test
    bash bench/device/pack_bins.sh $dir gemm_cuda_test engine_cuda_test k3_cuda_gemm_bench k3_cuda_decode_bench
    mkdir -p $dir/golden && cp "$golden/k3-golden-a.gguf" "$golden/prompts-a.txt" $dir/golden/
  fi
  (cd $dir/lib && tar cJf ../libs.tar.xz ./* && rm -f ./*)  # the libraries xz-compressed
  du -sb $dir
  exit 0
fi
PHASES=${*:-tests engine gemm prefill}
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
C=$PWD/.k3ws B=/tmp/k3ws
[ -f $C/libs.tar.xz ] && mkdir -p $C/lib && tar xJf $C/libs.tar.xz -C $C/lib
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
k3_find_missing_libs "$B"
mkdir -p /work/shared/data && ln -sfn $C/golden /work/shared/data/golden  # where the engine test looks
nvidia-smi --query-gpu=name --format=csv,noheader
T0=$(date +%s)
run() {  # run TAG SECONDS CMD...
  if [ $(( $(date +%s) - T0 )) -gt "${K3_GUARD_S:-480}" ]; then echo "### $1: skipped (time)"; return; fi
  local s=$(date +%s)
  echo "### $1: ${*:3}"
  timeout "$2" "${@:3}" > "$OUT/$1.txt" 2>&1
  echo "rc=$? ($(( $(date +%s) - s )) s)"
}
S="--preset slice --layers ${K3_LAYERS:-8} --quant UD-IQ1_S --int8-experts"
for phase in $PHASES; do
  case $phase in
    tests)
      [ -x $B/gemm_cuda_test ] || { echo "### gemm_tests: not carried"; continue; }
      run gemm_tests 150 $B/gemm_cuda_test --gtest_filter='QuantGemmTest.Iq1s*:QuantGemmTest.GroupedK3ExpertsIQ1S*:QuantGemmTest.RejectsBadArguments'
      grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|differ|OK \]" "$OUT/gemm_tests.txt" | cut -c1-200 | head -30 ;;
    engine)
      run engine_all 240 $B/engine_cuda_test
      grep -E "^\[  (PASSED|FAILED)|FAILED|Failure" "$OUT/engine_all.txt" | cut -c1-200 | head -20 ;;
    gemm)
      [ -x $B/k3_cuda_gemm_bench ] || { echo "### gemm: not carried"; continue; }
      run gemm 120 $B/k3_cuda_gemm_bench - experts 4096
      grep -E "^expert|TFLOP" "$OUT/gemm.txt" | cut -c1-200 | head -20 ;;
    prefill)
      [ -x $B/k3_cuda_decode_bench ] || { echo "### prefill: not carried"; continue; }
      for r in ${K3_REPS:-a b}; do
        for k in rs ws; do
          run pp_${k}_$r 150 $B/k3_cuda_decode_bench $S --batches 0 --prefill 4096 --chunk 4096 --$k-experts
          grep -E -A3 "floor ms \(TFLOP\)|prefill per layer kind" "$OUT/pp_${k}_$r.txt" | grep -E "^\| [0-9]" | cut -c1-180
        done
      done ;;
    *) echo "unknown phase $phase (tests, engine, gemm, prefill)"; exit 2 ;;
  esac
done
