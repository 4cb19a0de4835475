// The launcher's process handling, with shell scripts standing in for mpirun and the
// coordinator: READY lines, start failures and timeouts, a death while serving, signals, and
// that nothing is left afterwards: not processes in their own process groups (as Open MPI puts
// its ranks), not ones that ignore SIGTERM, not ones whose parent died.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "launch/child_process.h"
#include "launch/supervisor.h"

namespace k3::launch {
namespace {

using std::chrono::milliseconds;

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/k3-launch-", getpid(), "-", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

Command Sh(const std::string& name, const std::string& script, const std::string& dir, const std::string& ready) {
  return Command{name, {"sh", "-c", script}, {{"K3_TEST_MARK", dir}}, dir + "/" + name + ".log", ready};
}

LaunchPlan FakePlan(const std::string& dir, const std::string& group_script, const std::string& coord_script) {
  LaunchPlan p;
  p.config_file = "fake.yaml";
  p.log_dir = dir;
  p.model = dir + "/model.gguf";
  GroupLaunch g;
  g.mpirun = Sh("g0", group_script, dir, "LEADER READY");
  g.app_file = dir + "/g0.app";
  g.app_text = "# fake\n";
  g.ranks = 1;
  p.groups.push_back(g);
  p.coordinator = Sh("coordinator", coord_script, dir, "COORDINATOR READY");
  p.coordinator_dial = "127.0.0.1:1";
  return p;
}

// A /proc file's bytes; empty when the process has gone meanwhile (reading a file of a process
// that exited mid-read fails with ESRCH, which libstdc++ throws from the stream buffer).
std::string ReadProcFile(const std::filesystem::path& path) {
  try {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  } catch (const std::exception&) {
    return {};
  }
}

// Live processes started by this test: their environment carries the test's directory. Any
// process of the machine may end while this walks /proc; one that has gone is not live.
int ProcessesMarked(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string text = ReadProcFile(e.path() / "environ");
    const std::string st = ReadProcFile(e.path() / "stat");
    const size_t close = st.rfind(')');
    const bool zombie = close != std::string::npos && close + 2 < st.size() && st[close + 2] == 'Z';
    if (!zombie && text.find("K3_TEST_MARK=" + dir + '\0') != std::string::npos) ++n;
  }
  return n;
}

RunOptions Quick() {
  RunOptions o;
  o.ready_timeout = milliseconds(5000);
  o.grace = milliseconds(2000);
  o.serve_for = milliseconds(300);
  return o;
}

class LaunchSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override { BlockLauncherSignals(); }  // as k3-launch's main does
};

TEST_F(LaunchSupervisorTest, SessionHoldsRanksInTheirOwnProcessGroups) {
  const std::string dir = FreshDir("session");
  // bash's `set -m` gives each background job its own process group, as Open MPI does its ranks.
  auto child = ChildProcess::Start(
      Command{"job", {"bash", "-c", "set -m; sleep 300 & sleep 300 & wait"}, {{"K3_TEST_MARK", dir}}, dir + "/job.log", ""});
  ASSERT_TRUE(child.ok()) << child.status();
  // A forked job is a session member a moment before bash (or the job itself) has moved it into
  // its own group, so wait for both: three members, two of them outside the child's group.
  const auto own_groups = [&] {
    int n = 0;
    for (pid_t p : SessionMembers(child->pid())) n += getpgid(p) != child->pid();
    return n;
  };
  for (int i = 0; i < 100 && (SessionMembers(child->pid()).size() < 3 || own_groups() < 2); ++i)
    std::this_thread::sleep_for(milliseconds(20));
  ASSERT_EQ(SessionMembers(child->pid()).size(), 3u);
  EXPECT_EQ(own_groups(), 2);  // killpg of the child alone would miss them
  EXPECT_EQ(child->Signal(SIGKILL), 3);
  waitpid(child->pid(), nullptr, 0);
  for (int i = 0; i < 100 && child->SessionAlive(); ++i) std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(child->SessionAlive());
}

TEST_F(LaunchSupervisorTest, ExecFailureIsAnError) {
  const std::string dir = FreshDir("exec");
  auto child = ChildProcess::Start(Command{"x", {"/no/such/program"}, {}, dir + "/x.log", ""});
  ASSERT_FALSE(child.ok());
  EXPECT_NE(child.status().message().find("cannot run /no/such/program"), std::string::npos) << child.status();
}

