// What the gRPC endpoints (the coordinator's k3.v1.Inference, a leader's k3.v1.Worker) and their
// clients (k3, the coordinator's worker client) share to keep strangers out: a shared bearer
// token (`authorization: Bearer <token>` metadata, compared in constant time) and TLS
// credentials from PEM files. With no token file and no certificate everything is plaintext and
// open, as before; see docs/threat-model.md.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace k3::security {

// The token of a token file: its first line, surrounding whitespace trimmed. Refuses a file that
// cannot be read or is not a regular file, an empty token, and bytes that cannot go into an
// HTTP/2 header value (controls, spaces inside, non-ASCII).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// a == b in a time that depends on the lengths only, not on where the first difference is.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Checks the bearer token of incoming calls. Default-constructed (no token): every call passes.
class BearerAuth {
 public:
  BearerAuth() = default;
  explicit BearerAuth(std::string token) : token_(std::move(token)) {}
  BearerAuth(const BearerAuth& other) : token_(other.token_) {}

  bool enabled() const { return !token_.empty(); }
  // OK, or UNAUTHENTICATED saying what is missing (never echoing what was sent). Rejections are
  // logged with the peer and method, at most one line a second (a flood must not flood the log).
  grpc::Status Check(const grpc::ServerContext& ctx) const;
  // The same test on a token given outside gRPC (the step channel's hello): true when no token
  // is wanted or it matches (constant time).
  bool Accepts(std::string_view token) const { return token_.empty() || ConstantTimeEquals(token, token_); }

 private:
  std::string token_;
  mutable std::atomic<int64_t> last_log_ms_{0};
  mutable std::atomic<int64_t> unlogged_{0};
};

// Adds `authorization: Bearer <token>` to an outgoing call; nothing for an empty token.
void AddBearer(grpc::ClientContext& ctx, const std::string& token);

// Server credentials: TLS from a PEM certificate chain and key when both paths are given,
// plaintext when neither is; one without the other is an error.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const std::string& cert_path,
                                                                           const std::string& key_path);

// Channel credentials: TLS trusting the PEM CA certificate(s) in `ca_path`, plaintext when empty.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const std::string& ca_path);

}  // namespace k3::security
