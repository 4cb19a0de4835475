#!/usr/bin/env bash
# Keeps bench/baselines.lock honest (see its header): names carry the configuration, every
# non-zero value is stated with its slot name in its committed source, peer slots pin the peer's
# repository@commit, and no value went down since the last commit that changed the file.
#   check_baselines.sh REPO_ROOT
set -uo pipefail
root=$1
cd "$root" || exit 1
lock=bench/baselines.lock
errors=0
err() { echo "baselines.lock: $*"; errors=$((errors + 1)); }
ours='^K3[A-Z0-9]+_(IQ1S|IQ2XS|IQ2XXS|Q2K|Q3K|Q4K|Q5K|Q6K|Q8_0|BF16|F16)_H[12]00X[0-9]+[A-Z]*_(CTX[0-9]+K?|PP[0-9]+K?|D[0-9]+K?)(_B[0-9]+)?_[A-Z]+$'
peer='^PEER_[A-Z0-9_]+$'
declare -A seen
n=0
while read -r slot value source pin; do
  [ -z "$slot" ] || [ "${slot:0:1}" = "#" ] && continue
  n=$((n + 1))
  [ -n "${seen[$slot]:-}" ] && err "$slot appears twice"
  seen[$slot]=$value
  [[ "$value" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { err "$slot: value '$value' is not a number"; continue; }
  if [[ "$slot" =~ $peer ]]; then
    [[ "${pin:-}" =~ ^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40}$ ]] || err "$slot: a peer slot must pin REPO@COMMIT (40 hex digits)"
  elif ! [[ "$slot" =~ $ours ]]; then
    err "$slot: the name must be MODEL_QUANT_GPUS_CONTEXT[_BATCH]_METRIC"
  fi
  [ "$value" = 0 ] && continue
  if [ ! -f "$source" ]; then
    # The peer's file lives in ../shared, which CI has beside the clone; absent elsewhere.
    if [[ "$slot" =~ $peer ]] && [[ "$source" == ../shared/* ]]; then continue; fi
    err "$slot: source '$source' does not exist"
    continue
  fi
  if [[ "$source" == bench/results/* ]] && ! git ls-files --error-unmatch "$source" > /dev/null 2>&1; then
    err "$slot: $source is not committed"
  fi
  name=${slot#PEER_}
  grep -q "$name" "$source" || err "$slot: $source does not name the slot"
  grep -q "$value" "$source" || err "$slot: $source does not state $value"
done < "$lock"
# Only raised: compare with the lock before the last commit that changed it.
prev=$(git log -n 2 --format=%H -- "$lock" 2>/dev/null | sed -n 2p)
if [ -n "$prev" ]; then
  while read -r slot value _; do
    [ -z "$slot" ] || [ "${slot:0:1}" = "#" ] && continue
    now=${seen[$slot]:-}
    [ -z "$now" ] && { err "$slot was removed"; continue; }
    awk -v a="$now" -v b="$value" 'BEGIN { exit !(a + 0 < b + 0) }' && err "$slot went down: $value -> $now"
  done < <(git show "$prev:$lock")
fi
if [ "$errors" -gt 0 ]; then
  echo "$errors problem(s) in $lock"
  exit 1
fi
echo "baselines.lock: $n slots consistent"
