#!/usr/bin/env bash
# Builds, checks and times the tensor-core prefill GEMM (kernels/cuda/quant_gemm/) on the GPU
# machine (the `device` tool), in one call:
#   bash bench/device/gemm_tests.sh
# carrying `.device` (see bench/device/kernel_tests.sh: Abseil's Debian packages, unpacked into
# /opt/k3deps, found through CMAKE_PREFIX_PATH). With K3_PREBUILT=<dir> (binaries built on the CPU
# machine and carried) it skips configure and build; the binaries may be xz-compressed, as
#   here:   K3_BASE_BENCH=<an older k3_cuda_gemm_bench> bash bench/device/gemm_tests.sh pack
# leaves them (stripped, from build/gemm/bin) in .k3gemm/bin: then carry .device and .k3gemm and run
#   there:  K3_PREBUILT=.k3gemm/bin bash bench/device/gemm_tests.sh
# K3_BASE_BENCH's binary (k3_cuda_gemm_bench_base) times the expert products (K3_BASE_WHICH:
# its bench's mode, default experts) before a change, beside `k3_cuda_gemm_bench variants` (every
# decode x token tile) after it. K3_TEST_TIMEOUT bounds the gtest run (seconds, default 420);
# K3_NCU=1 adds an Nsight Compute profile of the T=4096 expert products (gemm_ncu.txt);
# K3_SKIP_SANITIZER=1 skips compute-sanitizer, K3_SAN_FILTER / K3_RACE_FILTER and
# K3_SAN_TIMEOUT / K3_RACE_TIMEOUT choose its memcheck and racecheck runs.
# Writes under $OUT (default ./device-out): gemm_tests.log (everything), gemm_tests.txt (gtest),
# gemm_bench.csv, gemm_bench.txt, gemm_variants.txt, gemm_bench_base.txt, gemm_sanitizer.log or
# gemm_ncu.txt, gemm_sass.txt. Prints a summary last.
set -uo pipefail
if [ "${1:-}" = pack ]; then
  grep -qx '/.k3gemm/' .git/info/exclude || echo '/.k3gemm/' >> .git/info/exclude
  rm -rf .k3gemm && mkdir -p .k3gemm/bin
  for b in kernels_cuda_test k3_cuda_gemm_bench; do strip -o .k3gemm/bin/$b build/gemm/bin/$b; done
  [ -n "${K3_BASE_BENCH:-}" ] && strip -o .k3gemm/bin/k3_cuda_gemm_bench_base "$K3_BASE_BENCH"
  xz -T2 -9e -f .k3gemm/bin/*
  du -sh .k3gemm
  exit 0
fi
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
  if ls "$BIN"/*.xz >/dev/null 2>&1; then  # packed here by `gemm_tests.sh pack`
    mkdir -p /tmp/k3gemm
    for f in "$BIN"/*.xz; do xz -dc "$f" > "/tmp/k3gemm/$(basename "$f" .xz)"; chmod +x "/tmp/k3gemm/$(basename "$f" .xz)"; done
    BIN=/tmp/k3gemm
  fi
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
# (Into the file first: a pipe that closed early, as `head` does, would stop the test run.)
timeout "${K3_TEST_TIMEOUT:-420}" $BIN/kernels_cuda_test --gtest_filter='*Gemm*:*MoeGroup*' --gtest_color=no \
  > "$OUT/gemm_tests.txt" 2>&1
TEST_RC=$?
grep -E '^\[ *(RUN|OK|FAILED|PASSED|SKIPPED) *\]|Failure|error|Expected|got|out of tolerance|iq1s f16' \
  "$OUT/gemm_tests.txt" | head -300

stamp "gemm bench"
timeout 420 $BIN/k3_cuda_gemm_bench "$OUT/gemm_bench.csv" 2>&1 | tee "$OUT/gemm_bench.txt"

stamp "expert products under every knob (decode x token tile)"
timeout 200 $BIN/k3_cuda_gemm_bench - variants 2>&1 | tee "$OUT/gemm_variants.txt" | grep -E 'TFLOP/s|routing'
if [ -x $BIN/k3_cuda_gemm_bench_base ]; then
  stamp "expert products, the base binary (before the change)"
  timeout 200 $BIN/k3_cuda_gemm_bench_base - "${K3_BASE_WHICH:-experts}" 2>&1 | tee "$OUT/gemm_bench_base.txt" |
    grep -E 'TFLOP/s|routing'
fi

if [ "${K3_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  stamp "ncu: the T=4096 expert products under each knob (uniform routing)"
  timeout 150 ncu --target-processes all -k regex:QuantGemmKernel --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section Occupancy \
    $BIN/k3_cuda_gemm_bench - profile 4096 > "$OUT/gemm_ncu.txt" 2>&1
  echo "ncu rc=$?"
  grep -E 'QuantGemmKernel|Duration|Compute \(SM\) Throughput|L1/TEX Cache Throughput|Shared|Bank|Stall|Warp Cycles Per Issued|Achieved Occupancy|Issue Slots Busy|expert' \
    "$OUT/gemm_ncu.txt" | cut -c1-200 | head -120
fi

stamp "sass of the Q8_0 and IQ1_S GEMM kernels (IQ1_S: f16 decode 64 and 128 tokens, generic 64)"
if command -v cuobjdump >/dev/null; then
  LIB=$( [ -n "${K3_PREBUILT:-}" ] && echo $BIN/kernels_cuda_test || echo build-dev/kernels/cuda/libk3_kernels_cuda.a )
  : > "$OUT/gemm_sass.txt"
  for k in '_ZN2k34cuda5qgemm15QuantGemmKernelINS0_5qgemv7FmtQ8_0ELi128ELb0ELb0EEEvNS1_4ArgsE' \
           '_ZN2k34cuda5qgemm15QuantGemmKernelINS0_5qgemv8FmtIQ1_SELi64ELb0ELb1EEEvNS1_4ArgsE' \
           '_ZN2k34cuda5qgemm15QuantGemmKernelINS0_5qgemv8FmtIQ1_SELi128ELb0ELb1EEEvNS1_4ArgsE' \
           '_ZN2k34cuda5qgemm15QuantGemmKernelINS0_5qgemv8FmtIQ1_SELi64ELb0ELb0EEEvNS1_4ArgsE'; do
    cuobjdump -sass -fun "$k" "$LIB" > /tmp/k.sass 2>&1 || true
    echo "-- $k ($(grep -cE '^ +/\*[0-9a-f]{4}\*/' /tmp/k.sass) instructions)" | tee -a "$OUT/gemm_sass.txt"
    grep -oE '(HMMA|LDSM|LDGSTS|LDG|LDS|STS|STG|LDL|STL|PRMT|FFMA|FADD|FMUL|F2FP|HFMA2|HMUL2|I2F|LOP3|SHF|IMAD|BAR)[.A-Z0-9]*' /tmp/k.sass |
      sort | uniq -c | sort -rn | head -20 | tee -a "$OUT/gemm_sass.txt"
  done
