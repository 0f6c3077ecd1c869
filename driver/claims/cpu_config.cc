#include "driver/claims/cpu_config.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "driver/kube/quantity.h"

namespace topodra::claims {
namespace {

using json = nlohmann::json;

// Values from a claim go into messages quoted; a hostile claim must not make a message huge.
std::string Quote(std::string_view value) {
  constexpr size_t kMax = 80;
  if (value.size() <= kMax) return "\"" + std::string(value) + "\"";
  return "\"" + std::string(value.substr(0, kMax)) + "...\"";
}

// "CPU 7 is" / "CPUs 0-1 are".
std::string CpusAre(const CpuSet& cpus) {
  return cpus.Size() == 1 ? absl::StrCat("CPU ", cpus.ToString(), " is")
                          : absl::StrCat("CPUs ", cpus.ToString(), " are");
}

absl::Status Invalid(std::string_view prefix, std::string_view message) {
  return absl::InvalidArgumentError(std::string(prefix) + std::string(message));
}

absl::Status CheckOnlyFields(const json& object, std::string_view path,
                             std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || key == k;
    if (!found) return Invalid("unknown field ", Quote(std::string(path) + key));
  }
  return absl::OkStatus();
}

// The consumed capacity as a whole number of CPUs.
absl::StatusOr<int> ConsumedCpus(const DeviceResult& result, std::string_view name) {
  const std::string what = "consumedCapacity " + std::string(name);
  auto it = result.consumed_capacity.find(std::string(name));
  if (it == result.consumed_capacity.end()) return Invalid(what, " is missing");
  const std::optional<long double> q = kube::ParseQuantity(it->second);
  if (!q.has_value() || !std::isfinite(*q)) {
    return Invalid(what, absl::StrCat(" is not a quantity (", Quote(it->second), ")"));
  }
  if (*q < 0) return Invalid(what, absl::StrCat(" is negative (", Quote(it->second), ")"));
  if (*q > CpuSet::kMaxCpuId + 1) {
    return Invalid(what, absl::StrCat(" is more CPUs than any node has (", Quote(it->second), ")"));
  }
  // Suffixes such as "m" are applied in long double, so "4000m" may be off by an ulp from 4.
  const long double rounded = std::roundl(*q);
  if (std::fabs(*q - rounded) > 1e-12L) {
    return Invalid(what, absl::StrCat(" is fractional (", Quote(it->second), ")"));
  }
  if (rounded == 0) return Invalid(what, absl::StrCat(" is 0 (", Quote(it->second), ")"));
  return static_cast<int>(rounded);
}

std::string HolderText(const NodeCpuState& node, int cpu) {
  if (node.holder) {
    if (std::optional<std::string> who = node.holder(cpu); who.has_value()) return *who;
  }
  return "another claim";
}

// Rules that depend only on the node, not on the claim's other results.
absl::Status CheckAgainstNode(const CpuSet& cpus, const topology::Topology& topo,
                              const NodeCpuState& node) {
  const CpuSet not_online = cpus - topo.online;
  if (const CpuSet offline = not_online & topo.offline; !offline.Empty()) {
    return Invalid(CpusAre(offline), " offline");
  }
  if (!not_online.Empty()) return Invalid(CpusAre(not_online), " not on this node");
  if (const CpuSet reserved = cpus & node.reserved; !reserved.Empty()) {
    return Invalid(CpusAre(reserved), " reserved (--reserved-cpus)");
  }
  if (const CpuSet held = cpus & node.held_by_others; !held.Empty()) {
    // Grouped by holder, in CPU order of each holder's first CPU.
    std::vector<std::pair<std::string, CpuSet>> groups;
    for (int cpu : held) {
      std::string holder = HolderText(node, cpu);
      auto it = groups.begin();
      while (it != groups.end() && it->first != holder) ++it;
      if (it == groups.end()) {
        groups.emplace_back(std::move(holder), CpuSet{cpu});
      } else {
        it->second.Add(cpu);
      }
    }
    std::vector<std::string> parts;
    for (const auto& [holder, set] : groups) {
      parts.push_back(absl::StrCat(CpusAre(set), " already prepared for ", holder));
    }
    return absl::InvalidArgumentError(absl::StrJoin(parts, "; "));
  }
  if (const CpuSet taken = cpus & node.reserved_for_others; !taken.Empty()) {
    std::vector<std::pair<std::string, CpuSet>> groups;
    for (int cpu : taken) {
      std::string who = node.reservation ? node.reservation(cpu) : "a reservation";
      auto it = groups.begin();
      while (it != groups.end() && it->first != who) ++it;
      if (it == groups.end()) {
        groups.emplace_back(std::move(who), CpuSet{cpu});
      } else {
        it->second.Add(cpu);
      }
    }
    std::vector<std::string> parts;
    for (const auto& [who, set] : groups) {
      parts.push_back(
          absl::StrCat(CpusAre(set), " held by ", who, ", and the claim is not one of its owners"));
    }
    return absl::InvalidArgumentError(absl::StrJoin(parts, "; "));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CpuConfig> ParseCpuConfigParameters(const json& parameters) {
  if (!parameters.is_object()) {
    return Invalid("parameters: expected an object, got ", parameters.type_name());
  }
  if (absl::Status s = CheckOnlyFields(parameters, "", {"apiVersion", "cpuConfig"}); !s.ok()) {
    return s;
  }
  auto api = parameters.find("apiVersion");
  if (api == parameters.end()) {
    return Invalid("apiVersion is missing (expected ", Quote(kCpuConfigApiVersion) + ")");
  }
  if (!api->is_string()) return Invalid("apiVersion: expected a string, got ", api->type_name());
  if (api->get_ref<const std::string&>() != kCpuConfigApiVersion) {
    return Invalid("unsupported apiVersion ",
                   absl::StrCat(Quote(api->get_ref<const std::string&>()), " (expected ",
                                Quote(kCpuConfigApiVersion), ")"));
  }
  auto config = parameters.find("cpuConfig");
  if (config == parameters.end()) return Invalid("cpuConfig is missing", "");
  if (!config->is_object()) {
    return Invalid("cpuConfig: expected an object, got ", config->type_name());
  }
  if (absl::Status s = CheckOnlyFields(*config, "cpuConfig.", {"cpuset", "numaMemory"}); !s.ok()) {
    return s;
  }
  CpuConfig out;
  if (auto numa = config->find("numaMemory"); numa != config->end()) {
    absl::StatusOr<NumaMemory> m = ParseNumaMemory(*numa);
    if (!m.ok()) return m.status();
    out.numa_memory = *std::move(m);
  }
  auto cpuset = config->find("cpuset");
  if (cpuset == config->end()) {
    if (out.numa_memory) return out;
    return Invalid("cpuConfig.cpuset is missing", "");
  }
  if (!cpuset->is_string()) {
    return Invalid("cpuConfig.cpuset: expected a string, got ", cpuset->type_name());
  }
  const std::string& text = cpuset->get_ref<const std::string&>();
  if (text.empty()) return Invalid("cpuConfig.cpuset is empty", "");
  absl::StatusOr<CpuSet> set = CpuSet::Parse(text);
  if (!set.ok()) return Invalid("cpuConfig.cpuset: ", Message(set.status()));
  if (set->Empty()) return Invalid("cpuConfig.cpuset is empty: ", Quote(text));
  out.cpuset = *std::move(set);
  return out;
}

absl::StatusOr<CpuSet> ParseCpuConfig(const json& parameters) {
  absl::StatusOr<CpuConfig> config = ParseCpuConfigParameters(parameters);
  if (!config.ok()) return config.status();
  if (!config->cpuset) return Invalid("cpuConfig.cpuset is missing", "");
  return *config->cpuset;
}

absl::StatusOr<NumaMemory> ParseNumaMemory(const json& value) {
  constexpr char kField[] = "cpuConfig.numaMemory";
  std::vector<const json*> items;
  if (value.is_string()) {
    items.push_back(&value);
  } else if (value.is_array()) {
    if (value.empty()) return Invalid(kField, " is empty");
    if (value.size() > kMaxNumaMemoryEntries) {
      return Invalid(kField, absl::StrCat(" has ", value.size(), " entries (at most ",
                                          kMaxNumaMemoryEntries, ")"));
    }
    for (const json& item : value) items.push_back(&item);
  } else {
    return Invalid(
        kField, absl::StrCat(": expected a string or a list of strings, got ", value.type_name()));
  }
  NumaMemory out;
  out.local = false;
  bool all = false;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string where = value.is_array() ? absl::StrCat(kField, "[", i, "]") : "";
    const std::string at = where.empty() ? std::string(kField) : where;
    if (!items[i]->is_string()) {
      return Invalid(at, absl::StrCat(": expected a string, got ", items[i]->type_name()));
    }
    const std::string& text = items[i]->get_ref<const std::string&>();
    if (text.empty()) return Invalid(at, " is empty");
    if (text == "local" || text == "all") {
      bool& flag = text == "local" ? out.local : all;
      if (flag) return Invalid(at, absl::StrCat(": ", Quote(text), " is named twice"));
      flag = true;
      continue;
    }
    const bool list_chars = text.find_first_not_of("0123456789,-") == std::string::npos;
    absl::StatusOr<CpuSet> nodes =
        list_chars ? CpuSet::Parse(text) : absl::InvalidArgumentError("not a list");
    if (!nodes.ok() || nodes->Empty()) {
      return Invalid(at, absl::StrCat(": ", Quote(text),
                                      " is not \"local\", \"all\" or a list of NUMA node ids "
                                      "such as \"2\" or \"2-3\""));
    }
    if (*nodes->Last() > kMaxNumaNodeId) {
      return Invalid(at, absl::StrCat(": NUMA node ", *nodes->Last(), " in ", Quote(text),
                                      " is above ", kMaxNumaNodeId, ", the largest Linux has"));
    }
    if (const CpuSet twice = out.nodes & *nodes; !twice.Empty()) {
      return Invalid(at, absl::StrCat(": NUMA node ", twice.ToString(), " in ", Quote(text),
                                      " is named twice"));
    }
    out.nodes |= *nodes;
  }
  if (all) {
    if (items.size() > 1) {
      return Invalid(kField, absl::StrCat(": \"all\" cannot be combined with other entries (",
                                          Quote(value.dump()), ")"));
    }
    return NumaMemory{.local = false, .all = true, .nodes = {}};
  }
  return out;
}

absl::StatusOr<CpuSet> MemoryNodes(const NumaMemory& policy, const CpuSet& cpus,
                                   const topology::Topology& topo) {
  CpuSet known, with_memory, local;
  for (const topology::NumaNode& n : topo.numa_nodes) {
    if (n.id < 0 || n.id > kMaxNumaNodeId) continue;
    known.Add(n.id);
    if (n.memory_bytes > 0) with_memory.Add(n.id);
    if (n.cpus.Intersects(cpus)) local.Add(n.id);
  }
  if (policy.all) return with_memory.Empty() ? known : with_memory;
  if (const CpuSet missing = policy.nodes - known; !missing.Empty()) {
    return Invalid(
        absl::StrCat("numaMemory: NUMA node", missing.Size() == 1 ? " " : "s ", missing.ToString(),
                     missing.Size() == 1 ? " is" : " are", " not on this node"),
        absl::StrCat(" (its NUMA nodes: ", known.Empty() ? "none" : known.ToString(), ")"));
  }
  // A NUMA node with CPUs but no memory is never in the root cpuset's mems: naming it would make
  // the hook refuse the container. Such CPUs allocate from the nearest memory, as without us.
  if (!with_memory.Empty()) local &= with_memory;
  return policy.local ? policy.nodes | local : policy.nodes;
}

absl::StatusOr<std::vector<CpuAssignment>> ResolveCpuAssignments(
    const Claim& claim, std::string_view driver, const topology::Topology& topo,
    const NodeCpuState& node, const CpuPool& pool, std::string_view cpu_capacity_name) {
  const std::string claim_prefix = absl::StrCat("claim ", claim.Ref());
  if (!claim.allocated) return Invalid(claim_prefix, " is not allocated");
  std::vector<CpuAssignment> out;
  for (size_t i = 0; i < claim.results.size(); ++i) {
    const DeviceResult& result = claim.results[i];
    if (result.driver != driver) continue;
    const std::string prefix = absl::StrCat(claim_prefix, " request ", Quote(result.request), ": ");
    CpuAssignment a;
    a.result_index = static_cast<int>(i);
    a.request = result.request;
    a.base_request = BaseRequest(result.request);
    a.pool = result.pool;
    a.device = result.device;
    a.share_id = result.share_id;
    if (result.pool != pool.name) {
      return Invalid(prefix, absl::StrCat("pool ", Quote(result.pool), " is not this node's pool ",
                                          Quote(pool.name)));
    }
    auto device = pool.devices.find(result.device);
    if (device == pool.devices.end()) {
      return Invalid(prefix, absl::StrCat("device ", Quote(result.device),
                                          " is not a CPU device of this node"));
    }
    a.device_cpus = device->second.cpus;
    const bool individual = device->second.kind == CpuDeviceKind::kIndividual;
    if (individual) {
      a.count = 1;
    } else {
      absl::StatusOr<int> count = ConsumedCpus(result, cpu_capacity_name);
      if (!count.ok()) return Invalid(prefix, Message(count.status()));
      a.count = *count;
    }

    const std::vector<const DeviceConfig*> configs = ConfigsFor(claim, result, driver);
    for (ConfigSource source : {ConfigSource::kFromClass, ConfigSource::kFromClaim}) {
      std::vector<std::string> names;
      for (const DeviceConfig* c : configs) {
        if (c->source == source)
          names.push_back(absl::StrCat("config[", c - claim.configs.data(), "]"));
      }
      if (names.size() > 1) {
        return Invalid(prefix, absl::StrCat(names.size(), " configs target request ",
                                            Quote(result.request), " (", ConfigSourceName(source),
                                            " ", absl::StrJoin(names, ", "), ")"));
      }
    }
    // Claim configs come after class configs: the last one wins.
    std::optional<CpuConfig> parsed;
    std::string where;
    if (!configs.empty()) {
      const DeviceConfig& config = *configs.back();
      where = absl::StrCat("config[", &config - claim.configs.data(), "] (",
                           ConfigSourceName(config.source), "): ");
      absl::StatusOr<CpuConfig> c = ParseCpuConfigParameters(config.parameters);
      if (!c.ok()) return Invalid(prefix, absl::StrCat(where, Message(c.status())));
      if (c->numa_memory) {
        if (absl::StatusOr<CpuSet> m = MemoryNodes(*c->numa_memory, CpuSet{}, topo); !m.ok()) {
          return Invalid(prefix, absl::StrCat(where, Message(m.status())));
        }
        a.numa_memory = c->numa_memory;
      }
      parsed = *std::move(c);
    }
    if (individual && parsed && parsed->cpuset) {
      const DeviceConfig& config = *configs.back();
      return Invalid(prefix, absl::StrCat("config[", &config - claim.configs.data(), "]: device ",
                                          Quote(result.device),
                                          " is one CPU (individual mode); a cpuset config is not "
                                          "accepted for it"));
    }
    if (device->second.kind == CpuDeviceKind::kMachine && !(parsed && parsed->cpuset)) {
      return Invalid(prefix, absl::StrCat("device ", Quote(result.device),
                                          " spans the whole machine: an opaque config ",
                                          "{\"apiVersion\":\"v1alpha1\",\"cpuConfig\":{\"cpuset\":",
                                          "\"...\"}} naming the CPUs is required"));
    }
    if (individual) {
      const CpuSet cpus = device->second.cpus;
      if (absl::Status s = CheckAgainstNode(cpus, topo, node); !s.ok()) {
        return Invalid(prefix, absl::StrCat("device ", Quote(result.device), ": ", Message(s)));
      }
      for (const CpuAssignment& earlier : out) {
        if (earlier.explicit_cpus.has_value() && earlier.explicit_cpus->Intersects(cpus)) {
          return Invalid(claim_prefix,
                         absl::StrCat(": ", CpusAre(cpus), " used by two results (requests ",
                                      Quote(earlier.request), " and ", Quote(result.request), ")"));
        }
      }
      a.explicit_cpus = cpus;
    } else if (parsed && parsed->cpuset) {
      std::optional<CpuSet> cpus = parsed->cpuset;
      const std::string quoted = Quote(cpus->ToString());
      if (cpus->Size() != a.count) {
        return Invalid(prefix, absl::StrCat("cpuset ", quoted, " has ", cpus->Size(),
                                            " CPUs but the request consumes ", a.count, " ",
                                            std::string(cpu_capacity_name)));
      }
      if (absl::Status s = CheckAgainstNode(*cpus, topo, node); !s.ok()) {
        return Invalid(prefix, absl::StrCat("cpuset ", quoted, ": ", Message(s)));
      }
      if (const CpuSet outside = *cpus - device->second.cpus; !outside.Empty()) {
        return Invalid(prefix, absl::StrCat("cpuset ", quoted, ": ", CpusAre(outside),
                                            " not in the allocated device ", Quote(result.device),
                                            " (CPUs ", device->second.cpus.ToString(), ")"));
      }
      for (const CpuAssignment& earlier : out) {
        if (!earlier.explicit_cpus.has_value()) continue;
        if (const CpuSet both = *earlier.explicit_cpus & *cpus; !both.Empty()) {
          return Invalid(claim_prefix,
                         absl::StrCat(": ", CpusAre(both), " used by two results (requests ",
                                      Quote(earlier.request), " and ", Quote(result.request), ")"));
        }
      }
      a.explicit_cpus = *std::move(cpus);
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace topodra::claims
