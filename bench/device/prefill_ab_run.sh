#!/usr/bin/env bash
# The prefill changes of session 7 (KDA runs staged a chunk of tokens ahead; the long prefill
# products on cuBLAS) on one H200, in two calls (the carry limit keeps the golden model and the two
# bench binaries apart):
#   tests: kernels_cuda_test (KDA, the cuBLAS form, the K3 GEMM shapes) and engine_cuda_test.
#     here:  BINS="kernels_cuda_test engine_cuda_test" bash bench/device/tp_pack.sh
#     there: bash bench/device/prefill_ab_run.sh tests                  (carry .k3carry)
#   bench: the decode bench before (the binary $C/bin/k3_cuda_decode_bench_base.xz) and after, one
#     after the other on the same GPU, prefill 4096 / 8192 / 32768 in chunks of 4096 and decode
#     batch 1 and 16 at 4k (K3_AB_ARGS replaces those arguments).
#     there: K3_CARRY=.k3carryB bash bench/device/prefill_ab_run.sh bench
#     (K3_AB_VARIANT="--fused-residual": the new binary a third time with those flags added)
#   gemm: k3_cuda_gemm_bench (K3_GEMM_WHICH: its mode, default variants: every kernel and knob on
#     the expert products); memcheck: compute-sanitizer on K3_SAN_FILTER's kernel tests; gemm-ncu:
#     Nsight Compute on one launch of K3_NCU_KERNEL (default the IQ1_S wgmma kernel) in the bench's
#     profile mode (T = 4096, uniform routing), sections K3_NCU_WHAT; sass: the SASS of the kernels
#     whose name contains K3_SASS_FN (default Iq1sWgmma) in K3_SASS_BIN, with its instruction mix.
#   gemv: k3_cuda_gemv_bench --only=K3_GEMV_ONLY (default int8x: the routed experts' int8 GEMVs,
#     the lane-per-row kernel and the sub-block kernel); gemv-ncu: Nsight Compute on one launch of
#     K3_NCU_KERNEL (regex, default the lane-per-row kernel) in that bench (case K3_GEMV_ONLY);
#     step: per-kernel times of one eager decode step (decode_profile.sh, one pass per kernel,
#     K3_STEP_ARGS: batch and context, default 1 4096; int8 experts); step-ncu: Nsight Compute
#     sections on one launch of K3_NCU_KERNEL (regex, default AddMixNorm) in that step.
# Modes run in the order given: prefill_ab_run.sh tests gemm memcheck.
# Writes $OUT/prefill_ab.log and one .txt per program run.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/prefill_ab.log") 2>&1
C=$PWD/${K3_CARRY:-.k3carry}
B=/tmp/k3bin
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
for mode in "${@:-tests}"; do
case "$mode" in
  tests)
    [ -e /work/shared/data/golden/k3-golden-a.gguf ] || { mkdir -p /work/shared/data && ln -sfn "$C/shared/data/golden" /work/shared/data/golden; }
    timeout 300 $B/kernels_cuda_test --gtest_color=no \
      --gtest_filter="${K3_KERNEL_FILTER:-CudaKdaTest.*:CudaShortConvTest.*:QuantGemmBlasTest.*:QuantGemmTest.K3*:QuantGemmTest.EveryType*}" > "$OUT/kernels_test.txt" 2>&1
    echo "## kernels_cuda_test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/kernels_test.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED|gemm accuracy.*cuBLAS|Failure' "$OUT/kernels_test.txt" | head -30
    [ -x $B/engine_cuda_test ] || { echo "## engine_cuda_test: not carried"; continue; }
    timeout 280 $B/engine_cuda_test --gtest_color=no > "$OUT/engine_test.txt" 2>&1
    echo "## engine_cuda_test rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/engine_test.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED|relL2|Failure' "$OUT/engine_test.txt" | head -40
    ;;
  bench)
    ARGS="--preset slice --layers 8 --quant UD-IQ1_S ${K3_AB_ARGS:---prefill 4096,8192,32768 --chunk 4096 --ctx 4096 --batches 1,16 --steps 32 --int8-experts}"
    echo "bench: k3_cuda_decode_bench $ARGS"
    for b in k3_cuda_decode_bench_base k3_cuda_decode_bench; do
      echo "## $b"
      timeout 170 $B/$b $ARGS > "$OUT/$b.txt" 2>&1
      echo "rc=$?"
      grep -E '^\| |prefill|Prefill' "$OUT/$b.txt" | head -40
    done
    # K3_AB_VARIANT: the new binary once more with these flags added (a knob's A/B in one binary)
    if [ -n "${K3_AB_VARIANT:-}" ]; then
      echo "## k3_cuda_decode_bench $K3_AB_VARIANT"
      timeout 170 $B/k3_cuda_decode_bench $ARGS $K3_AB_VARIANT > "$OUT/k3_cuda_decode_bench_variant.txt" 2>&1
      echo "rc=$?"
      grep -E '^\| |prefill|Prefill' "$OUT/k3_cuda_decode_bench_variant.txt" | head -40
    fi
    ;;
  gemm)
    timeout 200 $B/k3_cuda_gemm_bench - "${K3_GEMM_WHICH:-variants}" > "$OUT/gemm_bench.txt" 2>&1
    echo "## k3_cuda_gemm_bench ${K3_GEMM_WHICH:-variants} rc=$?"
    grep -E 'TFLOP/s|routing' "$OUT/gemm_bench.txt" | sed -E 's/ +/ /g' | cut -c1-170 | head -80
    ;;
  memcheck)
    timeout 150 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 $B/kernels_cuda_test \
      --gtest_color=no --gtest_filter="${K3_SAN_FILTER:-QuantGemmTest.GroupedEdgeCases}" > "$OUT/memcheck.txt" 2>&1
    echo "## memcheck rc=$?"; grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck.txt" | head -5
    ;;
  gemm-ncu)
    timeout 300 ncu --target-processes all -k "regex:${K3_NCU_KERNEL:-Iq1sWgmma}" --launch-count 1 \
      ${K3_NCU_WHAT:---section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis} \
      $B/k3_cuda_gemm_bench - profile 4096 > "$OUT/gemm_ncu.txt" 2>&1
    echo "## ncu rc=$?"
    grep -vE '^==PROF==|^ *-+ *$|^$' "$OUT/gemm_ncu.txt" | grep -E '  [A-Z].* [0-9.,]+$|Iq1s|Quant' | cut -c1-150 | head -90
    ;;
  sass)
    cuobjdump -sass "$B/${K3_SASS_BIN:-k3_cuda_decode_bench}" 2>/dev/null |
      awk -v fn="${K3_SASS_FN:-Iq1sWgmma}" '/Function : /{on = index($0, fn) > 0} on' > "$OUT/sass.txt"
    echo "## sass of ${K3_SASS_FN:-Iq1sWgmma}: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$OUT/sass.txt") instructions"
    grep -oE '^ +/\*[0-9a-f]{4}\*/ +(@!?U?P[0-9T] +)?[A-Z0-9]+(\.[A-Z0-9_]+)*' "$OUT/sass.txt" | awk '{print $NF}' |
      sort | uniq -c | sort -rn | head -40
    ;;
  gemv)
    timeout 240 $B/k3_cuda_gemv_bench --only="${K3_GEMV_ONLY:-int8x}" > "$OUT/gemv_bench.txt" 2>&1
    echo "## k3_cuda_gemv_bench --only=${K3_GEMV_ONLY:-int8x} rc=$?"
    grep -E 'single|device' "$OUT/gemv_bench.txt" | sed -E 's/ +/ /g' | cut -c1-200
    ;;
  gemv-ncu)
    timeout 240 ncu --clock-control none -k "regex:${K3_NCU_KERNEL:-Iq1sRowsKernel}" --launch-skip 30 --launch-count 1 \
      ${K3_NCU_WHAT:---section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy} \
      $B/k3_cuda_gemv_bench --only="${K3_GEMV_ONLY:-int8x gate}" > "$OUT/gemv_ncu.txt" 2>&1
    echo "## gemv ncu rc=$?"
    grep -vE '^==PROF==|^ *-+ *$|^$' "$OUT/gemv_ncu.txt" | grep -E '  [A-Z].* [0-9.,]+$|Iq1s' | cut -c1-150 | head -90
    ;;
  step-ncu)
    timeout 300 ncu --clock-control none --profile-from-start off -k "regex:${K3_NCU_KERNEL:-AddMixNorm}" --launch-count 1 \
      ${K3_NCU_WHAT:---section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis} \
      $B/k3_cuda_decode_bench --preset slice --quant UD-IQ1_S --layers 8 --ctx 4096 --batches 1 --steps 2 --ncu-step --int8-experts \
      > "$OUT/step_ncu.txt" 2>&1
    echo "## step ncu ${K3_NCU_KERNEL:-AddMixNorm} rc=$?"
    grep -vE '^==PROF==|^ *-+ *$|^$' "$OUT/step_ncu.txt" | grep -E '  [A-Z].* [0-9.,]+$|Kernel' | cut -c1-150 | head -70
    ;;
  step)
    K3_CARRY=${K3_CARRY:-.k3carry} K3_BENCH_EXTRA="${K3_BENCH_EXTRA:---int8-experts}" \
      K3_NCU_WHAT="${K3_STEP_NCU:---metrics gpu__time_duration.sum}" \
      timeout 300 bash "$(dirname "$0")/decode_profile.sh" ${K3_STEP_ARGS:-1 4096} > "$OUT/step_profile.txt" 2>&1
    echo "## step profile rc=$?"; head -45 "$OUT/kernels_by_time.txt"
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
done
