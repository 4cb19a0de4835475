// The commands and app files of every example config (launch/configs/*.yaml) against golden
// files (tests/launch/golden/*.plan; K3_UPDATE_GOLDEN=1 rewrites them), with the machine's
// paths replaced by ${SRC} (the checkout) and ${ROOT} (its parent, where ../shared lives).
// Plus what each line must say: one app-file line per rank, each with its own GPU, NUMA node
// and profiler output file.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "launch/command_plan.h"
#include "launch/model_fit.h"
#include "launch/plan_text.h"
#include "tests/launch/test_util.h"

namespace k3::launch {
namespace {

namespace fs = std::filesystem;

const std::string kSrc = fs::path(K3_SOURCE_DIR).lexically_normal().string();

// Reads, checks, fit-checks and plans an example config (bin dir /opt/k3/bin; a synthetic
// model counts as absent, so the plan is the same on every machine).
LaunchPlan PlanOf(const std::string& name) {
  auto c = ReadLaunchConfig(kSrc + "/launch/configs/" + name + ".yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return {};
  absl::Status checked = CheckLaunchConfig(*c);
  EXPECT_TRUE(checked.ok()) << checked;
  if (c->model.synthetic || fs::exists(c->model.path)) {
    auto shapes = LoadModelShapes(*c);
    EXPECT_TRUE(shapes.ok()) << shapes.status();
    if (shapes.ok()) {
      auto fits = CheckGroupsFit(*c, *shapes);
      EXPECT_TRUE(fits.ok()) << fits.status();
    }
  }
  PlanOptions o;
  o.bin_dir = "/opt/k3/bin";
  o.generate_model = c->model.synthetic.has_value();
  auto plan = BuildLaunchPlan(*c, o);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : LaunchPlan{};
}

std::string Placeheld(const std::string& text) {
  const std::string root = fs::path(kSrc).parent_path().string();
  std::string s = absl::StrReplaceAll(text, {{kSrc, "${SRC}"}});
  return absl::StrReplaceAll(s, {{root + "/", "${ROOT}/"}});
}

void ExpectGolden(const std::string& name) {
  const std::string got = Placeheld(DescribePlan(PlanOf(name)));
  const std::string path = kSrc + "/tests/launch/golden/" + name + ".plan";
  if (const char* update = std::getenv("K3_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(path) << got;
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no golden file " << path << " (K3_UPDATE_GOLDEN=1 writes it)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(got, want.str()) << "the plan of launch/configs/" << name << ".yaml changed; if that is intended, "
                             << "rerun with K3_UPDATE_GOLDEN=1 and review the diff of " << path;
}

// The rank lines of an app file (comments dropped).
std::vector<std::string> RankLines(const GroupLaunch& g) {
  std::vector<std::string> lines;
  for (absl::string_view l : absl::StrSplit(g.app_text, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(l, "#")) lines.emplace_back(l);
  }
  return lines;
}

TEST(LaunchCommandPlan, GoldenCpuOnly) { ExpectGolden("cpu-only"); }
TEST(LaunchCommandPlan, GoldenH200x8OneNode) { ExpectGolden("h200x8-one-node"); }
TEST(LaunchCommandPlan, GoldenH200x2) { ExpectGolden("h200x2"); }
TEST(LaunchCommandPlan, GoldenTwoNodes) { ExpectGolden("two-nodes"); }

TEST(LaunchCommandPlan, CpuOnly) {
  const LaunchPlan p = PlanOf("cpu-only");
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_FALSE(p.synth);
  const auto lines = RankLines(p.groups[0]);
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& l : lines) {
    EXPECT_TRUE(absl::StartsWith(l, "-np 1 -host localhost:2 -x OMP_NUM_THREADS=1 -x SPDLOG_LEVEL=info /opt/k3/bin/k3-worker "))
        << l;
    EXPECT_EQ(l.find("CUDA_VISIBLE_DEVICES"), std::string::npos);
    EXPECT_NE(l.find("/shared/data/golden/k3-golden-a.gguf --serve 127.0.0.1:50061 --expert-groups 2"), std::string::npos);
  }
  EXPECT_EQ(p.groups[0].mpirun.argv,
            (std::vector<std::string>{"mpirun", "--host", "localhost:2", "--map-by", "slot", "--bind-to", "none", "--app",
                                      kSrc + "/build/launch-logs/cpu-only/cpu0.app"}));
  EXPECT_EQ(p.groups[0].mpirun.ready, "LEADER READY");
  EXPECT_EQ(p.coordinator.ready, "COORDINATOR READY");
  EXPECT_EQ(p.coordinator_dial, "127.0.0.1:50051");
  EXPECT_EQ(ShellLine(HealthCommand(p, "/b")), "/b/k3 health --server 127.0.0.1:50051 --timeout-s 5 > " + kSrc +
                                                   "/build/launch-logs/cpu-only/smoke-health.log 2>&1");
  const Command gen = GenerateCommand(p, "/b", "1 2 3", 4);
  EXPECT_EQ(gen.argv, (std::vector<std::string>{"/b/k3", "generate", "--server", "127.0.0.1:50051", "--ids", "1 2 3",
                                                "--max-tokens", "4", "--ignore-eos", "--timeout-s", "120"}));
}

TEST(LaunchCommandPlan, H200x8EachRankItsGpuAndNumaNode) {
  const LaunchPlan p = PlanOf("h200x8-one-node");
  ASSERT_TRUE(p.synth);
  // model.synthetic.in_memory: only the metadata is written; every rank fills its weights from the seed.
  EXPECT_EQ(p.synth->argv, (std::vector<std::string>{"/opt/k3/bin/k3-synth", "--preset", "full", "--seed", "1", "--quant",
                                                     "UD-IQ1_S", "--shards", "14", "--quiet", "--header-only", "-o",
                                                     "/data/k3/k3-synth-full-seed1-header.gguf"}));
  EXPECT_EQ(p.model, "/data/k3/k3-synth-full-seed1-header-00001-of-00014.gguf");
  const auto lines = RankLines(p.groups[0]);
  ASSERT_EQ(lines.size(), 8u);
  for (int r = 0; r < 8; ++r) {
    const std::string want = absl::StrCat("env CUDA_VISIBLE_DEVICES=", r, " numactl --cpunodebind=", r / 4,
                                          " --membind=", r / 4,
                                          " /opt/k3/bin/k3-worker --synth full --synth-seed 1 --synth-quant UD-IQ1_S --serve ");
    EXPECT_NE(lines[r].find(want), std::string::npos) << lines[r];
    EXPECT_EQ(lines[r].find("--model"), std::string::npos) << lines[r];
  }
  // The coordinator reads the metadata file.
  const auto& co = p.coordinator.argv;
  ASSERT_GE(co.size(), 3u);
  EXPECT_EQ(co[1], "--model");
  EXPECT_EQ(co[2], "/data/k3/k3-synth-full-seed1-header-00001-of-00014.gguf");
  // The coordinator listens everywhere; local clients come in through loopback.
  EXPECT_EQ(p.coordinator_dial, "127.0.0.1:50051");
}

TEST(LaunchCommandPlan, TwoNodesHostfileAndOneProfiledRank) {
  const LaunchPlan p = PlanOf("two-nodes");
  const GroupLaunch& g = p.groups[0];
  const auto lines = RankLines(g);
  ASSERT_EQ(lines.size(), 16u);
  for (int r = 0; r < 16; ++r) {
    EXPECT_TRUE(absl::StartsWith(lines[r], absl::StrCat("-np 1 -host h200-node0", r / 8 + 1, ":8 "))) << lines[r];
    EXPECT_NE(lines[r].find(absl::StrCat("env CUDA_VISIBLE_DEVICES=", r % 8, " ")), std::string::npos) << lines[r];
    const bool profiled = lines[r].find("ncu ") != std::string::npos;
    EXPECT_EQ(profiled, r == 3) << lines[r];
  }
  EXPECT_NE(lines[3].find("ncu --clock-control none --export /shared/k3/logs/two-nodes/k3x16-rank3.ncu-rep "
                          "--force-overwrite --set full --launch-count 50 /opt/k3/bin/k3-worker"),
            std::string::npos)
      << lines[3];
  EXPECT_EQ(g.mpirun.argv[1], "--hostfile");
  EXPECT_EQ(g.mpirun.argv[2], kSrc + "/launch/configs/two-nodes.hosts");
  EXPECT_EQ(g.dial, "h200-node01:50061");  // listen 0.0.0.0: rank 0's host
  EXPECT_NE(ShellLine(p.coordinator).find("--workers h200-node01:50061"), std::string::npos);
}

TEST(LaunchCommandPlan, H200x2EveryRankProfiledIntoItsOwnFile) {
  const LaunchPlan p = PlanOf("h200x2");
  const auto lines = RankLines(p.groups[0]);
  ASSERT_EQ(lines.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(lines[r].find(absl::StrCat("env CUDA_VISIBLE_DEVICES=", r, " nsys profile --output /tmp/k3-logs/h200x2/pair-rank",
                                         r, ".nsys-rep --force-overwrite true --trace=cuda,nvtx,mpi --sample=none ")),
              std::string::npos)
        << lines[r];
  }
}

TEST(LaunchCommandPlan, ComputeSanitizerAndToolPath) {
  auto c = testing::Parse(std::string(testing::kValid) +
                          "logging: {dir: /l}\nprofiling: {tool: compute-sanitizer, path: /cuda/bin/compute-sanitizer, "
                          "ranks: [0], args: [--tool, racecheck]}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  auto p = BuildLaunchPlan(*c, {"/b", false, "/usr/bin/mpirun"});
  ASSERT_TRUE(p.ok()) << p.status();
  const auto lines = RankLines(p->groups[0]);
  EXPECT_EQ(lines[0], "-np 1 -host node1:2 -x SPDLOG_LEVEL=info env CUDA_VISIBLE_DEVICES=0 /cuda/bin/compute-sanitizer "
                      "--log-file /l/g0-rank0.sanitizer.log --tool racecheck /b/k3-worker --model /models/k3.gguf --serve "
                      "0.0.0.0:50061 --expert-groups 2 --max-seqs 8 --cache-tokens 0 --timeout-ms 60000");
  EXPECT_EQ(lines[1].find("sanitizer"), std::string::npos);
  EXPECT_EQ(p->groups[0].mpirun.argv[0], "/usr/bin/mpirun");
  EXPECT_FALSE(BuildLaunchPlan(*c, {"/my bin", false, "mpirun"}).ok());  // cannot go into an app file
}

// Access control keys become the programs' flags (relative paths from the config's folder), and
// the smoke test's client gets the token and the CA.
TEST(LaunchCommandPlan, AccessControlFlags) {
  std::string y = testing::kValid;
  y.replace(y.find("    listen: 0.0.0.0:50061\n"), 0,
            "    auth_token_file: secrets/worker.token\n    tls_cert: w.pem\n    tls_key: w.key\n"
            "    coordinator_timeout_s: 30\n");
  y += "  max_concurrent_per_client: 8\n  auth_token_file: secrets/client.token\n  tls_cert: c.pem\n  tls_key: c.key\n"
       "  worker_token_file: secrets/worker.token\n  worker_tls_ca: w.pem\n";
  auto c = testing::Parse(y);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(CheckLaunchConfig(*c).ok()) << CheckLaunchConfig(*c);
  auto p = BuildLaunchPlan(*c, {"/b", false, "mpirun"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(RankLines(p->groups[0])[1].find("--timeout-ms 60000 --auth-token-file /cfg/secrets/worker.token --tls-cert "
                                            "/cfg/w.pem --tls-key /cfg/w.key --coordinator-timeout 30"),
            std::string::npos)
      << RankLines(p->groups[0])[1];
  const std::string coord = absl::StrJoin(p->coordinator.argv, " ");
  EXPECT_NE(coord.find("--max-concurrent-per-client 8 --auth-token-file /cfg/secrets/client.token --tls-cert /cfg/c.pem "
                       "--tls-key /cfg/c.key --worker-token-file /cfg/secrets/worker.token --worker-tls-ca /cfg/w.pem"),
            std::string::npos)
      << coord;
  // A self-signed certificate is its own CA: the smoke test trusts tls_cert unless tls_ca says otherwise.
  EXPECT_NE(absl::StrJoin(HealthCommand(*p, "/b").argv, " ").find("--tls-ca /cfg/c.pem"), std::string::npos);
  const std::string gen = absl::StrJoin(GenerateCommand(*p, "/b", "1 2", 4).argv, " ");
  EXPECT_NE(gen.find("--tls-ca /cfg/c.pem --token-file /cfg/secrets/client.token"), std::string::npos) << gen;
  // Without the keys nothing changes (the example configs' golden plans above).
}

TEST(LaunchPlanText, ShellQuoting) {
  EXPECT_EQ(ShellQuote("plain/path-1.gguf"), "plain/path-1.gguf");
  EXPECT_EQ(ShellQuote("1 2 3"), "'1 2 3'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
  Command c{"x", {"/b/k3", "generate", "--ids", "1 2"}, {{"A", "b c"}}, "/l/x.log", ""};
  EXPECT_EQ(ShellLine(c), "A='b c' /b/k3 generate --ids '1 2' > /l/x.log 2>&1");
}

}  // namespace
}  // namespace k3::launch
