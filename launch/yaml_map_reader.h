// Reads one YAML map strictly: keys outside the known set, keys given twice and values of the
// wrong type are errors naming their line; where each key sits is kept for later checks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "launch/diagnostics.h"
#include "launch/launch_config.h"

namespace k3::launch {

Loc LocOf(const YAML::Node& node);  // line 0 for nodes made by an override

class MapReader {
 public:
  // `path` is the dotted name of the map ("worker_groups[0]"), "" for the root.
  MapReader(const YAML::Node& node, std::string path, Diagnostics& diag, const std::vector<std::string>& known,
            KeyLocs* where);

  bool valid() const { return valid_; }  // a map (else the error is reported)
  bool Has(const std::string& key) const { return values_.contains(key); }
  YAML::Node Get(const std::string& key) const;  // a null node when absent
  Loc At(const std::string& key) const;          // the value's place (the map's when absent)
  std::string Name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  void Require(const std::string& key);          // reports a missing key

  // Each gives nullopt when the key is absent or its value is wrong (reported).
  std::optional<std::string> Str(const std::string& key);
  std::optional<int64_t> Int(const std::string& key, int64_t min, int64_t max);
  std::optional<double> Number(const std::string& key, double min);
  std::optional<std::string> OneOf(const std::string& key, const std::vector<std::string>& allowed);
  std::optional<std::vector<std::string>> StrList(const std::string& key);
  std::optional<std::vector<int64_t>> IntList(const std::string& key, int64_t min, int64_t max);
  std::optional<EnvList> Env(const std::string& key);  // NAME: value map

 private:
  // `at`: where to report a missing value ("key:" with nothing after it has no place of its own).
  std::optional<std::string> Scalar(const YAML::Node& v, const std::string& name, const char* want, Loc at);
  std::optional<int64_t> IntOf(const YAML::Node& v, const std::string& name, int64_t min, int64_t max, Loc at);

  std::string path_;
  Diagnostics& diag_;
  KeyLocs* where_;
  bool valid_ = true;
  std::map<std::string, YAML::Node> values_;
};

}  // namespace k3::launch
