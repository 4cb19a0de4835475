// The checks across keys: impossible placements (two ranks on one GPU of a host, within a group
// and across groups; more ranks than GPUs; GPU index out of range; hostfile slots), parallel
// sizes, addresses and ports, app-file safety, flags the launcher owns, and profiling.
#include <gtest/gtest.h>

#include "launch/address.h"
#include "launch/diagnostics.h"
#include "launch/placement.h"
#include "tests/launch/test_util.h"

namespace k3::launch {
namespace {

using testing::HasError;
using testing::kValid;
using testing::ParseAndCheck;

std::string With(const std::string& from, const std::string& to) {
  std::string y = kValid;
  y.replace(y.find(from), from.size(), to);
  return y;
}

TEST(LaunchConfigCheck, ValidConfigPasses) { EXPECT_TRUE(ParseAndCheck(kValid).ok()) << ParseAndCheck(kValid); }

// A host name folded over several lines by YAML (a fuzz finding: it split the app file's rank
// lines), or with a space or ':' in it, is refused where it is written.
TEST(LaunchConfigCheck, HostNamesAreSingleWords) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("hosts: [node1]", "hosts: [no\n\n      de1]")), 6,
                       {"worker_groups[0].hosts[0]", "wants letters, digits"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("hosts: [node1]", "hosts: ['node 1']")), 6, {"worker_groups[0].hosts[0]"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("hosts: [node1]", "hosts: ['node1:4']")), 6, {"worker_groups[0].hosts[0]"}));
}

// model.synthetic.in_memory fills the weights on each rank's GPU: fine for cuda groups, an error
// naming the key and the group for a cpu one.
TEST(LaunchConfigCheck, InMemorySyntheticNeedsGpuGroups) {
  const std::string in_memory = "synthetic: {preset: tp8, output: /m/h.gguf, in_memory: true}";
  EXPECT_TRUE(ParseAndCheck(With("path: /models/k3.gguf", in_memory)).ok());
  std::string cpu = With("path: /models/k3.gguf", in_memory);
  cpu.replace(cpu.find("backend: cuda"), 13, "backend: cpu");
  cpu.replace(cpu.find("    gpus_per_host: 8\n    gpus: [0, 1]\n"), 38, "");
  EXPECT_TRUE(HasError(ParseAndCheck(cpu), 2, {"model.synthetic.in_memory", "worker group 'g0' is backend: cpu"}));
}

TEST(LaunchConfigCheck, TwoRanksOnOneGpu) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("gpus: [0, 1]", "gpus: [3, 3]")), 9,
                       {"worker_groups[0].gpus[1]", "two ranks on one GPU", "rank 1 of group g0 and rank 0 of group g0",
                        "GPU 3 of host node1"}));
  // Two groups on the same host, the second by default on GPUs 0 and 1.
  std::string y = kValid;
  y.replace(y.find("coordinator:"), 0, R"(  - name: g1
    backend: cuda
    hosts: [node1]
    ranks_per_host: 2
    listen: 0.0.0.0:50062
)");
  EXPECT_TRUE(HasError(ParseAndCheck(y), 14, {"worker_groups[1].ranks_per_host", "rank 0 of group g1 and rank 0 of group g0",
                                              "GPU 0 of host node1"}));
  // On another host they do not collide.
  y.replace(y.find("hosts: [node1]\n    ranks_per_host: 2\n    listen: 0.0.0.0:50062"), 14, "hosts: [node2]");
  EXPECT_TRUE(ParseAndCheck(y).ok()) << ParseAndCheck(y);
}

