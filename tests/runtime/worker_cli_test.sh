#!/usr/bin/env bash
# k3-worker refuses a missing or doubled model source, and --synth without the GPU backend, with a
# clear message and a non-zero status (no rank hangs: each case is one process, no mpirun).
#   worker_cli_test.sh K3_WORKER GOLDEN_GGUF
set -uo pipefail
worker=$1 golden=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
fails=0
expect() {  # expect "what" "message regex" args...
  local what=$1 want=$2; shift 2
  local out rc
  out=$(timeout 60 "$worker" "$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE "$want" <<< "$out"; then
    echo "ok: $what"
  else
    echo "FAIL: $what (status $rc): $out"; fails=$((fails + 1))
  fi
}
expect "no model" "exactly one of --model FILE and --synth PRESET"
expect "model and synth" "exactly one of --model FILE and --synth PRESET" --model "$golden" --synth tiny
expect "synth on cpu" "needs --backend cuda" --synth tiny
expect "negative seed" "want numbers >= 0" --backend cuda --synth tiny --synth-seed -1
[ $fails -eq 0 ] && echo "WORKER CLI TEST PASSED"
exit $fails
