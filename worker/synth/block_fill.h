// Random but valid blocks of every ggml type the engine computes with, at a controlled scale.
//
// F32/F16/BF16 hold the ValueSpec's values directly. The block formats are written without any
// quantization search: random payload bits (grid indices, signs, quants), small scales drawn
// from the upper half of their range (as real quantizers produce), symmetric signs, and a
// super-scale d per block set so that the decoded weights have the requested std. d varies by
// +-25% from block to block, so a kernel reading the wrong block's scale cannot pass unnoticed.
//
// Block b of a tensor depends only on (tensor key, b): see counter_rng.h.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/quant/ggml_type.h"
#include "worker/synth/value_spec.h"

namespace k3::synth {

// F32 F16 BF16 Q8_0 Q2_K..Q6_K IQ2_XXS IQ2_XS IQ1_S: the types QuantMix may choose.
bool CanSynthesize(quant::GgmlType type);

// Writes blocks [first_block, first_block + n_blocks) of a tensor with key `key` to `out`
// (n_blocks * block_bytes bytes). For plain types a block is one element. Block types carry
// only the spec's std (their values are zero-mean); kNegExpUniform needs a plain type.
void FillBlocks(quant::GgmlType type, const ValueSpec& values, uint64_t key, uint64_t first_block,
                uint64_t n_blocks, uint8_t* out);

// RMS of the decoded weights of `type` per unit of super-scale d (measured once, by decoding
// sample blocks with the project's dequantizer). Exposed for the tests.
double UnitRms(quant::GgmlType type);

// ---- what the GPU fill (worker/synth_cuda/) takes from here, so that it makes the same bytes ----

// The fp16 scale fields FillBlocks writes into a block of a block type: d = d0 * factor with
// d0 = values.std / UnitRms(type) and factor = 0.75 + k * 0.5/15, k (0..15) the low 4 bits of the
// block's first random word; dmin = r * d for the K-quants with mins (Q2_K 1.5, Q4_K 7.5, Q5_K
// 15.5), 0 for the others. The same f32 operations as FillBlocks (this file is built without
// FMA contraction), so the device fill needs no floating point for block types.
struct BlockScaleBits {
  uint16_t d = 0;
  uint16_t dmin = 0;
};
// Requires a block type of CanSynthesize, values.kind == kNormal and 0 <= k < 16.
BlockScaleBits BlockScalesFor(quant::GgmlType type, const ValueSpec& values, int k);

// Q8_0's quants: a random byte -> a Gaussian int8 (the 256 normal quantiles, outermost +-127).
const std::array<int8_t, 256>& GaussQ8Table();

}  // namespace k3::synth
