#include "launch/command_plan.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "launch/address.h"
#include "launch/placement.h"

namespace k3::launch {
namespace {

std::string Bin(const PlanOptions& o, const std::string& program) {
  return (std::filesystem::path(o.bin_dir) / program).lexically_normal().string();
}

// The profiler in front of one rank's program, writing <log dir>/<group>-rank<r>.<ext>.
std::vector<std::string> ToolPrefix(const ProfilingSpec& p, const std::string& log_dir, const std::string& group, int rank) {
  const std::string out = (std::filesystem::path(log_dir) / absl::StrCat(group, "-rank", rank)).string();
  const std::string exe = p.path.empty() ? ToolName(p.tool) : p.path;
  std::vector<std::string> v;
  switch (p.tool) {
    case ProfTool::kNcu:  // clocks as served, not locked to base: we measure the serving system
      v = {exe, "--clock-control", "none", "--export", out + ".ncu-rep", "--force-overwrite"};
      break;
    case ProfTool::kNsys:
      v = {exe, "profile", "--output", out + ".nsys-rep", "--force-overwrite", "true"};
      break;
    case ProfTool::kComputeSanitizer:
      v = {exe, "--log-file", out + ".sanitizer.log"};
      break;
  }
  v.insert(v.end(), p.args.begin(), p.args.end());
  return v;
}

// Where a rank's weights come from: the model file, or (model.synthetic.in_memory) the preset filled
// on its GPU from the seed.
std::vector<std::string> WeightArgs(const ModelSpec& m) {
  if (m.synthetic && m.synthetic->in_memory) {
    const SyntheticModel& s = *m.synthetic;
    return {"--synth", s.preset, "--synth-seed", absl::StrCat(s.seed), "--synth-quant", s.quant};
  }
  return {"--model", m.path};
}

std::vector<std::string> WorkerArgs(const LaunchConfig& c, const WorkerGroupSpec& g, const PlanOptions& o) {
  std::vector<std::string> v = {Bin(o, "k3-worker")};
  const std::vector<std::string> weights = WeightArgs(c.model);
  v.insert(v.end(), weights.begin(), weights.end());
  v.insert(v.end(), {"--serve", g.listen,
                     "--expert-groups", absl::StrCat(g.expert_groups_or_default()),
                     "--max-seqs", absl::StrCat(g.max_seqs),
                     "--cache-tokens", absl::StrCat(g.cache_tokens),
                     "--timeout-ms", absl::StrCat(g.timeout_ms)});
  if (!g.auth_token_file.empty()) v.insert(v.end(), {"--auth-token-file", g.auth_token_file});
  if (!g.tls_cert.empty()) v.insert(v.end(), {"--tls-cert", g.tls_cert, "--tls-key", g.tls_key});
  if (g.coordinator_timeout_s > 0) v.insert(v.end(), {"--coordinator-timeout", absl::StrCat(g.coordinator_timeout_s)});
  if (g.step_port > 0) v.insert(v.end(), {"--step-port", absl::StrCat(g.step_port)});
  if (g.prefill_chunk > 0) v.insert(v.end(), {"--prefill-chunk", absl::StrCat(g.prefill_chunk)});
  v.insert(v.end(), g.worker_args.begin(), g.worker_args.end());
  return v;
}

// One line per rank; mpirun numbers the ranks in line order.
std::string AppText(const LaunchConfig& c, const WorkerGroupSpec& g, const PlanOptions& o) {
  std::string text = absl::StrCat("# k3-launch app file: worker group ", g.name, ", ", g.ranks(), " ranks (", BackendName(g.backend),
                                  "), generated from ", c.file, "\n# line r = MPI rank r; rank 0 leads\n");
  const std::vector<std::string> worker = WorkerArgs(c, g, o);
  for (int r = 0; r < g.ranks(); ++r) {
    std::vector<std::string> line = {"-np", "1", "-host", absl::StrCat(HostOf(g, r), ":", g.ranks_per_host)};
    for (const auto& [k, v] : g.env) line.insert(line.end(), {"-x", absl::StrCat(k, "=", v)});
    line.insert(line.end(), {"-x", absl::StrCat("SPDLOG_LEVEL=", c.logging.level)});
    if (g.backend == Backend::kCuda) line.insert(line.end(), {"env", absl::StrCat("CUDA_VISIBLE_DEVICES=", GpuOf(g, r))});
    if (const int numa = NumaOf(g, r); numa >= 0) {
      line.insert(line.end(), {"numactl", absl::StrCat("--cpunodebind=", numa), absl::StrCat("--membind=", numa)});
    }
    if (c.profiling.Profiles(g.name, r)) {
      const auto prefix = ToolPrefix(c.profiling, c.logging.dir, g.name, r);
      line.insert(line.end(), prefix.begin(), prefix.end());
    }
    line.insert(line.end(), worker.begin(), worker.end());
    absl::StrAppend(&text, absl::StrJoin(line, " "), "\n");
  }
  return text;
}

GroupLaunch Group(const LaunchConfig& c, const WorkerGroupSpec& g, const PlanOptions& o) {
  GroupLaunch gl;
  gl.ranks = g.ranks();
  gl.app_file = (std::filesystem::path(c.logging.dir) / (g.name + ".app")).string();
  gl.app_text = AppText(c, g, o);
  gl.dial = DialAddress(g);
  Command& m = gl.mpirun;
  m.name = g.name;
  m.argv = {o.mpirun};
  if (!g.hostfile.empty()) {
    m.argv.insert(m.argv.end(), {"--hostfile", g.hostfile});
  } else {
    std::vector<std::string> hosts;
    for (const std::string& h : g.hosts) hosts.push_back(absl::StrCat(h, ":", g.ranks_per_host));
    m.argv.insert(m.argv.end(), {"--host", absl::StrJoin(hosts, ",")});
  }
  if (!g.map_by.empty()) m.argv.insert(m.argv.end(), {"--map-by", g.map_by});
  if (!g.bind_to.empty()) m.argv.insert(m.argv.end(), {"--bind-to", g.bind_to});
  m.argv.insert(m.argv.end(), g.mpirun_args.begin(), g.mpirun_args.end());
  m.argv.insert(m.argv.end(), {"--app", gl.app_file});
  m.log = (std::filesystem::path(c.logging.dir) / (g.name + ".log")).string();
  m.ready = "LEADER READY";
  return gl;
}

}  // namespace

absl::StatusOr<LaunchPlan> BuildLaunchPlan(const LaunchConfig& c, const PlanOptions& o) {
  if (o.bin_dir.empty() || std::any_of(o.bin_dir.begin(), o.bin_dir.end(), [](char ch) { return ch == ' ' || ch == '\t'; })) {
    return absl::InvalidArgumentError(absl::StrCat("the bin dir '", o.bin_dir,
                                                   "' must be given and free of whitespace (mpirun app files split at it)"));
  }
  LaunchPlan plan;
  plan.config_file = c.file;
  plan.log_dir = c.logging.dir;
  plan.model = c.model.path;
  const std::filesystem::path logs(c.logging.dir);
  if (o.generate_model && c.model.synthetic) {
    const SyntheticModel& s = *c.model.synthetic;
    Command synth;
    synth.name = "synth";
    synth.argv = {Bin(o, "k3-synth"), "--preset", s.preset, "--seed", absl::StrCat(s.seed), "--quant", s.quant,
                  "--shards", absl::StrCat(s.shards), "--quiet", "-o", s.output};
    // In memory: the ranks fill their weights on their GPUs; the coordinator reads the metadata.
    if (s.in_memory) synth.argv.insert(synth.argv.end() - 2, "--header-only");
    synth.log = (logs / "synth.log").string();
    plan.synth = synth;
  }
  std::vector<std::string> dials;
  for (const WorkerGroupSpec& g : c.groups) {
    plan.groups.push_back(Group(c, g, o));
    dials.push_back(plan.groups.back().dial);
  }
  const CoordinatorSpec& co = c.coordinator;
  Command& cmd = plan.coordinator;
  cmd.name = "coordinator";
  cmd.argv = {Bin(o, "k3-coordinator"), "--model", c.model.path, "--workers", absl::StrJoin(dials, ","),
              "--listen", co.listen};
  if (co.metrics_port > 0) cmd.argv.insert(cmd.argv.end(), {"--metrics-port", absl::StrCat(co.metrics_port)});
  cmd.argv.insert(cmd.argv.end(), {"--token-budget", absl::StrCat(co.token_budget), "--prefill-chunk",
                                   absl::StrCat(co.prefill_chunk), "--idle-prefill-chunk",
                                   absl::StrCat(co.idle_prefill_chunk), "--max-queue", absl::StrCat(co.max_queue)});
  if (co.max_tokens_limit > 0) cmd.argv.insert(cmd.argv.end(), {"--max-tokens-limit", absl::StrCat(co.max_tokens_limit)});
  if (co.max_prompt_tokens > 0) cmd.argv.insert(cmd.argv.end(), {"--max-prompt-tokens", absl::StrCat(co.max_prompt_tokens)});
  if (co.max_concurrent_per_client > 0) {
    cmd.argv.insert(cmd.argv.end(), {"--max-concurrent-per-client", absl::StrCat(co.max_concurrent_per_client)});
  }
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--auth-token-file", &co.auth_token_file},
                                    {"--tls-cert", &co.tls_cert}, {"--tls-key", &co.tls_key},
                                    {"--worker-token-file", &co.worker_token_file},
                                    {"--worker-tls-ca", &co.worker_tls_ca}}) {
    if (!value->empty()) cmd.argv.insert(cmd.argv.end(), {flag, *value});
  }
  plan.client_token_file = co.auth_token_file;
  plan.client_tls_ca = co.tls_cert.empty() ? "" : co.tls_ca;
  cmd.env = co.env;
  cmd.env.emplace_back("SPDLOG_LEVEL", c.logging.level);
  cmd.log = (logs / "coordinator.log").string();
  cmd.ready = "COORDINATOR READY";
  // Clients on this machine reach a wildcard listener through loopback.
  auto hp = ParseHostPort(co.listen);
  plan.coordinator_dial = hp.ok() && IsWildcardHost(hp->host) ? absl::StrCat("127.0.0.1:", hp->port) : co.listen;
  return plan;
}

