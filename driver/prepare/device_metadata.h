// The device metadata a DRA driver hands to the containers of a prepared claim (KEP-5304, the
// "attributes downward API": alpha in Kubernetes 1.36, beta in 1.37). Pure: the claim, its
// devices and what topodra decided for them go in; the host file's path and content, the CDI spec
// that bind-mounts it into the containers and the CDI id the kubelet is told come out.
//
// Paths, names and the JSON stream follow the kubelet plugin library of
// k8s.io/dynamic-resource-allocation v0.36.0 and later (shared/spec addendum §3.2, §3.3):
//   host:      {pluginDataDir}/dra-device-metadata/{ns}_{claim}/{baseRequest}/metadata.json
//   container: /var/run/kubernetes.io/dra-device-attributes/resourceclaims/{claim}/{baseRequest}/
//              {driver}-metadata.json   (resourceclaimtemplates/{podClaimName}/... for a claim
//              made from a template, i.e. one with the resource.kubernetes.io/pod-claim-name
//              annotation)
//   CDI spec:  {cdiDir}/{driver}_metadata_{claimUID}_{baseRequest}.json, cdiVersion 0.5.0,
//              kind {driver}/metadata, device {claimUID}_{baseRequest}
//   content:   a metadata.resource.k8s.io/v1beta1 DeviceMetadata object, then the same as
//              v1alpha1, each pretty-printed and followed by "\n"
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cdi/spec.h"
#include "driver/claims/allocation_result.h"
#include "nlohmann/json.hpp"
#include "topology/cpuset.h"
#include "topology/topology.h"

