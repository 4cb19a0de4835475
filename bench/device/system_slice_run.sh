#!/usr/bin/env bash
# The served path on the real-width 8-layer slice, one GPU, no model file: the ranks fill the
# synthetic `slice` preset on the GPU from its seed (k3-worker --synth, the same model as
# k3_cuda_decode_bench --preset slice --layers 8), the coordinator reads the preset's metadata
# (k3-synth --header-only, packed). Measures, one RESULT line each:
#   engine decode    k3-worker --prompt-file --gen (no coordinator): decode tokens/s at batch 1
#   served decode    the same prompt through the coordinator and `k3 generate` (--ignore-eos),
#                    as the client times it (and the server's usage figure), and its ratio to the
#                    engine's: the goal is >= 95%
#   engine prefill   the 32768-token prompt's prefill, engine alone
#   served ttft      time to first token of that prompt through gRPC (client and server), twice
#   served polling   served decode again with the coordinator polling for step replies instead of
#                    sleeping (k3-coordinator --step-poll-us K3_POLL_US)
#   served step      where a served decode step's time goes: the coordinator's per-step debug lines
#                    (SPDLOG_LEVEL=debug, a run of its own, sleeping and polling): the leader's step,
#                    the RPC around it, and the coordinator's own work before and after it (medians)
#   rpc alone        k3_grpc_rtt_bench (when packed): the step RPC's round trip on this host over
#                    steps of 0, 1 ms and the engine's median step, the caller blocking (as the
#                    coordinator does) or polling without sleeping, with and without an idle gRPC
#                    server in the caller's process (as in the coordinator)
# Carry .k3sys (K3_SYS_GOLDEN=0 bash bench/device/system_pack.sh: the binaries and the slice's
# metadata). Writes $OUT/slice.log and the logs of every process in $OUT/slice/.
#
# The same flow on CPU (a small preset packed with its weights: the CPU engine reads a file):
#   K3_SYS_GOLDEN=0 K3_SYS_SYNTH=tiny K3_SYS_SYNTH_WEIGHTS=1 bash bench/device/system_pack.sh build/full build/full
#   K3_BACKEND=cpu K3_PRESET=tiny K3_SHORT=256 K3_GEN=64 K3_LONG=2048 K3_CHUNK=512 bash bench/device/system_slice_run.sh
# Knobs (defaults): K3_BACKEND (cuda), K3_PRESET (slice), K3_SEED (1), K3_QUANT (UD-IQ1_S), K3_SHORT
# (3584: the decode prompt; with K3_GEN it stays in one MLA context bucket, 2k..4k, so a warm
# served run captures no CUDA graph), K3_GEN (256 decode tokens), K3_LONG (32768), K3_CHUNK (2048:
# prompt tokens per prefill forward, worker and coordinator), K3_COORD_CHUNK (K3_CHUNK: the
# coordinator's --prefill-chunk and --token-budget, the steps' limits while a sequence decodes;
# --idle-prefill-chunk is K3_CHUNK, the served long prompt's steps), K3_RUNS (3 served decode runs),
# K3_POLL_US (20000; 0: no polling runs), K3_WORKER_DEBUG (0; 1: the leader logs its per-step
# lines too, which costs the served runs a little), K3_TIMEOUT (300 s per engine run and for the
# served worker to load), K3_SYS_DIR (.k3sys), K3_SYS_BIN (/tmp/k3sys: the unpacked binaries),
# K3_WORKER_ARGS (more k3-worker flags, e.g. --int8-experts).
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
L=$OUT/slice
mkdir -p "$L"
exec > >(tee "$OUT/slice.log") 2>&1
C=${K3_SYS_DIR:-$PWD/.k3sys}
B=${K3_SYS_BIN:-/tmp/k3sys}
BACKEND=${K3_BACKEND:-cuda}
PRESET=${K3_PRESET:-slice} SEED=${K3_SEED:-1} QUANT=${K3_QUANT:-UD-IQ1_S}
SHORT=${K3_SHORT:-3584} GEN=${K3_GEN:-256} LONG=${K3_LONG:-32768} CHUNK=${K3_CHUNK:-2048} RUNS=${K3_RUNS:-3}
CCHUNK=${K3_COORD_CHUNK:-$CHUNK}
TMO=${K3_TIMEOUT:-300} POLL=${K3_POLL_US:-20000}
WPORT=51071 CPORT=51072 SPORT=51073
# K3_STEP_CHANNEL (1): the served worker also serves steps on its step channel (--step-port), which
# the coordinator then uses instead of one gRPC call per step; 0: gRPC steps, as before.
STEP_CHANNEL=${K3_STEP_CHANNEL:-1}

