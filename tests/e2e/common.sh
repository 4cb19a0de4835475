# Shared by the end-to-end scripts (tests/e2e, tests/load): loopback ports, the processes a test
# started and their cleanup, logs on failure, waiting for a READY line. A script sets `work` (its
# scratch directory: removed at exit unless E2E_KEEP_WORK=1) and then sources this file:
#   . "$(dirname "$0")/../e2e/common.sh"
# Started processes go into `pids` (pids+=($!)); at exit each gets SIGTERM, then SIGKILL after 3 s.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
pids=()

# N distinct loopback ports, one per line: read a b c < <(ports 3 | xargs). Random below the
# kernel's ephemeral range (ip_local_port_range: the ports outgoing connections and Open MPI's own
# listeners are given; a pick inside it once collided with one: "cannot listen on 127.0.0.1:54762"),
# from 20000 up, and none that something already listens on.
ports() {
  local n=$1 out=() p lo=32768
  read -r lo _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
  local base=20000
  [ "$lo" -gt 21000 ] || base=10000
  local span=$(( lo - base ))
  [ "$span" -ge 1000 ] || { base=20000; span=40000; }  # an odd range: the old pick
  while [ "${#out[@]}" -lt "$n" ]; do
    p=$(( base + (RANDOM * 7 + $$ + ${#out[@]} * 131) % span ))
    [[ " ${out[*]} " == *" $p "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue  # taken: something accepts there
    out+=("$p")
  done
  printf '%s\n' "${out[@]}"
}

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for _ in $(seq 1 30); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ "${#pids[@]}" -gt 0 ] && wait "${pids[@]}" 2>/dev/null
  [ "${E2E_KEEP_WORK:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

# Says why, shows the end of every log in $work, and ends the test.
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
  exit 1
}

wait_for() {  # file pattern seconds: 0 once the file has a line matching the pattern
  for _ in $(seq 1 $(( $3 * 10 ))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
