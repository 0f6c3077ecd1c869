#include "cdi/spec.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json_parse.h"
#include "common/json_print.h"

namespace topodra::cdi {
namespace {

using nlohmann::json;

// nlohmann's default dump throws on invalid UTF-8; strings from callers are not checked.
std::string Dump(const json& j, int indent) { return PrintJson(j, indent); }

// Quotes a value for a message the way Go's %q would, so control bytes stay visible.
std::string Quote(absl::string_view s) { return Dump(json(std::string(s)), -1); }

// ---------------------------------------------------------------------------------------------
// Writing

void PutString(json& out, const char* key, const std::string& value) {
  if (!value.empty()) out[key] = value;
}

void PutStrings(json& out, const char* key, const std::vector<std::string>& values) {
  if (!values.empty()) out[key] = values;
}

void PutAnnotations(json& out, const Annotations& annotations) {
  if (annotations.empty()) return;
  json object = json::object();
  for (const auto& [key, value] : annotations) object[key] = value;
  out["annotations"] = std::move(object);
}

json EditsToJson(const ContainerEdits& edits) {
  json out = json::object();
  PutStrings(out, "env", edits.env);
  if (!edits.device_nodes.empty()) {
    json list = json::array();
    for (const DeviceNode& node : edits.device_nodes) {
      json j = json::object();
      j["path"] = node.path;
      PutString(j, "hostPath", node.host_path);
      PutString(j, "type", node.type);
      if (node.major) j["major"] = *node.major;
      if (node.minor) j["minor"] = *node.minor;
      if (node.file_mode) j["fileMode"] = *node.file_mode;
      PutString(j, "permissions", node.permissions);
      if (node.uid) j["uid"] = *node.uid;
      if (node.gid) j["gid"] = *node.gid;
      list.push_back(std::move(j));
    }
    out["deviceNodes"] = std::move(list);
  }
  if (!edits.hooks.empty()) {
    json list = json::array();
    for (const Hook& hook : edits.hooks) {
      json j = json::object();
      j["hookName"] = hook.hook_name;
      j["path"] = hook.path;
      PutStrings(j, "args", hook.args);
      PutStrings(j, "env", hook.env);
      if (hook.timeout) j["timeout"] = *hook.timeout;
      list.push_back(std::move(j));
    }
    out["hooks"] = std::move(list);
  }
  if (!edits.mounts.empty()) {
    json list = json::array();
    for (const Mount& mount : edits.mounts) {
      json j = json::object();
      j["hostPath"] = mount.host_path;
      j["containerPath"] = mount.container_path;
      PutStrings(j, "options", mount.options);
      PutString(j, "type", mount.type);
      list.push_back(std::move(j));
    }
    out["mounts"] = std::move(list);
  }
  if (edits.intel_rdt) {
    const IntelRdt& rdt = *edits.intel_rdt;
    json j = json::object();
    PutString(j, "closID", rdt.clos_id);
    PutString(j, "l3CacheSchema", rdt.l3_cache_schema);
    PutString(j, "memBwSchema", rdt.mem_bw_schema);
    PutStrings(j, "schemata", rdt.schemata);
    if (rdt.enable_monitoring) j["enableMonitoring"] = true;
    out["intelRdt"] = std::move(j);
  }
  if (!edits.additional_gids.empty()) out["additionalGids"] = edits.additional_gids;
  if (!edits.net_devices.empty()) {
    json list = json::array();
    for (const NetDevice& dev : edits.net_devices) {
      list.push_back({{"hostInterfaceName", dev.host_interface_name}, {"name", dev.name}});
    }
    out["netDevices"] = std::move(list);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Strict reading

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

std::string Member(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Index(const std::string& path, size_t i) { return absl::StrCat(path, "[", i, "]"); }

absl::Status ReadString(const json& j, const std::string& path, std::string* out) {
  if (!j.is_string()) return Bad(path, absl::StrCat("must be a string, not ", j.type_name()));
  *out = j.get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadBool(const json& j, const std::string& path, bool* out) {
  if (!j.is_boolean()) return Bad(path, absl::StrCat("must be a boolean, not ", j.type_name()));
  *out = j.get<bool>();
  return absl::OkStatus();
}

absl::Status ReadInt64(const json& j, const std::string& path, std::optional<int64_t>* out) {
  if (!j.is_number_integer()) {
    return Bad(path, absl::StrCat("must be an integer, not ", Dump(j, -1)));
  }
  if (j.is_number_unsigned() &&
      j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Bad(path, absl::StrCat("integer ", Dump(j, -1), " is out of range"));
  }
  *out = j.get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadUint32(const json& j, const std::string& path, uint32_t* out) {
  if (!j.is_number_integer()) {
    return Bad(path, absl::StrCat("must be an integer, not ", Dump(j, -1)));
  }
  if (!j.is_number_unsigned() || j.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
    return Bad(path, absl::StrCat("integer ", Dump(j, -1), " is out of range 0..4294967295"));
  }
  *out = static_cast<uint32_t>(j.get<uint64_t>());
  return absl::OkStatus();
}

absl::Status ReadOptionalUint32(const json& j, const std::string& path,
                                std::optional<uint32_t>* out) {
  uint32_t value = 0;
  if (absl::Status st = ReadUint32(j, path, &value); !st.ok()) return st;
  *out = value;
  return absl::OkStatus();
}

template <typename T, typename ReadOne>
absl::Status ReadList(const json& j, const std::string& path, std::vector<T>* out,
                      ReadOne read_one) {
  if (!j.is_array()) return Bad(path, absl::StrCat("must be a list, not ", j.type_name()));
  out->clear();
  out->reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    T item{};
    if (absl::Status st = read_one(j[i], Index(path, i), &item); !st.ok()) return st;
    out->push_back(std::move(item));
  }
  return absl::OkStatus();
}

absl::Status ReadStrings(const json& j, const std::string& path, std::vector<std::string>* out) {
  return ReadList(j, path, out, ReadString);
}

// Calls field(key, value, path) for each member; field returns NotFound for a key it does not
// know, which becomes the "unknown field" error naming that key's path.
using FieldReader =
    std::function<absl::Status(const std::string& key, const json& value, const std::string&)>;

absl::Status ReadObject(const json& j, const std::string& path, const FieldReader& field) {
  if (!j.is_object()) {
    return Bad(path.empty() ? "spec" : path,
               absl::StrCat("must be an object, not ", j.type_name()));
  }
  for (const auto& [key, value] : j.items()) {
    const std::string member = Member(path, key);
    absl::Status st = field(key, value, member);
    if (absl::IsNotFound(st)) return Bad(member, "unknown field");
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Unknown() { return absl::NotFoundError(""); }

absl::Status ReadAnnotations(const json& j, const std::string& path, Annotations* out) {
  if (!j.is_object()) return Bad(path, absl::StrCat("must be an object, not ", j.type_name()));
  for (const auto& [key, value] : j.items()) {
    std::string text;
    if (absl::Status st = ReadString(value, absl::StrCat(path, "[", Quote(key), "]"), &text);
        !st.ok()) {
      return st;
    }
    (*out)[key] = std::move(text);
  }
  return absl::OkStatus();
}

absl::Status ReadDeviceNode(const json& j, const std::string& path, DeviceNode* out) {
  return ReadObject(j, path, [out](const std::string& k, const json& v, const std::string& p) {
    if (k == "path") return ReadString(v, p, &out->path);
    if (k == "hostPath") return ReadString(v, p, &out->host_path);
    if (k == "type") return ReadString(v, p, &out->type);
    if (k == "major") return ReadInt64(v, p, &out->major);
    if (k == "minor") return ReadInt64(v, p, &out->minor);
    if (k == "fileMode") return ReadOptionalUint32(v, p, &out->file_mode);
    if (k == "permissions") return ReadString(v, p, &out->permissions);
    if (k == "uid") return ReadOptionalUint32(v, p, &out->uid);
    if (k == "gid") return ReadOptionalUint32(v, p, &out->gid);
    return Unknown();
  });
}

absl::Status ReadMount(const json& j, const std::string& path, Mount* out) {
  return ReadObject(j, path, [out](const std::string& k, const json& v, const std::string& p) {
    if (k == "hostPath") return ReadString(v, p, &out->host_path);
    if (k == "containerPath") return ReadString(v, p, &out->container_path);
    if (k == "options") return ReadStrings(v, p, &out->options);
    if (k == "type") return ReadString(v, p, &out->type);
    return Unknown();
  });
}

absl::Status ReadHook(const json& j, const std::string& path, Hook* out) {
  return ReadObject(j, path, [out](const std::string& k, const json& v, const std::string& p) {
    if (k == "hookName") return ReadString(v, p, &out->hook_name);
    if (k == "path") return ReadString(v, p, &out->path);
    if (k == "args") return ReadStrings(v, p, &out->args);
    if (k == "env") return ReadStrings(v, p, &out->env);
    if (k == "timeout") return ReadInt64(v, p, &out->timeout);
    return Unknown();
  });
}

absl::Status ReadIntelRdt(const json& j, const std::string& path, IntelRdt* out) {
  return ReadObject(j, path, [out](const std::string& k, const json& v, const std::string& p) {
    if (k == "closID") return ReadString(v, p, &out->clos_id);
    if (k == "l3CacheSchema") return ReadString(v, p, &out->l3_cache_schema);
    if (k == "memBwSchema") return ReadString(v, p, &out->mem_bw_schema);
    if (k == "schemata") return ReadStrings(v, p, &out->schemata);
    if (k == "enableMonitoring") return ReadBool(v, p, &out->enable_monitoring);
    return Unknown();
  });
}

absl::Status ReadNetDevice(const json& j, const std::string& path, NetDevice* out) {
  return ReadObject(j, path, [out](const std::string& k, const json& v, const std::string& p) {
    if (k == "hostInterfaceName") return ReadString(v, p, &out->host_interface_name);
    if (k == "name") return ReadString(v, p, &out->name);
    return Unknown();
  });
}

absl::Status ReadEdits(const json& j, const std::string& path, ContainerEdits* out) {
  return ReadObject(j, path, [out](const std::string& k, const json& v, const std::string& p) {
    if (k == "env") return ReadStrings(v, p, &out->env);
    if (k == "deviceNodes") return ReadList(v, p, &out->device_nodes, ReadDeviceNode);
    if (k == "mounts") return ReadList(v, p, &out->mounts, ReadMount);
    if (k == "hooks") return ReadList(v, p, &out->hooks, ReadHook);
    if (k == "additionalGids") return ReadList(v, p, &out->additional_gids, ReadUint32);
    if (k == "intelRdt") {
      IntelRdt rdt;
      if (absl::Status st = ReadIntelRdt(v, p, &rdt); !st.ok()) return st;
      out->intel_rdt = std::move(rdt);
      return absl::OkStatus();
    }
    if (k == "netDevices") return ReadList(v, p, &out->net_devices, ReadNetDevice);
    return Unknown();
  });
}

absl::Status ReadDevice(const json& j, const std::string& path, Device* out) {
  return ReadObject(j, path, [out](const std::string& k, const json& v, const std::string& p) {
    if (k == "name") return ReadString(v, p, &out->name);
    if (k == "annotations") return ReadAnnotations(v, p, &out->annotations);
    if (k == "containerEdits") return ReadEdits(v, p, &out->container_edits);
    return Unknown();
  });
}

// Deeper than any CDI spec can be (spec > devices > device > edits > list > item > list): a
// bound so that a hostile file cannot build an arbitrarily deep document.
constexpr int kMaxDepth = 16;

// ---------------------------------------------------------------------------------------------
// Versions

struct Version {
  int major = 0, minor = 0, patch = 0;
  auto operator<=>(const Version&) const = default;
};

// Only ever called on versions from KnownVersions(), which all parse. "<major>.<minor>.<patch>"
// read by hand: sscanf (and the string it needed) was a tenth of validating a spec, which every
// prepare does twice.
Version ParseVersion(absl::string_view text) {
  Version v;
  size_t i = 0;
  for (int* part : {&v.major, &v.minor, &v.patch}) {
    if (i >= text.size() || !absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) break;
    int n = 0;
    for (int digits = 0;
         i < text.size() && digits < 9 && absl::ascii_isdigit(static_cast<unsigned char>(text[i]));
         ++i, ++digits) {
      n = n * 10 + (text[i] - '0');
    }
    *part = n;
    if (i >= text.size() || text[i] != '.') break;
    ++i;
  }
  return v;
}

// The highest version any field needs, and the path of the first field that needs it, so an
// error can say why.
class VersionNeed {
 public:
  void Need(absl::string_view version, const std::string& path) {
    Version v = ParseVersion(version);
    if (v > version_) {
      version_ = v;
      text_ = std::string(version);
      path_ = path;
    }
  }
  const std::string& text() const { return text_; }
  const std::string& path() const { return path_; }

 private:
  Version version_ = ParseVersion("0.3.0");
  std::string text_ = "0.3.0";
  std::string path_ = "every spec";
};

void NeedForEdits(const ContainerEdits& edits, const std::string& path, VersionNeed* need) {
  for (size_t i = 0; i < edits.mounts.size(); ++i) {
    if (!edits.mounts[i].type.empty()) {
      need->Need("0.4.0", absl::StrCat(path, ".mounts[", i, "].type"));
    }
  }
  for (size_t i = 0; i < edits.device_nodes.size(); ++i) {
    if (!edits.device_nodes[i].host_path.empty()) {
      need->Need("0.5.0", absl::StrCat(path, ".deviceNodes[", i, "].hostPath"));
    }
  }
  if (edits.intel_rdt) {
    need->Need("0.7.0", absl::StrCat(path, ".intelRdt"));
    if (!edits.intel_rdt->schemata.empty()) {
      need->Need("1.1.0", absl::StrCat(path, ".intelRdt.schemata"));
    }
    if (edits.intel_rdt->enable_monitoring) {
      need->Need("1.1.0", absl::StrCat(path, ".intelRdt.enableMonitoring"));
    }
  }
  if (!edits.additional_gids.empty()) need->Need("0.7.0", absl::StrCat(path, ".additionalGids"));
  if (!edits.net_devices.empty()) need->Need("1.1.0", absl::StrCat(path, ".netDevices"));
}

VersionNeed NeededVersion(const Spec& spec) {
  VersionNeed need;
  if (!spec.annotations.empty()) need.Need("0.6.0", "annotations");
  if (const size_t slash = spec.kind.find('/');
      slash != std::string::npos && spec.kind.find('.', slash) != std::string::npos) {
    need.Need("0.6.0", "kind");
  }
  NeedForEdits(spec.container_edits, "containerEdits", &need);
  for (size_t i = 0; i < spec.devices.size(); ++i) {
    const Device& device = spec.devices[i];
    const std::string path = absl::StrCat("devices[", i, "]");
    if (!device.name.empty() && absl::ascii_isdigit(static_cast<unsigned char>(device.name[0]))) {
      need.Need("0.5.0", path + ".name");
    }
    if (!device.annotations.empty()) need.Need("0.6.0", path + ".annotations");
    NeedForEdits(device.container_edits, path + ".containerEdits", &need);
  }
  return need;
}

// ---------------------------------------------------------------------------------------------
// Validation

bool IsAlnum(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }
bool IsLetter(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)); }

// First, middle and last characters of a CDI name; `what` names the kind of name. Returns the
// reason it is invalid, or "" when it is fine.
std::string NameProblem(absl::string_view name, absl::string_view what, bool first_may_be_digit,
                        absl::string_view extra_chars, size_t max_len) {
  if (name.empty()) return absl::StrCat("empty ", what);
  // Quoted only for a message: every valid name of every prepared claim passes here.
  auto q = [name] { return Quote(name); };
  if (name.size() > max_len) {
    return absl::StrCat("invalid ", what, " ", q(), ": longer than ", max_len, " characters");
  }
  if (!(first_may_be_digit ? IsAlnum(name.front()) : IsLetter(name.front()))) {
    return absl::StrCat("invalid ", what, " ", q(), ": must start with a letter",
                        first_may_be_digit ? " or digit" : "");
  }
  for (char c : name) {
    if (!IsAlnum(c) && extra_chars.find(c) == absl::string_view::npos) {
      return absl::StrCat("invalid ", what, " ", q(), ": character ", Quote(std::string(1, c)),
                          " is not allowed");
    }
  }
  if (!IsAlnum(name.back())) {
    return absl::StrCat("invalid ", what, " ", q(), ": must end with a letter or digit");
  }
  return "";
}

// A Kubernetes DNS-1123 subdomain, the prefix of an annotation key.
std::string SubdomainProblem(absl::string_view prefix) {
  if (prefix.empty()) return "empty prefix";
  if (prefix.size() > 253) return "prefix longer than 253 characters";
  for (absl::string_view label : absl::StrSplit(prefix, '.')) {
    if (label.empty() || !IsAlnum(label.front()) || !IsAlnum(label.back())) {
      return "prefix labels must start and end with a lower-case letter or digit";
    }
    for (char c : label) {
      if (!(absl::ascii_islower(static_cast<unsigned char>(c)) ||
            absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-')) {
        return absl::StrCat("character ", Quote(std::string(1, c)), " is not allowed in a prefix");
      }
    }
  }
  return "";
}

// Kubernetes' rule for annotation keys: an optional DNS subdomain prefix and '/', then a name of
// at most 63 characters of [A-Za-z0-9._-] that starts and ends alphanumeric; at most 256 KiB in
// all, keys and values together.
absl::Status ValidateAnnotations(const Annotations& annotations, const std::string& path) {
  constexpr size_t kMaxTotal = 256 * 1024;
  size_t total = 0;
  for (const auto& [key, value] : annotations) {
    total += key.size() + value.size();
    const std::string where = absl::StrCat(path, "[", Quote(key), "]");
    absl::string_view name = key;
    std::string problem;
    if (const size_t slash = key.find('/'); slash != std::string::npos) {
      problem = SubdomainProblem(absl::string_view(key).substr(0, slash));
      name = absl::string_view(key).substr(slash + 1);
    }
    if (problem.empty()) {
      if (name.empty()) {
        problem = "empty name";
      } else if (name.size() > 63) {
        problem = "name longer than 63 characters";
      } else if (!IsAlnum(name.front()) || !IsAlnum(name.back())) {
        problem = "name must start and end with a letter or digit";
      } else {
        for (char c : name) {
          if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') {
            problem = absl::StrCat("character ", Quote(std::string(1, c)), " is not allowed");
            break;
          }
        }
      }
    }
    if (!problem.empty()) {
      return Bad(where, absl::StrCat("invalid annotation key ", Quote(key), ": ", problem));
    }
  }
  if (total > kMaxTotal) {
    return Bad(path, absl::StrCat("annotations take ", total, " bytes, more than the limit of ",
                                  kMaxTotal));
  }
  return absl::OkStatus();
}

absl::Status ValidateEnv(const std::vector<std::string>& env, const std::string& path) {
  for (size_t i = 0; i < env.size(); ++i) {
    const size_t eq = env[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      return Bad(Index(path, i), absl::StrCat("invalid environment variable ", Quote(env[i]),
                                              ": want NAME=value with a non-empty NAME"));
    }
  }
  return absl::OkStatus();
}

bool IsHookName(absl::string_view name) {
  static constexpr std::array<absl::string_view, 6> kHookNames = {
      "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"};
  return std::find(kHookNames.begin(), kHookNames.end(), name) != kHookNames.end();
}

// Linux interface names: 1 to 15 bytes (IFNAMSIZ - 1), no '/', ':' or white space, not . or ..
std::string InterfaceNameProblem(absl::string_view name) {
  if (name.empty()) return "empty interface name";
  const std::string q = Quote(name);
  if (name.size() > 15) return absl::StrCat("invalid interface name ", q, ": longer than 15 bytes");
  if (name == "." || name == "..") return absl::StrCat("invalid interface name ", q);
  for (char c : name) {
    if (c == '/' || c == ':' || absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '\0') {
      return absl::StrCat("invalid interface name ", q, ": character ", Quote(std::string(1, c)),
                          " is not allowed");
    }
  }
  return "";
}

absl::Status ValidateEdits(const ContainerEdits& edits, const std::string& path) {
  if (absl::Status st = ValidateEnv(edits.env, path + ".env"); !st.ok()) return st;
  for (size_t i = 0; i < edits.device_nodes.size(); ++i) {
    const DeviceNode& node = edits.device_nodes[i];
    const std::string p = absl::StrCat(path, ".deviceNodes[", i, "]");
    if (node.path.empty()) return Bad(p + ".path", "empty device path");
    if (!node.type.empty() && node.type != "b" && node.type != "c" && node.type != "u" &&
        node.type != "p") {
      return Bad(p + ".type", absl::StrCat("invalid device type ", Quote(node.type), " of ",
                                           Quote(node.path), ": want b, c, u or p"));
    }
    if (node.permissions != "none" &&
        node.permissions.find_first_not_of("rwm") != std::string::npos) {
      return Bad(p + ".permissions",
                 absl::StrCat("invalid permissions ", Quote(node.permissions), " of ",
                              Quote(node.path), ": want letters of \"rwm\" or \"none\""));
    }
  }
  for (size_t i = 0; i < edits.mounts.size(); ++i) {
    const Mount& mount = edits.mounts[i];
    const std::string p = absl::StrCat(path, ".mounts[", i, "]");
    if (mount.host_path.empty()) {
      return Bad(p + ".hostPath",
                 absl::StrCat("empty host path of mount at ", Quote(mount.container_path)));
    }
    if (mount.container_path.empty()) {
      return Bad(p + ".containerPath",
                 absl::StrCat("empty container path of mount of ", Quote(mount.host_path)));
    }
  }
  for (size_t i = 0; i < edits.hooks.size(); ++i) {
    const Hook& hook = edits.hooks[i];
    const std::string p = absl::StrCat(path, ".hooks[", i, "]");
    if (!IsHookName(hook.hook_name)) {
      return Bad(p + ".hookName",
                 absl::StrCat("invalid hook name ", Quote(hook.hook_name),
                              ": want prestart, createRuntime, createContainer, startContainer, "
                              "poststart or poststop"));
    }
    if (hook.path.empty() || hook.path.front() != '/') {
      return Bad(p + ".path", absl::StrCat("hook path ", Quote(hook.path), " is not absolute"));
    }
    if (absl::Status st = ValidateEnv(hook.env, p + ".env"); !st.ok()) return st;
    if (hook.timeout && *hook.timeout <= 0) {
      return Bad(p + ".timeout",
                 absl::StrCat("invalid hook timeout ", *hook.timeout, ": must be positive"));
    }
  }
  if (edits.intel_rdt) {
    const std::string& clos = edits.intel_rdt->clos_id;
    if (clos == "." || clos == ".." || clos.find('/') != std::string::npos ||
        clos.find('\0') != std::string::npos) {
      return Bad(path + ".intelRdt.closID",
                 absl::StrCat("invalid closID ", Quote(clos), ": must be a plain file name"));
    }
  }
  std::set<std::string> host_names, names;
  for (size_t i = 0; i < edits.net_devices.size(); ++i) {
    const NetDevice& dev = edits.net_devices[i];
    const std::string p = absl::StrCat(path, ".netDevices[", i, "]");
    if (std::string problem = InterfaceNameProblem(dev.host_interface_name); !problem.empty()) {
      return Bad(p + ".hostInterfaceName", problem);
    }
    if (std::string problem = InterfaceNameProblem(dev.name); !problem.empty()) {
      return Bad(p + ".name", problem);
    }
    if (!host_names.insert(dev.host_interface_name).second) {
      return Bad(p + ".hostInterfaceName",
                 absl::StrCat("duplicate host interface name ", Quote(dev.host_interface_name)));
    }
    if (!names.insert(dev.name).second) {
      return Bad(p + ".name", absl::StrCat("duplicate interface name ", Quote(dev.name)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsEmpty(const ContainerEdits& edits) {
  return edits.env.empty() && edits.device_nodes.empty() && edits.mounts.empty() &&
         edits.hooks.empty() && edits.additional_gids.empty() && !edits.intel_rdt &&
         edits.net_devices.empty();
}

nlohmann::json ToJson(const Spec& spec) {
  json out = json::object();
  out["cdiVersion"] = spec.cdi_version;
  out["kind"] = spec.kind;
  PutAnnotations(out, spec.annotations);
  json devices = json::array();
  for (const Device& device : spec.devices) {
    json d = json::object();
    d["name"] = device.name;
    PutAnnotations(d, device.annotations);
    d["containerEdits"] = EditsToJson(device.container_edits);
    devices.push_back(std::move(d));
  }
  out["devices"] = std::move(devices);
  if (!IsEmpty(spec.container_edits)) out["containerEdits"] = EditsToJson(spec.container_edits);
  return out;
}

std::string ToJsonText(const Spec& spec, int indent) { return JsonTextOf(ToJson(spec), indent); }

std::string JsonTextOf(const json& doc, int indent) {
  std::string text = Dump(doc, indent);
  if (indent >= 0) text += '\n';
  return text;
}

absl::StatusOr<Spec> FromJson(absl::string_view text) {
  if (text.size() > kMaxSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec of ", text.size(), " bytes is larger than the limit of ", kMaxSpecBytes));
  }
  absl::StatusOr<json> parsed = files::ParseJsonBounded(text, kMaxDepth);
  if (!parsed.ok()) return parsed.status();
  const json& doc = *parsed;
  Spec spec;
  absl::Status st =
      ReadObject(doc, "", [&spec](const std::string& k, const json& v, const std::string& p) {
        if (k == "cdiVersion") return ReadString(v, p, &spec.cdi_version);
        if (k == "kind") return ReadString(v, p, &spec.kind);
        if (k == "annotations") return ReadAnnotations(v, p, &spec.annotations);
        if (k == "devices") return ReadList(v, p, &spec.devices, ReadDevice);
        if (k == "containerEdits") return ReadEdits(v, p, &spec.container_edits);
        return Unknown();
      });
  if (!st.ok()) return st;
  return spec;
}

const std::vector<std::string>& KnownVersions() {
  static const std::vector<std::string>* const kVersions = new std::vector<std::string>{
      "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"};
  return *kVersions;
}

bool IsKnownVersion(absl::string_view version) {
  const std::vector<std::string>& known = KnownVersions();
  return std::find(known.begin(), known.end(), version) != known.end();
}

std::string MinimumVersion(const Spec& spec) { return NeededVersion(spec).text(); }

absl::Status ValidateKind(absl::string_view kind) {
  const size_t slash = kind.find('/');
  if (slash == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid kind ", Quote(kind), ": want <vendor>/<class>"));
  }
  // Vendor: a DNS subdomain at most; class: a DNS label, with '.' from 0.6.0 on.
  if (std::string problem = NameProblem(kind.substr(0, slash), "vendor", false, "_.-", 253);
      !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid kind ", Quote(kind), ": ", problem));
  }
  if (std::string problem = NameProblem(kind.substr(slash + 1), "class", false, "_.-", 63);
      !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid kind ", Quote(kind), ": ", problem));
  }
  return absl::OkStatus();
}

absl::Status ValidateDeviceName(absl::string_view name) {
  // No length limit in the format; the spec size bounds it.
  if (std::string problem =
          NameProblem(name, "device name", true, "_.:-", std::numeric_limits<size_t>::max());
      !problem.empty()) {
    return absl::InvalidArgumentError(problem);
  }
  return absl::OkStatus();
}

absl::Status Validate(const Spec& spec) {
  const VersionNeed need = NeededVersion(spec);
  if (!IsKnownVersion(spec.cdi_version)) {
    return Bad("cdiVersion", absl::StrCat("unknown version ", Quote(spec.cdi_version), ", want ",
                                          absl::StrJoin(KnownVersions(), ", ")));
  }
  if (ParseVersion(spec.cdi_version) < ParseVersion(need.text())) {
    return Bad("cdiVersion", absl::StrCat("version ", Quote(spec.cdi_version), " is lower than ",
                                          Quote(need.text()), ", which ", need.path(), " needs"));
  }
  if (absl::Status st = ValidateKind(spec.kind); !st.ok()) return Bad("kind", st.message());
  if (absl::Status st = ValidateAnnotations(spec.annotations, "annotations"); !st.ok()) return st;
  if (absl::Status st = ValidateEdits(spec.container_edits, "containerEdits"); !st.ok()) return st;
  if (spec.devices.empty()) return Bad("devices", "a spec needs at least one device");
  std::set<std::string> names;
  for (size_t i = 0; i < spec.devices.size(); ++i) {
    const Device& device = spec.devices[i];
    const std::string path = absl::StrCat("devices[", i, "]");
    if (absl::Status st = ValidateDeviceName(device.name); !st.ok()) {
      return Bad(path + ".name", st.message());
    }
    if (!names.insert(device.name).second) {
      return Bad(path + ".name", absl::StrCat("duplicate device name ", Quote(device.name)));
    }
    if (absl::Status st = ValidateAnnotations(device.annotations, path + ".annotations");
        !st.ok()) {
      return st;
    }
    if (IsEmpty(device.container_edits)) {
      return Bad(path + ".containerEdits",
                 absl::StrCat("device ", Quote(device.name), " has no container edits"));
    }
    if (absl::Status st = ValidateEdits(device.container_edits, path + ".containerEdits");
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> QualifiedName(absl::string_view kind, absl::string_view device) {
  if (absl::Status st = ValidateKind(kind); !st.ok()) return st;
  if (absl::Status st = ValidateDeviceName(device); !st.ok()) return st;
  return absl::StrCat(kind, "=", device);
}

absl::StatusOr<std::string> TransientSpecFileName(absl::string_view kind, absl::string_view id) {
  if (absl::Status st = ValidateKind(kind); !st.ok()) return st;
  if (id.empty()) return absl::InvalidArgumentError("empty transient spec id");
  if (id.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid transient spec id ", Quote(id), ": holds a NUL byte"));
  }
  std::string name = absl::StrCat(kind, "_", id, ".json");
  // The kind's '/' becomes '-', the id's become '_': the name is one path component.
  name[kind.find('/')] = '-';
  std::replace(name.begin() + kind.size(), name.end(), '/', '_');
  return name;
}

}  // namespace topodra::cdi
