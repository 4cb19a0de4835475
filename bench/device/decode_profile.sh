#!/usr/bin/env bash
# Per-kernel time of one eager decode step (ncu --print-summary per-kernel) on the real-width slice,
# on one GPU: where a step's milliseconds go, kernel by kernel. Binaries packed by tp_pack.sh
# (BINS=k3_cuda_decode_bench; carry .k3carry).
#   bash bench/device/decode_profile.sh [batch] [ctx]        (default 1 4096)
#   K3_BENCH_EXTRA=--int8-experts bash bench/device/decode_profile.sh     (more bench flags)
#   K3_LAYERS=4 bash bench/device/decode_profile.sh                      (fewer layers: an 80 GB card)
#   K3_PREFILL=4096 bash bench/device/decode_profile.sh                     (a prefill instead)
#   K3_PROFILE_TAG=x_: the output files are $OUT/x_ncu_step.txt and $OUT/x_kernels_by_time.txt
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
C=$PWD/${K3_CARRY:-.k3carry}
B=/tmp/k3bin
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
BATCH=${1:-1}
CTX=${2:-4096}
# K3_PREFILL=N: one prefill of N tokens in one chunk instead (4 layers: KDA 0-2, MLA 3).
if [ -n "${K3_PREFILL:-}" ]; then
  WHAT="--layers 4 --batches 0 --prefill $K3_PREFILL --chunk $K3_PREFILL --ncu-prefill"
else
  WHAT="--layers ${K3_LAYERS:-8} --ctx $CTX --batches $BATCH --steps 2 --ncu-step"
fi
# K3_NCU_WHAT: what ncu collects (default the SpeedOfLight section, ~10 replays per kernel;
# "--metrics gpu__time_duration.sum" times each kernel in one pass), plus e.g. "--launch-count 200".
ncu --profile-from-start off --clock-control none --print-summary per-kernel ${K3_NCU_WHAT:---section SpeedOfLight} \
  $B/k3_cuda_decode_bench --preset slice --quant UD-IQ1_S $WHAT ${K3_BENCH_EXTRA:-} \
  > "$OUT/${K3_PROFILE_TAG:-}ncu_step.txt" 2>&1
echo "ncu rc=$?"
# One line per kernel: invocations, mean duration (us), total (us), sorted by total.
python3 - "$OUT/${K3_PROFILE_TAG:-}ncu_step.txt" <<'PY' | tee "$OUT/${K3_PROFILE_TAG:-}kernels_by_time.txt"
import re, sys
name = None; rows = []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s{2}(\S.*?)\s+\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\).*Invocations\s*(\d+)", line) or re.match(r"\s{2}(\S.*)\s+\(.*\)\s+Invocations:?\s*(\d+)", line)
    if m: name, inv = m.group(1), int(m.group(2)); continue
    m = re.match(r"\s+(?:Duration|gpu__time_duration.sum)\s+(\w+)\s+([\d.,]+)\s+([\d.,]+)\s+([\d.,]+)", line)
    if m and name:
        unit, avg = m.group(1), float(m.group(4).replace(",", ""))  # columns: min max avg
        scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}.get(unit, 1.0)
        rows.append((avg * scale * inv, inv, avg * scale, name[:110])); name = None
rows.sort(reverse=True)
tot = sum(r[0] for r in rows)
print(f"total {tot:.1f} us over {sum(r[1] for r in rows)} kernels")
for t, inv, avg, n in rows: print(f"{t:9.1f} us  {inv:4d} x {avg:8.2f} us  {n}")
PY
