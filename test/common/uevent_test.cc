#include "common/uevent.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>

namespace topodra::uevent {
namespace {

using namespace std::string_literals;

TEST(UeventTest, ParsesAKernelCpuOffline) {
  const std::string d =
      "offline@/devices/system/cpu/cpu3\0ACTION=offline\0DEVPATH=/devices/system/cpu/cpu3\0"
      "SUBSYSTEM=cpu\0SEQNUM=4711\0"s;
  std::optional<Uevent> e = Parse(d);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(*e, (Uevent{"offline", "/devices/system/cpu/cpu3", "cpu"}));
  EXPECT_TRUE(AffectsDevices(*e));
}

TEST(UeventTest, KeysWinOverTheHeaderAndAMissingSubsystemIsEmpty) {
  std::optional<Uevent> e =
      Parse("add@/x\0ACTION=remove\0DEVPATH=/devices/pci0000:00/0000:00:01.0"s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->action, "remove");
  EXPECT_EQ(e->devpath, "/devices/pci0000:00/0000:00:01.0");
  EXPECT_EQ(e->subsystem, "");
  EXPECT_FALSE(AffectsDevices(*e));
}

TEST(UeventTest, RejectsWhatIsNotAKernelEvent) {
  for (const std::string& d : {""s, "libudev\0\xfe\xed"s, "no-at-sign\0SUBSYSTEM=cpu"s, "@/x\0"s,
                               "add@\0"s, "add@/x"s /* no NUL: truncated */}) {
    EXPECT_FALSE(Parse(d).has_value()) << d;
  }
}

TEST(UeventTest, OnlyDeviceSubsystemsAndActionsThatChangeThemMatter) {
  EXPECT_TRUE(AffectsDevices({"remove", "/devices/pci0000:80/0000:80:02.0/0000:84:00.0", "pci"}));
  EXPECT_TRUE(AffectsDevices({"add", "/devices/pci0000:00/.../drm/card1", "drm"}));
  EXPECT_TRUE(AffectsDevices({"online", "/devices/system/cpu/cpu7", "cpu"}));
  EXPECT_TRUE(AffectsDevices({"unbind", "/devices/pci0000:00/0000:00:02.0", "pci"}));
  EXPECT_FALSE(AffectsDevices({"add", "/devices/virtual/net/veth0", "net"}));
  EXPECT_FALSE(AffectsDevices({"add", "/devices/virtual/block/loop3", "block"}));
  EXPECT_FALSE(AffectsDevices({"move", "/devices/system/cpu/cpu7", "cpu"}));
}

// The real socket: root can make the kernel send a synthetic "change" event for CPU 0.
TEST(UeventTest, ListenerHearsTheKernel) {
  absl::StatusOr<std::unique_ptr<Listener>> l = Listener::Open();
  if (!l.ok()) GTEST_SKIP() << "no uevent socket here: " << l.status();
  std::ofstream trigger("/sys/devices/system/cpu/cpu0/uevent");
  trigger << "change" << std::flush;
  if (!trigger) GTEST_SKIP() << "cannot write /sys/devices/system/cpu/cpu0/uevent (not root?)";
  bool heard = false;
  for (int i = 0; i < 50 && !heard; ++i) {
    std::optional<Uevent> e = (*l)->Next(absl::Milliseconds(100));
    heard = e.has_value() && e->devpath == "/devices/system/cpu/cpu0" && e->subsystem == "cpu";
  }
  if (!heard) GTEST_SKIP() << "the kernel's events do not reach this network namespace";
  SUCCEED();
}

}  // namespace
}  // namespace topodra::uevent
