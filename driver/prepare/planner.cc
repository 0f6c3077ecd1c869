#include "driver/prepare/planner.h"

#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_print.h"
#include "common/status.h"
#include "driver/allocation/cpu_allocator.h"
#include "driver/reservation/lifecycle.h"
#include "driver/state/compact_json.h"

namespace topodra::prepare {
namespace {

using json = nlohmann::json;

std::string Quote(const std::string& value) {
  constexpr size_t kMax = 80;
  if (value.size() <= kMax) return "\"" + value + "\"";
  return "\"" + value.substr(0, kMax) + "...\"";
}

// CDI device names must be unique in a spec; a claim can hold two shares of one device.
std::string UniqueName(const std::string& base, std::set<std::string>* used) {
  std::string name = base;
  for (int n = 2; !used->insert(name).second; ++n) name = absl::StrCat(base, "-", n);
  return name;
}

std::string QualifiedOrEmpty(const std::string& kind, const std::string& device) {
  absl::StatusOr<std::string> q = cdi::QualifiedName(kind, device);
  return q.ok() ? *q : std::string();
}

// The reservation whose devices a claim takes (its usage is accounted there), or "". A claim
// may draw on one reservation only: two would each see the claim as partly theirs.
absl::StatusOr<std::string> OneReservation(const claims::Claim& claim, const state::State& held,
                                           const CpuSet& cpus, const std::set<std::string>& gpus) {
  std::set<std::string> touched;
  for (int cpu : cpus) {
    if (std::optional<std::string> uid = held.ReservationOfCpu(cpu)) touched.insert(*uid);
  }
  for (const std::string& gpu : gpus) {
    if (std::optional<std::string> uid = held.ReservationOfGpu(gpu)) touched.insert(*uid);
  }
  if (touched.size() > 1) {
    std::vector<std::string> names;
    for (const std::string& uid : touched) {
      names.push_back(reservation::Describe(*held.FindReservation(uid)));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("claim ", claim.Ref(), " takes devices of several reservations (",
                     absl::StrJoin(names, ", "), "); a claim may use one reservation"));
  }
  return touched.empty() ? std::string() : *touched.begin();
}

json AttributesOf(const DriverSetup& setup, const std::string& device) {
  auto it = setup.device_attributes.find(device);
  return it == setup.device_attributes.end() ? json::object() : it->second;
}

// The metadata files of a planned claim, their CDI ids appended to the first device of each
// request (after its own), as the kubelet plugin library does.
absl::Status AddDeviceMetadata(const claims::Claim& claim, const DriverSetup& setup, Plan* plan) {
  absl::StatusOr<DeviceMetadataPlan> meta =
      PlanDeviceMetadata(claim, setup.driver, setup.metadata_root, plan->metadata_devices);
  if (!meta.ok()) return meta.status();
  for (const MetadataFile& f : meta->files) {
    for (PreparedDevice& d : plan->devices) {
      if (!d.request_names.empty() && d.request_names[0] == f.request) {
        d.cdi_device_ids.push_back(f.cdi_id);
        break;
      }
    }
  }
  plan->metadata = std::move(meta->files);
  plan->notes = std::move(meta->notes);
  return absl::OkStatus();
}

struct ResultCpus {
  const claims::CpuAssignment* assignment;
  CpuSet cpus;
};

// An environment variable name (part) any shell keeps: letters, digits and '_'. PCI ids have
// ':' and '.', claim UIDs and request names '-'.
std::string EnvSafe(std::string text) {
  for (char& c : text) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) c = '_';
  }
  return text;
}

// Adds name=value, and the same value under the name with every character a shell may not keep
// replaced by '_' when that differs: dash and busybox sh drop variables whose name has a '-' (a
// claim UID's) from the environment of what they start, so a container whose command is
// `sh -c ...` would lose DRA_CPUSET_<uid>. The first name stays for dra-driver-cpu compatibility.
void AddEnvWithShellSafeName(std::vector<std::string>* env, const std::string& name,
                             const std::string& value) {
  env->push_back(absl::StrCat(name, "=", value));
  if (const std::string safe = EnvSafe(name); safe != name) {
    env->push_back(absl::StrCat(safe, "=", value));
  }
}

