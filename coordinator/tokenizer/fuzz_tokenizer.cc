// libFuzzer target for the tokenizer: arbitrary bytes through every pre-tokenizer, BPE, the
// special-token matcher, kimi-k2's chunker, the chat format, Decode and the incremental
// detokenizer, over a small byte-level vocabulary built here (the 256 bytes, merges that split
// multi-byte characters across tokens, the Kimi chat markers and specials that prefix each other).
// Invariants checked (a violation aborts, so libFuzzer reports it as a crash):
//   - Encode succeeds exactly on valid UTF-8, and then Decode(Encode(text)) == text (with and
//     without special-token matching; without it no special id is produced);
//   - the pre-tokenizer's chunks and pieces concatenate back to the text;
//   - BPE's quadratic and heap merges agree on any bytes;
//   - kimi-k2 chunking with tiny limits concatenates back to the text, on character boundaries;
//   - ToValidUtf8 gives valid UTF-8 and is the identity on valid text;
//   - Decode(EncodeKimiChat(m)) == RenderKimiChat(m);
//   - the incremental detokenizer over arbitrary ids (unknown ones included) emits exactly
//     ToValidUtf8(Decode(known ids)), never holds more than 3 bytes, and an unknown id is an
//     error that changes nothing.
//
//   CC=clang-14 CXX=clang++-14 cmake -S . -B build/fuzz -G Ninja -DK3_FUZZ=ON -DK3_BUILD_TESTS=OFF
//       -DK3_WITH_MPI=OFF -DK3_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   cmake --build build/fuzz --target fuzz_tokenizer
//   K3_FUZZ_WRITE_SEEDS=build/fuzz/seeds/tokenizer build/fuzz/bin/fuzz_tokenizer   # seeds, exits
//   build/fuzz/bin/fuzz_tokenizer -max_total_time=30 -max_len=2048 build/fuzz/corpus/tokenizer
//       build/fuzz/seeds/tokenizer
// (.ci/fuzz does all of this for every fuzzer.)
//
// Input layout: byte 0 picks the pre-tokenizer (bits 0-2), allow_special (bit 3),
// include_special (bit 4), add_generation_prompt (bit 5); byte 1 the chunker's limits; the rest
// is the text. The same bytes, two at a time, are the ids for the detokenizer.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/tokenizer/bpe.h"
#include "coordinator/tokenizer/byte_unicode.h"
#include "coordinator/tokenizer/chat_format.h"
#include "coordinator/tokenizer/detokenizer.h"
#include "coordinator/tokenizer/kimi_chunker.h"
#include "coordinator/tokenizer/pretokenizer.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer/utf8.h"
#include "coordinator/tokenizer/vocab.h"

namespace {

using k3::tok::Tokenizer;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_tokenizer invariant violated: %s\n", what);
  std::abort();
}

constexpr const char* kPreNames[] = {"kimi-k2", "llama-bpe", "cl100k", "o200k", "gpt-4o"};
constexpr size_t kNumPre = sizeof(kPreNames) / sizeof(kPreNames[0]);

// Merged tokens in rank order (each after the 256 single bytes): words, runs of spaces and
// newlines, digits, and multi-byte characters cut mid-character (so a token can end inside one).
const std::vector<std::string>& Merges() {
  static const std::vector<std::string> merges = {
      "he", "ll", "llo", "hello", " w", "or", "ld", " wor", " world", "  ", "    ", "\n\n", " \n",
      "12", "123", "'s", "'t", "re", "in", "the", " the", "ing", "er", "aa", "aaaa", "ab", "abc",
      "\xE4\xB8", "\xE4\xB8\xAD", "\xE6\x96", "\xE6\x96\x87", "\xE4\xB8\xAD\xE6\x96\x87",  // 中, 文, 中文
      "\xC3\xA9", "e\xCC", "e\xCC\x81",                                          // é, e + U+0301
      "\xF0\x9F", "\xF0\x9F\x98", "\xF0\x9F\x98\x80", "\x80\x80", "\xBF\xBF",            // 😀, stray bytes
      "<|", "|>", "im", "_end",
  };
  return merges;
}

// Control tokens: the Kimi chat markers, plus specials that are prefixes of one another.
const std::vector<std::string>& Specials() {
  static const std::vector<std::string> specials = {
      "[BOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
      "<|a|>", "<|a|>b", "\xE4\xB8\xAD<s>",
  };
  return specials;
}

k3::tok::VocabSpec MakeVocab(const char* pre) {
  k3::tok::VocabSpec v;
  v.pre = pre;
  auto add = [&](std::string token, k3::tok::TokenType type) {
    v.tokens.push_back(std::move(token));
    v.token_types.push_back(static_cast<int32_t>(type));
  };
  for (int b = 0; b < 256; ++b) {
    add(k3::tok::BytesToGgufToken(std::string(1, static_cast<char>(b))), k3::tok::TokenType::kNormal);
  }
  for (const std::string& m : Merges()) add(k3::tok::BytesToGgufToken(m), k3::tok::TokenType::kNormal);
  v.pad_id = static_cast<int32_t>(v.tokens.size());
  add("[PAD]", k3::tok::TokenType::kUnused);
  v.bos_id = static_cast<int32_t>(v.tokens.size());
  for (const std::string& s : Specials()) {
    add(s, s == "<|a|>b" ? k3::tok::TokenType::kUserDefined : k3::tok::TokenType::kControl);
  }
  v.eos_id = *v.bos_id + 1;
  return v;
}

