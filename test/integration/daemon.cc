#include "test/integration/daemon.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

namespace topodra::testing {
namespace {

bool HasFlag(const std::vector<std::string>& args, const std::string& flag) {
  return std::any_of(args.begin(), args.end(),
                     [&](const std::string& a) { return a == flag || a.starts_with(flag + "="); });
}

// A test that points the daemon at a host path (its default, or a typo) stops here, loudly,
// before the daemon writes there.
void CheckPathsAreTemporary(const std::vector<std::string>& args, const std::string& root) {
  static const char* const kWritten[] = {"--kubelet-root-dir",   "--cdi-dir",
                                         "--state-dir",          "--cgroup-root",
                                         "--hook-dir",           "--pod-resources-socket",
                                         "--device-metadata-dir"};
  for (size_t i = 0; i < args.size(); ++i) {
    for (const char* flag : kWritten) {
      std::string value;
      if (args[i] == flag && i + 1 < args.size()) {
        value = args[i + 1];
      } else if (args[i].starts_with(std::string(flag) + "=")) {
        value = args[i].substr(std::strlen(flag) + 1);
      } else {
        continue;
      }
      if (value.starts_with(root + "/") || value.starts_with("/tmp/") ||
          value.starts_with("/dev/shm/")) {
        continue;
      }
      std::fprintf(stderr, "test daemon: %s \"%s\" is not a temporary directory of the test\n",
                   flag, value.c_str());
      std::abort();
    }
  }
}

}  // namespace

DaemonDirs DaemonDirs::Make() {
  char tmpl[] = "/tmp/tdd-XXXXXX";
  DaemonDirs d;
  d.root = ::mkdtemp(tmpl) != nullptr ? tmpl : "/tmp";
  d.kubelet_root = d.root + "/k";
  d.cdi = d.root + "/cdi";
  d.state = d.root + "/state";
  return d;
}

Daemon::~Daemon() {
  if (pid_ > 0) Kill();
}

void Daemon::Start(const DaemonDirs& dirs, const std::vector<std::string>& extra) {
  static int counter = 0;
  log_ = dirs.root + "/daemon-" + std::to_string(counter++) + ".log";
  std::vector<std::string> args = {binary_.empty() ? TOPODRA_BINARY : binary_,
                                   "run",
                                   "--kubelet-root-dir",
                                   dirs.kubelet_root,
                                   "--cdi-dir",
                                   dirs.cdi,
                                   "--state-dir",
                                   dirs.state};
  // Tests never pin the machine's real cgroups or install the hook in /opt: enforcement only where
  // a test asks for it (on a fake cgroup tree).
  if (!HasFlag(extra, "--enforce")) {
    args.push_back("--enforce");
    args.push_back("none");
  }
  // Tests run many daemons at once: no endpoints on the default ports unless a test asks.
  for (const char* flag : {"--metrics-address", "--health-address"}) {
    if (!HasFlag(extra, flag)) {
      args.push_back(flag);
      args.push_back("none");
    }
  }
  // Every path the daemon writes is the test's, also where a test turns pinning on: never the
  // host's cgroups or /opt/topodra/bin.
  for (const auto& [flag, dir] :
       {std::pair<std::string, std::string>{"--cgroup-root", "/cgroup"}, {"--hook-dir", "/hook"}}) {
    if (!HasFlag(extra, flag)) {
      args.push_back(flag);
      args.push_back(dirs.root + dir);
    }
  }
  // Reservations need their CRD on the fake API server: only where a test serves it.
  if (!HasFlag(extra, "--reservations")) {
    args.push_back("--reservations");
    args.push_back("off");
  }
  args.insert(args.end(), extra.begin(), extra.end());
  CheckPathsAreTemporary(args, dirs.root);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    if (std::freopen(log_.c_str(), "w", stderr) == nullptr) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
}

int Daemon::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void Daemon::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int Daemon::WaitExit() {
  if (pid_ <= 0) return -1;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string Daemon::Log() const {
  std::ifstream in(log_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

long Daemon::RssKib() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

}  // namespace topodra::testing
