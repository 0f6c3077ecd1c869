// Shared by the planner and ClaimService tests: fixture machines, the node's driver setups as the
// daemon builds them from what it publishes, and ResourceClaims as inline JSON.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "driver/prepare/planner.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/names.h"
#include "nlohmann/json.hpp"
#include "test/testing/fixtures.h"

namespace topodra::prepare::testing {

using json = nlohmann::json;

inline constexpr char kCpuDriver[] = "dra.cpu";
inline constexpr char kGpuDriver[] = "gpu.topodra.io";
inline constexpr char kNode[] = "node1";

// 16 CPUs, 1 NUMA node, 4 sockets of 2 cores x 2 threads; core siblings are N and N+8.
inline constexpr char k16[] = "16em64t-4s2c2t.xml";
// 384 CPUs, 24 NUMA nodes of 16; NUMA node n is 8n..8n+7 and 192+8n..192+8n+7.
inline constexpr char k192[] = "192em64t-24n8c2t.xml";
// 4 CPUs, 16 NVIDIA GPUs.
inline constexpr char kDgx[] = "nvidiaDGX2.xml";

// Loaded once per process: the 384-CPU export takes a while to parse.
inline const topology::Topology& Load(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, topology::Topology>* cache =
      new std::map<std::string, topology::Topology>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(name);
  if (it == cache->end()) it = cache->emplace(name, topodra::testing::LoadTopology(name)).first;
  return it->second;
}

enum class Mode { kIndividual, kNuma, kSocket, kMachine };

inline const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kIndividual:
      return "individual";
    case Mode::kNuma:
      return "numa";
    case Mode::kSocket:
      return "socket";
    case Mode::kMachine:
      return "machine";
  }
  return "?";
}

// The CPU driver's setup as the daemon derives it from the published pool, with the
// reservations `held` publishes (their grouped devices are groups of their own in every mode).
inline DriverSetup CpuSetup(const topology::Topology& topo, Mode mode,
                            const CpuSet& reserved = CpuSet{}, const state::State* held = nullptr) {
  publish::PublishOptions opts;
  opts.node_name = kNode;
  opts.cpu_driver = kCpuDriver;
  opts.reserved_cpus = reserved;
  std::set<std::string> reservation_devices;
  if (held != nullptr) {
    for (const auto& [uid, r] : held->reservations()) {
      opts.reservations.push_back({r.name, r.cpus, r.gpus, r.placed_at});
      reservation_devices.insert(publish::ReservationCpuDeviceName(r.name));
    }
  }
  opts.cpu_mode = mode == Mode::kIndividual ? publish::CpuDeviceMode::kIndividual
                                            : publish::CpuDeviceMode::kGrouped;
  opts.group_by = mode == Mode::kSocket    ? publish::GroupBy::kSocket
                  : mode == Mode::kMachine ? publish::GroupBy::kMachine
                                           : publish::GroupBy::kNuma;
  const claims::CpuDeviceKind kind = mode == Mode::kIndividual ? claims::CpuDeviceKind::kIndividual
                                     : mode == Mode::kMachine  ? claims::CpuDeviceKind::kMachine
                                                               : claims::CpuDeviceKind::kGroup;
  DriverSetup setup;
  setup.driver = kCpuDriver;
  setup.kind = DriverKind::kCpu;
  setup.reserved = reserved;
  setup.cpu_pool.name = kNode;
  for (const auto& [name, cpus] : publish::CpuDeviceCpus(topo, opts)) {
    setup.cpu_pool.devices[name] = claims::CpuDevice{
        reservation_devices.contains(name) ? claims::CpuDeviceKind::kGroup : kind, cpus};
  }
  return setup;
}

// The device node a GPU's CDI device gets in these tests: /dev/nvidia<index>.
inline std::vector<cdi::DeviceNode> GpuNodes(int index) {
  cdi::DeviceNode node;
  node.path = "/dev/nvidia" + std::to_string(index);
  node.type = "c";
  node.major = 195;
  node.minor = index;
  cdi::DeviceNode ctl;
  ctl.path = "/dev/nvidiactl";
  return {node, ctl};
}

