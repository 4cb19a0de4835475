#!/usr/bin/env bash
# The peer-memory all-reduce on nvidia-h200-x2: peer_allreduce_test and k3_allreduce_bench under
# mpirun -np 2, then engine_cuda_tp_test if packed (with the golden data, as tp_pack.sh does).
# Pack: cmake --build build/cuda -j1 --target peer_allreduce_test k3_allreduce_bench [engine_cuda_tp_test]
#       BINS="peer_allreduce_test k3_allreduce_bench engine_cuda_tp_test" bash bench/device/tp_pack.sh
# Run (carry .k3carry): bash bench/device/allreduce_run.sh. Logs under $OUT.
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
C=$PWD/.k3carry
B=/tmp/k3ar
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 NCCL_DEBUG=WARN
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
stamp machine
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv,noheader || true
nvidia-smi topo -m || true
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
k3_find_missing_libs "$B"
ldd $B/* | grep "not found" && echo "MISSING LIBRARIES"
mpirun --version | head -1
MPI="mpirun -np 2 --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x NCCL_DEBUG -x OMPI_MCA_btl_vader_single_copy_mechanism"

stamp "peer_allreduce_test (mpirun -np 2)"
timeout 90 $MPI $B/peer_allreduce_test --gtest_color=no > "$OUT/peer_test.txt" 2>&1
echo "peer test rc=$?"
grep -vE '^\[ *RUN' "$OUT/peer_test.txt" | tail -40

stamp "k3_allreduce_bench 1000 (mpirun -np 2)"
timeout 60 $MPI $B/k3_allreduce_bench 1000 > "$OUT/bench.txt" 2>&1
echo "bench rc=$?"
cat "$OUT/bench.txt"

if [ -x $B/engine_cuda_tp_test ]; then
  [ -e /work/shared/data/golden/k3-golden-a.gguf ] || { mkdir -p /work/shared/data && ln -sfn "$C/shared/data/golden" /work/shared/data/golden; }
  export K3_SHARED_DIR=$C/shared
  [ -f $C/shared/data/golden/k3-golden-a.gguf ] || xz -dc $C/shared/data/golden/k3-golden-a.gguf.xz > $C/shared/data/golden/k3-golden-a.gguf 2>/dev/null || true
  REM=$(( 225 - ($(date +%s) - T0) ))
  stamp "engine_cuda_tp_test with the peer path (time left ${REM}s)"
  timeout $REM $MPI -x K3_SHARED_DIR $B/engine_cuda_tp_test --gtest_color=no > "$OUT/engine_tp_peer.txt" 2>&1
  echo "engine tp test (peer) rc=$?"
  grep -E '^\[  (PASSED|FAILED|  OK|  FAILED) |FAILED|Failure|worst row|relL2' "$OUT/engine_tp_peer.txt" | head -40
fi
stamp done
