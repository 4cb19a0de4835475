#!/usr/bin/env bash
# One device call for a prefill change: the golden engine tests, an A/B of PP4096 on the real-width
# 8-layer slice (the default against the default plus K3_AB_FLAG, alternated twice), the per-kernel
# times of a PP4096 prefill (4 layers) and Nsight Compute on one launch of a chosen kernel.
#   here:  WITH_BINARIES=1 bash bench/device/engine_pack.sh          (-> .k3carry, ~59 MiB; carry it)
#   there: K3_AB_FLAG=--unfused-prefill-residual bash bench/device/prefill_session_run.sh tests ab kernels ncu
# K3_NCU_KERNEL: the kernel for `ncu` (regex, default KdaChunked), K3_NCU_SKIP: launches skipped
# first (default 3: the warm-up prefill's). Each phase is skipped once K3_GUARD_S seconds (default
# 500) have passed. Outputs under $OUT: engine_test.txt, ab_*.txt, kernels_by_time.txt, ncu_*.txt.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
T0=$(date +%s)
C=$PWD/.k3carry
B=/tmp/k3bin
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
late() { [ $(( $(date +%s) - T0 )) -gt "${K3_GUARD_S:-500}" ] && echo "### $1: skipped (time)"; }
S="--preset slice --quant UD-IQ1_S --int8-experts"
for phase in ${*:-tests ab}; do
  case $phase in
    tests)
      late tests && continue
      # The golden data where the binary (built here with K3_SHARED_DIR=/work/main/../shared) looks.
      [ -e /work/shared/data/golden/k3-golden-a.gguf ] ||
        { mkdir -p /work/main /work/shared/data && ln -sfn "$C/shared/data/golden" /work/shared/data/golden; }
      timeout 300 "$B/engine_cuda_test" --gtest_color=no > "$OUT/engine_test.txt" 2>&1
      echo "engine_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/engine_test.txt" | tr '\n' ' ')"
      grep -E '^\[  FAILED|relL2' "$OUT/engine_test.txt" | head -60 ;;
    ab)
      for rep in a b; do
        for f in "" "${K3_AB_FLAG:?K3_AB_FLAG: the flag the A/B adds}"; do
          late "ab $rep $f" && continue
          tag=ab_${rep}${f:+_flag}
          timeout 150 "$B/k3_cuda_decode_bench" $S --layers 8 --batches 0 --prefill 4096 --chunk 4096 $f > "$OUT/$tag.txt" 2>&1
          echo "## $tag ($f) rc=$?"
          grep -E '^\| [0-9]' "$OUT/$tag.txt"
        done
      done ;;
    kernels)
      late kernels && continue
      K3_PREFILL=4096 K3_NCU_WHAT="--metrics gpu__time_duration.sum" K3_BENCH_EXTRA=--int8-experts K3_PROFILE_TAG=pp_ \
        timeout 200 bash "$(dirname "$0")/decode_profile.sh" | head -40 ;;
    ncu)
      late ncu && continue
      timeout 200 ncu --kernel-name "regex:${K3_NCU_KERNEL:-KdaChunked}" --launch-skip "${K3_NCU_SKIP:-3}" --launch-count 1 \
        --set full -o "$OUT/ncu_rep" "$B/k3_cuda_decode_bench" $S --layers 4 --batches 0 --prefill 4096 \
        --chunk 4096 > "$OUT/ncu_run.txt" 2>&1
      echo "ncu rc=$?"; tail -3 "$OUT/ncu_run.txt"
      ncu -i "$OUT/ncu_rep.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
      # Per-SASS-instruction samples (stall reasons by instruction), for reading here.
      ncu -i "$OUT/ncu_rep.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_sass.csv" 2>&1
      grep -E "Duration|Throughput|Issue Slots|Warp Cycles|Bank|Executed Ipc|Registers|Occupancy|Stall|L2 Hit|Compute \(SM\)|Block Limit|Shared Memory Configuration Size" \
        "$OUT/ncu_details.txt" | head -50 ;;
    *) echo "unknown phase $phase (tests, ab, kernels, ncu)"; exit 2 ;;
  esac
done
echo "### done in $(( $(date +%s) - T0 )) s"
