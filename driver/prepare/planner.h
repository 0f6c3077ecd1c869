// What preparing one claim means, as a pure function: the allocated ResourceClaim, the node's
// devices and who already holds what go in; the CPUs and GPUs the claim gets, the devices the
// kubelet is told about and the CDI spec to write come out. No I/O, no clock: ClaimService does
// the GET, the file writes and the locking around it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cdi/reconcile.h"
#include "cdi/spec.h"
#include "driver/allocation/cpu_allocator.h"
#include "driver/claims/allocation_result.h"
#include "driver/claims/cpu_config.h"
#include "driver/prepare/device_metadata.h"
#include "driver/state/state.h"
#include "nlohmann/json.hpp"
#include "topology/topology.h"

namespace topodra::prepare {

enum class DriverKind { kCpu, kGpu };

// A GPU as prepare needs it: what identifies it and what a container must see of it.
struct GpuDevice {
  std::string pci_bus_id;
  std::vector<cdi::DeviceNode> device_nodes;  // resolved on the host; may be empty
};

// The OCI hook that pins the containers of a CPU claim to its CPUs (--enforce=cgroup); see
// cmd/cpuset_hook.cc and driver/cgroup.
struct CpusetHook {
  std::string path;         // the hook binary, as the host (the runtime) sees it
  std::string records_dir;  // where it records which container holds which claim
  std::string cgroup_root;  // the host's cgroup mount
  // --strict-cpu-reservation: the reserved CPUs are kept out of the shared pool too. Off (the
  // kubelet's default), they stay in it: never handed out exclusively, but shared.
  bool strict_cpu_reservation = false;
  // --numa-memory=claim: claims record their memory nodes and the hook sets cpuset.mems.
  bool numa_memory = false;
  bool operator==(const CpusetHook&) const = default;
};
// The createRuntime hook for the containers of `claim_id` (a claim UID, or a device-plugin
// allocation id) holding `cpus`, and with `mems` not empty, their memory on those NUMA nodes.
cdi::Hook CpusetHookFor(const CpusetHook& hook, const std::string& claim_id, const CpuSet& cpus,
                        const CpuSet& mems = {});
// The CPUs every container without a CPU claim runs on: online - every prepared claim and
// device-plugin allocation, and - reserved only with `strict` (--strict-cpu-reservation). As
// with the kubelet's static CPU manager, reserved CPUs are never handed out exclusively but stay
// shared unless the reservation is strict.
CpuSet SharedPool(const CpuSet& online, const CpuSet& reserved, bool strict, const CpuSet& held);
// With enforcement on, a claim may not take the last CPUs of the shared pool: every container
// without a claim runs there. FailedPrecondition naming the values when `taking` would empty it;
// `what` starts the message.
absl::Status KeepSharedPool(const std::string& what, const topology::Topology& topo,
                            const CpuSet& reserved, bool strict, const CpuSet& held,
                            const CpuSet& taking);

// One DRA driver of this node and the devices it published.
struct DriverSetup {
  std::string driver;  // "dra.cpu", "gpu.topodra.io"
  DriverKind kind = DriverKind::kCpu;
  claims::CpuPool cpu_pool;               // kCpu: pool name and device -> CPUs
  std::string gpu_pool;                   // kGpu: pool name (the node name)
  std::map<std::string, GpuDevice> gpus;  // kGpu: device name -> GPU
  CpuSet reserved;                        // --reserved-cpus
  // kCpu with --enforce=cgroup: the hook goes into every CPU claim's CDI spec, and no claim may
  // empty the shared pool.
  std::optional<CpusetHook> cpuset_hook;
  std::string cpu_capacity = std::string(claims::kCpuCapacityName);
  // CdiInstanceMarker of this daemon, in the name of every CDI file it writes ("" for none).
  std::string cdi_marker;
  // <--device-metadata-dir or kubelet root/plugins>/<driver>/dra-device-metadata: where each
  // prepared claim's metadata files go (device_metadata.h) with `device_metadata`
  // (--device-metadata=on), and where start and unprepare clean up either way. "" for none.
  std::string metadata_root;
  // Roots an earlier run with another --device-metadata-dir may have written to (the kubelet
  // plugin directory's): start cleans them up as its own too. A prepared claim's files are found
  // from its record, wherever they are.
  std::vector<std::string> metadata_former_roots;
  bool device_metadata = false;
  // Device name -> its published attributes (the slice's JSON, before mixins), for the metadata.
  std::map<std::string, nlohmann::json> device_attributes;
};

// One entry of the kubelet's answer for a claim (dra v1 Device).
struct PreparedDevice {
  std::vector<std::string> request_names;  // base request names
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_device_ids;
  std::optional<std::string> share_id;
  bool operator==(const PreparedDevice&) const = default;
};

struct Plan {
  // kDraClaim, phase Preparing, answer and cdi filled in.
  state::Allocation allocation;
  std::vector<PreparedDevice> devices;
  std::string cdi_file;  // "" when the claim has no result of this driver
  cdi::Spec cdi_spec;
  // cdi_spec validated and printed as SpecStore::Write prints it; "" when it was not validated
  // (no devices), which SpecStore::Write then does.
  std::string cdi_text;
  // With DriverSetup::metadata_root: one file and CDI spec per request (their CDI ids are in
  // `devices`), and why some metadata was left out (for the log).
  std::vector<MetadataFile> metadata;
  std::vector<std::string> notes;
  // Each metadata file's CDI spec as text, validated (SpecStore::WriteValidatedText writes it).
  std::vector<std::string> metadata_cdi_texts;
  // The devices as the metadata describes them, in `devices` order (PlanClaim's input).
  std::vector<MetadataDevice> metadata_devices;
};

// The CDI kind of a driver's per-claim specs: "<driver>/claim".
std::string CdiKind(const std::string& driver);
// The mark of one daemon instance in the names of the CDI files it writes, so that instances
// sharing a CDI directory never remove each other's files: 16 hex digits of a fixed hash (FNV-1a
// 64) of the node name and the absolute state directory. It depends on nothing in the state
// directory, so a wiped state still recognises the files its instance wrote.
std::string CdiInstanceMarker(const std::string& node_name, const std::string& state_dir);
// The marker a CDI file name carries ("..._i<16 hex digits>.json"), or "" for an unmarked name
// (written by a topodra before instance markers, or with an empty marker).
std::string CdiMarkerOf(const std::string& file_name);
// "<driver>-claim_<uid>.json", or "<driver>-claim_<uid>_i<marker>.json" with a marker.
std::string CdiFileName(const std::string& driver, const std::string& claim_uid,
                        const std::string& marker = "");
// True for a file name CdiFileName makes for `driver` (any claim, any marker or none).
bool IsCdiFileOf(const std::string& driver, const std::string& file_name);

// `ours_by_name`: the name is one this driver or resource makes (any marker); `marker`: ours.
cdi::CdiFileClass ClassifyCdiFile(bool ours_by_name, const std::string& file_name,
                                  const std::string& marker);

// Plans `claim` for `setup.driver` against `held` (every allocation of the node; the claim's own
// is ignored). Errors are InvalidArgument (the claim is wrong for this node) or
// ResourceExhausted (not enough free CPUs in the allocated group), and start with
// "claim <ns>/<name>".
// `cpu_layout`, when given, is allocation::CpuLayout(topo), kept by the caller so that a pick does
// not build it again (ClaimService builds it once per topology); the plan is the same either way.
absl::StatusOr<Plan> PlanClaim(const claims::Claim& claim, const DriverSetup& setup,
                               const topology::Topology& topo, const state::State& held,
                               const allocation::CpuLayout* cpu_layout = nullptr);

// The allocation's stored "cdi", {"file", "metadata" (when there are files: MetadataFilesToJson),
// "spec"}, byte for byte as CompactJson prints that tree, printed without building it: the tree
// was built, printed and freed on every prepare. With `metadata_cdi_texts`, appends each file's
// CDI spec as cdi::JsonTextOf prints it.
std::string StoredCdiText(const std::string& file, const nlohmann::json& spec,
                          const std::vector<MetadataFile>& metadata,
                          std::vector<std::string>* metadata_cdi_texts = nullptr);

// The answer stored in the state and replayed to the kubelet, and back.
nlohmann::json DevicesToJson(const std::vector<PreparedDevice>& devices);
absl::StatusOr<std::vector<PreparedDevice>> DevicesFromJson(const nlohmann::json& answer);
inline absl::StatusOr<std::vector<PreparedDevice>> DevicesFromJson(const state::JsonText& answer) {
  return DevicesFromJson(answer.Parse());
}

}  // namespace topodra::prepare
