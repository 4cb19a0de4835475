// libFuzzer target for the launch config: the fuzz input is a launch YAML file, optionally
// followed by a NUL byte and `--set` overrides, one KEY=VALUE per line (what k3-launch reads
// from its command line). It goes through what k3-launch does before it starts anything:
// ParseLaunchConfig (yaml-cpp, MapReader, the overrides), CheckLaunchConfig and, for a config
// that passes, BuildLaunchPlan (placement, app files, the coordinator's command). The whole
// input is also read as an Open MPI hostfile (ParseHostfile).
// Invariants: no crash, no exception escapes (yaml-cpp throws on misuse), every error is an
// InvalidArgument/NotFound naming the file, and a plan has one app-file line per rank.
// Relative paths resolve against a scratch folder that holds the example configs' hostfile.
//
//   CC=clang-14 CXX=clang++-14 cmake -S . -B build/fuzz -G Ninja -DK3_FUZZ=ON -DK3_BUILD_TESTS=OFF
//       -DK3_WITH_MPI=OFF -DK3_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   cmake --build build/fuzz --target fuzz_launch_config
//   K3_FUZZ_WRITE_SEEDS=build/fuzz/seeds/launch build/fuzz/bin/fuzz_launch_config   # seeds, exits
//   build/fuzz/bin/fuzz_launch_config -max_total_time=30 build/fuzz/corpus/launch build/fuzz/seeds/launch
// (.ci/fuzz does all of this for every fuzzer.)

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "launch/command_plan.h"
#include "launch/config_check.h"
#include "launch/config_parser.h"
#include "launch/hostfile.h"
#include "launch/yaml_overrides.h"

namespace {

namespace fs = std::filesystem;

constexpr char kFile[] = "fuzz.yaml";

[[noreturn]] void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz_launch_config invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The folder relative paths resolve against: the example configs' hostfile is there, so the
// seeds that name it read a real one.
const std::string& BaseDir() {
  static const std::string dir = [] {
    std::string tmpl = (fs::temp_directory_path() / "k3-fuzz-launch-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) Fail("cannot make a scratch folder");
    const fs::path configs = fs::path(K3_SOURCE_DIR) / "launch" / "configs";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(configs, ec)) {
      if (e.path().extension() == ".hosts") fs::copy_file(e.path(), fs::path(tmpl) / e.path().filename(), ec);
    }
    return tmpl;
  }();
  return dir;
}

void RemoveBaseDir() {
  std::error_code ec;
  fs::remove_all(BaseDir(), ec);
}

// Every error line names the file, so a person knows where to look.
void CheckError(const absl::Status& s, const char* stage) {
  if (s.code() != absl::StatusCode::kInvalidArgument && s.code() != absl::StatusCode::kNotFound) {
    Fail(stage, "gave an unexpected status: " + s.ToString());
  }
  if (s.message().empty()) Fail(stage, "gave an error without a message");
}

void CheckPlan(const k3::launch::LaunchConfig& c) {
  k3::launch::PlanOptions o;
  o.bin_dir = "/opt/k3/bin";
  o.generate_model = true;
  auto plan = k3::launch::BuildLaunchPlan(c, o);
  if (!plan.ok()) Fail("BuildLaunchPlan refused a checked config:", plan.status().ToString());
  if (plan->groups.size() != c.groups.size()) Fail("a plan with a different number of groups");
  for (size_t i = 0; i < c.groups.size(); ++i) {
    const auto& g = plan->groups[i];
    if (g.ranks != c.groups[i].ranks() || g.ranks < 1) Fail("a group's plan has the wrong number of ranks");
    const auto lines = std::count(g.app_text.begin(), g.app_text.end(), '\n');
    if (lines != g.ranks + 2) Fail("an app file without exactly one line per rank");  // + 2 comment lines
  }
  if (plan->coordinator.argv.empty()) Fail("no coordinator command");
}

void RunOne(const std::string& input) {
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<k3::launch::Override> overrides;
  if (nul != std::string::npos) {
    for (absl::string_view line : absl::StrSplit(absl::string_view(input).substr(nul + 1), '\n', absl::SkipEmpty())) {
      auto o = k3::launch::ParseOverride(std::string(line));
      if (!o.ok()) {
        CheckError(o.status(), "ParseOverride");
        continue;
      }
      overrides.push_back(*o);
    }
  }
  if (auto hosts = k3::launch::ParseHostfile(input, "hosts"); !hosts.ok()) CheckError(hosts.status(), "ParseHostfile");

  auto c = k3::launch::ParseLaunchConfig(yaml, kFile, BaseDir(), overrides);
  if (!c.ok()) {
    CheckError(c.status(), "ParseLaunchConfig");
    for (absl::string_view line : absl::StrSplit(c.status().message(), '\n')) {
      // Override errors ("--set KEY: ...") come from the command line, not the file.
      if (!absl::StartsWith(line, kFile) && !absl::StartsWith(line, "--set")) {
        Fail("an error line that does not name the file:", std::string(line));
      }
    }
    return;
  }
  if (c->groups.empty()) Fail("a parsed config without worker groups");
  if (absl::Status s = k3::launch::CheckLaunchConfig(*c); !s.ok()) {
    CheckError(s, "CheckLaunchConfig");
    return;
  }
  CheckPlan(*c);
}

void WriteSeeds(const char* dir) {
  fs::create_directories(dir);
  const fs::path configs = fs::path(K3_SOURCE_DIR) / "launch" / "configs";
  int n = 0;
  std::string first;
  for (const auto& e : fs::directory_iterator(configs)) {
    if (e.path().extension() != ".yaml" && e.path().extension() != ".hosts") continue;
    const std::string text = ReadAll(e.path());
    if (first.empty() && e.path().extension() == ".yaml") first = text;
    std::ofstream(fs::path(dir) / ("config-" + e.path().filename().string()), std::ios::binary) << text;
    ++n;
  }
  if (n == 0) Fail("no launch configs in", configs.string());
  // Every access-control key (none of the examples has them).
  std::ofstream(fs::path(dir) / "config-access", std::ios::binary)
      << "model: {path: m.gguf}\nworker_groups:\n  - name: g\n    hosts: [localhost]\n    ranks_per_host: 2\n"
         "    listen: 127.0.0.1:50061\n    auth_token_file: w.token\n    tls_cert: w.pem\n    tls_key: w.key\n"
         "    coordinator_timeout_s: 30\ncoordinator:\n  listen: 127.0.0.1:50051\n  max_concurrent_per_client: 4\n"
         "  auth_token_file: c.token\n  tls_cert: c.pem\n  tls_key: c.key\n  tls_ca: ca.pem\n"
         "  worker_token_file: w.token\n  worker_tls_ca: w.pem\n";
  // One with overrides after the NUL, as k3-launch --set gives them.
  std::ofstream(fs::path(dir) / "config-with-overrides", std::ios::binary)
      << first << std::string(1, '\0')
      << "coordinator.listen=127.0.0.1:41234\nworker_groups.0.listen=127.0.0.1:41235\nworker_groups.cpu0.max_seqs=2\n";
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // K3_FUZZ_WRITE_SEEDS=DIR: the example configs of launch/configs (and one with overrides) into
  // DIR, then exit (the CI's seed corpus).
  if (const char* dir = std::getenv("K3_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  (void)BaseDir();
  std::atexit(RemoveBaseDir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    RunOne(input);
  } catch (const std::exception& e) {
    Fail("an exception escaped:", e.what());
  }
  return 0;
}
