#!/usr/bin/env bash
# Packs .k3carry for bench/device/tp_run.sh (the GPU engine over 1 and 2 GPUs): the binaries
# built HERE in BUILD (default build/cuda, configured with K3_WITH_CUDA=ON K3_WITH_MPI=ON
# -DMPI_CXX_SKIP_MPICXX=ON, so they load only libmpi.so.40, the GPU image's own Open MPI),
# stripped and xz-compressed, the Debian libraries they need that the image lacks (Abseil,
# spdlog, fmt; never Open MPI or NCCL: the image's own are used), and the golden data.
#   cmake --build build/cuda -j1 --target engine_cuda_tp_test engine_cuda_test k3_cuda_decode_bench k3-worker kernels_cuda_test
#   (BINS="..." packs another set)
#   bash bench/device/tp_pack.sh
set -euo pipefail
BUILD=${1:-build/cuda}
SHARED=${K3_SHARED_DIR:-../shared}
grep -qx '/.k3carry/' .git/info/exclude || echo '/.k3carry/' >> .git/info/exclude
rm -rf .k3carry/bin .k3carry/lib && mkdir -p .k3carry/bin .k3carry/lib .k3carry/shared/data/golden
BINS=${BINS:-"engine_cuda_tp_test engine_cuda_test k3_cuda_decode_bench k3-worker kernels_cuda_test"}
for b in $BINS; do
  strip -o .k3carry/bin/$b "$BUILD/bin/$b"
  xz -T2 -9e -f .k3carry/bin/$b
done
for b in $BINS; do ldd "$BUILD/bin/$b"; done | awk '/=>/ {print $3}' | sort -u | grep -E 'absl|spdlog|fmt' | \
  while read -r l; do cp -L "$l" .k3carry/lib/; done
for f in k3-golden-a.gguf prompts-a.txt ref-a.p0.f32 ref-a.p1.f32 ref-a.p2.f32 ref-a.p3.f32; do
  [ -f .k3carry/shared/data/golden/$f ] || cp "$SHARED/data/golden/$f" .k3carry/shared/data/golden/
done
du -sh .k3carry .k3carry/*