const std::vector<std::unique_ptr<Tokenizer>>& Tokenizers() {
  static const auto* all = [] {
    auto* v = new std::vector<std::unique_ptr<Tokenizer>>();
    for (const char* name : kPreNames) {
      auto t = Tokenizer::FromVocab(MakeVocab(name));
      if (!t.ok()) {
        std::fprintf(stderr, "fuzz_tokenizer: %s: %s\n", name, std::string(t.status().message()).c_str());
        std::abort();
      }
      v->push_back(std::make_unique<Tokenizer>(std::move(*t)));
    }
    return v;
  }();
  return *all;
}

void CheckEncodeDecode(const Tokenizer& t, std::string_view text, bool valid, bool allow_special) {
  auto ids = t.Encode(text, allow_special);
  if (ids.ok() != valid) Fail(valid ? "Encode rejected valid UTF-8" : "Encode accepted invalid UTF-8");
  if (!valid) return;
  for (int32_t id : *ids) {
    if (id < 0 || id >= t.vocab_size()) Fail("Encode produced an id outside the vocabulary");
    if (!allow_special && t.IsSpecial(id)) Fail("Encode without allow_special produced a special id");
  }
  auto back = t.Decode(*ids);
  if (!back.ok() || *back != text) Fail("Decode(Encode(text)) != text");
  if (!allow_special) {
    auto plain = t.Decode(*ids, /*include_special=*/false);
    if (!plain.ok() || *plain != text) Fail("Decode(Encode(text), include_special=false) != text");
  }
}

void CheckPreTokenizer(const Tokenizer& t, std::string_view text) {
  std::string chunks, pieces;
  absl::Status status;
  t.pre_tokenizer().ForEachChunk(text, [&](std::string_view chunk) {
    chunks.append(chunk);
    std::string in_chunk;
    absl::Status s = t.pre_tokenizer().ForEachPiece(chunk, [&](std::string_view p) {
      if (p.empty()) Fail("empty piece");
      in_chunk.append(p);
    });
    if (!s.ok()) status = s;
    if (in_chunk != chunk) Fail("pieces do not concatenate to their chunk");
    pieces.append(in_chunk);
  });
  if (!status.ok()) Fail("ForEachPiece failed on valid UTF-8");
  if (chunks != text) Fail("chunks do not concatenate to the text");
}

// The rank map the tokenizer builds (normal tokens' bytes -> id), rebuilt here from TokenBytes
// so that both BPE merges can be called directly. The same for every pre-tokenizer.
const k3::tok::RankMap& Ranks(const Tokenizer& t) {
  static const auto* storage = [&] {
    auto* v = new std::vector<std::pair<std::string, int32_t>>();
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
      auto b = t.TokenBytes(id);
      if (t.IsSpecial(id) || !b.ok() || b->empty()) continue;
      v->emplace_back(std::string(*b), id);
    }
    return v;
  }();
  static const auto* ranks = [] {
    auto* m = new k3::tok::RankMap();
    for (const auto& [bytes, id] : *storage) m->emplace(std::string_view(bytes), id);
    return m;
  }();
  return *ranks;
}

void CheckBpe(const Tokenizer& t, std::string_view bytes) {
  // Any bytes are a valid BPE piece (all 256 single bytes are tokens). Quadratic cost: cap it.
  bytes = bytes.substr(0, 1024);
  std::vector<int32_t> quad, heap;
  k3::tok::BytePairEncodeQuadratic(bytes, Ranks(t), &quad);
  k3::tok::BytePairEncodeHeap(bytes, Ranks(t), &heap);
  if (quad != heap) Fail("BPE: quadratic and heap merges disagree");
  std::string joined;
  for (int32_t id : quad) {
    auto b = t.TokenBytes(id);
    if (!b.ok()) Fail("BPE produced an unknown id");
    joined.append(*b);
  }
  if (joined != bytes) Fail("BPE pieces do not concatenate to the input");
}

void CheckKimiChunker(std::string_view text, uint8_t limits) {
  const size_t max_encode = 1 + (limits & 0x0F);
  const size_t max_run = 1 + (limits >> 4);
  std::string joined;
  k3::tok::ForEachKimiChunk(
      text,
      [&](std::string_view chunk) {
        if (!k3::tok::IsValidUtf8(chunk)) Fail("kimi chunk is not on character boundaries");
        joined.append(chunk);
      },
      max_encode, max_run);
  if (joined != text) Fail("kimi chunks do not concatenate to the text");
}

