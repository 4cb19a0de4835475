// The ggml tensor types a GGUF file may hold: ids, block geometry, names.
// The ids and block sizes are part of the file format (ggml/include/ggml.h, ggml-common.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace k3::quant {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
};

struct TypeTraits {
  GgmlType type;
  std::string_view name;     // ggml's name, e.g. "IQ1_S"
  uint32_t block_elems;      // elements per block (1 for plain types)
  uint32_t block_bytes;      // bytes per block
  bool must_have;            // needed by the K3 UD quants: the engine computes with it
  bool can_dequantize;       // this project has a CPU dequantizer for it
};

// Traits of a type id as read from a file; nullopt for ids this project does not know.
std::optional<TypeTraits> FindType(uint32_t id);
// Traits of a known type (aborts on an enumerator without traits: a programming error).
const TypeTraits& Traits(GgmlType type);
// Type by ggml name ("Q8_0", "iq1_s": case-insensitive).
std::optional<GgmlType> TypeFromName(std::string_view name);
inline std::string_view TypeName(GgmlType type) { return Traits(type).name; }

// Bytes of `n_elems` elements of `type`; n_elems must be a multiple of the block size.
// Returns nullopt when it is not, or on overflow.
std::optional<uint64_t> BytesFor(GgmlType type, uint64_t n_elems);

}  // namespace k3::quant
