#include "launch/config_check.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "launch/address.h"
#include "launch/diagnostics.h"
#include "launch/placement.h"

namespace k3::launch {
namespace {

// Ranks of one launch (all groups): the largest tensor-parallel size the parser takes. The
// checks and the app files go rank by rank, so a few lines of YAML must not ask for millions.
constexpr int64_t kMaxRanks = 65536;

bool HasSpace(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; });
}

bool ValidName(std::string_view s, bool env) {
  if (s.empty() || (env && std::isdigit(static_cast<unsigned char>(s[0])))) return false;
  return std::all_of(s.begin(), s.end(), [env](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || (!env && (ch == '-' || ch == '.'));
  });
}

// Which machine an address lives on, for port clashes: loopback and wildcard hosts are the
// machine the server runs on.
std::string MachineOf(const std::string& host, const std::string& runs_on) {
  const std::string& machine = IsWildcardHost(host) || IsLocalHost(host) ? runs_on : host;
  return IsLocalHost(machine) ? "(this machine)" : machine;
}

class Checker {
 public:
  Checker(const LaunchConfig& c) : c_(c), diag_(c.file) {}

  absl::Status Run() {
    if (HasSpace(c_.model.path)) {
      diag_.Error(c_.model.where.At(c_.model.synthetic ? "synthetic.output" : "path"), "model",
                  "the model path must not contain whitespace (mpirun app files split at it)");
    }
    if (HasSpace(c_.logging.dir)) {
      diag_.Error(c_.logging.where.At("dir"), "logging.dir", "must not contain whitespace (mpirun app files split at it)");
    }
    int64_t total = 0;
    for (const WorkerGroupSpec& g : c_.groups) total += static_cast<int64_t>(g.hosts.size()) * g.ranks_per_host;
    if (total > kMaxRanks) {  // checked first: the checks below go rank by rank
      diag_.Error(c_.where.At("worker_groups"), "worker_groups",
                  absl::StrCat(c_.groups.size(), " group(s) with ", total, " ranks in all (hosts x ranks_per_host); at most ",
                               kMaxRanks));
      return diag_.ToStatus();
    }
    std::map<std::string, size_t> names;
    for (size_t i = 0; i < c_.groups.size(); ++i) {
      const WorkerGroupSpec& g = c_.groups[i];
      const std::string at = absl::StrCat("worker_groups[", i, "]");
      if (!g.name.empty() && !names.emplace(g.name, i).second) {
        diag_.Error(g.where.At("name"), at + ".name",
                    absl::StrCat("'", g.name, "' is already the name of worker_groups[", names[g.name], "]"));
      }
      Group(g, at);
    }
    Coordinator();
    Ports();
    Profiling();
    return diag_.ToStatus();
  }

