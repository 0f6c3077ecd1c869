// The Container Device Interface (CDI) spec file: model, strict JSON, validation and the lowest
// cdiVersion a spec needs. Knows nothing of Kubernetes; a CDI spec is all it speaks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace topodra::cdi {

// Empty strings and lists mean "not set" and are not written, as in the CDI Go types
// (`omitempty`); std::optional marks the fields where an explicit zero means something.
struct DeviceNode {
  std::string path;  // in the container; required
  std::string host_path;
  std::string type;  // "", "b", "c", "u" or "p"
  std::optional<int64_t> major;
  std::optional<int64_t> minor;
  std::optional<uint32_t> file_mode;  // written as a decimal number: 438 is 0666
  std::string permissions;            // letters of "rwm", or "none"; empty means "rwm"
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  bool operator==(const DeviceNode&) const = default;
};

struct Mount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;
  std::string type;
  bool operator==(const Mount&) const = default;
};

struct Hook {
  std::string hook_name;
  std::string path;
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::optional<int64_t> timeout;  // seconds
  bool operator==(const Hook&) const = default;
};

struct IntelRdt {
  std::string clos_id;
  std::string l3_cache_schema;
  std::string mem_bw_schema;
  std::vector<std::string> schemata;
  bool enable_monitoring = false;
  bool operator==(const IntelRdt&) const = default;
};

struct NetDevice {
  std::string host_interface_name;
  std::string name;
  bool operator==(const NetDevice&) const = default;
};

struct ContainerEdits {
  std::vector<std::string> env;  // "NAME=value"
  std::vector<DeviceNode> device_nodes;
  std::vector<Mount> mounts;
  std::vector<Hook> hooks;
  std::vector<uint32_t> additional_gids;
  std::optional<IntelRdt> intel_rdt;
  std::vector<NetDevice> net_devices;
  bool operator==(const ContainerEdits&) const = default;
};

// True when the edits change nothing; a device's edits must not be empty.
bool IsEmpty(const ContainerEdits& edits);

using Annotations = std::map<std::string, std::string>;

struct Device {
  std::string name;
  Annotations annotations;
  ContainerEdits container_edits;
  bool operator==(const Device&) const = default;
};

struct Spec {
  std::string cdi_version;
  std::string kind;  // "<vendor>/<class>"
  Annotations annotations;
  std::vector<Device> devices;
  ContainerEdits container_edits;  // applied once when any device of the spec is injected
  bool operator==(const Spec&) const = default;
};

// Largest spec text FromJson accepts. Real specs are a few KiB; the bound keeps a hostile file
// from costing unbounded memory.
inline constexpr size_t kMaxSpecBytes = 4 << 20;

// The JSON document, with only the fields that are set and the exact keys of CDI 1.1.0.
nlohmann::json ToJson(const Spec& spec);
// The same as text (indented by `indent`, -1 for one line). Never throws, even on invalid UTF-8.
std::string ToJsonText(const Spec& spec, int indent = 2);
// ToJsonText of the spec whose ToJson is `doc`: for a caller that keeps the document too.
std::string JsonTextOf(const nlohmann::json& doc, int indent = 2);

// Strict parse: malformed JSON, a wrong type, a value out of range or an unknown field is an
// error naming its JSON path, e.g. `devices[0].containerEdits.deviceNodes[1].major: ...`.
// Does not validate the content; see Validate.
absl::StatusOr<Spec> FromJson(absl::string_view text);

// Every cdiVersion there is, oldest first.
const std::vector<std::string>& KnownVersions();
bool IsKnownVersion(absl::string_view version);

// The lowest cdiVersion that has every field and name form the spec uses ("0.3.0" at least).
// Writing that version lets runtimes with older CDI libraries read the spec.
std::string MinimumVersion(const Spec& spec);

// All the rules of the CDI format, including a known cdiVersion no lower than MinimumVersion.
// The error names the JSON path and the offending value.
absl::Status Validate(const Spec& spec);

// Name rules on their own, for callers that build names before building a spec.
absl::Status ValidateKind(absl::string_view kind);
absl::Status ValidateDeviceName(absl::string_view name);

// "<vendor>/<class>=<device>", the name a runtime is asked to inject, after checking both parts.
absl::StatusOr<std::string> QualifiedName(absl::string_view kind, absl::string_view device);

// "<vendor>-<class>_<id>.json", the file name convention for a spec that lives as long as one
// claim (CDI's transient spec names); '/' in id becomes '_'.
absl::StatusOr<std::string> TransientSpecFileName(absl::string_view kind, absl::string_view id);

}  // namespace topodra::cdi
