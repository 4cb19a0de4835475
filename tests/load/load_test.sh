#!/usr/bin/env bash
# Load test on CPU: a 2-rank worker group on the golden model + the coordinator on loopback
# ports, then CLIENTS concurrent streaming clients for SECONDS, each sending requests one after
# another with a random prompt length, a random max_tokens and, for some, a short client
# deadline (k3 generate --timeout-s) that cancels the stream midway; a few are invalid on
# purpose. Then `k3 load` for the throughput and latency percentiles.
#   load_test.sh BIN_DIR MODEL.gguf [SECONDS=50] [CLIENTS=6]
# Checks:
#   - every request ends with a complete answer (finish: length, exactly max_tokens tokens with
#     --ignore-eos) or a clear error: DEADLINE_EXCEEDED for a short deadline, INVALID_ARGUMENT
#     for an invalid request, RESOURCE_EXHAUSTED for a full queue; anything else (UNAVAILABLE,
#     INTERNAL, a client that hangs past its deadline, ...) fails the test;
#   - afterwards `k3 stats` shows 0 running and 0 queued, and the group's free slots and free
#     cache tokens (the worker's GetInfo, relayed by the coordinator's GetStats) are back to
#     what they were before the load, within a settle time;
#   - the coordinator's RSS (VmRSS) peak in the second half exceeds the first half's by at most
#     K3_LOAD_RSS_GROWTH_KB (default 8192 KiB).
# Env: K3_LOAD_SECONDS, K3_LOAD_CLIENTS, K3_LOAD_RSS_GROWTH_KB, K3_LOAD_SEED override the above.
set -uo pipefail
bin=$1 model=$2
secs=${K3_LOAD_SECONDS:-${3:-50}}
clients=${K3_LOAD_CLIENTS:-${4:-6}}
rss_bound_kb=${K3_LOAD_RSS_GROWTH_KB:-8192}
seed=${K3_LOAD_SEED:-$$}
if [ ! -f "$model" ]; then
  echo "skipped: no $model"
  exit 0