 private:
  void Group(const WorkerGroupSpec& g, const std::string& at) {
    auto key = [&](const std::string& k) { return at + "." + k; };
    if (!ValidName(g.name, false)) {
      diag_.Error(g.where.At("name"), key("name"), "wants letters, digits, '-', '_' or '.' (it names log files)");
    }
    std::map<std::string, size_t> first_of;  // host -> its first index
    for (size_t h = 0; h < g.hosts.size(); ++h) {
      // A host goes into mpirun's --host list and each app-file line: a YAML scalar folded over
      // lines (fuzz finding) or with spaces or ':' would split them.
      if (!ValidName(g.hosts[h], false)) {
        diag_.Error(g.where.At(absl::StrCat("hosts[", h, "]")), absl::StrCat(key("hosts"), "[", h, "]"),
                    absl::StrCat("host '", g.hosts[h], "' wants letters, digits, '-', '_' or '.'"));
        continue;
      }
      // Once per repeated entry (comparing every pair made errors quadratic in the list).
      if (auto [it, fresh] = first_of.emplace(g.hosts[h], h); !fresh) {
        diag_.Error(g.where.At(absl::StrCat("hosts[", h, "]")), absl::StrCat(key("hosts"), "[", h, "]"),
                    absl::StrCat("host ", g.hosts[h], " is listed twice (also hosts[", it->second,
                                 "]): give ranks_per_host instead"));
      }
      if (g.host_slots[h] > 0 && g.host_slots[h] < g.ranks_per_host) {
        diag_.Error(g.where.At("ranks_per_host"), key("ranks_per_host"),
                    absl::StrCat(g.ranks_per_host, " ranks per host, but ", g.hostfile, ":", g.host_lines[h],
                                 " gives host ", g.hosts[h], " slots=", g.host_slots[h]));
      }
    }
    const int ranks = g.ranks();
    if (ranks < 1) return;  // hosts missing: reported already
    if (g.tensor_parallel > 0 && g.tensor_parallel != ranks) {
      diag_.Error(g.where.At("tensor_parallel"), key("tensor_parallel"),
                  absl::StrCat("is ", g.tensor_parallel, " but the group has ", ranks, " ranks (", g.hosts.size(),
                               " host(s) x ranks_per_host ", g.ranks_per_host,
                               "): attention is tensor parallel over all ranks of a group"));
    }
    if (g.expert_groups > 0 && (g.expert_groups > ranks || ranks % g.expert_groups != 0)) {
      diag_.Error(g.where.At("expert_groups"), key("expert_groups"),
                  absl::StrCat(g.expert_groups, " does not divide the group's ", ranks, " ranks"));
    }
    if (g.backend == Backend::kCuda) {
      Gpus(g, at);
    } else {
      if (c_.model.synthetic && c_.model.synthetic->in_memory) {
        diag_.Error(c_.model.where.At("synthetic.in_memory"), "model.synthetic.in_memory",
                    absl::StrCat("fills each rank's weights on its GPU: worker group '", g.name,
                                 "' is backend: cpu (give the model a file: drop in_memory)"));
      }
      for (const char* k : {"gpus", "gpus_per_host", "gpu_memory_gib", "prefill_chunk"}) {
        if (g.where.keys.contains(k)) diag_.Error(g.where.At(k), key(k), "is for backend: cuda (this group is cpu)");
      }
    }
    const size_t numa = g.numa_nodes.size();
    if (numa > 0 && numa != static_cast<size_t>(g.ranks_per_host) && numa != static_cast<size_t>(ranks)) {
      diag_.Error(g.where.At("numa_nodes"), key("numa_nodes"),
                  absl::StrCat("has ", numa, " entries: wants one per local rank (", g.ranks_per_host,
                               ") or one per rank (", ranks, ")"));
    }
    if (numa > 0 && !g.bind_to.empty() && g.bind_to != "none") {
      diag_.Error(g.where.At("numa_nodes"), key("numa_nodes"),
                  absl::StrCat("binds each rank with numactl, so bind_to must be none (it is ", g.bind_to, ")"));
    }
    if (absl::StartsWith(g.map_by, "ppr")) {
      // Open MPI applies ppr to each app-file line, and there is one line per rank.
      diag_.Error(g.where.At("map_by"), key("map_by"),
                  "ppr:N:RESOURCE counts ranks per app-file line, and the launcher writes one line per rank: "
                  "place ranks with numa_nodes (and bind_to: none) instead");
    }
    for (const char* k : {"listen", "address"}) {
      const std::string& v = std::string(k) == "listen" ? g.listen : g.address;
      if (v.empty()) continue;
      if (auto hp = ParseHostPort(v); !hp.ok()) diag_.Error(g.where.At(k), key(k), std::string(hp.status().message()));
    }
    Env(g.env, g.where, key("env"));
    for (const auto& [k, v] : {std::pair<const char*, const std::string*>{"auth_token_file", &g.auth_token_file},
                               {"tls_cert", &g.tls_cert}, {"tls_key", &g.tls_key}}) {
      if (HasSpace(*v)) diag_.Error(g.where.At(k), key(k), "must not contain whitespace (mpirun app files split at it)");
    }
    if (g.tls_cert.empty() != g.tls_key.empty()) {
      diag_.Error(g.where.At(g.tls_cert.empty() ? "tls_key" : "tls_cert"), key("tls_cert"), "TLS wants both tls_cert and tls_key");
    }
    if (g.step_port > 0 && !g.tls_cert.empty()) {
      diag_.Error(g.where.At("step_port"), key("step_port"), "the step channel is plaintext: not with tls_cert");
    }
    // The coordinator must be able to talk to the leader it starts.
    const CoordinatorSpec& co = c_.coordinator;
    if (!g.auth_token_file.empty() && co.worker_token_file.empty()) {
      diag_.Error(g.where.At("auth_token_file"), key("auth_token_file"),
                  "the leader wants a token but coordinator.worker_token_file is not set: the coordinator would be refused");
    }
    if (!g.tls_cert.empty() && co.worker_tls_ca.empty()) {
      diag_.Error(g.where.At("tls_cert"), key("tls_cert"),
                  "the leader serves TLS but coordinator.worker_tls_ca is not set: the coordinator would dial plaintext");
    }
    if (g.tls_cert.empty() && !co.worker_tls_ca.empty()) {
      diag_.Error(co.where.At("worker_tls_ca"), "coordinator.worker_tls_ca",
                  absl::StrCat("the coordinator dials every leader with TLS, but group ", g.name, " has no tls_cert"));
    }
    for (size_t j = 0; j < g.worker_args.size(); ++j) {
      const std::string& a = g.worker_args[j];
      const std::string k = absl::StrCat("worker_args[", j, "]");
      if (HasSpace(a)) diag_.Error(g.where.At(k), key(k), "must not contain whitespace (mpirun app files split at it)");
      for (const char* own : {"--model", "--serve", "--expert-groups", "--max-seqs", "--cache-tokens", "--timeout-ms",
                              "--auth-token-file", "--tls-cert", "--tls-key", "--coordinator-timeout"}) {
        if (a == own || absl::StartsWith(a, absl::StrCat(own, "="))) {
          diag_.Error(g.where.At(k), key(k), absl::StrCat(own, " is set by the launcher from the group's keys"));
        }
      }
    }
    for (size_t j = 0; j < g.mpirun_args.size(); ++j) {
      const std::string& a = g.mpirun_args[j];
      for (const char* own : {"--app", "-np", "-n", "--np", "--host", "-H", "--hostfile", "--bind-to", "--map-by"}) {
        if (a == own) {
          const std::string k = absl::StrCat("mpirun_args[", j, "]");
          diag_.Error(g.where.At(k), key(k), absl::StrCat(own, " is set by the launcher from the group's keys"));
        }
      }
    }
  }

