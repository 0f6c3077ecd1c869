// Which CPU pinning `topodra run` applies for which flags: off by default on a simulated machine,
// and never the host's cgroups or hook directory for one.
#include "cmd/enforcement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace topodra::cmd {
namespace {

struct Case {
  std::string name;
  std::optional<std::string> file, synthetic, enforce;
  std::string cgroup_root = kHostCgroupRoot;
  std::string hook_dir = kHostHookDir;
  std::string want_mode;   // "" when an error is wanted
  std::string want_error;  // the whole message
  bool want_note = false;
};

TEST(ResolveEnforcementTest, Table) {
  const std::string sim_cgroup =
      "--enforce=cgroup with a simulated machine (--topology-synthetic) would pin the host's "
      "containers to CPUs of a machine that is not there: --cgroup-root ";
  const Case cases[] = {
      {.name = "live default", .want_mode = "cgroup"},
      {.name = "live none", .enforce = "none", .want_mode = "none"},
      {.name = "live cgroup", .enforce = "cgroup", .want_mode = "cgroup"},
      {.name = "file default", .file = "m.xml", .want_mode = "none", .want_note = true},
      {.name = "synthetic default",
       .synthetic = "pack:1 pu:2",
       .want_mode = "none",
       .want_note = true},
      {.name = "synthetic none", .synthetic = "pu:2", .enforce = "none", .want_mode = "none"},
      {.name = "synthetic cgroup, host tree",
       .synthetic = "pu:2",
       .enforce = "cgroup",
       .hook_dir = "/tmp/t/hook",
       .want_error = sim_cgroup +
                     "\"/sys/fs/cgroup\" is the host's cgroup tree (/sys/fs/cgroup); point it at "
                     "a fake tree, or use --enforce=none"},
      {.name = "synthetic cgroup, host tree spelt otherwise",
       .synthetic = "pu:2",
       .enforce = "cgroup",
       .cgroup_root = "/sys/fs/./cgroup/",
       .hook_dir = "/tmp/t/hook",
       .want_error = sim_cgroup +
                     "\"/sys/fs/./cgroup/\" is the host's cgroup tree (/sys/fs/cgroup); point it "
                     "at a fake tree, or use --enforce=none"},
      {.name = "synthetic cgroup, below the host tree",
       .synthetic = "pu:2",
       .enforce = "cgroup",
       .cgroup_root = "/sys/fs/cgroup/kubepods",
       .hook_dir = "/tmp/t/hook",
       .want_error = sim_cgroup +
                     "\"/sys/fs/cgroup/kubepods\" is the host's cgroup tree (/sys/fs/cgroup); "
                     "point it at a fake tree, or use --enforce=none"},
      {.name = "file cgroup, host hook dir",
       .file = "m.xml",
       .enforce = "cgroup",
       .cgroup_root = "/tmp/t/cgroup",
       .hook_dir = "/opt/topodra/bin/",
       .want_error = "--enforce=cgroup with a simulated machine (--topology-file) would pin the "
                     "host's containers to CPUs of a machine that is not there: --hook-dir "
                     "\"/opt/topodra/bin/\" is the host's hook directory (/opt/topodra/bin); give "
                     "a directory of its own, or use --enforce=none"},
      {.name = "file cgroup, fake tree",
       .file = "m.xml",
       .enforce = "cgroup",
       .cgroup_root = "/tmp/t/cgroup",
       .hook_dir = "/tmp/t/hook",
       .want_mode = "cgroup"},
      {.name = "a name that only starts like the host tree",
       .file = "m.xml",
       .enforce = "cgroup",
       .cgroup_root = "/sys/fs/cgroupfake",
       .hook_dir = "/tmp/t/hook",
       .want_mode = "cgroup"},
  };
  for (const Case& c : cases) {
    RunCommand cmd;
    cmd.topology.file = c.file;
    cmd.topology.synthetic = c.synthetic;
    cmd.enforce = c.enforce;
    cmd.cgroup_root = c.cgroup_root;
    cmd.hook_dir = c.hook_dir;
    const absl::StatusOr<Enforcement> got = ResolveEnforcement(cmd);
    if (c.want_mode.empty()) {
      ASSERT_FALSE(got.ok()) << c.name;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
      EXPECT_EQ(got.status().message(), c.want_error) << c.name;
      continue;
    }
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    EXPECT_EQ(got->mode, c.want_mode) << c.name;
    EXPECT_EQ(!got->note.empty(), c.want_note) << c.name;
  }
  RunCommand cmd;
  cmd.topology.synthetic = "pu:2";
  EXPECT_EQ(ResolveEnforcement(cmd)->note,
            "CPU pinning is off (--enforce=none): the machine is simulated (--topology-synthetic), "
            "its CPUs are not this host's; --enforce=cgroup with a --cgroup-root and --hook-dir "
            "of a fake tree pins there");
}

}  // namespace
}  // namespace topodra::cmd
