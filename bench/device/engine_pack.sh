#!/usr/bin/env bash
# Packs .k3carry for bench/device/engine_run.sh: the GPU engine's binaries from BUILD (default
# build/cuda; with WITH_BINARIES=1, xz-packed), the non-system libraries they load, and the golden data
# (K3_SHARED_DIR): ~59 MiB with both binaries. BINS=engine_cuda_test packs the test alone
# (engine_run.sh then skips the bench).
set -euo pipefail
BUILD=${1:-build/cuda}
SHARED=${K3_SHARED_DIR:-../shared}
grep -qx '/.k3carry/' .git/info/exclude || echo '/.k3carry/' >> .git/info/exclude
rm -rf .k3carry && mkdir -p .k3carry/shared/data/golden
if [ "${WITH_BINARIES:-0}" = 1 ]; then
mkdir -p .k3carry/bin .k3carry/lib
for b in ${BINS:-engine_cuda_test k3_cuda_decode_bench}; do strip -o .k3carry/bin/$b "$BUILD/bin/$b"; done
for b in .k3carry/bin/*; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u | grep -E 'absl|spdlog|fmt|gtest|yaml' | \
  while read -r l; do cp -L "$l" .k3carry/lib/; done
# One tar.xz: the binaries share most of their bytes (the kernels), which xz's 64 MiB window
# finds across files (both: ~108 MB -> ~9 MB, against ~17 MB packed one by one). Carry limit 64 MiB.
(cd .k3carry/bin && tar -cf - * | xz -9 -c > ../bins.tar.xz && rm -f ./*) && mv .k3carry/bins.tar.xz .k3carry/bin/
fi
for f in k3-golden-a.gguf prompts-a.txt ref-a.p{0,1,2,3}.f32 llamacpp-a.p{0,1,2,3}.f32; do  # llamacpp-a: the *AtLeastAsCloseAsLlamaCpp bars
  cp "$SHARED/data/golden/$f" .k3carry/shared/data/golden/
done
du -sh .k3carry .k3carry/*
