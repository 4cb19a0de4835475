#include "launch/yaml_map_reader.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace k3::launch {
namespace {

const char* KindName(const YAML::Node& v) {
  if (v.IsMap()) return "a map";
  if (v.IsSequence()) return "a list";
  if (v.IsNull()) return "nothing";
  return "a scalar";
}

}  // namespace

Loc LocOf(const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return {};
  return {m.line + 1, m.column + 1};
}

MapReader::MapReader(const YAML::Node& node, std::string path, Diagnostics& diag,
                     const std::vector<std::string>& known, KeyLocs* where)
    : path_(std::move(path)), diag_(diag), where_(where) {
  where_->self = LocOf(node);
  if (!node.IsMap()) {
    diag_.Error(LocOf(node), path_.empty() ? "(top level)" : path_, absl::StrCat("wants a map, got ", KindName(node)));
    valid_ = false;
    return;
  }
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      diag_.Error(LocOf(kv.first), path_, "keys must be plain names");
      continue;
    }
    const std::string key = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      diag_.Error(LocOf(kv.first), Name(key), absl::StrCat("unknown key (known: ", absl::StrJoin(known, ", "), ")"));
      continue;
    }
    if (values_.contains(key)) {
      diag_.Error(LocOf(kv.first), Name(key), absl::StrCat("given twice (first on line ", At(key).line, ")"));
      continue;
    }
    values_[key] = kv.second;
    // A null value's mark is wherever the parser went next: use the key's.
    where_->keys[key] = kv.second.IsNull() || LocOf(kv.second).line == 0 ? LocOf(kv.first) : LocOf(kv.second);
  }
}

YAML::Node MapReader::Get(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? YAML::Node() : it->second;
}

Loc MapReader::At(const std::string& key) const { return where_->At(key); }

void MapReader::Require(const std::string& key) {
  if (valid_ && !Has(key)) diag_.Error(where_->self, Name(key), "is required");
}

std::optional<std::string> MapReader::Scalar(const YAML::Node& v, const std::string& name, const char* want, Loc at) {
  if (!v.IsScalar()) {
    diag_.Error(v.IsNull() || LocOf(v).line == 0 ? at : LocOf(v), name, absl::StrCat("wants ", want, ", got ", KindName(v)));
    return std::nullopt;
  }
  return v.Scalar();
}

std::optional<int64_t> MapReader::IntOf(const YAML::Node& v, const std::string& name, int64_t min, int64_t max, Loc at) {
  auto s = Scalar(v, name, "an integer", at);
  if (!s) return std::nullopt;
  int64_t x;
  if (!absl::SimpleAtoi(*s, &x)) {
    diag_.Error(LocOf(v), name, absl::StrCat("wants an integer, got '", *s, "'"));
    return std::nullopt;
  }
  if (x < min || x > max) {
    diag_.Error(LocOf(v), name, absl::StrCat("wants an integer in [", min, ", ", max, "], got ", x));
    return std::nullopt;
  }
  return x;
}

std::optional<std::string> MapReader::Str(const std::string& key) {
  if (!Has(key)) return std::nullopt;
  auto s = Scalar(Get(key), Name(key), "a string", At(key));
  if (s && s->empty()) {
    diag_.Error(At(key), Name(key), "is empty");
    return std::nullopt;
  }
  return s;
}

std::optional<int64_t> MapReader::Int(const std::string& key, int64_t min, int64_t max) {
  if (!Has(key)) return std::nullopt;
  return IntOf(Get(key), Name(key), min, max, At(key));
}

std::optional<double> MapReader::Number(const std::string& key, double min) {
  if (!Has(key)) return std::nullopt;
  auto s = Scalar(Get(key), Name(key), "a number", At(key));
  if (!s) return std::nullopt;
  double x;
  if (!absl::SimpleAtod(*s, &x) || !std::isfinite(x) || x < min) {
    diag_.Error(At(key), Name(key), absl::StrCat("wants a number >= ", min, ", got '", *s, "'"));
    return std::nullopt;
  }
  return x;
}

std::optional<std::string> MapReader::OneOf(const std::string& key, const std::vector<std::string>& allowed) {
  auto s = Str(key);
  if (!s) return std::nullopt;
  if (std::find(allowed.begin(), allowed.end(), *s) == allowed.end()) {
    diag_.Error(At(key), Name(key), absl::StrCat("wants one of ", absl::StrJoin(allowed, "|"), ", got '", *s, "'"));
    return std::nullopt;
  }
  return s;
}

std::optional<std::vector<std::string>> MapReader::StrList(const std::string& key) {
  if (!Has(key)) return std::nullopt;
  const YAML::Node v = Get(key);
  if (!v.IsSequence()) {
    diag_.Error(At(key), Name(key), absl::StrCat("wants a list of strings, got ", KindName(v)));
    return std::nullopt;
  }
  std::vector<std::string> out;
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = absl::StrCat(Name(key), "[", i, "]");
    where_->keys[absl::StrCat(key, "[", i, "]")] = LocOf(v[i]);
    auto s = Scalar(v[i], name, "a string", At(key));
    if (s) out.push_back(*s);
    ok = ok && s.has_value();
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<std::vector<int64_t>> MapReader::IntList(const std::string& key, int64_t min, int64_t max) {
  if (!Has(key)) return std::nullopt;
  const YAML::Node v = Get(key);
  if (!v.IsSequence()) {
    diag_.Error(At(key), Name(key), absl::StrCat("wants a list of integers, got ", KindName(v)));
    return std::nullopt;
  }
  std::vector<int64_t> out;
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    where_->keys[absl::StrCat(key, "[", i, "]")] = LocOf(v[i]);
    auto x = IntOf(v[i], absl::StrCat(Name(key), "[", i, "]"), min, max, At(key));
    if (x) out.push_back(*x);
    ok = ok && x.has_value();
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<EnvList> MapReader::Env(const std::string& key) {
  if (!Has(key)) return std::nullopt;
  const YAML::Node v = Get(key);
  if (!v.IsMap()) {
    diag_.Error(At(key), Name(key), absl::StrCat("wants a map NAME: value, got ", KindName(v)));
    return std::nullopt;
  }
  EnvList env;
  bool ok = true;
  for (const auto& kv : v) {
    const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "?";
    const std::string full = absl::StrCat(Name(key), ".", name);
    where_->keys[absl::StrCat(key, ".", name)] = LocOf(kv.first);
    auto s = Scalar(kv.second, full, "a string", LocOf(kv.first));
    if (!s) {
      ok = false;
      continue;
    }
    for (const auto& [n, _] : env) {
      if (n == name) {
        diag_.Error(LocOf(kv.first), full, "given twice");
        ok = false;
      }
    }
    env.emplace_back(name, *s);
  }
  if (!ok) return std::nullopt;
  return env;
}

}  // namespace k3::launch
