#include "worker/common/grpc_security.h"

#include <sys/stat.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/common/small_file.h"

namespace k3::security {
namespace {

constexpr size_t kMaxTokenFileBytes = 64 << 10;
constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxPemBytes = 1 << 20;
constexpr char kScheme[] = "Bearer ";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what, const char* marker) {
  auto pem = ReadSmallFile(path, kMaxPemBytes, what);
  if (!pem.ok()) return pem.status();
  // gRPC only says "handshake failed" or refuses to start on a bad file: say which file here.
  if (!absl::StrContains(*pem, "-----BEGIN ") || !absl::StrContains(*pem, marker)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not PEM (no '", marker, "' block)"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto text = ReadSmallFile(path, kMaxTokenFileBytes, "token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(absl::string_view(*text).substr(0, text->find('\n'))));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": the first line is empty"));
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": the token is longer than ", kMaxTokenBytes, " bytes"));
  }
  for (const char ch : token) {
    if (ch < 0x21 || ch > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file ", path, ": the token must be printable ASCII without spaces (it goes into a header)"));
    }
  }
  if (token.size() < 16) spdlog::warn("token file {}: a token of {} characters is easy to guess", path, token.size());
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    spdlog::warn("token file {} can be read by other users (chmod 600 it)", path);
  }
  return token;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of `a` is looked at whatever matches; volatile keeps the compiler from stopping early.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = diff | static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

grpc::Status BearerAuth::Check(const grpc::ServerContext& ctx) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  const auto [first, last] = md.equal_range("authorization");
  std::string why;
  if (first == last) {
    why = "this server wants a token: send the metadata 'authorization: Bearer <token>' (k3 --token-file PATH)";
  } else if (std::next(first) != last) {
    why = "more than one 'authorization' metadata entry";
  } else {
    const std::string_view value(first->second.data(), first->second.size());
    const std::string_view scheme(kScheme, sizeof(kScheme) - 1);
    // The scheme is case-insensitive (RFC 6750); the token is not.
    if (value.size() < scheme.size() ||
        !absl::EqualsIgnoreCase(absl::string_view(value.data(), scheme.size()), absl::string_view(kScheme))) {
      why = "the 'authorization' metadata must be 'Bearer <token>'";
    } else if (!ConstantTimeEquals(value.substr(scheme.size()), token_)) {
      why = "the token is not valid";
    } else {
      return grpc::Status::OK;
    }
  }
  const int64_t now = NowMs();
  int64_t last_log = last_log_ms_.load();
  if (now - last_log >= 1000 && last_log_ms_.compare_exchange_strong(last_log, now)) {
    const int64_t more = unlogged_.exchange(0);
    // The method name: the server knows it as the :path; ServerContext has no accessor, so the
    // peer and reason only.
    spdlog::warn("refused an unauthenticated call from {}: {}{}", ctx.peer(), why,
                 more > 0 ? absl::StrCat(" (and ", more, " more since the last such line)") : "");
  } else {
    ++unlogged_;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
}

void AddBearer(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata("authorization", kScheme + token);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const std::string& cert_path,
                                                                           const std::string& key_path) {
  if (cert_path.empty() && key_path.empty()) return grpc::InsecureServerCredentials();
  if (cert_path.empty() || key_path.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  auto cert = ReadPem(cert_path, "TLS certificate", "CERTIFICATE-----");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(key_path, "TLS key", "PRIVATE KEY-----");
  if (!key.ok()) return key.status();
  pair.cert_chain = std::move(*cert);
  pair.private_key = std::move(*key);
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const std::string& ca_path) {
  if (ca_path.empty()) return grpc::InsecureChannelCredentials();
  auto ca = ReadPem(ca_path, "TLS CA certificate", "CERTIFICATE-----");
  if (!ca.ok()) return ca.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = std::move(*ca);
  return grpc::SslCredentials(options);
}

}  // namespace k3::security