// --numa-memory=claim: the memory nodes of every result's CPUs under its numaMemory config;
// empty (no --mems, every node) without it.
absl::StatusOr<CpuSet> ClaimMemoryNodes(const claims::Claim& claim, const DriverSetup& setup,
                                        const topology::Topology& topo,
                                        const std::vector<ResultCpus>& chosen) {
  CpuSet mems;
  if (!setup.cpuset_hook || !setup.cpuset_hook->numa_memory) return mems;
  for (const ResultCpus& r : chosen) {
    absl::StatusOr<CpuSet> m =
        claims::MemoryNodes(r.assignment->numa_memory.value_or(claims::NumaMemory{}), r.cpus, topo);
    if (!m.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("claim ", claim.Ref(), " request ",
                                                     Quote(r.assignment->request), ": ",
                                                     m.status().message()));
    }
    mems |= *m;
  }
  return mems;
}

absl::StatusOr<Plan> PlanCpu(const claims::Claim& claim, const DriverSetup& setup,
                             const topology::Topology& topo, const state::State& held,
                             const std::string& owner, const allocation::CpuLayout* cpu_layout) {
  claims::NodeCpuState node;
  node.reserved = setup.reserved;
  node.held_by_others = held.HeldCpus();
  if (const state::Allocation* own = held.Find(owner); own != nullptr) {
    node.held_by_others -= own->cpus;
  }
  node.holder = [&held](int cpu) -> std::optional<std::string> {
    std::optional<std::string> who = held.HolderOfCpu(cpu);
    if (!who) return std::nullopt;
    const state::Allocation* a = held.Find(*who);
    if (a == nullptr) return std::nullopt;
    return state::Describe(*a);
  };
  // Reserved CPUs are for the reservations' owners only.
  const std::set<std::string> usable = reservation::UsableBy(held, claim);
  node.reserved_for_others = held.ReservedCpus();
  for (const std::string& uid : usable) {
    node.reserved_for_others -= held.FindReservation(uid)->cpus;
  }
  node.reservation = [&held](int cpu) {
    const std::optional<std::string> uid = held.ReservationOfCpu(cpu);
    const state::Reservation* r = uid ? held.FindReservation(*uid) : nullptr;
    return r != nullptr ? reservation::Describe(*r) : std::string("a reservation");
  };
  absl::StatusOr<std::vector<claims::CpuAssignment>> assignments = claims::ResolveCpuAssignments(
      claim, setup.driver, topo, node, setup.cpu_pool, setup.cpu_capacity);
  if (!assignments.ok()) return assignments.status();

  // Named CPUs first, so the picks of the other results steer clear of them.
  CpuSet taken;
  std::vector<ResultCpus> chosen;
  for (const claims::CpuAssignment& a : *assignments) {
    chosen.push_back({&a, a.explicit_cpus.value_or(CpuSet{})});
    if (a.explicit_cpus) taken |= *a.explicit_cpus;
  }
  for (ResultCpus& r : chosen) {
    const claims::CpuAssignment& a = *r.assignment;
    if (a.explicit_cpus) continue;
    allocation::CpuRequest req;
    req.count = a.count;
    req.available =
        a.device_cpus - node.reserved - node.held_by_others - node.reserved_for_others - taken;
    absl::StatusOr<CpuSet> cpus = cpu_layout != nullptr ? allocation::AllocateCpus(*cpu_layout, req)
                                                        : allocation::AllocateCpus(topo, req);
    if (!cpus.ok()) {
      const CpuSet free = req.available & topo.online;
      if (const CpuSet blocked = a.device_cpus & node.reserved_for_others; !blocked.Empty()) {
        // Most likely a reservation's own device: say whose, not just "no CPU free".
        return absl::InvalidArgumentError(absl::StrCat(
            "claim ", claim.Ref(), " request ", Quote(a.request), ": ", a.count,
            " CPUs wanted from device ", Quote(a.device), " but ",
            blocked.Size() == 1 ? "CPU " : "CPUs ", blocked.ToString(), " there ",
            blocked.Size() == 1 ? "is" : "are", " held by ", node.reservation(*blocked.begin()),
            ", and the claim is not one of its owners (", free.Size(), " free otherwise)"));
      }
      return absl::Status(
          cpus.status().code() == absl::StatusCode::kResourceExhausted
              ? absl::StatusCode::kResourceExhausted
              : absl::StatusCode::kInternal,
          absl::StrCat("claim ", claim.Ref(), " request ", Quote(a.request), ": ", a.count,
                       " CPUs wanted from device ", Quote(a.device), " but only ", free.Size(),
                       " are free there (", free.Empty() ? "none" : free.ToString(), ")"));
    }
    r.cpus = *cpus;
    taken |= *cpus;
  }

  if (setup.cpuset_hook && !taken.Empty()) {
    if (absl::Status st =
            KeepSharedPool(absl::StrCat("claim ", claim.Ref()), topo, node.reserved,
                           setup.cpuset_hook->strict_cpu_reservation, node.held_by_others, taken);
        !st.ok()) {
      return st;
    }
  }

  absl::StatusOr<CpuSet> mems = ClaimMemoryNodes(claim, setup, topo, chosen);
  if (!mems.ok()) return mems.status();

  Plan plan;
  state::Allocation& alloc = plan.allocation;
  alloc.cpus = taken;
  alloc.mems = *mems;
  absl::StatusOr<std::string> from = OneReservation(claim, held, taken, {});
  if (!from.ok()) return from.status();
  alloc.reservation = *from;
  if (chosen.empty()) return plan;

  // Per base request, the union of its CPUs: every device of a request carries the same value,
  // so a container that gets several of them sees one consistent variable.
  std::map<std::string, CpuSet> by_request;
  for (const ResultCpus& r : chosen) by_request[r.assignment->base_request] |= r.cpus;

  const std::string uid = claim.uid;
  plan.cdi_file = CdiFileName(setup.driver, uid, setup.cdi_marker);
  plan.cdi_spec.kind = CdiKind(setup.driver);
  // dra-driver-cpu's variable: the claim's CPUs, whatever request a container names.
  AddEnvWithShellSafeName(&plan.cdi_spec.container_edits.env, absl::StrCat("DRA_CPUSET_", uid),
                          taken.ToString());
  // Whatever device of the claim a container gets, it runs on all of the claim's CPUs.
  if (setup.cpuset_hook) {
    plan.cdi_spec.container_edits.hooks.push_back(
        CpusetHookFor(*setup.cpuset_hook, uid, taken, *mems));
  }
  std::set<std::string> names;
  for (const ResultCpus& r : chosen) {
    const claims::CpuAssignment& a = *r.assignment;
    cdi::Device device;
    device.name = UniqueName(absl::StrCat(uid, "-", a.device), &names);
    AddEnvWithShellSafeName(&device.container_edits.env,
                            absl::StrCat("DRA_CPUSET_", uid, "_", a.base_request),
                            by_request[a.base_request].ToString());
    MetadataDevice meta{a.request, a.pool, a.device,
                        CpuRequestAttributes(topo, by_request[a.base_request]),
                        AttributesOf(setup, a.device)};
    meta.decided.emplace_back(kAllocatedCpusAttribute, json{{"int", r.cpus.Size()}});
    if (!mems->Empty()) {
      meta.decided.emplace_back(kMemoryNodesAttribute,
                                json{{"ints", std::vector<int>(mems->begin(), mems->end())}});
    }
    plan.metadata_devices.push_back(std::move(meta));
    PreparedDevice out;
    out.request_names = {a.base_request};
    out.pool = a.pool;
    out.device = a.device;
    out.cdi_device_ids = {QualifiedOrEmpty(plan.cdi_spec.kind, device.name)};
    if (!a.share_id.empty()) out.share_id = a.share_id;
    plan.devices.push_back(std::move(out));
    plan.cdi_spec.devices.push_back(std::move(device));
  }
  return plan;
}

