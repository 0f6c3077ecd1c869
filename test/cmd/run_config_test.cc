// `topodra run`'s flags as a NodeConfig: the typed values, and the usage errors naming the flag.
#include "cmd/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test/testing/fixtures.h"

namespace topodra::cmd {
namespace {

using ::testing::HasSubstr;

const topology::Topology& Machine() {
  static const topology::Topology* topo =
      new topology::Topology(topodra::testing::LoadTopology("16em64t-4s2c2t.xml"));
  return *topo;
}

RunCommand Simulated() {
  RunCommand cmd;
  cmd.topology.file = "m.xml";
  cmd.publish.node_name = "node1";
  return cmd;
}

TEST(RunConfigTest, DefaultsAreTyped) {
  absl::StatusOr<node::NodeConfig> c = NodeConfigFromFlags(Simulated(), Machine());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->publish.node_name, "node1");
  EXPECT_EQ(c->publish.cpu_driver, "dra.cpu");
  EXPECT_EQ(c->publish.gpu_driver, "gpu.topodra.io");
  EXPECT_EQ(c->publish.cpu_mode, publish::CpuDeviceMode::kGrouped);
  EXPECT_EQ(c->publish.group_by, publish::GroupBy::kNuma);
  EXPECT_TRUE(c->publish.gpus);
  EXPECT_EQ(c->slice_mixins, publish::MixinMode::kAuto);
  EXPECT_EQ(c->reservation_taints, publish::TaintMode::kAuto);
  // List attributes are probed (auto: built, the publisher strips them where the server drops
  // them); the node-allocatable mapping is off.
  EXPECT_EQ(c->list_attributes, publish::FeatureMode::kAuto);
  EXPECT_TRUE(c->publish.pcie_root_lists);
  EXPECT_EQ(c->node_allocatable, publish::FeatureMode::kOff);
  EXPECT_FALSE(c->publish.node_allocatable);
  EXPECT_TRUE(c->reservations);
  EXPECT_EQ(c->topology_refresh, absl::Seconds(30));
  EXPECT_TRUE(c->device_plugin.kinds.empty());
  EXPECT_EQ(c->device_plugin.reclaim_interval, absl::Seconds(10));
  EXPECT_EQ(c->device_plugin.extended_resource_check, deviceclass::CheckMode::kAuto);
  // A simulated machine: no pinning unless asked for, and the log says why.
  EXPECT_EQ(c->enforce, node::Enforce::kNone);
  EXPECT_THAT(c->enforce_note, HasSubstr("CPU pinning is off"));
  EXPECT_EQ(c->metrics_listen, "9477");
  EXPECT_EQ(c->health_listen, "127.0.0.1:9478");
  EXPECT_EQ(c->kubelet_root_dir, "/var/lib/kubelet");
  EXPECT_EQ(c->cdi_dir, "/var/run/cdi");
  EXPECT_EQ(c->state_dir, "/var/lib/topodra");
  EXPECT_EQ(c->device_metadata_dir, "");  // the kubelet's plugin directory
}

TEST(RunConfigTest, FlagsBecomeTypedValues) {
  RunCommand cmd = Simulated();
  cmd.publish.cpu_device_mode = "individual";
  cmd.publish.reserved_cpus = "0-1";
  cmd.publish.gpus = "none";
  cmd.slice_mixins = "off";
  cmd.reservation_taints = "on";
  cmd.publish.list_attributes = "off";
  cmd.publish.node_allocatable_mapping = "auto";
  cmd.reservations = "off";
  cmd.topology_refresh_seconds = 5;
  cmd.device_plugin = "cpu,gpu";
  cmd.device_plugin_reclaim_seconds = 0.25;
  cmd.extended_resource_check = "on";
  cmd.enforce = "cgroup";
  cmd.cgroup_root = "/tmp/x/cgroup";
  cmd.hook_dir = "/tmp/x/hook";
  cmd.metrics_address = "none";
  cmd.health_address = ":9";
  cmd.device_metadata_dir = "/var/run//topodra/./x/../device-metadata/";
  cmd.kubelet_root_dir = "/var/lib//kubelet/";
  absl::StatusOr<node::NodeConfig> c = NodeConfigFromFlags(cmd, Machine());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->publish.cpu_mode, publish::CpuDeviceMode::kIndividual);
  EXPECT_EQ(c->publish.reserved_cpus, CpuSet::Parse("0-1").value());
  EXPECT_FALSE(c->publish.gpus);
  EXPECT_EQ(c->slice_mixins, publish::MixinMode::kOff);
  EXPECT_EQ(c->reservation_taints, publish::TaintMode::kOn);
  EXPECT_EQ(c->list_attributes, publish::FeatureMode::kOff);
  EXPECT_FALSE(c->publish.pcie_root_lists);
  EXPECT_EQ(c->node_allocatable, publish::FeatureMode::kAuto);
  EXPECT_TRUE(c->publish.node_allocatable);
  EXPECT_FALSE(c->reservations);
  EXPECT_EQ(c->topology_refresh, absl::Seconds(5));
  EXPECT_TRUE(c->device_plugin.serves(node::DevicePluginKind::kGpu));
  EXPECT_TRUE(c->device_plugin.serves(node::DevicePluginKind::kCpu));
  EXPECT_EQ(c->device_plugin.reclaim_interval, absl::Milliseconds(250));
  EXPECT_EQ(c->device_plugin.extended_resource_check, deviceclass::CheckMode::kOn);
  EXPECT_EQ(c->enforce, node::Enforce::kCgroup);
  EXPECT_EQ(c->enforce_note, "");
  EXPECT_EQ(c->metrics_listen, std::nullopt);
  EXPECT_EQ(c->health_listen, "9");
  // Spelled as the daemon compares host paths: normal, no trailing slash.
  EXPECT_EQ(c->device_metadata_dir, "/var/run/topodra/device-metadata");
  // <kubelet root>/plugins is compared with it.
  EXPECT_EQ(c->kubelet_root_dir, "/var/lib/kubelet");
}

