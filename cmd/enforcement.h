// Which CPU pinning `topodra run` applies. Pinning writes the host's cgroups and installs the hook
// on the host: with a simulated machine (--topology-file, --topology-synthetic) its CPU ids are
// not the host's, so there pinning is off unless asked for, and then only on a cgroup tree and
// hook directory that are not the host's (a test's fake tree). Pure: decides from the flags only.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "cmd/commands.h"

namespace topodra::cmd {

inline constexpr char kHostCgroupRoot[] = "/sys/fs/cgroup";
inline constexpr char kHostHookDir[] = "/opt/topodra/bin";

struct Enforcement {
  std::string mode;  // "cgroup" or "none"
  std::string note;  // for the start-up log when the mode is not what --enforce said, else ""
};

// InvalidArgument (a usage error, naming the flags) for --enforce=cgroup on a simulated machine
// with the host's --cgroup-root (or a cgroup below it) or the default --hook-dir.
absl::StatusOr<Enforcement> ResolveEnforcement(const RunCommand& cmd);

}  // namespace topodra::cmd
