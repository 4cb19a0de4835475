// Pulls a byte range of device memory into the L2 cache ahead of the kernel that will read it
// (Hopper's bulk prefetch, cp.async.bulk.prefetch.L2): a few warps issue the requests and exit;
// the copy engine fetches while other work runs. Nothing is written and nothing waits for the
// data, so it changes no result, only when bytes arrive.
//
// Why: a batch-1 decode step is a chain of bandwidth-bound products and latency-bound kernels
// (norms, the KDA recurrence, the router) during which HBM is idle. A prefetch launched on its own
// stream at the start of such a window lets the next product find part of its weights in L2.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace k3::cuda {

inline constexpr size_t kL2PrefetchPiece = size_t{1} << 16;  // bytes per prefetch request

struct L2PrefetchRange {
  const void* data;  // device, 16-byte aligned
  size_t bytes;      // rounded down to a multiple of 16 (a tail of < 16 bytes is not fetched)
};

// Launches the prefetch of up to two ranges (the second may be empty: {nullptr, 0}) on `stream`.
// cudaErrorInvalidValue for an unaligned range; empty ranges launch nothing.
cudaError_t L2Prefetch(const L2PrefetchRange& a, const L2PrefetchRange& b, cudaStream_t stream);

}  // namespace k3::cuda
