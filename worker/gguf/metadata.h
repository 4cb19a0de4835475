// Strictly typed lookups over one file's metadata entries. Internal to k3_gguf: GgufFile
// serves shard 1's metadata through it, and the shard checks read each shard's own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/gguf/gguf_parser.h"
#include "worker/gguf/gguf_value.h"

namespace k3::gguf::internal {

class Metadata {
 public:
  Metadata() = default;
  // `path` names the file in error messages; keys in `kvs` are unique.
  Metadata(std::string path, std::vector<KeyValue> kvs);

  const Value* Find(std::string_view key) const;
  const std::vector<KeyValue>& entries() const { return kvs_; }

  // A scalar of type T (u8..f64, bool): NotFound when absent, InvalidArgument on another type.
  template <typename T>
  absl::StatusOr<T> GetScalar(std::string_view key) const {
    absl::StatusOr<const Value*> v = Expect(key, ValueTypeOf<T>::kType, /*array=*/false);
    if (!v.ok()) return v.status();
    return (*v)->template Element<T>(0);
  }
  absl::StatusOr<std::string> GetString(std::string_view key) const;

  template <typename T>
  absl::StatusOr<std::vector<T>> GetArray(std::string_view key) const {
    absl::StatusOr<const Value*> v = Expect(key, ValueTypeOf<T>::kType, /*array=*/true);
    if (!v.ok()) return v.status();
    std::vector<T> out;
    out.reserve((*v)->count);
    for (uint64_t i = 0; i < (*v)->count; ++i) out.push_back((*v)->template Element<T>(i));
    return out;
  }
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<uint64_t> ArrayLength(std::string_view key) const;

 private:
  // The value of `key` if it has element type `want` and is (or is not) an array.
  absl::StatusOr<const Value*> Expect(std::string_view key, ValueType want, bool array) const;

  std::string path_;
  std::vector<KeyValue> kvs_;
  absl::flat_hash_map<std::string, size_t> index_;
};

}  // namespace k3::gguf::internal
