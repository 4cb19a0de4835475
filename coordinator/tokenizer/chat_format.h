// Kimi's chat format (K2 family), as in shared/spec/tokenizer.md: each message is
//   <|im_{role}|>{role}<|im_middle|>{content}<|im_end|>
// for roles system, user and assistant, and generation is prompted with
//   <|im_assistant|>assistant<|im_middle|>
// Where a GGUF carries tokenizer.chat_template, that template is the authority for its model
// (the released K2 template adds e.g. a default system prompt and a tool role); this is the
// fixed core format.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace k3::tok {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// The conversation as text. An unknown role is an error naming it.
absl::StatusOr<std::string> RenderKimiChat(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt);

// The conversation as ids: the markers as their special ids, roles and contents as ordinary
// text. With special-free contents (shorter than kimi-k2's 25k-character runs) this equals
// Encode(RenderKimiChat(...), true); contents are
// not scanned for special-token text unless `specials_in_content` (so user text cannot forge a
// turn). Errors if the vocabulary lacks one of the five marker tokens.
absl::StatusOr<std::vector<int32_t>> EncodeKimiChat(const Tokenizer& tokenizer,
                                                    std::span<const ChatMessage> messages,
                                                    bool add_generation_prompt,
                                                    bool specials_in_content = false);

}  // namespace k3::tok