TEST(LaunchConfigCheck, MoreRanksThanGpusAndOutOfRange) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("ranks_per_host: 2\n    gpus_per_host: 8\n    gpus: [0, 1]",
                                          "ranks_per_host: 9\n    gpus_per_host: 8")),
                       7, {"worker_groups[0].ranks_per_host", "9 ranks per host but gpus_per_host is 8",
                           "more ranks than GPUs on a host"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("gpus: [0, 1]", "gpus: [0, 8]")), 9,
                       {"worker_groups[0].gpus[1]", "GPU 8 is out of range", "gpus_per_host is 8"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("gpus: [0, 1]", "gpus: [0, 1, 2]")), 9,
                       {"worker_groups[0].gpus", "has 3 entries", "one per local rank (2) or one per rank (2)"}));
  // Without gpus_per_host there is no range to check.
  EXPECT_TRUE(ParseAndCheck(With("    gpus_per_host: 8\n    gpus: [0, 1]", "    gpus: [14, 15]")).ok());
}

TEST(LaunchConfigCheck, GpusPerRankOverSeveralHosts) {
  auto c = testing::Parse(With("hosts: [node1]\n    ranks_per_host: 2\n    gpus_per_host: 8\n    gpus: [0, 1]",
                               "hosts: [node1, node2]\n    ranks_per_host: 2\n    gpus_per_host: 8\n    gpus: [0, 1, 6, 7]"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(CheckLaunchConfig(*c).ok()) << CheckLaunchConfig(*c);
  const WorkerGroupSpec& g = c->groups[0];
  EXPECT_EQ(HostOf(g, 2), "node2");
  EXPECT_EQ(GpuOf(g, 2), 6);
  EXPECT_EQ(GpuOf(g, 3), 7);
  EXPECT_EQ(LocalRank(g, 3), 1);
  EXPECT_EQ(GpuKey(g, 3), "gpus[3]");
}

TEST(LaunchConfigCheck, HostfileSlotsAndRepeatedHosts) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("hosts: [node1]", "hosts: [node1, node1]")), 6,
                       {"worker_groups[0].hosts[1]", "host node1 is listed twice"}));
  const std::string dir = ::testing::TempDir();
  const std::string hosts = dir + "/slots.hosts";
  FILE* f = std::fopen(hosts.c_str(), "w");
  ASSERT_TRUE(f);
  std::fputs("node1 slots=8\nnode2 slots=1\n", f);
  std::fclose(f);
  EXPECT_TRUE(HasError(ParseAndCheck(With("hosts: [node1]", "hostfile: " + hosts)), 7,
                       {"worker_groups[0].ranks_per_host", "2 ranks per host", "slots.hosts:2 gives host node2 slots=1"}));
}

TEST(LaunchConfigCheck, ParallelSizes) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0", "tensor_parallel: 8\n    listen: 0.0.0.0")), 10,
                       {"worker_groups[0].tensor_parallel", "is 8 but the group has 2 ranks"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0", "expert_groups: 3\n    listen: 0.0.0.0")), 10,
                       {"worker_groups[0].expert_groups", "3 does not divide the group's 2 ranks"}));
  EXPECT_TRUE(ParseAndCheck(With("listen: 0.0.0.0", "tensor_parallel: 2\n    expert_groups: 1\n    listen: 0.0.0.0")).ok());
}

TEST(LaunchConfigCheck, CpuGroupsTakeNoGpus) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("backend: cuda", "backend: cpu")), 9,
                       {"worker_groups[0].gpus", "is for backend: cuda (this group is cpu)"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("backend: cuda", "backend: cpu")), 8, {"worker_groups[0].gpus_per_host"}));
  // k3-worker --prefill-chunk is the CUDA engine's: a cuda group takes it, a cpu group is refused.
  const std::string chunked =
      With("    listen: 0.0.0.0:50061\n", "    listen: 0.0.0.0:50061\n    prefill_chunk: 8192\n");
  EXPECT_TRUE(ParseAndCheck(chunked).ok()) << ParseAndCheck(chunked);
  std::string cpu = chunked;
  cpu.replace(cpu.find("backend: cuda"), std::string("backend: cuda").size(), "backend: cpu");
  EXPECT_TRUE(HasError(ParseAndCheck(cpu), 11, {"worker_groups[0].prefill_chunk", "is for backend: cuda"}));
}