model=$C/synth/$PRESET-seed$SEED-$QUANT.gguf
if [ ! -f "$model" ]; then
  echo "no $model: pack it with K3_SYS_SYNTH=$PRESET K3_SYS_SYNTH_SEED=$SEED K3_SYS_SYNTH_QUANT=$QUANT" \
       "bash bench/device/system_pack.sh (K3_SYS_SYNTH_WEIGHTS=1 for the CPU backend)"
  exit 1
fi
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
k3_find_missing_libs "$B"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} SPDLOG_LEVEL=info
MPIX=(-x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x OMPI_MCA_btl_vader_single_copy_mechanism
      -x OMP_NUM_THREADS -x SPDLOG_LEVEL)
command -v nvidia-smi > /dev/null && nvidia-smi -L
echo "model: $(head -1 "${model%.gguf}.txt")"

# The prompts: random ids over the whole vocabulary, fixed seeds (the same for every run).
vocab=$(grep -o 'vocab [0-9]*' "${model%.gguf}.txt" | head -1 | cut -d' ' -f2)
ctx=$(grep -o 'ctx [0-9]*' "${model%.gguf}.txt" | head -1 | cut -d' ' -f2)
if [ -z "$vocab" ] || [ -z "$ctx" ] || [ $((SHORT + GEN)) -ge "$ctx" ] || [ $((LONG + 1)) -ge "$ctx" ]; then
  echo "K3_SHORT + K3_GEN and K3_LONG must fit the model's context (${ctx:-?} tokens; vocabulary ${vocab:-?})"
  exit 1
fi
ids() {  # count seed: one prompt, 32 ids a line
  awk -v n="$1" -v v="$vocab" -v s="$2" 'BEGIN { srand(s); for (i = 1; i <= n; i++) printf "%d%s", int(rand() * v), (i % 32 ? " " : "\n"); print "" }'
}
ids "$SHORT" 11 > "$L/short.txt"
ids "$LONG" 12 > "$L/long.txt"

# Every sequence's whole context fits (two slots: the coordinator frees a finished sequence with
# the next step), pages of 64.
longest=$(( (SHORT + GEN > LONG + 8 ? SHORT + GEN : LONG + 8) + 128 ))
cache=$(( 2 * ((longest + 63) / 64 * 64) ))
if [ "$BACKEND" = cuda ]; then
  wargs=(--backend cuda --synth "$PRESET" --synth-seed "$SEED" --synth-quant "$QUANT" --prefill-chunk "$CHUNK")
else
  wargs=(--backend cpu --model "$model")
fi
wargs+=(--max-seqs 2 --cache-tokens "$cache")
# K3_WORKER_ARGS: more k3-worker flags for every worker of the run (e.g. --int8-experts).
[ -n "${K3_WORKER_ARGS:-}" ] && read -r -a extra <<< "$K3_WORKER_ARGS" && wargs+=("${extra[@]}")
worker=(mpirun -np 1 --bind-to none "${MPIX[@]}" "$B/k3-worker" "${wargs[@]}")

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "nan" }'; }
field() {  # file pattern: the number after "pattern" on the last line that has it
  grep -o "$2 [0-9.]*" "$1" | tail -1 | awk '{ print $NF }'
}

wpid="" cpid=""
stop() {  # the processes this script started, by id: TERM, then KILL after 10 s
  for p in $cpid $wpid; do kill "$p" 2> /dev/null; done
  for _ in $(seq 1 100); do
    alive=0
    for p in $cpid $wpid; do kill -0 "$p" 2> /dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in $cpid $wpid; do kill -9 "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  cpid="" wpid=""
}
trap stop EXIT

start_coordinator() {  # log file, its SPDLOG_LEVEL, then more k3-coordinator options
  local log=$1 level=$2; shift 2
  SPDLOG_LEVEL=$level "$B/k3-coordinator" --model "$model" --workers "127.0.0.1:$WPORT" --listen "127.0.0.1:$CPORT" \
    --prefill-chunk "$CCHUNK" --token-budget "$CCHUNK" --idle-prefill-chunk "$CHUNK" "$@" > "$log" 2>&1 &
  cpid=$!
  for _ in $(seq 1 300); do "$B/k3" health --server "127.0.0.1:$CPORT" > /dev/null 2>&1 && return 0; sleep 0.1; done
  echo "coordinator did not come up:"; tail -5 "$log"; return 1
}
k3gen() {  # name, then k3 generate options: ids to $L/name.ids, the finish lines to $L/name.err
  local name=$1; shift
  timeout "$TMO" "$B/k3" generate --server "127.0.0.1:$CPORT" --timeout-s "$TMO" --ignore-eos "$@" \
    > "$L/$name.ids" 2> "$L/$name.err"
  grep -h "^\[finish\|^\[client" "$L/$name.err"
}

