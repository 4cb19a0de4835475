#include "worker/gguf/gguf_file.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "worker/common/status_macros.h"
#include "worker/common/string_view_compat.h"
#include "worker/gguf/gguf_parser.h"
#include "worker/gguf/gguf_value.h"
#include "worker/gguf/mapped_file.h"
#include "worker/gguf/metadata.h"
#include "worker/gguf/shard_name.h"
#include "worker/gguf/split_keys.h"
#include "worker/gguf/text_escape.h"

namespace k3::gguf {

namespace {

// Everything read from the shards, assembled.
struct Contents {
  internal::Metadata metadata;  // shard 1's
  std::vector<TensorInfo> tensors;
  absl::flat_hash_map<std::string, size_t> tensor_index;
  uint32_t version = 0;
  uint32_t alignment = internal::kDefaultAlignment;
  bool header_only = false;
};

// Checks shard k's split.* keys (when present) against its place in a set of n, and
// returns its metadata.
absl::StatusOr<internal::Metadata> CheckedShardMetadata(const std::string& path, int k, int n,
                                                        std::vector<internal::KeyValue> kvs) {
  internal::Metadata md(path, std::move(kvs));
  if (md.Find(kSplitNoKey) != nullptr) {
    K3_ASSIGN_OR_RETURN(const uint16_t no, md.GetScalar<uint16_t>(kSplitNoKey));
    if (no != k) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s is %d, but this file is shard %d of %d (%s counts from 0)", path,
                          kSplitNoKey, no, k + 1, n, kSplitNoKey));
    }
  }
  if (md.Find(kSplitCountKey) != nullptr) {
    K3_ASSIGN_OR_RETURN(const uint16_t count, md.GetScalar<uint16_t>(kSplitCountKey));
    if (count != n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s is %d, but %d shard file(s) were opened%s", path, kSplitCountKey, count, n,
          n == 1 ? " (open a split model by its name NAME-0000i-of-0000N.gguf)" : ""));
    }
  }
  return md;
}

// Builds the file from parsed shards: metadata from shard 1, tensors from all of them.
absl::StatusOr<Contents> Assemble(const std::vector<std::string>& paths,
                                  std::vector<internal::ParsedGguf> shards) {
  Contents impl;
  const int n = static_cast<int>(shards.size());
  for (int k = 0; k < n; ++k) {
    internal::ParsedGguf& s = shards[k];
    const std::string& path = paths[k];
    K3_ASSIGN_OR_RETURN(internal::Metadata md, CheckedShardMetadata(path, k, n, std::move(s.kvs)));
    if (k == 0) {
      impl.metadata = std::move(md);
      impl.version = s.version;
      impl.alignment = s.alignment;
    }
    impl.header_only = impl.header_only || s.header_only;
    for (TensorInfo& t : s.tensors) {
      t.shard = k;
      const auto [it, inserted] = impl.tensor_index.emplace(t.name, impl.tensors.size());
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrFormat("tensor %s appears in shard %d (%s) and again in shard %d (%s)",
                            QuoteForDisplay(t.name), impl.tensors[it->second].shard + 1,
                            paths[impl.tensors[it->second].shard], k + 1, path));
      }
      impl.tensors.push_back(std::move(t));
    }
  }
  if (impl.metadata.Find(kSplitTensorsCountKey) != nullptr) {
    K3_ASSIGN_OR_RETURN(const int32_t total,
                        impl.metadata.GetScalar<int32_t>(kSplitTensorsCountKey));
    if (total < 0 || static_cast<uint64_t>(total) != impl.tensors.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s is %d, but the %d shard(s) hold %d tensors", paths[0],
                          kSplitTensorsCountKey, total, n, impl.tensors.size()));
    }
  }
  return impl;
}

}  // namespace

struct GgufFile::Impl {
  std::vector<std::string> shard_paths;
  std::vector<std::unique_ptr<internal::MappedFile>> maps;  // one per shard (Open)
  std::vector<uint8_t> owned;                               // the image (OpenFromMemory)
  Contents c;
};

GgufFile::GgufFile() : impl_(std::make_unique<Impl>()) {}
GgufFile::~GgufFile() = default;

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                         bool allow_header_only) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  Impl& impl = *file->impl_;
  if (const std::optional<ShardName> shard = ParseShardPath(path)) {
    if (shard->count < 1 || shard->index < 1 || shard->index > shard->count) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: the name says shard %d of %d, which is no valid shard", path,
                          shard->index, shard->count));
    }
    for (int i = 1; i <= shard->count; ++i) {
      impl.shard_paths.push_back(ShardPath(shard->prefix, i, shard->count));
    }
  } else {
    impl.shard_paths.push_back(path);
  }
  std::vector<internal::ParsedGguf> parsed;
  for (const std::string& p : impl.shard_paths) {
    K3_ASSIGN_OR_RETURN(std::unique_ptr<internal::MappedFile> map, internal::MappedFile::Open(p));
    K3_ASSIGN_OR_RETURN(internal::ParsedGguf one,
                        internal::ParseGguf(map->bytes(), p, allow_header_only));
    impl.maps.push_back(std::move(map));
    parsed.push_back(std::move(one));
  }
  K3_ASSIGN_OR_RETURN(impl.c, Assemble(impl.shard_paths, std::move(parsed)));
  spdlog::debug("gguf: opened {} ({} shard(s), {} keys, {} tensors{})", path,
                impl.shard_paths.size(), impl.c.metadata.entries().size(), impl.c.tensors.size(),
                impl.c.header_only ? ", header only" : "");
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::OpenFromMemory(std::span<const uint8_t> bytes,
                                                                   const std::string& name,
                                                                   bool allow_header_only) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  Impl& impl = *file->impl_;
  impl.shard_paths.push_back(name);
  impl.owned.assign(bytes.begin(), bytes.end());
  K3_ASSIGN_OR_RETURN(internal::ParsedGguf parsed,
                      internal::ParseGguf(impl.owned, name, allow_header_only));
  std::vector<internal::ParsedGguf> shards;
  shards.push_back(std::move(parsed));
  K3_ASSIGN_OR_RETURN(impl.c, Assemble(impl.shard_paths, std::move(shards)));
  return file;
}

