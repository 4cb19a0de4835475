#include "coordinator/tokenizer/pretokenizer.h"

#include "absl/strings/str_format.h"
#include "coordinator/tokenizer/kimi_chunker.h"
#include "coordinator/tokenizer/pattern_translate.h"
#include "coordinator/tokenizer/utf8.h"
#include "worker/common/status_macros.h"

namespace k3::tok {

absl::StatusOr<PreTokenizer> PreTokenizer::Create(std::string_view name) {
  std::string_view pat;
  bool kimi = false;
  if (name == "kimi-k2") {
    pat = kKimiK2Pattern;
    kimi = true;
  } else if (name == "llama-bpe" || name == "cl100k") {
    pat = kCl100kPattern;
  } else if (name == "o200k" || name == "gpt-4o") {
    pat = kO200kPattern;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown pre-tokenizer \"%s\" (known: kimi-k2, llama-bpe, cl100k, o200k, gpt-4o)", name));
  }
  K3_ASSIGN_OR_RETURN(PreTokenizer pre, FromTiktokenPattern(std::string(name), pat));
  pre.kimi_chunking_ = kimi;
  return pre;
}

absl::StatusOr<PreTokenizer> PreTokenizer::FromTiktokenPattern(std::string name,
                                                              std::string_view pat_str) {
  K3_ASSIGN_OR_RETURN(const std::string pcre, TiktokenPatternToPcre2(pat_str));
  K3_ASSIGN_OR_RETURN(Pcre2Regex regex, Pcre2Regex::Compile(pcre));
  return PreTokenizer(std::move(name), std::move(regex), false);
}

void PreTokenizer::ForEachChunk(std::string_view text,
                                absl::FunctionRef<void(std::string_view)> emit) const {
  if (kimi_chunking_) {
    ForEachKimiChunk(text, emit);
  } else {
    emit(text);
  }
}

absl::Status PreTokenizer::ForEachPiece(std::string_view text,
                                        absl::FunctionRef<void(std::string_view)> emit) const {
  return regex_.ForEachMatch(text, emit);
}

absl::StatusOr<std::vector<std::string>> PreTokenizer::Split(std::string_view text) const {
  if (const size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat("text is not valid UTF-8 at byte %d", bad));
  }
  std::vector<std::string> pieces;
  absl::Status status;
  ForEachChunk(text, [&](std::string_view chunk) {
    if (!status.ok()) return;
    status = ForEachPiece(chunk, [&](std::string_view p) { pieces.emplace_back(p); });
  });
  K3_RETURN_IF_ERROR(status);
  return pieces;
}

}  // namespace k3::tok
