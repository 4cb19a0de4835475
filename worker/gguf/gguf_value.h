// One GGUF metadata value, as read from a file or about to be written to one.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "worker/gguf/gguf_file.h"

namespace k3::gguf {

// Bytes of one element of a fixed-size type; 0 for strings, arrays and unknown ids.
uint64_t ValueTypeSize(ValueType t);
// True for the 13 ids the format defines.
bool IsKnownValueType(uint32_t id);

// The GGUF type of a C++ scalar (u8..f64, bool).
template <typename T> struct ValueTypeOf;
// clang-format off
template <> struct ValueTypeOf<uint8_t> { static constexpr ValueType kType = ValueType::kU8; };
template <> struct ValueTypeOf<int8_t> { static constexpr ValueType kType = ValueType::kI8; };
template <> struct ValueTypeOf<uint16_t> { static constexpr ValueType kType = ValueType::kU16; };
template <> struct ValueTypeOf<int16_t> { static constexpr ValueType kType = ValueType::kI16; };
template <> struct ValueTypeOf<uint32_t> { static constexpr ValueType kType = ValueType::kU32; };
template <> struct ValueTypeOf<int32_t> { static constexpr ValueType kType = ValueType::kI32; };
template <> struct ValueTypeOf<uint64_t> { static constexpr ValueType kType = ValueType::kU64; };
template <> struct ValueTypeOf<int64_t> { static constexpr ValueType kType = ValueType::kI64; };
template <> struct ValueTypeOf<float> { static constexpr ValueType kType = ValueType::kF32; };
template <> struct ValueTypeOf<double> { static constexpr ValueType kType = ValueType::kF64; };
template <> struct ValueTypeOf<bool> { static constexpr ValueType kType = ValueType::kBool; };
// clang-format on

// A scalar is stored as an array of one element, so scalars and arrays share one code path.
// Fixed-size elements live in `raw` exactly as the file has them (little-endian), which
// keeps a round trip bit-exact (NaN payloads, non-0/1 bools).
struct Value {
  ValueType type = ValueType::kU8;       // kArray for arrays
  ValueType elem_type = ValueType::kU8;  // the element type; equals `type` for a scalar
  uint64_t count = 1;                    // elements (1 for a scalar)
  std::vector<uint8_t> raw;              // fixed-size elements: count * ValueTypeSize bytes
  std::vector<std::string> strings;      // string elements (count of them)
  // Arrays of arrays are skipped when read (ggml refuses them): only `count` is kept.

  bool is_array() const { return type == ValueType::kArray; }

  // Element i of a fixed-size value of C++ type T; the caller has checked elem_type and i.
  template <typename T>
  T Element(uint64_t i) const {
    if constexpr (std::is_same_v<T, bool>) {
      return raw[i] != 0;
    } else {
      T v;
      std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
      return v;
    }
  }

  bool operator==(const Value&) const = default;
};

template <typename T>
Value MakeScalar(T v) {
  Value out;
  out.type = out.elem_type = ValueTypeOf<T>::kType;
  if constexpr (std::is_same_v<T, bool>) {
    out.raw = {static_cast<uint8_t>(v ? 1 : 0)};
  } else {
    out.raw.resize(sizeof(T));
    std::memcpy(out.raw.data(), &v, sizeof(T));
  }
  return out;
}

Value MakeString(std::string_view s);

template <typename T>
Value MakeArray(std::span<const T> v) {
  Value out;
  out.type = ValueType::kArray;
  out.elem_type = ValueTypeOf<T>::kType;
  out.count = v.size();
  if constexpr (std::is_same_v<T, bool>) {
    for (bool b : v) out.raw.push_back(b ? 1 : 0);
  } else {
    out.raw.resize(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(out.raw.data(), v.data(), out.raw.size());
  }
  return out;
}
template <typename T>
Value MakeArray(const std::vector<T>& v) {
  return MakeArray(std::span<const T>(v));
}
Value MakeArray(const std::vector<bool>& v);
Value MakeStringArray(std::span<const std::string> v);

// "u32", "string", "u32[8]", "string[4096]", "array[3]" (for arrays of arrays).
std::string ValueTypeLabel(const Value& v);
// The value as text: strings quoted and escaped, arrays abbreviated after max_items.
std::string FormatValue(const Value& v, size_t max_items);
// One element (strings quoted and escaped); for fixed-size and string values.
std::string FormatElement(const Value& v, uint64_t i);

}  // namespace k3::gguf
