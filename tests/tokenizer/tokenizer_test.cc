#include "coordinator/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "coordinator/tokenizer/byte_unicode.h"
#include "tests/tokenizer/test_vocab.h"

namespace k3::tok {
namespace {

using testing::MergeId;
using testing::SmallVocab;
using testing::SpecialId;
using Ids = std::vector<int32_t>;

Tokenizer Make(const VocabSpec& v) {
  auto t = Tokenizer::FromVocab(v);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

Ids Enc(const Tokenizer& t, std::string_view text, bool allow_special = false) {
  auto ids = t.Encode(text, allow_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{};
}

TEST(Tokenizer, EncodesWithMerges) {
  const Tokenizer t = Make(SmallVocab());
  // kimi-k2 pieces: "hello" | " world" | "中文" | " " | "abc"; each piece is a token or merges.
  EXPECT_EQ(Enc(t, "hello world"), (Ids{MergeId("hello"), MergeId(" world")}));
  EXPECT_EQ(Enc(t, "中文"), (Ids{MergeId("\xE4\xB8\xAD\xE6\x96\x87")}));
  // "abcd": "ab"(rank 272) beats "bc"(273), then "abc" is a token -> [abc, d].
  EXPECT_EQ(Enc(t, "abcd"), (Ids{MergeId("abc"), 'd'}));
  // Pieces without merges fall back to bytes.
  EXPECT_EQ(Enc(t, "xyz!"), (Ids{'x', 'y', 'z', '!'}));
  EXPECT_TRUE(Enc(t, "").empty());
}

TEST(Tokenizer, SpecialTokens) {
  const Tokenizer t = Make(SmallVocab());
  EXPECT_EQ(Enc(t, "[BOS]hello<|im_end|>", true),
            (Ids{SpecialId("[BOS]"), MergeId("hello"), SpecialId("<|im_end|>")}));
  // Not allowed: the same text is ordinary text.
  const Ids plain = Enc(t, "<|im_end|>", false);
  EXPECT_EQ(plain.size(), 10u);  // pieces "<|" "im" "_end" "|>", no merges: one id per byte
  for (int32_t id : plain) EXPECT_FALSE(t.IsSpecial(id));
  // The longest special at a position wins; a user-defined token is special too.
  EXPECT_EQ(Enc(t, "<|a|>b<|a|>", true), (Ids{SpecialId("<|a|>b"), SpecialId("<|a|>")}));
  EXPECT_EQ(t.SpecialTokenId("<|im_middle|>"), SpecialId("<|im_middle|>"));
  EXPECT_FALSE(t.SpecialTokenId("hello").has_value());
  EXPECT_EQ(t.bos_id(), SpecialId("[BOS]"));
  EXPECT_EQ(t.eos_id(), SpecialId("<|im_end|>"));
  EXPECT_EQ(t.pad_id(), testing::UnusedId());
}

TEST(Tokenizer, DecodeRoundTripsAndOptions) {
  const Tokenizer t = Make(SmallVocab());
  const std::string text = "hello world, 中文 and abcd!\n\n  ok";
  auto back = t.Decode(Enc(t, text));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);

  const Ids with_special = Enc(t, "[BOS]hello<|im_end|>", true);
  EXPECT_EQ(*t.Decode(with_special), "[BOS]hello<|im_end|>");
  EXPECT_EQ(*t.Decode(with_special, /*include_special=*/false), "hello");
  EXPECT_EQ(*t.Decode(Ids{testing::UnusedId()}), "");
  EXPECT_FALSE(t.Decode(Ids{-1}).ok());
  EXPECT_FALSE(t.Decode(Ids{t.vocab_size()}).ok());
}

TEST(Tokenizer, RejectsInvalidUtf8) {
  const Tokenizer t = Make(SmallVocab());
  auto r = t.Encode("ok\xC0\x80");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("byte 2"), std::string::npos) << r.status();
}

TEST(Tokenizer, VocabErrors) {
  auto error_of = [](const VocabSpec& v) {
    auto t = Tokenizer::FromVocab(v);
    EXPECT_FALSE(t.ok());
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_NE(error_of(VocabSpec{}).find("empty"), std::string::npos);

  VocabSpec v = SmallVocab();
  v.pre = "nope";
  EXPECT_NE(error_of(v).find("\"nope\""), std::string::npos);

  v = SmallVocab();
  v.token_types.pop_back();
  EXPECT_NE(error_of(v).find("token types"), std::string::npos);

  v = SmallVocab();
  v.tokens[260] = "\xE2\x82\xAC";  // not in the byte-level alphabet
  EXPECT_NE(error_of(v).find("token 260"), std::string::npos);

  v = SmallVocab();
  v.tokens[' '] = "x";  // duplicates "x" and loses the space byte
  EXPECT_NE(error_of(v).find("same bytes"), std::string::npos);

  v = SmallVocab();
  v.tokens.erase(v.tokens.begin() + 'q');
  v.token_types.erase(v.token_types.begin() + 'q');
  v.bos_id.reset();
  v.eos_id.reset();
  v.pad_id.reset();
  EXPECT_NE(error_of(v).find("0x71"), std::string::npos);

  v = SmallVocab();
  v.eos_id = 1 << 20;
  EXPECT_NE(error_of(v).find("eos"), std::string::npos);

  v = SmallVocab();
  v.token_types[5] = 2;
  EXPECT_NE(error_of(v).find("unsupported token type 2"), std::string::npos);

  v = SmallVocab();
  v.tokens.back() = v.tokens[v.tokens.size() - 2];  // two specials with the same text
  EXPECT_NE(error_of(v).find("special tokens"), std::string::npos);
}

TEST(Tokenizer, EmptyTokenTypesMeanAllNormal) {
  VocabSpec v = SmallVocab("cl100k", /*with_specials=*/false);
  v.tokens.pop_back();  // the unused slot
  v.token_types.clear();
  const Tokenizer t = Make(v);
  EXPECT_EQ(Enc(t, "hello"), Ids{MergeId("hello")});
}

TEST(Tokenizer, ConcurrentEncode) {
  const Tokenizer t = Make(SmallVocab());
  std::string text;
  for (int i = 0; i < 200; ++i) text += "hello world 中文 abcd 12345 ";
  const Ids want = Enc(t, text);
  std::vector<std::thread> threads;
  std::vector<bool> same(4, false);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      bool ok = true;
      for (int rep = 0; rep < 20; ++rep) ok = ok && t.Encode(text).value() == want;
      same[k] = ok;
    });
  }
  for (auto& th : threads) th.join();
  for (bool s : same) EXPECT_TRUE(s);
}

}  // namespace
}  // namespace k3::tok
