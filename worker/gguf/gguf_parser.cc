#include "worker/gguf/gguf_parser.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/quant/ggml_type.h"
#include "worker/common/status_macros.h"
#include "worker/common/string_view_compat.h"
#include "worker/gguf/byte_cursor.h"
#include "worker/gguf/text_escape.h"

namespace k3::gguf::internal {
namespace {

// Smallest possible encodings, used to bound counts by the bytes left before allocating.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key len, 1-byte key, type, u8
constexpr uint64_t kMinTensorBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims=1, ne, type, offset
constexpr uint64_t kMinArrayBytes = 4 + 8;                   // nested array: type + count
constexpr uint64_t kMinStringBytes = 8;                      // length only
// Arrays of arrays are skipped, not stored; bound their depth so recursion stays shallow.
constexpr int kMaxNesting = 8;
// Never reserve more than this many elements up front: a vector then grows only as fast as
// its elements actually parse.
constexpr uint64_t kMaxReserve = 1 << 16;

absl::Status Prefixed(const absl::Status& s, std::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(AsAbsl(prefix), s.message()));
}

absl::Status Corrupt(uint64_t at, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat("offset %d: %s", at, what));
}

std::string ShapeString(const std::vector<int64_t>& ne) {
  return absl::StrCat("{", absl::StrJoin(ne, ", "), "}");
}

class Parser {
 public:
  Parser(std::span<const uint8_t> file, bool allow_header_only)
      : file_(file), in_(file), allow_header_only_(allow_header_only) {}

  absl::StatusOr<ParsedGguf> Run() {
    K3_RETURN_IF_ERROR(ReadMagicAndVersion());
    K3_ASSIGN_OR_RETURN(const uint64_t n_tensors, in_.Read<uint64_t>("tensor count"));
    K3_ASSIGN_OR_RETURN(const uint64_t n_kv, in_.Read<uint64_t>("metadata count"));
    K3_RETURN_IF_ERROR(ReadMetadata(n_kv));
    K3_RETURN_IF_ERROR(ReadAlignment());
    K3_RETURN_IF_ERROR(ReadTensorTable(n_tensors));
    K3_RETURN_IF_ERROR(PlaceTensorData());
    return std::move(out_);
  }

