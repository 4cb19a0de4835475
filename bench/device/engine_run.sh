#!/usr/bin/env bash
# Builds and runs the GPU engine's tests and decode benchmark on the GPU machine (the `device`
# tool), in one call:   bash bench/device/engine_run.sh          (carry: .device, .k3carry)
# .k3carry (git-ignored) is made here by bench/device/engine_pack.sh: shared/data/golden (the
# golden model, prompts and ref-a logits), and optionally bin/ + lib/ (binaries built here; then
# nothing is built there). Without bin/, the targets are built there as in kernel_tests.sh
# (Abseil from .device/debs).
# K3_SKIP_TESTS=1 / K3_SKIP_BENCH=1 leave a part out.
# Writes under $OUT: engine_test.txt, bench.txt, run.log. Prints a summary last.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
C=$PWD/.k3carry
export LD_LIBRARY_PATH=$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
stamp machine
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv || true
if [ -e "$C/bin/bins.tar.xz" ]; then  # engine_pack.sh WITH_BINARIES=1
  source "$(dirname "$0")/unpack_carry.sh"
  k3_unpack_carry "$C" "$C/bin" || exit 1
fi
if [ ! -x "$C/bin/engine_cuda_test" ]; then
  stamp "build there"
  PREFIX=/opt/k3deps
  rm -rf $PREFIX build-dev/CMakeCache.txt && mkdir -p $PREFIX
  for f in .device/debs/libabsl*.deb; do dpkg -x "$f" $PREFIX; done
  export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
  timeout 180 cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_WITH_CUDA=ON -DK3_WITH_GRPC=OFF \
    -DK3_WITH_MPI=OFF -DK3_WITH_COORDINATOR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DK3_SHARED_DIR=$C/shared \
    -DCMAKE_CUDA_COMPILER=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc) "-DCMAKE_PREFIX_PATH=$PREFIX/usr;/usr;/usr/local" \
    > "$OUT/configure.txt" 2>&1 || { tail -30 "$OUT/configure.txt"; stamp "CONFIGURE FAILED"; exit 1; }
  timeout 480 cmake --build build-dev -j "$(nproc)" --target engine_cuda_test k3_cuda_decode_bench 2>&1 | grep -v '^\[' | tail -40
  mkdir -p "$C/bin" && cp build-dev/bin/engine_cuda_test build-dev/bin/k3_cuda_decode_bench "$C/bin/" || { stamp "BUILD FAILED"; exit 1; }
else
  # Built here with K3_SHARED_DIR=/work/main/../shared: give that path the carried data.
  [ -e /work/shared/data/golden/k3-golden-a.gguf ] || { mkdir -p /work/main /work/shared/data && ln -sfn "$C/shared/data/golden" /work/shared/data/golden; }
fi
ldd "$C/bin/engine_cuda_test" | grep -i "not found" && echo "MISSING LIBRARIES"

stamp "engine tests"
if [ "${K3_SKIP_TESTS:-0}" = 1 ]; then echo skipped > "$OUT/engine_test.txt"; TEST_RC=0; else
timeout 240 "$C/bin/engine_cuda_test" --gtest_color=no 2>&1 | tee "$OUT/engine_test.txt" | grep -vE '^\[ *RUN'
TEST_RC=${PIPESTATUS[0]}; fi

stamp "decode bench: slice ${K3_BENCH_LAYERS:-4} layers"
if [ ! -x "$C/bin/k3_cuda_decode_bench" ] || [ "${K3_SKIP_BENCH:-0}" = 1 ]; then echo "skipped" > "$OUT/bench.txt"; BENCH_RC=0; else
timeout ${K3_BENCH_TIMEOUT:-300} "$C/bin/k3_cuda_decode_bench" --preset slice --layers ${K3_BENCH_LAYERS:-4} --quant UD-IQ1_S \
  --ctx ${K3_BENCH_CTX:-4096} --batches ${K3_BENCH_BATCHES:-1,2,4,8} --steps 32 2>&1 | tee "$OUT/bench.txt"
BENCH_RC=${PIPESTATUS[0]}; fi

stamp summary
echo "engine tests rc=$TEST_RC: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/engine_test.txt" | tr '\n' ' ')"
grep -E 'relL2|graphs captured' "$OUT/engine_test.txt" | head -40
echo "bench rc=$BENCH_RC"
grep -E '^\||^prefill|^weights' "$OUT/bench.txt"
stamp done
