#include "worker/gguf/metadata.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/common/string_view_compat.h"
#include "worker/gguf/text_escape.h"

namespace k3::gguf::internal {
namespace {

std::string Describe(const Value& v) {
  if (!v.is_array()) return std::string(ValueTypeName(v.type));
  const std::string_view elem =
      v.elem_type == ValueType::kArray ? "arrays" : ValueTypeName(v.elem_type);
  return absl::StrFormat("array of %s (%d items)", elem, v.count);
}

}  // namespace

Metadata::Metadata(std::string path, std::vector<KeyValue> kvs)
    : path_(std::move(path)), kvs_(std::move(kvs)) {
  index_.reserve(kvs_.size());
  for (size_t i = 0; i < kvs_.size(); ++i) index_.emplace(kvs_[i].key, i);
}

const Value* Metadata::Find(std::string_view key) const {
  const auto it = index_.find(AsAbsl(key));
  return it == index_.end() ? nullptr : &kvs_[it->second].value;
}

absl::StatusOr<const Value*> Metadata::Expect(std::string_view key, ValueType want,
                                              bool array) const {
  const Value* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("%s: key %s not found", path_, QuoteForDisplay(key)));
  }
  if (v->is_array() != array || v->elem_type != want) {
    const std::string wanted = array ? absl::StrCat("array of ", AsAbsl(ValueTypeName(want)))
                                     : std::string(ValueTypeName(want));
    return absl::InvalidArgumentError(absl::StrFormat("%s: key %s has type %s, wanted %s", path_,
                                                      QuoteForDisplay(key), Describe(*v), wanted));
  }
  return v;
}

absl::StatusOr<std::string> Metadata::GetString(std::string_view key) const {
  absl::StatusOr<const Value*> v = Expect(key, ValueType::kString, /*array=*/false);
  if (!v.ok()) return v.status();
  return (*v)->strings[0];
}

absl::StatusOr<std::vector<std::string>> Metadata::GetStringArray(std::string_view key) const {
  absl::StatusOr<const Value*> v = Expect(key, ValueType::kString, /*array=*/true);
  if (!v.ok()) return v.status();
  return (*v)->strings;
}

absl::StatusOr<uint64_t> Metadata::ArrayLength(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("%s: key %s not found", path_, QuoteForDisplay(key)));
  }
  if (!v->is_array()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: key %s has type %s, wanted an array",
                                                      path_, QuoteForDisplay(key), Describe(*v)));
  }
  return v->count;
}

}  // namespace k3::gguf::internal