namespace topodra::prepare {

inline constexpr char kMetadataApiV1beta1[] = "metadata.resource.k8s.io/v1beta1";
inline constexpr char kMetadataApiV1alpha1[] = "metadata.resource.k8s.io/v1alpha1";
inline constexpr char kPodClaimNameAnnotation[] = "resource.kubernetes.io/pod-claim-name";
// Below the plugin data directory <kubelet root>/plugins/<driver>.
inline constexpr char kMetadataDirName[] = "dra-device-metadata";
inline constexpr char kMetadataFileName[] = "metadata.json";
inline constexpr char kContainerMetadataRoot[] = "/var/run/kubernetes.io/dra-device-attributes";
// The cdiVersion the kubelet plugin library writes for these specs.
inline constexpr char kMetadataCdiVersion[] = "0.5.0";

// A device's attributes obey the ResourceSlice DeviceAttribute limits (addendum §3.3, §5.2): at
// most 32 attributes, 48 values counting list elements, strings at most 64 bytes.
inline constexpr int kMaxMetadataAttributes = 32;
inline constexpr int kMaxMetadataValues = 48;
inline constexpr size_t kMaxMetadataString = 64;

// The attributes topodra adds to what the slice published (the CPU driver's domain is dra.cpu
// whatever the driver is called, as for the published attributes).
inline constexpr char kCpusetAttribute[] = "dra.cpu/cpuset";            // string, list format
inline constexpr char kCpusetPartsAttribute[] = "dra.cpu/cpusetParts";  // strings, when longer
inline constexpr char kNumaNodesAttribute[] = "dra.cpu/numaNodes";      // ints
inline constexpr char kAllocatedCpusAttribute[] = "dra.cpu/allocatedNumCPUs";  // int
// ints: the claim's memory nodes (cpuset.mems) under --numa-memory=claim; they differ from
// numaNodes when the claim's numaMemory adds memory-only nodes (HBM, CXL) or says "all".
inline constexpr char kMemoryNodesAttribute[] = "dra.cpu/memoryNodes";
inline constexpr char kPciBusIdAttribute[] = "resource.kubernetes.io/pciBusID";

// An attribute name and its DeviceAttribute JSON ({"int": 4}, {"strings": [...]}, ...).
using MetadataAttribute = std::pair<std::string, nlohmann::json>;

// One device of a request, as the planner describes it.
struct MetadataDevice {
  std::string request;  // as in the allocation result: "<main>" or "<main>/<sub>"
  std::string pool;
  std::string name;
  std::vector<MetadataAttribute> decided;  // topodra's, kept first when the limits bite
  nlohmann::json published;                // the device's slice attributes (an object)
};

// One file of one request: what ClaimService writes, the journal keeps and start restores.
struct MetadataFile {
  std::string request;    // base request name
  std::string host_path;  // absolute
  std::string content;    // the JSON stream, printed from `document`
  // The v1beta1 object `content` is printed from (MetadataContentOf): what the state keeps in
  // place of the text since state version 4. Null for a file read from an older state record,
  // which keeps the `content` it was written with.
  nlohmann::json document;
  std::string cdi_file;  // in the CDI directory
  cdi::Spec cdi_spec;
  std::string cdi_id;  // "<driver>/metadata=<claimUID>_<request>"
  bool operator==(const MetadataFile&) const = default;
};

struct DeviceMetadataPlan {
  std::vector<MetadataFile> files;  // one per base request, in order of first appearance
  // Why some metadata was left out (attributes over the limits, a claim whose directory name is
  // too long for the file system): for the log, never for the kubelet.
  std::vector<std::string> notes;
};

// "<root>/<ns>_<name>": everything of one claim, removed whole on unprepare. `root` is
// <plugin data dir>/dra-device-metadata.
std::string MetadataClaimDir(const std::string& root, const std::string& ns,
                             const std::string& name);
std::string MetadataHostPath(const std::string& root, const std::string& ns,
                             const std::string& name, const std::string& base_request);
// The root a host file `<root>/<claim dir>/<request>/metadata.json` of `driver` is under, where
// `root` is `<dir>/<driver>/dra-device-metadata` for some absolute <dir>; "" for any other path.
// Which root a stored claim's files went to, whatever --device-metadata-dir says now.
std::string MetadataRootOf(const std::string& host_path, const std::string& driver);
// The path inside the container; `pod_claim_name` "" for a claim named in the pod spec.
std::string MetadataContainerPath(const std::string& driver, const std::string& claim_name,
                                  const std::string& pod_claim_name,
                                  const std::string& base_request);
std::string MetadataCdiKind(const std::string& driver);
std::string MetadataCdiFileName(const std::string& driver, const std::string& claim_uid,
                                const std::string& base_request);
// "<driver>_metadata_*.json": one of `driver`'s metadata specs (any claim).
bool IsMetadataCdiFileOf(const std::string& driver, const std::string& file_name);

// The CPU attributes of a request holding `cpus`: dra.cpu/cpuset (list format) when it fits in
// 64 bytes, else dra.cpu/cpusetParts, the list cut at commas into pieces of at most 64 bytes
// (joined with "," they give the list back); and dra.cpu/numaNodes.
std::vector<MetadataAttribute> CpuRequestAttributes(const topology::Topology& topo,
                                                    const CpuSet& cpus);

// A device's attributes as the file lists them: `decided` first, then `published` in name
// order, unqualified names qualified with `driver` (the scheduler reads them so too), an
// attribute named twice taken once (decided wins), stopping before kMaxMetadataAttributes or
// kMaxMetadataValues would be passed. The names left out go to `dropped`.
nlohmann::json MetadataAttributes(const std::string& driver,
                                  const std::vector<MetadataAttribute>& decided,
                                  const nlohmann::json& published,
                                  std::vector<std::string>* dropped);

// The files of one claim for one driver (devices in answer order), under `root`. An error
// (InvalidArgument, starting "claim <ns>/<name>") only for names a path cannot be built from: a
// namespace, name or uid beyond ValidateClaimIdentity's rules, a request or pod claim name that
// is not a DNS label. A claim whose "<ns>_<name>" directory name
// is longer than the file system allows gets no files and a note.
absl::StatusOr<DeviceMetadataPlan> PlanDeviceMetadata(const claims::Claim& claim,
                                                      const std::string& driver,
                                                      const std::string& root,
                                                      const std::vector<MetadataDevice>& devices);

// The file's text printed from its v1beta1 object: that object pretty-printed in the KEP's member
// order, then the same as v1alpha1, each followed by "\n"; exactly what PlanDeviceMetadata wrote
// for a document it made. nullopt for a value not of that shape (its members, their types,
// generation 1).
std::optional<std::string> MetadataContentOf(const nlohmann::json& document);

// The stored form of the files (the allocation's "cdi" JSON keeps it under "metadata"), and back.
// Each file is {"request", "hostPath", "document", "cdiFile", "cdiSpec", "cdiId"}, "document" the
// v1beta1 object compact (state version 4), or with "content", the file's text, in its place (a
// file with no document: written by an older topodra, kept as it was).
nlohmann::json MetadataFilesToJson(const std::vector<MetadataFile>& files);
absl::StatusOr<std::vector<MetadataFile>> MetadataFilesFromJson(const nlohmann::json& j);
// The host file's text of one stored file: its "content", or printed from its "document"
// (DataLoss naming what is wrong, without the entry's position, for anything else).
absl::StatusOr<std::string> StoredMetadataContent(const nlohmann::json& entry);

}  // namespace topodra::prepare
