// Parsing a launch config: every key of the schema lands in LaunchConfig, paths resolve against
// the config's directory, --set overrides apply, and each kind of error (YAML syntax, unknown
// and repeated keys, wrong types, ranges, enums, required keys) names its line and key.
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "launch/hostfile.h"
#include "launch/launch_args.h"
#include "tests/launch/test_util.h"

namespace k3::launch {
namespace {

using testing::HasError;
using testing::kValid;
using testing::Parse;

TEST(LaunchConfigParse, EveryKey) {
  auto c = Parse(R"(model:
  synthetic: {preset: tiny, seed: 9, output: models/tiny.gguf, quant: Q8_0}
worker_groups:
  - name: a
    backend: cuda
    hosts: [n1, n2]
    ranks_per_host: 2
    gpus_per_host: 4
    gpus: [2, 3]
    numa_nodes: [0, 1]
    bind_to: none
    map_by: slot
    tensor_parallel: 4
    expert_groups: 2
    listen: 0.0.0.0:7000
    address: n1.example:7000
    max_seqs: 3
    cache_tokens: 3000
    timeout_ms: 5000
    gpu_memory_gib: 80
    env: {A: "1", B: x}
    mpirun_args: [--mca, btl, self]
    worker_args: [--trace-dir, /tmp/t]
coordinator:
  listen: 0.0.0.0:9000
  metrics_port: 9100
  token_budget: 64
  prefill_chunk: 32
  max_queue: 5
  max_tokens_limit: 100
  max_prompt_tokens: 200
  env: {C: "3"}
logging: {dir: logs, level: debug}
profiling: {tool: nsys, ranks: [1], groups: [a], args: [--sample=none], path: /opt/nsys}
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.path, "/cfg/models/tiny.gguf");
  ASSERT_TRUE(c->model.synthetic);
  EXPECT_EQ(c->model.synthetic->preset, "tiny");
  EXPECT_EQ(c->model.synthetic->seed, 9);
  EXPECT_EQ(c->model.synthetic->quant, "Q8_0");
  EXPECT_EQ(c->model.synthetic->shards, 1);
  ASSERT_EQ(c->groups.size(), 1u);
  const WorkerGroupSpec& g = c->groups[0];
  EXPECT_EQ(g.name, "a");
  EXPECT_EQ(g.backend, Backend::kCuda);
  EXPECT_EQ(g.hosts, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(g.ranks(), 4);
  EXPECT_EQ(g.gpus_per_host, 4);
  EXPECT_EQ(g.gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(g.numa_nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.bind_to, "none");
  EXPECT_EQ(g.map_by, "slot");
  EXPECT_EQ(g.tensor_parallel, 4);
  EXPECT_EQ(g.expert_groups, 2);
  EXPECT_EQ(g.listen, "0.0.0.0:7000");
  EXPECT_EQ(g.address, "n1.example:7000");
  EXPECT_EQ(g.max_seqs, 3);
  EXPECT_EQ(g.cache_tokens, 3000);
  EXPECT_EQ(g.timeout_ms, 5000);
  EXPECT_DOUBLE_EQ(g.gpu_memory_gib, 80);
  EXPECT_EQ(g.env, (EnvList{{"A", "1"}, {"B", "x"}}));
  EXPECT_EQ(g.mpirun_args, (std::vector<std::string>{"--mca", "btl", "self"}));
  EXPECT_EQ(g.worker_args, (std::vector<std::string>{"--trace-dir", "/tmp/t"}));
  EXPECT_EQ(c->coordinator.listen, "0.0.0.0:9000");
  EXPECT_EQ(c->coordinator.metrics_port, 9100);
  EXPECT_EQ(c->coordinator.token_budget, 64);
  EXPECT_EQ(c->coordinator.prefill_chunk, 32);
  EXPECT_EQ(c->coordinator.max_queue, 5);
  EXPECT_EQ(c->coordinator.max_tokens_limit, 100);
  EXPECT_EQ(c->coordinator.max_prompt_tokens, 200);
  EXPECT_EQ(c->coordinator.env, (EnvList{{"C", "3"}}));
  EXPECT_EQ(c->logging.dir, "/cfg/logs");
  EXPECT_EQ(c->logging.level, "debug");
  EXPECT_TRUE(c->profiling.enabled);
  EXPECT_EQ(c->profiling.tool, ProfTool::kNsys);
  EXPECT_EQ(c->profiling.path, "/opt/nsys");
  EXPECT_TRUE(c->profiling.Profiles("a", 1));
  EXPECT_FALSE(c->profiling.Profiles("a", 0));
  EXPECT_FALSE(c->profiling.Profiles("b", 1));
  EXPECT_TRUE(CheckLaunchConfig(*c).ok()) << CheckLaunchConfig(*c);
}

TEST(LaunchConfigParse, DefaultsAndPlaces) {
  auto c = Parse(kValid);
  ASSERT_TRUE(c.ok()) << c.status();
  const WorkerGroupSpec& g = c->groups[0];
  EXPECT_EQ(g.max_seqs, 8);
  EXPECT_EQ(g.cache_tokens, 0);
  EXPECT_EQ(g.timeout_ms, 60000);
  EXPECT_EQ(g.expert_groups_or_default(), 2);
  EXPECT_TRUE(g.bind_to.empty());
  EXPECT_EQ(c->coordinator.token_budget, 512);
  EXPECT_EQ(c->logging.dir, "/tmp/k3-launch-t");
  EXPECT_EQ(c->logging.level, "info");
  EXPECT_FALSE(c->profiling.enabled);
  EXPECT_EQ(g.where.self.line, 4);
  EXPECT_EQ(g.where.At("gpus").line, 9);
  EXPECT_EQ(g.where.At("gpus[1]").line, 9);
  EXPECT_EQ(g.where.At("gpus[1]").column, 15);
  EXPECT_EQ(g.where.At("listen").line, 10);
  EXPECT_EQ(c->model.where.At("path").line, 2);
}

TEST(LaunchConfigParse, PathsRelativeToTheConfigsDirectory) {
  auto c = Parse("model: {path: ../m/k3.gguf}\nworker_groups: [{name: a, hosts: [h], ranks_per_host: 1, listen: 'h:1'}]\n"
                 "logging: {dir: /abs/logs}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.path, "/m/k3.gguf");
  EXPECT_EQ(c->logging.dir, "/abs/logs");
}

TEST(LaunchConfigParse, SplitSyntheticModelOpensItsFirstShard) {
  auto c = Parse("model: {synthetic: {preset: full, output: /d/full.gguf}}\n"
                 "worker_groups: [{name: a, hosts: [h], ranks_per_host: 1, listen: 'h:1'}]\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.synthetic->shards, 14);  // the preset's default, like the published files
  EXPECT_EQ(c->model.path, "/d/full-00001-of-00014.gguf");
}

TEST(LaunchConfigParse, YamlSyntaxErrorNamesItsLine) {
  EXPECT_TRUE(HasError(Parse("model:\n  path: a\nworker_groups: [\n  {name: x\n"), 5, {"not valid YAML"}));
  EXPECT_TRUE(HasError(Parse("model:\n  path: [a\n  b: c\n"), 3, {"not valid YAML"}));
}

TEST(LaunchConfigParse, UnknownKeysNameTheirLine) {
  std::string y = kValid;
  y += "logging:\n  dir: /x\n  colour: red\n";
  EXPECT_TRUE(HasError(Parse(y), 15, {"logging.colour", "unknown key", "known: dir, level"}));
  y = kValid;
  y.replace(y.find("    listen: 0.0.0.0"), 0, "    rank_per_host: 2\n");
  EXPECT_TRUE(HasError(Parse(y), 10, {"worker_groups[0].rank_per_host", "unknown key"}));
  EXPECT_TRUE(HasError(Parse(std::string(kValid) + "profile: {tool: ncu}\n"), 13, {"profile", "unknown key"}));
  EXPECT_TRUE(HasError(Parse("model:\n  synthetic: {preset: tiny, output: x, sead: 1}\nworker_groups: []\n"), 2,
                       {"model.synthetic.sead", "unknown key"}));
}

TEST(LaunchConfigParse, RepeatedKey) {
  std::string y = kValid;
  y += "logging:\n  level: info\n  level: debug\n";
  EXPECT_TRUE(HasError(Parse(y), 15, {"logging.level", "given twice", "first on line 14"}));
}

TEST(LaunchConfigParse, WrongTypesNameTheirLine) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string y = kValid;
    y.replace(y.find(from), from.size(), to);
    return Parse(y);
  };
  EXPECT_TRUE(HasError(with("ranks_per_host: 2", "ranks_per_host: two"), 7,
                       {"worker_groups[0].ranks_per_host", "wants an integer, got 'two'"}));
  EXPECT_TRUE(HasError(with("hosts: [node1]", "hosts: node1"), 6, {"worker_groups[0].hosts", "wants a list of strings"}));
  EXPECT_TRUE(HasError(with("gpus: [0, 1]", "gpus: [0, one]"), 9, {"worker_groups[0].gpus[1]", "wants an integer"}));
  EXPECT_TRUE(HasError(with("gpus: [0, 1]", "gpus: {a: 1}"), 9, {"worker_groups[0].gpus", "wants a list of integers"}));
  EXPECT_TRUE(HasError(with("listen: 0.0.0.0:50061", "listen: [a, b]"), 10, {"worker_groups[0].listen", "wants a string"}));
  EXPECT_TRUE(HasError(with("  listen: 127.0.0.1:50051", "  listen:"), 12, {"coordinator.listen", "got nothing"}));
  EXPECT_TRUE(HasError(with("coordinator:\n  listen: 127.0.0.1:50051", "coordinator: 5"), 11, {"coordinator", "wants a map"}));
  EXPECT_TRUE(HasError(with("gpus_per_host: 8", "gpus_per_host: 8\n    env: [A]"), 9, {"worker_groups[0].env", "wants a map"}));
  EXPECT_TRUE(HasError(with("gpus_per_host: 8", "gpus_per_host: 8\n    gpu_memory_gib: lots"), 9,
                       {"worker_groups[0].gpu_memory_gib", "wants a number"}));
  EXPECT_TRUE(HasError(Parse("model: {path: x}\nworker_groups:\n  - just-a-string\n"), 3, {"worker_groups[0]", "wants a map"}));
  EXPECT_TRUE(HasError(Parse("model: {path: x}\nworker_groups: {name: a}\n"), 2, {"worker_groups", "non-empty list"}));
  EXPECT_TRUE(HasError(Parse("- a\n- b\n"), 1, {"(top level)", "wants a map"}));
}

TEST(LaunchConfigParse, RangesAndChoices) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string y = kValid;
    y.replace(y.find(from), from.size(), to);
    return Parse(y);
  };
  EXPECT_TRUE(HasError(with("ranks_per_host: 2", "ranks_per_host: 0"), 7, {"ranks_per_host", "in [1, 4096], got 0"}));
  EXPECT_TRUE(HasError(with("gpus: [0, 1]", "gpus: [0, -1]"), 9, {"gpus[1]", "in [0, 1023], got -1"}));
  EXPECT_TRUE(HasError(with("ranks_per_host: 2", "ranks_per_host: 2\n    max_seqs: 0"), 8, {"max_seqs", "got 0"}));
  EXPECT_TRUE(HasError(with("backend: cuda", "backend: tpu"), 5, {"backend", "wants one of cpu|cuda, got 'tpu'"}));
  EXPECT_TRUE(HasError(with("gpus_per_host: 8", "gpus_per_host: 8\n    bind_to: everywhere"), 9, {"bind_to", "everywhere"}));
  EXPECT_TRUE(HasError(with("gpus_per_host: 8", "gpus_per_host: 8\n    map_by: diagonal"), 9, {"map_by", "diagonal"}));
  EXPECT_TRUE(HasError(with("  listen: 127.0.0.1:50051", "  listen: 127.0.0.1:50051\n  metrics_port: 70000"), 13,
                       {"coordinator.metrics_port", "in [0, 65535]"}));
  EXPECT_TRUE(HasError(Parse(std::string(kValid) + "logging: {level: loud}\n"), 13, {"logging.level", "loud"}));
  EXPECT_TRUE(HasError(Parse(std::string(kValid) + "profiling: {tool: perf, ranks: all}\n"), 13,
                       {"profiling.tool", "ncu|nsys|compute-sanitizer"}));
  EXPECT_TRUE(HasError(Parse(std::string(kValid) + "profiling: {tool: nsys, ranks: some}\n"), 13,
                       {"profiling.ranks", "\"all\" or a list of ranks"}));
  EXPECT_TRUE(HasError(Parse("model:\n  synthetic: {preset: huge, output: x}\nworker_groups: []\n"), 2,
                       {"model.synthetic.preset", "huge"}));
  EXPECT_TRUE(HasError(Parse("model:\n  synthetic: {preset: tiny, output: x, quant: Q3}\nworker_groups: []\n"), 2,
                       {"model.synthetic.quant", "Q3"}));
}

TEST(LaunchConfigParse, RequiredAndExclusiveKeys) {
  EXPECT_TRUE(HasError(Parse("coordinator: {}\n"), 1, {"model", "is required"}));
  EXPECT_TRUE(HasError(Parse("coordinator: {}\n"), 1, {"worker_groups", "is required"}));
  EXPECT_TRUE(HasError(Parse("model:\n  path: a\n  synthetic: {preset: tiny, output: b}\nworker_groups: []\n"), 2,
                       {"model", "exactly one of path, synthetic"}));
  EXPECT_TRUE(HasError(Parse("model:\n  synthetic: {preset: tiny}\nworker_groups: []\n"), 2,
                       {"model.synthetic.output", "is required"}));
  const std::string g = "model: {path: m}\nworker_groups:\n  - name: a\n    hosts: [h]\n    hostfile: f\n";
  EXPECT_TRUE(HasError(Parse(g), 3, {"worker_groups[0]", "exactly one of hosts, hostfile"}));
  EXPECT_TRUE(HasError(Parse(g), 3, {"worker_groups[0].ranks_per_host", "is required"}));
  EXPECT_TRUE(HasError(Parse(g), 3, {"worker_groups[0].listen", "is required"}));
  EXPECT_TRUE(HasError(Parse("model: {path: m}\nworker_groups:\n  - {hosts: [h], ranks_per_host: 1, listen: 'h:1'}\n"), 3,
                       {"worker_groups[0].name", "is required"}));
  EXPECT_TRUE(HasError(Parse(std::string(kValid) + "profiling: {ranks: all}\n"), 13, {"profiling.tool", "is required"}));
}

TEST(LaunchConfigParse, EveryErrorAtOnce) {
  auto c = Parse(R"(model:
  path: m
worker_groups:
  - name: a
    hosts: [h]
    ranks_per_host: x
    listen: h:1
    colour: red
coordinator:
  token_budget: 0
)");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(HasError(c.status(), 6, {"ranks_per_host"}));
  EXPECT_TRUE(HasError(c.status(), 8, {"colour"}));
  EXPECT_TRUE(HasError(c.status(), 10, {"token_budget"}));
}

TEST(LaunchConfigParse, HostfileAndItsErrors) {
  auto hosts = ParseHostfile("# two nodes\nnode1 slots=8 max_slots=8\n\nnode2   slots=4 # spare\n", "h.txt");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 2u);
  EXPECT_EQ((*hosts)[1].name, "node2");
  EXPECT_EQ((*hosts)[1].slots, 4);
  EXPECT_EQ((*hosts)[1].line, 4);
  EXPECT_TRUE(absl::StrContains(ParseHostfile("a\nb slots=x\n", "h.txt").status().message(), "h.txt:2: slots"));
  EXPECT_TRUE(absl::StrContains(ParseHostfile("a\na\n", "h.txt").status().message(), "h.txt:2: host a is already on line 1"));
  EXPECT_FALSE(ParseHostfile("# nothing\n", "h.txt").ok());
  // A hostfile that cannot be read is an error on the hostfile key's line.
  EXPECT_TRUE(HasError(Parse("model: {path: m}\nworker_groups:\n  - name: a\n    hostfile: no-such.hosts\n"
                             "    ranks_per_host: 1\n    listen: 'h:1'\n"),
                       4, {"worker_groups[0].hostfile", "cannot read hostfile /cfg/no-such.hosts"}));
  // Not a regular file: an error, not a read that never ends.
  EXPECT_TRUE(HasError(Parse("model: {path: m}\nworker_groups:\n  - name: a\n    hostfile: /dev/zero\n"
                             "    ranks_per_host: 1\n    listen: 'h:1'\n"),
                       4, {"worker_groups[0].hostfile", "cannot read hostfile /dev/zero: not a regular file"}));
}

// fuzz_launch_config: aliases expand (each *name stands for its whole &name node); nested ones
// make a few lines stand for billions of nodes. Refused before the tree is walked; ordinary use
// of anchors still works.
TEST(LaunchConfigParse, AliasExpansionIsBounded) {
  std::string y = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    y += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) y += (k ? ", *a" : "*a") + std::to_string(i - 1);
    y += "]\n";
  }
  EXPECT_TRUE(HasError(Parse(y), 1, {"more than 262144 YAML nodes once its aliases (*name) are expanded"}));
  // Many groups repeating one group's long host list: bounded by the hosts over all groups.
  std::string hosts = "[h0";
  for (int i = 1; i < 1000; ++i) hosts += ", h" + std::to_string(i);
  std::string groups = "[&g {name: g, hosts: " + hosts + "], ranks_per_host: 1, listen: 'h:1'}";
  for (int i = 0; i < 100; ++i) groups += ", *g";
  EXPECT_TRUE(HasError(Parse("model: {path: m}\nworker_groups: " + groups + "]\n"), 2,
                       {".hosts", "more than 65536 hosts over all worker groups"}));
  auto c = Parse("model: {path: m}\nworker_groups:\n  - {name: a, hosts: [h], ranks_per_host: 1, listen: 'h:1', env: &e {A: '1'}}\n"
                 "  - {name: b, hosts: [k], ranks_per_host: 1, listen: 'k:1', env: *e}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->groups[1].env, (EnvList{{"A", "1"}}));
}

