// Parses one GGUF file image (header, metadata, tensor table) and places each tensor's
// data inside it. Internal to k3_gguf: GgufFile assembles shards from these.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/gguf/gguf_file.h"
#include "worker/gguf/gguf_value.h"

namespace k3::gguf::internal {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr std::string_view kAlignmentKey = "general.alignment";
// ggml's own limits (gguf.cpp): no single string or array may exceed them.
inline constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxArrayElements = uint64_t{1} << 30;
inline constexpr uint32_t kMaxDims = 4;

struct KeyValue {
  std::string key;
  Value value;
};

struct ParsedGguf {
  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  std::vector<KeyValue> kvs;        // file order, keys unique
  std::vector<TensorInfo> tensors;  // file order, names unique; shard = 0
  uint64_t data_offset = 0;         // start of the tensor data section
  bool header_only = false;         // data absent: every TensorInfo::data is null
};

// `file` must stay alive as long as the returned tensors' data pointers are used.
// Errors are InvalidArgument and start with "<path>: ".
absl::StatusOr<ParsedGguf> ParseGguf(std::span<const uint8_t> file, std::string_view path,
                                     bool allow_header_only);

}  // namespace k3::gguf::internal
