// The machine model the daemon discovered, kept in its state directory so that the next start
// on the same machine and boot begins from it instead of from hwloc (--topology-cache=on). On a
// 12,800-CPU machine hwloc takes longer than everything else of an empty start together; reading
// this file takes a few milliseconds.
//
// The stored model is only ever a head start: it is used when its key, read again at start,
// matches (same boot, same discovery inputs, same live fingerprints), and the daemon then
// discovers the machine at once in the background (the machine watch's first turn), through
// the same path as a change found by --topology-refresh. Anything the key does not see (a NUMA
// node's memory grown by memory hotplug, a GPU's driver bound with no other change) is
// corrected there.
//
// The file, topology-cache (0600 in the 0700 state directory, replaced atomically like the state
// files):
//   topodra-topology-cache <version>
//   checksum <8 hex digits: CRC-32C of every byte after this line>
//   key <name> <value, C-escaped>          (one line per key entry, in MachineKey's order)
//   model
//   <topology::EncodeTopology text>
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/discoverer.h"
#include "topology/topology.h"

namespace topodra::node {

// Bump when Topology or the text of topology_codec.h changes: a file of the old layout is then
// refused as another version rather than misread (the executable in the key does not cover a
// build that reproduces the same binary from other sources).
inline constexpr int kTopologyCacheVersion = 1;
inline constexpr char kTopologyCacheFile[] = "topology-cache";
// The file of restart_bench's 12,800 CPUs is 426 kB (topology_cache_test prints it): room for a
// machine 7 times larger, and a stray file is not read whole.
inline constexpr size_t kMaxTopologyCacheBytes = 3 << 20;

// What proves a stored model is the machine a discovery would find now. Entries in a fixed order,
// each a name (no spaces) and a value.
struct MachineKey {
  std::vector<std::pair<std::string, std::string>> entries;
  bool operator==(const MachineKey&) const = default;
};
// For the log: the first entry that differs, `<name> "<stored>" is now "<now>"`, shortened.
std::string KeyDifference(const MachineKey& stored, const MachineKey& now);

struct MachineKeyInputs {
  topology::TopologySource source;
  std::string version;     // the daemon's: another build may discover differently
  std::string discoverer;  // topology::DiscovererVersion()
  // "NAME=value" of every HWLOC_* variable of the environment, which hwloc reads.
  std::vector<std::string> hwloc_environment;
  // The daemon's own binary ("/proc/self/exe"): its size, time and inode are in the key, so
  // another build on the same boot does not take this one's model. Empty: none (tests).
  std::string executable;
  // Where /proc and /sys are read: "/" for the daemon (hwloc reads its own /sys, not
  // --host-root's); a test's fake tree otherwise.
  std::string root = "/";
};
// The HWLOC_* variables of this process's environment, sorted.
std::vector<std::string> HwlocEnvironment();

// Reads the key now. Always: the daemon and discoverer versions, the executable, the source, the
// HWLOC_* variables and /proc/sys/kernel/random/boot_id (a reboot may change anything). An XML
// file: its size, modification time and CRC-32C. The live machine: CPUs online and present, NUMA
// nodes online, and the names of the PCI and DRM devices (their count and CRC-32C). A file that
// cannot be read is an error (the model cannot be proved current); one the kernel does not have
// (no NUMA support) is the value "absent".
absl::StatusOr<MachineKey> ReadMachineKey(const MachineKeyInputs& inputs);

// The file, pure. DecodeTopologyCache: FailedPrecondition for another version, DataLoss for a
// damaged, torn or malformed file (checksum, a key line, the model: see
// topology::DecodeTopology). Messages do not name the file; TopologyCache adds it.
std::string EncodeTopologyCache(const MachineKey& key, const topology::Topology& topo);
struct StoredTopology {
  MachineKey key;
  topology::Topology topology;
};
absl::StatusOr<StoredTopology> DecodeTopologyCache(absl::string_view text);

// The file in a state directory.
class TopologyCache {
 public:
  TopologyCache(std::string state_dir, MachineKeyInputs inputs);

  const std::string& path() const { return path_; }
  absl::StatusOr<MachineKey> ReadKey() const { return ReadMachineKey(inputs_); }
  // The stored model when it was stored under `key`. NotFound: no file; FailedPrecondition:
  // stored under another key (the message says which entry differs) or another version;
  // DataLoss: damaged. Never touches the file.
  absl::StatusOr<topology::Topology> Load(const MachineKey& key) const;
  // Temporary file, fsync, rename, directory fsync: a crash leaves the old file or the new one.
  // First removes the temporary files an earlier crash left.
  absl::Status Store(const MachineKey& key, const topology::Topology& topo) const;

 private:
  std::string dir_;
  std::string path_;
  MachineKeyInputs inputs_;
};

// How `topodra run` finds the machine at start.
struct StartTopology {
  topology::Topology topology;
  // From the file: the caller confirms it with a discovery in the background.
  bool from_cache = false;
  // Read before the model was found, to store it with; nullopt when the cache is off or the key
  // could not be read.
  std::optional<MachineKey> key;
  // One line for the log: where the model came from, and why not from the file.
  std::string note;
};
// From `cache` when its key matches, else `discover()` (whose error is returned as is). A null
// cache is --topology-cache=off.
absl::StatusOr<StartTopology> FindTopologyAtStart(
    const TopologyCache* cache,
    const std::function<absl::StatusOr<topology::Topology>()>& discover);

}  // namespace topodra::node