echo "=== $BACKEND, $PRESET (seed $SEED, $QUANT); decode prompt $SHORT tokens + $GEN, long prompt $LONG;" \
     "prefill chunk $CHUNK (coordinator: $CCHUNK while a sequence decodes); cache $cache tokens"
echo "--- engine alone: decode"
timeout "$TMO" "${worker[@]}" --prompt-file "$L/short.txt" --gen "$GEN" > "$L/engine-decode.log" 2>&1
grep -E "^(prefill|backend|k3-worker)" "$L/engine-decode.log"
eng=$(grep -o "decode [0-9]* tokens: [0-9.]*" "$L/engine-decode.log" | awk '{ print $NF }')
eng_med=$(field "$L/engine-decode.log" "median step")
echo "RESULT engine decode, batch 1, context $SHORT..$((SHORT + GEN)): ${eng:-nan} tokens/s (median step ${eng_med:-nan} ms)"
echo "--- engine alone: prefill of $LONG tokens"
timeout "$TMO" "${worker[@]}" --prompt-file "$L/long.txt" --gen 1 > "$L/engine-prefill.log" 2>&1
grep -E "^(prefill|k3-worker)" "$L/engine-prefill.log"
echo "RESULT engine prefill, $LONG tokens: $(grep -o "^prefill $LONG tokens: [0-9.]* s" "$L/engine-prefill.log" | awk '{ print $4 }') s"

echo "--- served: k3-worker --serve, k3-coordinator, k3 generate"
[ "${K3_WORKER_DEBUG:-0}" = 1 ] && export SPDLOG_LEVEL=debug
served=(--serve "127.0.0.1:$WPORT")
[ "$STEP_CHANNEL" = 1 ] && served+=(--step-port "$SPORT")
echo "served worker: ${served[*]}"
"${worker[@]}" "${served[@]}" > "$L/worker.log" 2>&1 &
wpid=$!
export SPDLOG_LEVEL=info
for _ in $(seq 1 $((TMO * 10))); do
  grep -q "LEADER READY" "$L/worker.log" && break
  kill -0 $wpid 2> /dev/null || break
  sleep 0.1
