// Hopper's bulk copy (TMA without a tensor map) into shared memory and the mbarrier that counts
// its bytes: one thread asks for a contiguous range with one instruction, the consumers wait on
// the barrier's phase. The PTX wrappers only (sm_90+; kernels that use them check the arch on the
// host). A barrier per buffer: init once (count 1), then per use the issuing thread arms it with
// the bytes to expect (ArriveExpectTx) and issues the copies; the phase completes when they have
// landed, and every reader waits for the use's parity (use index & 1).
#pragma once

#include <cstdint>

namespace k3::cuda::ptx {

__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialized barriers visible to the async proxy (the copies); a block barrier after it
// makes them visible to the other threads.
__device__ __forceinline__ void MbarInitFence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// The calling thread's arrival, with `bytes` more to expect from copies before the phase completes.
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Spins until the phase of the given parity has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// bytes (a multiple of 16; dst and src 16-byte aligned) from global src to shared dst, counted
// on `bar`.
__device__ __forceinline__ void BulkCopy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

}  // namespace k3::cuda::ptx
