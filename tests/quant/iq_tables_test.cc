// The compiled IQ tables (iq_tables.cc, generated) against the text they were generated from,
// re-parsed here independently of gen_iq_tables.py.
#include "kernels/quant/iq_tables.h"

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "quant_test_util.h"

namespace k3::quant {
namespace {

struct TextTable {
  std::string type;
  std::vector<long long> values;  // int8 tables may hold negatives; the rest fit in 64 unsigned bits
  std::vector<unsigned long long> uvalues;
};

long long CompiledValue(const IqTableInfo& t, size_t i, unsigned long long* u) {
  if (t.c_type == "int8_t") return static_cast<const int8_t*>(t.data)[i];
  if (t.c_type == "uint8_t") return *u = static_cast<const uint8_t*>(t.data)[i];
  if (t.c_type == "uint16_t") return *u = static_cast<const uint16_t*>(t.data)[i];
  if (t.c_type == "uint32_t") return *u = static_cast<const uint32_t*>(t.data)[i];
  *u = static_cast<const uint64_t*>(t.data)[i];
  return 0;
}

TEST(quantIqTables, EveryValueMatchesTheSourceText) {
  const std::string path = testing::SharedPath("data/ggml-quant-tables.txt");
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << "no " << path << " (the shared data folder is absent)";

  std::map<std::string, TextTable> tables;
  std::map<std::string, double> constants;
  std::string line, current;
  size_t expected = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      const auto pos = line.find("Constants:");
      if (pos != std::string::npos) {
        // "A = B = 0.125"
        std::vector<std::string> parts;
        std::istringstream ss(line.substr(pos + 10));
        for (std::string tok; ss >> tok;) {
          if (tok != "=") parts.push_back(tok);
        }
        ASSERT_GE(parts.size(), 2u) << line;
        for (size_t i = 0; i + 1 < parts.size(); ++i) constants[parts[i]] = std::stod(parts.back());
      }
      continue;
    }
    std::istringstream ss(line);
    if (line.rfind("table ", 0) == 0) {
      ASSERT_EQ(tables[current].values.size(), expected) << "table " << current << " is short";
      std::string word, type;
      ASSERT_TRUE(ss >> word >> current >> type >> expected) << line;
      tables[current].type = type;
      continue;
    }
    for (std::string tok; ss >> tok;) {
      TextTable& t = tables[current];
      if (t.type == "int8_t") {
        t.values.push_back(std::stoll(tok, nullptr, 0));
      } else {
        t.uvalues.push_back(std::stoull(tok, nullptr, 0));
        t.values.push_back(0);
      }
    }
  }
  ASSERT_EQ(tables[current].values.size(), expected) << "table " << current << " is short";
  tables.erase("");

  ASSERT_EQ(tables.size(), IqTables().size());
  for (const IqTableInfo& info : IqTables()) {
    const auto it = tables.find(std::string(info.name));
    ASSERT_NE(it, tables.end()) << info.name << " is compiled in but not in the text";
    const TextTable& t = it->second;
    EXPECT_EQ(t.type, info.c_type) << info.name;
    ASSERT_EQ(t.values.size(), info.count) << info.name;
    for (size_t i = 0; i < info.count; ++i) {
      unsigned long long u = 0;
      const long long s = CompiledValue(info, i, &u);
      if (t.type == "int8_t") {
        ASSERT_EQ(s, t.values[i]) << info.name << "[" << i << "]";
      } else {
        ASSERT_EQ(u, t.uvalues[i]) << info.name << "[" << i << "]";
      }
    }
  }

  ASSERT_EQ(constants.count("IQ1S_DELTA"), 1u);
  ASSERT_EQ(constants.count("IQ1M_DELTA"), 1u);
  EXPECT_EQ(kIq1sDelta, static_cast<float>(constants["IQ1S_DELTA"]));
  EXPECT_EQ(kIq1mDelta, static_cast<float>(constants["IQ1M_DELTA"]));
}

// Facts about the tables the decoders rely on, checked without the text.
TEST(quantIqTables, StructuralInvariants) {
  for (int i = 0; i < 128; ++i) {
    // ksigns_iq2xs[i] is i with bit 7 set so that the number of set bits (negative signs) is even.
    EXPECT_EQ(kKsignsIq2xs[i] & 127, i);
    EXPECT_EQ(__builtin_popcount(kKsignsIq2xs[i]) % 2, 0);
  }
  for (uint64_t e : kIq1sGrid) {
    for (int j = 0; j < 8; ++j) {
      const auto b = static_cast<uint8_t>(e >> (8 * j));
      EXPECT_TRUE(b == 0x00 || b == 0x01 || b == 0xff) << std::hex << e;
    }
  }
}

}  // namespace
}  // namespace k3::quant