absl::StatusOr<Plan> PlanGpu(const claims::Claim& claim, const DriverSetup& setup,
                             const state::State& held, const std::string& owner) {
  const std::string claim_prefix = absl::StrCat("claim ", claim.Ref());
  if (!claim.allocated) return absl::InvalidArgumentError(claim_prefix + " is not allocated");
  const std::vector<const claims::DeviceResult*> results =
      claims::ResultsForDriver(claim, setup.driver);
  Plan plan;
  state::Allocation& alloc = plan.allocation;
  const std::set<std::string> usable = reservation::UsableBy(held, claim);
  struct Chosen {
    const claims::DeviceResult* result;
    const GpuDevice* gpu;
  };
  std::vector<Chosen> chosen;
  std::map<std::string, std::vector<std::string>> by_request;  // base request -> PCI ids
  for (const claims::DeviceResult* r : results) {
    const std::string prefix = absl::StrCat(claim_prefix, " request ", Quote(r->request), ": ");
    for (const claims::DeviceConfig* c : claims::ConfigsFor(claim, *r, setup.driver)) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "config[", c - claim.configs.data(), "] (", claims::ConfigSourceName(c->source),
          "): driver ", setup.driver, " takes no opaque configuration"));
    }
    if (r->pool != setup.gpu_pool) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "pool ", Quote(r->pool), " is not this node's pool ", Quote(setup.gpu_pool)));
    }
    auto it = setup.gpus.find(r->device);
    if (it == setup.gpus.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "device ", Quote(r->device), " is not a GPU of this node"));
    }
    const GpuDevice& gpu = it->second;
    if (!r->admin_access) {
      // Admin access (monitoring) shares the device with its exclusive holder.
      if (std::optional<std::string> who = held.HolderOfGpu(gpu.pci_bus_id);
          who.has_value() && *who != owner) {
        const state::Allocation* a = held.Find(*who);
        return absl::InvalidArgumentError(absl::StrCat(
            prefix, "GPU ", Quote(r->device), " (", gpu.pci_bus_id, ") is already prepared for ",
            a != nullptr ? state::Describe(*a) : "another owner"));
      }
      if (std::optional<std::string> uid = held.ReservationOfGpu(gpu.pci_bus_id);
          uid.has_value() && !usable.contains(*uid)) {
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, "GPU ", Quote(r->device), " (", gpu.pci_bus_id, ") is held by ",
                         reservation::Describe(*held.FindReservation(*uid)),
                         ", and the claim is not one of its owners"));
      }
      if (!alloc.gpus.insert(gpu.pci_bus_id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(claim_prefix, ": GPU ", Quote(r->device), " is allocated to two results"));
      }
    }
    by_request[claims::BaseRequest(r->request)].push_back(gpu.pci_bus_id);
    chosen.push_back({r, &gpu});
  }
  absl::StatusOr<std::string> from = OneReservation(claim, held, {}, alloc.gpus);
  if (!from.ok()) return from.status();
  alloc.reservation = *from;
  if (chosen.empty()) return plan;

  const std::string uid = claim.uid;
  plan.cdi_file = CdiFileName(setup.driver, uid, setup.cdi_marker);
  plan.cdi_spec.kind = CdiKind(setup.driver);
  std::set<std::string> names;
  for (const Chosen& c : chosen) {
    const std::string base = claims::BaseRequest(c.result->request);
    cdi::Device device;
    device.name = UniqueName(absl::StrCat(uid, "-", c.result->device), &names);
    device.container_edits.device_nodes = c.gpu->device_nodes;
    // Which GPUs a request got, by PCI address: what CUDA_VISIBLE_DEVICES-style tooling and
    // operators need to tell them apart.
    device.container_edits.env.push_back(absl::StrCat("TOPODRA_GPU_", EnvSafe(uid), "_",
                                                      EnvSafe(base), "=",
                                                      absl::StrJoin(by_request[base], ",")));
    plan.metadata_devices.push_back({c.result->request,
                                     c.result->pool,
                                     c.result->device,
                                     {{kPciBusIdAttribute, json{{"string", c.gpu->pci_bus_id}}}},
                                     AttributesOf(setup, c.result->device)});
    PreparedDevice out;
    out.request_names = {base};
    out.pool = c.result->pool;
    out.device = c.result->device;
    out.cdi_device_ids = {QualifiedOrEmpty(plan.cdi_spec.kind, device.name)};
    if (!c.result->share_id.empty()) out.share_id = c.result->share_id;
    plan.devices.push_back(std::move(out));
    plan.cdi_spec.devices.push_back(std::move(device));
  }
  return plan;
}

}  // namespace

