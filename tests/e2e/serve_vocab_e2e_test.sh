#!/usr/bin/env bash
# End to end with a real vocabulary: a generated kimi-k3 model carrying cl100k_base (from the
# npm tiktoken package), a 2-rank worker group, the coordinator, the client.
#   serve_vocab_e2e_test.sh BIN_DIR WORK_DIR
# Checks: text in -> the served greedy ids equal the engine's greedy ids for the tokenized
# prompt; chat works; a seeded sampled request is reproducible; a stop string ends the output.
# Skips (exit 0 with a message) when node/npm cannot fetch the vocabulary.
set -uo pipefail
bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
E2E_KEEP_WORK=1  # the npm download and the generated model are reused by the next run
. "$here/common.sh"
ranks_json="$work/npm/node_modules/tiktoken/encoders/cl100k_base.json"
if [ ! -f "$ranks_json" ]; then
  if ! command -v npm > /dev/null || ! npm install --prefix "$work/npm" --no-audit --no-fund --no-save \
       --no-package-lock --prefer-offline tiktoken@1.0.22 > "$work/npm.log" 2>&1; then
    echo "SKIPPED: cannot fetch the npm tiktoken package (see $work/npm.log)"
    exit 0
  fi
fi
model="$work/tiny-cl100k.gguf"
[ -f "$model" ] || "$bin/k3-synth" --preset tiny --vocab 100352 --vocab-from "$ranks_json" --pre cl100k --seed 5 \
  --quiet -o "$model" || { echo "FAIL: k3-synth"; exit 1; }

read -r wport cport < <(ports 2 | xargs)
mpirun --oversubscribe --allow-run-as-root -np 2 -x OMP_NUM_THREADS "$bin/k3-worker" --model "$model" \
  --serve "127.0.0.1:$wport" --max-seqs 4 --cache-tokens 4096 > "$work/worker.log" 2>&1 &
pids+=($!)
wait_for "$work/worker.log" "LEADER READY" 60 || fail "worker group did not start"
"$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$wport" --listen "127.0.0.1:$cport" > "$work/coord.log" 2>&1 &
pids+=($!)
wait_for "$work/coord.log" "COORDINATOR READY" 30 || fail "coordinator did not start"
k3() { "$bin/k3" "$@" --server "127.0.0.1:$cport"; }
for _ in $(seq 1 50); do k3 health > /dev/null 2>&1 && break; sleep 0.2; done

text="Hello, world! Ünïcödé and 中文 and numbers 12345."
ids=$(k3 tokenize --text "$text" | xargs)
[ -n "$ids" ] || fail "tokenize"
echo "prompt ids: $ids"
want=$("$bin/k3-run" --model "$model" --prompt "$ids" --gen 8 | sed -n 's/^seq 0: //p')
got=$(k3 generate --prompt "$text" --max-tokens 8 --ignore-eos --print-ids 2>/dev/null | xargs)
echo "engine: $want"
echo "served: $got"
[ -n "$want" ] && [ "$want" = "$got" ] || fail "served greedy ids differ from the engine's"
out=$(k3 generate --prompt "$text" --max-tokens 8 --ignore-eos 2> "$work/gen.err")
echo "served text: $out"
grep -q "finish: length" "$work/gen.err" || fail "no finish line: $(cat "$work/gen.err")"

k3 chat --message "Say hi" --max-tokens 6 > /dev/null 2> "$work/chat.err" || fail "chat: $(cat "$work/chat.err")"
a=$(k3 generate --prompt "$text" --max-tokens 12 --temperature 0.9 --top-p 0.9 --seed 11 --ignore-eos --print-ids 2>/dev/null)
b=$(k3 generate --prompt "$text" --max-tokens 12 --temperature 0.9 --top-p 0.9 --seed 11 --ignore-eos --print-ids 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "seeded sampling is not reproducible: '$a' vs '$b'"
# A stop string taken from the greedy text itself must cut the output before it.
full=$(k3 generate --prompt "$text" --max-tokens 8 --ignore-eos 2>/dev/null)
if [ ${#full} -ge 6 ]; then
  stop=${full:3:2}
  cut=$(k3 generate --prompt "$text" --max-tokens 8 --ignore-eos --stop "$stop" 2> "$work/stop.err")
  case "$full" in "$cut$stop"*) ;; *) fail "stop string '$stop': got '$cut' from '$full'";; esac
  grep -q "finish: stop" "$work/stop.err" || fail "stop string did not finish with stop"
fi
echo "1 passed, 0 failed"
