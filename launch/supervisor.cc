#include "launch/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "launch/child_process.h"
#include "launch/log_watch.h"
#include "launch/plan_text.h"

namespace k3::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{100};
constexpr milliseconds kAfterKill{5000};

sigset_t LauncherSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  return set;
}

void Say(const std::string& msg) {
  std::fprintf(stderr, "k3-launch: %s\n", msg.c_str());
  std::fflush(stderr);
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return absl::StrCat("status ", status);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class Supervisor {
 public:
  struct Proc {
    ChildProcess child;
    bool service;  // expected to run until stopped; a job (synth, client) runs to its end
    std::optional<int> status;
    bool reported = false;
  };
  enum class Event { kDone, kSignal, kDied, kDeadline };

  explicit Supervisor(const RunOptions& o) : o_(o), signals_(LauncherSignals()) {}

  absl::StatusOr<Proc*> Start(const Command& c, bool service) {
    Say(absl::StrCat("starting ", c.name, ": ", ShellLine(c)));
    auto child = ChildProcess::Start(c);
    if (!child.ok()) return child.status();
    procs_.push_back(std::make_unique<Proc>(Proc{*child, service, std::nullopt}));
    return procs_.back().get();
  }

  // Waits until done() holds, a stop signal arrives, a service process exits (not while
  // shutting down) or the deadline passes.
  Event Wait(Clock::time_point deadline, const std::function<bool()>& done) {
    for (;;) {
      Reap();
      if (!stopping_) {
        for (auto& p : procs_) {
          if (p->service && p->status && !p->reported) {
            p->reported = true;
            died_ = p.get();
            return Event::kDied;
          }
        }
      }
      if (done && done()) return Event::kDone;
      const auto now = Clock::now();
      if (now >= deadline) return Event::kDeadline;
      const auto wait = std::min<Clock::duration>(deadline - now, kTick);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
      timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      const int sig = sigtimedwait(&signals_, nullptr, &ts);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
        signal_ = sig;
        return Event::kSignal;
      }
    }
  }

  // Ends every process started, clients and jobs first, then the services newest first (the
  // coordinator before the groups it talks to). True when nothing is left.
  bool Shutdown() {
    stopping_ = true;
    std::vector<Proc*> order;
    for (auto it = procs_.rbegin(); it != procs_.rend(); ++it) {
      if (!(*it)->service) order.push_back(it->get());
    }
    for (auto it = procs_.rbegin(); it != procs_.rend(); ++it) {
      if ((*it)->service) order.push_back(it->get());
    }
    bool hurry = false;  // a second Ctrl-C: no more grace
    for (Proc* p : order) {
      if (!p->child.SessionAlive()) continue;
      const int n = p->child.Signal(SIGTERM);
      Say(absl::StrCat("stopping ", p->child.name(), ": SIGTERM to ", n, " process(es) of its session"));
      const auto t0 = Clock::now();
      auto gone = [p] { return !p->child.SessionAlive(); };
      if (!hurry && Wait(t0 + o_.grace, gone) == Event::kSignal) hurry = true;
      if (p->child.SessionAlive()) {
        const int k = p->child.Signal(SIGKILL);
        Say(absl::StrCat(p->child.name(), " still running after ", Seconds(Clock::now() - t0),
                         " s: SIGKILL to ", k, " process(es)"));
        Wait(Clock::now() + kAfterKill, gone);
      } else {
        Say(absl::StrCat(p->child.name(), " ended in ", Seconds(Clock::now() - t0), " s"));
      }
    }
    // Processes whose parent died came to us (subreaper): end them as well.
    for (pid_t pid : ChildrenOf(getpid())) {
      Say(absl::StrCat("ending left-behind process ", pid));
      kill(pid, SIGKILL);
    }
    Wait(Clock::now() + kAfterKill, [] { return ChildrenOf(getpid()).empty(); });
    Reap();
    bool clean = ChildrenOf(getpid()).empty();
    for (auto& p : procs_) {
      for (pid_t pid : SessionMembers(p->child.pid())) {
        Say(absl::StrCat("process ", pid, " of ", p->child.name(), " is still running"));
        clean = false;
      }
    }
    return clean;
  }

  int signal() const { return signal_; }
  Proc* died() const { return died_; }

 private:
  void Reap() {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& p : procs_) {
        if (p->child.pid() == pid) p->status = status;
      }
    }
  }

  const RunOptions& o_;
  sigset_t signals_;
  std::vector<std::unique_ptr<Proc>> procs_;
  bool stopping_ = false;
  int signal_ = 0;
  Proc* died_ = nullptr;
};