fi

stamp "compute-sanitizer (small cases)"
SAN_RC=skipped; RACE_RC=skipped
SAN_FILTER=${K3_SAN_FILTER:-QuantGemmTest.OddWidthsAndTinyShapes:QuantGemmTest.GroupedEdgeCases:QuantGemmTest.RejectsBadArguments:MoeGroupTest.AllChoicesOnOneExpert:MoeGroupTest.CombineMatchesCpuBitForBit:MoeGroupTest.RejectsBadArguments}
RACE_FILTER=${K3_RACE_FILTER:-QuantGemmTest.GroupedEdgeCases:MoeGroupTest.AllChoicesOnOneExpert}
if command -v compute-sanitizer >/dev/null && [ "${K3_SKIP_SANITIZER:-0}" != 1 ]; then
  timeout "${K3_SAN_TIMEOUT:-240}" compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
    $BIN/kernels_cuda_test --gtest_filter="$SAN_FILTER" --gtest_color=no > "$OUT/gemm_sanitizer.log" 2>&1
  SAN_RC=$?
  grep -E "ERROR SUMMARY" "$OUT/gemm_sanitizer.log" | tail -2
  timeout "${K3_RACE_TIMEOUT:-180}" compute-sanitizer --tool racecheck --error-exitcode 3 \
    $BIN/kernels_cuda_test --gtest_filter="$RACE_FILTER" --gtest_color=no >> "$OUT/gemm_sanitizer.log" 2>&1
  RACE_RC=$?
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/gemm_sanitizer.log" | tail -2
fi

stamp "summary"
echo "tests: rc=$TEST_RC  $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/gemm_tests.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$OUT/gemm_tests.txt" | head -20
grep -E 'gemm accuracy' "$OUT/gemm_tests.txt" | sort -t= -k2 -g | tail -3
echo "memcheck rc=$SAN_RC racecheck rc=$RACE_RC"
echo "gemm (mean of back-to-back launches):"
grep -E 'TFLOP/s|MoeGroupTokens' "$OUT/gemm_bench.txt" | sed -E 's/ +/ /g' | cut -c1-220
echo "expert products under every knob:"
grep -E 'TFLOP/s' "$OUT/gemm_variants.txt" | sed -E 's/ +/ /g' | cut -c1-160
if [ -f "$OUT/gemm_bench_base.txt" ]; then
  echo "expert products, base binary:"
  grep -E 'TFLOP/s' "$OUT/gemm_bench_base.txt" | sed -E 's/ +/ /g' | cut -c1-160
fi
stamp "done"