cdi::Hook CpusetHookFor(const CpusetHook& hook, const std::string& claim_id, const CpuSet& cpus,
                        const CpuSet& mems) {
  cdi::Hook h;
  h.hook_name = "createRuntime";
  h.path = hook.path;
  h.args = {"topodra-cpuset-hook", "--cpus",         cpus.ToString(), "--claim",       claim_id,
            "--records",           hook.records_dir, "--cgroup-root", hook.cgroup_root};
  if (!mems.Empty()) {
    h.args.insert(h.args.begin() + 3, {"--mems", mems.ToString()});
  }
  h.timeout = 10;
  return h;
}

CpuSet SharedPool(const CpuSet& online, const CpuSet& reserved, bool strict, const CpuSet& held) {
  return strict ? online - reserved - held : online - held;
}

absl::Status KeepSharedPool(const std::string& what, const topology::Topology& topo,
                            const CpuSet& reserved, bool strict, const CpuSet& held,
                            const CpuSet& taking) {
  if (!SharedPool(topo.online, reserved, strict, held | taking).Empty()) {
    return absl::OkStatus();
  }
  auto text = [](const CpuSet& s) { return s.Empty() ? std::string("none") : s.ToString(); };
  // Without --strict-cpu-reservation, only a node whose reserved CPUs are all offline (or none)
  // gets here: say what would have kept the pool.
  const std::string why =
      strict ? absl::StrCat("reserved ", text(reserved),
                            ", kept out of it by --strict-cpu-reservation")
             : absl::StrCat("reserved ", text(reserved & topo.online),
                            " online: the reserved CPUs (--reserved-cpus) stay in it");
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": taking CPUs ", text(taking),
                   " would leave no CPU for the containers without a CPU claim (online ",
                   text(topo.online), ", held by other claims ", text(held & topo.online), ", ",
                   why, "); the shared pool must keep at least one CPU"));
}

