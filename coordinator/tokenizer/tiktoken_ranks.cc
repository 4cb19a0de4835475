#include "coordinator/tokenizer/tiktoken_ranks.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "coordinator/tokenizer/byte_unicode.h"
#include "coordinator/tokenizer/string_view_compat.h"

namespace k3::tok {
namespace {

absl::Status LineError(size_t line_no, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat("tiktoken ranks, line %d: %s", line_no, what));
}

// Stores `bytes` at `rank`, rejecting a rank given twice.
absl::Status Put(int64_t rank, std::string bytes, size_t line_no,
                 std::vector<std::string>* by_rank, std::vector<bool>* seen) {
  if (rank < 0 || rank >= std::numeric_limits<int32_t>::max()) {
    return LineError(line_no, absl::StrCat("rank ", rank, " out of range"));
  }
  const auto r = static_cast<size_t>(rank);
  if (r >= by_rank->size()) {
    by_rank->resize(r + 1);
    seen->resize(r + 1, false);
  }
  if ((*seen)[r]) return LineError(line_no, absl::StrCat("rank ", rank, " given twice"));
  (*seen)[r] = true;
  (*by_rank)[r] = std::move(bytes);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseTiktokenRanks(std::string_view contents) {
  std::vector<std::string> by_rank;
  std::vector<bool> seen;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(AsAbsl(contents), '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    std::string bytes;
    if (fields[0] == "!") {
      int64_t rank = 0;
      if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &rank)) {
        return LineError(line_no, "\"!\" line without a first rank");
      }
      for (size_t k = 2; k < fields.size(); ++k, ++rank) {
        if (!absl::Base64Unescape(fields[k], &bytes)) {
          return LineError(line_no, absl::StrCat("bad base64 \"", fields[k], "\""));
        }
        if (auto s = Put(rank, std::move(bytes), line_no, &by_rank, &seen); !s.ok()) return s;
      }
      continue;
    }
    int64_t rank = 0;
    if (fields.size() != 2 || !absl::SimpleAtoi(fields[1], &rank)) {
      return LineError(line_no, "expected \"<base64> <rank>\"");
    }
    if (!absl::Base64Unescape(fields[0], &bytes)) {
      return LineError(line_no, absl::StrCat("bad base64 \"", fields[0], "\""));
    }
    if (auto s = Put(rank, std::move(bytes), line_no, &by_rank, &seen); !s.ok()) return s;
  }
  for (size_t r = 0; r < seen.size(); ++r) {
    if (!seen[r]) return absl::InvalidArgumentError(absl::StrCat("tiktoken ranks: rank ", r, " missing"));
  }
  if (by_rank.empty()) return absl::InvalidArgumentError("tiktoken ranks: no tokens");
  return by_rank;
}

absl::StatusOr<std::vector<std::string>> ReadTiktokenRanksFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open tiktoken ranks file ", path));
  std::stringstream contents;
  contents << in.rdbuf();
  auto ranks = ParseTiktokenRanks(contents.str());
  if (!ranks.ok()) {
    return absl::Status(ranks.status().code(), absl::StrCat(path, ": ", ranks.status().message()));
  }
  return ranks;
}

absl::StatusOr<VocabSpec> VocabFromTiktoken(
    const std::vector<std::string>& ranked_bytes,
    const std::vector<std::pair<std::string, int32_t>>& specials, std::string pre) {
  const size_t n = ranked_bytes.size();
  size_t size = n;
  for (const auto& [text, id] : specials) {
    if (id < 0 || static_cast<size_t>(id) < n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "special token \"%s\" has id %d, inside the %d mergeable ranks", text, id, n));
    }
    size = std::max(size, static_cast<size_t>(id) + 1);
  }
  VocabSpec spec;
  spec.pre = std::move(pre);
  spec.tokens.resize(size);
  spec.token_types.assign(size, static_cast<int32_t>(TokenType::kUnused));
  for (size_t r = 0; r < n; ++r) {
    spec.tokens[r] = BytesToGgufToken(ranked_bytes[r]);
    spec.token_types[r] = static_cast<int32_t>(TokenType::kNormal);
  }
  std::vector<bool> taken(size, false);
  for (const auto& [text, id] : specials) {
    if (taken[id]) return absl::InvalidArgumentError(absl::StrCat("two special tokens with id ", id));
    taken[id] = true;
    spec.tokens[id] = text;
    spec.token_types[id] = static_cast<int32_t>(TokenType::kControl);
  }
  for (size_t id = n; id < size; ++id) {
    if (!taken[id]) spec.tokens[id] = absl::StrCat("[PAD", id, "]");
  }
  return spec;
}

}  // namespace k3::tok
