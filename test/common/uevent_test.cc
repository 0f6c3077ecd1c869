#include "common/uevent.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test/testing/private_net.h"

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

// The real netlink socket, in a network namespace of this test's thread: what root sends on the
// kernel's group there reaches the listener, udev's re-broadcast format is skipped, and nothing
// reaches the host (the host's /sys is not written, its udev hears nothing).
TEST(UeventTest, ListenerHearsKernelEventsInAPrivateNetworkNamespace) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace (CI runs as root)";
  std::string error;
  std::vector<Uevent> heard;
  std::thread t([&] {
    if (error = topodra::testing::EnterPrivateNetwork(); !error.empty()) return;
    absl::StatusOr<std::unique_ptr<Listener>> l = Listener::Open();
    if (!l.ok()) {
      error = std::string(l.status().message());
      return;
    }
    for (const std::string& d :
         {"libudev\0\xfe\xed\xca\xfe"s,
          "offline@/devices/system/cpu/cpu3\0ACTION=offline\0DEVPATH=/devices/system/cpu/cpu3\0"
          "SUBSYSTEM=cpu\0SEQNUM=4711\0"s,
          "remove@/devices/pci0000:00/0000:00:02.0\0SUBSYSTEM=pci\0"s}) {
      if (error = topodra::testing::SendUevent(d); !error.empty()) return;
    }
    // The host's kernel events reach every namespace too: keep what this test sent.
    for (int i = 0; i < 50 && heard.size() < 2; ++i) {
      std::optional<Uevent> e = (*l)->Next(absl::Milliseconds(100));
      if (e && (e->devpath == "/devices/system/cpu/cpu3" ||
                e->devpath == "/devices/pci0000:00/0000:00:02.0")) {
        heard.push_back(*e);
      }
    }
  });
  t.join();
  ASSERT_EQ(error, "");
  EXPECT_EQ(heard, (std::vector<Uevent>{{"offline", "/devices/system/cpu/cpu3", "cpu"},
                                        {"remove", "/devices/pci0000:00/0000:00:02.0", "pci"}}));
}

// Wake ends the wait of Next at once, now or (when none waits) the next one, once for any number
// of calls, and events queued before it are still delivered. A lost wake-up hangs the test.
TEST(UeventTest, WakeEndsOneWaitAndKeepsTheEvents) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace (CI runs as root)";
  std::string error;
  std::vector<Uevent> heard;
  std::thread t([&] {
    if (error = topodra::testing::EnterPrivateNetwork(); !error.empty()) return;
    absl::StatusOr<std::unique_ptr<Listener>> l = Listener::Open();
    if (!l.ok()) {
      error = std::string(l.status().message());
      return;
    }
    Listener& listener = **l;
    listener.Wake();
    listener.Wake();
    // The host's kernel events reach every namespace too: skip them.
    auto next_of_ours = [&](absl::Duration timeout) {
      while (true) {
        std::optional<Uevent> e = listener.Next(timeout);
        if (!e || e->devpath == "/devices/system/cpu/cpu5") return e;
      }
    };
    if (next_of_ours(absl::Hours(1))) error = "an event before the wake-up";
    error += topodra::testing::SendUevent(
        "offline@/devices/system/cpu/cpu5\0ACTION=offline\0SUBSYSTEM=cpu\0"s);
    if (std::optional<Uevent> e = next_of_ours(absl::Seconds(10))) heard.push_back(*e);
    std::thread waker([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      listener.Wake();
    });
    if (next_of_ours(absl::Hours(1))) error += "an event instead of the wake-up";
    waker.join();
  });
  t.join();
  ASSERT_EQ(error, "");
  EXPECT_EQ(heard, (std::vector<Uevent>{{"offline", "/devices/system/cpu/cpu5", "cpu"}}));
}

}  // namespace
}  // namespace topodra::uevent
