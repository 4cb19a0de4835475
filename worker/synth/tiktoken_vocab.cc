#include "worker/synth/tiktoken_vocab.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "worker/common/tiktoken_ranks.h"

namespace k3::synth {
namespace {

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
  absl::StatusOr<std::vector<std::string>> ranked = ReadTiktokenRanksFile(path);
  if (!ranked.ok()) return ranked.status();
  const auto n = static_cast<int64_t>(ranked->size());
  if (pre.empty()) pre = GuessPreTokenizer(path, n);
  return VocabFromRanks(*ranked, vocab_size > 0 ? vocab_size : DefaultVocabSize(n), std::move(pre));
}

}  // namespace k3::synth
