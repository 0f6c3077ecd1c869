// Shared by the planner and ClaimService tests: fixture machines, the node's driver setups as the
// daemon builds them from what it publishes (node::Inventory), and ResourceClaims as inline JSON.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "driver/node/inventory.h"
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

// The publishing options of these tests' node in `mode`, holding what `held`'s reservations
// hold (their grouped devices are groups of their own in every mode).
inline node::InventoryOptions Options(Mode mode, const CpuSet& reserved = CpuSet{}) {
  node::InventoryOptions o;
  o.publish.node_name = kNode;
  o.publish.cpu_driver = kCpuDriver;
  o.publish.gpu_driver = kGpuDriver;
  o.publish.reserved_cpus = reserved;
  o.publish.cpu_mode = mode == Mode::kIndividual ? publish::CpuDeviceMode::kIndividual
                                                 : publish::CpuDeviceMode::kGrouped;
  o.publish.group_by = mode == Mode::kSocket    ? publish::GroupBy::kSocket
                       : mode == Mode::kMachine ? publish::GroupBy::kMachine
                                                : publish::GroupBy::kNuma;
  return o;
}

// The CPU driver's setup as the daemon derives it (node::Inventory) from the published pool,
// with the reservations `held` publishes.
inline DriverSetup CpuSetup(const topology::Topology& topo, Mode mode,
                            const CpuSet& reserved = CpuSet{}, const state::State* held = nullptr) {
  std::vector<publish::ReservedDevices> reservations;
  if (held != nullptr) {
    for (const auto& [uid, r] : held->reservations()) {
      reservations.push_back({r.name, r.cpus, r.gpus, r.placed_at});
    }
  }
  return node::Inventory::Build(Options(mode, reserved), topo, std::move(reservations)).CpuSetup();
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

// The GPU driver's setup as the daemon derives it; the published GPUs get /dev/nvidia0, 1, ...
// in the machine's order.
inline DriverSetup GpuSetup(const topology::Topology& topo) {
  std::map<std::string, int> index;  // PCI bus id -> index among the compute GPUs
  for (const topology::Gpu& gpu : topo.gpus) {
    if (!publish::IsBmcDisplay(gpu)) index.emplace(gpu.pci_bus_id, static_cast<int>(index.size()));
  }
  node::InventoryOptions o = Options(Mode::kNuma);
  o.gpu_nodes = [index](const topology::Gpu& gpu) { return GpuNodes(index.at(gpu.pci_bus_id)); };
  return node::Inventory::Build(o, topo, {}).GpuSetup();
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
