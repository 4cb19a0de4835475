#include "worker/gguf/shard_name.h"

#include "absl/strings/str_format.h"

namespace k3::gguf {
namespace {

// Five (or more) decimal digits; gguf-split prints %05d, so wider numbers keep their width.
std::optional<int> ParseDigits(std::string_view s) {
  if (s.size() < 5 || s.size() > 9) return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::optional<ShardName> ParseShardPath(std::string_view path) {
  constexpr std::string_view kExt = ".gguf";
  constexpr std::string_view kOf = "-of-";
  if (path.size() < kExt.size() || path.substr(path.size() - kExt.size()) != kExt) {
    return std::nullopt;
  }
  std::string_view stem = path.substr(0, path.size() - kExt.size());
  const size_t of = stem.rfind(kOf);
  if (of == std::string_view::npos) return std::nullopt;
  const std::optional<int> count = ParseDigits(stem.substr(of + kOf.size()));
  const std::string_view head = stem.substr(0, of);
  const size_t dash = head.rfind('-');
  if (!count || dash == std::string_view::npos) return std::nullopt;
  const std::optional<int> index = ParseDigits(head.substr(dash + 1));
  if (!index) return std::nullopt;
  return ShardName{std::string(head.substr(0, dash)), *index, *count};
}

std::string ShardPath(std::string_view prefix, int index, int count) {
  return absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, index, count);
}

}  // namespace k3::gguf
