// `topodra run` loads the daemon from a module next to the binary: the other commands then never
// load gRPC, libcurl and spdlog (see cmd/CMakeLists.txt).
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <ostream>
#include <string>
#include <vector>

#include "cmd/commands.h"

namespace topodra::cmd {
namespace {

std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

int RunDaemon(const RunCommand& cmd, std::ostream& err) {
  const std::string dir = ExecutableDir();
  const std::vector<std::string> candidates = {dir + "/" + kRunModuleName,
                                               dir + "/../lib/topodra/" + kRunModuleName};
  std::string errors;
  for (const std::string& path : candidates) {
    if (::access(path.c_str(), R_OK) != 0) continue;
    void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      const char* e = ::dlerror();
      errors += std::string("; ") + (e != nullptr ? e : path);
      continue;
    }
    using Entry = int (*)(const RunCommand*, std::ostream*);
    auto entry = reinterpret_cast<Entry>(::dlsym(module, kRunModuleEntry));
    if (entry == nullptr) {
      errors += "; " + path + " has no " + kRunModuleEntry;
      continue;
    }
    // Never dlclosed: the daemon's threads and static objects live in it until exit.
    return entry(&cmd, &err);
  }
  err << "topodra run: error: cannot load the daemon module " << kRunModuleName << " (looked in "
      << candidates[0] << " and " << candidates[1] << errors << ")\n";
  return kExitFailure;
}

}  // namespace topodra::cmd
