#!/usr/bin/env bash
# Packs binaries built HERE (build/cuda/bin) for a device run (unpacked there by k3_unpack_carry,
# unpack_carry.sh): DIR/bin/NAME.xz (stripped) and the
# non-system libraries they load in DIR/lib (the device has CUDA, NCCL and Open MPI, not Abseil,
# spdlog, fmt or GoogleTest). DIR is git-ignored (.git/info/exclude) and replaced; carry it.
#   bash bench/device/pack_bins.sh .k3kern kernels_cuda_test k3_cuda_gemv_bench
set -euo pipefail
dir=${1:?DIR}; shift
[ $# -gt 0 ] || { echo "pack_bins.sh DIR BIN..." >&2; exit 2; }
grep -qx "/$dir/" .git/info/exclude || echo "/$dir/" >> .git/info/exclude
rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib"
for b in "$@"; do strip -o "$dir/bin/$b" "build/cuda/bin/$b"; done
for b in "$dir"/bin/*; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u | grep -E 'absl|spdlog|fmt|gtest|gomp' |
  while read -r l; do cp -L "$l" "$dir/lib/"; done
xz -T2 -9 -f "$dir"/bin/*
du -sh "$dir"
