#!/usr/bin/env bash
# End to end on CPU, loopback only: who may use the coordinator and the worker group.
#   security_e2e_test.sh BIN_DIR MODEL.gguf
# Checks:
#   - startup refuses an empty or unreadable token file and half a TLS pair, with a clear error
#     (coordinator, k3-worker, k3);
#   - a coordinator with --auth-token-file: every RPC but Health is UNAUTHENTICATED without the
#     token or with a wrong one; with it (--token-file or K3_TOKEN_FILE) greedy output equals the
#     engine's; with --tls-cert/--tls-key (a self-signed certificate made here with openssl) a
#     plaintext client and a client trusting another CA are refused; the leader serves TLS too;
#   - the leader with --auth-token-file: a coordinator without --worker-token-file is refused
#     (its log says UNAUTHENTICATED and health says NOT_SERVING);
#   - --max-concurrent-per-client 2 (no auth: the client is its address): a third concurrent
#     request is RESOURCE_EXHAUSTED at once; when the two end (client deadlines) the count is
#     back and requests run again.
# Without openssl the TLS parts are skipped (with a message) and the rest runs in plaintext.
set -uo pipefail
bin=$1 model=$2
if [ ! -f "$model" ]; then
  echo "skipped: no $model"
  exit 0
fi
work=$(mktemp -d)
. "$(dirname "$0")/../e2e/common.sh"
read -r wport cport c2port < <(ports 3 | xargs)
expect_code() {  # CODE "what" command...: the command fails and says CODE
  local code=$1 what=$2 out
  shift 2
  out=$("$@" 2>&1) && fail "$what: succeeded, expected $code"
  echo "$out" | grep -q "$code" || fail "$what: expected $code, got: $out"
}
start=$(date +%s)

umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/client.token"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/worker.token"
echo "not-the-token-0123456789abcdef" > "$work/wrong.token"
printf '\n\n' > "$work/empty.token"

# Self-signed certificates for 127.0.0.1 (and another, to be the wrong CA).
tls=0
if command -v openssl > /dev/null; then
  for name in cert other; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "/CN=localhost" \
      -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$work/$name.key" -out "$work/$name.pem" \
      > "$work/openssl.log" 2>&1 || fail "openssl could not make a certificate"
  done
  tls=1
else
  echo "SKIPPED (TLS parts): openssl is not installed (launch/setup-deps installs it)"
fi
server_tls=() client_tls=() worker_tls=() coord_worker_tls=()
if [ "$tls" = 1 ]; then
  server_tls=(--tls-cert "$work/cert.pem" --tls-key "$work/cert.key")
  client_tls=(--tls-ca "$work/cert.pem")
  worker_tls=(--tls-cert "$work/cert.pem" --tls-key "$work/cert.key")
  coord_worker_tls=(--worker-tls-ca "$work/cert.pem")
fi

# ---- 1. startup refuses bad token files and half a TLS pair ------------------------------------
coord_bad() {  # expected message, args...
  local want=$1 out
  shift
  out=$(timeout 20 "$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$wport" --listen "127.0.0.1:$cport" "$@" 2>&1)
  [ $? -eq 1 ] || fail "k3-coordinator $*: expected exit status 1"
  echo "$out" | grep -q "$want" || fail "k3-coordinator $*: expected '$want', got: $out"
}
coord_bad "token file $work/empty.token: the first line is empty" --auth-token-file "$work/empty.token"
coord_bad "cannot read token file $work/missing.token" --auth-token-file "$work/missing.token"
coord_bad "token file $work/empty.token: the first line is empty" --worker-token-file "$work/empty.token"
coord_bad "TLS needs both --tls-cert and --tls-key" --tls-cert "$work/client.token"
coord_bad "is not PEM" --tls-cert "$work/client.token" --tls-key "$work/client.token"
out=$(timeout 30 mpirun --oversubscribe --allow-run-as-root -np 1 "$bin/k3-worker" --model "$model" \
  --serve "127.0.0.1:$wport" --auth-token-file "$work/empty.token" 2>&1) && fail "k3-worker took an empty token file"
echo "$out" | grep -q "the first line is empty" || fail "k3-worker with an empty token file said: $out"
expect_code "the first line is empty" "k3 with an empty token file" \
  "$bin/k3" health --server "127.0.0.1:$cport" --token-file "$work/empty.token"
echo "startup checks: ok"

# ---- 2. the worker group wants the worker token (and serves TLS) -------------------------------
mpirun --oversubscribe --allow-run-as-root -np 1 -x OMP_NUM_THREADS "$bin/k3-worker" --model "$model" \
  --serve "127.0.0.1:$wport" --max-seqs 4 --cache-tokens 8192 --timeout-ms 20000 \
  --auth-token-file "$work/worker.token" "${worker_tls[@]}" > "$work/worker.log" 2>&1 &
pids+=($!)
wait_for "$work/worker.log" "LEADER READY" 60 || fail "worker group did not start"
grep -q "bearer token required" "$work/worker.log" || fail "the leader does not say it wants a token"

# ---- 3. coordinator with client auth and TLS ---------------------------------------------------
"$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$wport" --listen "127.0.0.1:$cport" \
  --auth-token-file "$work/client.token" --worker-token-file "$work/worker.token" "${coord_worker_tls[@]}" \
  "${server_tls[@]}" > "$work/coord.log" 2>&1 &
cpid=$!
pids+=("$cpid")
wait_for "$work/coord.log" "COORDINATOR READY" 30 || fail "coordinator did not start"
k3() { "$bin/k3" "$@" --server "127.0.0.1:$cport" "${client_tls[@]}"; }
for _ in $(seq 1 50); do k3 health > /dev/null 2>&1 && break; sleep 0.2; done
k3 health || fail "health (open without a token) does not say SERVING"

