#!/usr/bin/env bash
# ncu (full set) of the IQ1_S sub-block GEMV on the 16-expert gate case, plus its SASS, on the GPU
# machine: how gemv_iq1s_sub.cu's bottleneck was found. Carry .k3carry with k3_cuda_gemv_bench.xz
# (strip + xz of build/cuda/bin/k3_cuda_gemv_bench) and the libraries tp_pack.sh copies.
set -u
C=$PWD/.k3carry; B=/tmp/k3bin
source "$(dirname "$0")/unpack_carry.sh"
k3_unpack_carry "$C" "$B" || exit 1
ln -sf "$B/k3_cuda_gemv_bench" "$B/gb"
$B/gb --only="x16" 2>&1 | tail -8
ncu --kernel-name regex:Iq1sSub --launch-skip 3 --launch-count 1 --set full $B/gb --only="gate 3584->3072 x16" > $OUT/ncu.txt 2>&1
grep -E "Duration|Throughput|Issue Slots|Warp Cycles|Bank|Wavefronts|Executed Ipc|Registers|Achieved Occupancy|Theoretical Occupancy|Stall|stall|L1/TEX Hit|L2 Hit|DRAM Throughput|Memory Throughput|Compute \(SM\)" $OUT/ncu.txt | head -60
cuobjdump -sass -fun '_ZN2k34cuda5qgemv49_GLOBAL__N__757e3f77_16_gemv_iq1s_sub_cu_c34c804413Iq1sSubKernelILi1EEEvNS1_4ArgsE' $B/gb > $OUT/sass.txt 2>&1 || cuobjdump -sass $B/gb | awk '/Iq1sSubKernelILi1E/{f=1} /Function :/{if(!/Iq1sSubKernelILi1E/)f=0} f' > $OUT/sass.txt
wc -l $OUT/sass.txt
