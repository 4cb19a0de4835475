// K3's cross-layer residual mix ("attn_res", spec 4.1): a softmax-weighted blend of the banked
// layer-input checkpoints and the current stream. Scores use RMS-normalized values; the sum
// uses the raw ones.
#pragma once

#include <cstdint>

namespace k3::cpu {

// out = Σ_i p_i·bank[i] + p_last·x, p = softmax([s(bank[0]) .. s(bank[n-1]), s(x)]),
// s(c) = Σ_d rms(c)[d]·w[d]. With n_ckpt == 0, out = x. out may alias x.
void ResidualMix(const float* const* bank, int n_ckpt, const float* x, const float* w, float eps,
                 int64_t n, float* out);

}  // namespace k3::cpu
