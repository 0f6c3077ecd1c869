// The node daemon's start-up I/O, before anything serves: its directories, the instance locks,
// the allocation state, the CPU pinning hook. Errors are the daemon's last log line.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/cgroup/cgroupfs.h"
#include "driver/node/config.h"
#include "driver/plugin/instance_lock.h"
#include "driver/prepare/planner.h"
#include "driver/state/store.h"

namespace topodra::node {

// Every directory the daemon writes (or puts its sockets in), created where missing and refused
// when another user could swap what is in it.
absl::Status PrepareOwnedDirectories(const NodeConfig& config);

// One instance per node: the state, the kubelet sockets and the device metadata directory are
// not to be shared. [0] is the state directory's lock, [1] the CPU driver's plugin directory's,
// [2] (with a --device-metadata-dir of its own) the CPU driver's directory there.
absl::StatusOr<std::vector<std::unique_ptr<plugin::InstanceLock>>> AcquireInstanceLocks(
    const NodeConfig& config);

// `dir` absolute and without ".", ".." or trailing slashes, spelled alike however the flag was
// (the CDI instance marker hashes it). Symbolic links are left unresolved: the marker must not
// change when a link is repointed.
std::string AbsoluteDir(const std::string& dir);

// The state directory's checkpoint and journal. A state without them while this instance's CDI
// files remain was lost, not new: that is an error, as is a corrupt state file (guessing would
// hand CPUs out twice).
absl::StatusOr<state::StateStore::Opened> OpenState(const NodeConfig& config,
                                                    const std::string& cdi_marker);

// --enforce=cgroup: the cgroup hierarchy found, the hook installed, its records' directory.
struct PinningSetup {
  cgroup::Hierarchy hierarchy;
  std::string records_dir;
  prepare::CpusetHook hook;
};
// nullopt for --enforce=none.
absl::StatusOr<std::optional<PinningSetup>> PreparePinning(const NodeConfig& config);

}  // namespace topodra::node