done
grep -q "LEADER READY" "$L/worker.log" || { echo "the worker did not come up:"; tail -20 "$L/worker.log"; exit 1; }
start_coordinator "$L/coordinator.log" info || exit 1
k3gen warmup --ids-file "$L/short.txt" --max-tokens 8
served_decode() {  # label, run-name prefix: RUNS decode runs, one RESULT line
  local client=() server=() c_med s_med ratio ratio_med
  for r in $(seq 1 "$RUNS"); do
    k3gen "$2$r" --ids-file "$L/short.txt" --max-tokens "$GEN"
    client+=("$(grep "^\[client" "$L/$2$r.err" | grep -o "decode [0-9.]*" | awk '{ print $2 }')")
    server+=("$(grep "^\[finish" "$L/$2$r.err" | grep -o "decode [0-9.]*" | awk '{ print $2 }')")
  done
  c_med=$(median "${client[@]}") s_med=$(median "${server[@]}")
  # Against the engine's mean (its printed figure, which includes the step that captures the CUDA
  # graph: the served runs are warm) and against its median step (no capture: the stricter bar).
  ratio=$(awk -v c="$c_med" -v e="${eng:-0}" 'BEGIN { printf "%.1f", (e > 0 ? 100 * c / e : 0) }')
  ratio_med=$(awk -v c="$c_med" -v m="${eng_med:-0}" 'BEGIN { printf "%.1f", (m > 0 ? c * m / 10 : 0) }')
  echo "RESULT $1, batch 1, client: $c_med tokens/s (runs: ${client[*]}); server: $s_med;" \
       "$ratio% of the engine's figure, $ratio_med% of its median step's rate" \
       "(goal >= 95%: $(awk -v r="$ratio" 'BEGIN { print (r >= 95 ? "met" : "NOT met") }'))"
}
served_decode "served decode" decode
same=no
[ -n "$eng" ] && [ "$(grep "^generated:" "$L/engine-decode.log" | cut -d: -f2 | xargs)" = "$(xargs < "$L/decode1.ids")" ] && same=yes
echo "served greedy ids == engine's: $same"
ttft_c=() ttft_s=()
for r in 1 2; do
  k3gen "ttft$r" --ids-file "$L/long.txt" --max-tokens 1
  ttft_c+=("$(grep "^\[client" "$L/ttft$r.err" | grep -o "ttft [0-9.]*" | awk '{ print $2 }')")
  ttft_s+=("$(grep "^\[finish" "$L/ttft$r.err" | grep -o "ttft [0-9.]*" | awk '{ print $2 }')")
done
echo "RESULT served ttft, $LONG-token prompt: client ${ttft_c[*]} ms, server ${ttft_s[*]} ms (first, second run)"

restart_coordinator() {  # as start_coordinator
  kill "$cpid"; wait "$cpid" 2> /dev/null; cpid=""
  start_coordinator "$@"
}
if [ "$POLL" -gt 0 ]; then
  echo "--- served, the coordinator polling for step replies (--step-poll-us $POLL)"
  restart_coordinator "$L/coordinator-poll.log" info --step-poll-us "$POLL" || exit 1
  served_decode "served decode polling" poll
fi

echo "--- served step breakdown (coordinator at debug level)"
breakdown() {  # label, run name, then k3-coordinator options
  local label=$1 name=$2; shift 2
  restart_coordinator "$L/coordinator-$name.log" debug "$@" || return 1
  k3gen "$name" --ids-file "$L/short.txt" --max-tokens "$GEN" > /dev/null
  # Decode steps (one entry of one token): since last, rpc, leader, apply; per token = since last
  # + rpc + apply (the scheduler loop's period); transport = rpc - leader.
  awk '/\] step [0-9]+: 1 entries 1 tokens;/ {
         for (i = 1; i <= NF; i++) { if ($i == "last") s = $(i + 1); if ($i == "rpc") r = $(i + 1);
                                     if ($i == "leader") l = $(i + 1); if ($i == "apply") a = $(i + 1) }
         print s, r, l, a, s + r + a, r - l }' "$L/coordinator-$name.log" > "$L/$name-steps.txt"
  col() { median $(awk -v c="$1" '{ print $c }' "$L/$name-steps.txt"); }
  local n mean
  n=$(wc -l < "$L/$name-steps.txt")
  mean=$(awk '{ t += $5 } END { printf "%.1f", NR ? t / NR : 0 }' "$L/$name-steps.txt")
  echo "RESULT $label, median over $n decode steps (us): per token $(col 5) (mean $mean); leader step $(col 3);" \
       "rpc - leader $(col 6); coordinator before the rpc $(col 1), after it $(col 4); engine alone ${eng_med:-nan} ms"
}
breakdown "served step" debug
[ "$POLL" -gt 0 ] && breakdown "served step polling" debug-poll --step-poll-us "$POLL"
if [ "${K3_WORKER_DEBUG:-0}" = 1 ]; then
  # The leader's side of the same steps: the handler's own work around the group's step.
  awk '/\] step [0-9]+: group / { for (i = 1; i <= NF; i++) if ($i == "handler") print $(i + 1) + $(i + 4) }' \
    "$L/worker.log" > "$L/handler.txt"
  echo "RESULT leader handler around the group step, median (us): $(median $(cat "$L/handler.txt"))"
fi
stop

if [ -x "$B/k3_grpc_rtt_bench" ]; then
  echo "--- the step RPC alone (k3_grpc_rtt_bench), the engine's median step as one of the step times"
  "$B/k3_grpc_rtt_bench" --serve "127.0.0.1:$WPORT" > "$L/rtt-server.log" 2>&1 &
  wpid=$!
  for _ in $(seq 1 50); do grep -q "RTT SERVER READY" "$L/rtt-server.log" && break; sleep 0.1; done
  step_us=$(awk -v m="${eng_med:-0}" 'BEGIN { printf "%d", m * 1000 }')
  for side in "" --side-server; do
    "$B/k3_grpc_rtt_bench" --connect "127.0.0.1:$WPORT" --work-us "0,1000,$step_us" --calls 300 $side |
      sed 's/^/RESULT /'
  done
  stop
fi
echo "=== done"
