#include "test/integration/daemon.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace topodra::testing {

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
  std::vector<std::string> args = {TOPODRA_BINARY,    "run",       "--kubelet-root-dir",
                                   dirs.kubelet_root, "--cdi-dir", dirs.cdi,
                                   "--state-dir",     dirs.state};
  // Tests never pin the machine's real cgroups or install the hook in /opt: enforcement only where
  // a test asks for it (on a fake cgroup tree).
  if (std::find(extra.begin(), extra.end(), "--enforce") == extra.end()) {
    args.push_back("--enforce");
    args.push_back("none");
  }
  // Tests run many daemons at once: no endpoints on the default port unless a test asks.
  if (std::find(extra.begin(), extra.end(), "--metrics-address") == extra.end()) {
    args.push_back("--metrics-address");
    args.push_back("none");
  }
  // Reservations need their CRD on the fake API server: only where a test serves it.
  if (std::find(extra.begin(), extra.end(), "--reservations") == extra.end()) {
    args.push_back("--reservations");
    args.push_back("off");
  }
  args.insert(args.end(), extra.begin(), extra.end());
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
