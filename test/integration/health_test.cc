// Device health end to end: the real daemon on a fake sysfs tree (--host-root), the kubelet's
// health client of both DRAResourceHealth versions, the fake API server's stored slices and the
// device manager's ListAndWatch. A fault written into the tree, then SIGUSR1 (what a uevent or
// the refresh timer does), reaches all three; the repair takes it back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_join.h"
#include "test/integration/node_fixture.h"
#include "test/kubelet_sim/device_plugin_sim.h"
#include "test/kubelet_sim/health_sim.h"
#include "test/kubelet_sim/pod_resources_sim.h"
#include "test/testing/fake_pci_sysfs.h"

namespace topodra::testing {
namespace {

constexpr char kGpuResource[] = "topodra.io/gpu";
// The compute GPUs of kMachine (its Matrox BMC display 0000:05:03.0 is never published).
const std::vector<std::string> kGpus = {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0",
                                        "0000:84:00.1"};
constexpr char kBad[] = "0000:83:00.0";
constexpr char kBadKey[] = "node-a/gpu-0000-83-00-0";

class HealthTest : public NodeTest {
 protected:
  void TearDown() override {
    if (HasFailure() && dp_ != nullptr) {
      std::cerr << "device manager log:\n" << absl::StrJoin(dp_->Log(), "\n") << "\n";
    }
    watchers_.clear();
    dp_.reset();
    pods_.reset();
    NodeTest::TearDown();
  }