// ---- metadata ----

bool GgufFile::Has(std::string_view key) const { return impl_->c.metadata.Find(key) != nullptr; }

const Value* GgufFile::FindValue(std::string_view key) const { return impl_->c.metadata.Find(key); }

std::optional<ValueType> GgufFile::TypeOf(std::string_view key) const {
  const Value* v = impl_->c.metadata.Find(key);
  if (v == nullptr) return std::nullopt;
  return v->type;
}

std::optional<ValueType> GgufFile::ArrayTypeOf(std::string_view key) const {
  const Value* v = impl_->c.metadata.Find(key);
  if (v == nullptr || !v->is_array()) return std::nullopt;
  return v->elem_type;
}

std::vector<std::string> GgufFile::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(impl_->c.metadata.entries().size());
  for (const internal::KeyValue& kv : impl_->c.metadata.entries()) keys.push_back(kv.key);
  return keys;
}

absl::StatusOr<uint8_t> GgufFile::GetU8(std::string_view key) const {
  return impl_->c.metadata.GetScalar<uint8_t>(key);
}
absl::StatusOr<int8_t> GgufFile::GetI8(std::string_view key) const {
  return impl_->c.metadata.GetScalar<int8_t>(key);
}
absl::StatusOr<uint16_t> GgufFile::GetU16(std::string_view key) const {
  return impl_->c.metadata.GetScalar<uint16_t>(key);
}
absl::StatusOr<int16_t> GgufFile::GetI16(std::string_view key) const {
  return impl_->c.metadata.GetScalar<int16_t>(key);
}
absl::StatusOr<uint32_t> GgufFile::GetU32(std::string_view key) const {
  return impl_->c.metadata.GetScalar<uint32_t>(key);
}
absl::StatusOr<int32_t> GgufFile::GetI32(std::string_view key) const {
  return impl_->c.metadata.GetScalar<int32_t>(key);
}
absl::StatusOr<uint64_t> GgufFile::GetU64(std::string_view key) const {
  return impl_->c.metadata.GetScalar<uint64_t>(key);
}
absl::StatusOr<int64_t> GgufFile::GetI64(std::string_view key) const {
  return impl_->c.metadata.GetScalar<int64_t>(key);
}
absl::StatusOr<float> GgufFile::GetF32(std::string_view key) const {
  return impl_->c.metadata.GetScalar<float>(key);
}
absl::StatusOr<double> GgufFile::GetF64(std::string_view key) const {
  return impl_->c.metadata.GetScalar<double>(key);
}
absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  return impl_->c.metadata.GetScalar<bool>(key);
}
absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  return impl_->c.metadata.GetString(key);
}

absl::StatusOr<std::vector<uint32_t>> GgufFile::GetArrayU32(std::string_view key) const {
  return impl_->c.metadata.GetArray<uint32_t>(key);
}
absl::StatusOr<std::vector<int32_t>> GgufFile::GetArrayI32(std::string_view key) const {
  return impl_->c.metadata.GetArray<int32_t>(key);
}
absl::StatusOr<std::vector<float>> GgufFile::GetArrayF32(std::string_view key) const {
  return impl_->c.metadata.GetArray<float>(key);
}
absl::StatusOr<std::vector<std::string>> GgufFile::GetArrayString(std::string_view key) const {
  return impl_->c.metadata.GetStringArray(key);
}
absl::StatusOr<uint64_t> GgufFile::ArrayLength(std::string_view key) const {
  return impl_->c.metadata.ArrayLength(key);
}

std::string GgufFile::ValueToString(std::string_view key, size_t max_array_items) const {
  const Value* v = impl_->c.metadata.Find(key);
  if (v == nullptr) return "<missing>";
  return FormatValue(*v, max_array_items);
}

// ---- tensors ----

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  const auto it = impl_->c.tensor_index.find(AsAbsl(name));
  return it == impl_->c.tensor_index.end() ? nullptr : &impl_->c.tensors[it->second];
}

std::span<const TensorInfo> GgufFile::tensors() const { return impl_->c.tensors; }
bool GgufFile::header_only() const { return impl_->c.header_only; }
uint32_t GgufFile::version() const { return impl_->c.version; }
uint32_t GgufFile::alignment() const { return impl_->c.alignment; }
const std::vector<std::string>& GgufFile::shard_paths() const { return impl_->shard_paths; }

}  // namespace k3::gguf
