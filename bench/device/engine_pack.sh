#!/usr/bin/env bash
# Packs .k3carry for bench/device/engine_run.sh: the GPU engine's binaries from BUILD (default
# build/cuda), the non-system libraries they load, and the golden data (K3_SHARED_DIR).
set -euo pipefail
BUILD=${1:-build/cuda}
SHARED=${K3_SHARED_DIR:-../shared}
grep -qx '/.k3carry/' .git/info/exclude || echo '/.k3carry/' >> .git/info/exclude
rm -rf .k3carry && mkdir -p .k3carry/shared/data/golden
if [ "${WITH_BINARIES:-0}" = 1 ]; then
mkdir -p .k3carry/bin .k3carry/lib
for b in engine_cuda_test k3_cuda_decode_bench; do cp "$BUILD/bin/$b" .k3carry/bin/ && strip .k3carry/bin/$b; done
for b in .k3carry/bin/*; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u | grep -E 'absl|spdlog|fmt|gtest|yaml' | \
  while read -r l; do cp -L "$l" .k3carry/lib/; done
fi
for f in k3-golden-a.gguf prompts-a.txt ref-a.p0.f32 ref-a.p1.f32 ref-a.p2.f32 ref-a.p3.f32; do
  cp "$SHARED/data/golden/$f" .k3carry/shared/data/golden/
done
du -sh .k3carry .k3carry/*
