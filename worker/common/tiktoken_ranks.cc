#include "worker/common/tiktoken_ranks.h"

#include <cstdint>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "worker/common/small_file.h"
#include "worker/common/string_view_compat.h"

namespace k3 {
namespace {

constexpr size_t kMaxRankFileBytes = size_t{256} << 20;  // Kimi's tiktoken.model is ~2.8 MB

absl::Status LineError(size_t line_no, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tiktoken ranks, line ", line_no, ": ", AsAbsl(what)));
}

// Stores `bytes` at `rank`, refusing a rank given twice.
absl::Status Put(int64_t rank, std::string bytes, size_t line_no, std::vector<std::string>* by_rank,
                 std::vector<bool>* seen) {
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

// The npm package's JSON: the value of "bpe_ranks" (base64, spaces and '!' only: no escapes).
absl::StatusOr<std::string_view> BpeRanksOfJson(std::string_view json) {
  constexpr std::string_view kKey = "\"bpe_ranks\"";
  size_t p = json.find(kKey);
  if (p == std::string_view::npos) return absl::InvalidArgumentError("JSON rank file without \"bpe_ranks\"");
  const size_t colon = json.find(':', p + kKey.size());
  p = colon == std::string_view::npos ? colon : json.find('"', colon);
  const size_t end = p == std::string_view::npos ? p : json.find('"', p + 1);
  if (end == std::string_view::npos) return absl::InvalidArgumentError("unterminated \"bpe_ranks\" string");
  return json.substr(p + 1, end - p - 1);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseTiktokenRanks(std::string_view contents) {
  const size_t first = contents.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && contents[first] == '{') {
    absl::StatusOr<std::string_view> ranks = BpeRanksOfJson(contents);
    if (!ranks.ok()) return ranks.status();
    contents = *ranks;
  }
  std::vector<std::string> by_rank;
  std::vector<bool> seen;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(AsAbsl(contents), '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::vector<absl::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.empty()) continue;  // a blank line
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
        if (absl::Status s = Put(rank, std::move(bytes), line_no, &by_rank, &seen); !s.ok()) return s;
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
    if (absl::Status s = Put(rank, std::move(bytes), line_no, &by_rank, &seen); !s.ok()) return s;
  }
  for (size_t r = 0; r < seen.size(); ++r) {
    if (!seen[r]) return absl::InvalidArgumentError(absl::StrCat("tiktoken ranks: rank ", r, " is missing"));
  }
  if (by_rank.empty()) return absl::InvalidArgumentError("tiktoken ranks: no tokens");
  return by_rank;
}

absl::StatusOr<std::vector<std::string>> ReadTiktokenRanksFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadSmallFile(path, kMaxRankFileBytes, "tiktoken rank file");
  if (!contents.ok()) return contents.status();
  absl::StatusOr<std::vector<std::string>> ranks = ParseTiktokenRanks(*contents);
  if (!ranks.ok()) return absl::Status(ranks.status().code(), absl::StrCat(path, ": ", ranks.status().message()));
  return ranks;
}

}  // namespace k3