std::string CdiKind(const std::string& driver) { return driver + "/claim"; }

std::string CdiInstanceMarker(const std::string& node_name, const std::string& state_dir) {
  // Written out rather than std::hash: the value must be the same in every build and release.
  uint64_t h = 0xcbf29ce484222325u;
  auto mix = [&h](absl::string_view text) {
    for (char c : text) {
      h ^= static_cast<uint8_t>(c);
      h *= 0x100000001b3u;
    }
  };
  mix(node_name);
  mix(absl::string_view("\0", 1));
  mix(state_dir);
  std::string hex(16, '0');
  for (int i = 15, shift = 0; i >= 0; --i, shift += 4) {
    hex[i] = "0123456789abcdef"[(h >> shift) & 0xFu];
  }
  return hex;
}

std::string CdiMarkerOf(const std::string& file_name) {
  constexpr size_t kTail = 2 + 16 + 5;  // "_i" + marker + ".json"
  if (file_name.size() <= kTail || !absl::EndsWith(file_name, ".json")) return "";
  const std::string tail = file_name.substr(file_name.size() - kTail);
  if (tail[0] != '_' || tail[1] != 'i') return "";
  const std::string marker = tail.substr(2, 16);
  for (char c : marker) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && !(c >= 'a' && c <= 'f')) return "";
  }
  return marker;
}

std::string CdiFileName(const std::string& driver, const std::string& claim_uid,
                        const std::string& marker) {
  if (marker.empty()) return absl::StrCat(driver, "-claim_", claim_uid, ".json");
  return absl::StrCat(driver, "-claim_", claim_uid, "_i", marker, ".json");
}

bool IsCdiFileOf(const std::string& driver, const std::string& file_name) {
  const std::string prefix = driver + "-claim_";
  return absl::StartsWith(file_name, prefix) && absl::EndsWith(file_name, ".json") &&
         file_name.size() > prefix.size() + 5;
}

cdi::CdiFileClass ClassifyCdiFile(bool ours_by_name, const std::string& file_name,
                                  const std::string& marker) {
  if (!ours_by_name) return cdi::CdiFileClass::kForeign;
  const std::string has = CdiMarkerOf(file_name);
  if (has == marker) return cdi::CdiFileClass::kOurs;
  return has.empty() ? cdi::CdiFileClass::kUnmarked : cdi::CdiFileClass::kForeign;
}

absl::StatusOr<Plan> PlanClaim(const claims::Claim& claim, const DriverSetup& setup,
                               const topology::Topology& topo, const state::State& held,
                               const allocation::CpuLayout* cpu_layout) {
  const std::string owner = state::DraOwner(setup.driver, claim.uid);
  absl::StatusOr<Plan> plan = setup.kind == DriverKind::kCpu
                                  ? PlanCpu(claim, setup, topo, held, owner, cpu_layout)
                                  : PlanGpu(claim, setup, held, owner);
  if (!plan.ok()) return plan.status();
  if (!plan->cdi_spec.devices.empty()) {
    plan->cdi_spec.cdi_version = cdi::MinimumVersion(plan->cdi_spec);
    if (absl::Status st = cdi::Validate(plan->cdi_spec); !st.ok()) {
      // Names come from the claim (UID, device names); a value the CDI rules refuse is the
      // claim's problem, reported like any other.
      return absl::InvalidArgumentError(absl::StrCat(
          "claim ", claim.Ref(), ": cannot describe the devices in CDI: ", Message(st)));
    }
  }
  if (setup.device_metadata && !setup.metadata_root.empty() && !plan->metadata_devices.empty()) {
    if (absl::Status st = AddDeviceMetadata(claim, setup, &*plan); !st.ok()) return st;
  }
  state::Allocation& a = plan->allocation;
  a.kind = state::AllocationKind::kDraClaim;
  a.owner = owner;
  a.driver = setup.driver;
  a.claim_namespace = claim.namespace_name;
  a.claim_name = claim.name;
  a.phase = state::Phase::kPreparing;
  a.answer = DevicesToJson(plan->devices);
  if (!plan->cdi_file.empty()) {
    // One document for the file and the stored answer: prepare writes the text as it is.
    const json spec = cdi::ToJson(plan->cdi_spec);
    if (!plan->cdi_spec.devices.empty()) plan->cdi_text = cdi::JsonTextOf(spec);  // validated
    a.cdi = state::JsonText::FromCanonicalText(
        StoredCdiText(plan->cdi_file, spec, plan->metadata, &plan->metadata_cdi_texts));
  }
  return plan;
}