Command HealthCommand(const LaunchPlan& plan, const std::string& bin_dir) {
  Command c;
  c.name = "health";
  c.argv = {(std::filesystem::path(bin_dir) / "k3").string(), "health", "--server", plan.coordinator_dial, "--timeout-s", "5"};
  if (!plan.client_tls_ca.empty()) c.argv.insert(c.argv.end(), {"--tls-ca", plan.client_tls_ca});
  c.log = (std::filesystem::path(plan.log_dir) / "smoke-health.log").string();
  return c;
}

Command GenerateCommand(const LaunchPlan& plan, const std::string& bin_dir, const std::string& ids, int max_tokens) {
  Command c;
  c.name = "smoke";
  c.argv = {(std::filesystem::path(bin_dir) / "k3").string(), "generate", "--server", plan.coordinator_dial,
            "--ids", ids, "--max-tokens", absl::StrCat(max_tokens), "--ignore-eos", "--timeout-s", "120"};
  if (!plan.client_tls_ca.empty()) c.argv.insert(c.argv.end(), {"--tls-ca", plan.client_tls_ca});
  if (!plan.client_token_file.empty()) c.argv.insert(c.argv.end(), {"--token-file", plan.client_token_file});
  c.log = (std::filesystem::path(plan.log_dir) / "smoke.log").string();
  return c;
}

}  // namespace k3::launch