void CheckChat(const Tokenizer& t, std::string_view text, bool add_generation_prompt) {
  // Messages: the text cut at '\x01'; roles cycle through system, user, assistant.
  static constexpr const char* kRoles[] = {"system", "user", "assistant"};
  std::vector<k3::tok::ChatMessage> msgs;
  size_t start = 0;
  for (size_t i = 0; i <= text.size() && msgs.size() < 8; ++i) {
    if (i == text.size() || text[i] == '\x01') {
      msgs.push_back({kRoles[msgs.size() % 3], std::string(text.substr(start, i - start))});
      start = i + 1;
    }
  }
  auto rendered = k3::tok::RenderKimiChat(msgs, add_generation_prompt);
  if (!rendered.ok()) Fail("RenderKimiChat failed with valid roles");
  for (bool specials_in_content : {false, true}) {
    auto ids = k3::tok::EncodeKimiChat(t, msgs, add_generation_prompt, specials_in_content);
    if (!ids.ok()) Fail("EncodeKimiChat failed on valid UTF-8");
    auto back = t.Decode(*ids);
    if (!back.ok() || *back != *rendered) Fail("Decode(EncodeKimiChat(m)) != RenderKimiChat(m)");
  }
  std::vector<k3::tok::ChatMessage> bad = {{"tool", "x"}};
  if (k3::tok::EncodeKimiChat(t, bad, false).ok()) Fail("EncodeKimiChat accepted an unknown role");
}

void CheckDetokenizer(const Tokenizer& t, std::span<const uint8_t> bytes, bool include_special) {
  const int32_t n = t.vocab_size();
  k3::tok::IncrementalDetokenizer detok(t, include_special);
  std::vector<int32_t> known;
  std::string streamed;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    // Mostly known ids, some just outside the vocabulary on either side.
    const int32_t raw = static_cast<int32_t>(bytes[i] | (bytes[i + 1] << 8));
    const int32_t id = raw % (n + 8) - 4;
    const size_t held = detok.pending_bytes();
    auto out = detok.Feed(id);
    if (id < 0 || id >= n) {
      if (out.ok()) Fail("the detokenizer accepted an unknown id");
      if (detok.pending_bytes() != held) Fail("an unknown id changed the detokenizer's state");
      continue;
    }
    if (!out.ok()) Fail("the detokenizer rejected a known id");
    if (detok.pending_bytes() > 3) Fail("the detokenizer holds more than 3 bytes");
    if (!k3::tok::IsValidUtf8(*out)) Fail("the detokenizer emitted invalid UTF-8");
    streamed += *out;
    known.push_back(id);
  }
  streamed += detok.Finish();
  if (detok.pending_bytes() != 0) Fail("Finish left bytes held");
  auto whole = t.Decode(known, include_special);
  if (!whole.ok()) Fail("Decode rejected known ids");
  if (streamed != k3::tok::ToValidUtf8(*whole)) Fail("streamed text != ToValidUtf8(Decode(ids))");
}

void WriteSeeds(const char* dir) {
  std::filesystem::create_directories(dir);
  const std::vector<std::string> texts = {
      "hello world", "Hello, World! It's 123 o'clock.\n\n  the end  ",
      "\xE4\xB8\xAD\xE6\x96\x87 and caf\xC3\xA9 e\xCC\x81 \xF0\x9F\x98\x80",
      "[BOS]hi<|im_end|><|a|>b<|a|>", "sys\x01user question\x01" "assistant answer",
      "    \t\r\n\n  x", "ok\xC0\x80 bad", "\xE4\xB8", std::string(300, 'a') + " " + std::string(200, ' ')};
  int i = 0;
  for (const std::string& text : texts) {
    for (uint8_t mode : {0x00, 0x09, 0x12, 0x1B, 0x2C}) {
      std::ofstream f(std::string(dir) + "/tok-" + std::to_string(i++), std::ios::binary);
      f.put(static_cast<char>(mode));
      f.put(static_cast<char>(0x31));
      f << text;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // K3_FUZZ_WRITE_SEEDS=DIR: write a seed corpus into DIR and exit.
  if (const char* dir = std::getenv("K3_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  (void)Tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const uint8_t limits = data[1];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const Tokenizer& t = *Tokenizers()[(mode & 7) % kNumPre];
  const bool allow_special = mode & 8;
  const bool include_special = mode & 16;
  const bool add_generation_prompt = mode & 32;

  const bool valid = k3::tok::IsValidUtf8(text);
  const std::string repaired = k3::tok::ToValidUtf8(text);
  if (!k3::tok::IsValidUtf8(repaired)) Fail("ToValidUtf8 gave invalid UTF-8");
  if (valid && repaired != text) Fail("ToValidUtf8 changed valid text");

  CheckEncodeDecode(t, text, valid, allow_special);
  CheckBpe(t, text);
  CheckDetokenizer(t, std::span<const uint8_t>(data + 2, size - 2), include_special);
  if (valid) {
    CheckPreTokenizer(t, text);
    CheckKimiChunker(text, limits);
    CheckChat(t, text, add_generation_prompt);
  }
  return 0;
}
