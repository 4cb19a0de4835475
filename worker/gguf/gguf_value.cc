#include "worker/gguf/gguf_value.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/common/string_view_compat.h"
#include "worker/gguf/text_escape.h"

namespace k3::gguf {
namespace {

// Shortest text that reads back as the same float / double.
template <typename T>
std::string ShortestFloat(T v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

}  // namespace

std::string_view ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kU8:
      return "u8";
    case ValueType::kI8:
      return "i8";
    case ValueType::kU16:
      return "u16";
    case ValueType::kI16:
      return "i16";
    case ValueType::kU32:
      return "u32";
    case ValueType::kI32:
      return "i32";
    case ValueType::kF32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kU64:
      return "u64";
    case ValueType::kI64:
      return "i64";
    case ValueType::kF64:
      return "f64";
  }
  return "unknown";
}

uint64_t ValueTypeSize(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownValueType(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::kF64); }

Value MakeString(std::string_view s) {
  Value out;
  out.type = out.elem_type = ValueType::kString;
  out.strings.emplace_back(s);
  return out;
}

Value MakeArray(const std::vector<bool>& v) {
  Value out;
  out.type = ValueType::kArray;
  out.elem_type = ValueType::kBool;
  out.count = v.size();
  for (bool b : v) out.raw.push_back(b ? 1 : 0);
  return out;
}

Value MakeStringArray(std::span<const std::string> v) {
  Value out;
  out.type = ValueType::kArray;
  out.elem_type = ValueType::kString;
  out.count = v.size();
  out.strings.assign(v.begin(), v.end());
  return out;
}

std::string ValueTypeLabel(const Value& v) {
  if (!v.is_array()) return std::string(ValueTypeName(v.type));
  return absl::StrCat(AsAbsl(ValueTypeName(v.elem_type)), "[", v.count, "]");
}

std::string FormatElement(const Value& v, uint64_t i) {
  switch (v.elem_type) {
    case ValueType::kU8:
      return absl::StrCat(v.Element<uint8_t>(i));
    case ValueType::kI8:
      return absl::StrCat(v.Element<int8_t>(i));
    case ValueType::kU16:
      return absl::StrCat(v.Element<uint16_t>(i));
    case ValueType::kI16:
      return absl::StrCat(v.Element<int16_t>(i));
    case ValueType::kU32:
      return absl::StrCat(v.Element<uint32_t>(i));
    case ValueType::kI32:
      return absl::StrCat(v.Element<int32_t>(i));
    case ValueType::kU64:
      return absl::StrCat(v.Element<uint64_t>(i));
    case ValueType::kI64:
      return absl::StrCat(v.Element<int64_t>(i));
    case ValueType::kF32:
      return ShortestFloat(v.Element<float>(i));
    case ValueType::kF64:
      return ShortestFloat(v.Element<double>(i));
    case ValueType::kBool:
      return v.Element<bool>(i) ? "true" : "false";
    case ValueType::kString:
      return QuoteForDisplay(v.strings[i]);
    case ValueType::kArray:
      return "[...]";
  }
  return "?";
}

std::string FormatValue(const Value& v, size_t max_items) {
  if (!v.is_array()) return FormatElement(v, 0);
  if (v.elem_type == ValueType::kArray) {
    return absl::StrFormat("[%d nested arrays, not read]", v.count);
  }
  std::string out = "[";
  const uint64_t shown = std::min<uint64_t>(v.count, max_items);
  for (uint64_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    out += FormatElement(v, i);
  }
  if (shown < v.count) absl::StrAppend(&out, shown > 0 ? ", " : "", "... (", v.count, " items)");
  out += "]";
  return out;
}

}  // namespace k3::gguf
