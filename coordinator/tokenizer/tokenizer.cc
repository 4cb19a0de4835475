#include "coordinator/tokenizer/tokenizer.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "coordinator/tokenizer/bpe.h"
#include "coordinator/tokenizer/byte_unicode.h"
#include "coordinator/tokenizer/pretokenizer.h"
#include "coordinator/tokenizer/special_matcher.h"
#include "coordinator/tokenizer/utf8.h"
#include "spdlog/spdlog.h"
#include "worker/common/status_macros.h"

namespace k3::tok {

struct Tokenizer::State {
  std::string arena;           // every token's bytes, back to back
  std::vector<uint32_t> begin;  // token id -> offset in arena; begin[id + 1] ends it
  std::vector<TokenType> types;
  RankMap ranks;  // views into `arena`; the State never moves once built (unique_ptr)
  SpecialMatcher specials;
  std::optional<PreTokenizer> pre;
  std::optional<int32_t> bos, eos, pad;

  std::string_view Bytes(int32_t id) const {
    return std::string_view(arena).substr(begin[id], begin[id + 1] - begin[id]);
  }
  bool IsSpecial(int32_t id) const {
    return types[id] == TokenType::kControl || types[id] == TokenType::kUserDefined;
  }
};

namespace {

absl::Status CheckOptionalId(const char* what, std::optional<int32_t> id, size_t n) {
  if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s token id %d is outside the vocabulary of %d", what, *id, n));
  }
  return absl::OkStatus();
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<const State> state) : s_(std::move(state)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<Tokenizer> Tokenizer::FromVocab(const VocabSpec& spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("vocabulary is empty");
  if (n >= static_cast<size_t>(INT32_MAX)) return absl::InvalidArgumentError("vocabulary too large");
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d tokens but %d token types", n, spec.token_types.size()));
  }
  K3_RETURN_IF_ERROR(CheckOptionalId("bos", spec.bos_id, n));
  K3_RETURN_IF_ERROR(CheckOptionalId("eos", spec.eos_id, n));
  K3_RETURN_IF_ERROR(CheckOptionalId("pad", spec.pad_id, n));

  auto s = std::make_unique<State>();
  K3_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::Create(spec.pre));
  s->pre.emplace(std::move(pre));
  s->bos = spec.bos_id;
  s->eos = spec.eos_id;
  s->pad = spec.pad_id;
  s->types.resize(n);
  s->begin.resize(n + 1);

  std::vector<std::pair<std::string, int32_t>> specials;
  size_t n_normal = 0;
  for (size_t id = 0; id < n; ++id) {
    const auto type = static_cast<TokenType>(spec.token_types.empty() ? 1 : spec.token_types[id]);
    s->types[id] = type;
    s->begin[id] = static_cast<uint32_t>(s->arena.size());
    switch (type) {
      case TokenType::kNormal: {
        auto bytes = GgufTokenToBytes(spec.tokens[id]);
        if (!bytes.ok()) {
          return absl::InvalidArgumentError(
              absl::StrFormat("token %d: %s", id, bytes.status().message()));
        }
        if (bytes->empty()) return absl::InvalidArgumentError(absl::StrFormat("token %d is empty", id));
        s->arena += *bytes;
        ++n_normal;
        break;
      }
      case TokenType::kControl:
      case TokenType::kUserDefined:
        if (spec.tokens[id].empty()) {
          return absl::InvalidArgumentError(absl::StrFormat("special token %d is empty", id));
        }
        s->arena += spec.tokens[id];
        specials.emplace_back(spec.tokens[id], static_cast<int32_t>(id));
        break;
      case TokenType::kUnused:
        break;
      default:
        return absl::InvalidArgumentError(absl::StrFormat(
            "token %d (\"%s\") has unsupported token type %d", id, spec.tokens[id],
            static_cast<int32_t>(type)));
    }
    if (s->arena.size() > UINT32_MAX) return absl::InvalidArgumentError("vocabulary too large");
  }
  s->begin[n] = static_cast<uint32_t>(s->arena.size());

  // The arena is complete, so views into it are stable from here on.
  s->ranks.reserve(n_normal);
  for (size_t id = 0; id < n; ++id) {
    if (s->types[id] != TokenType::kNormal) continue;
    const auto [it, inserted] = s->ranks.emplace(s->Bytes(static_cast<int32_t>(id)),
                                                 static_cast<int32_t>(id));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens %d and %d have the same bytes (\"%s\")", it->second, id, spec.tokens[id]));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (!s->ranks.contains(std::string_view(&c, 1))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "vocabulary lacks the single-byte token 0x%02X (byte-level BPE needs all 256)", b));
    }
  }
  absl::flat_hash_map<std::string_view, int32_t> special_ids;
  for (const auto& [text, id] : specials) {
    const auto [it, inserted] = special_ids.emplace(text, id);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "special tokens %d and %d are both \"%s\"", it->second, id, text));
    }
  }
  s->specials = SpecialMatcher(specials);
  spdlog::debug("tokenizer: {} ids ({} BPE, {} special), pre-tokenizer {}", n, n_normal,
                specials.size(), spec.pre);
  return Tokenizer(std::move(s));
}

absl::Status Tokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const {
  return s_->pre->ForEachPiece(text, [&](std::string_view piece) {
    // tiktoken's shortcut: a piece that is itself a token is that token, whatever BPE would say.
    if (const auto it = s_->ranks.find(piece); it != s_->ranks.end()) {
      ids->push_back(it->second);
    } else {
      BytePairEncode(piece, s_->ranks, ids);
    }
  });
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool allow_special) const {
  if (const size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat("text is not valid UTF-8 at byte %d", bad));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  absl::Status status;
  s_->pre->ForEachChunk(text, [&](std::string_view chunk) {
    if (!status.ok()) return;
    size_t pos = 0;
    while (allow_special && status.ok()) {
      const auto m = s_->specials.Find(chunk, pos);
      if (!m) break;
      status = EncodeOrdinary(chunk.substr(pos, m->pos - pos), &ids);
      ids.push_back(m->id);
      pos = m->pos + m->len;
    }
    if (status.ok()) status = EncodeOrdinary(chunk.substr(pos), &ids);
  });
  K3_RETURN_IF_ERROR(status);
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids,
                                              bool include_special) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (const int32_t id : ids) {
    K3_ASSIGN_OR_RETURN(const std::string_view bytes, TokenBytes(id));
    if (!include_special && s_->IsSpecial(id)) continue;
    out += bytes;
  }
  return out;
}

absl::StatusOr<std::string_view> Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token id %d is outside the vocabulary of %d", id, vocab_size()));
  }
  return s_->Bytes(id);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && s_->IsSpecial(id);
}

std::optional<int32_t> Tokenizer::SpecialTokenId(std::string_view text) const {
  return s_->specials.Lookup(text);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(s_->types.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return s_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return s_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return s_->pad; }
const PreTokenizer& Tokenizer::pre_tokenizer() const { return *s_->pre; }

}  // namespace k3::tok
