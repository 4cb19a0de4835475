#include "coordinator/tokenizer/tiktoken_ranks.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "coordinator/tokenizer/byte_unicode.h"
#include "worker/common/tiktoken_ranks.h"

namespace k3::tok {
namespace {

TEST(TiktokenRanks, ParsesTiktokenLines) {
  // "IQ==" = "!", "IA==" = " ", "aGk=" = "hi"
  auto r = ParseTiktokenRanks("IQ== 0\nIA== 1\r\naGk= 2\n\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (std::vector<std::string>{"!", " ", "hi"}));
}

TEST(TiktokenRanks, ParsesNpmCompressedLines) {
  auto r = ParseTiktokenRanks("! 0 IQ== IA==\n! 2 aGk=");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (std::vector<std::string>{"!", " ", "hi"}));
  auto mixed = ParseTiktokenRanks("aGk= 2\n! 0 IQ== IA==");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(*mixed, *r);
}

TEST(TiktokenRanks, SkipsBlankLinesOfSpacesAndTabs) {
  auto r = ParseTiktokenRanks("IQ== 0\n   \n\t\nIA==\t1\n \r\naGk= 2\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (std::vector<std::string>{"!", " ", "hi"}));
}

TEST(TiktokenRanks, ParsesTheNpmJsonFile) {
  auto r = ParseTiktokenRanks(" {\"pat_str\":\"x\",\"bpe_ranks\" : \"! 0 IQ== IA== aGk=\"}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (std::vector<std::string>{"!", " ", "hi"}));
  EXPECT_FALSE(ParseTiktokenRanks("{\"pat_str\":\"x\"}").ok());         // no bpe_ranks
  EXPECT_FALSE(ParseTiktokenRanks("{\"bpe_ranks\": \"! 0 IQ==").ok());  // unterminated
  EXPECT_FALSE(ParseTiktokenRanks("{\"bpe_ranks\"").ok());               // nothing after the key
}

TEST(TiktokenRanks, Errors) {
  EXPECT_FALSE(ParseTiktokenRanks("").ok());
  EXPECT_FALSE(ParseTiktokenRanks("IQ== 0\naGk= 2").ok());  // rank 1 missing
  EXPECT_FALSE(ParseTiktokenRanks("IQ== 0\nIA== 0").ok());  // rank twice
  EXPECT_FALSE(ParseTiktokenRanks("@@@ 0").ok());           // base64
  EXPECT_FALSE(ParseTiktokenRanks("IQ==").ok());            // no rank
  EXPECT_FALSE(ParseTiktokenRanks("! x IQ==").ok());
  auto e = ParseTiktokenRanks("IQ== 0\nIA== 1 2");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("line 2"), std::string::npos) << e.status();
}

TEST(TiktokenRanks, ReadsFiles) {
  const std::string path = ::testing::TempDir() + "/k3_tok_ranks.tiktoken";
  std::ofstream(path) << "IQ== 0\nIA== 1\n";
  auto r = ReadTiktokenRanksFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 2u);
  std::remove(path.c_str());
  auto missing = ReadTiktokenRanksFile(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

TEST(TiktokenRanks, VocabFromTiktoken) {
  auto v = VocabFromTiktoken({"!", " ", "hi"}, {{"<|end|>", 5}, {"<|x|>", 3}}, "cl100k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->pre, "cl100k");
  EXPECT_EQ(v->tokens, (std::vector<std::string>{"!", BytesToGgufToken(" "), "hi", "<|x|>",
                                                 "[PAD4]", "<|end|>"}));
  EXPECT_EQ(v->token_types, (std::vector<int32_t>{1, 1, 1, 3, 5, 3}));
  EXPECT_FALSE(VocabFromTiktoken({"!", " "}, {{"<|end|>", 1}}, "cl100k").ok());
  EXPECT_FALSE(VocabFromTiktoken({"!"}, {{"<|a|>", 2}, {"<|b|>", 2}}, "cl100k").ok());
}

}  // namespace
}  // namespace k3::tok
