#include "launch/address.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace k3::launch {

absl::StatusOr<HostPort> ParseHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("wants host:port, got '", std::string(address), "'"));
  }
  HostPort hp;
  hp.host = std::string(address.substr(0, colon));
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') hp.host = hp.host.substr(1, hp.host.size() - 2);
  const std::string port(address.substr(colon + 1));
  if (!absl::SimpleAtoi(port, &hp.port) || hp.port < 1 || hp.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("wants a port in 1..65535 after the ':', got '", std::string(address), "'"));
  }
  return hp;
}

bool IsWildcardHost(std::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

bool IsLocalHost(std::string_view host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1";
}

std::string DialAddress(const WorkerGroupSpec& g) {
  if (!g.address.empty()) return g.address;
  auto hp = ParseHostPort(g.listen);
  if (!hp.ok() || !IsWildcardHost(hp->host) || g.hosts.empty()) return g.listen;
  return absl::StrCat(g.hosts[0], ":", hp->port);
}

}  // namespace k3::launch