prompt="2560 2802 3674 2368 3177 3414 922 227 1229"
for cmd in "generate --ids 1" "tokenize --text hi" "detokenize --ids 1" "info" "stats"; do
  # shellcheck disable=SC2086
  expect_code UNAUTHENTICATED "k3 $cmd without a token" k3 $cmd
  # shellcheck disable=SC2086
  expect_code UNAUTHENTICATED "k3 $cmd with a wrong token" k3 $cmd --token-file "$work/wrong.token"
done
out=$(k3 generate --ids 1 2>&1)
echo "$out" | grep -q "authorization: Bearer" || fail "the refusal does not say what to send: $out"
want=$("$bin/k3-run" --model "$model" --prompt "$prompt" --gen 8 | sed -n 's/^seq 0: //p')
got=$(k3 generate --ids "$prompt" --max-tokens 8 --ignore-eos --token-file "$work/client.token" 2>/dev/null |
      tr -s ' ' | sed 's/^ //')
[ -n "$want" ] && [ "$want" = "$got" ] || fail "with the token: got '$got', the engine says '$want'"
got=$(K3_TOKEN_FILE="$work/client.token" k3 generate --ids "$prompt" --max-tokens 8 --ignore-eos 2>/dev/null |
      tr -s ' ' | sed 's/^ //')
[ "$want" = "$got" ] || fail "with K3_TOKEN_FILE: got '$got'"
K3_TOKEN_FILE="$work/client.token" k3 stats > /dev/null || fail "stats with the token"
if [ "$tls" = 1 ]; then
  expect_code UNAVAILABLE "a plaintext client to the TLS coordinator" \
    "$bin/k3" health --server "127.0.0.1:$cport" --timeout-s 5
  expect_code UNAVAILABLE "a client trusting another CA" \
    "$bin/k3" health --server "127.0.0.1:$cport" --tls-ca "$work/other.pem"
  grep -q "coordinator serving k3.v1.Inference on 127.0.0.1:$cport .*TLS, bearer token required" "$work/coord.log" ||
    fail "the coordinator does not say it serves TLS with a token"
fi
echo "client auth and TLS: ok"

# ---- 4. a coordinator without the worker token is refused by the leader ------------------------
"$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$wport" --listen "127.0.0.1:$c2port" \
  "${coord_worker_tls[@]}" > "$work/coord-no-worker-token.log" 2>&1 &
c2pid=$!
pids+=("$c2pid")
wait_for "$work/coord-no-worker-token.log" "COORDINATOR READY" 30 || fail "second coordinator did not start"
wait_for "$work/coord-no-worker-token.log" "health check of worker group 127.0.0.1:$wport failed: UNAUTHENTICATED" 10 ||
  fail "a coordinator without --worker-token-file was not refused with UNAUTHENTICATED"
"$bin/k3" health --server "127.0.0.1:$c2port" > /dev/null 2>&1 && fail "a refused coordinator says SERVING"
kill "$c2pid"; wait "$c2pid" 2>/dev/null
echo "worker endpoint auth: ok"

# ---- 5. per-client concurrency limit (no auth: the client is its address) ----------------------
kill "$cpid"; wait "$cpid" 2>/dev/null
"$bin/k3-coordinator" --model "$model" --workers "127.0.0.1:$wport" --listen "127.0.0.1:$c2port" \
  --worker-token-file "$work/worker.token" "${coord_worker_tls[@]}" --max-concurrent-per-client 2 \
  > "$work/coord-limit.log" 2>&1 &
pids+=($!)
wait_for "$work/coord-limit.log" "COORDINATOR READY" 30 || fail "limited coordinator did not start"
kl() { "$bin/k3" "$@" --server "127.0.0.1:$c2port"; }
for _ in $(seq 1 50); do kl health > /dev/null 2>&1 && break; sleep 0.2; done
kl health > /dev/null || fail "limited coordinator: health"
kl generate --ids "$prompt" --max-tokens 2000 --ignore-eos --timeout-s 6 > /dev/null 2> "$work/long1.err" &
l1=$!
kl generate --ids "$prompt" --max-tokens 2000 --ignore-eos --timeout-s 6 > /dev/null 2> "$work/long2.err" &
l2=$!
sleep 2
t0=$(date +%s%N)
out=$(kl generate --ids "$prompt" --max-tokens 4 --ignore-eos --timeout-s 30 2>&1) && fail "a third concurrent request ran"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "$out" | grep -q "RESOURCE_EXHAUSTED" || fail "third request: expected RESOURCE_EXHAUSTED, got: $out"
echo "$out" | grep -q "client 127.0.0.1 already has 2 requests in flight" || fail "third request: $out"
[ "$ms" -lt 3000 ] || fail "the refusal took $ms ms (it must not queue)"
wait "$l1" "$l2"
grep -q DEADLINE_EXCEEDED "$work/long1.err" && grep -q DEADLINE_EXCEEDED "$work/long2.err" ||
  fail "the long requests did not end with their deadline: $(cat "$work"/long*.err)"
# Their deadlines released the count: two at a time again, then more one after another.
for _ in 1 2 3; do
  kl generate --ids "$prompt" --max-tokens 2 --ignore-eos --timeout-s 30 > /dev/null 2> "$work/after.err" ||
    fail "after the deadlines: $(cat "$work/after.err")"
done
echo "per-client limit: ok (refused in $ms ms)"
echo "security e2e: $(( $(date +%s) - start )) s"
echo "1 passed, 0 failed"
