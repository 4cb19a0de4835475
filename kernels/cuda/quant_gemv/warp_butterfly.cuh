// The xor-butterfly warp reduction of several values at once, halving what each lane carries
// (shared by the direct GEMV and the IQ1_S sub-block GEMV, internal to k3_kernels_cuda).
#pragma once

#include <cuda_runtime.h>

namespace k3::cuda::qgemv {

// Sums each of v[0..N) over the 32 lanes along the xor-butterfly tree (offsets 16, 8, 4, 2, 1). While
// N is even, a level halves what is carried: at offset O a lane keeps the half picked by (lane & O)
// and sends the other half to lane ^ O, so the level costs N/2 shuffles and adds instead of N. Each
// value's total is the plain butterfly's bit for bit (the same two partial sums meet at every level,
// and + is commutative), so the result does not depend on N, i.e. on the token count. Afterwards
// slot j of a lane holds the total of value base + j, j < kFinal; lanes with (lane & free_mask) != 0
// hold copies of a lane's with those bits clear.
template <int N, int O>
struct Butterfly {
  static constexpr bool kHalve = N % 2 == 0 && N > 1;
  static constexpr int kNext = kHalve ? N / 2 : N;
  static constexpr int kFinal = Butterfly<kNext, O / 2>::kFinal;
  __device__ __forceinline__ static void Run(float* v, int lane, int& base, int& free_mask) {
    if constexpr (kHalve) {
      const bool upper = (lane & O) != 0;
#pragma unroll
      for (int j = 0; j < N / 2; ++j) {
        const float keep = upper ? v[j + N / 2] : v[j];
        const float send = upper ? v[j] : v[j + N / 2];
        v[j] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, O));
      }
      if (upper) base += N / 2;
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) v[j] = __fadd_rn(v[j], __shfl_xor_sync(0xffffffffu, v[j], O));
      free_mask |= O;
    }
    Butterfly<kNext, O / 2>::Run(v, lane, base, free_mask);
  }
};

template <int N>
struct Butterfly<N, 0> {
  static constexpr int kFinal = N;
  __device__ __forceinline__ static void Run(float*, int, int&, int&) {}
};

}  // namespace k3::cuda::qgemv