struct ErrorCase {
  const char* name;
  void (*set)(RunCommand*);
  const char* want;  // the whole message
};

TEST(RunConfigTest, ErrorsNameTheFlagAndTheValue) {
  const ErrorCase cases[] = {
      {"reserved CPUs", [](RunCommand* c) { c->publish.reserved_cpus = "x"; }, "--reserved-cpus: "},
      {"mixins", [](RunCommand* c) { c->slice_mixins = "maybe"; }, "--slice-mixins: "},
      {"taints", [](RunCommand* c) { c->reservation_taints = "maybe"; }, "--reservation-taints: "},
      {"list attributes", [](RunCommand* c) { c->publish.list_attributes = "maybe"; },
       "--list-attributes: invalid list attribute mode \"maybe\" (want auto, on or off)"},
      {"node allocatable", [](RunCommand* c) { c->publish.node_allocatable_mapping = "v1.37"; },
       "--node-allocatable-mapping: invalid node-allocatable mapping mode \"v1.37\" (want auto, "
       "on or off)"},
      {"reservations", [](RunCommand* c) { c->reservations = "maybe"; },
       "--reservations: invalid value \"maybe\" (want on or off)"},
      {"DRA health", [](RunCommand* c) { c->dra_health = "auto"; },
       "--dra-health: invalid value \"auto\" (want on or off)"},
      {"device metadata directory", [](RunCommand* c) { c->device_metadata_dir = "run/meta"; },
       "--device-metadata-dir: \"run/meta\" is not an absolute path"},
      {"device metadata directory, blank", [](RunCommand* c) { c->device_metadata_dir = " /x"; },
       "--device-metadata-dir: \" /x\" is not an absolute path"},
      {"pinning a simulated machine's host", [](RunCommand* c) { c->enforce = "cgroup"; },
       "--enforce=cgroup with a simulated machine (--topology-file) would pin the host's "
       "containers to CPUs of a machine that is not there: --cgroup-root \"/sys/fs/cgroup\" is "
       "the host's cgroup tree (/sys/fs/cgroup); point it at a fake tree, or use --enforce=none"},
      {"metrics address", [](RunCommand* c) { c->metrics_address = "nope"; },
       "--metrics-address: "},
      {"health address", [](RunCommand* c) { c->health_address = "nope"; }, "--health-address: "},
      {"extended resource check", [](RunCommand* c) { c->extended_resource_check = "yes"; },
       "--extended-resource-check: invalid value \"yes\" (want auto, on or off)"},
      {"device plugin", [](RunCommand* c) { c->device_plugin = "tpu"; },
       "--device-plugin: invalid value \"tpu\" (want none, gpu, cpu or gpu,cpu)"},
      {"GPU resource",
       [](RunCommand* c) {
         c->device_plugin = "gpu";
         c->device_plugin_gpu_resource = "kubernetes.io/gpu";
       },
       "--device-plugin-gpu-resource: resource name \"kubernetes.io/gpu\" is not an extended "
       "resource name (want <domain>/<name>, not in kubernetes.io)"},
      {"CPU resource, only when served",
       [](RunCommand* c) {
         c->device_plugin = "cpu";
         c->device_plugin_gpu_resource = "bad";
         c->device_plugin_cpu_resource = "requests.x/cpu";
       },
       "--device-plugin-cpu-resource: resource name \"requests.x/cpu\" is not an extended "
       "resource name (want <domain>/<name>, not in kubernetes.io)"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    RunCommand cmd = Simulated();
    c.set(&cmd);
    absl::StatusOr<node::NodeConfig> got = NodeConfigFromFlags(cmd, Machine());
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string want = c.want;
    if (want.ends_with(": ")) {
      EXPECT_THAT(std::string(got.status().message()), ::testing::StartsWith(want));
    } else {
      EXPECT_EQ(got.status().message(), want);
    }
  }
}

}  // namespace
}  // namespace topodra::cmd
