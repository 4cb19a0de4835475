#!/usr/bin/env bash
# k3-worker refuses a missing or doubled model source, --synth, --prefill-chunk and the CUDA fast
# options (--int8-experts, --ternary-experts, --chunked-kda, --token-kda, --tc-mla-decode,
# --exact-mla-decode, --f16-weights-mb) without the GPU backend, a negative --f16-weights-mb, --ternary-experts without --int8-experts, the two MLA
# decode flags together, the two KDA prefill flags together, a value given to a bare flag, and a
# doubled or unreadable prompt, with a clear message and a non-zero status (no rank hangs: each case
# is one process, no mpirun); a prompt read from --prompt-file generates what the same ids given
# with --prompt do.
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
expect "prefill chunk on cpu" "prefill-chunk wants tokens >= 1 and --backend cuda" --model "$golden" --prefill-chunk 64
expect "int8 experts on cpu" "options of the CUDA engine" --model "$golden" --int8-experts
expect "ternary experts on cpu" "options of the CUDA engine" --model "$golden" --ternary-experts
expect "ternary without int8" "ternary-experts needs --int8-experts" --backend cuda --synth tiny --ternary-experts
expect "chunked kda on cpu" "options of the CUDA engine" --model "$golden" --chunked-kda
expect "chunked kda with a value" "chunked-kda takes no value" --backend cuda --synth tiny --chunked-kda 1
expect "token kda on cpu" "options of the CUDA engine" --model "$golden" --token-kda
expect "both kda flags" "chunked-kda and --token-kda exclude each other" --backend cuda --synth tiny --chunked-kda --token-kda
expect "tc mla decode on cpu" "options of the CUDA engine" --model "$golden" --tc-mla-decode
expect "exact mla decode on cpu" "options of the CUDA engine" --model "$golden" --exact-mla-decode
expect "f16 weights on cpu" "options of the CUDA engine" --model "$golden" --f16-weights-mb 1024
expect "negative f16 weights" "f16-weights-mb wants MiB >= 0" --backend cuda --synth tiny --f16-weights-mb -3
expect "both mla decode flags" "exclude each other" --backend cuda --synth tiny --tc-mla-decode --exact-mla-decode
expect "flag with a value" "int8-experts takes no value" --backend cuda --synth tiny --int8-experts yes
expect "prompt and prompt file" "one of --prompt and --prompt-file" --model "$golden" --prompt "1 2" --prompt-file /dev/null
expect "missing prompt file" "cannot read --prompt-file" --model "$golden" --prompt-file /nonexistent/prompt.txt
prompt="2560 2802 3674 2368 3177 3414 922 227 1229"
file=$(mktemp)
tr ' ' '\n' <<< "$prompt" > "$file"  # one id a line: any whitespace separates
direct=$(timeout 120 "$worker" --model "$golden" --prompt "$prompt" --gen 4 2>&1 | grep "^generated:")
from_file=$(timeout 120 "$worker" --model "$golden" --prompt-file "$file" --gen 4 2>&1 | grep "^generated:")
rm -f "$file"
if [ -n "$direct" ] && [ "$direct" = "$from_file" ]; then
  echo "ok: prompt file ($from_file)"
else
  echo "FAIL: prompt file: '$from_file' vs --prompt: '$direct'"; fails=$((fails + 1))
fi
[ $fails -eq 0 ] && echo "WORKER CLI TEST PASSED"
exit $fails
