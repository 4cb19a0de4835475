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

}  // namespace k3::synth
