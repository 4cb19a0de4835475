#include "worker/synth/tiktoken_vocab.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace k3::synth {
namespace {

absl::string_view Absl(std::string_view s) { return {s.data(), s.size()}; }

absl::Status LineError(size_t line_no, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tiktoken ranks, line ", line_no, ": ", what));
}

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
  p = json.find('"', json.find(':', p + kKey.size()));
  const size_t end = p == std::string_view::npos ? p : json.find('"', p + 1);
  if (end == std::string_view::npos) return absl::InvalidArgumentError("unterminated \"bpe_ranks\" string");
  return json.substr(p + 1, end - p - 1);
}

// Code point of byte b under GPT-2's map: printable Latin-1 stands for itself, the other 68
// bytes take U+0100.. in byte order.
uint32_t ByteCodePoint(uint8_t b) {
  const auto printable = [](int c) { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174; };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (int c = 0; c < b; ++c) n += !printable(c);
  return 256 + n;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else {  // the map never exceeds U+0143: two bytes
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// Kimi K2's special tokens, at offsets from the first id after the mergeable ranks.
struct Special {
  int offset;
  const char* text;
};
constexpr Special kK2Specials[] = {
    {0, "[BOS]"},
    {1, "[EOS]"},
    {2, "<|im_end|>"},
    {3, "<|im_user|>"},
    {4, "<|im_assistant|>"},
    {6, "<|start_header_id|>"},
    {7, "<|end_header_id|>"},
    {9, "[EOT_ID]"},
    {10, "<|im_system|>"},
    {11, "<|tool_calls_section_begin|>"},
    {12, "<|tool_calls_section_end|>"},
    {13, "<|tool_call_begin|>"},
    {14, "<|tool_call_argument_begin|>"},
    {15, "<|tool_call_end|>"},
    {17, "<|im_middle|>"},
};
constexpr int kSpecialSpan = 18;  // offsets 0..17
constexpr int kBosOffset = 0, kEosOffset = 2;
constexpr int32_t kTypeNormal = 1, kTypeControl = 3;

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseRankFile(std::string_view contents) {
  const size_t first = contents.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && contents[first] == '{') {
    absl::StatusOr<std::string_view> ranks = BpeRanksOfJson(contents);
    if (!ranks.ok()) return ranks.status();
    contents = *ranks;
  }
  std::vector<std::string> by_rank;
  std::vector<bool> seen;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(Absl(contents), '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.empty()) continue;
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

std::string GgufTokenString(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteCodePoint(static_cast<uint8_t>(c)), &out);
  return out;
}

// For each token, byte-level BPE using only merges of lower rank (tiktoken's own procedure,
// stopped before the token's own rank): a token built by one last merge splits in two.
std::vector<std::string> MergesFromRanks(const std::vector<std::string>& ranked) {
  absl::flat_hash_map<std::string, int64_t> rank_of;
  rank_of.reserve(ranked.size());
  for (size_t r = 0; r < ranked.size(); ++r) rank_of.emplace(ranked[r], static_cast<int64_t>(r));
  std::vector<std::string> merges;
  std::vector<std::string> parts;
  for (size_t r = 0; r < ranked.size(); ++r) {
    const std::string& tok = ranked[r];
    if (tok.size() < 2) continue;
    parts.clear();
    for (char c : tok) parts.emplace_back(1, c);
    while (parts.size() > 2) {
      int64_t best = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const auto it = rank_of.find(parts[i] + parts[i + 1]);
        if (it != rank_of.end() && it->second < static_cast<int64_t>(r) && (best < 0 || it->second < best)) {
          best = it->second;
          at = i;
        }
      }
      if (best < 0) break;
      parts[at] += parts[at + 1];
      parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    if (parts.size() == 2) {
      merges.push_back(absl::StrCat(GgufTokenString(parts[0]), " ", GgufTokenString(parts[1])));
    }
  }
  return merges;
}

absl::StatusOr<GgufVocab> VocabFromRanks(const std::vector<std::string>& ranked, int64_t vocab_size,
                                         std::string pre) {
  const auto n = static_cast<int64_t>(ranked.size());
  if (vocab_size < n + kSpecialSpan + 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocabulary size ", vocab_size, " cannot hold the ", n, " ranks of the rank file plus the K2 "
        "special tokens: it must be at least ", n + kSpecialSpan + 2, " (default: ",
        DefaultVocabSize(n), ")"));
  }
  GgufVocab v;
  v.pre = std::move(pre);
  v.n_ranks = n;
  v.tokens.reserve(vocab_size);
  for (const std::string& bytes : ranked) v.tokens.push_back(GgufTokenString(bytes));
  v.token_types.assign(n, kTypeNormal);
  for (int64_t id = n; id < vocab_size; ++id) {
    v.tokens.push_back(absl::StrCat("<|reserved_token_", id, "|>"));
    v.token_types.push_back(kTypeControl);
  }
  for (const Special& s : kK2Specials) v.tokens[n + s.offset] = s.text;
  v.tokens[vocab_size - 2] = "[UNK]";
  v.tokens[vocab_size - 1] = "[PAD]";
  v.merges = MergesFromRanks(ranked);
  v.bos_id = n + kBosOffset;
  v.eos_id = n + kEosOffset;
  v.pad_id = vocab_size - 1;
  return v;
}

int64_t DefaultVocabSize(int64_t n_ranks) { return (n_ranks + 256 + 255) / 256 * 256; }

std::string GuessPreTokenizer(std::string_view path, int64_t n_ranks) {
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (name.find("cl100k") != std::string_view::npos) return "cl100k";
  if (name.find("o200k") != std::string_view::npos) return "o200k";
  if (name.find("kimi") != std::string_view::npos) return "kimi-k2";
  if (n_ranks == 100256) return "cl100k";
  if (n_ranks == 199998) return "o200k";
  return "kimi-k2";
}

absl::StatusOr<GgufVocab> LoadTiktokenVocab(const std::string& path, int64_t vocab_size, std::string pre) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open rank file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string contents = ss.str();
  absl::StatusOr<std::vector<std::string>> ranked = ParseRankFile(contents);
  if (!ranked.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", ranked.status().message()));
  const auto n = static_cast<int64_t>(ranked->size());
  if (pre.empty()) pre = GuessPreTokenizer(path, n);
  return VocabFromRanks(*ranked, vocab_size > 0 ? vocab_size : DefaultVocabSize(n), std::move(pre));
}

}  // namespace k3::synth
