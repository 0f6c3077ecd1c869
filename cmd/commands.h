// Subcommands as plain functions of parsed options, so main.cc is the only file that sees CLI11
// and each command can be tested without a command line.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "driver/publish/device_builder.h"
#include "topology/discoverer.h"

namespace topodra::cmd {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the work itself failed (e.g. the live machine)
inline constexpr int kExitUsage = 2;    // bad flags or bad input named on the command line

struct TopologyFlags {
  std::optional<std::string> file;       // --topology-file
  std::optional<std::string> synthetic;  // --topology-synthetic (given but empty is an error)
};

topology::TopologySource SourceFromFlags(const TopologyFlags& flags);
// Discovers the machine the flags name. On failure prints one line for `command` and sets
// *exit_code: 2 for a bad file or description (the user's input), 1 for the live machine.
std::optional<topology::Topology> DiscoverOrReport(const TopologyFlags& flags, const char* command,
                                                   std::ostream& err, int* exit_code);

struct TopologyCommand {
  TopologyFlags topology;
  std::string output = "text";  // text | json
};

int RunTopology(const TopologyCommand& cmd, std::ostream& out, std::ostream& err);

// Flags that decide what the node publishes; shared by `slices` and `run`.
struct PublishFlags {
  std::string node_name;  // empty: $NODE_NAME, else the host name
  std::string cpu_driver = "dra.cpu";
  std::string gpu_driver = "gpu.topodra.io";
  std::string cpu_device_mode = "grouped";
  std::string group_by = "numa";
  std::string reserved_cpus;
  std::string gpus = "auto";  // auto | none
  // Alpha-gated fields (auto | on | off). `slices` has no server to ask: auto prints what a
  // server without the feature gets, on prints the field (node allocatable: the 1.37 shape).
  std::string list_attributes = "auto";
  std::string node_allocatable_mapping = "off";
};

// Resolves and checks the flags against the machine; errors name the flag and value.
absl::StatusOr<publish::PublishOptions> PublishOptionsFromFlags(const PublishFlags& flags,
                                                                const topology::Topology& topo);
std::string DefaultNodeName();

struct SlicesCommand {
  TopologyFlags topology;
  PublishFlags publish;
  bool flatten = false;
  std::string output = "json";  // json | yaml
};
int RunSlices(const SlicesCommand& cmd, std::ostream& out, std::ostream& err);

struct ReservationsCommand {
  std::string state_dir = "/var/lib/topodra";
  std::string output = "text";  // text | json
};
// The node's reservations and what they hold, from the daemon's state (read-only, while it runs).
int RunReservations(const ReservationsCommand& cmd, std::ostream& out, std::ostream& err);

struct FlattenCommand {
  std::string file;  // path or "-" for stdin
  std::string output = "json";
};
struct RunCommand {
  TopologyFlags topology;
  PublishFlags publish;
  std::string kubeconfig;  // empty: $KUBECONFIG, else in-cluster
  std::string slice_mixins = "auto";
  int topology_refresh_seconds = 30;
  // --topology-cache: "on" starts from the machine model stored in --state-dir when it is proved
  // current, confirming it in the background; "off" discovers at every start.
  std::string topology_cache = "on";
  std::string log_format = "text";  // text | json
  int verbosity = 0;
  std::string kubelet_root_dir = "/var/lib/kubelet";
  std::string cdi_dir = "/var/run/cdi";
  std::string state_dir = "/var/lib/topodra";
  // Where GPU device nodes are looked up (/sys, /dev, /proc); a test points them elsewhere.
  std::string host_root = "/";
  // The legacy device-plugin API: "none", "gpu", "cpu", "gpu,cpu".
  std::string device_plugin = "none";
  std::string device_plugin_gpu_resource = "topodra.io/gpu";
  std::string device_plugin_cpu_resource = "topodra.io/cpu";
  double device_plugin_reclaim_seconds = 10;
  std::string pod_resources_socket;  // empty: <kubelet_root_dir>/pod-resources/kubelet.sock
  // A device plugin whose resource a DeviceClass maps (extendedResourceName) is not served:
  // auto, on (a failed DeviceClass list at start is an error), off.
  std::string extended_resource_check = "auto";
  // CPU pinning: "cgroup" (the OCI hook and the shared-pool reconciler) or "none" (CDI env only).
  // Unset: cgroup on the live machine, none on a simulated one (see enforcement.h).
  std::optional<std::string> enforce;
  std::string cgroup_root = "/sys/fs/cgroup";
  // --strict-cpu-reservation: --reserved-cpus are kept out of the shared pool too (the kubelet's
  // strict-cpu-reservation option); off, they stay in it, as the kubelet's static policy has it.
  bool strict_cpu_reservation = false;
  // --numa-memory: "claim" (with cgroup enforcement, containers of CPU claims get the claims' NUMA
  // nodes as cpuset.mems) or "none" (cpuset.mems is left alone).
  std::string numa_memory = "claim";
  // Where the hook binary is installed on the host (the same path inside the daemon's pod).
  std::string hook_dir = "/opt/topodra/bin";
  // /metrics, /healthz and /readyz: ":port", "host:port", or "" / "none" for no endpoints.
  std::string metrics_address = ":9477";
  // /healthz and /readyz alone, for the kubelet's probes: loopback unless told otherwise, so the
  // network cannot reach the liveness probe (docs/user/security.md). Same forms; "none" for none.
  std::string health_address = "127.0.0.1:9478";
  // Reservations (topodra.io/v1alpha1): "on" watches this node's and holds what they ask for.
  std::string reservations = "on";
  // Taint reserved devices (DRADeviceTaints): auto (when the API server keeps them), on, off.
  std::string reservation_taints = "auto";
  std::string dra_health = "on";
  std::string device_metadata = "on";
  // Host directory under which <driver>/dra-device-metadata/... is written; "" for
  // <kubelet_root_dir>/plugins.
  std::string device_metadata_dir;
};
// The node daemon: publishes this node's ResourceSlices and serves the kubelet (DRA plugin per
// driver) until SIGTERM or SIGINT.
// `topodra run ...` execs topodra-daemon (kDaemonName, next to the binary) with the same
// arguments; returns only when it cannot (an error line on err).
int ExecDaemon(char** argv, std::ostream& err);
// The daemon itself, in topodra-daemon.
int RunDaemonInProcess(const RunCommand& cmd, std::ostream& err);
inline constexpr char kDaemonName[] = "topodra-daemon";

int RunFlatten(const FlattenCommand& cmd, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace topodra::cmd
