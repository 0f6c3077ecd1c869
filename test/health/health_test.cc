// The health model and the sysfs parsers, table-driven: each signal gives its verdict and a
// message naming the cause; the tracker keeps reporting hardware that left the pool.
#include "driver/health/health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace topodra::health {

void PrintTo(const DeviceStatus& d, std::ostream* os) {
  *os << d.pool << "/" << d.device << " " << (d.healthy ? "Healthy" : "Unhealthy") << " \""
      << d.message << "\"";
}

namespace {

TEST(LinkSpeedTest, KernelFormats) {
  const std::pair<const char*, double> good[] = {
      {"16.0 GT/s PCIe\n", 16.0}, {"8 GT/s\n", 8.0}, {"2.5 GT/s", 2.5},
      {"32.0 GT/s PCIe", 32.0},   {"Unknown\n", 0},  {"Unknown speed\n", 0},
      {"  5.0 GT/s  PCIe ", 5.0},
  };
  for (const auto& [text, want] : good) {
    SCOPED_TRACE(text);
    absl::StatusOr<double> v = ParseLinkSpeed(text);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_DOUBLE_EQ(*v, want);
  }
  for (const char* bad : {"", "GT/s", "fast", "8 Gb/s", "-8 GT/s", "8.0.1 GT/s", ".5 GT/s",
                          "8. GT/s", "8 GT/s PCI", "1e3 GT/s", "nan GT/s", "8 GT/s PCIe x"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<double> v = ParseLinkSpeed(bad);
    ASSERT_FALSE(v.ok());
    EXPECT_THAT(std::string(v.status().message()), ::testing::StartsWith("link speed \""));
  }
  EXPECT_FALSE(ParseLinkSpeed(std::string(5000, '1')).ok());
}

TEST(LinkWidthTest, LaneCounts) {
  EXPECT_EQ(ParseLinkWidth("16\n").value(), 16);
  EXPECT_EQ(ParseLinkWidth("0").value(), 0);
  for (const char* bad : {"", "x16", "-1", "65", "16 lanes", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(ParseLinkWidth(bad).ok());
  }
  EXPECT_EQ(std::string(ParseLinkWidth("x16").status().message()),
            "link width \"x16\" (want a lane count from 0 to 64)");
}

constexpr char kAerClean[] =
    "Undefined 0\nData Link Protocol 0\nSurprise Down Error 0\nPoisoned TLP 0\n"
    "Flow Control Protocol 0\nCompletion Timeout 0\nCompleter Abort 0\n"
    "Unexpected Completion 0\nReceiver Overflow 0\nMalformed TLP 0\nECRC 0\n"
    "Unsupported Request 0\nACS Violation 0\nUncorrectable Internal Error 0\n"
    "MC Blocked TLP 0\nAtomicOp Egress Blocked 0\nTLP Prefix Blocked Error 0\n"
    "Poisoned TLP Egress Blocked 0\nTOTAL_ERR_FATAL 0\n";

TEST(AerFatalTest, CountsAndTotal) {
  absl::StatusOr<AerFatal> clean = ParseAerFatal(kAerClean);
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_EQ(*clean, AerFatal{});
  absl::StatusOr<AerFatal> bad =
      ParseAerFatal("Undefined 0\nSurprise Down Error 2\nMalformed TLP 1\nTOTAL_ERR_FATAL 2\n");
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->total, 2);
  EXPECT_THAT(bad->nonzero,
              ::testing::ElementsAre(std::pair<std::string, int64_t>{"Surprise Down Error", 2},
                                     std::pair<std::string, int64_t>{"Malformed TLP", 1}));
  const std::pair<const char*, const char*> errors[] = {
      {"Undefined 0\n", "aer_dev_fatal has no TOTAL_ERR_FATAL line"},
      {"TOTAL_ERR_FATAL 1\nTOTAL_ERR_FATAL 1\n", "aer_dev_fatal has TOTAL_ERR_FATAL twice"},
      {"Undefined x\nTOTAL_ERR_FATAL 0\n",
       "aer_dev_fatal line 1 \"Undefined x\" (want \"<error> <count>\")"},
      {"7\nTOTAL_ERR_FATAL 0\n", "aer_dev_fatal line 1 \"7\" (want \"<error> <count>\")"},
      {"TOTAL_ERR_FATAL -1\n",
       "aer_dev_fatal line 1 \"TOTAL_ERR_FATAL -1\" (want \"<error> <count>\")"},
      {"", "aer_dev_fatal has no TOTAL_ERR_FATAL line"},
  };
  for (const auto& [text, want] : errors) {
    SCOPED_TRACE(text);
    absl::StatusOr<AerFatal> v = ParseAerFatal(text);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(std::string(v.status().message()), want);
  }
}

GpuFacts Good() {
  GpuFacts f;
  f.present = true;
  f.driver = "nvidia";
  f.link = PciLink{16, 16, 16, 16};
  f.aer_fatal = AerFatal{};
  return f;
}

TEST(AssessGpuTest, EachSignal) {
  struct Case {
    const char* name;
    std::optional<GpuFacts> facts;
    bool healthy;
    GpuProblem problem;
    const char* message;
  };
  GpuFacts gone;
  GpuFacts unbound = Good();
  unbound.driver.reset();
  GpuFacts aer = Good();
  aer.aer_fatal = AerFatal{3, {{"Surprise Down Error", 2}, {"Malformed TLP", 1}}};
  GpuFacts down = Good();
  down.link = PciLink{0, 0, 16, 16};
  GpuFacts narrow = Good();
  narrow.link = PciLink{16, 8, 16, 16};
  GpuFacts slow = Good();  // idle GPUs lower their link speed: healthy
  slow.link = PciLink{2.5, 16, 16, 16};
  GpuFacts no_link = Good();  // not PCIe, or no link files: nothing to judge
  no_link.link.reset();
  no_link.aer_fatal.reset();
  GpuFacts garbled = Good();
  garbled.unreadable = {"x/aer_dev_fatal: aer_dev_fatal has no TOTAL_ERR_FATAL line"};
  const Case cases[] = {
      {"no sysfs", std::nullopt, true, GpuProblem::kNone,
       "GPU 0000:3b:00.0: no PCI facts in sysfs"},
      {"healthy", Good(), true, GpuProblem::kNone,
       "GPU 0000:3b:00.0: healthy, driver nvidia, PCIe 16 GT/s x16 of 16 GT/s x16"},
      {"not in sysfs", gone, true, GpuProblem::kNone,
       "GPU 0000:3b:00.0: not in sysfs, health unknown"},
      {"unbound", unbound, false, GpuProblem::kUnbound,
       "GPU 0000:3b:00.0: no kernel driver is bound to it"},
      {"aer", aer, false, GpuProblem::kAerFatal,
       "GPU 0000:3b:00.0: 3 fatal PCIe errors (AER: Surprise Down Error 2, Malformed TLP 1); "
       "reset the device or reboot the node to clear"},
      {"link down", down, false, GpuProblem::kLinkDown,
       "GPU 0000:3b:00.0: PCIe no speed x0 of 16 GT/s x16: the link is down"},
      {"fewer lanes", narrow, false, GpuProblem::kLinkDegraded,
       "GPU 0000:3b:00.0: PCIe 16 GT/s x8 of 16 GT/s x16: the link trained to fewer lanes"},
      {"slower, idle", slow, true, GpuProblem::kNone,
       "GPU 0000:3b:00.0: healthy, driver nvidia, PCIe 2.5 GT/s x16 of 16 GT/s x16"},
      {"no link files", no_link, true, GpuProblem::kNone,
       "GPU 0000:3b:00.0: healthy, driver nvidia"},
      {"unreadable file", garbled, true, GpuProblem::kNone,
       "GPU 0000:3b:00.0: healthy, driver nvidia, PCIe 16 GT/s x16 of 16 GT/s x16; unreadable: "
       "x/aer_dev_fatal: aer_dev_fatal has no TOTAL_ERR_FATAL line"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Verdict v = AssessGpu("0000:3b:00.0", c.facts);
    EXPECT_EQ(v.healthy, c.healthy);
    EXPECT_EQ(v.problem, c.problem);
    EXPECT_EQ(v.message, c.message);
  }
  EXPECT_STREQ(GpuProblemName(GpuProblem::kAerFatal), "aer-fatal");
  EXPECT_STREQ(GpuProblemName(GpuProblem::kLinkDegraded), "link-degraded");
}

TEST(AssessGpuTest, MessagesStayWithinTheKubeletsLimit) {
  GpuFacts f = Good();
  f.unreadable.assign(100, std::string(100, 'x'));
  EXPECT_EQ(AssessGpu("0000:3b:00.0", f).message.size(), kMaxMessage);
}

CpuSet Cpus(const char* s) { return CpuSet::Parse(s).value(); }

TEST(TrackerTest, IndividualCpuTakenOfflineIsUnhealthyUntilBack) {
  Tracker t;
  Tracker::Input in;
  in.pool = "node1";
  in.individual_cpus = true;
  in.cpu_devices = {{"cpudev000", Cpus("0")}, {"cpudev001", Cpus("1")}, {"cpudev002", Cpus("2")}};
  Tracker::Output out = t.Update(in);
  ASSERT_EQ(out.cpus.size(), 3u);
  EXPECT_EQ(out.cpus[1], (DeviceStatus{"node1", "cpudev001", true, "CPU 1 online"}));
  // CPU 1 goes offline: the names shift over the online CPUs, so cpudev001 (the name claims
  // holding CPU 1 know) is unhealthy and cpudev002 (its CPU online, now named cpudev001) leaves.
  in.cpu_devices = {{"cpudev000", Cpus("0")}, {"cpudev001", Cpus("2")}};
  in.offline = Cpus("1");
  out = t.Update(in);
  EXPECT_THAT(out.cpus, ::testing::ElementsAre(
                            DeviceStatus{"node1", "cpudev000", true, "CPU 0 online"},
                            DeviceStatus{"node1", "cpudev001", false, "CPU 1 is offline"}));
  // Back online: every device healthy again; the memory of the old mapping stays harmless.
  in.cpu_devices = {{"cpudev000", Cpus("0")}, {"cpudev001", Cpus("1")}, {"cpudev002", Cpus("2")}};
  in.offline = CpuSet{};
  out = t.Update(in);
  for (const DeviceStatus& d : out.cpus) EXPECT_TRUE(d.healthy) << d.device;
  EXPECT_EQ(out.cpus.size(), 3u);
}

TEST(TrackerTest, GroupShrinksAndStaysHealthy) {
  Tracker t;
  Tracker::Input in;
  in.pool = "n";
  in.cpu_devices = {{"cpudevnuma000", Cpus("0-3")}};
  t.Update(in);
  in.cpu_devices = {{"cpudevnuma000", Cpus("0,2-3")}};
  in.offline = Cpus("1");
  Tracker::Output out = t.Update(in);
  EXPECT_THAT(out.cpus, ::testing::ElementsAre(DeviceStatus{"n", "cpudevnuma000", true,
                                                            "CPU 1 offline: capacity 3 CPUs"}));
  // Every CPU of the group offline: the group leaves the pool and is reported unhealthy.
  in.cpu_devices = {};
  in.offline = Cpus("0-3");
  out = t.Update(in);
  EXPECT_THAT(out.cpus, ::testing::ElementsAre(
                            DeviceStatus{"n", "cpudevnuma000", false, "CPU 0-3 are offline"}));
}

TEST(TrackerTest, CpuDeviceLeavingForAnotherReasonIsForgotten) {
  Tracker t;
  Tracker::Input in;
  in.pool = "n";
  in.individual_cpus = true;
  in.cpu_devices = {{"cpudev000", Cpus("0")}, {"cpudev001", Cpus("1")}};
  t.Update(in);
  in.cpu_devices = {{"cpudev000", Cpus("0")}};  // CPU 1 reserved, still online
  EXPECT_EQ(t.Update(in).cpus.size(), 1u);
}

// Devices arriving and leaving between others in name order: each is matched with its own
// memory, never a neighbour's.
TEST(TrackerTest, DevicesComeAndGoBetweenOthers) {
  Tracker t;
  Tracker::Input in;
  in.pool = "n";
  in.individual_cpus = true;
  in.cpu_devices = {{"cpudev000", Cpus("0")}, {"cpudev002", Cpus("2")}, {"cpudev004", Cpus("4")}};
  EXPECT_EQ(t.Update(in).cpus.size(), 3u);
  in.cpu_devices = {{"cpudev001", Cpus("1")},
                    {"cpudev002", Cpus("2")},
                    {"cpudev003", Cpus("3")},
                    {"cpudev005", Cpus("5")}};
  in.offline = Cpus("0");
  EXPECT_THAT(t.Update(in).cpus,
              ::testing::ElementsAre(DeviceStatus{"n", "cpudev000", false, "CPU 0 is offline"},
                                     DeviceStatus{"n", "cpudev001", true, "CPU 1 online"},
                                     DeviceStatus{"n", "cpudev002", true, "CPU 2 online"},
                                     DeviceStatus{"n", "cpudev003", true, "CPU 3 online"},
                                     DeviceStatus{"n", "cpudev005", true, "CPU 5 online"}));
  in.cpu_devices["cpudev002"] = Cpus("6");
  in.offline = CpuSet{};
  EXPECT_THAT(t.Update(in).cpus,
              ::testing::ElementsAre(DeviceStatus{"n", "cpudev001", true, "CPU 1 online"},
                                     DeviceStatus{"n", "cpudev002", true, "CPU 6 online"},
                                     DeviceStatus{"n", "cpudev003", true, "CPU 3 online"},
                                     DeviceStatus{"n", "cpudev005", true, "CPU 5 online"}));
  // What CPU 2 was published as is remembered: offline, the device is unhealthy.
  in.offline = Cpus("2");
  EXPECT_EQ(t.Update(in).cpus[1], (DeviceStatus{"n", "cpudev002", false, "CPU 2 is offline"}));
}

TEST(TrackerTest, GpuVerdictsAndRemovedGpus) {
  Tracker t;
  Tracker::Input in;
  in.pool = "n";
  in.gpus = {{"gpu-0000-3b-00-0", "0000:3b:00.0"}, {"gpu-0000-af-00-0", "0000:af:00.0"}};
  in.gpu_verdicts["0000:af:00.0"] = Verdict{false, GpuProblem::kAerFatal, "GPU 0000:af:00.0: x"};
  Tracker::Output out = t.Update(in);
  EXPECT_THAT(out.gpus,
              ::testing::ElementsAre(
                  DeviceStatus{"n", "gpu-0000-3b-00-0", true, "GPU 0000:3b:00.0: healthy"},
                  DeviceStatus{"n", "gpu-0000-af-00-0", false, "GPU 0000:af:00.0: x"}));
  // 3b leaves the bus (rediscovery drops it): still reported, unhealthy, until it is back.
  in.gpus.erase("gpu-0000-3b-00-0");
  out = t.Update(in);
  EXPECT_EQ(out.gpus[0], (DeviceStatus{"n", "gpu-0000-3b-00-0", false,
                                       "GPU 0000:3b:00.0: gone from the PCI bus"}));
  in.gpus["gpu-0000-3b-00-0"] = "0000:3b:00.0";
  in.gpu_verdicts.clear();
  out = t.Update(in);
  for (const DeviceStatus& d : out.gpus) EXPECT_TRUE(d.healthy) << d.device;
}

}  // namespace
}  // namespace topodra::health
