// Our ids against the real tiktoken (npm package) for cl100k_base and o200k_base, over
// corpus.json plus generated long runs. make_expected.sh installs the package into the build
// dir and writes the reference; without node/npm the tests skip.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/tokenizer/detokenizer.h"
#include "coordinator/tokenizer/pretokenizer.h"
#include "coordinator/tokenizer/tiktoken_ranks.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer/utf8.h"
#include "worker/common/tiktoken_ranks.h"

namespace k3::tok {
namespace {

const std::string kRefDir = K3_TOK_REF_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  bool allow_special;
  std::string text;
  std::vector<int32_t> ids;
};

// Runs make_expected.sh once per process; returns "" when ready, else why the tests skip.
// A real failure of the script fails the test instead.
const std::string& Prepare() {
  static const std::string reason = [] {
    const std::string cmd = std::string("bash '") + K3_TOK_MAKE_EXPECTED + "' '" + kRefDir + "'";
    const int rc = std::system(cmd.c_str());
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (code == 0) return std::string();
    if (code == 2) return "tiktoken reference unavailable: " + ReadFile(kRefDir + "/unavailable.txt");
    ADD_FAILURE() << "make_expected.sh failed with status " << rc;
    return std::string("make_expected.sh failed");
  }();
  return reason;
}

std::map<std::string, std::vector<Case>> LoadCases() {
  std::map<std::string, std::vector<Case>> out;
  std::ifstream in(kRefDir + "/expected.tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    EXPECT_EQ(f.size(), 4u) << line;
    if (f.size() != 4) continue;
    Case c;
    c.allow_special = f[1] == "1";
    EXPECT_TRUE(absl::Base64Unescape(f[2], &c.text));
    for (absl::string_view s : absl::StrSplit(f[3], ' ', absl::SkipEmpty())) {
      int32_t id = 0;
      EXPECT_TRUE(absl::SimpleAtoi(s, &id));
      c.ids.push_back(id);
    }
    out[f[0]].push_back(std::move(c));
  }
  return out;
}

Tokenizer LoadEncoding(const std::string& name, const std::string& pre) {
  auto ranks = ParseTiktokenRanks(ReadFile(kRefDir + "/" + name + ".ranks"));
  EXPECT_TRUE(ranks.ok()) << ranks.status();
  std::vector<std::pair<std::string, int32_t>> specials;
  std::istringstream sp(ReadFile(kRefDir + "/" + name + ".specials"));
  int32_t id;
  std::string text;
  while (sp >> id >> text) specials.emplace_back(text, id);
  auto vocab = VocabFromTiktoken(*ranks, specials, pre);
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  auto tok = Tokenizer::FromVocab(*vocab);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(tok).value();
}

std::string Show(const std::string& text) {
  return absl::CEscape(text.size() > 200 ? text.substr(0, 200) + "..." : text);
}

std::string ShowIds(const std::vector<int32_t>& ids, size_t from) {
  std::string s;
  for (size_t i = from; i < ids.size() && i < from + 12; ++i) s += std::to_string(ids[i]) + " ";
  return s;
}

class TiktokenCompare : public ::testing::TestWithParam<std::pair<const char*, const char*>> {
 protected:
  void SetUp() override {
    if (!Prepare().empty()) GTEST_SKIP() << Prepare();
  }
};

TEST_P(TiktokenCompare, SameIdsAsTiktoken) {
  const auto [name, pre] = GetParam();
  const Tokenizer tok = LoadEncoding(name, pre);
  const auto cases = LoadCases();
  ASSERT_TRUE(cases.contains(name));
  int mismatches = 0;
  double seconds = 0;
  size_t bytes = 0;
  for (const Case& c : cases.at(name)) {
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tok.Encode(c.text, c.allow_special);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes += c.text.size();
    ASSERT_TRUE(ids.ok()) << ids.status();
    if (*ids != c.ids) {
      size_t i = 0;
      while (i < ids->size() && i < c.ids.size() && (*ids)[i] == c.ids[i]) ++i;
      auto pieces = tok.pre_tokenizer().Split(c.text);
      std::string shown;
      for (size_t k = 0; pieces.ok() && k < pieces->size() && k < 20; ++k) {
        absl::StrAppend(&shown, "[", absl::CEscape((*pieces)[k]), "]");
      }
      ADD_FAILURE() << name << " differs at id " << i << " for \"" << Show(c.text)
                    << "\"\n  ours:     " << ShowIds(*ids, i) << "\n  tiktoken: "
                    << ShowIds(c.ids, i) << "\n  our pieces: " << shown;
      ++mismatches;
    }
    EXPECT_EQ(tok.Decode(c.ids).value(), c.text) << Show(c.text);
  }
  EXPECT_EQ(mismatches, 0);
  std::printf("[ info ] %s: %zu cases, %.1f MB/s\n", name, cases.at(name).size(),
              bytes / 1e6 / seconds);
}

TEST_P(TiktokenCompare, PatternIsTiktokens) {
  const auto [name, pre] = GetParam();
  const std::string pat = ReadFile(kRefDir + "/" + name + ".pat");
  const std::string ours = std::string(name) == "cl100k_base" ? std::string(kCl100kPattern)
                                                              : std::string(kO200kPattern);
  EXPECT_EQ(ours, pat);
}

// Streaming the reference ids never emits broken UTF-8 and adds up to Decode (real BPE tokens
// split multi-byte characters: emoji, CJK, combining marks).
TEST_P(TiktokenCompare, IncrementalDetokenizer) {
  const auto [name, pre] = GetParam();
  const Tokenizer tok = LoadEncoding(name, pre);
  const auto cases = LoadCases();
  ASSERT_TRUE(cases.contains(name));
  for (const Case& c : cases.at(name)) {
    IncrementalDetokenizer d(tok);
    std::string all;
    for (int32_t id : c.ids) {
      const std::string piece = d.Feed(id).value();
      ASSERT_TRUE(IsValidUtf8(piece)) << Show(c.text);
      all += piece;
    }
    all += d.Finish();
    EXPECT_EQ(all, tok.Decode(c.ids).value()) << Show(c.text);
  }
}

// Very long pieces (no reference: tiktoken itself is quadratic there) must stay fast.
TEST_P(TiktokenCompare, LongRunsAreFast) {
  const auto [name, pre] = GetParam();
  const Tokenizer tok = LoadEncoding(name, pre);
  for (const std::string& text :
       {std::string(100'000, ' ') + "x", std::string(100'000, 'a'), std::string(100'000, '\n'),
        std::string(50'000, '!')}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tok.Encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(tok.Decode(*ids).value(), text);
    EXPECT_LT(s, 2.0) << Show(text.substr(0, 10)) << " x " << text.size();
  }
}

INSTANTIATE_TEST_SUITE_P(Encodings, TiktokenCompare,
                         ::testing::Values(std::make_pair("cl100k_base", "cl100k"),
                                           std::make_pair("o200k_base", "o200k")),
                         [](const auto& info) { return std::string(info.param.first); });

}  // namespace
}  // namespace k3::tok