TEST(LaunchConfigCheck, NumaBinding) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0", "numa_nodes: [0, 1]\n    bind_to: core\n    listen: 0.0.0.0")),
                       10, {"worker_groups[0].numa_nodes", "bind_to must be none"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0", "numa_nodes: [0, 1, 1]\n    listen: 0.0.0.0")), 10,
                       {"numa_nodes", "has 3 entries"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0", "map_by: ppr:4:socket\n    listen: 0.0.0.0")), 10,
                       {"worker_groups[0].map_by", "one line per rank", "numa_nodes"}));
  EXPECT_TRUE(ParseAndCheck(With("listen: 0.0.0.0", "numa_nodes: [0, 1]\n    bind_to: none\n    listen: 0.0.0.0")).ok());
}

TEST(LaunchConfigCheck, NamesAddressesAndPorts) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("name: g0", "name: g/0")), 4, {"worker_groups[0].name", "names log files"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0:50061", "listen: 0.0.0.0")), 10,
                       {"worker_groups[0].listen", "wants host:port"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0:50061", "listen: 0.0.0.0:0")), 10,
                       {"worker_groups[0].listen", "port in 1..65535"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("  listen: 127.0.0.1:50051", "  listen: nowhere")), 12,
                       {"coordinator.listen", "wants host:port"}));
  // A leader on this machine and the coordinator on one port.
  std::string local = With("hosts: [node1]", "hosts: [localhost]");
  local.replace(local.find("50051"), 5, "50061");
  EXPECT_TRUE(HasError(ParseAndCheck(local), 10,
                       {"worker_groups[0].listen", "port 50061 of (this machine) is already taken by coordinator.listen"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("  listen: 127.0.0.1:50051", "  listen: 127.0.0.1:50051\n  metrics_port: 50051")),
                       13, {"coordinator.metrics_port", "already taken by coordinator.listen"}));
  // The same port on another machine is fine.
  EXPECT_TRUE(ParseAndCheck(With("  listen: 127.0.0.1:50051", "  listen: 127.0.0.1:50061")).ok());
}

