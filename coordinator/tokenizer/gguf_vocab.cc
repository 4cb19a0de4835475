#include "coordinator/tokenizer/gguf_vocab.h"

#include <optional>

#include "absl/strings/str_format.h"
#include "worker/common/status_macros.h"

namespace k3::tok {
namespace {

constexpr std::string_view kModel = "tokenizer.ggml.model";
constexpr std::string_view kPre = "tokenizer.ggml.pre";
constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kTokenType = "tokenizer.ggml.token_type";

// A token id stored as any integer type (llama.cpp writes u32), or nullopt when absent.
absl::StatusOr<std::optional<int32_t>> OptionalId(const gguf::GgufFile& file,
                                                  std::string_view key) {
  const auto type = file.TypeOf(key);
  if (!type) return std::optional<int32_t>();
  int64_t v = 0;
  switch (*type) {
    case gguf::ValueType::kU32: {
      K3_ASSIGN_OR_RETURN(v, file.GetU32(key));
      break;
    }
    case gguf::ValueType::kI32: {
      K3_ASSIGN_OR_RETURN(v, file.GetI32(key));
      break;
    }
    case gguf::ValueType::kU64: {
      K3_ASSIGN_OR_RETURN(const uint64_t u, file.GetU64(key));
      v = u > static_cast<uint64_t>(INT32_MAX) ? -1 : static_cast<int64_t>(u);
      break;
    }
    case gguf::ValueType::kI64: {
      K3_ASSIGN_OR_RETURN(v, file.GetI64(key));
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s has type %s, expected an integer", key, gguf::ValueTypeName(*type)));
  }
  if (v < 0 || v > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat("%s = %d is not a token id", key, v));
  }
  return std::optional<int32_t>(static_cast<int32_t>(v));
}

absl::StatusOr<std::vector<int32_t>> TokenTypes(const gguf::GgufFile& file) {
  const auto elem = file.ArrayTypeOf(kTokenType);
  if (!elem) {
    if (file.Has(kTokenType)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s is not an array", kTokenType));
    }
    return std::vector<int32_t>();  // absent: all normal
  }
  if (*elem == gguf::ValueType::kI32) return file.GetArrayI32(kTokenType);
  if (*elem == gguf::ValueType::kU32) {
    K3_ASSIGN_OR_RETURN(const std::vector<uint32_t> u, file.GetArrayU32(kTokenType));
    return std::vector<int32_t>(u.begin(), u.end());
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s has elements of type %s, expected i32", kTokenType, gguf::ValueTypeName(*elem)));
}

}  // namespace

absl::StatusOr<VocabSpec> VocabFromGguf(const gguf::GgufFile& file) {
  if (!file.Has(kModel)) {
    return absl::FailedPreconditionError(absl::StrFormat("the file has no %s", kModel));
  }
  K3_ASSIGN_OR_RETURN(const std::string model, file.GetString(kModel));
  if (model == "no_vocab") {
    return absl::FailedPreconditionError(
        "the file carries no vocabulary (tokenizer.ggml.model = \"no_vocab\"): text cannot be "
        "tokenized; use token ids directly");
  }
  if (model != "gpt2") {
    return absl::UnimplementedError(absl::StrFormat(
        "tokenizer model \"%s\" is not supported (only \"gpt2\" byte-level BPE)", model));
  }
  VocabSpec spec;
  if (!file.Has(kPre)) {
    return absl::FailedPreconditionError(absl::StrFormat("the file has no %s", kPre));
  }
  K3_ASSIGN_OR_RETURN(spec.pre, file.GetString(kPre));
  K3_ASSIGN_OR_RETURN(spec.tokens, file.GetArrayString(kTokens));
  K3_ASSIGN_OR_RETURN(spec.token_types, TokenTypes(file));
  K3_ASSIGN_OR_RETURN(spec.bos_id, OptionalId(file, "tokenizer.ggml.bos_token_id"));
  K3_ASSIGN_OR_RETURN(spec.eos_id, OptionalId(file, "tokenizer.ggml.eos_token_id"));
  K3_ASSIGN_OR_RETURN(spec.pad_id, OptionalId(file, "tokenizer.ggml.padding_token_id"));
  return spec;
}

absl::StatusOr<Tokenizer> TokenizerFromGguf(const gguf::GgufFile& file) {
  K3_ASSIGN_OR_RETURN(const VocabSpec spec, VocabFromGguf(file));
  return Tokenizer::FromVocab(spec);
}

absl::StatusOr<Tokenizer> TokenizerFromGgufPath(const std::string& path) {
  K3_ASSIGN_OR_RETURN(const auto file, gguf::GgufFile::Open(path, /*allow_header_only=*/true));
  auto tok = TokenizerFromGguf(*file);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrFormat("%s: %s", path, tok.status().message()));
  }
  return tok;
}

}  // namespace k3::tok