  // The daemon on a fake sysfs tree with the machine's GPUs, healthy; the device manager for
  // the GPU resource; both DRA drivers registered.
  void StartHealthNode(std::vector<std::string> extra = {}, const std::string& machine = kMachine,
                       bool device_plugin = true) {
    host_ = dirs_.root + "/host";
    sysfs_ = std::make_unique<FakePciSysfs>(host_);
    for (const std::string& id : kGpus) sysfs_->AddGpu(id);
    if (!device_plugin) {
      std::vector<std::string> args = {"--host-root", host_, "--topology-refresh", "3600"};
      args.insert(args.end(), extra.begin(), extra.end());
      StartNode(args, machine);
      return;
    }
    auto dp = DevicePluginSimulator::Start({dirs_.kubelet_root + "/device-plugins"});
    ASSERT_TRUE(dp.ok()) << dp.status();
    dp_ = *std::move(dp);
    auto pods = PodResourcesSimulator::Start(dirs_.kubelet_root + "/pod-resources/kubelet.sock");
    ASSERT_TRUE(pods.ok()) << pods.status();
    pods_ = *std::move(pods);
    std::vector<std::string> args = {"--host-root",     host_, "--topology-refresh", "3600",
                                     "--device-plugin", "gpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    StartNode(args, machine);
    auto reg = dp_->WaitForResource(kGpuResource, 1, absl::Seconds(20));
    ASSERT_TRUE(reg.ok()) << reg.status() << "\n" << daemon_.Log();
  }

  // A health stream to `driver` as a kubelet of `kubelet` opens it.
  HealthWatcher* Watch(const std::string& driver, HealthKubelet kubelet) {
    auto reg = sim_->WaitForRegistration(driver, 1, absl::Seconds(20));
    EXPECT_TRUE(reg.ok()) << reg.status();
    if (!reg.ok()) return nullptr;
    const std::string service = PickHealthService(reg->supported_versions, kubelet);
    EXPECT_EQ(service, kubelet == HealthKubelet::k137 ? kHealthV1 : kHealthV1alpha1);
    auto w = HealthWatcher::Start(reg->endpoint, service);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return nullptr;
    watchers_.push_back(*std::move(w));
    return watchers_.back().get();
  }

  void Rediscover() { ASSERT_EQ(::kill(daemon_.pid(), SIGUSR1), 0); }

  // The stored GPU slice's device `name`, once `pred` holds for it.
  json WaitSliceDevice(const std::string& name, const std::function<bool(const json&)>& pred) {
    json last;
    for (int i = 0; i < 200; ++i) {
      auto list = server_->Api("GET", "/apis/resource.k8s.io/v1/resourceslices");
      if (list.ok()) {
        for (const json& s : (*list)["items"]) {
          if (s["spec"]["driver"] != kGpu) continue;
          for (const json& d : s["spec"]["devices"]) {
            if (d["name"] != name) continue;
            last = d;
            if (pred(d)) return d;
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "slice device " << name << " never matched; last: " << last.dump();
    return last;
  }

  static bool Has(const HealthCache& c, const std::string& key, const std::string& health) {
    auto it = c.find(key);
    return it != c.end() && it->second.health == health;
  }

  std::string host_;
  std::unique_ptr<FakePciSysfs> sysfs_;
  std::unique_ptr<DevicePluginSimulator> dp_;
  std::unique_ptr<PodResourcesSimulator> pods_;
  std::vector<std::unique_ptr<HealthWatcher>> watchers_;
};

bool Tainted(const json& device) {
  if (!device.contains("taints")) return false;
  for (const json& t : device["taints"]) {
    if (t["key"] == "gpu.topodra.io/unhealthy") return true;
  }
  return false;
}

TEST_F(HealthTest, FatalAerErrorsReachStreamsSliceAndDevicePluginAndRecover) {
  StartHealthNode();
  HealthWatcher* v1 = Watch(kGpu, HealthKubelet::k137);
  HealthWatcher* v1alpha1 = Watch(kGpu, HealthKubelet::k134_136);
  ASSERT_NE(v1, nullptr);
  ASSERT_NE(v1alpha1, nullptr);
  for (HealthWatcher* w : {v1, v1alpha1}) {
    auto all = w->WaitFor([](const HealthCache& c) { return c.size() == 4; }, absl::Seconds(10));
    ASSERT_TRUE(all.ok()) << all.status();
    for (const auto& [key, v] : *all) {
      EXPECT_EQ(v.health, "Healthy") << key;
      EXPECT_EQ(v.timeout_seconds, 30) << key;
    }
    EXPECT_EQ(all->at(kBadKey).message,
              "GPU 0000:83:00.0: healthy, driver nvidia, PCIe 16 GT/s x16 of 16 GT/s x16");
  }

  sysfs_->SetAerFatal(kBad, 2);
  Rediscover();
  for (HealthWatcher* w : {v1, v1alpha1}) {
    auto bad = w->WaitFor([](const HealthCache& c) { return Has(c, kBadKey, "Unhealthy"); },
                          absl::Seconds(10));
    ASSERT_TRUE(bad.ok()) << bad.status() << "\n" << daemon_.Log();
    EXPECT_EQ(bad->at(kBadKey).message,
              "GPU 0000:83:00.0: 2 fatal PCIe errors (AER: Surprise Down Error 2); reset the "
              "device or reboot the node to clear");
    EXPECT_TRUE(Has(*bad, "node-a/gpu-0000-84-00-0", "Healthy"));
  }
  const json tainted = WaitSliceDevice("gpu-0000-83-00-0", Tainted);
  ASSERT_TRUE(tainted.contains("taints")) << tainted.dump();
  EXPECT_EQ(tainted["taints"][0]["value"], "aer-fatal");
  EXPECT_EQ(tainted["taints"][0]["effect"], "NoSchedule");
  EXPECT_TRUE(tainted["taints"][0].contains("timeAdded"));  // the server's
  EXPECT_FALSE(Tainted(WaitSliceDevice("gpu-0000-84-00-0", [](const json&) { return true; })));
  auto listed = dp_->WaitForDevices(
      kGpuResource,
      [](const std::vector<PluginDevice>& d) {
        return std::any_of(d.begin(), d.end(), [](const PluginDevice& x) {
          return x.id == kBad && x.health == "Unhealthy";
        });
      },
      absl::Seconds(10));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), 4u);
  // The kubelet may still offer the bad GPU: the preference is for the others, never an error.
  auto preferred = dp_->GetPreferredAllocation(kGpuResource, kGpus, {}, 2);
  ASSERT_TRUE(preferred.ok()) << preferred.status();
  EXPECT_THAT(*preferred, ::testing::ElementsAre("0000:84:00.0", "0000:84:00.1"));
  auto refused = dp_->Allocate(kGpuResource, {{kBad}});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("is unhealthy (aer-fatal)"));
  EXPECT_THAT(daemon_.Log(), HasSubstr("device gpu-0000-83-00-0 is unhealthy: GPU 0000:83:00.0: 2 "
                                       "fatal PCIe errors"));

  // Repaired (device reset): healthy everywhere again, the taint gone.
  sysfs_->SetAerFatal(kBad, 0);
  Rediscover();
  for (HealthWatcher* w : {v1, v1alpha1}) {
    auto good = w->WaitFor([](const HealthCache& c) { return Has(c, kBadKey, "Healthy"); },
                           absl::Seconds(10));
    ASSERT_TRUE(good.ok()) << good.status();
  }
  EXPECT_FALSE(
      Tainted(WaitSliceDevice("gpu-0000-83-00-0", [](const json& d) { return !Tainted(d); })));
  auto healthy = dp_->WaitForDevices(
      kGpuResource,
      [](const std::vector<PluginDevice>& d) {
        return std::all_of(d.begin(), d.end(),
                           [](const PluginDevice& x) { return x.health == "Healthy"; });
      },
      absl::Seconds(10));
  ASSERT_TRUE(healthy.ok()) << healthy.status();
}

TEST_F(HealthTest, LinkDownAndUnboundGpusAreNamed) {
  StartHealthNode();
  HealthWatcher* w = Watch(kGpu, HealthKubelet::k137);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(
      w->WaitFor([](const HealthCache& c) { return c.size() == 4; }, absl::Seconds(10)).ok());
  sysfs_->SetLink("0000:03:00.0", "Unknown", 0);
  sysfs_->Unbind("0000:84:00.1");
  sysfs_->SetLink("0000:84:00.0", "16.0 GT/s PCIe", 8);
  Rediscover();
  auto bad = w->WaitFor(
      [](const HealthCache& c) {
        return Has(c, "node-a/gpu-0000-03-00-0", "Unhealthy") &&
               Has(c, "node-a/gpu-0000-84-00-1", "Unhealthy") &&
               Has(c, "node-a/gpu-0000-84-00-0", "Unhealthy");
      },
      absl::Seconds(10));
  ASSERT_TRUE(bad.ok()) << bad.status() << "\n" << daemon_.Log();
  EXPECT_EQ(bad->at("node-a/gpu-0000-03-00-0").message,
            "GPU 0000:03:00.0: PCIe no speed x0 of 16 GT/s x16: the link is down");
  EXPECT_EQ(bad->at("node-a/gpu-0000-84-00-1").message,
            "GPU 0000:84:00.1: no kernel driver is bound to it");
  EXPECT_EQ(bad->at("node-a/gpu-0000-84-00-0").message,
            "GPU 0000:84:00.0: PCIe 16 GT/s x8 of 16 GT/s x16: the link trained to fewer lanes");
  EXPECT_EQ(WaitSliceDevice("gpu-0000-84-00-1", Tainted)["taints"][0]["value"], "unbound");
  EXPECT_TRUE(Has(*bad, kBadKey, "Healthy"));
  // Every GPU but one unhealthy: a request for one still gets the healthy one.
  auto one = dp_->WaitForDevices(
      kGpuResource,
      [](const std::vector<PluginDevice>& d) {
        return std::count_if(d.begin(), d.end(),
                             [](const PluginDevice& x) { return x.health == "Unhealthy"; }) == 3;
      },
      absl::Seconds(10));
  ASSERT_TRUE(one.ok()) << one.status();
  auto preferred = dp_->GetPreferredAllocation(kGpuResource, kGpus, {}, 1);
  ASSERT_TRUE(preferred.ok()) << preferred.status();
  EXPECT_THAT(*preferred, ::testing::ElementsAre(kBad));
}

// A GPU that leaves the bus leaves the topology: its device is still reported, Unhealthy, so
// the pods holding it see why.
TEST_F(HealthTest, RemovedGpuIsReportedUnhealthy) {
  const std::string xml = dirs_.root + "/machine.xml";
  fs::copy_file(FixturePath(kMachine), xml);
  StartHealthNode({}, xml);
  HealthWatcher* w = Watch(kGpu, HealthKubelet::k134_136);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(
      w->WaitFor([](const HealthCache& c) { return c.size() == 4; }, absl::Seconds(10)).ok());
  std::string text = ReadFile(xml);
  const size_t at = text.find("pci_busid=\"0000:03:00.0\"");
  ASSERT_NE(at, std::string::npos);
  const size_t begin = text.rfind("<object", at);
  const size_t end = text.find("</object>", at) + std::string("</object>").size();
  text.erase(begin, end - begin);
  std::ofstream(xml + ".new") << text;
  fs::rename(xml + ".new", xml);
  sysfs_->Remove("0000:03:00.0");
  Rediscover();
  auto gone = w->WaitFor(
      [](const HealthCache& c) { return Has(c, "node-a/gpu-0000-03-00-0", "Unhealthy"); },
      absl::Seconds(10));
  ASSERT_TRUE(gone.ok()) << gone.status() << "\n" << daemon_.Log();
  EXPECT_EQ(gone->at("node-a/gpu-0000-03-00-0").message, "GPU 0000:03:00.0: gone from the PCI bus");
}

// Individual CPU devices: CPUs taken offline make their devices Unhealthy; grouped, the group
// stays Healthy, its capacity shrunk and published.
class OfflineCpuTest : public HealthTest {
 protected:
  // 16em64t-4s2c2t, then the same machine with CPUs 2,5,7-11,13-14 offline.
  HealthCache TakeCpusOffline(const std::string& mode, size_t devices,
                              const std::function<bool(const HealthCache&)>& done) {
    const std::string xml = dirs_.root + "/cpus.xml";
    fs::copy_file(FixturePath("16em64t-4s2c2t.xml"), xml);
    StartHealthNode({"--cpu-device-mode", mode, "--group-by", "machine"}, xml, false);
    HealthWatcher* w = Watch(kCpu, HealthKubelet::k137);
    if (w == nullptr) return {};
    auto all =
        w->WaitFor([&](const HealthCache& c) { return c.size() == devices; }, absl::Seconds(10));
    EXPECT_TRUE(all.ok()) << all.status();
    fs::copy_file(FixturePath("16em64t-4s2c2t-offlines.xml"), xml + ".new");
    fs::rename(xml + ".new", xml);
    Rediscover();
    auto after = w->WaitFor(done, absl::Seconds(10));
    EXPECT_TRUE(after.ok()) << after.status() << "\n" << daemon_.Log();
    return after.ok() ? *after : HealthCache{};
  }
};

TEST_F(OfflineCpuTest, IndividualDevicesOfOfflineCpusAreUnhealthy) {
  auto unhealthy = [](const HealthCache& c) {
    return std::count_if(c.begin(), c.end(),
                         [](const auto& kv) { return kv.second.health == "Unhealthy"; });
  };
  const HealthCache c =
      TakeCpusOffline("individual", 16, [&](const HealthCache& c) { return unhealthy(c) == 9; });
  ASSERT_EQ(unhealthy(c), 9);
  for (const auto& [key, v] : c) {
    if (v.health == "Unhealthy") {
      EXPECT_THAT(v.message, ::testing::MatchesRegex("CPU [0-9]+ is offline")) << key;
    }
  }
}

TEST_F(OfflineCpuTest, GroupStaysHealthyWithItsCapacityShrunk) {
  const HealthCache c = TakeCpusOffline("grouped", 1, [](const HealthCache& c) {
    auto it = c.find("node-a/cpudevmachine");
    return it != c.end() && it->second.message.find("offline") != std::string::npos;
  });
  ASSERT_TRUE(c.contains("node-a/cpudevmachine"));
  EXPECT_EQ(c.at("node-a/cpudevmachine").health, "Healthy");
  EXPECT_EQ(c.at("node-a/cpudevmachine").message, "CPU 2,5,7-11,13-14 offline: capacity 7 CPUs");
  // The capacity the scheduler sees shrank with it.
  json stored;
  for (int i = 0; i < 200; ++i) {
    auto list = server_->Api("GET", "/apis/resource.k8s.io/v1/resourceslices");
    ASSERT_TRUE(list.ok()) << list.status();
    for (const json& s : (*list)["items"]) {
      if (s["spec"]["driver"] == kCpu) stored = s["spec"]["devices"][0];
    }
    if (stored["capacity"]["dra.cpu/cpu"]["value"] == "7") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(stored["capacity"]["dra.cpu/cpu"]["value"], "7") << stored.dump();
}

}  // namespace
}  // namespace topodra::testing