using Event = Supervisor::Event;

ExitCode Stopped(const Supervisor& s) {
  Say(absl::StrCat("signal ", s.signal(), " (", strsignal(s.signal()), "): shutting everything down"));
  return kExitOk;
}

ExitCode Died(const Supervisor& s, ExitCode code, const std::string& when) {
  const auto* p = s.died();
  Say(absl::StrCat(p->child.name(), " ended ", when, " (", DescribeStatus(*p->status), "); last lines of ",
                   p->child.log(), ":\n", TailOfFile(p->child.log(), 20)));
  return code;
}

// Runs a job (k3-synth, a client) to its end; nullopt when it could not be waited for (a signal
// or a service's death, already turned into `*code`).
std::optional<int> RunJob(Supervisor& s, const Command& c, Clock::time_point deadline, ExitCode* code,
                          ExitCode on_failure) {
  auto p = s.Start(c, /*service=*/false);
  if (!p.ok()) {
    Say(std::string(p.status().message()));
    *code = on_failure;
    return std::nullopt;
  }
  Supervisor::Proc* proc = *p;
  switch (s.Wait(deadline, [proc] { return proc->status.has_value(); })) {
    case Event::kDone: return *proc->status;
    case Event::kSignal: *code = Stopped(s); return std::nullopt;
    case Event::kDied: *code = Died(s, kExitChildDied, "while a client ran"); return std::nullopt;
    case Event::kDeadline:
      Say(absl::StrCat(c.name, " did not finish in time"));
      *code = on_failure;
      return std::nullopt;
  }
  return std::nullopt;
}

// Starts a service and waits for its READY line.
std::optional<ExitCode> StartService(Supervisor& s, const Command& c, const RunOptions& o) {
  const auto t0 = Clock::now();
  auto p = s.Start(c, /*service=*/true);
  if (!p.ok()) {
    Say(std::string(p.status().message()));
    return kExitStartFailed;
  }
  LogWatch ready(c.log, c.ready);
  switch (s.Wait(t0 + o.ready_timeout, [&ready] { return ready.Seen(); })) {
    case Event::kDone:
      Say(absl::StrCat(c.name, " is ready after ", Seconds(Clock::now() - t0), " s: ", ready.line()));
      return std::nullopt;
    case Event::kSignal: return Stopped(s);
    case Event::kDied: return Died(s, kExitStartFailed, absl::StrCat("before it said \"", c.ready, "\""));
    case Event::kDeadline:
      Say(absl::StrCat(c.name, " did not say \"", c.ready, "\" within ", Seconds(o.ready_timeout), " s; last lines of ",
                       c.log, ":\n", TailOfFile(c.log, 20)));
      return kExitStartFailed;
  }
  return kExitInternal;
}

