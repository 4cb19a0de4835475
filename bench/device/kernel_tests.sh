#!/usr/bin/env bash
# Builds, checks and times k3_kernels_cuda on the GPU machine (the `device` tool), in one call:
#   bash bench/device/kernel_tests.sh
# carrying `.device` (made here by `bash ../shared/device/deps.sh` plus
# `cd .device/debs && apt-get download libabsl-dev libspdlog-dev libfmt-dev libgtest-dev`).
# The device image lacks Abseil, which the top-level CMakeLists finds (REQUIRED): its Debian
# packages are unpacked into /opt/k3deps and found through CMAKE_PREFIX_PATH (nothing here links
# it; configure needs it). spdlog, fmt and GoogleTest come from the image when it has them.
# Writes under $OUT (default ./device-out): kernel_tests.log (everything), gemv_bench.csv,
# sanitizer.log, sass_q8_0.txt. Prints a summary last.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
LOG="$OUT/kernel_tests.log"
exec > >(tee "$LOG") 2>&1
JOBS=$(nproc)
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv || true
nvcc --version | tail -2; cmake --version | head -1; gcc --version | head -1

stamp "dependencies"
PREFIX=/opt/k3deps
rm -rf $PREFIX /opt/k3deps-fallback build-dev/CMakeCache.txt  # a warm machine may hold an earlier try
mkdir -p $PREFIX
for f in .device/debs/libabsl*.deb; do dpkg -x "$f" $PREFIX; done
# spdlog, fmt, GoogleTest (with gmock): the image's own (Debian's libgtest-dev lacks gmock).
# Debian's spdlog/fmt are a fallback in a second prefix, used only if configure cannot find them.
FALLBACK=/opt/k3deps-fallback
mkdir -p $FALLBACK
for f in .device/debs/libspdlog*.deb .device/debs/libfmt*.deb; do dpkg -x "$f" $FALLBACK; done
export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

stamp "configure"
timeout 180 cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_WITH_CUDA=ON -DK3_WITH_GRPC=OFF \
  -DK3_WITH_MPI=OFF -DK3_WITH_COORDINATOR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_CUDA_COMPILER=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc) "-DCMAKE_PREFIX_PATH=$PREFIX/usr;/usr;/usr/local;$FALLBACK/usr" \
  > "$OUT/configure.txt" 2>&1
rc=$?; tail -5 "$OUT/configure.txt"
[ $rc -eq 0 ] || { cat "$OUT/configure.txt"; stamp "CONFIGURE FAILED"; exit 1; }

stamp "build"
timeout 420 cmake --build build-dev -j "$JOBS" --target kernels_cuda_test k3_cuda_gemv_bench 2>&1 | grep -v '^\[' | tail -40
[ -x build-dev/bin/kernels_cuda_test ] && [ -x build-dev/bin/k3_cuda_gemv_bench ] || { stamp "BUILD FAILED"; exit 1; }

stamp "tests"
timeout 300 build-dev/bin/kernels_cuda_test --gtest_color=no 2>&1 | tee "$OUT/tests.txt" | grep -E '^\[ *(RUN|OK|FAILED|PASSED|SKIPPED) *\]|Failure|error|Expected|got|elements out' | head -300
TEST_RC=${PIPESTATUS[0]}

stamp "compute-sanitizer memcheck (subset)"
SAN_FILTER='QuantGemvTest.GoldenModelShapes:QuantGemvTest.RejectsBadArguments:CudaMlaDecodeTest.FewHeadsOddPages:CudaKdaTest.DecodeOtherShapes:CudaShortConvTest.DecodeOtherTaps:CudaResidualMixTest.*:CudaMoeRouterTest.SoftmaxAndSmallShapes:CudaNormTest.L2PerHead:CudaActivationTest.SituInPlace'
timeout 240 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
  build-dev/bin/kernels_cuda_test --gtest_filter="$SAN_FILTER" --gtest_color=no > "$OUT/sanitizer.log" 2>&1
SAN_RC=$?
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log" | tail -5
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 \
  build-dev/bin/kernels_cuda_test --gtest_filter='CudaMlaDecodeTest.FewHeadsOddPages:CudaKdaTest.DecodeOtherShapes:CudaMoeRouterTest.SoftmaxAndSmallShapes:QuantGemvTest.GoldenModelShapes' \
  --gtest_color=no >> "$OUT/sanitizer.log" 2>&1
RACE_RC=$?
grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/sanitizer.log" | tail -3

stamp "gemv bench"
timeout 300 build-dev/bin/k3_cuda_gemv_bench "$OUT/gemv_bench.csv" 2>&1 | tee "$OUT/bench.txt"

stamp "sass of the Q8_0 M=1 GEMV (load widths)"
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass -fun '_ZN2k34cuda5qgemv15QuantGemvKernelINS1_7FmtQ8_0ELi1EEEvNS1_4ArgsE' \
    build-dev/kernels/cuda/libk3_kernels_cuda.a > "$OUT/sass_q8_0.txt" 2>&1 || true
  cuobjdump -sass -fun '_ZN2k34cuda5qgemv15QuantGemvKernelINS1_8FmtIQ1_SELi1EEEvNS1_4ArgsE' \
    build-dev/kernels/cuda/libk3_kernels_cuda.a > "$OUT/sass_iq1_s.txt" 2>&1 || true
  echo "-- IQ1_S M=1:"
  grep -oE '(LDGSTS|LDG|LDS|STS|LDL|STL|PRMT|FFMA|FADD|FMUL|I2F|F2F|HADD2\.F32)[.A-Z0-9]*' "$OUT/sass_iq1_s.txt" | sort | uniq -c | sort -rn | head -14
  echo "-- Q8_0 M=1:"
  grep -oE '(LDGSTS|LDG|LDS|STS|PRMT|FFMA|FADD|I2F|F2F|HADD2\.F32)[.A-Z0-9]*' "$OUT/sass_q8_0.txt" | sort | uniq -c | sort -rn | head -20
fi

stamp "summary"
echo "tests: rc=$TEST_RC  $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/tests.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$OUT/tests.txt" | head -20
echo "memcheck rc=$SAN_RC racecheck rc=$RACE_RC"
echo "gemv (median single launch / back-to-back, vs 4.4 TB/s):"
grep -E 'GB/s' "$OUT/bench.txt" | sed -E 's/ +/ /g' | cut -c1-200
stamp "done"
