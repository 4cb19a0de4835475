// Which decoder serves which ggml type.
#include <array>

#include "kernels/quant/blocks.h"
#include "kernels/quant/decode.h"

namespace k3::quant {
namespace {

struct Entry {
  GgmlType type;
  Decoder decoder;
};

// clang-format off
constexpr std::array kDecoders = {
  Entry{GgmlType::kF32,     {1,      4,                    DecodeF32}},
  Entry{GgmlType::kF16,     {1,      2,                    DecodeF16}},
  Entry{GgmlType::kBF16,    {1,      2,                    DecodeBF16}},
  Entry{GgmlType::kQ4_0,    {kQK,    sizeof(BlockQ4_0),    DecodeQ4_0}},
  Entry{GgmlType::kQ5_0,    {kQK,    sizeof(BlockQ5_0),    DecodeQ5_0}},
  Entry{GgmlType::kQ8_0,    {kQK,    sizeof(BlockQ8_0),    DecodeQ8_0}},
  Entry{GgmlType::kQ2_K,    {kQK_K,  sizeof(BlockQ2_K),    DecodeQ2_K}},
  Entry{GgmlType::kQ3_K,    {kQK_K,  sizeof(BlockQ3_K),    DecodeQ3_K}},
  Entry{GgmlType::kQ4_K,    {kQK_K,  sizeof(BlockQ4_K),    DecodeQ4_K}},
  Entry{GgmlType::kQ5_K,    {kQK_K,  sizeof(BlockQ5_K),    DecodeQ5_K}},
  Entry{GgmlType::kQ6_K,    {kQK_K,  sizeof(BlockQ6_K),    DecodeQ6_K}},
  Entry{GgmlType::kIQ2_XXS, {kQK_K,  sizeof(BlockIQ2_XXS), DecodeIQ2_XXS}},
  Entry{GgmlType::kIQ2_XS,  {kQK_K,  sizeof(BlockIQ2_XS),  DecodeIQ2_XS}},
  Entry{GgmlType::kIQ2_S,   {kQK_K,  sizeof(BlockIQ2_S),   DecodeIQ2_S}},
  Entry{GgmlType::kIQ3_XXS, {kQK_K,  sizeof(BlockIQ3_XXS), DecodeIQ3_XXS}},
  Entry{GgmlType::kIQ3_S,   {kQK_K,  sizeof(BlockIQ3_S),   DecodeIQ3_S}},
  Entry{GgmlType::kIQ1_S,   {kQK_K,  sizeof(BlockIQ1_S),   DecodeIQ1_S}},
  Entry{GgmlType::kIQ1_M,   {kQK_K,  sizeof(BlockIQ1_M),   DecodeIQ1_M}},
  Entry{GgmlType::kIQ4_NL,  {kQK,    sizeof(BlockIQ4_NL),  DecodeIQ4_NL}},
  Entry{GgmlType::kIQ4_XS,  {kQK_K,  sizeof(BlockIQ4_XS),  DecodeIQ4_XS}},
};
// clang-format on

}  // namespace

const Decoder* FindDecoder(GgmlType type) {
  for (const Entry& e : kDecoders) {
    if (e.type == type) return &e.decoder;
  }
  return nullptr;
}

}  // namespace k3::quant