 private:
  absl::Status ReadMagicAndVersion() {
    K3_ASSIGN_OR_RETURN(const uint32_t magic, in_.Read<uint32_t>("magic"));
    if (magic != kGgufMagic) {
      std::string shown;
      for (int i = 0; i < 4; ++i) {
        const char c = static_cast<char>((magic >> (8 * i)) & 0xFF);
        shown += (c >= 0x20 && c < 0x7F) ? c : '?';
      }
      return Corrupt(0, absl::StrFormat("not a GGUF file: magic is '%s' (0x%08x), wanted 'GGUF'",
                                        shown, magic));
    }
    K3_ASSIGN_OR_RETURN(out_.version, in_.Read<uint32_t>("version"));
    const uint32_t v = out_.version;
    if (v != 0 && (v & 0xFFFF) == 0) {
      return Corrupt(4, absl::StrFormat("version field is 0x%08x: a big-endian GGUF file? "
                                        "only little-endian files are supported",
                                        v));
    }
    if (v != 2 && v != 3) {
      return Corrupt(4, absl::StrFormat("GGUF version %d is not supported (only 2 and 3)", v));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ValueType> ReadValueType(std::string_view what) {
    const uint64_t at = in_.offset();
    K3_ASSIGN_OR_RETURN(const uint32_t id, in_.Read<uint32_t>(what));
    if (!IsKnownValueType(id)) return Corrupt(at, absl::StrFormat("unknown %s %d", what, id));
    return static_cast<ValueType>(id);
  }

  // Checks that `count` elements of at least `min_bytes` each can fit in the bytes left.
  absl::Status CheckCount(uint64_t at, uint64_t count, uint64_t min_bytes, std::string_view what) {
    if (count > kMaxArrayElements) {
      return Corrupt(at, absl::StrFormat("%s has %d elements, over the limit of %d", what, count,
                                         kMaxArrayElements));
    }
    if (count > in_.remaining() / min_bytes) {
      return Corrupt(at, absl::StrFormat("%s has %d elements of at least %d bytes each, but only "
                                         "%d bytes are left in the file",
                                         what, count, min_bytes, in_.remaining()));
    }
    return absl::OkStatus();
  }

  static uint64_t MinElementBytes(ValueType t) {
    if (t == ValueType::kString) return kMinStringBytes;
    if (t == ValueType::kArray) return kMinArrayBytes;
    return ValueTypeSize(t);
  }

  absl::StatusOr<Value> ReadValue(ValueType type) {
    Value v;
    v.type = v.elem_type = type;
    if (type == ValueType::kString) {
      K3_ASSIGN_OR_RETURN(std::string s, in_.ReadString("string value", kMaxStringBytes));
      v.strings.push_back(std::move(s));
      return v;
    }
    if (type != ValueType::kArray) {
      K3_ASSIGN_OR_RETURN(auto bytes, in_.ReadBytes(ValueTypeSize(type), ValueTypeName(type)));
      v.raw.assign(bytes.begin(), bytes.end());
      return v;
    }
    const uint64_t at = in_.offset();
    K3_ASSIGN_OR_RETURN(v.elem_type, ReadValueType("array element type"));
    K3_ASSIGN_OR_RETURN(v.count, in_.Read<uint64_t>("array length"));
    K3_RETURN_IF_ERROR(CheckCount(at, v.count, MinElementBytes(v.elem_type),
                                  absl::StrCat("array of ", AsAbsl(ValueTypeName(v.elem_type)))));
    if (v.elem_type == ValueType::kString) {
      v.strings.reserve(std::min(v.count, kMaxReserve));
      for (uint64_t i = 0; i < v.count; ++i) {
        K3_ASSIGN_OR_RETURN(std::string s,
                            in_.ReadString(absl::StrCat("array string ", i), kMaxStringBytes));
        v.strings.push_back(std::move(s));
      }
    } else if (v.elem_type == ValueType::kArray) {
      for (uint64_t i = 0; i < v.count; ++i) K3_RETURN_IF_ERROR(SkipArray(1));
    } else {
      // count * size cannot overflow: CheckCount bounded count by remaining / size.
      K3_ASSIGN_OR_RETURN(auto bytes,
                          in_.ReadBytes(v.count * ValueTypeSize(v.elem_type), "array elements"));
      v.raw.assign(bytes.begin(), bytes.end());
    }
    return v;
  }

  // Skips one nested array (element type, count, elements) without storing it.
  absl::Status SkipArray(int depth) {
    const uint64_t at = in_.offset();
    if (depth > kMaxNesting) {
      return Corrupt(at, absl::StrFormat("arrays nested deeper than %d levels", kMaxNesting));
    }
    K3_ASSIGN_OR_RETURN(const ValueType elem, ReadValueType("nested array element type"));
    K3_ASSIGN_OR_RETURN(const uint64_t count, in_.Read<uint64_t>("nested array length"));
    K3_RETURN_IF_ERROR(CheckCount(at, count, MinElementBytes(elem), "nested array"));
    if (elem == ValueType::kArray) {
      for (uint64_t i = 0; i < count; ++i) K3_RETURN_IF_ERROR(SkipArray(depth + 1));
    } else if (elem == ValueType::kString) {
      for (uint64_t i = 0; i < count; ++i) {
        const uint64_t s_at = in_.offset();
        K3_ASSIGN_OR_RETURN(const uint64_t len, in_.Read<uint64_t>("nested string length"));
        if (len > kMaxStringBytes) {
          return Corrupt(s_at, absl::StrFormat("nested string length %d is over the limit", len));
        }
        K3_RETURN_IF_ERROR(in_.Skip(len, "nested string"));
      }
    } else {
      K3_RETURN_IF_ERROR(in_.Skip(count * ValueTypeSize(elem), "nested array elements"));
    }
    return absl::OkStatus();
  }

  absl::Status ReadMetadata(uint64_t n_kv) {
    K3_RETURN_IF_ERROR(CheckCount(16, n_kv, kMinKvBytes, "metadata"));
    out_.kvs.reserve(std::min(n_kv, kMaxReserve));
    absl::flat_hash_map<std::string, uint64_t> seen;
    for (uint64_t i = 0; i < n_kv; ++i) {
      const uint64_t at = in_.offset();
      K3_ASSIGN_OR_RETURN(std::string key, in_.ReadString(absl::StrCat("key of metadata entry ", i),
                                                          kMaxStringBytes));
      if (key.empty()) return Corrupt(at, absl::StrFormat("metadata entry %d has an empty key", i));
      const auto [it, inserted] = seen.emplace(key, i);
      if (!inserted) {
        return Corrupt(at, absl::StrFormat("duplicate key %s (metadata entries %d and %d)",
                                           QuoteForDisplay(key), it->second, i));
      }
      const std::string where =
          absl::StrFormat("metadata entry %d (key %s): ", i, QuoteForDisplay(key));
      absl::StatusOr<ValueType> type = ReadValueType("value type");
      if (!type.ok()) return Prefixed(type.status(), where);
      absl::StatusOr<Value> value = ReadValue(*type);
      if (!value.ok()) return Prefixed(value.status(), where);
      out_.kvs.push_back({std::move(key), *std::move(value)});
    }
    return absl::OkStatus();
  }

  absl::Status ReadAlignment() {
    for (const KeyValue& kv : out_.kvs) {
      if (kv.key != kAlignmentKey) continue;
      if (kv.value.type != ValueType::kU32) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "key %s has type %s, wanted u32", QuoteForDisplay(kv.key), ValueTypeLabel(kv.value)));
      }
      const uint32_t a = kv.value.Element<uint32_t>(0);
      if (a == 0 || (a & (a - 1)) != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("key %s is %d, not a power of two", QuoteForDisplay(kv.key), a));
      }
      out_.alignment = a;
    }
    return absl::OkStatus();
  }

  absl::Status ReadTensorTable(uint64_t n_tensors) {
    K3_RETURN_IF_ERROR(CheckCount(8, n_tensors, kMinTensorBytes, "tensor table"));
    out_.tensors.reserve(std::min(n_tensors, kMaxReserve));
    absl::flat_hash_map<std::string, uint64_t> seen;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      const uint64_t at = in_.offset();
      K3_ASSIGN_OR_RETURN(TensorInfo t, ReadTensorInfo(i));
      const auto [it, inserted] = seen.emplace(t.name, i);
      if (!inserted) {
        return Corrupt(at, absl::StrFormat("duplicate tensor name %s (tensors %d and %d)",
                                           QuoteForDisplay(t.name), it->second, i));
      }
      out_.tensors.push_back(std::move(t));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<TensorInfo> ReadTensorInfo(uint64_t index) {
    TensorInfo t;
    const uint64_t at = in_.offset();
    K3_ASSIGN_OR_RETURN(t.name,
                        in_.ReadString(absl::StrCat("name of tensor ", index), kMaxStringBytes));
    if (t.name.empty()) return Corrupt(at, absl::StrFormat("tensor %d has an empty name", index));
    const std::string what = absl::StrFormat("tensor %s", QuoteForDisplay(t.name));
    const uint64_t dims_at = in_.offset();
    K3_ASSIGN_OR_RETURN(const uint32_t n_dims, in_.Read<uint32_t>(what + " n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Corrupt(dims_at, absl::StrFormat("%s has %d dimensions (must be 1 to %d)", what,
                                              n_dims, kMaxDims));
    }
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      K3_ASSIGN_OR_RETURN(const int64_t ne, in_.Read<int64_t>(what + " shape"));
      if (ne < 0) {
        return Corrupt(dims_at, absl::StrFormat("%s has ne[%d] = %d < 0", what, d, ne));
      }
      t.ne.push_back(ne);
      if (__builtin_mul_overflow(n_elems, static_cast<uint64_t>(ne), &n_elems) ||
          n_elems > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Corrupt(dims_at, absl::StrFormat("%s shape %s overflows the element count", what,
                                                ShapeString(t.ne)));
      }
    }
    t.n_elems = n_elems;
    const uint64_t type_at = in_.offset();
    K3_ASSIGN_OR_RETURN(const uint32_t type_id, in_.Read<uint32_t>(what + " type"));
    const std::optional<quant::TypeTraits> traits = quant::FindType(type_id);
    if (!traits) {
      return Corrupt(type_at, absl::StrFormat("%s has unknown ggml type id %d", what, type_id));
    }
    t.type = traits->type;
    if (t.ne[0] % traits->block_elems != 0) {
      return Corrupt(type_at, absl::StrFormat("%s of type %s has ne[0] = %d, not a multiple of "
                                              "the block size %d",
                                              what, traits->name, t.ne[0], traits->block_elems));
    }
    const std::optional<uint64_t> n_bytes = quant::BytesFor(t.type, n_elems);
    if (!n_bytes) {
      return Corrupt(type_at, absl::StrFormat("%s shape %s of type %s overflows the byte count",
                                              what, ShapeString(t.ne), traits->name));
    }
    t.n_bytes = *n_bytes;
    // For now file_offset holds the offset relative to the data section.
    K3_ASSIGN_OR_RETURN(t.file_offset, in_.Read<uint64_t>(what + " data offset"));
    return t;
  }

  absl::Status PlaceTensorData() {
    const uint64_t align = out_.alignment;
    // The data section starts at the next multiple of the alignment (the padding may be
    // missing in a header-only file). in_.offset() <= file size, so this cannot overflow.
    out_.data_offset = (in_.offset() + align - 1) / align * align;
    const uint64_t file_size = file_.size();
    const TensorInfo* first_missing = nullptr;
    for (TensorInfo& t : out_.tensors) {
      const std::string name = QuoteForDisplay(t.name);
      const uint64_t rel = t.file_offset;
      if (rel % align != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensor %s has data offset %d, not a multiple of the alignment %d", name, rel, align));
      }
      uint64_t end = 0;
      if (__builtin_add_overflow(out_.data_offset, rel, &t.file_offset) ||
          __builtin_add_overflow(t.file_offset, t.n_bytes, &end)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tensor %s: data offset %d + size %d overflows", name, rel, t.n_bytes));
      }
      if (end > file_size && first_missing == nullptr) first_missing = &t;
    }
    K3_RETURN_IF_ERROR(CheckNoOverlap());
    if (first_missing != nullptr) {
      if (allow_header_only_ && file_size <= out_.data_offset) {
        out_.header_only = true;
        return absl::OkStatus();
      }
      const TensorInfo& t = *first_missing;
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor %s data [%d, %d) lies past the end of the file (%d bytes): truncated file%s",
          QuoteForDisplay(t.name), t.file_offset, t.file_offset + t.n_bytes, file_size,
          allow_header_only_ ? "" : " (a header-only file needs allow_header_only)"));
    }
    for (TensorInfo& t : out_.tensors) t.data = file_.data() + t.file_offset;
    return absl::OkStatus();
  }

  absl::Status CheckNoOverlap() const {
    std::vector<const TensorInfo*> order;
    for (const TensorInfo& t : out_.tensors) {
      if (t.n_bytes > 0) order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
      return a->file_offset < b->file_offset;
    });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& a = *order[i - 1];
      const TensorInfo& b = *order[i];
      if (a.file_offset + a.n_bytes > b.file_offset) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tensors %s [%d, %d) and %s [%d, %d) overlap", QuoteForDisplay(a.name),
                            a.file_offset, a.file_offset + a.n_bytes, QuoteForDisplay(b.name),
                            b.file_offset, b.file_offset + b.n_bytes));
      }
    }
    return absl::OkStatus();
  }

  std::span<const uint8_t> file_;
  ByteCursor in_;
  bool allow_header_only_;
  ParsedGguf out_;
};

}  // namespace

absl::StatusOr<ParsedGguf> ParseGguf(std::span<const uint8_t> file, std::string_view path,
                                     bool allow_header_only) {
  absl::StatusOr<ParsedGguf> parsed = Parser(file, allow_header_only).Run();
  if (!parsed.ok()) return Prefixed(parsed.status(), absl::StrCat(AsAbsl(path), ": "));
  return parsed;
}

}  // namespace k3::gguf::internal
