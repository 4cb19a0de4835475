// The shared pieces of authentication and TLS (worker/common/grpc_security.h): token files, the
// constant-time compare, the bearer check on a call's metadata, and credentials from PEM files.
#include "worker/common/grpc_security.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <grpcpp/test/server_context_test_spouse.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace k3::security {
namespace {

namespace fs = std::filesystem;

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/k3-security-" + name;
  std::ofstream(path, std::ios::binary) << text;
  ::chmod(path.c_str(), 0600);
  return path;
}

TEST(TokenFile, FirstLineTrimmed) {
  auto t = ReadTokenFile(Write("a", "  s3cret-token-0123456789 \r\nsecond line is ignored\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "s3cret-token-0123456789");
  t = ReadTokenFile(Write("b", "no-newline-token-abcdef"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "no-newline-token-abcdef");
}

TEST(TokenFile, RefusesWhatIsNotAToken) {
  for (const std::string& text : {std::string(""), std::string("\n"), std::string("   \t\nsecond-line-token\n")}) {
    auto t = ReadTokenFile(Write("empty", text));
    ASSERT_FALSE(t.ok()) << "'" << text << "'";
    EXPECT_TRUE(absl::StrContains(t.status().message(), "the first line is empty")) << t.status();
  }
  auto t = ReadTokenFile(Write("space", "two words\n"));
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), "printable ASCII without spaces")) << t.status();
  t = ReadTokenFile("/nonexistent/k3-token");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), "cannot read token file /nonexistent/k3-token")) << t.status();
  t = ReadTokenFile(::testing::TempDir());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), "not a regular file")) << t.status();
  t = ReadTokenFile("/dev/zero");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), "not a regular file")) << t.status();
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

grpc::Status CheckWith(const BearerAuth& auth, std::initializer_list<std::pair<std::string, std::string>> md) {
  grpc::ServerContext ctx;
  grpc::testing::ServerContextTestSpouse spouse(&ctx);
  for (const auto& [k, v] : md) spouse.AddClientMetadata(k, v);
  return auth.Check(ctx);
}

TEST(BearerAuth, ChecksTheAuthorizationMetadata) {
  const BearerAuth auth("tok-0123456789abcdef");
  EXPECT_TRUE(CheckWith(auth, {{"authorization", "Bearer tok-0123456789abcdef"}}).ok());
  EXPECT_TRUE(CheckWith(auth, {{"authorization", "bearer tok-0123456789abcdef"}}).ok());  // scheme: any case
  const grpc::Status none = CheckWith(auth, {});
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(none.error_message(), "authorization: Bearer <token>")) << none.error_message();
  for (const auto& [md, says] : std::vector<std::pair<std::vector<std::pair<std::string, std::string>>, std::string>>{
           {{{"authorization", "Bearer tok-0123456789abcdeX"}}, "the token is not valid"},
           {{{"authorization", "Bearer tok-0123456789abcde"}}, "the token is not valid"},
           {{{"authorization", "Bearer tok-0123456789abcdef "}}, "the token is not valid"},
           {{{"authorization", "Basic dG9rOg=="}}, "must be 'Bearer <token>'"},
           {{{"authorization", "tok-0123456789abcdef"}}, "must be 'Bearer <token>'"},
           {{{"x-token", "tok-0123456789abcdef"}}, "this server wants a token"},
       }) {
    grpc::ServerContext ctx;
    grpc::testing::ServerContextTestSpouse spouse(&ctx);
    for (const auto& [k, v] : md) spouse.AddClientMetadata(k, v);
    const grpc::Status s = auth.Check(ctx);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << says;
    EXPECT_TRUE(absl::StrContains(s.error_message(), says)) << s.error_message();
    EXPECT_FALSE(absl::StrContains(s.error_message(), "tok-")) << "the message must not echo tokens";
  }
  // Off: everything passes.
  EXPECT_TRUE(CheckWith(BearerAuth(), {}).ok());
  EXPECT_FALSE(BearerAuth().enabled());
  EXPECT_TRUE(auth.enabled());
}

TEST(BearerAuth, TwoAuthorizationEntriesAreRefused) {
  const BearerAuth auth("tok-0123456789abcdef");
  grpc::ServerContext ctx;
  grpc::testing::ServerContextTestSpouse spouse(&ctx);
  spouse.AddClientMetadata("authorization", "Bearer wrong");
  spouse.AddClientMetadata("authorization", "Bearer tok-0123456789abcdef");
  const grpc::Status s = auth.Check(ctx);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "more than one")) << s.error_message();
}

TEST(Credentials, PlaintextWithoutFilesAndClearErrorsWithBadOnes) {
  auto server = ServerCredentials("", "");
  ASSERT_TRUE(server.ok());
  EXPECT_NE(*server, nullptr);
  auto channel = ChannelCredentials("");
  ASSERT_TRUE(channel.ok());
  EXPECT_NE(*channel, nullptr);
  const std::string not_pem = Write("not.pem", "hello\n");
  auto s = ServerCredentials(not_pem, "");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "both --tls-cert and --tls-key")) << s.status();
  s = ServerCredentials(not_pem, not_pem);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "is not PEM")) << s.status();
  s = ServerCredentials("/nonexistent/cert.pem", not_pem);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "cannot read TLS certificate /nonexistent/cert.pem")) << s.status();
  auto c = ChannelCredentials(not_pem);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "TLS CA certificate")) << c.status();
}

}  // namespace
}  // namespace k3::security
