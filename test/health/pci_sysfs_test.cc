// The sysfs reader on fake trees shaped like the kernel's: each fault the way it shows there.
#include "driver/health/pci_sysfs.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "test/testing/fake_pci_sysfs.h"

namespace topodra::health {
namespace {

class PciSysfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/topodra-pci-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root_;
};

TEST_F(PciSysfsTest, NoPciDirectoryMeansNothingKnown) {
  PciSysfs s(root_);
  EXPECT_FALSE(s.Read({"0000:3b:00.0"}).has_value());
}

TEST_F(PciSysfsTest, EachFaultAsTheKernelShowsIt) {
  testing::FakePciSysfs fake(root_);
  const std::string id = "0000:3b:00.0";
  fake.AddGpu(id, "nvidia");
  PciSysfs s(root_ + "/");  // a trailing slash is fine
  auto verdict = [&] { return AssessGpu(id, s.Read({id})->at(id)); };

  GpuFacts f = s.Read({id})->at(id);
  EXPECT_TRUE(f.present);
  EXPECT_EQ(f.driver, "nvidia");
  EXPECT_EQ(f.link, (PciLink{16, 16, 16, 16}));
  EXPECT_EQ(f.aer_fatal, AerFatal{});
  EXPECT_TRUE(f.unreadable.empty());
  EXPECT_TRUE(verdict().healthy);

  fake.SetLink(id, "16.0 GT/s PCIe", 4);
  EXPECT_EQ(verdict().problem, GpuProblem::kLinkDegraded);
  fake.SetLink(id, "Unknown", 0);
  EXPECT_EQ(verdict().problem, GpuProblem::kLinkDown);
  fake.SetLink(id, "2.5 GT/s PCIe", 16);  // idle downtraining: fine
  EXPECT_TRUE(verdict().healthy);
  fake.SetAerFatal(id, 1);
  EXPECT_EQ(verdict().problem, GpuProblem::kAerFatal);
  fake.SetAerFatal(id, 0);
  fake.Unbind(id);
  EXPECT_EQ(verdict().problem, GpuProblem::kUnbound);
  fake.Bind(id, "vfio-pci");
  EXPECT_EQ(verdict().message,
            "GPU 0000:3b:00.0: healthy, driver vfio-pci, PCIe 2.5 GT/s x16 of 16 GT/s x16");
  fake.Remove(id);  // removal itself shows in the topology; here: nothing known
  EXPECT_FALSE(s.Read({id})->at(id).present);
  EXPECT_TRUE(verdict().healthy);
}

// The kernel's shape: /sys/bus/pci/devices/<id> is a symlink to the device's directory below
// its port. An x16 GPU in an x8 slot runs x8 for good: healthy. Fewer lanes than the slot has
// is still a degraded link.
TEST_F(PciSysfsTest, AGpuInANarrowerSlotIsHealthy) {
  namespace fs = std::filesystem;
  const std::string id = "0000:01:00.0";
  const std::string port = root_ + "/sys/devices/pci0000:00/0000:00:01.0";
  const std::string dev = port + "/" + id;
  fs::create_directories(dev);
  fs::create_directories(root_ + "/sys/bus/pci/devices");
  fs::create_directory_symlink("../../../devices/pci0000:00/0000:00:01.0/" + id,
                               root_ + "/sys/bus/pci/devices/" + id);
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  };
  write(port + "/max_link_width", "8\n");
  write(dev + "/max_link_width", "16\n");
  write(dev + "/max_link_speed", "16.0 GT/s PCIe\n");
  write(dev + "/current_link_speed", "16.0 GT/s PCIe\n");
  write(dev + "/current_link_width", "8\n");
  fs::create_directories(root_ + "/sys/bus/pci/drivers/nvidia");
  fs::create_directory_symlink(root_ + "/sys/bus/pci/drivers/nvidia", dev + "/driver");
  PciSysfs s(root_);
  GpuFacts f = s.Read({id})->at(id);
  EXPECT_EQ(f.link, (PciLink{16, 8, 16, 8}));
  EXPECT_TRUE(AssessGpu(id, f).healthy) << AssessGpu(id, f).message;
  write(dev + "/current_link_width", "4\n");
  EXPECT_EQ(AssessGpu(id, s.Read({id})->at(id)).problem, GpuProblem::kLinkDegraded);
}

TEST_F(PciSysfsTest, GarbledFileIsNamedNotFatal) {
  testing::FakePciSysfs fake(root_);
  const std::string id = "0000:af:00.0";
  fake.AddGpu(id);
  {
    std::ofstream out(fake.Devices() + "/" + id + "/current_link_width");
    out << "sixteen\n";
  }
  const GpuFacts f = PciSysfs(root_).Read({id})->at(id);
  EXPECT_FALSE(f.link.has_value());
  ASSERT_EQ(f.unreadable.size(), 1u);
  EXPECT_EQ(f.unreadable[0], fake.Devices() + "/" + id +
                                 ": link width \"sixteen\" (want a lane count from 0 to 64)");
  EXPECT_TRUE(AssessGpu(id, f).healthy);
}

}  // namespace
}  // namespace topodra::health
