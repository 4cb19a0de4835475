#!/usr/bin/env bash
# Builds, checks and times the direct-load GEMV (kernels/cuda/quant_gemv/gemv_direct.h) on the GPU
# machine (the `device` tool), carrying `.device` exactly as for bench/device/kernel_tests.sh (whose
# header says how it is made: Abseil's Debian packages, unpacked here into /opt/k3deps):
#   bash bench/device/gemv_direct_tests.sh                 # everything: build test sanitize bench sass
#   bash bench/device/gemv_direct_tests.sh build test      # or some phases, in that order
# Phases after `build` reuse build-dev/ (kept between calls on a warm machine; built first if
# missing), so a long session can be split across calls of the 10-minute command limit. Writes under $OUT (default ./device-out): gemv_direct.log
# (everything), tests.txt, sanitizer.log, bench.txt, gemv_direct.csv, sass_direct.txt. Prints a
# summary table last.
set -uo pipefail
PHASES=" ${*:-all} "
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
LOG="$OUT/gemv_direct.log"
exec > >(tee -a "$LOG") 2>&1
JOBS=$(nproc)
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
want() { [[ "$PHASES" == *" all "* || "$PHASES" == *" $1 "* ]]; }
BIN=build-dev/bin
TEST_RC=skipped SAN_RC=skipped RACE_RC=skipped BENCH_RC=skipped

stamp "machine (phases:$PHASES)"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv || true

PREFIX=/opt/k3deps
FALLBACK=/opt/k3deps-fallback
export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if want build || [ ! -x $BIN/kernels_cuda_test ]; then
  stamp "dependencies"
  nvcc --version | tail -2; cmake --version | head -1
  rm -rf $PREFIX $FALLBACK
  mkdir -p $PREFIX $FALLBACK
  for f in .device/debs/libabsl*.deb; do dpkg -x "$f" $PREFIX; done
  for f in .device/debs/libspdlog*.deb .device/debs/libfmt*.deb; do dpkg -x "$f" $FALLBACK; done
  stamp "configure"
  rm -f build-dev/CMakeCache.txt
  timeout 180 cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_WITH_CUDA=ON -DK3_WITH_GRPC=OFF \
    -DK3_WITH_MPI=OFF -DK3_WITH_COORDINATOR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_CUDA_COMPILER=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc) \
    "-DCMAKE_PREFIX_PATH=$PREFIX/usr;/usr;/usr/local;$FALLBACK/usr" > "$OUT/configure.txt" 2>&1
  rc=$?; tail -3 "$OUT/configure.txt"
  [ $rc -eq 0 ] || { cat "$OUT/configure.txt"; stamp "CONFIGURE FAILED"; exit 1; }
  stamp "build"
  timeout 480 cmake --build build-dev -j "$JOBS" --target kernels_cuda_test k3_cuda_gemv_bench 2>&1 | grep -v '^\[' | tail -40
  [ -x $BIN/kernels_cuda_test ] && [ -x $BIN/k3_cuda_gemv_bench ] || { stamp "BUILD FAILED"; exit 1; }
fi

if want test; then
  stamp "tests: kernels_cuda_test --gtest_filter='*Gemv*' (QuantGemv*, QuantGemvDirect*)"
  timeout 420 $BIN/kernels_cuda_test --gtest_filter='*Gemv*' --gtest_color=no 2>&1 | tee "$OUT/tests.txt" |
    grep -E '^\[ *(RUN|OK|FAILED|PASSED|SKIPPED) *\]|Failure|error|Expected|elements out|invariance|differ|past' | head -200
  TEST_RC=${PIPESTATUS[0]}
fi

if want sanitize; then
  stamp "compute-sanitizer memcheck + racecheck (direct GEMV, small shapes)"
  timeout 240 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
    $BIN/kernels_cuda_test --gtest_filter='QuantGemvDirectTest.OddShapes:QuantGemvDirectTest.RepackIsExact:QuantGemvDirectTest.GraphReplayMatchesDirectCall' \
    --gtest_color=no > "$OUT/sanitizer.log" 2>&1
  SAN_RC=$?
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log" | tail -4
  timeout 180 compute-sanitizer --tool racecheck --error-exitcode 3 \
    $BIN/kernels_cuda_test --gtest_filter='QuantGemvDirectTest.OddShapes' --gtest_color=no >> "$OUT/sanitizer.log" 2>&1
  RACE_RC=$?
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/sanitizer.log" | tail -2
fi

if want bench; then
  stamp "bench: old QuantGemv vs QuantGemvDirect, M = 1, 2, 4 (weights rotated through >= 256 MB)"
  timeout 420 $BIN/k3_cuda_gemv_bench --direct-only --direct-csv="$OUT/gemv_direct.csv" > "$OUT/bench.txt" 2>&1
  BENCH_RC=$?
  grep -vE '^direct ' "$OUT/bench.txt" | head -5
fi

if want sass && command -v cuobjdump >/dev/null; then
  stamp "SASS of the direct Q8_0 kernels (instruction mix per kernel; LDL/STL would be spills)"
  : > "$OUT/sass_direct.txt"
  for mr in "1 4" "2 4" "4 4" "8 4" "1 1"; do
    set -- $mr
    fn="_ZN2k34cuda6direct16GemvDirectKernelINS1_10DirectQ8_0ELi${1}ELi${2}EEEvNS1_4ArgsE"
    echo "##### Q8_0 M=$1 R=$2 ($fn)" >> "$OUT/sass_direct.txt"
    cuobjdump -sass -fun "$fn" build-dev/kernels/cuda/libk3_kernels_cuda.a >> "$OUT/sass_direct.txt" 2>&1 || true
    echo "-- Q8_0 M=$1 R=$2:"
    sed -n "/##### Q8_0 M=$1 R=$2 /,/#####/p" "$OUT/sass_direct.txt" |
      grep -oE '(LDG|LDS|LDL|STL|STS|PRMT|FFMA|FADD|FMUL|I2F|I2FP|F2F|HADD2\.F32|SHFL|LOP3|IMAD|IADD3|BAR|BRA)[.A-Z0-9_]*' |
      sort | uniq -c | sort -rn | head -16 | tr '\n' ' '; echo
  done
fi

stamp "summary"
echo "tests: rc=$TEST_RC  $( [ -f "$OUT/tests.txt" ] && grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/tests.txt" | tr '\n' ' ')"
[ -f "$OUT/tests.txt" ] && grep -E '^\[  FAILED  \]' "$OUT/tests.txt" | head -20
echo "memcheck rc=$SAN_RC racecheck rc=$RACE_RC bench rc=$BENCH_RC"
if [ -f "$OUT/gemv_direct.csv" ]; then
  echo "direct GEMV (stream = mean of 100 back-to-back launches; floor = bytes / 4.4 TB/s):"
  awk -F, 'NR == 1 { next }
    { printf "%-28s %-4s M=%s  floor %7.2f us  old %8.2f us  new %8.2f us (%5.1f%% of 4.4 TB/s, single %7.2f us)  x%.2f  R=%s S=%s%s\n",
             $1, $2, $5, $7, $9, $11, $13, $10, $9 / $11, $15, $16, ($18 > 0 ? "  NON-FINITE" : "") }' "$OUT/gemv_direct.csv"
fi
stamp "done"
