#!/usr/bin/env bash
# The GPU kernel tests (all of kernels_cuda_test, band_top_cuda_test), compute-sanitizer on a
# chosen filter, the IQ1_S expert GEMV timings, and optionally ncu of chosen kernels of the GEMV
# bench and decode-bench calls, in one device call. Binaries built HERE in build/cuda and carried
# in .k3kern by the pack step. Writes $OUT/kernels_run.log (+ per-step logs).
#   here:   bash bench/device/kernels_run.sh pack        (K3_PACK_DECODE=1: + k3_cuda_decode_bench)
#   there:  K3_SAN_FILTER='*MlaPrefill*' bash bench/device/kernels_run.sh      (carry .k3kern)
#   optional: K3_TEST_FILTER (gtest filter of kernels_cuda_test), K3_NCU_KERNEL + K3_NCU_ONLY
#   (ncu --set full of kernel-name regex K3_NCU_KERNEL over `k3_cuda_gemv_bench --only=K3_NCU_ONLY`),
#   K3_DECODE_ARGS ("args1;args2;...": one k3_cuda_decode_bench call per entry)
set -uo pipefail
BINS="kernels_cuda_test band_top_cuda_test k3_cuda_gemv_bench${K3_PACK_DECODE:+ k3_cuda_decode_bench}"
if [ "${1:-}" = pack ]; then
  exec bash bench/device/pack_bins.sh .k3kern $BINS
fi
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/kernels_run.log") 2>&1
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
B=/tmp/k3kern
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$PWD/.k3kern" "$B" || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
stamp "kernels_cuda_test (all)"
timeout 240 $B/kernels_cuda_test --gtest_color=no --gtest_filter="${K3_TEST_FILTER:-*}" > "$OUT/kernels_test.txt" 2>&1
echo "kernels_cuda_test rc=$?"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|Failure' "$OUT/kernels_test.txt" | head -30
stamp "band_top_cuda_test"
timeout 120 $B/band_top_cuda_test --gtest_color=no > "$OUT/band_top_test.txt" 2>&1
echo "band_top_cuda_test rc=$?"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|Failure|us' "$OUT/band_top_test.txt" | head -30
if [ -n "${K3_SAN_FILTER:-}" ]; then
  stamp "memcheck kernels_cuda_test --gtest_filter=$K3_SAN_FILTER"
  timeout 200 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 $B/kernels_cuda_test \
    --gtest_filter="$K3_SAN_FILTER" > "$OUT/memcheck.txt" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.txt" | tail -4
  stamp "memcheck + racecheck band_top_cuda_test"
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 $B/band_top_cuda_test \
    --gtest_filter='*NarrowAndRagged*:*NaNAndInfinities*:*Deterministic*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED"
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 $B/band_top_cuda_test \
    --gtest_filter='*NarrowAndRagged*:*NaNAndInfinities*' 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|PASSED|FAILED" | head -5
fi
if [ -n "${K3_RACE_FILTER:-}" ]; then
  stamp "racecheck kernels_cuda_test --gtest_filter=$K3_RACE_FILTER"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 3 $B/kernels_cuda_test \
    --gtest_filter="$K3_RACE_FILTER" > "$OUT/racecheck.txt" 2>&1
  echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.txt" | tail -4
fi
stamp "k3_cuda_gemv_bench --only=${K3_GEMV_ONLY:-expert}"
timeout 120 $B/k3_cuda_gemv_bench --only="${K3_GEMV_ONLY:-expert}" 2>&1 | tee "$OUT/gemv_bench.txt" | grep -v '^device'
if [ -n "${K3_NCU_KERNEL:-}" ]; then
  stamp "ncu --set full, kernel ~ $K3_NCU_KERNEL, gemv bench --only=$K3_NCU_ONLY"
  timeout 150 ncu --kernel-name "regex:$K3_NCU_KERNEL" --launch-skip 3 --launch-count 1 --set full \
    $B/k3_cuda_gemv_bench --only="$K3_NCU_ONLY" > "$OUT/ncu.txt" 2>&1
  grep -E "Duration|Throughput|Issue Slots|Warp Cycles|Bank|Wavefronts|Executed Ipc|Registers|Achieved Occupancy|Stall|L2 Hit|DRAM Throughput|Compute \(SM\)" "$OUT/ncu.txt" | head -40
fi
if [ -n "${K3_DECODE_ARGS:-}" ]; then
  IFS=';' read -ra CALLS <<< "$K3_DECODE_ARGS"
  i=0
  for c in "${CALLS[@]}"; do
    i=$((i + 1))
    stamp "k3_cuda_decode_bench $c"
    # shellcheck disable=SC2086
    timeout 300 $B/k3_cuda_decode_bench $c > "$OUT/decode_$i.txt" 2>&1
    echo "rc=$?"; grep -vE '^\s*$|upload|filling' "$OUT/decode_$i.txt" | tail -25
  done
fi
stamp done
