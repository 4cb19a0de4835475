#!/usr/bin/env bash
# The IQ1_S ternary form (kernels/cuda/quant_gemv/iq1s_ternary.h, CudaEngineOptions::ternary_experts)
# on a GPU in one device call: its kernel tests, the expert GEMV kernels timed in both forms, the
# engine's bit-equality test on the golden model, decode A/B (ggml rows vs ternary) on the
# real-width slice, and ncu of the routed kernels in one batch-1 step. Binaries built HERE in
# build/cuda, in two carries (one is too large for a call's 64 MiB with the golden model):
#   here:   bash bench/device/ternary_run.sh pack tests   (-> .k3tern: the two test binaries and the
#                                                            golden model, ~57 MB)
#           bash bench/device/ternary_run.sh pack bench   (-> .k3tern: the two benchmarks, ~14 MB)
#           bash bench/device/ternary_run.sh pack one     (-> .k3tern: the engine test, the golden model
#                                                            and the decode bench, ~55 MB: one call)
#           bash bench/device/ternary_run.sh pack onek    (-> .k3tern: both tests, the golden model and
#                                                            the decode bench, ~63 MB: over a call's limit
#                                                            with the working tree's disk blocks)
#           bash bench/device/ternary_run.sh pack kb      (-> .k3tern: the kernel test and both benchmarks,
#                                                            ~22 MB: no golden model, no engine test)
#           bash bench/device/ternary_run.sh pack onekda  (-> .k3tern: the engine test, the golden model, the
#                                                            decode bench and a test binary of the KDA and
#                                                            ternary kernel tests only, ~59 MB)
#   there:  bash bench/device/ternary_run.sh tests                        (with the first carry)
#           bash bench/device/ternary_run.sh [kernels] [decode] [prefill] [pchunk] [ncu] [profile] [pprofile]  (with the second;
#                                                            default: the first three)
# The slice's 8 layers with the experts in the ternary form take ~67 GB of weights (K3_LAYERS=4 for
# less); each run's output in $OUT/<tag>.txt; K3_REPS (default "a b") names the repeats of the A/B runs, K3_BATCHES (default 1,16,64) the decode batches. A run is skipped once K3_GUARD_S seconds (default
# 480) have passed.
set -uo pipefail
if [ "${1:-}" = pack ]; then
  dir=.k3tern
  golden() {  # the golden model and its prompts (what the engine tests read there)
    mkdir -p $dir/golden
    cp "${K3_SHARED_DIR:-../shared}/data/golden/k3-golden-a.gguf" \
       "${K3_SHARED_DIR:-../shared}/data/golden/prompts-a.txt" $dir/golden/
  }
  case "${2:-}" in
    tests) bash bench/device/pack_bins.sh $dir kernels_cuda_test engine_cuda_test
           golden ;;
    bench) bash bench/device/pack_bins.sh $dir k3_cuda_gemv_bench k3_cuda_decode_bench ;;
    one)   bash bench/device/pack_bins.sh $dir engine_cuda_test k3_cuda_decode_bench
           golden ;;
    kb)    bash bench/device/pack_bins.sh $dir kernels_cuda_test k3_cuda_gemv_bench k3_cuda_decode_bench ;;
    onekda) bash bench/device/link_subset_test.sh kda_ternary_cuda_test kda_test iq1s_ternary_test
           bash bench/device/pack_bins.sh $dir engine_cuda_test k3_cuda_decode_bench kda_ternary_cuda_test
           golden ;;
    onek)  bash bench/device/pack_bins.sh $dir kernels_cuda_test engine_cuda_test k3_cuda_decode_bench
           golden ;;
    *) echo "ternary_run.sh pack tests|bench|one|onek|kb|onekda"; exit 2 ;;
  esac
  (cd $dir/lib && tar cJf ../libs.tar.xz ./* && rm -f ./*)  # the libraries xz-compressed
  du -sb $dir
  exit 0
fi
PHASES=${*:-kernels decode ncu}
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
C=$PWD/.k3tern B=/tmp/k3tern
[ -f $C/libs.tar.xz ] && mkdir -p $C/lib && tar xJf $C/libs.tar.xz -C $C/lib
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
k3_find_missing_libs "$B"
[ -d $C/golden ] && mkdir -p /work/shared/data && ln -sfn $C/golden /work/shared/data/golden  # the engine test's
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
L=${K3_LAYERS:-8}
T0=$(date +%s)
run() {  # run TAG SECONDS CMD...
  if [ $(( $(date +%s) - T0 )) -gt "${K3_GUARD_S:-480}" ]; then echo "### $1: skipped (time)"; return; fi
  local s=$(date +%s)
  echo "### $1: ${*:3}"
  timeout "$2" "${@:3}" > "$OUT/$1.txt" 2>&1
  echo "rc=$? ($(( $(date +%s) - s )) s)"
}
S="--preset slice --layers $L --quant UD-IQ1_S --int8-experts"
for phase in $PHASES; do
  case $phase in
    tests)
      if [ -x $B/kernels_cuda_test ]; then
        run kernel_tests 150 $B/kernels_cuda_test --gtest_filter='Iq1sTernary*:QuantGemvTest.Iq1s*:QuantGemvTest.K3ExpertsIQ1S_Int8X:QuantGemmTest.Iq1s*:QuantGemmTest.RejectsBadArguments'
        grep -E "^\[  (PASSED|FAILED)|FAILED|Failure" "$OUT/kernel_tests.txt" | head -20
      fi
      if [ -x $B/kda_ternary_cuda_test ]; then
        run kda_ternary_tests 200 $B/kda_ternary_cuda_test --gtest_filter='CudaKdaTest.*:Iq1sTernary*'
        grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|OK \]" "$OUT/kda_ternary_tests.txt" | cut -c1-160 | head -30
      fi
      [ -x $B/engine_cuda_test ] || { echo "### engine_test: not carried"; continue; }
      run engine_test 200 $B/engine_cuda_test --gtest_filter='*TernaryExperts*:*ChunkedKdaPrefillMatchesTokenByToken*'
      grep -E "^\[  (PASSED|FAILED)|FAILED|Failure" "$OUT/engine_test.txt" | head ;;
    kdaquick)  # the chunked KDA's kernel tests and its engine test only
      [ -x $B/kda_ternary_cuda_test ] && run kda_tests 100 $B/kda_ternary_cuda_test --gtest_filter='CudaKdaTest.Chunked*'
      [ -x $B/kda_ternary_cuda_test ] && grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|OK \]" "$OUT/kda_tests.txt" | cut -c1-200 | head -20
      [ -x $B/engine_cuda_test ] && run engine_kda 100 $B/engine_cuda_test --gtest_filter='*ChunkedKdaPrefillMatchesTokenByToken*'
      [ -x $B/engine_cuda_test ] && grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|OK \]|relL2|top" "$OUT/engine_kda.txt" | cut -c1-200 | head -20 ;;
    kernels)
      [ -x $B/k3_cuda_gemv_bench ] || { echo "### gemv: not carried"; continue; }
      run gemv 120 $B/k3_cuda_gemv_bench --only=int8x
      grep -E "^expert" "$OUT/gemv.txt" | cut -c1-200 ;;
    decode)
      for r in ${K3_REPS:-a b}; do
        run dec_ggml_$r 120 $B/k3_cuda_decode_bench $S --steps 32 --ctx 4096 --batches ${K3_BATCHES:-1,16,64}
        grep -E "^\| [0-9]+ \| [0-9]+ \||weights on" "$OUT/dec_ggml_$r.txt" | cut -c1-160
        run dec_tern_$r 120 $B/k3_cuda_decode_bench $S --steps 32 --ctx 4096 --batches ${K3_BATCHES:-1,16,64} --ternary-experts
        grep -E "^\| [0-9]+ \| [0-9]+ \||weights on" "$OUT/dec_tern_$r.txt" | cut -c1-160
      done ;;
    prefill)  # PP4096 in one chunk, the grouped expert GEMMs on the ggml rows vs the ternary form
      for r in ${K3_REPS:-a b}; do
        for t in ggml tern; do
          flag=""; [ $t = tern ] && flag=--ternary-experts
          run pp_${t}_$r 150 $B/k3_cuda_decode_bench $S --batches 0 --prefill 4096 --chunk 4096 $flag
          grep -E -A3 "floor ms \(TFLOP\)|prefill per layer kind" "$OUT/pp_${t}_$r.txt" | grep -E "^\| [0-9]" | cut -c1-180
        done
      done ;;
    pchunk)  # PP4096 in one chunk, the KDA recurrence token by token vs chunked on tensor cores
      for r in ${K3_REPS:-a b}; do
        for t in token chunked; do
          run pp_kda_${t}_$r 150 $B/k3_cuda_decode_bench $S --batches 0 --prefill 4096 --chunk 4096 --$t-kda
          grep -E -A3 "floor ms \(TFLOP\)|prefill per layer kind" "$OUT/pp_kda_${t}_$r.txt" | grep -E "^\| [0-9]" | cut -c1-180
        done
      done ;;
    ncu)
      M=gpu__time_duration.sum,sm__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
      for t in ggml tern; do
        flag=""; [ $t = tern ] && flag=--ternary-experts
        run ncu_$t 150 ncu --profile-from-start off --clock-control none --kernel-name regex:Iq1sRows --metrics $M \
          $B/k3_cuda_decode_bench $S --steps 4 --ctx 4096 --batches 1 --ncu-step $flag
        grep -E "Iq1sRowsKernel|gpu__time|inst_executed|dram__|issue_active" "$OUT/ncu_$t.txt" | head -16
      done ;;
    engine_all)  # the whole engine test (the golden model's every path), where time is left
      [ -x $B/engine_cuda_test ] || { echo "### engine_all: not carried"; continue; }
      run engine_all 240 $B/engine_cuda_test
      grep -E "^\[  (PASSED|FAILED)|FAILED|Failure|OK \]" "$OUT/engine_all.txt" | cut -c1-160 | head -40 ;;
    profile)  # every kernel of one batch-1 step, ternary experts on: what is left to rank
      K3_CARRY=.k3tern K3_LAYERS=$L K3_NCU_WHAT="--metrics gpu__time_duration.sum" \
        K3_BENCH_EXTRA="--int8-experts --ternary-experts" timeout 200 bash "$(dirname "$0")/decode_profile.sh" 1 4096 | head -45 ;;
    pprofile)  # every kernel of a PP4096 prefill (4 layers: KDA 0-2, MLA 3), ternary experts on
      K3_CARRY=.k3tern K3_PROFILE_TAG=pp_ K3_PREFILL=4096 K3_NCU_WHAT="--metrics gpu__time_duration.sum" \
        K3_BENCH_EXTRA="--int8-experts --ternary-experts" timeout 200 bash "$(dirname "$0")/decode_profile.sh" | head -45 ;;
    *) echo "unknown phase $phase (tests, kdaquick, kernels, decode, prefill, pchunk, ncu, profile, pprofile, engine_all)"; exit 2 ;;
  esac
done
