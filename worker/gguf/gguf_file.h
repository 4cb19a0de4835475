// Read-only view of a GGUF model (version 3), possibly split over several shard files.
// Every length, count and offset is checked against the file size before it is trusted:
// a truncated, corrupted or hostile file gives an error naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/quant/ggml_type.h"

namespace k3::gguf {

// GGUF metadata value types (the numbers are the file format's).
enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view ValueTypeName(ValueType t);

struct Value;  // worker/gguf/gguf_value.h

// One tensor as found in the file's tensor table.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;      // ggml order: ne[0] is the contiguous dimension
  quant::GgmlType type;
  uint64_t n_elems = 0;         // product of ne
  uint64_t n_bytes = 0;         // bytes of data (checked against the file size)
  uint64_t file_offset = 0;     // absolute offset of the data in its shard file
  int shard = 0;                // index into GgufFile::shard_paths()
  const uint8_t* data = nullptr;  // mmapped bytes (nullptr for a header-only file)
};

class GgufFile {
 public:
  // Opens `path`. A name of the form NAME-0000i-of-0000N.gguf opens all N shards.
  // allow_header_only: accept a file whose tensor data is absent (data pointers stay null).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                        bool allow_header_only = false);
  // Reads one file image held in memory (copied, so `bytes` need not outlive the result);
  // `name` stands for the path in error messages. No shard set is looked for.
  static absl::StatusOr<std::unique_ptr<GgufFile>> OpenFromMemory(std::span<const uint8_t> bytes,
                                                                  const std::string& name,
                                                                  bool allow_header_only = false);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // ---- metadata (strictly typed: the wrong type is an error naming key and both types) ----
  bool Has(std::string_view key) const;
  std::optional<ValueType> TypeOf(std::string_view key) const;
  // For arrays: the element type.
  std::optional<ValueType> ArrayTypeOf(std::string_view key) const;
  std::vector<std::string> Keys() const;  // in file order
  // The value itself (nullptr when absent), e.g. to copy metadata into a GgufWriter.
  const Value* FindValue(std::string_view key) const;

  absl::StatusOr<uint8_t> GetU8(std::string_view key) const;
  absl::StatusOr<int8_t> GetI8(std::string_view key) const;
  absl::StatusOr<uint16_t> GetU16(std::string_view key) const;
  absl::StatusOr<int16_t> GetI16(std::string_view key) const;
  absl::StatusOr<uint32_t> GetU32(std::string_view key) const;
  absl::StatusOr<int32_t> GetI32(std::string_view key) const;
  absl::StatusOr<uint64_t> GetU64(std::string_view key) const;
  absl::StatusOr<int64_t> GetI64(std::string_view key) const;
  absl::StatusOr<float> GetF32(std::string_view key) const;
  absl::StatusOr<double> GetF64(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;

  absl::StatusOr<std::vector<uint32_t>> GetArrayU32(std::string_view key) const;
  absl::StatusOr<std::vector<int32_t>> GetArrayI32(std::string_view key) const;
  absl::StatusOr<std::vector<float>> GetArrayF32(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetArrayString(std::string_view key) const;
  absl::StatusOr<uint64_t> ArrayLength(std::string_view key) const;
  // A value rendered as text (arrays abbreviated), for the inspector and error messages.
  std::string ValueToString(std::string_view key, size_t max_array_items = 8) const;

  // ---- tensors ----
  const TensorInfo* FindTensor(std::string_view name) const;  // nullptr when absent
  std::span<const TensorInfo> tensors() const;
  bool header_only() const;  // tensor data absent (from any shard); needs allow_header_only
  uint32_t version() const;
  uint32_t alignment() const;
  const std::vector<std::string>& shard_paths() const;

 private:
  GgufFile();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3::gguf
