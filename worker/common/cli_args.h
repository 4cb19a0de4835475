// A small command-line parser for the project's tools: "--name value", "--name=value" and
// bare "--flag"; positional arguments kept in order. Unknown names are reported by Finish().
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace k3 {

class CliArgs {
 public:
  CliArgs(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0 || a == "--") {
        positional_.push_back(a);
        continue;
      }
      a = a.substr(2);
      const size_t eq = a.find('=');
      if (eq != std::string::npos) {
        values_[a.substr(0, eq)] = a.substr(eq + 1);
      } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        values_[a] = argv[++i];
      } else {
        values_[a] = "";
      }
    }
  }

  bool Has(const std::string& name) { used_.insert(name); return values_.contains(name); }
  std::string Str(const std::string& name, const std::string& def = "") {
    used_.insert(name);
    auto it = values_.find(name);
    return it == values_.end() ? def : it->second;
  }
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t def) {
    used_.insert(name);
    auto it = values_.find(name);
    if (it == values_.end()) return def;
    int64_t v;
    if (!absl::SimpleAtoi(it->second, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " wants an integer, got '", it->second, "'"));
    }
    return v;
  }
  absl::StatusOr<double> Double(const std::string& name, double def) {
    used_.insert(name);
    auto it = values_.find(name);
    if (it == values_.end()) return def;
    double v;
    if (!absl::SimpleAtod(it->second, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " wants a number, got '", it->second, "'"));
    }
    return v;
  }
  const std::vector<std::string>& positional() const { return positional_; }
  // Call after reading every option: an option nobody asked for is a typo.
  absl::Status Finish() const {
    for (const auto& [k, v] : values_) {
      if (!used_.contains(k)) return absl::InvalidArgumentError(absl::StrCat("unknown option --", k));
    }
    return absl::OkStatus();
  }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
  std::vector<std::string> positional_;
};

}  // namespace k3