TEST(LaunchConfigParse, OverridesSetScalarsByIndexOrName) {
  auto c = Parse(kValid, {{"worker_groups.0.listen", "127.0.0.1:1234"},
                          {"worker_groups.g0.max_seqs", "3"},
                          {"coordinator.metrics_port", "9999"},
                          {"logging.dir", "/x/logs"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->groups[0].listen, "127.0.0.1:1234");
  EXPECT_EQ(c->groups[0].max_seqs, 3);
  EXPECT_EQ(c->coordinator.metrics_port, 9999);
  EXPECT_EQ(c->logging.dir, "/x/logs");
  // An overridden value that is wrong says so instead of a line.
  EXPECT_TRUE(HasError(Parse(kValid, {{"worker_groups.g0.max_seqs", "many"}}), 0, {"max_seqs", "wants an integer"}));
  EXPECT_FALSE(Parse(kValid, {{"worker_groups.5.listen", "x"}}).ok());
  EXPECT_FALSE(Parse(kValid, {{"worker_groups.g9.listen", "x"}}).ok());
  EXPECT_FALSE(Parse(kValid, {{"model.path.deeper", "x"}}).ok());
  EXPECT_FALSE(ParseOverride("no-equals").ok());
}

TEST(LaunchArgs, Flags) {
  auto a = ParseLaunchArgs({"c.yaml", "--dry-run", "--set", "a.b=1", "--set=c=2", "--grace-s", "2.5", "--serve-for=3",
                            "--ready-timeout-s", "60", "--bin-dir", "/opt/k3/bin", "--mpirun", "/usr/bin/mpirun"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->config, "c.yaml");
  EXPECT_TRUE(a->dry_run);
  ASSERT_EQ(a->overrides.size(), 2u);
  EXPECT_EQ(a->overrides[1].key, "c");
  EXPECT_EQ(a->overrides[1].value, "2");
  EXPECT_EQ(a->run.grace.count(), 2500);
  EXPECT_EQ(a->run.serve_for.count(), 3000);
  EXPECT_EQ(a->run.ready_timeout.count(), 60000);
  EXPECT_EQ(a->bin_dir, "/opt/k3/bin");
  EXPECT_EQ(a->mpirun, "/usr/bin/mpirun");
  auto s = ParseLaunchArgs({"c.yaml", "--smoke-test", "--smoke-ids", "1 2", "--smoke-tokens", "3", "--log-dir", "/l"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->run.smoke_test);
  EXPECT_EQ(s->run.smoke_ids, "1 2");
  EXPECT_EQ(s->run.smoke_tokens, 3);
  EXPECT_EQ(s->overrides[0].key, "logging.dir");
  EXPECT_FALSE(ParseLaunchArgs({}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"a.yaml", "b.yaml"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"a.yaml", "--bogus", "1"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"a.yaml", "--grace-s", "soon"}).ok());
  EXPECT_FALSE(ParseLaunchArgs({"a.yaml", "--smoke-test", "--serve-for", "5"}).ok());
  EXPECT_TRUE(ParseLaunchArgs({"--help"})->help);
}

}  // namespace
}  // namespace k3::launch