// --smoke-test: health until the coordinator answers, then one generation, printed.
ExitCode SmokeTest(Supervisor& s, const LaunchPlan& plan, const RunOptions& o) {
  ExitCode code = kExitOk;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    auto st = RunJob(s, HealthCommand(plan, o.bin_dir), deadline, &code, kExitSmokeFailed);
    if (!st) return code;
    if (WIFEXITED(*st) && WEXITSTATUS(*st) == 0) break;
    if (Clock::now() >= deadline) {
      Say("smoke test: the coordinator never reported healthy");
      return kExitSmokeFailed;
    }
    switch (s.Wait(Clock::now() + milliseconds(500), nullptr)) {
      case Event::kSignal: return Stopped(s);
      case Event::kDied: return Died(s, kExitChildDied, "while serving");
      default: break;
    }
  }
  const Command gen = GenerateCommand(plan, o.bin_dir, o.smoke_ids, o.smoke_tokens);
  auto st = RunJob(s, gen, Clock::now() + std::chrono::seconds(300), &code, kExitSmokeFailed);
  if (!st) return code;
  const std::string out = TailOfFile(gen.log, 50);
  if (!WIFEXITED(*st) || WEXITSTATUS(*st) != 0 || out.empty()) {
    Say(absl::StrCat("smoke test failed (", DescribeStatus(*st), "):\n", out));
    return kExitSmokeFailed;
  }
  std::printf("SMOKE TEST OK: %s\n%s\n", ShellLine(Command{"", gen.argv, {}, "", ""}).c_str(), out.c_str());
  std::fflush(stdout);
  return kExitOk;
}

ExitCode Serve(Supervisor& s, const LaunchPlan& plan, const RunOptions& o) {
  if (plan.synth) {
    ExitCode code = kExitOk;
    auto st = RunJob(s, *plan.synth, Clock::time_point::max(), &code, kExitStartFailed);
    if (!st) return code;
    if (!WIFEXITED(*st) || WEXITSTATUS(*st) != 0) {
      Say(absl::StrCat("generating the model failed (", DescribeStatus(*st), "); last lines of ", plan.synth->log, ":\n",
                       TailOfFile(plan.synth->log, 20)));
      return kExitStartFailed;
    }
  }
  for (const GroupLaunch& g : plan.groups) {
    if (auto code = StartService(s, g.mpirun, o)) return *code;
  }
  if (auto code = StartService(s, plan.coordinator, o)) return *code;
  std::printf("K3-LAUNCH READY %s\n", plan.coordinator_dial.c_str());
  std::fflush(stdout);
  if (o.smoke_test) return SmokeTest(s, plan, o);
  const auto until = o.serve_for.count() > 0 ? Clock::now() + o.serve_for : Clock::time_point::max();
  switch (s.Wait(until, nullptr)) {
    case Event::kSignal: return Stopped(s);
    case Event::kDied: return Died(s, kExitChildDied, "while serving");
    default:
      Say(absl::StrCat("served for ", Seconds(o.serve_for), " s: shutting everything down"));
      return kExitOk;
  }
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status PrepareFiles(const LaunchPlan& plan) {
  std::error_code ec;
  std::filesystem::create_directories(plan.log_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create the log dir ", plan.log_dir, ": ", ec.message()));
  if (plan.synth) {
    const auto dir = std::filesystem::path(plan.model).parent_path();
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  for (const GroupLaunch& g : plan.groups) {
    if (absl::Status st = WriteFile(g.app_file, g.app_text); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

void BlockLauncherSignals() {
  const sigset_t set = LauncherSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

ExitCode RunLaunch(const LaunchPlan& plan, const RunOptions& o) {
  if (absl::Status st = PrepareFiles(plan); !st.ok()) {
    Say(std::string(st.message()));
    return kExitInternal;
  }
  // Orphans (ranks of an mpirun that died) become our children, so we can end and reap them.
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) Say("warning: cannot become a child subreaper");
  Supervisor s(o);
  const ExitCode code = Serve(s, plan, o);
  if (!s.Shutdown()) {
    Say("some processes could not be ended");
    return kExitLeftovers;
  }
  Say(absl::StrCat("everything has ended; exit code ", static_cast<int>(code), "; logs in ", plan.log_dir));
  return code;
}

}  // namespace k3::launch
