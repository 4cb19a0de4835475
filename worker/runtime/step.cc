#include "worker/runtime/step.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace k3::runtime {
namespace {

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}
  template <typename T>
  absl::StatusOr<T> Get(const char* what) {
    if (b_.size() - pos_ < sizeof(T)) {
      return absl::InvalidArgumentError(absl::StrCat("step truncated reading ", what, " at byte ", pos_));
    }
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A count that must fit the remaining bytes at `min_bytes_each` per item.
  absl::StatusOr<uint64_t> Count(const char* what, uint64_t min_bytes_each, uint64_t limit) {
    auto n = Get<uint64_t>(what);
    if (!n.ok()) return n.status();
    if (*n > limit || *n * min_bytes_each > b_.size() - pos_) {
      return absl::InvalidArgumentError(absl::StrCat("step: ", what, " count ", *n, " exceeds the message"));
    }
    return *n;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

constexpr uint32_t kMagic = 0x4B335354;  // "K3ST"

#define K3_GET(var, type, what)            \
  auto var##_or = r.Get<type>(what);       \
  if (!var##_or.ok()) return var##_or.status(); \
  type var = *var##_or

}  // namespace

std::string EncodeStep(const Step& s) {
  Writer w;
  w.Put<uint32_t>(kMagic);
  w.Put<uint64_t>(s.id);
  w.Put<uint8_t>(s.shutdown ? 1 : 0);
  w.Put<uint64_t>(s.free.size());
  for (SeqId id : s.free) w.Put<int64_t>(id);
  w.Put<uint64_t>(s.add.size());
  for (SeqId id : s.add) w.Put<int64_t>(id);
  w.Put<uint64_t>(s.fork.size());
  for (const auto& [a, b] : s.fork) {
    w.Put<int64_t>(a);
    w.Put<int64_t>(b);
  }
  w.Put<uint64_t>(s.entries.size());
  for (const StepEntry& e : s.entries) {
    w.Put<int64_t>(e.seq);
    w.Put<int32_t>(e.top_n);
    w.Put<uint8_t>((e.full_logits ? 1 : 0) | (e.all_positions ? 2 : 0));
    w.Put<uint64_t>(e.tokens.size());
    for (int32_t t : e.tokens) w.Put<int32_t>(t);
  }
  return w.Take();
}

absl::StatusOr<Step> DecodeStep(const std::string& bytes) {
  Reader r(bytes);
  Step s;
  K3_GET(magic, uint32_t, "magic");
  if (magic != kMagic) return absl::InvalidArgumentError("step: bad magic");
  K3_GET(id, uint64_t, "id");
  K3_GET(flags, uint8_t, "flags");
  s.id = id;
  s.shutdown = flags & 1;
  auto n_free = r.Count("free", 8, kMaxStepTokens);
  if (!n_free.ok()) return n_free.status();
  for (uint64_t i = 0; i < *n_free; ++i) {
    K3_GET(v, int64_t, "free id");
    s.free.push_back(v);
  }
  auto n_add = r.Count("add", 8, kMaxStepTokens);
  if (!n_add.ok()) return n_add.status();
  for (uint64_t i = 0; i < *n_add; ++i) {
    K3_GET(v, int64_t, "add id");
    s.add.push_back(v);
  }
  auto n_fork = r.Count("fork", 16, kMaxStepTokens);
  if (!n_fork.ok()) return n_fork.status();
  for (uint64_t i = 0; i < *n_fork; ++i) {
    K3_GET(a, int64_t, "fork src");
    K3_GET(b, int64_t, "fork dst");
    s.fork.push_back({a, b});
  }
  auto n_entries = r.Count("entries", 21, kMaxStepTokens);
  if (!n_entries.ok()) return n_entries.status();
  int64_t total_tokens = 0;
  for (uint64_t i = 0; i < *n_entries; ++i) {
    StepEntry e;
    K3_GET(seq, int64_t, "entry seq");
    K3_GET(top_n, int32_t, "entry top_n");
    K3_GET(eflags, uint8_t, "entry flags");
    e.seq = seq;
    e.top_n = top_n;
    e.full_logits = eflags & 1;
    e.all_positions = eflags & 2;
    if (top_n < 1 || top_n > kMaxTopN) {
      return absl::InvalidArgumentError(absl::StrCat("step: top_n ", top_n, " outside [1, ", kMaxTopN, "]"));
    }
    auto n_tok = r.Count("tokens", 4, kMaxStepTokens);
    if (!n_tok.ok()) return n_tok.status();
    total_tokens += static_cast<int64_t>(*n_tok);
    if (total_tokens > kMaxStepTokens) return absl::InvalidArgumentError("step: too many tokens");
    e.tokens.resize(*n_tok);
    for (uint64_t j = 0; j < *n_tok; ++j) {
      K3_GET(t, int32_t, "token");
      e.tokens[j] = t;
    }
    s.entries.push_back(std::move(e));
  }
  if (!r.done()) return absl::InvalidArgumentError("step: trailing bytes");
  return s;
}

}  // namespace k3::runtime
