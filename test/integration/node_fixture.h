// The fixture of the integration tests that run a whole node: the fake API server, the real
// `topodra run` binary on directories of its own, and the kubelet simulator; plus helpers that
// make claims the way the scheduler allocates them.
#pragma once

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/prepare/planner.h"
#include "nlohmann/json.hpp"
#include "proto/dra_api.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/kubelet_sim.h"
#include "test/testing/fixtures.h"
#include "topology/cpuset.h"

namespace topodra::testing {

using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;

inline constexpr char kNode[] = "node-a";
inline constexpr char kCpu[] = "dra.cpu";
inline constexpr char kGpu[] = "gpu.topodra.io";
// 2 packages, 2 NUMA nodes (0-7,16-23 and 8-15,24-31), 16 cores with 2 threads, 5 GPUs.
inline constexpr char kMachine[] = "32em64t-2n8c2t-pci-normalio.xml";

inline json Request(const std::string& name, const std::string& cls = "dra.cpu") {
  return {{"name", name}, {"exactly", {{"deviceClassName", cls}}}};
}

inline json FirstAvailable(const std::string& name, const std::vector<std::string>& subs) {
  json list = json::array();
  for (const std::string& s : subs) list.push_back({{"name", s}, {"deviceClassName", "dra.cpu"}});
  return {{"name", name}, {"firstAvailable", list}};
}

inline json Result(const std::string& request, const std::string& device,
                   const std::string& cpus = "", const std::string& driver = kCpu) {
  json r = {{"request", request}, {"driver", driver}, {"pool", kNode}, {"device", device}};
  if (!cpus.empty()) r["consumedCapacity"] = {{"dra.cpu/cpu", cpus}};
  return r;
}

inline json Cpuset(const std::string& cpus) {
  return {{"apiVersion", "v1alpha1"}, {"cpuConfig", {{"cpuset", cpus}}}};
}

inline json Config(const std::string& source, const json& requests, const json& parameters,
                   const std::string& driver = kCpu) {
  return {{"source", source},
          {"requests", requests},
          {"opaque", {{"driver", driver}, {"parameters", parameters}}}};
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The lines of a daemon log that contain `part`, without their time stamp and level: tests count
// them to hold the daemon to one line per change of state.
inline std::vector<std::string> LinesWith(const std::string& log, const std::string& part) {
  std::vector<std::string> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(part) == std::string::npos) continue;
    // "<time> <level> <message>"
    const size_t level = line.find(' ');
    const size_t message = level == std::string::npos ? level : line.find(' ', level + 1);
    out.push_back(message == std::string::npos ? line : line.substr(message + 1));
  }
  return out;
}

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServerOptions o;
    o.nodes = {{kNode, "uid-node-a"}};
    auto server = FakeApiServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    dirs_ = DaemonDirs::Make();
    kubeconfig_ = server_->WriteKubeconfig(dirs_.root + "/kubeconfig.yaml");
    ASSERT_FALSE(kubeconfig_.empty());
  }

  void TearDown() override {
    sim_.reset();
    if (daemon_.Running()) {
      EXPECT_EQ(daemon_.Terminate(), 0) << daemon_.Log();
    }
    if (HasFailure()) std::cerr << "daemon log:\n" << daemon_.Log();
    std::error_code ec;
    fs::remove_all(dirs_.root, ec);
  }

  // Starts the daemon and the kubelet simulator and waits until the CPU driver is registered.
  void StartNode(std::vector<std::string> extra = {}, const std::string& machine = kMachine,
                 KubeletSimOptions sim = {}) {
    StartDaemon(std::move(extra), machine);
    sim.root_dir = dirs_.kubelet_root;
    auto s = KubeletSimulator::Start(sim);
    ASSERT_TRUE(s.ok()) << s.status();
    sim_ = *std::move(s);
    auto reg = sim_->WaitForRegistration(kCpu, 1, absl::Seconds(20));
    ASSERT_TRUE(reg.ok()) << reg.status() << "\n" << daemon_.Log();
    WaitFilesChecked(kCpu);
  }

  // The DRA driver checks its claims' CDI and metadata files in the background, beside its
  // sockets' start and registration: waits for the end of that check (its log line, or its error).
  void WaitFilesChecked(const std::string& driver) {
    const std::string done = absl::StrCat("driver ", driver, ": CDI files checked");
    const std::string failed = absl::StrCat("driver ", driver, ": CDI files in ");
    for (int i = 0; i < 2000; ++i) {
      const std::string log = daemon_.Log();
      if (log.find(done) != std::string::npos || log.find(failed) != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "driver " << driver << ": no end of the file check in the log\n"
                  << daemon_.Log();
  }

  void StartDaemon(std::vector<std::string> extra = {}, const std::string& machine = kMachine) {
    std::vector<std::string> args = {
        "--kubeconfig",    kubeconfig_,
        "--node-name",     kNode,
        "--topology-file", machine.starts_with("/") ? machine : FixturePath(machine)};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_.Start(dirs_, args);
  }

  // Creates the claim and allocates it the way the scheduler does; returns its identity.
  PrepareClaim MakeClaim(const std::string& name, const json& requests, const json& results,
                         const json& alloc_config = json::array(),
                         const json& spec_config = json::array()) {
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", "default"}}},
                  {"spec", {{"devices", {{"requests", requests}}}}}};
    if (!spec_config.empty()) claim["spec"]["devices"]["config"] = spec_config;
    auto created = server_->CreateClaim(claim);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return {};
    json allocation = {{"devices", {{"results", results}}}};
    if (!alloc_config.empty()) allocation["devices"]["config"] = alloc_config;
    auto allocated = server_->AllocateClaim(
        "default", name, allocation,
        json::array({{{"resource", "pods"}, {"name", "pod-" + name}, {"uid", "pod-uid-" + name}}}));
    EXPECT_TRUE(allocated.ok()) << allocated.status();
    return {"default", (*created)["metadata"]["uid"].get<std::string>(), name};
  }

  // A one-request claim consuming `cpus` CPUs of `device`, with an optional claim cpuset.
  PrepareClaim CpuClaim(const std::string& name, const std::string& device, const std::string& cpus,
                        const json& parameters = nullptr) {
    json config = json::array();
    if (!parameters.is_null()) config.push_back(Config("FromClaim", json::array(), parameters));
    return MakeClaim(name, json::array({Request("cpus")}),
                     json::array({Result("cpus", device, cpus)}), config);
  }

  ClaimResult PrepareOne(const PrepareClaim& claim, const std::string& driver = kCpu) {
    auto got = sim_->Prepare(driver, {claim});
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return {{}, "rpc failed"};
    EXPECT_EQ(got->size(), 1u);
    return (*got)[claim.uid];
  }

  // NodePrepareResources (v1) over a connection of its own to `endpoint`, as a kubelet that dials
  // the socket anew: the claim's error, or the gRPC failure.
  ClaimResult PrepareOverNewConnection(const std::string& endpoint, const PrepareClaim& claim) {
    auto stub = proto::DraV1::DRAPlugin::NewStub(
        grpc::CreateChannel("unix:" + endpoint, grpc::InsecureChannelCredentials()));
    proto::DraV1::NodePrepareResourcesRequest request;
    auto* c = request.add_claims();
    c->set_namespace_(claim.ns);
    c->set_uid(claim.uid);
    c->set_name(claim.name);
    proto::DraV1::NodePrepareResourcesResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    const grpc::Status status = stub->NodePrepareResources(&ctx, request, &response);
    if (!status.ok()) return {{}, "rpc failed: " + status.error_message()};
    auto it = response.claims().find(claim.uid);
    if (it == response.claims().end()) return {{}, "no answer for the claim"};
    ClaimResult out;
    out.error = it->second.error();
    for (const auto& d : it->second.devices()) {
      out.devices.push_back({{d.request_names().begin(), d.request_names().end()},
                             d.pool_name(),
                             d.device_name(),
                             {d.cdi_device_ids().begin(), d.cdi_device_ids().end()},
                             std::nullopt});
    }
    return out;
  }

  // Replaces what is at `path` by a regular file holding `text`, in one step (rename).
  static void PutFileInPlaceOf(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".test-tmp";
    {
      std::ofstream f(tmp);
      f << text;
    }
    fs::rename(tmp, path);
  }

  std::string UnprepareOne(const PrepareClaim& claim, const std::string& driver = kCpu) {
    auto got = sim_->Unprepare(driver, {claim});
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return "rpc failed";
    return (*got)[claim.uid];
  }

  // The mark the daemon puts in its CDI file names: its node name and state directory.
  std::string CdiMarker() const { return prepare::CdiInstanceMarker(kNode, dirs_.state); }

  std::string CdiPath(const std::string& uid, const std::string& driver = kCpu) const {
    return absl::StrCat(dirs_.cdi, "/", prepare::CdiFileName(driver, uid, CdiMarker()));
  }

  // The claim's CDI file whatever its name carries after the uid (a marker or none); "" if none.
  std::string FindCdiFile(const std::string& uid, const std::string& driver = kCpu) const {
    std::error_code ec;
    const std::string prefix = absl::StrCat(driver, "-claim_", uid);
    for (const auto& e : fs::directory_iterator(dirs_.cdi, ec)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(prefix) && name.ends_with(".json")) return e.path().string();
    }
    return "";
  }

  // The claim's CPUs as its CDI file says (DRA_CPUSET_<uid>).
  CpuSet CdiCpus(const std::string& uid) const {
    const std::string text = ReadFile(CdiPath(uid));
    if (text.empty()) return {};
    const json spec = json::parse(text, nullptr, false);
    for (const json& env : spec["containerEdits"]["env"]) {
      const std::string e = env.get<std::string>();
      const std::string prefix = "DRA_CPUSET_" + uid + "=";
      if (e.rfind(prefix, 0) == 0) return *CpuSet::Parse(e.substr(prefix.size()));
    }
    return {};
  }

  // The name of the first GPU device the daemon published (waits for the slice).
  std::string FirstGpu() {
    for (int i = 0; i < 500; ++i) {
      auto slices = server_->Api(
          "GET",
          "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.topodra.io");
      if (slices.ok() && !(*slices)["items"].empty() &&
          !(*slices)["items"][0]["spec"]["devices"].empty()) {
        return (*slices)["items"][0]["spec"]["devices"][0]["name"];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "";
  }

  std::unique_ptr<FakeApiServer> server_;
  DaemonDirs dirs_;
  std::string kubeconfig_;
  Daemon daemon_;
  std::unique_ptr<KubeletSimulator> sim_;
};

}  // namespace topodra::testing