std::string StoredCdiText(const std::string& file, const json& spec,
                          const std::vector<MetadataFile>& metadata,
                          std::vector<std::string>* metadata_cdi_texts) {
  // Members in the order a json object keeps them (sorted), as CompactJson would print them.
  std::string out = "{\"file\":";
  AppendJsonString(file, &out);
  if (!metadata.empty()) {
    out += ",\"metadata\":[";
    for (size_t i = 0; i < metadata.size(); ++i) {
      const MetadataFile& f = metadata[i];
      out += i == 0 ? "{\"cdiFile\":" : ",{\"cdiFile\":";
      AppendJsonString(f.cdi_file, &out);
      out += ",\"cdiId\":";
      AppendJsonString(f.cdi_id, &out);
      out += ",\"cdiSpec\":";
      const json cdi_spec = cdi::ToJson(f.cdi_spec);
      state::AppendCompactJson(cdi_spec, &out);
      // PlanDeviceMetadata validated each spec, so its cdiVersion is one SpecStore::Write keeps:
      // the text printed from the stored value is the one it would write.
      if (metadata_cdi_texts != nullptr) metadata_cdi_texts->push_back(cdi::JsonTextOf(cdi_spec));
      if (f.document.is_null()) {
        out += ",\"content\":";
        AppendJsonString(f.content, &out);
      } else {
        out += ",\"document\":";
        state::AppendCompactJson(f.document, &out);
      }
      out += ",\"hostPath\":";
      AppendJsonString(f.host_path, &out);
      out += ",\"request\":";
      AppendJsonString(f.request, &out);
      out += "}";
    }
    out += "]";
  }
  out += ",\"spec\":";
  state::AppendCompactJson(spec, &out);
  out += "}";
  return out;
}

json DevicesToJson(const std::vector<PreparedDevice>& devices) {
  json list = json::array();
  for (const PreparedDevice& d : devices) {
    json j = {{"requestNames", d.request_names},
              {"pool", d.pool},
              {"device", d.device},
              {"cdiDeviceIds", d.cdi_device_ids}};
    if (d.share_id) j["shareId"] = *d.share_id;
    list.push_back(std::move(j));
  }
  return json{{"devices", std::move(list)}};
}

absl::StatusOr<std::vector<PreparedDevice>> DevicesFromJson(const json& answer) {
  auto bad = [](const std::string& what) {
    return absl::DataLossError(absl::StrCat("stored answer: ", what));
  };
  if (!answer.is_object() || !answer.contains("devices") || !answer["devices"].is_array()) {
    return bad("no devices list");
  }
  std::vector<PreparedDevice> out;
  for (const json& d : answer["devices"]) {
    if (!d.is_object()) return bad("device is not an object");
    PreparedDevice p;
    auto strings = [&d](const char* key, std::vector<std::string>* to) {
      auto it = d.find(key);
      if (it == d.end() || !it->is_array()) return false;
      for (const json& s : *it) {
        if (!s.is_string()) return false;
        to->push_back(s.get<std::string>());
      }
      return true;
    };
    auto string = [&d](const char* key, std::string* to) {
      auto it = d.find(key);
      if (it == d.end() || !it->is_string()) return false;
      *to = it->get<std::string>();
      return true;
    };
    if (!strings("requestNames", &p.request_names) || !strings("cdiDeviceIds", &p.cdi_device_ids) ||
        !string("pool", &p.pool) || !string("device", &p.device)) {
      return bad("device fields missing or of the wrong type");
    }
    if (d.contains("shareId")) {
      std::string share;
      if (!string("shareId", &share)) return bad("shareId is not a string");
      p.share_id = share;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace topodra::prepare
