#include "launch/child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace k3::launch {
namespace {

struct ProcStat {
  char state = '?';
  pid_t ppid = 0, pgrp = 0, session = 0;
};

// /proc/PID/stat: "pid (comm) state ppid pgrp session ..."; comm may hold spaces and ')'.
bool ReadStat(pid_t pid, ProcStat* st) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  rest >> st->state >> st->ppid >> st->pgrp >> st->session;
  return static_cast<bool>(rest);
}

template <typename Pred>
std::vector<pid_t> ScanProc(Pred pred) {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    pid_t pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    ProcStat st;
    if (ReadStat(pid, &st) && st.state != 'Z' && st.state != 'X' && pred(pid, st)) out.push_back(pid);
  }
  closedir(dir);
  return out;
}

// The launcher's environment with the command's variables set over it.
std::vector<std::string> MergedEnv(const EnvList& add) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view kv(*e);
    const std::string_view key = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : add) replaced = replaced || key == k;
    if (!replaced) env.emplace_back(kv);
  }
  for (const auto& [k, v] : add) env.push_back(absl::StrCat(k, "=", v));
  return env;
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Start(const Command& command) {
  if (command.argv.empty()) return absl::InvalidArgumentError(absl::StrCat(command.name, ": empty command"));
  const int log = open(command.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError(absl::StrCat("cannot write ", command.log, ": ", std::strerror(errno)));
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int exec_pipe[2];  // closes on a successful exec; carries errno when exec fails
  if (devnull < 0 || pipe2(exec_pipe, O_CLOEXEC) != 0) {
    close(log);
    return absl::InternalError(absl::StrCat("pipe/open: ", std::strerror(errno)));
  }
  // Everything the child touches is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> env = MergedEnv(command.env);
  std::vector<char*> argv, envp;
  for (const std::string& a : command.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(log), close(devnull), close(exec_pipe[0]), close(exec_pipe[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    setsid();  // own session and process group: Ctrl-C at the terminal reaches only the launcher
    dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the launcher's blocked signals would be inherited
    execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    [[maybe_unused]] ssize_t n = write(exec_pipe[1], &err, sizeof err);
    _exit(127);
  }
  close(log);
  close(devnull);
  close(exec_pipe[1]);
  int err = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof err)) {
    // The child exits at once; the launcher's reaper collects it.
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", command.argv[0], ": ", std::strerror(err)));
  }
  ChildProcess c;
  c.name_ = command.name;
  c.log_ = command.log;
  c.pid_ = pid;
  return c;
}

int ChildProcess::Signal(int sig) const {
  int n = 0;
  if (kill(-pid_, sig) == 0) ++n;  // the process group first (the child itself)
  for (pid_t p : SessionMembers(pid_)) {
    if (p != pid_ && kill(p, sig) == 0) ++n;  // then ranks in process groups of their own
  }
  return n;
}

bool ChildProcess::SessionAlive() const { return !SessionMembers(pid_).empty(); }

std::vector<pid_t> SessionMembers(pid_t sid) {
  return ScanProc([sid](pid_t, const ProcStat& st) { return st.session == sid; });
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  return ScanProc([parent](pid_t, const ProcStat& st) { return st.ppid == parent; });
}

}  // namespace k3::launch
