// Element-wise activations on the GPU (spec 4.3, 4.4, 4.5), the same functions as
// kernels/cpu/activation.h, over [n_tokens][width] slices with their own row strides.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda {

// out = situ(g, u) = beta*tanh(g/beta)*sigmoid(g) * (lambda > 0 ? lambda*tanh(u/lambda) : u).
struct SituParams {
  const float* g;      // [n_tokens][g_stride] gate projection
  const float* u;      // [n_tokens][u_stride] up projection
  float* out;          // [n_tokens][out_stride]; may alias g or u exactly
  int64_t n_tokens;    // rows
  int64_t width;       // values per row (FFN width: 3072 expert, 6144 shared, 33792 dense)
  int64_t g_stride;    // floats between rows of g
  int64_t u_stride;    // floats between rows of u
  int64_t out_stride;  // floats between rows of out
  float beta;          // activation.situ_beta (4)
  float lambda;        // activation.situ_linear_beta (25); <= 0 leaves u as is
};
cudaError_t Situ(const SituParams& p, cudaStream_t stream);

// x *= sigmoid(gate): the MLA output gate (spec 4.5).
struct SigmoidGateMulParams {
  float* x;             // [n_tokens][x_stride], updated
  const float* gate;    // [n_tokens][gate_stride]
  int64_t n_tokens;     // rows
  int64_t width;        // values per row (heads * v_head_dim)
  int64_t x_stride;     // floats between rows of x
  int64_t gate_stride;  // floats between rows of gate
};
cudaError_t SigmoidGateMul(const SigmoidGateMulParams& p, cudaStream_t stream);

// y = sigmoid(x) over n contiguous values (KDA beta, spec 4.4); y may alias x.
struct SigmoidParams {
  const float* x;  // [n]
  float* y;        // [n]
  int64_t n;       // values
};
cudaError_t Sigmoid(const SigmoidParams& p, cudaStream_t stream);

}  // namespace k3::cuda
