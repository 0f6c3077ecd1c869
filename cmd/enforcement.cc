#include "cmd/enforcement.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace topodra::cmd {
namespace {

// The path without "." and ".." steps or a trailing slash (no file system access: the checks are
// about what the flags say).
std::string Normal(const std::string& path) {
  std::string p = std::filesystem::path(path).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

bool AtOrBelow(const std::string& path, const std::string& dir) {
  const std::string p = Normal(path);
  return p == dir || p.starts_with(dir + "/");
}

}  // namespace

absl::StatusOr<Enforcement> ResolveEnforcement(const RunCommand& cmd) {
  const char* simulated = cmd.topology.file        ? "--topology-file"
                          : cmd.topology.synthetic ? "--topology-synthetic"
                                                   : nullptr;
  if (simulated == nullptr) return Enforcement{cmd.enforce.value_or("cgroup"), ""};
  if (!cmd.enforce) {
    return Enforcement{
        "none",
        absl::StrCat("CPU pinning is off (--enforce=none): the machine is simulated (", simulated,
                     "), its CPUs are not this host's; --enforce=cgroup with a "
                     "--cgroup-root and --hook-dir of a fake tree pins there")};
  }
  if (*cmd.enforce != "cgroup") return Enforcement{*cmd.enforce, ""};
  const std::string why = absl::StrCat("--enforce=cgroup with a simulated machine (", simulated,
                                       ") would pin the host's containers to CPUs of a machine "
                                       "that is not there: ");
  if (AtOrBelow(cmd.cgroup_root, kHostCgroupRoot)) {
    return absl::InvalidArgumentError(
        absl::StrCat(why, "--cgroup-root \"", cmd.cgroup_root, "\" is the host's cgroup tree (",
                     kHostCgroupRoot, "); point it at a fake tree, or use --enforce=none"));
  }
  if (Normal(cmd.hook_dir) == kHostHookDir) {
    return absl::InvalidArgumentError(
        absl::StrCat(why, "--hook-dir \"", cmd.hook_dir, "\" is the host's hook directory (",
                     kHostHookDir, "); give a directory of its own, or use --enforce=none"));
  }
  return Enforcement{"cgroup", ""};
}

}  // namespace topodra::cmd
