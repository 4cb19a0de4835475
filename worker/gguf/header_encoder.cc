#include "worker/gguf/header_encoder.h"

#include <cstring>
#include <string_view>

namespace k3::gguf::internal {
namespace {

constexpr uint32_t kVersion = 3;

class Encoder {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void PutBytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void PutValue(const Value& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.type));
    if (v.is_array()) {
      Put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      Put<uint64_t>(v.count);
    }
    if (v.elem_type == ValueType::kString) {
      for (const std::string& s : v.strings) PutString(s);
    } else {
      PutBytes(v.raw);
    }
  }
  void PadTo(uint32_t alignment) {
    out_.resize((out_.size() + alignment - 1) / alignment * alignment, 0);
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

}  // namespace

std::vector<uint8_t> EncodeHeader(std::span<const KeyValue> kvs,
                                  std::span<const PlannedTensor* const> tensors,
                                  uint32_t alignment) {
  Encoder e;
  e.Put<uint32_t>(kGgufMagic);
  e.Put<uint32_t>(kVersion);
  e.Put<uint64_t>(tensors.size());
  e.Put<uint64_t>(kvs.size());
  for (const KeyValue& kv : kvs) {
    e.PutString(kv.key);
    e.PutValue(kv.value);
  }
  for (const PlannedTensor* t : tensors) {
    e.PutString(t->name);
    e.Put<uint32_t>(static_cast<uint32_t>(t->ne.size()));
    for (int64_t d : t->ne) e.Put<int64_t>(d);
    e.Put<uint32_t>(static_cast<uint32_t>(t->type));
    e.Put<uint64_t>(t->offset);
  }
  e.PadTo(alignment);
  return e.Take();
}

}  // namespace k3::gguf::internal
