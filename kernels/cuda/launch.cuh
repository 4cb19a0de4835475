// The one way our kernels are launched: LaunchKernel, with programmatic dependent launch (PDL,
// sm_90+), and PdlEnter, the first statement of every kernel.
//
// Why: a decode step is ~300 small kernels in one CUDA graph, each on the one before it. Without
// PDL a kernel is launched only when the one before it has finished, so every boundary costs the
// launch, the blocks' start and the drain of the last wave (microseconds each, the same order as
// the kernels themselves at batch 1). With the attribute set, the next kernel may be launched as
// soon as every block of this one has started (PdlEnter's trigger), and its blocks wait, resident,
// in PdlEnter until this one has finished.
//
// The rule that keeps this exactly as ordered as plain launches: PdlEnter comes before a kernel's
// first global memory access, read or write. griddepcontrol.wait returns only once the kernel
// before it on the stream has completed and its writes are visible, so no kernel body overlaps
// the one before it (also none of the kernels before that one: each of them waited in turn). What
// overlaps is launch latency and block scheduling. Without the attribute (K3_PDL=0, or a stream
// edge that is not programmatic: events, memsets, NCCL kernels) both instructions are no-ops.
// tests/lint/launch_check.sh keeps the rule: no `<<<` launch, every __global__ starts with
// PdlEnter (or PdlWait, below).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace k3::cuda {

// First statement of every kernel body (before any global load or store; shared-memory
// declarations may precede it). Blocks that return early may do so after it.
__device__ __forceinline__ void PdlEnter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// PdlEnter without the early trigger: the kernel after this one is launched only when this one
// has exited. For kernels that spin on another GPU (the peer all-reduce): the next kernel's blocks,
// parked on the SMs while this one spins, could starve the work that GPU is waiting for (work on
// this GPU's other stream that it joins, or its own copy of the same wait).
__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launches carry the PDL attribute unless the environment sets K3_PDL=0 (read once per process;
// the A/B switch of the benchmarks).
inline bool PdlEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("K3_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

// LaunchKernel (below) with thread-block clusters of `cluster_x` blocks along x chosen at run time
// (0: none; gridDim.x must be a multiple of it; kernels with __cluster_dims__ use LaunchKernel).
template <typename... Params, typename... Args>
cudaError_t LaunchKernelInClusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                   unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attrs[2]{};
  unsigned n = 0;
  if (PdlEnabled()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster_x > 0) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = cluster_x;
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute. Returns the launch's
// error (configuration errors included), as cudaGetLastError would after <<<>>>.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         Args&&... args) {
  return LaunchKernelInClusters(kernel, grid, block, smem, stream, 0, std::forward<Args>(args)...);
}

}  // namespace k3::cuda