TEST_F(LaunchSupervisorTest, ServesThenEndsEverything) {
  const std::string dir = FreshDir("serve");
  const LaunchPlan p = FakePlan(dir, "sleep 300 & echo 'LEADER READY a'; exec sleep 300",
                                "echo 'COORDINATOR READY b'; exec sleep 300");
  EXPECT_EQ(RunLaunch(p, Quick()), kExitOk);
  EXPECT_EQ(ProcessesMarked(dir), 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/g0.app"));
}

TEST_F(LaunchSupervisorTest, DeathWhileServing) {
  const std::string dir = FreshDir("death");
  RunOptions o = Quick();
  o.serve_for = milliseconds(30000);
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchPlan p = FakePlan(dir, "echo 'LEADER READY a'; sleep 0.3; exit 3", "echo 'COORDINATOR READY b'; exec sleep 300");
  EXPECT_EQ(RunLaunch(p, o), kExitChildDied);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(ProcessesMarked(dir), 0);
}

TEST_F(LaunchSupervisorTest, ExitBeforeReadyAndReadyTimeout) {
  const std::string dir = FreshDir("start");
  EXPECT_EQ(RunLaunch(FakePlan(dir, "echo oops; exit 1", "exec sleep 300"), Quick()), kExitStartFailed);
  RunOptions o = Quick();
  o.ready_timeout = milliseconds(300);
  EXPECT_EQ(RunLaunch(FakePlan(dir, "echo 'LEADER READY a'; exec sleep 300", "echo 'not yet'; exec sleep 300"), o),
            kExitStartFailed);
  EXPECT_EQ(ProcessesMarked(dir), 0);
}

TEST_F(LaunchSupervisorTest, SigkillAfterTheGracePeriod) {
  const std::string dir = FreshDir("stubborn");
  RunOptions o = Quick();
  o.grace = milliseconds(300);
  const LaunchPlan p = FakePlan(dir, "trap '' TERM; echo 'LEADER READY a'; while :; do sleep 0.05; done",
                                "echo 'COORDINATOR READY b'; exec sleep 300");
  EXPECT_EQ(RunLaunch(p, o), kExitOk);
  EXPECT_EQ(ProcessesMarked(dir), 0);
}

TEST_F(LaunchSupervisorTest, OrphansComeBackAndAreEnded) {
  const std::string dir = FreshDir("orphan");
  // The sleep leaves the session and its parent exits: only the subreaper sweep finds it.
  const LaunchPlan p = FakePlan(dir, "(setsid sleep 300 &); echo 'LEADER READY a'; exec sleep 300",
                                "echo 'COORDINATOR READY b'; exec sleep 300");
  EXPECT_EQ(RunLaunch(p, Quick()), kExitOk);
  EXPECT_EQ(ProcessesMarked(dir), 0);
}

TEST_F(LaunchSupervisorTest, SignalStopsIt) {
  const std::string dir = FreshDir("signal");
  auto killer = ChildProcess::Start(Sh("killer", absl::StrCat("sleep 0.5; kill -TERM ", getpid()), dir, ""));
  ASSERT_TRUE(killer.ok());
  RunOptions o = Quick();
  o.serve_for = milliseconds(30000);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(RunLaunch(FakePlan(dir, "echo 'LEADER READY a'; exec sleep 300", "echo 'COORDINATOR READY b'; exec sleep 300"), o),
            kExitOk);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(ProcessesMarked(dir), 0);
}

TEST_F(LaunchSupervisorTest, ModelGenerationFirst) {
  const std::string dir = FreshDir("synth");
  LaunchPlan p = FakePlan(dir, "echo 'LEADER READY a'; exec sleep 300", "echo 'COORDINATOR READY b'; exec sleep 300");
  p.synth = Sh("synth", "exit 2", dir, "");
  EXPECT_EQ(RunLaunch(p, Quick()), kExitStartFailed);
  p.synth = Sh("synth", "touch " + p.model, dir, "");
  EXPECT_EQ(RunLaunch(p, Quick()), kExitOk);
  EXPECT_TRUE(std::filesystem::exists(p.model));
  EXPECT_EQ(ProcessesMarked(dir), 0);
}

}  // namespace
}  // namespace k3::launch
