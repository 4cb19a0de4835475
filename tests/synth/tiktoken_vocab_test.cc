// The optional real vocabulary: rank-file parsing, GPT-2's byte map, merges from ranks, K2's
// special-token layout, and a model written with it. The rank file is built here (no network).
#include "worker/synth/tiktoken_vocab.h"

#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tests/synth/synth_test_util.h"
#include "worker/common/tiktoken_ranks.h"
#include "worker/gguf/gguf_file.h"
#include "worker/model/k3_config.h"

#ifdef K3_SYNTH_HAVE_TOKENIZER
#include "coordinator/tokenizer/byte_unicode.h"
#endif

namespace k3::synth {
namespace {

std::string B64(const std::string& s) { return absl::Base64Escape(absl::string_view(s.data(), s.size())); }

// 256 single bytes, then "ab", "abc", "  " (two spaces), "xyz" (rank-limited BPE: 3 parts).
std::vector<std::string> SmallRanks() {
  std::vector<std::string> r;
  for (int b = 0; b < 256; ++b) r.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"ab", "abc", "  ", "xyz"}) r.emplace_back(t);
  return r;
}

std::string TiktokenText(const std::vector<std::string>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) absl::StrAppend(&s, B64(ranks[i]), " ", i, "\n");
  return s;
}

TEST(TiktokenVocab, ByteMapIsGpt2s) {
  EXPECT_EQ(GgufTokenString("a"), "a");
  EXPECT_EQ(GgufTokenString(" "), "\xc4\xa0");   // U+0120 'Ġ'
  EXPECT_EQ(GgufTokenString("\n"), "\xc4\x8a");  // U+010A 'Ċ'
  EXPECT_EQ(GgufTokenString(std::string(1, '\0')), "\xc4\x80");  // U+0100
  EXPECT_EQ(GgufTokenString("\xad"), "\xc5\x83");  // soft hyphen: the last remapped byte, U+0143
  EXPECT_EQ(GgufTokenString("\xe9"), "\xc3\xa9");  // printable Latin-1 stands for itself
#ifdef K3_SYNTH_HAVE_TOKENIZER
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    EXPECT_EQ(GgufTokenString(s), k3::tok::BytesToGgufToken(s)) << b;
  }
#endif
}

TEST(TiktokenVocab, ParsesAllThreeRankFileForms) {
  const std::vector<std::string> ranks = SmallRanks();
  auto a = ParseTiktokenRanks(TiktokenText(ranks));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, ranks);
  std::string bang = "! 0";
  for (const std::string& t : ranks) absl::StrAppend(&bang, " ", B64(t));
  auto b = ParseTiktokenRanks(bang);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, ranks);
  auto c = ParseTiktokenRanks(absl::StrCat("{\"pat_str\":\"x\",\"special_tokens\":{},\"bpe_ranks\":\"", bang, "\"}"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, ranks);
  EXPECT_FALSE(ParseTiktokenRanks("YQ== 0\nYg== 2\n").ok());  // rank 1 missing
  EXPECT_FALSE(ParseTiktokenRanks("YQ== 0\nYQ== 0\n").ok());  // rank given twice
  EXPECT_FALSE(ParseTiktokenRanks("!!!! 0\n").ok());          // bad base64
}

TEST(TiktokenVocab, MergesFollowTheRanks) {
  const std::vector<std::string> m = MergesFromRanks(SmallRanks());
  // "xyz" has no lower-ranked pair: BPE leaves it in 3 parts and it gets no merge.
  EXPECT_EQ(m, (std::vector<std::string>{"a b", "ab c", "\xc4\xa0 \xc4\xa0"}));
}

