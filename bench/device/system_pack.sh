#!/usr/bin/env bash
# Packs .k3sys for bench/device/system_run.sh (golden model) and system_slice_run.sh (synthetic
# slice): the whole system on GPUs (k3-worker --backend cuda built with gRPC, the CPU-built
# k3-coordinator, k3 client and k3_grpc_rtt_bench), the Debian libraries the GPU image lacks (gRPC and its
# Abseil/re2/c-ares/upb, protobuf, spdlog, fmt, cpp-httplib, pcre2; never Open MPI, NCCL or the
# CUDA runtime: the image's own are used), the golden model, and the synthetic model's metadata.
#   bash bench/device/system_pack.sh [CUDA_BUILD=build/cuda] [CPU_BUILD=build/full]
# Environment:
#   K3_SYS_GOLDEN=0        leave the golden model (37 MB of the 64 MiB carry) out
#   K3_SYS_SYNTH=slice     the synthetic preset whose metadata the coordinator reads (written here
#                          with k3-synth --header-only, 15 KiB: the ranks fill the weights on their
#                          GPUs from the seed); empty: none
#   K3_SYS_SYNTH_SEED=1 K3_SYS_SYNTH_QUANT=UD-IQ1_S   must match system_slice_run.sh's K3_SEED/K3_QUANT
#   K3_SYS_SYNTH_WEIGHTS=1 the weights too (a small preset for the CPU backend, which cannot fill
#                          a synthetic model in memory: the local run of system_slice_run.sh)
#   K3_SYS_DIR=.k3sys      where to pack (another directory for a local run leaves .k3sys alone)
# The synthetic file is .k3sys/synth/PRESET-seedSEED-QUANT.gguf, with k3-synth's summary beside it
# (.txt: vocabulary and context length, read by the run script).
set -euo pipefail
CUDA_BUILD=${1:-build/cuda}
CPU_BUILD=${2:-build/full}
SHARED=${K3_SHARED_DIR:-../shared}
GOLDEN=${K3_SYS_GOLDEN:-1}
SYNTH=${K3_SYS_SYNTH-slice}
SEED=${K3_SYS_SYNTH_SEED:-1}
QUANT=${K3_SYS_SYNTH_QUANT:-UD-IQ1_S}
D=${K3_SYS_DIR:-.k3sys}
[ "$D" = .k3sys ] && { grep -qx '/.k3sys/' .git/info/exclude || echo '/.k3sys/' >> .git/info/exclude; }
rm -rf "$D" && mkdir -p "$D/bin" "$D/lib"
cp "$CUDA_BUILD/bin/k3-worker" "$D/bin/k3-worker"
cp "$CPU_BUILD/bin/k3-coordinator" "$CPU_BUILD/bin/k3" "$D/bin/"
# The step RPC alone (system_slice_run.sh runs it when it is there).
[ -f "$CPU_BUILD/bin/k3_grpc_rtt_bench" ] && cp "$CPU_BUILD/bin/k3_grpc_rtt_bench" "$D/bin/"
for b in "$D"/bin/*; do strip "$b"; done
for b in "$D"/bin/*; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u |
  grep -E 'absl|spdlog|fmt|grpc|gpr|upb|protobuf|address_sorting|re2|cares|httplib|pcre2' |
  while read -r l; do cp -L "$l" "$D/lib/"; done
xz -T1 -6 -f "$D"/bin/*
if [ "$GOLDEN" != 0 ]; then
  mkdir -p "$D/golden"
  cp "$SHARED/data/golden/k3-golden-a.gguf" "$D/golden/"
fi
if [ -n "$SYNTH" ]; then
  mkdir -p "$D/synth"
  name=$D/synth/$SYNTH-seed$SEED-$QUANT
  header=(--header-only)
  [ "${K3_SYS_SYNTH_WEIGHTS:-0}" = 1 ] && header=()
  "$CPU_BUILD/bin/k3-synth" --preset "$SYNTH" --seed "$SEED" --quant "$QUANT" --shards 1 "${header[@]}" --quiet \
    -o "$name.gguf" > "$name.txt"
fi
du -sh "$D" "$D"/*
