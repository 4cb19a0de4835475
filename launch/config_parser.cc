#include "launch/config_parser.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "launch/diagnostics.h"
#include "launch/hostfile.h"
#include "launch/yaml_map_reader.h"
#include "worker/common/small_file.h"
#include "worker/gguf/shard_name.h"
#include "worker/model/quant_mix.h"
#include "worker/synth/presets.h"

namespace k3::launch {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxInt = int64_t{1} << 40;
constexpr int64_t kMaxHosts = 65536;  // as many as a launch may have ranks (config_check.cc)
constexpr uint64_t kMaxNodes = uint64_t{1} << 18;  // YAML nodes, aliases expanded (a real config has ~100)

std::string Resolve(const std::string& base_dir, const std::string& p) {
  fs::path path(p);
  if (path.is_relative()) path = fs::path(base_dir) / path;
  return path.lexically_normal().string();
}

// The part of an mpirun --map-by / --bind-to value before its modifiers ("ppr:4:socket" -> "ppr").
bool KnownPolicy(const std::string& value, const std::vector<std::string>& names) {
  const std::string head = value.substr(0, value.find(':'));
  return std::find(names.begin(), names.end(), head) != names.end();
}

// The number of nodes a YAML document stands for once its aliases are expanded: each *alias
// counts the whole node its &anchor names. Ten lines of nested aliases can stand for billions of
// nodes ("billion laughs"), and the parser below walks the expanded tree.
class ExpansionCounter : public YAML::EventHandler {
 public:
  uint64_t total() const { return total_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { Leaf(anchor); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t anchor) override {
    auto it = size_.find(anchor);
    Add(it == size_.end() ? 1 : it->second);
  }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, const std::string&) override {
    Leaf(anchor);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    Open(anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, YAML::EmitterStyle::value) override {
    Open(anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  static constexpr uint64_t kSaturated = uint64_t{1} << 62;  // sizes grow exponentially: saturate
  void Add(uint64_t n) { total_ = std::min(kSaturated, total_ + std::min(n, kSaturated)); }
  void Leaf(YAML::anchor_t anchor) {
    Add(1);
    if (anchor != YAML::NullAnchor) size_[anchor] = 1;
  }
  void Open(YAML::anchor_t anchor) {
    open_.emplace_back(anchor, total_);
    Add(1);
  }
  void Close() {
    if (open_.empty()) return;
    const auto [anchor, start] = open_.back();
    open_.pop_back();
    if (anchor != YAML::NullAnchor) size_[anchor] = total_ - start;
  }

  uint64_t total_ = 0;
  std::map<YAML::anchor_t, uint64_t> size_;
  std::vector<std::pair<YAML::anchor_t, uint64_t>> open_;  // open collections: anchor, total at start
};

class Parser {
 public:
  Parser(Diagnostics& diag, std::string base_dir) : diag_(diag), base_(std::move(base_dir)) {}

  void Root(const YAML::Node& root, LaunchConfig& c) {
    MapReader r(root, "", diag_, {"model", "worker_groups", "coordinator", "logging", "profiling"}, &c.where);
    if (!r.valid()) return;
    r.Require("model");
    r.Require("worker_groups");
    if (r.Has("model")) Model(r.Get("model"), c.model);
    if (r.Has("worker_groups")) Groups(r.Get("worker_groups"), r.At("worker_groups"), c.groups);
    c.coordinator.where.self = r.At("coordinator");  // absent sections point at the top level
    c.logging.where.self = r.At("logging");
    c.profiling.where.self = r.At("profiling");
    if (r.Has("coordinator")) Coordinator(r.Get("coordinator"), c.coordinator);
    if (r.Has("logging")) Logging(r.Get("logging"), c.logging);
    if (c.logging.dir.empty()) c.logging.dir = absl::StrCat("/tmp/k3-launch-", fs::path(diag_.file()).stem().string());
    if (r.Has("profiling")) Profiling(r.Get("profiling"), c.profiling);
  }

 private:
  void Model(const YAML::Node& node, ModelSpec& m) {
    MapReader r(node, "model", diag_, {"path", "synthetic"}, &m.where);
    if (!r.valid()) return;
    if (r.Has("path") == r.Has("synthetic")) {
      diag_.Error(m.where.self, "model", "give exactly one of path, synthetic");
      return;
    }
    if (auto p = r.Str("path")) m.path = Resolve(base_, *p);
    if (!r.Has("synthetic")) return;
    KeyLocs syn_where;
    MapReader s(r.Get("synthetic"), "model.synthetic", diag_, {"preset", "seed", "output", "quant", "shards", "in_memory"}, &syn_where);
    if (!s.valid()) return;
    s.Require("preset");
    s.Require("output");
    SyntheticModel syn;
    if (auto v = s.OneOf("preset", synth::PresetNames())) syn.preset = *v;
    if (auto v = s.Int("seed", 0, kMaxInt)) syn.seed = *v;
    if (auto v = s.Str("output")) syn.output = Resolve(base_, *v);
    if (auto v = s.OneOf("quant", model::QuantMix::PresetNames())) syn.quant = *v;
    syn.shards = synth::DefaultShards(syn.preset);
    if (auto v = s.Int("shards", 1, 9999)) syn.shards = static_cast<int>(*v);
    if (auto v = s.OneOf("in_memory", {"true", "false"})) syn.in_memory = *v == "true";
    // Keep the synthetic keys' places under "synthetic.<key>" for later messages.
    for (const auto& [k, loc] : syn_where.keys) m.where.keys["synthetic." + k] = loc;
    if (syn.shards > 1) {
      std::string_view prefix = syn.output;
      if (prefix.size() > 5 && prefix.substr(prefix.size() - 5) == ".gguf") prefix.remove_suffix(5);
      m.path = gguf::ShardPath(prefix, 1, syn.shards);  // k3-synth names split outputs this way
    } else {
      m.path = syn.output;
    }
    m.synthetic = syn;
  }

  void Groups(const YAML::Node& node, Loc at, std::vector<WorkerGroupSpec>& groups) {
    if (!node.IsSequence() || node.size() == 0) {
      diag_.Error(at, "worker_groups", "wants a non-empty list of worker groups");
      return;
    }
    for (size_t i = 0; i < node.size() && hosts_seen_ <= kMaxHosts; ++i) {
      groups.emplace_back();
      Group(node[i], absl::StrCat("worker_groups[", i, "]"), groups.back());
    }
  }

  void Group(const YAML::Node& node, const std::string& name, WorkerGroupSpec& g) {
    MapReader r(node, name, diag_,
                {"name",
                 "backend",
                 "hosts",
                 "hostfile",
                 "ranks_per_host",
                 "gpus_per_host",
                 "gpus",
                 "numa_nodes",
                 "bind_to",
                 "map_by",
                 "tensor_parallel",
                 "expert_groups",
                 "listen",
                 "address",
                 "max_seqs",
                 "cache_tokens",
                 "timeout_ms",
                 "gpu_memory_gib",
                 "env",
                 "mpirun_args",
                 "worker_args",
                 "auth_token_file",
                 "tls_cert",
                 "tls_key",
                 "coordinator_timeout_s",
                 "step_port",
                 "prefill_chunk"},
                &g.where);
    if (!r.valid()) return;
    r.Require("name");
    r.Require("ranks_per_host");
    r.Require("listen");
    if (auto v = r.Str("name")) g.name = *v;
    if (auto v = r.OneOf("backend", {"cpu", "cuda"})) g.backend = *v == "cuda" ? Backend::kCuda : Backend::kCpu;
    // Bound the hosts over all groups (lists and hostfiles) before copying them: the checks and
    // the app files go rank by rank, and aliases or a shared hostfile repeat hosts cheaply.
    if (const YAML::Node h = r.Get("hosts"); h.IsSequence()) hosts_seen_ += static_cast<int64_t>(h.size());
    if (hosts_seen_ > kMaxHosts) {
      diag_.Error(r.At("hosts"), r.Name("hosts"), absl::StrCat("more than ", kMaxHosts, " hosts over all worker groups"));
    } else if (r.Has("hosts") == r.Has("hostfile")) {
      diag_.Error(g.where.self, name, "give exactly one of hosts, hostfile");
    } else if (auto hosts = r.StrList("hosts")) {
      if (hosts->empty()) diag_.Error(r.At("hosts"), r.Name("hosts"), "is empty");
      g.hosts = *hosts;
      g.host_slots.assign(hosts->size(), 0);
      g.host_lines.assign(hosts->size(), 0);
    } else if (auto file = r.Str("hostfile")) {
      g.hostfile = Resolve(base_, *file);
      // Read once per file, however many groups (or aliases of one group) name it.
      auto cached = hostfiles_.find(g.hostfile);
      if (cached == hostfiles_.end()) cached = hostfiles_.emplace(g.hostfile, ReadHostfile(g.hostfile)).first;
      const absl::StatusOr<std::vector<HostEntry>>& entries = cached->second;
      if (entries.ok()) hosts_seen_ += static_cast<int64_t>(entries->size());
      if (!entries.ok()) {
        diag_.Error(r.At("hostfile"), r.Name("hostfile"), std::string(entries.status().message()));
      } else {
        for (const HostEntry& h : *entries) {
          g.hosts.push_back(h.name);
          g.host_slots.push_back(h.slots);
          g.host_lines.push_back(h.line);
        }
      }
    }
    if (auto v = r.Int("ranks_per_host", 1, 4096)) g.ranks_per_host = static_cast<int>(*v);
    if (auto v = r.Int("gpus_per_host", 1, 1024)) g.gpus_per_host = static_cast<int>(*v);
    if (auto v = r.IntList("gpus", 0, 1023)) g.gpus.assign(v->begin(), v->end());
    if (auto v = r.IntList("numa_nodes", 0, 1023)) g.numa_nodes.assign(v->begin(), v->end());
    if (auto v = r.Str("bind_to")) {
      if (KnownPolicy(*v, {"none", "hwthread", "core", "l1cache", "l2cache", "l3cache", "socket", "numa", "board"})) {
        g.bind_to = *v;
      } else {
        diag_.Error(r.At("bind_to"), r.Name("bind_to"),
                    absl::StrCat("wants core|socket|numa|none (or another mpirun --bind-to), got '", *v, "'"));
      }
    }
    if (auto v = r.Str("map_by")) {
      if (KnownPolicy(*v, {"slot", "hwthread", "core", "l1cache", "l2cache", "l3cache", "socket", "numa", "board",
                           "node", "seq", "dist", "ppr"})) {
        g.map_by = *v;
      } else {
        diag_.Error(r.At("map_by"), r.Name("map_by"),
                    absl::StrCat("wants slot|core|socket|numa|node|ppr:N:RESOURCE (an mpirun --map-by), got '", *v, "'"));
      }
    }
    if (auto v = r.Int("tensor_parallel", 1, 65536)) g.tensor_parallel = static_cast<int>(*v);
    if (auto v = r.Int("expert_groups", 1, 65536)) g.expert_groups = static_cast<int>(*v);
    if (auto v = r.Str("listen")) g.listen = *v;
    if (auto v = r.Str("address")) g.address = *v;
    if (auto v = r.Int("max_seqs", 1, 1 << 20)) g.max_seqs = *v;
    if (auto v = r.Int("cache_tokens", 0, kMaxInt)) g.cache_tokens = *v;
    if (auto v = r.Int("timeout_ms", 1, kMaxInt)) g.timeout_ms = *v;
    if (auto v = r.Number("gpu_memory_gib", 0.001)) g.gpu_memory_gib = *v;
    if (auto v = r.Env("env")) g.env = *v;
    if (auto v = r.StrList("mpirun_args")) g.mpirun_args = *v;
    if (auto v = r.StrList("worker_args")) g.worker_args = *v;
    if (auto v = r.Str("auth_token_file")) g.auth_token_file = Resolve(base_, *v);
    if (auto v = r.Str("tls_cert")) g.tls_cert = Resolve(base_, *v);
    if (auto v = r.Str("tls_key")) g.tls_key = Resolve(base_, *v);
    if (auto v = r.Int("coordinator_timeout_s", 0, kMaxInt)) g.coordinator_timeout_s = *v;
    if (auto v = r.Int("step_port", 0, 65535)) g.step_port = static_cast<int>(*v);
    if (auto v = r.Int("prefill_chunk", 1, 1 << 20)) g.prefill_chunk = *v;
  }

  void Coordinator(const YAML::Node& node, CoordinatorSpec& c) {
    MapReader r(node, "coordinator", diag_,
                {"listen", "metrics_port", "token_budget", "prefill_chunk", "idle_prefill_chunk", "max_queue",
                 "max_tokens_limit", "max_prompt_tokens", "max_concurrent_per_client", "auth_token_file", "tls_cert",
                 "tls_key", "tls_ca", "worker_token_file", "worker_tls_ca", "env"},
                &c.where);
    if (!r.valid()) return;
    if (auto v = r.Str("listen")) c.listen = *v;
    if (auto v = r.Int("metrics_port", 0, 65535)) c.metrics_port = *v;
    if (auto v = r.Int("token_budget", 1, kMaxInt)) c.token_budget = *v;
    if (auto v = r.Int("prefill_chunk", 1, kMaxInt)) c.prefill_chunk = *v;
    if (auto v = r.Int("idle_prefill_chunk", 1, kMaxInt)) c.idle_prefill_chunk = *v;
    if (auto v = r.Int("max_queue", 1, kMaxInt)) c.max_queue = *v;
    if (auto v = r.Int("max_tokens_limit", 0, 1ll << 32)) c.max_tokens_limit = *v;
    if (auto v = r.Int("max_prompt_tokens", 0, 1ll << 32)) c.max_prompt_tokens = *v;
    if (auto v = r.Int("max_concurrent_per_client", 0, kMaxInt)) c.max_concurrent_per_client = *v;
    for (auto [key, field] : {std::pair{"auth_token_file", &c.auth_token_file}, std::pair{"tls_cert", &c.tls_cert},
                              std::pair{"tls_key", &c.tls_key}, std::pair{"tls_ca", &c.tls_ca},
                              std::pair{"worker_token_file", &c.worker_token_file},
                              std::pair{"worker_tls_ca", &c.worker_tls_ca}}) {
      if (auto v = r.Str(key)) *field = Resolve(base_, *v);
    }
    if (c.tls_ca.empty()) c.tls_ca = c.tls_cert;
    if (auto v = r.Env("env")) c.env = *v;
  }

  void Logging(const YAML::Node& node, LoggingSpec& l) {
    MapReader r(node, "logging", diag_, {"dir", "level"}, &l.where);
    if (!r.valid()) return;
    if (auto v = r.Str("dir")) l.dir = Resolve(base_, *v);
    if (auto v = r.OneOf("level", {"trace", "debug", "info", "warn", "error", "critical", "off"})) l.level = *v;
  }

  void Profiling(const YAML::Node& node, ProfilingSpec& p) {
    MapReader r(node, "profiling", diag_, {"tool", "path", "ranks", "groups", "args"}, &p.where);
    if (!r.valid()) return;
    r.Require("tool");
    r.Require("ranks");
    if (auto v = r.OneOf("tool", {"ncu", "nsys", "compute-sanitizer"})) {
      p.tool = *v == "ncu" ? ProfTool::kNcu : *v == "nsys" ? ProfTool::kNsys : ProfTool::kComputeSanitizer;
    }
    if (auto v = r.Str("path")) p.path = *v;
    if (r.Has("ranks") && r.Get("ranks").IsScalar()) {
      if (r.Get("ranks").Scalar() == "all") {
        p.all_ranks = true;
      } else {
        diag_.Error(r.At("ranks"), "profiling.ranks", absl::StrCat("wants \"all\" or a list of ranks, got '",
                                                                   r.Get("ranks").Scalar(), "'"));
      }
    } else if (auto v = r.IntList("ranks", 0, 65535)) {
      p.ranks.assign(v->begin(), v->end());
    }
    if (auto v = r.StrList("groups")) p.groups = *v;
    if (auto v = r.StrList("args")) p.args = *v;
    p.enabled = true;
  }

  Diagnostics& diag_;
  std::string base_;
  int64_t hosts_seen_ = 0;  // hosts of the groups read so far
  std::map<std::string, absl::StatusOr<std::vector<HostEntry>>> hostfiles_;
};

}  // namespace

absl::StatusOr<LaunchConfig> ParseLaunchConfig(std::string_view text, const std::string& file,
                                               const std::string& base_dir, const std::vector<Override>& overrides) {
  Diagnostics diag(file);
  YAML::Node root;
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser events(in);
    ExpansionCounter nodes;
    events.HandleNextDocument(nodes);
    if (nodes.total() > kMaxNodes) {
      diag.Error({1, 1}, "", absl::StrCat("the config stands for more than ", kMaxNodes,
                                          " YAML nodes once its aliases (*name) are expanded"));
      return diag.ToStatus();
    }
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    const Loc at = e.mark.is_null() ? Loc{1, 1} : Loc{e.mark.line + 1, e.mark.column + 1};
    diag.Error(at, "", absl::StrCat("not valid YAML: ", e.msg));
    return diag.ToStatus();
  }
  for (const Override& o : overrides) {
    if (absl::Status s = ApplyOverride(root, o); !s.ok()) return s;
  }
  LaunchConfig c;
  c.file = file;
  c.base_dir = base_dir;
  Parser(diag, base_dir).Root(root, c);
  if (!diag.ok()) return diag.ToStatus();
  return c;
}

absl::StatusOr<LaunchConfig> ReadLaunchConfig(const std::string& path, const std::vector<Override>& overrides) {
  auto text = ReadSmallFile(path, 4 << 20, "the launch config");
  if (!text.ok()) return text.status();
  const std::string base = fs::absolute(fs::path(path)).parent_path().lexically_normal().string();
  return ParseLaunchConfig(*text, path, base, overrides);
}

}  // namespace k3::launch
