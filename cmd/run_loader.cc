// `topodra run` is a program of its own, topodra-daemon, next to the binary: the other commands
// then never load gRPC, OpenSSL and spdlog, and the daemon can link gRPC, abseil, protobuf and re2
// statically (cmd/CMakeLists.txt), which a loadable module could not.
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ostream>
#include <string>

#include "cmd/commands.h"

namespace topodra::cmd {
namespace {

// Empty when /proc/self/exe cannot be read whole: a daemon looked up elsewhere (the current
// directory) could be any binary.
std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf));
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) return "";
  const std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

int ExecDaemon(char** argv, std::ostream& err) {
  // Next to the binary: the daemon installs the CPU pinning hook from its own directory too.
  const std::string dir = ExecutableDir();
  if (dir.empty()) {
    err << "topodra run: error: cannot find the daemon " << kDaemonName
        << ": /proc/self/exe does not name this binary's directory\n";
    return kExitFailure;
  }
  const std::string path = dir + "/" + kDaemonName;
  // The same argv (argv[0] stays "topodra", which usage lines name) and environment: the
  // daemon parses `run` and its flags itself. The process (and its pid) stays the same.
  ::execv(path.c_str(), argv);
  const int e = errno;
  err << "topodra run: error: cannot start the daemon \"" << path << "\": " << std::strerror(e)
      << "\n";
  return kExitFailure;
}

}  // namespace topodra::cmd
