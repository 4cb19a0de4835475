#!/usr/bin/env bash
# Builds, checks and times the tensor-core prefill GEMM (kernels/cuda/quant_gemm/) on the GPU
# machine (the `device` tool), in one call:
#   bash bench/device/gemm_tests.sh
# carrying `.device` (see bench/device/kernel_tests.sh: Abseil's Debian packages, unpacked into
# /opt/k3deps, found through CMAKE_PREFIX_PATH). With K3_PREBUILT=<dir> (binaries built on the CPU
# machine and carried, e.g. build/gemm/bin) it skips configure and build.
# Writes under $OUT (default ./device-out): gemm_tests.log (everything), gemm_tests.txt (gtest),
# gemm_bench.csv, gemm_sanitizer.log, gemm_sass.txt. Prints a summary last.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
LOG="$OUT/gemm_tests.log"
exec > >(tee "$LOG") 2>&1
JOBS=$(nproc)
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv || true
nvcc --version | tail -2; cmake --version | head -1; gcc --version | head -1

stamp "dependencies"
PREFIX=/opt/k3deps
FALLBACK=/opt/k3deps-fallback
if [ ! -f $PREFIX/.gemm_done ]; then
  rm -rf $PREFIX $FALLBACK
  mkdir -p $PREFIX $FALLBACK
  for f in .device/debs/libabsl*.deb; do dpkg -x "$f" $PREFIX; done
  for f in .device/debs/libspdlog*.deb .device/debs/libfmt*.deb; do dpkg -x "$f" $FALLBACK; done
  touch $PREFIX/.gemm_done
fi
export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

if [ -n "${K3_PREBUILT:-}" ]; then
  BIN=$K3_PREBUILT
  stamp "prebuilt binaries from $BIN"
else
  BIN=build-dev/bin
  stamp "configure"
  rm -f build-dev/CMakeCache.txt
  timeout 180 cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_WITH_CUDA=ON -DK3_WITH_GRPC=OFF \
    -DK3_WITH_MPI=OFF -DK3_WITH_COORDINATOR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_COMPILER=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc) "-DCMAKE_PREFIX_PATH=$PREFIX/usr;/usr;/usr/local;$FALLBACK/usr" \
    > "$OUT/configure.txt" 2>&1
  rc=$?; tail -3 "$OUT/configure.txt"
  [ $rc -eq 0 ] || { cat "$OUT/configure.txt"; stamp "CONFIGURE FAILED"; exit 1; }
  stamp "build"
  timeout 480 cmake --build build-dev -j "$JOBS" --target kernels_cuda_test k3_cuda_gemm_bench 2>&1 | grep -v '^\[' | tail -40
fi
[ -x $BIN/kernels_cuda_test ] && [ -x $BIN/k3_cuda_gemm_bench ] || { stamp "BUILD FAILED (no binaries in $BIN)"; exit 1; }

stamp "tests"
timeout 420 $BIN/kernels_cuda_test --gtest_filter='*Gemm*:*MoeGroup*' --gtest_color=no 2>&1 | tee "$OUT/gemm_tests.txt" |
  grep -E '^\[ *(RUN|OK|FAILED|PASSED|SKIPPED) *\]|Failure|error|Expected|got|out of tolerance|gemm accuracy' | head -300
TEST_RC=${PIPESTATUS[0]}

stamp "gemm bench"
timeout 420 $BIN/k3_cuda_gemm_bench "$OUT/gemm_bench.csv" 2>&1 | tee "$OUT/gemm_bench.txt"

stamp "compute-sanitizer (small cases)"
SAN_RC=skipped; RACE_RC=skipped
if command -v compute-sanitizer >/dev/null && [ "${K3_SKIP_SANITIZER:-0}" != 1 ]; then
  timeout 240 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
    $BIN/kernels_cuda_test --gtest_filter='QuantGemmTest.OddWidthsAndTinyShapes:QuantGemmTest.GroupedEdgeCases:QuantGemmTest.RejectsBadArguments:MoeGroupTest.AllChoicesOnOneExpert:MoeGroupTest.CombineMatchesCpuBitForBit:MoeGroupTest.RejectsBadArguments' \
    --gtest_color=no > "$OUT/gemm_sanitizer.log" 2>&1
  SAN_RC=$?
  grep -E "ERROR SUMMARY" "$OUT/gemm_sanitizer.log" | tail -2
  timeout 180 compute-sanitizer --tool racecheck --error-exitcode 3 \
    $BIN/kernels_cuda_test --gtest_filter='QuantGemmTest.GroupedEdgeCases:MoeGroupTest.AllChoicesOnOneExpert' \
    --gtest_color=no >> "$OUT/gemm_sanitizer.log" 2>&1
  RACE_RC=$?
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/gemm_sanitizer.log" | tail -2
fi

stamp "sass of the Q8_0 and IQ1_S GEMM kernels"
if command -v cuobjdump >/dev/null; then
  LIB=$( [ -n "${K3_PREBUILT:-}" ] && echo $BIN/kernels_cuda_test || echo build-dev/kernels/cuda/libk3_kernels_cuda.a )
  : > "$OUT/gemm_sass.txt"
  for k in '_ZN2k34cuda5qgemm15QuantGemmKernelINS0_5qgemv7FmtQ8_0ELi128ELb0EEEvNS1_4ArgsE' \
           '_ZN2k34cuda5qgemm15QuantGemmKernelINS0_5qgemv8FmtIQ1_SELi64ELb0EEEvNS1_4ArgsE'; do
    cuobjdump -sass -fun "$k" "$LIB" > /tmp/k.sass 2>&1 || true
    echo "-- $k" | tee -a "$OUT/gemm_sass.txt"
    grep -oE '(HMMA|LDSM|LDGSTS|LDG|LDS|STS|STG|LDL|STL|PRMT|FFMA|FADD|FMUL|F2FP|BAR)[.A-Z0-9]*' /tmp/k.sass |
      sort | uniq -c | sort -rn | head -16 | tee -a "$OUT/gemm_sass.txt"
  done
fi

stamp "summary"
echo "tests: rc=$TEST_RC  $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/gemm_tests.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$OUT/gemm_tests.txt" | head -20
grep -E 'gemm accuracy' "$OUT/gemm_tests.txt" | sort -t= -k2 -g | tail -3
echo "memcheck rc=$SAN_RC racecheck rc=$RACE_RC"
echo "gemm (mean of back-to-back launches):"
grep -E 'TFLOP/s|MoeGroupTokens' "$OUT/gemm_bench.txt" | sed -E 's/ +/ /g' | cut -c1-220
stamp "done"
