#!/usr/bin/env bash
# One device call for a prefill change: the golden engine tests, an A/B of PP4096 on the real-width
# 8-layer slice (the default and variants with flags added, K3_AB), the per-kernel
# times of a PP4096 prefill (4 layers) and Nsight Compute on one launch of a chosen kernel.
#   here:  WITH_BINARIES=1 bash bench/device/engine_pack.sh          (-> .k3carry, ~59 MiB; carry it)
#          (BINS="engine_cuda_test k3_cuda_decode_bench kernels_cuda_test": the kernel tests too)
#   there: K3_AB=';--fused-prefill-residual' bash bench/device/prefill_session_run.sh tests ab kernels ncu
# K3_KERNELS_EXTRA: bench flags for the kernels phase. K3_NCU_KERNEL: the kernel for `ncu` (regex, default KdaChunked), K3_NCU_SKIP: launches skipped
# first (default 3: the warm-up prefill's). Each phase is skipped once K3_GUARD_S seconds (default
# 500) have passed. Outputs under $OUT (few files: the device tool returns a limited number):
# engine_test.txt, kernel_test.txt, ab.txt, pp_kernels_by_time.txt, pp_ncu_step.txt, ncu_details.txt,
# ncu_sass.csv.
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
      if [ -x "$B/kernels_cuda_test" ]; then  # K3_KERNEL_FILTER: the kernel tests to run too
        timeout 120 "$B/kernels_cuda_test" --gtest_color=no --gtest_filter="${K3_KERNEL_FILTER:-*}" > "$OUT/kernel_test.txt" 2>&1
        echo "kernels_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/kernel_test.txt" | tr '\n' ' ')"
        grep -E '^\[  FAILED|gemm accuracy' "$OUT/kernel_test.txt" | head -20
      fi
      timeout 300 "$B/engine_cuda_test" --gtest_color=no > "$OUT/engine_test.txt" 2>&1
      echo "engine_cuda_test rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/engine_test.txt" | tr '\n' ' ')"
      grep -E '^\[  FAILED|relL2' "$OUT/engine_test.txt" | head -60 ;;
    ab)  # K3_AB: the variants' extra flags, ';'-separated ("" is the default), run in that order;
         # a variant starting "base:" runs k3_cuda_decode_bench_base (an earlier build, packed too)
      IFS=';' read -r -a variants <<< "${K3_AB:?K3_AB: the variants, e.g. ';--flag;'}"
      i=0
      for f in "${variants[@]}"; do
        i=$((i + 1))
        late "ab $i ($f)" && continue
        bin=k3_cuda_decode_bench
        if [ "${f#base:}" != "$f" ]; then bin=k3_cuda_decode_bench_base; f=${f#base:}; fi
        timeout 150 "$B/$bin" $S --layers 8 --batches 0 --prefill 4096 --chunk 4096 $f > /tmp/ab.txt 2>&1
        echo "## ab_$i ($bin $f) rc=$?" | tee -a "$OUT/ab.txt"
        cat /tmp/ab.txt >> "$OUT/ab.txt"
        grep -E '^\| [0-9]' /tmp/ab.txt
      done ;;
    kernels)
      late kernels && continue
      K3_PREFILL=4096 K3_NCU_WHAT="--metrics gpu__time_duration.sum" K3_BENCH_EXTRA="--int8-experts ${K3_KERNELS_EXTRA:-}" K3_PROFILE_TAG=pp_ \
        timeout 200 bash "$(dirname "$0")/decode_profile.sh" | head -40 ;;
    ncu)
      late ncu && continue
      timeout 200 ncu --kernel-name "regex:${K3_NCU_KERNEL:-KdaChunked}" --launch-skip "${K3_NCU_SKIP:-3}" --launch-count 1 \
        --set full -o /tmp/ncu_rep "$B/k3_cuda_decode_bench" $S --layers 4 --batches 0 --prefill 4096 \
        --chunk 4096 > "$OUT/ncu_run.txt" 2>&1
      echo "ncu rc=$?"; tail -3 "$OUT/ncu_run.txt"; rm -f "$OUT/ncu_run.txt"
      ncu -i /tmp/ncu_rep.ncu-rep --page details > "$OUT/ncu_details.txt" 2>&1
      # Per-SASS-instruction samples (stall reasons by instruction), for reading here.
      ncu -i /tmp/ncu_rep.ncu-rep --page source --csv --print-source sass > "$OUT/ncu_sass.csv" 2>&1
      grep -E "Duration|Throughput|Issue Slots|Warp Cycles|Bank|Executed Ipc|Registers|Occupancy|Stall|L2 Hit|Compute \(SM\)|Block Limit|Shared Memory Configuration Size" \
        "$OUT/ncu_details.txt" | head -50 ;;
    *) echo "unknown phase $phase (tests, ab, kernels, ncu)"; exit 2 ;;
  esac
done
echo "### done in $(( $(date +%s) - T0 )) s"
