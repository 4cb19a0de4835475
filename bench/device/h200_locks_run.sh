#!/usr/bin/env bash
# The one-GPU lock slots of bench/baselines.lock (K3SLICE8_IQ1S_H200X1_*: prefill PP4096, PP8192,
# PP32K; int8-expert tensor-core decode at 4k b1..b256, 8k b16/b64/b256, 128k b1) in one device
# call, the real-width 8-layer slice, UD-IQ1_S. Meant for an H200: the 8192/16384-row prefill
# chunks do not fit an 80 GB H100 beside the slice's 48.6 GB of weights (the script says which GPU
# ran; only an H200's figures may raise H200 slots). Binaries built HERE in build/cuda:
#   here:   bash bench/device/h200_locks_run.sh pack          (-> .k3kern; carry it)
#   there:  bash bench/device/h200_locks_run.sh [prefill] [decode] [small] [long] [tern]
#           (default: prefill decode long; small: decode batches 1-64 only; tern: ternary experts)
# Each run's output in $OUT/<tag>.txt; its table rows and prefill line printed. A run is skipped
# once K3_GUARD_S seconds (default 480) have passed, to stay inside one call's 600.
set -uo pipefail
if [ "${1:-}" = pack ]; then
  exec bash bench/device/pack_bins.sh .k3kern k3_cuda_decode_bench
fi
PHASES=${*:-prefill decode long}
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=/tmp/k3kern
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "${K3_CARRY:-$PWD/.k3kern}" "$B" || exit 1  # K3_CARRY: another pack with the bench (engine_pack.sh's)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
T0=$(date +%s)
S="--preset slice --layers 8 --quant UD-IQ1_S --int8-experts ${K3_LOCK_EXTRA:-}"  # K3_LOCK_EXTRA: flags for every run
run() {  # run TAG ARGS...
  if [ $(( $(date +%s) - T0 )) -gt "${K3_GUARD_S:-480}" ]; then echo "### $1: skipped (time)"; return; fi
  local s=$(date +%s)
  echo "### $1: ${*:2}"
  timeout "${K3_RUN_S:-200}" "$B/k3_cuda_decode_bench" $S "${@:2}" > "$OUT/$1.txt" 2>&1
  echo "rc=$? ($(( $(date +%s) - s )) s)"
  grep -E "^\| [0-9]+ \| [0-9]+ \||^prefill:|out of memory" "$OUT/$1.txt" | head -14
}
for phase in $PHASES; do
  case $phase in
    prefill)
      run pp_4k_8k_a --batches 0 --prefill 4096,8192 --chunk 8192
      run pp_4k_8k_b --batches 0 --prefill 4096,8192 --chunk 8192
      run pp_32k --batches 0 --prefill 32768 --chunk 16384 ;;
    decode)
      run dec_4k_b1_64 --steps 32 --ctx 4096 --batches 1,4,16,32,48,64
      run dec_4k_b128_256 --steps 16 --ctx 4096 --batches 128,256
      run dec_8k --steps 16 --ctx 8192 --batches 16,64,256 ;;
    long)
      run dec_128k_b1 --steps 16 --ctx 131072 --batches 1
      run dec_32k_b16 --steps 16 --ctx 32768 --batches 16 ;;
    small)  # the batches up to 64 only (the 128/256 and 8k runs prefill 1-2M tokens first)
      run dec_4k_b1_64 --steps 32 --ctx 4096 --batches 1,4,16,32,48,64 ;;
    tern)  # the experts in their ternary form (CudaEngineOptions::ternary_experts; 66.9 GB of
           # weights at 8 layers: an H200), batch 1-64 at 4k and batch 1 at 128k
      run dec_4k_tern --steps 32 --ctx 4096 --batches 1,16,64 --ternary-experts
      run dec_128k_b1_tern --steps 16 --ctx 131072 --batches 1 --ternary-experts ;;
    *) echo "unknown phase $phase (prefill, decode, small, long, tern)"; exit 2 ;;
  esac
done