  // GPUs of a cuda group: list shape, range, and one rank per GPU of a host over all groups.
  void Gpus(const WorkerGroupSpec& g, const std::string& at) {
    const size_t n = g.gpus.size();
    if (n > 0 && n != static_cast<size_t>(g.ranks_per_host) && n != static_cast<size_t>(g.ranks())) {
      diag_.Error(g.where.At("gpus"), at + ".gpus",
                  absl::StrCat("has ", n, " entries: wants one per local rank (", g.ranks_per_host,
                               ") or one per rank (", g.ranks(), ")"));
      return;
    }
    if (g.gpus_per_host > 0 && g.ranks_per_host > g.gpus_per_host) {
      diag_.Error(g.where.At("ranks_per_host"), at + ".ranks_per_host",
                  absl::StrCat(g.ranks_per_host, " ranks per host but gpus_per_host is ", g.gpus_per_host,
                               ": more ranks than GPUs on a host"));
    }
    std::set<std::string> reported;
    for (int r = 0; r < g.ranks(); ++r) {
      const int gpu = GpuOf(g, r);
      const std::string gk = GpuKey(g, r);
      if (g.gpus_per_host > 0 && gpu >= g.gpus_per_host) {
        if (reported.insert(gk).second) {
          diag_.Error(g.where.At(gk), at + "." + gk,
                      absl::StrCat("GPU ", gpu, " is out of range: gpus_per_host is ", g.gpus_per_host,
                                   " (GPUs 0..", g.gpus_per_host - 1, ")"));
        }
        continue;
      }
      const auto slot = std::make_pair(HostOf(g, r), gpu);
      auto [it, fresh] = gpu_owner_.emplace(slot, std::make_pair(g.name, r));
      if (!fresh) {
        diag_.Error(g.where.At(gk), at + "." + gk,
                    absl::StrCat("two ranks on one GPU: rank ", r, " of group ", g.name, " and rank ",
                                 it->second.second, " of group ", it->second.first, " are both on GPU ", gpu,
                                 " of host ", slot.first));
      }
    }
  }

  void Env(const EnvList& env, const KeyLocs& where, const std::string& at) {
    for (const auto& [name, value] : env) {
      const Loc loc = where.At("env." + name);
      if (!ValidName(name, true)) diag_.Error(loc, at + "." + name, "is not a valid environment variable name");
      if (name == "CUDA_VISIBLE_DEVICES") {
        diag_.Error(loc, at + "." + name, "is set per rank by the launcher from gpus");
      }
      if (HasSpace(value)) diag_.Error(loc, at + "." + name, "must not contain whitespace (mpirun app files split at it)");
    }
  }

  void Coordinator() {
    const CoordinatorSpec& co = c_.coordinator;
    if (auto hp = ParseHostPort(co.listen); !hp.ok()) {
      diag_.Error(co.where.At("listen"), "coordinator.listen", std::string(hp.status().message()));
    }
    if (co.tls_cert.empty() != co.tls_key.empty()) {
      diag_.Error(co.where.At(co.tls_cert.empty() ? "tls_key" : "tls_cert"), "coordinator.tls_cert",
                  "TLS wants both tls_cert and tls_key");
    }
    if (co.tls_cert.empty() && co.where.keys.contains("tls_ca")) {
      diag_.Error(co.where.At("tls_ca"), "coordinator.tls_ca", "is for a coordinator with tls_cert");
    }
    Env(co.env, co.where, "coordinator.env");
  }

