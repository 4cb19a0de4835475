#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time (what tests/fuzz/CMakeLists.txt registers with
# ctest, one test per fuzzer):
#   run_fuzzer.sh NAME EXE WORK_DIR SECONDS [extra libFuzzer flags...]
# Seeds: our fuzzers write their own (K3_FUZZ_WRITE_SEEDS=DIR EXE exits after writing them);
# fuzz_gguf starts from the first 4 KiB of the golden GGUF when ../shared has it. The corpus
# grows in WORK_DIR/NAME/corpus and is reused by later runs. Exit status: the fuzzer's (0 when
# nothing was found); a crash, leak, timeout or out-of-memory leaves its input as
# WORK_DIR/NAME/crash-* (or leak-*, timeout-*, oom-*), and the output says how to replay it.
set -uo pipefail
name=$1 exe=$2 work=$3 secs=$4
shift 4
dir="$work/$name"
mkdir -p "$dir/corpus" "$dir/seeds"
if [ ! -x "$exe" ]; then
  echo "FAIL: $exe is not built (cmake --build <fuzz build dir> --target $name)"
  exit 1
fi
case "$name" in
  fuzz_gguf)
    golden="${K3_SHARED_DIR:-}/data/golden/k3-golden-a.gguf"
    [ -f "$golden" ] && head -c 4096 "$golden" > "$dir/seeds/golden-head"
    ;;
  *)
    K3_FUZZ_WRITE_SEEDS="$dir/seeds" "$exe" > /dev/null 2>&1 || { echo "FAIL: $name could not write its seeds"; exit 1; }
    ;;
esac
echo "$name: $(ls "$dir/seeds" | wc -l) seeds, $(ls "$dir/corpus" | wc -l) corpus inputs, ${secs}s"
start=$(date +%s)
# -timeout: one input taking longer is a finding; -rss_limit_mb: so is runaway memory.
"$exe" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2560 -print_final_stats=1 \
  -artifact_prefix="$dir/" "$@" "$dir/corpus" "$dir/seeds" > "$dir/log.txt" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^Done " "$dir/log.txt" | tr '\n' ' '
echo
if [ "$rc" -ne 0 ]; then
  echo "FAIL: $name exited with $rc after ${elapsed}s; the last lines of $dir/log.txt:"
  tail -60 "$dir/log.txt"
  for a in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*; do
    [ -e "$a" ] && echo "reproduce: $exe $a"
  done
  exit "$rc"
fi
echo "$name: no findings in ${elapsed}s"