inline DriverSetup GpuSetup(const topology::Topology& topo) {
  DriverSetup setup;
  setup.driver = kGpuDriver;
  setup.kind = DriverKind::kGpu;
  setup.gpu_pool = kNode;
  int index = 0;
  for (const topology::Gpu& gpu : topo.gpus) {
    if (publish::IsBmcDisplay(gpu)) continue;
    setup.gpus[publish::GpuDeviceName(gpu)] = GpuDevice{gpu.pci_bus_id, GpuNodes(index++)};
  }
  return setup;
}

// One status.allocation.devices.results entry.
inline json Result(const std::string& request, const std::string& device,
                   const std::string& capacity = "", const std::string& driver = kCpuDriver,
                   const std::string& pool = kNode) {
  json r = {{"request", request}, {"driver", driver}, {"pool", pool}, {"device", device}};
  if (!capacity.empty()) r["consumedCapacity"] = {{"dra.cpu/cpu", capacity}};
  return r;
}

inline json Cpuset(const std::string& cpus) {
  return {{"apiVersion", "v1alpha1"}, {"cpuConfig", {{"cpuset", cpus}}}};
}

// One status.allocation.devices.config entry.
inline json Config(const std::vector<std::string>& requests, const json& parameters,
                   const std::string& driver = kCpuDriver,
                   const std::string& source = "FromClaim") {
  return {{"source", source},
          {"requests", requests},
          {"opaque", {{"driver", driver}, {"parameters", parameters}}}};
}

// An allocated ResourceClaim.
inline json ClaimJson(const std::string& uid, const std::string& ns, const std::string& name,
                      const std::vector<json>& results, const std::vector<json>& configs = {}) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"uid", uid}, {"namespace", ns}, {"name", name}}},
          {"spec", {{"devices", {{"requests", json::array()}}}}},
          {"status", {{"allocation", {{"devices", {{"results", results}, {"config", configs}}}}}}}};
}

// A claim the scheduler has not allocated yet.
inline json PendingClaimJson(const std::string& uid, const std::string& ns,
                             const std::string& name) {
  return {{"metadata", {{"uid", uid}, {"namespace", ns}, {"name", name}}},
          {"spec", {{"devices", {{"requests", json::array()}}}}}};
}

inline claims::Claim Parse(const json& j) {
  absl::StatusOr<claims::Claim> claim = claims::ParseClaim(j);
  EXPECT_TRUE(claim.ok()) << claim.status() << "\n" << j.dump();
  return claim.ok() ? *std::move(claim) : claims::Claim{};
}

// A DRA allocation held by another claim, as ClaimService records it after prepare.
inline state::Allocation HeldBy(const std::string& driver, const std::string& uid,
                                const std::string& ns, const std::string& name, const CpuSet& cpus,
                                std::set<std::string> gpus = {}) {
  state::Allocation a;
  a.kind = state::AllocationKind::kDraClaim;
  a.owner = state::DraOwner(driver, uid);
  a.driver = driver;
  a.claim_namespace = ns;
  a.claim_name = name;
  a.cpus = cpus;
  a.gpus = std::move(gpus);
  a.phase = state::Phase::kPrepared;
  a.answer = json{{"devices", json::array()}};
  return a;
}

inline CpuSet Cpus(const std::string& text) {
  if (text.empty()) return CpuSet{};
  absl::StatusOr<CpuSet> set = CpuSet::Parse(text);
  EXPECT_TRUE(set.ok()) << text << ": " << set.status();
  return set.ok() ? *set : CpuSet{};
}

// The value of NAME in a list of "NAME=value", or "<missing>".
inline std::string EnvValue(const std::vector<std::string>& env, const std::string& name) {
  for (const std::string& e : env) {
    if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
  }
  return "<missing " + name + ">";
}

}  // namespace topodra::prepare::testing
