#include "coordinator/tokenizer/gguf_vocab.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "tests/tokenizer/test_vocab.h"
#include "worker/gguf/gguf_writer.h"

namespace k3::tok {
namespace {

// Writes a tensor-less GGUF holding `spec` the way llama.cpp's converter does (u32 ids,
// i32 token types); `edit` may change the writer before it finishes.
std::string WriteGguf(const std::string& name, const VocabSpec& spec, const std::string& model,
                      const std::function<void(gguf::GgufWriter&)>& edit = nullptr) {
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  gguf::GgufWriter w(path);
  EXPECT_TRUE(w.SetString("general.architecture", "kimi-k3").ok());
  EXPECT_TRUE(w.SetString("tokenizer.ggml.model", model).ok());
  EXPECT_TRUE(w.SetString("tokenizer.ggml.pre", spec.pre).ok());
  EXPECT_TRUE(w.SetArray("tokenizer.ggml.tokens", spec.tokens).ok());
  EXPECT_TRUE(w.SetArray("tokenizer.ggml.token_type", spec.token_types).ok());
  for (const auto& [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", spec.bos_id},
                                std::pair{"tokenizer.ggml.eos_token_id", spec.eos_id},
                                std::pair{"tokenizer.ggml.padding_token_id", spec.pad_id}}) {
    if (id) {
      EXPECT_TRUE(w.SetU32(key, static_cast<uint32_t>(*id)).ok());
    }
  }
  if (edit) edit(w);
  const absl::Status st = w.Finish();
  EXPECT_TRUE(st.ok()) << st;
  return path;
}

TEST(GgufVocab, ReadsWhatTheConverterWrites) {
  const VocabSpec spec = testing::SmallVocab();
  const std::string path = WriteGguf("k3_tok_small", spec, "gpt2");
  auto file = gguf::GgufFile::Open(path, true);
  ASSERT_TRUE(file.ok()) << file.status();
  auto read = VocabFromGguf(**file);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->tokens, spec.tokens);
  EXPECT_EQ(read->token_types, spec.token_types);
  EXPECT_EQ(read->pre, "kimi-k2");
  EXPECT_EQ(read->bos_id, spec.bos_id);
  EXPECT_EQ(read->eos_id, spec.eos_id);
  EXPECT_EQ(read->pad_id, spec.pad_id);

  auto tok = TokenizerFromGgufPath(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto direct = Tokenizer::FromVocab(spec).value();
  EXPECT_EQ(tok->Encode("hello world 中文", true).value(),
            direct.Encode("hello world 中文", true).value());
  std::remove(path.c_str());
}

TEST(GgufVocab, ClearErrors) {
  const VocabSpec spec = testing::SmallVocab();
  const std::string no_vocab = WriteGguf("k3_tok_novocab", spec, "no_vocab");
  auto t = TokenizerFromGgufPath(no_vocab);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("no_vocab"), std::string::npos) << t.status();

  const std::string llama = WriteGguf("k3_tok_llama", spec, "llama");
  EXPECT_EQ(TokenizerFromGgufPath(llama).status().code(), absl::StatusCode::kUnimplemented);

  const std::string bad_pre = WriteGguf("k3_tok_badpre", spec, "gpt2", [](gguf::GgufWriter& w) {
    EXPECT_TRUE(w.SetString("tokenizer.ggml.pre", "mystery").ok());
  });
  t = TokenizerFromGgufPath(bad_pre);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("\"mystery\""), std::string::npos) << t.status();

  const std::string bad_id = WriteGguf("k3_tok_badid", spec, "gpt2", [](gguf::GgufWriter& w) {
    EXPECT_TRUE(w.SetString("tokenizer.ggml.eos_token_id", "x").ok());
  });
  t = TokenizerFromGgufPath(bad_id);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("eos_token_id"), std::string::npos) << t.status();
  for (const auto& p : {no_vocab, llama, bad_pre, bad_id}) std::remove(p.c_str());
}

// The shared golden model is a no_vocab file.
TEST(GgufVocab, GoldenFileHasNoVocabulary) {
  const std::string path = std::string(K3_SHARED_DIR) + "/data/golden/k3-golden-a.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found";
  auto t = TokenizerFromGgufPath(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
}

}  // namespace
}  // namespace k3::tok