fi
work=$(mktemp -d)
. "$(dirname "$0")/../e2e/common.sh"
read -r wport cport mport < <(ports 3 | xargs)
k3() { "$bin/k3" "$@" --server "127.0.0.1:$cport"; }
# One field of `k3 stats` (proto text; a zero field is not printed, hence the default 0).
stats_field() { k3 stats 2> /dev/null | awk -v f="$1:" '$1 == f { v = $2 } END { print v + 0 }'; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# ---- the servers ------------------------------------------------------------------------------
# 4 sequence slots and a cache smaller than 4 x (longest prompt + longest answer), so admission
# waits both for slots and for cache room.
mpirun --oversubscribe --allow-run-as-root -np 2 -x OMP_NUM_THREADS "$bin/k3-worker" --model "$model" \
  --serve "127.0.0.1:$wport" --max-seqs 4 --cache-tokens 512 --timeout-ms 20000 > "$work/worker.log" 2>&1 &
pids+=($!)
wait_for "$work/worker.log" "LEADER READY" 60 || fail "worker group did not start"
"$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$wport" --listen "127.0.0.1:$cport" \
  --metrics-port "$mport" > "$work/coord.log" 2>&1 &
cpid=$!
pids+=("$cpid")
wait_for "$work/coord.log" "COORDINATOR READY" 30 || fail "coordinator did not start"
for _ in $(seq 1 50); do k3 health > /dev/null 2>&1 && break; sleep 0.2; done
k3 health || fail "health"
vocab=$(k3 info 2> /dev/null | awk '$1 == "vocab:" { print $2 }')
[ -n "$vocab" ] && [ "$vocab" -gt 0 ] || fail "k3 info has no vocabulary size"
k3 generate --ids "1 2 3" --max-tokens 2 --ignore-eos > /dev/null 2>&1 || fail "warm-up request"
sleep 2  # one health period: the stats carry the worker's idle capacity
slots0=$(stats_field free_slots); cache0=$(stats_field free_cache_tokens)
[ "$slots0" -gt 0 ] && [ "$cache0" -gt 0 ] || fail "no free_slots / free_cache_tokens in k3 stats before the load"
echo "before: free_slots $slots0, free_cache_tokens $cache0; vocab $vocab; $clients clients for ${secs}s (seed $seed)"

# ---- coordinator RSS, once a second ------------------------------------------------------------
t0=$(now_ms)
(
  while kill -0 "$cpid" 2> /dev/null; do
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$cpid/status" 2> /dev/null)
    [ -n "$rss" ] && echo "$(( $(now_ms) - t0 )) $rss" >> "$work/rss.txt"
    sleep 1
  done
) &
pids+=($!)

# ---- the clients ------------------------------------------------------------------------------
# One line per request: kind rc latency_ms want_tokens got_tokens outcome
client() {
  local c=$1 end=$2 out="$work/client-$1.txt"
  RANDOM=$(( seed + 7919 * c ))
  while [ "$(now_ms)" -lt "$end" ]; do
    local len=$(( 1 + RANDOM % 160 )) max=$(( 1 + RANDOM % 32 )) r=$(( RANDOM % 100 )) ids="" i
    for (( i = 0; i < len; ++i )); do ids+="$(( RANDOM % vocab )) "; done
    local kind=full timeout_s=60
    if [ "$r" -lt 25 ]; then
      kind=deadline; timeout_s=$(printf '%d.%02d' $(( RANDOM % 3 )) $(( 5 + RANDOM % 95 )))  # 0.05 .. 2.99 s
    elif [ "$r" -lt 30 ]; then
      kind=invalid; ids+="$(( vocab + RANDOM % 1000 ))"                   # an id outside the vocabulary
    fi
    local s e rc
    s=$(now_ms)
    # `timeout`: a client still running 30 s past its own deadline is a hang, and a failure.
    timeout $(( ${timeout_s%.*} + 30 )) "$bin/k3" generate --ids "$ids" --max-tokens "$max" --ignore-eos \
      --timeout-s "$timeout_s" --server "127.0.0.1:$cport" > "$work/c$c.out" 2> "$work/c$c.err"
    rc=$?
    e=$(now_ms)
    local got outcome
    got=$(wc -w < "$work/c$c.out")
    if [ "$rc" -eq 0 ] && grep -q "\[finish: length; prompt $len tokens, completion $max tokens" "$work/c$c.err"; then
      outcome=complete
    elif [ "$rc" -eq 124 ]; then
      outcome=hang
    elif grep -q "(DEADLINE_EXCEEDED)" "$work/c$c.err"; then
      outcome=deadline_exceeded
    elif grep -q "(INVALID_ARGUMENT)" "$work/c$c.err"; then
      outcome=invalid_argument
    elif grep -q "(RESOURCE_EXHAUSTED)" "$work/c$c.err"; then
      outcome=resource_exhausted
    else
      outcome="unexpected:$(tr '\n' ' ' < "$work/c$c.err" | cut -c1-200)"
    fi
    echo "$kind $rc $(( e - s )) $max $got $outcome" >> "$out"
  done
}
end=$(( $(now_ms) + secs * 1000 ))
cpids=()
for (( c = 0; c < clients; ++c )); do
  client "$c" "$end" &
  cpids+=($!)
done
wait "${cpids[@]}"
wall_ms=$(( $(now_ms) - t0 ))
cat "$work"/client-*.txt > "$work/all.txt"

# ---- every request ended cleanly ----------------------------------------------------------------
total=$(wc -l < "$work/all.txt")
[ "$total" -gt 0 ] || fail "no request finished"
echo "requests: $total in $(( wall_ms / 1000 )) s"
awk '{ split($6, o, ":"); n[$1 " -> " o[1]]++ } END { for (k in n) printf "  %-34s %d\n", k, n[k] }' "$work/all.txt" | sort
bad=$(awk '
  $6 ~ /^unexpected/ || $6 == "hang" { print; next }
  $1 == "full" && $6 != "complete" && $6 != "resource_exhausted" { print; next }
  $1 == "invalid" && $6 != "invalid_argument" { print; next }
  $1 == "deadline" && $6 != "complete" && $6 != "deadline_exceeded" && $6 != "resource_exhausted" { print }
  ' "$work/all.txt")
[ -z "$bad" ] || fail "requests that ended neither complete nor with a clear error:
$(echo "$bad" | head -10)"
complete=$(awk '$6 == "complete"' "$work/all.txt" | wc -l)
[ "$complete" -gt 0 ] || fail "no request completed"
awk '$6 == "complete" { print $3 }' "$work/all.txt" | sort -n > "$work/lat.txt"
pct() { awk -v p="$1" '{ v[NR] = $1 } END { i = int(p / 100 * NR); if (i >= NR) i = NR - 1; print v[i + 1] }' "$work/lat.txt"; }
tokens=$(awk '$6 == "complete" { t += $4 } END { print t + 0 }' "$work/all.txt")
echo "random phase: $(awk -v n="$complete" -v ms="$wall_ms" 'BEGIN { printf "%.2f", n * 1000 / ms }') complete requests/s," \
     "$(awk -v n="$tokens" -v ms="$wall_ms" 'BEGIN { printf "%.1f", n * 1000 / ms }') generated tokens/s;" \
     "latency ms (complete requests, client side, incl. process start): p50 $(pct 50) p90 $(pct 90) p99 $(pct 99) max $(pct 100)"

# ---- the server is idle again and its capacity is back ------------------------------------------
settled=0
for _ in $(seq 1 30); do
  if [ "$(stats_field requests_running)" -eq 0 ] && [ "$(stats_field requests_queued)" -eq 0 ] &&
     [ "$(stats_field free_slots)" -eq "$slots0" ] && [ "$(stats_field free_cache_tokens)" -eq "$cache0" ]; then
    settled=1
    break
  fi
  sleep 0.5
done
echo "after: requests_running $(stats_field requests_running), requests_queued $(stats_field requests_queued)," \
     "free_slots $(stats_field free_slots) (before $slots0), free_cache_tokens $(stats_field free_cache_tokens) (before $cache0)"
[ "$settled" -eq 1 ] || fail "the server did not return to idle with all slots and cache pages free within 15 s"

# ---- coordinator RSS: no growth from the first half to the second ---------------------------------
half=$(( wall_ms / 2 ))
read -r rss1 rss2 < <(awk -v h="$half" -v w="$wall_ms" '$1 <= w { if ($1 <= h) { if ($2 > a) a = $2 } else { if ($2 > b) b = $2 } }
                                                        END { print a + 0, b + 0 }' "$work/rss.txt")
echo "coordinator VmRSS peak: first half $rss1 KiB, second half $rss2 KiB (bound: +$rss_bound_kb KiB)"
[ "$rss1" -gt 0 ] && [ "$rss2" -gt 0 ] || fail "no RSS samples"
[ $(( rss2 - rss1 )) -le "$rss_bound_kb" ] || fail "coordinator RSS grew by $(( rss2 - rss1 )) KiB between the halves"

# ---- throughput and latency percentiles of one fixed request (k3 load) ----------------------------
k3 load --requests 16 --concurrency 4 --ids "2560 2802 3674 2368 3177 3414 922 227 1229" --max-tokens 16 \
  --ignore-eos || fail "k3 load"
echo "1 passed, 0 failed"