TEST(LaunchConfigCheck, EnvAndArgumentsTheAppFileCannotCarry) {
  const std::string base = With("listen: 0.0.0.0:50061", "listen: 0.0.0.0:50061\n    env:\n      GOOD: x\n      BAD VAR: y\n"
                                                        "      CUDA_VISIBLE_DEVICES: 3\n      SPACE: 'a b'");
  const absl::Status s = ParseAndCheck(base);
  EXPECT_TRUE(HasError(s, 13, {"worker_groups[0].env.BAD VAR", "not a valid environment variable name"}));
  EXPECT_TRUE(HasError(s, 14, {"env.CUDA_VISIBLE_DEVICES", "set per rank by the launcher"}));
  EXPECT_TRUE(HasError(s, 15, {"env.SPACE", "whitespace"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0:50061", "listen: 0.0.0.0:50061\n    worker_args: [--gen, '1 2']")),
                       11, {"worker_args[1]", "whitespace"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0:50061", "listen: 0.0.0.0:50061\n    worker_args: [--max-seqs=4]")),
                       11, {"worker_args[0]", "--max-seqs is set by the launcher"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("listen: 0.0.0.0:50061", "listen: 0.0.0.0:50061\n    mpirun_args: [-np, '4']")),
                       11, {"mpirun_args[0]", "-np is set by the launcher"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("path: /models/k3.gguf", "path: /my models/k3.gguf")), 2,
                       {"model", "whitespace"}));
}

TEST(LaunchConfigCheck, Profiling) {
  const std::string y = kValid;
  EXPECT_TRUE(ParseAndCheck(y + "profiling: {tool: ncu, ranks: [1], args: [--set, full]}\n").ok());
  EXPECT_TRUE(HasError(ParseAndCheck(y + "profiling:\n  tool: ncu\n  ranks: [0, 2]\n"), 15,
                       {"profiling.ranks[1]", "rank 2 is not in group g0 (ranks 0..1)"}));
  EXPECT_TRUE(HasError(ParseAndCheck(y + "profiling:\n  tool: ncu\n  ranks: [1, 1]\n"), 15,
                       {"profiling.ranks[1]", "listed twice"}));
  EXPECT_TRUE(HasError(ParseAndCheck(y + "profiling:\n  tool: nsys\n  ranks: all\n  groups: [g9]\n"), 16,
                       {"profiling.groups[0]", "no worker group is named 'g9'"}));
  EXPECT_TRUE(HasError(ParseAndCheck(y + "profiling:\n  tool: ncu\n  ranks: all\n  args: [--clock-control, base]\n"), 16,
                       {"profiling.args[0]", "--clock-control none"}));
  EXPECT_TRUE(HasError(ParseAndCheck("model: {path: m}\nworker_groups: [{name: c, hosts: [h], ranks_per_host: 1, listen: 'h:1'}]\n"
                                     "profiling:\n  tool: compute-sanitizer\n  ranks: all\n"),
                       4, {"profiling.tool", "compute-sanitizer looks at CUDA kernels, but group c runs on cpu"}));
  EXPECT_TRUE(ParseAndCheck("model: {path: m}\nworker_groups: [{name: c, hosts: [h], ranks_per_host: 1, listen: 'h:1'}]\n"
                            "profiling: {tool: nsys, ranks: all}\n").ok());
}

// fuzz_launch_config findings: a few kilobytes of YAML must not make millions of ranks to check
// and write app-file lines for, nor a quadratic number of errors (YAML aliases repeat a host
// cheaply); a quoted key with a newline or an escape must not break the one-error-per-line output.
TEST(LaunchConfigCheck, RanksAreBoundedBeforeTheyAreWalked) {
  std::string hosts;
  for (int i = 0; i < 20; ++i) hosts += (i ? ", h" : "h") + std::to_string(i);
  const std::string y = "model: {path: /m.gguf}\nworker_groups:\n  - name: g\n    backend: cuda\n    hosts: [" + hosts +
                        "]\n    ranks_per_host: 4096\n    listen: 127.0.0.1:5000\n";
  EXPECT_TRUE(HasError(ParseAndCheck(y), 3, {"worker_groups", "81920 ranks in all", "at most 65536"}));
  // Over several groups too (here one group repeated through an alias).
  std::string groups = "[&g {name: g, hosts: [a, b], ranks_per_host: 4096, listen: '127.0.0.1:5000'}";
  for (int i = 0; i < 8; ++i) groups += ", *g";
  EXPECT_TRUE(HasError(ParseAndCheck("model: {path: /m.gguf}\nworker_groups: " + groups + "]\n"), 2,
                       {"9 group(s) with 73728 ranks in all"}));
}

TEST(LaunchConfigCheck, RepeatedHostsAndErrorsAreBounded) {
  std::string hosts = "[&h a";
  for (int i = 0; i < 1000; ++i) hosts += ", *h";
  const absl::Status s = ParseAndCheck("model: {path: /m.gguf}\nworker_groups:\n  - name: g\n    hosts: " + hosts +
                                       "]\n    ranks_per_host: 1\n    listen: 127.0.0.1:5000\n");
  EXPECT_TRUE(HasError(s, 4, {"worker_groups[0].hosts[1]", "host a is listed twice (also hosts[0])"}));
  const std::vector<std::string> lines = absl::StrSplit(s.message(), '\n');
  EXPECT_EQ(lines.size(), Diagnostics::kMaxErrors + 1);
  EXPECT_EQ(lines.back(), "t.yaml: ... and 950 more errors");
}

TEST(LaunchConfigCheck, ControlBytesInKeysAreEscaped) {
  const absl::Status s = ParseAndCheck("model: {path: /m.gguf, \"two\\nlines\\e[31m\": 1}\nworker_groups: []\n");
  ASSERT_FALSE(s.ok());
  for (absl::string_view line : absl::StrSplit(s.message(), '\n')) {
    EXPECT_TRUE(absl::StartsWith(line, "t.yaml:")) << line;
  }
  EXPECT_TRUE(HasError(s, 1, {"model.two\\nlines\\x1b[31m: unknown key"}));
}

// The coordinator must be able to reach the leaders it starts: a leader's token or TLS without
// the coordinator's matching key is an error, and TLS wants both halves.
TEST(LaunchConfigCheck, AccessControlMustMatch) {
  EXPECT_TRUE(HasError(ParseAndCheck(With("    listen: 0.0.0.0:50061\n", "    listen: 0.0.0.0:50061\n    auth_token_file: w.token\n")),
                       11, {"worker_groups[0].auth_token_file", "coordinator.worker_token_file is not set"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("    listen: 0.0.0.0:50061\n",
                                          "    listen: 0.0.0.0:50061\n    tls_cert: w.pem\n    tls_key: w.key\n")),
                       11, {"worker_groups[0].tls_cert", "coordinator.worker_tls_ca is not set"}));
  EXPECT_TRUE(HasError(ParseAndCheck(std::string(kValid) + "  worker_tls_ca: ca.pem\n"), 13,
                       {"coordinator.worker_tls_ca", "group g0 has no tls_cert"}));
  EXPECT_TRUE(HasError(ParseAndCheck(std::string(kValid) + "  tls_cert: c.pem\n"), 13,
                       {"coordinator.tls_cert", "TLS wants both tls_cert and tls_key"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("    listen: 0.0.0.0:50061\n", "    listen: 0.0.0.0:50061\n    tls_key: w.key\n")),
                       11, {"worker_groups[0].tls_cert", "TLS wants both"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("    listen: 0.0.0.0:50061\n",
                                          "    listen: 0.0.0.0:50061\n    worker_args: [--auth-token-file, x]\n")),
                       11, {"worker_groups[0].worker_args[0]", "--auth-token-file is set by the launcher"}));
  EXPECT_TRUE(HasError(ParseAndCheck(With("    listen: 0.0.0.0:50061\n",
                                          "    listen: 0.0.0.0:50061\n    coordinator_timeout_s: -1\n")),
                       11, {"worker_groups[0].coordinator_timeout_s", "wants an integer in [0,"}));
  // The step channel is plaintext: not beside a leader's TLS.
  EXPECT_TRUE(HasError(ParseAndCheck(With("    listen: 0.0.0.0:50061\n",
                                          "    listen: 0.0.0.0:50061\n    step_port: 50062\n"
                                          "    tls_cert: w.pem\n    tls_key: w.key\n") +
                                     "  worker_tls_ca: w.pem\n"),
                       11, {"worker_groups[0].step_port", "plaintext"}));
  EXPECT_TRUE(
      HasError(ParseAndCheck(With("    listen: 0.0.0.0:50061\n", "    listen: 0.0.0.0:50061\n    step_port: 70000\n")),
               11, {"worker_groups[0].step_port", "wants an integer in [0,"}));
  EXPECT_TRUE(ParseAndCheck(With("    listen: 0.0.0.0:50061\n",
                                 "    listen: 0.0.0.0:50061\n    auth_token_file: w.token\n    tls_cert: w.pem\n"
                                 "    tls_key: w.key\n") +
                            "  worker_token_file: w.token\n  worker_tls_ca: w.pem\n")
                  .ok());
}

TEST(LaunchAddress, ParseAndDial) {
  auto hp = ParseHostPort("[::1]:80");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 80);
  EXPECT_FALSE(ParseHostPort("host:http").ok());
  EXPECT_FALSE(ParseHostPort("host:70000").ok());
  WorkerGroupSpec g;
  g.hosts = {"node1", "node2"};
  g.listen = "0.0.0.0:7000";
  EXPECT_EQ(DialAddress(g), "node1:7000");
  g.listen = "10.0.0.5:7000";
  EXPECT_EQ(DialAddress(g), "10.0.0.5:7000");
  g.address = "lb.example:7000";
  EXPECT_EQ(DialAddress(g), "lb.example:7000");
}

}  // namespace
}  // namespace k3::launch
