#include "coordinator/tokenizer/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <limits>

#include "absl/strings/str_format.h"

namespace k3::tok {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return absl::StrFormat("error %d", code);
  return std::string(reinterpret_cast<const char*>(buf));
}

// Patterns whose repeated groups backtrack (the kimi-k2 lookahead classes) need JIT stack in
// proportion to the run length; the default 32 KiB machine stack covers short runs. On overflow
// the match is retried on a JIT stack of up to kMaxJitStack, then by the interpreter (heap).
constexpr size_t kMaxJitStack = size_t{64} << 20;

struct MatchDataDeleter {
  void operator()(pcre2_match_data* p) const { pcre2_match_data_free(p); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* p) const { pcre2_match_context_free(p); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* p) const { pcre2_jit_stack_free(p); }
};

}  // namespace

void Pcre2Regex::CodeDeleter::operator()(pcre2_real_code_8* code) const { pcre2_code_free(code); }

Pcre2Regex::Pcre2Regex(std::string pattern, pcre2_real_code_8* code, bool jit)
    : pattern_(std::move(pattern)), code_(code), jit_(jit) {}

absl::StatusOr<Pcre2Regex> Pcre2Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "regex does not compile at offset %d: %s (pattern: %s)", error_offset,
        Pcre2Message(error), pattern));
  }
  uint32_t jit_available = 0;
  pcre2_config(PCRE2_CONFIG_JIT, &jit_available);
  const bool jit = jit_available != 0 && pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Pcre2Regex(std::string(pattern), code, jit);
}

absl::Status Pcre2Regex::ForEachMatch(std::string_view text,
                                      absl::FunctionRef<void(std::string_view)> emit) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> mc(pcre2_match_context_create(nullptr));
  if (md == nullptr || mc == nullptr) return absl::ResourceExhaustedError("pcre2: out of memory");
  // Linear-time patterns on long inputs can pass PCRE2's default budgets (10M backtracks).
  pcre2_set_match_limit(mc.get(), std::numeric_limits<uint32_t>::max());
  pcre2_set_depth_limit(mc.get(), std::numeric_limits<uint32_t>::max());
  std::unique_ptr<pcre2_jit_stack, JitStackDeleter> jit_stack;  // made on first overflow
  bool use_jit = jit_;

  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // PCRE2_NO_UTF_CHECK: the caller validated the text once; per-call checks would be O(n^2).
  // PCRE2_NOTEMPTY: an empty match could never advance the scan.
  const uint32_t options = PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY;
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(code_.get(), subject, text.size(), pos,
                         options | (use_jit ? 0 : PCRE2_NO_JIT), md.get(), mc.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && jit_stack == nullptr) {
      jit_stack.reset(pcre2_jit_stack_create(32 * 1024, kMaxJitStack, nullptr));
      if (jit_stack != nullptr) {
        pcre2_jit_stack_assign(mc.get(), nullptr, jit_stack.get());
        rc = pcre2_match(code_.get(), subject, text.size(), pos, options, md.get(), mc.get());
      }
    }
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      use_jit = false;
      rc = pcre2_match(code_.get(), subject, text.size(), pos, options | PCRE2_NO_JIT, md.get(),
                       mc.get());
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
      emit(text.substr(pos));
      break;
    }
    if (rc < 0) {
      return absl::InternalError(
          absl::StrFormat("pcre2 match failed at byte %d: %s", pos, Pcre2Message(rc)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ov[0];
    const size_t end = ov[1];
    if (begin > pos) emit(text.substr(pos, begin - pos));
    emit(text.substr(begin, end - begin));
    pos = end;
  }
  return absl::OkStatus();
}

}  // namespace k3::tok