  // Two servers on one port of one machine: the coordinator (and its metrics) run here, each
  // leader on the first host of its group.
  void Ports() {
    std::map<std::pair<std::string, int>, std::string> used;
    auto claim = [&](const std::string& machine, int port, Loc loc, const std::string& key) {
      auto [it, fresh] = used.emplace(std::make_pair(machine, port), key);
      if (!fresh) diag_.Error(loc, key, absl::StrCat("port ", port, " of ", machine, " is already taken by ", it->second));
    };
    const CoordinatorSpec& co = c_.coordinator;
    if (auto hp = ParseHostPort(co.listen); hp.ok()) {
      claim(MachineOf(hp->host, "localhost"), hp->port, co.where.At("listen"), "coordinator.listen");
    }
    if (co.metrics_port > 0) {
      claim("(this machine)", static_cast<int>(co.metrics_port), co.where.At("metrics_port"), "coordinator.metrics_port");
    }
    for (size_t i = 0; i < c_.groups.size(); ++i) {
      const WorkerGroupSpec& g = c_.groups[i];
      auto hp = ParseHostPort(g.listen);
      if (!hp.ok() || g.hosts.empty()) continue;
      claim(MachineOf(hp->host, g.hosts[0]), hp->port, g.where.At("listen"), absl::StrCat("worker_groups[", i, "].listen"));
    }
  }

  void Profiling() {
    const ProfilingSpec& p = c_.profiling;
    if (!p.enabled) return;
    std::vector<const WorkerGroupSpec*> profiled;
    for (size_t j = 0; j < p.groups.size(); ++j) {
      auto it = std::find_if(c_.groups.begin(), c_.groups.end(), [&](const WorkerGroupSpec& g) { return g.name == p.groups[j]; });
      if (it == c_.groups.end()) {
        diag_.Error(p.where.At(absl::StrCat("groups[", j, "]")), absl::StrCat("profiling.groups[", j, "]"),
                    absl::StrCat("no worker group is named '", p.groups[j], "'"));
      } else {
        profiled.push_back(&*it);
      }
    }
    if (p.groups.empty()) {
      for (const WorkerGroupSpec& g : c_.groups) profiled.push_back(&g);
    }
    for (size_t j = 0; j < p.ranks.size(); ++j) {
      const std::string k = absl::StrCat("ranks[", j, "]");
      if (std::find(p.ranks.begin(), p.ranks.begin() + j, p.ranks[j]) != p.ranks.begin() + j) {
        diag_.Error(p.where.At(k), "profiling." + k, absl::StrCat("rank ", p.ranks[j], " is listed twice"));
      }
      for (const WorkerGroupSpec* g : profiled) {
        if (g->ranks() > 0 && p.ranks[j] >= g->ranks()) {
          diag_.Error(p.where.At(k), "profiling." + k,
                      absl::StrCat("rank ", p.ranks[j], " is not in group ", g->name, " (ranks 0..", g->ranks() - 1, ")"));
        }
      }
    }
    if (p.tool != ProfTool::kNsys) {
      for (const WorkerGroupSpec* g : profiled) {
        if (g->backend == Backend::kCpu) {
          diag_.Error(p.where.At("tool"), "profiling.tool",
                      absl::StrCat(ToolName(p.tool), " looks at CUDA kernels, but group ", g->name,
                                   " runs on cpu (use nsys, or profiling.groups)"));
        }
      }
    }
    if (HasSpace(p.path)) diag_.Error(p.where.At("path"), "profiling.path", "must not contain whitespace");
    for (size_t j = 0; j < p.args.size(); ++j) {
      const std::string k = absl::StrCat("args[", j, "]");
      if (HasSpace(p.args[j])) {
        diag_.Error(p.where.At(k), "profiling." + k, "must not contain whitespace (mpirun app files split at it)");
      }
      if (p.tool == ProfTool::kNcu && absl::StartsWith(p.args[j], "--clock-control")) {
        diag_.Error(p.where.At(k), "profiling." + k, "ncu always runs with --clock-control none (clocks as served)");
      }
    }
  }

  const LaunchConfig& c_;
  Diagnostics diag_;
  std::map<std::pair<std::string, int>, std::pair<std::string, int>> gpu_owner_;  // (host, gpu) -> (group, rank)
};

}  // namespace

absl::Status CheckLaunchConfig(const LaunchConfig& config) { return Checker(config).Run(); }

}  // namespace k3::launch
