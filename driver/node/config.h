// What `topodra run` was told, typed and checked once: the node daemon (node.h) reads nothing
// else. cmd/ turns flags and --config files into it; nothing here knows about flags except the
// names errors use to point at the offending one.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "driver/deviceclass/extended_resources.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_publisher.h"
#include "topology/topology.h"

namespace topodra::node {

// --enforce: how CPU claims are pinned.
enum class Enforce {
  kCgroup,  // the OCI hook in CPU claims' CDI specs and the shared-pool reconciler
  kNone,    // the CDI environment only
};
absl::StatusOr<Enforce> ParseEnforce(const std::string& s);  // cgroup | none
const char* EnforceName(Enforce e);

// --device-plugin: which resources are also served through the kubelet's device-plugin API.
enum class DevicePluginKind { kGpu, kCpu };
// none | gpu | cpu | gpu,cpu | cpu,gpu
absl::StatusOr<std::set<DevicePluginKind>> ParseDevicePlugins(const std::string& s);

struct DevicePluginConfig {
  std::set<DevicePluginKind> kinds;  // empty: --device-plugin=none
  std::string gpu_resource = "topodra.io/gpu";
  std::string cpu_resource = "topodra.io/cpu";
  absl::Duration reclaim_interval = absl::Seconds(10);
  std::string pod_resources_socket;  // empty: <kubelet root>/pod-resources/kubelet.sock
  // --extended-resource-check: a device plugin whose resource a DeviceClass maps is not served.
  deviceclass::CheckMode extended_resource_check = deviceclass::CheckMode::kAuto;

  bool serves(DevicePluginKind k) const { return kinds.contains(k); }
  const std::string& resource(DevicePluginKind k) const {
    return k == DevicePluginKind::kGpu ? gpu_resource : cpu_resource;
  }
};

struct NodeConfig {
  // Node name, driver names, CPU device mode and grouping, --reserved-cpus, --gpus.
  publish::PublishOptions publish;
  publish::MixinMode slice_mixins = publish::MixinMode::kAuto;
  publish::TaintMode reservation_taints = publish::TaintMode::kAuto;
  publish::FeatureMode list_attributes = publish::FeatureMode::kAuto;  // --list-attributes
  publish::FeatureMode node_allocatable = publish::FeatureMode::kOff;  // --node-allocatable-mapping
  bool reservations = true;                                            // --reservations=on
  // --dra-health=on: serve the kubelet's DRAResourceHealth streams (v1 and v1alpha1) with the
  // devices' health; off: advertise neither, calls get UNIMPLEMENTED.
  bool dra_health = true;
  // --device-metadata=on: a metadata file per prepared claim and request (KEP-5304). No "auto":
  // the feature has no gate and the kubelet says nothing of it; a runtime without CDI ignores it.
  bool device_metadata = true;
  absl::Duration topology_refresh = absl::Seconds(30);

  std::string kubelet_root_dir = "/var/lib/kubelet";
  std::string cdi_dir = "/var/run/cdi";
  std::string state_dir = "/var/lib/topodra";
  std::string host_root = "/";
  // --device-metadata-dir, normalized (ParseHostDir): the host directory the device metadata
  // files go under (<dir>/<driver>/dra-device-metadata/...). "": <kubelet_root_dir>/plugins.
  std::string device_metadata_dir;

  DevicePluginConfig device_plugin;

  Enforce enforce = Enforce::kCgroup;
  // For the start-up log when the mode is not what --enforce said (cmd/enforcement.h), else "".
  std::string enforce_note;
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string hook_dir = "/opt/topodra/bin";
  bool strict_cpu_reservation = false;
  // --numa-memory=claim (only with Enforce::kCgroup): cpuset.mems follows the claims' CPUs.
  bool numa_memory = true;

  // --metrics-address and --health-address as given (for logs), and what to listen on
  // (metrics::ListeningPortsFor; nullopt: not served).
  std::string metrics_address = ":9477";
  std::string health_address = "127.0.0.1:9478";
  std::optional<std::string> metrics_listen;
  std::optional<std::string> health_listen;

  // For the start-up line and the metrics' build info.
  std::string version;
  std::string api_server;
};

// The checks that need more than one field or the machine: the publishing options against the
// topology (publish::ValidateOptions), the device plugins' resource names (the kubelet's rules
// for an extended resource name plus CDI's for a kind), the intervals. InvalidArgument naming
// the flag and the offending value.
absl::Status Validate(const NodeConfig& config, const topology::Topology& topo);

// A host directory flag: "" stays "" (the default), anything else must be an absolute path and
// comes back lexically normal without a trailing slash. The daemon tells its files by the prefix
// of their paths, which must not depend on how the flag was spelled.
absl::StatusOr<std::string> ParseHostDir(const std::string& dir);
// `dir` lexically normal without a trailing slash ("" stays ""), relative or not: the paths
// built from it (<kubelet root>/plugins) must name a directory one way only.
std::string NormalDir(const std::string& dir);

// The kubelet's rules for an extended resource name (it refuses Register otherwise), plus CDI's
// for a kind: the name is also the CDI kind of the allocations' specs.
absl::Status ValidateResourceName(const std::string& name);

}  // namespace topodra::node