TEST(TiktokenVocab, K2SpecialLayoutAndPadding) {
  const std::vector<std::string> ranks = SmallRanks();
  const int64_t n = static_cast<int64_t>(ranks.size());  // 260
  EXPECT_EQ(DefaultVocabSize(n), 768);
  EXPECT_EQ(DefaultVocabSize(163584), 163840);  // Kimi K2 / K3
  EXPECT_FALSE(VocabFromRanks(ranks, n + 19, "kimi-k2").ok());
  auto v = VocabFromRanks(ranks, 512, "kimi-k2");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->tokens.size(), 512u);
  EXPECT_EQ(v->tokens[97], "a");
  EXPECT_EQ(v->tokens[32], "\xc4\xa0");
  EXPECT_EQ(v->tokens[n + 0], "[BOS]");
  EXPECT_EQ(v->tokens[n + 2], "<|im_end|>");
  EXPECT_EQ(v->tokens[n + 3], "<|im_user|>");
  EXPECT_EQ(v->tokens[n + 4], "<|im_assistant|>");
  EXPECT_EQ(v->tokens[n + 10], "<|im_system|>");
  EXPECT_EQ(v->tokens[n + 17], "<|im_middle|>");
  EXPECT_EQ(v->tokens[n + 5], absl::StrCat("<|reserved_token_", n + 5, "|>"));
  EXPECT_EQ(v->tokens[510], "[UNK]");
  EXPECT_EQ(v->tokens[511], "[PAD]");
  EXPECT_EQ(v->bos_id, n);
  EXPECT_EQ(v->eos_id, n + 2);
  EXPECT_EQ(v->pad_id, 511);
  for (int64_t id = 0; id < 512; ++id) EXPECT_EQ(v->token_types[id], id < n ? 1 : 3) << id;
}

TEST(TiktokenVocab, PreTokenizerFollowsTheRankFile) {
  EXPECT_EQ(GuessPreTokenizer("/x/cl100k_base.tiktoken", 5), "cl100k");
  EXPECT_EQ(GuessPreTokenizer("encoders/o200k_base.json", 5), "o200k");
  EXPECT_EQ(GuessPreTokenizer("ranks.txt", 100256), "cl100k");
  EXPECT_EQ(GuessPreTokenizer("ranks.txt", 199998), "o200k");
  EXPECT_EQ(GuessPreTokenizer("tiktoken.model", 163584), "kimi-k2");
}

TEST(TiktokenVocab, ModelWithVocabularyParses) {
  testing::TempDir dir;
  const std::string ranks_path = dir.File("tiny_ranks.tiktoken");
  std::ofstream(ranks_path) << TiktokenText(SmallRanks());
  auto vocab = LoadTiktokenVocab(ranks_path, 2048, "");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->pre, "kimi-k2");
  auto c = PresetConfig("tiny");
  ASSERT_TRUE(c.ok());
  auto m = SynthModel::Create(*c, *model::QuantMix::Preset("UD-IQ1_S"), SynthOptions{}, *vocab);
  ASSERT_TRUE(m.ok()) << m.status();
  auto path = testing::WriteTo(*m, dir, "v.gguf", WriteOptions{.header_only = true});
  ASSERT_TRUE(path.ok()) << path.status();
  auto f = gguf::GgufFile::Open(*path, true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*(*f)->GetString("tokenizer.ggml.pre"), "kimi-k2");
  EXPECT_EQ(*(*f)->ArrayLength("tokenizer.ggml.tokens"), 2048u);
  EXPECT_EQ((*f)->ArrayTypeOf("tokenizer.ggml.token_type"), gguf::ValueType::kI32);
  EXPECT_EQ(*(*f)->ArrayLength("tokenizer.ggml.merges"), 3u);
  auto parsed = model::ParseK3Config(**f);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->vocab, 2048);
  EXPECT_EQ(parsed->bos_id, 260);
  EXPECT_EQ(parsed->eos_id, 262);
  EXPECT_EQ(parsed->pad_id, 2047);
  // A vocabulary whose size disagrees with the model is refused.
  auto wrong = SynthModel::Create(*c, *model::QuantMix::Preset("UD-IQ1_S"), SynthOptions{},
                                  *VocabFromRanks(SmallRanks(), 1024, "kimi-k2"));
  EXPECT_FALSE(wrong.ok());
}

}  // namespace
}  // namespace k3::synth
