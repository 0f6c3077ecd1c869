// The real `topodra run` binary as a child process of a test, on directories of its own (kubelet
// root, CDI, state) so tests never touch /var/lib and can run in parallel.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace topodra::testing {

struct DaemonDirs {
  std::string root;  // a fresh temporary directory holding the others
  std::string kubelet_root;
  std::string cdi;
  std::string state;
  // Short: Unix socket paths must fit in 107 bytes.
  static DaemonDirs Make();
};

class Daemon {
 public:
  Daemon() = default;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon();  // SIGKILL if still running

  // Runs `topodra run <dir flags> <extra>`; stderr goes to a log file. Every path flag the daemon
  // writes under (kubelet root, CDI, state, cgroup root, hook dir) defaults to a directory of
  // `dirs`, and one given in `extra` outside /tmp, /dev/shm or `dirs` aborts the test. Pinning
  // is off (--enforce none), metrics and reservations too, unless `extra` says otherwise.
  void Start(const DaemonDirs& dirs, const std::vector<std::string>& extra);
  // Another `topodra` binary than this build's for the next starts (benchmarks comparing two
  // builds); "" for this build's.
  void SetBinary(std::string path) { binary_ = std::move(path); }
  // SIGTERM and wait; returns the exit code (128+signal when killed).
  int Terminate();
  // SIGKILL and wait: a crash at an arbitrary moment.
  void Kill();
  // Waits for the process to exit on its own (up to 20 s); its exit code, or -1.
  int WaitExit();
  bool Running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  std::string Log() const;
  // VmRSS from /proc/<pid>/status, in KiB (0 when unknown).
  long RssKib() const;

 private:
  pid_t pid_ = -1;
  std::string log_;
  std::string binary_;
};

}  // namespace topodra::testing
