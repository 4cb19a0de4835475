#!/usr/bin/env bash
# Every GPU kernel test and the GPU engine's tests under compute-sanitizer (memcheck, then
# racecheck for the kernels), on the GPU machine. Binaries built here (build/cuda) and carried in
# .k3san by the pack step below. Writes $OUT/sanitize.log.
#   here:   bash bench/device/sanitize_run.sh pack
#   there:  bash bench/device/sanitize_run.sh        (carry .k3san)
set -uo pipefail
if [ "${1:-}" = pack ]; then
  exec bash bench/device/pack_bins.sh .k3san kernels_cuda_test engine_cuda_test
fi
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/sanitize.log") 2>&1
B=/tmp/k3san
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$PWD/.k3san" "$B" || exit 1
k3_find_missing_libs "$B"
rc=0
for t in kernels_cuda_test engine_cuda_test; do
  echo "=== memcheck $t"
  timeout 260 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 $B/$t 2>&1 | tail -6
  r=${PIPESTATUS[0]}; echo "memcheck $t exit $r"; [ "$r" = 0 ] || rc=1
done
echo "=== racecheck kernels_cuda_test"
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 $B/kernels_cuda_test 2>&1 | tail -6
r=${PIPESTATUS[0]}; echo "racecheck kernels_cuda_test exit $r"; [ "$r" = 0 ] || rc=1
echo "=== sanitize done, rc $rc"
