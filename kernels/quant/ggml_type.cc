#include "kernels/quant/ggml_type.h"

#include <array>
#include <cctype>
#include <cstdlib>

namespace k3::quant {
namespace {

// clang-format off
constexpr std::array kTypes = {
  //          type               name       elems bytes must  dequant
  TypeTraits{GgmlType::kF32,     "F32",     1,    4,    true,  true},
  TypeTraits{GgmlType::kF16,     "F16",     1,    2,    true,  true},
  TypeTraits{GgmlType::kQ4_0,    "Q4_0",    32,   18,   false, true},
  TypeTraits{GgmlType::kQ4_1,    "Q4_1",    32,   20,   false, false},
  TypeTraits{GgmlType::kQ5_0,    "Q5_0",    32,   22,   false, true},
  TypeTraits{GgmlType::kQ5_1,    "Q5_1",    32,   24,   false, false},
  TypeTraits{GgmlType::kQ8_0,    "Q8_0",    32,   34,   true,  true},
  TypeTraits{GgmlType::kQ8_1,    "Q8_1",    32,   36,   false, false},
  TypeTraits{GgmlType::kQ2_K,    "Q2_K",    256,  84,   true,  true},
  TypeTraits{GgmlType::kQ3_K,    "Q3_K",    256,  110,  true,  true},
  TypeTraits{GgmlType::kQ4_K,    "Q4_K",    256,  144,  true,  true},
  TypeTraits{GgmlType::kQ5_K,    "Q5_K",    256,  176,  true,  true},
  TypeTraits{GgmlType::kQ6_K,    "Q6_K",    256,  210,  true,  true},
  TypeTraits{GgmlType::kQ8_K,    "Q8_K",    256,  292,  false, false},
  TypeTraits{GgmlType::kIQ2_XXS, "IQ2_XXS", 256,  66,   true,  true},
  TypeTraits{GgmlType::kIQ2_XS,  "IQ2_XS",  256,  74,   true,  true},
  TypeTraits{GgmlType::kIQ3_XXS, "IQ3_XXS", 256,  98,   false, true},
  TypeTraits{GgmlType::kIQ1_S,   "IQ1_S",   256,  50,   true,  true},
  TypeTraits{GgmlType::kIQ4_NL,  "IQ4_NL",  32,   18,   false, true},
  TypeTraits{GgmlType::kIQ3_S,   "IQ3_S",   256,  110,  false, true},
  TypeTraits{GgmlType::kIQ2_S,   "IQ2_S",   256,  82,   false, true},
  TypeTraits{GgmlType::kIQ4_XS,  "IQ4_XS",  256,  136,  false, true},
  TypeTraits{GgmlType::kI8,      "I8",      1,    1,    false, false},
  TypeTraits{GgmlType::kI16,     "I16",     1,    2,    false, false},
  TypeTraits{GgmlType::kI32,     "I32",     1,    4,    false, false},
  TypeTraits{GgmlType::kI64,     "I64",     1,    8,    false, false},
  TypeTraits{GgmlType::kF64,     "F64",     1,    8,    false, false},
  TypeTraits{GgmlType::kIQ1_M,   "IQ1_M",   256,  56,   false, true},
  TypeTraits{GgmlType::kBF16,    "BF16",    1,    2,    true,  true},
};
// clang-format on

}  // namespace

std::optional<TypeTraits> FindType(uint32_t id) {
  for (const TypeTraits& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

const TypeTraits& Traits(GgmlType type) {
  for (const TypeTraits& t : kTypes) {
    if (t.type == type) return t;
  }
  std::abort();  // every enumerator has a row above
}

std::optional<GgmlType> TypeFromName(std::string_view name) {
  for (const TypeTraits& t : kTypes) {
    if (t.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == t.name[i];
    }
    if (same) return t.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> BytesFor(GgmlType type, uint64_t n_elems) {
  const TypeTraits& t = Traits(type);
  if (n_elems % t.block_elems != 0) return std::nullopt;
  const uint64_t blocks = n_elems / t.block_elems;
  if (blocks > UINT64_MAX / t.block_bytes) return std::nullopt;
  return blocks * t.block_bytes;
}

}  // namespace k3::quant
