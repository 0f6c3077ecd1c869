// Runs the real topodra binary: exit codes, one-line errors, and JSON that parses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "test/testing/fixtures.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A kubeconfig whose API server is not there: a daemon started with it runs, retries, and
// touches no cluster.
void WriteUnreachableKubeconfig(const std::string& path) {
  std::ofstream(path) << "apiVersion: v1\nkind: Config\nclusters:\n"
                         "- name: c\n  cluster:\n    server: http://127.0.0.1:1\n"
                         "users:\n- name: u\n  user: {}\ncontexts:\n"
                         "- name: x\n  context: {cluster: c, user: u}\n"
                         "current-context: x\n";
}

Result RunTopodra(const std::string& args, const std::string& prefix = "") {
  // ctest runs the tests of this binary as parallel processes: names must not collide.
  static int counter = 0;
  const std::string base =
      ::testing::TempDir() + "/cli_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  const std::string out = base + "_out", err = base + "_err";
  const std::string cmd =
      prefix + std::string(TOPODRA_BINARY) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

std::string Fixture(const std::string& name) { return topodra::testing::FixturePath(name); }

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(CliTest, TopologyJsonFromFile) {
  const Result r = RunTopodra("topology --topology-file " + Fixture("nvidiaDGX2.xml") + " -o json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["summary"]["gpus"], 16);
  EXPECT_EQ(j["summary"]["cpus"], 4);
}

// Only `topodra run` needs gRPC, OpenSSL and spdlog: they live in topodra-daemon, which `run`
// execs, and every other command runs without mapping them (nor needs them installed). The
// dynamic loader's own trace names every library it loads, NEEDED or dlopened.
TEST(CliTest, CommandsOtherThanRunLoadNoDaemonLibrary) {
  const Result r =
      RunTopodra("topology --topology-synthetic 'pack:1 core:2 pu:1' -o json", "LD_DEBUG=files ");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_THAT(r.err, HasSubstr("file=libhwloc.so"));  // the trace is there
  for (const char* lib :
       {"libssl", "libcrypto", "libcurl", "libgrpc", "libprotobuf", "libspdlog"}) {
    EXPECT_THAT(r.err, Not(HasSubstr(std::string("file=") + lib))) << lib;
  }
}

// `topodra run` is topodra-daemon's: the same flags and help through the exec, and one line
// when the daemon is not next to the binary.
TEST(CliTest, RunExecsTheDaemonNextToTheBinary) {
  Result r = RunTopodra("run --help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Usage: topodra run"));
  EXPECT_THAT(r.out, HasSubstr("--kubelet-root-dir"));
  const std::string dir = ::testing::TempDir() + "/cli_alone_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir + " && cp " + std::string(TOPODRA_BINARY) + " " + dir +
                         "/topodra")
                            .c_str()),
            0);
  const std::string err = dir + "/err";
  const int status = std::system((dir + "/topodra run --help >/dev/null 2>" + err).c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
  const std::string text = ReadFile(err);
  EXPECT_EQ(Lines(text), 1) << text;
  EXPECT_THAT(text, StartsWith("topodra run: error: cannot start the daemon \""));
  EXPECT_THAT(text, HasSubstr("/cli_alone_" + std::to_string(getpid()) +
                              "/topodra-daemon\": No such file or directory"));
  std::system(("rm -rf " + dir).c_str());
}

TEST(CliTest, TopologyTextFromSynthetic) {
  const Result r = RunTopodra("topology --topology-synthetic 'pack:2 core:8 pu:4'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("Machine (synthetic:pack:2 core:8 pu:4): 2 packages"));
  EXPECT_THAT(r.out, HasSubstr("64 CPUs online (0-63)"));
}

TEST(CliTest, LiveMachine) {
  const Result r = RunTopodra("topology -o json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GE(nlohmann::json::parse(r.out)["summary"]["cpus"].get<int>(), 1);
}

TEST(CliTest, VersionAndHelp) {
  Result r = RunTopodra("version");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, StartsWith("topodra "));
  EXPECT_EQ(RunTopodra("--version").code, 0);
  for (const char* args : {"--help", "topology --help", "version --help"}) {
    r = RunTopodra(args);
    EXPECT_EQ(r.code, 0) << args;
    EXPECT_THAT(r.out, HasSubstr("Usage")) << args;
  }
  EXPECT_THAT(RunTopodra("topology --help").out, HasSubstr("--topology-synthetic"));
}

TEST(CliTest, BadInputIsOneLineAndExitCodeTwo) {
  const std::string garbage = ::testing::TempDir() + "/cli_garbage.xml";
  std::ofstream(garbage) << "not xml at all";
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {"", "A subcommand is required"},
      {"frobnicate", "unknown command \"frobnicate\""},
      {"topology --no-such-flag", "--no-such-flag"},
      {"topology -o yaml", "yaml"},
      {"topology --topology-file /nonexistent.xml", "/nonexistent.xml"},
      {"topology --topology-file " + garbage, "is not valid hwloc XML"},
      {"topology --topology-synthetic 'pack:2 bogus:3'", "invalid synthetic topology"},
      {"topology --topology-synthetic ''", "invalid synthetic topology"},
      {"topology --topology-file " + Fixture("fakecpukinds.xml") +
           " --topology-synthetic 'pack:1 pu:2'",
       "excludes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = RunTopodra(c.args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_THAT(r.err, StartsWith("topodra"));
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
}

}  // namespace

namespace {

TEST(CliTest, SlicesOnEveryFixtureAndMode) {
  for (const std::string& fixture : topodra::testing::AllFixtures()) {
    for (const char* mode : {"--cpu-device-mode individual", "--group-by numa", "--group-by socket",
                             "--group-by machine"}) {
      SCOPED_TRACE(std::string(fixture) + " " + mode);
      const Result r =
          RunTopodra("slices --node-name n1 --topology-file " + Fixture(fixture) + " " + mode);
      ASSERT_EQ(r.code, 0) << r.err;
      const nlohmann::json j = nlohmann::json::parse(r.out);
      EXPECT_EQ(j["kind"], "List");
      ASSERT_GE(j["items"].size(), 1u);
      EXPECT_EQ(j["items"][0]["spec"]["nodeName"], "n1");
      const Result flat = RunTopodra("slices --flatten -o yaml --node-name n1 --topology-file " +
                                     Fixture(fixture) + " " + mode);
      EXPECT_EQ(flat.code, 0) << flat.err;
    }
  }
}

// The alpha-gated fields: off by default (auto has no server to ask), printed with `on`.
TEST(CliTest, SlicesWithListAttributesAndNodeAllocatableMapping) {
  const std::string base =
      "slices --node-name n1 --flatten --topology-file " + Fixture("power8gpudistances.xml");
  const nlohmann::json root_list = {{"strings", {"pci0002:00", "pci0003:00"}}};
  struct Case {
    std::string flags;
    bool lists;
    bool mapping;
  };
  for (const Case& c :
       {Case{"", false, false}, Case{"--list-attributes auto", false, false},
        Case{"--list-attributes on", true, false},
        Case{"--node-allocatable-mapping on", false, true},
        Case{"--list-attributes on --node-allocatable-mapping on", true, true},
        Case{"--list-attributes off --node-allocatable-mapping auto", false, false}}) {
    SCOPED_TRACE(c.flags);
    const Result r = RunTopodra(base + " " + c.flags);
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json& cpu = j["items"][0]["spec"]["devices"][0];
    ASSERT_EQ(cpu["name"], "cpudevnuma000");
    EXPECT_EQ(cpu["attributes"].contains("resource.kubernetes.io/pcieRoot"), c.lists);
    if (c.lists) {
      EXPECT_EQ(cpu["attributes"]["resource.kubernetes.io/pcieRoot"], root_list);
    }
    EXPECT_EQ(cpu.contains("nodeAllocatableResources"), c.mapping);
    if (c.mapping) {
      EXPECT_EQ(cpu["nodeAllocatableResources"],
                nlohmann::json::parse(R"({"cpu":{"mapping":{"capacityKey":"dra.cpu/cpu",
                                          "capacityMultiplier":"1"}}})"));
    }
    // GPUs keep the scalar root and map nothing.
    const nlohmann::json& gpu = j["items"][1]["spec"]["devices"][0];
    EXPECT_EQ(gpu["attributes"]["resource.kubernetes.io/pcieRoot"],
              nlohmann::json({{"string", "pci0002:00"}}));
    EXPECT_FALSE(gpu.contains("nodeAllocatableResources"));
  }
  const Result bad = RunTopodra(base + " --list-attributes yes");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, ::testing::HasSubstr("--list-attributes"));
  const Result topo = RunTopodra("topology --topology-file " + Fixture("power8gpudistances.xml"));
  EXPECT_THAT(topo.out,
              ::testing::HasSubstr("PCIe root pci0002:00: CPUs 0-1,8-9,16-17,24-25, NUMA 0\n"));
}

TEST(CliTest, SlicesFlattenAndFlattenCommandAgree) {
  const std::string dir = ::testing::TempDir();
  const std::string args = "slices --node-name n1 --cpu-device-mode individual --topology-file " +
                           Fixture("power8gpudistances.xml");
  const Result mixed = RunTopodra(args + " -o yaml");
  ASSERT_EQ(mixed.code, 0) << mixed.err;
  std::ofstream(dir + "/mixed.yaml") << mixed.out;
  const Result flat = RunTopodra(args + " --flatten");
  ASSERT_EQ(flat.code, 0);
  const Result flattened = RunTopodra("flatten " + dir + "/mixed.yaml");
  ASSERT_EQ(flattened.code, 0) << flattened.err;
  EXPECT_EQ(nlohmann::json::parse(flattened.out), nlohmann::json::parse(flat.out));
  EXPECT_EQ(flat.out.find("\"mixins\""), std::string::npos);
  EXPECT_NE(mixed.out.find("mixins:"), std::string::npos);
  // Strings that YAML 1.1 would read as numbers stay quoted.
  EXPECT_NE(mixed.out.find("\"0002:01:00.0\""), std::string::npos);
}

TEST(CliTest, FlattenErrors) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/missing-mixin.json")
      << R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"s1"},
            "spec":{"driver":"d.example.com","pool":{"name":"n1","generation":1,
            "resourceSliceCount":1},"nodeName":"n1",
            "devices":[{"name":"gpu-0","includes":["common"]}]}})";
  std::ofstream(dir + "/dup.yaml") << R"(kind: List
items:
- kind: ResourceSlice
  metadata: {name: a}
  spec: {driver: d.example.com, pool: {name: n1}, nodeName: n1, devices: [{name: x}]}
- kind: ResourceSlice
  metadata: {name: b}
  spec: {driver: d.example.com, pool: {name: n1}, nodeName: n1, devices: [{name: x}]}
)";
  std::ofstream(dir + "/garbage.yaml") << "kind: [unclosed";
  // Valid UTF-8 text whose YAML escape decodes to a lone surrogate.
  std::ofstream(dir + "/surrogate.yaml") << "kind: \"\\uD800\"\n";
  std::ofstream(dir + "/latin1.yaml") << "kind: caf\xe9\n";
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {"flatten " + dir + "/missing-mixin.json",
       "device \"gpu-0\" includes unknown mixin \"common\""},
      {"flatten " + dir + "/dup.yaml", "duplicate device name \"x\""},
      {"flatten " + dir + "/garbage.yaml", "neither JSON nor YAML"},
      {"flatten " + dir + "/surrogate.yaml", "invalid unicode"},
      {"flatten " + dir + "/latin1.yaml", "input is not valid UTF-8 at byte 9"},
      {"flatten /nonexistent.yaml", "cannot read"},
      {"flatten", "FILE is required"},
      {"slices --group-by core", "core"},
      {"slices --reserved-cpus 1-", "--reserved-cpus: invalid cpuset \"1-\""},
      {"slices --reserved-cpus 4096", "reserved CPUs 4096 do not exist"},
      {"slices --node-name Bad_Name", "invalid node name \"Bad_Name\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = RunTopodra(c.args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
}

TEST(CliTest, FlattenFromStdin) {
  const std::string dir = ::testing::TempDir();
  const Result mixed =
      RunTopodra("slices --node-name n1 --topology-file " + Fixture("nvidiaDGX2.xml"));
  ASSERT_EQ(mixed.code, 0);
  std::ofstream(dir + "/dgx.json") << mixed.out;
  const std::string cmd =
      std::string(TOPODRA_BINARY) + " flatten - < " + dir + "/dgx.json > " + dir + "/flat.json";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/flat.json"));
  EXPECT_EQ(j["items"][1]["spec"]["devices"][0]["attributes"]["vendorID"]["string"], "0x10de");
}

}  // namespace

namespace {

// `topodra run --config FILE`: keys are the long flags; the command line wins; unknown keys and
// unreadable files are usage errors. The checks run before the daemon touches anything.
TEST(CliTest, RunConfigFile) {
  const std::string dir = ::testing::TempDir();
  auto write = [&dir](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  const std::string bad_mode = write("bad-mode.yaml", "cpu-device-mode: sideways\nnode-name: n1\n");
  Result r = RunTopodra("run --config " + bad_mode);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("sideways"));
  // The flag wins over the file; what fails next is the missing kubeconfig, not the mode.
  r = RunTopodra("run --config " + bad_mode +
                 " --cpu-device-mode individual --kubeconfig /nonexistent/kubeconfig");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("sideways")));
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/kubeconfig"));
  r = RunTopodra("run --config " + write("unknown.yaml", "cpu-mode: individual\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown key \"cpu-mode\""));
  r = RunTopodra("run --config " + write("list.yaml", "- a\n- b\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("expected a map"));
  r = RunTopodra("run --config " + dir + "/missing.yaml");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read"));
}

// A simulated machine's CPU ids are not the host's: cgroup pinning needs asking for, and a
// cgroup tree and hook directory that are not the host's; else one line and exit 2, before the
// daemon touches anything.
TEST(CliTest, RunRefusesToPinASimulatedMachineOnTheHost) {
  // Should the refusal ever regress, the daemon must still stay off the host: every path it
  // writes is temporary, its API server is not there, and it is killed after 15 s (it answers in
  // under a second; the margin is for a loaded CI machine).
  const std::string dir = ::testing::TempDir() + "/cli_enforce_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  WriteUnreachableKubeconfig(dir + "/kubeconfig");
  const std::string safe = " --node-name n1 --kubeconfig " + dir +
                           "/kubeconfig --kubelet-root-dir " + dir + "/kubelet --cdi-dir " + dir +
                           "/cdi --state-dir " + dir + "/state";
  auto run = [&](const std::string& args) {
    return RunTopodra("run" + args + safe, "timeout -s KILL 15 ");
  };
  const std::string synth = " --topology-synthetic 'pack:1 core:2 pu:1' --enforce cgroup";
  Result r = run(synth);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "topodra run: error: --enforce=cgroup with a simulated machine (--topology-synthetic) "
            "would pin the host's containers to CPUs of a machine that is not there: "
            "--cgroup-root \"/sys/fs/cgroup\" is the host's cgroup tree (/sys/fs/cgroup); point "
            "it at a fake tree, or use --enforce=none\n");
  r = run(synth + " --cgroup-root " + dir + "/cgroup");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "topodra run: error: --enforce=cgroup with a simulated machine (--topology-synthetic) "
            "would pin the host's containers to CPUs of a machine that is not there: --hook-dir "
            "\"/opt/topodra/bin\" is the host's hook directory (/opt/topodra/bin); give a "
            "directory of its own, or use --enforce=none\n");
  r = run(" --topology-file " + Fixture("16em64t-4s2c2t.xml") +
          " --enforce=cgroup --cgroup-root /sys/fs/cgroup/kubepods --hook-dir " + dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("(--topology-file)"));
  std::system(("rm -rf " + dir).c_str());
}

// Without --enforce, a simulated machine runs without pinning and says so at start; nothing is
// installed in --hook-dir and no cgroup tree is looked for.
TEST(CliTest, RunOnASimulatedMachinePinsNothingByDefault) {
  const std::string dir = ::testing::TempDir() + "/cli_sim_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  // An API server that is not there: the daemon starts, retries, and is stopped.
  WriteUnreachableKubeconfig(dir + "/kubeconfig");
  const std::string cmd =
      "timeout -s TERM 3 " + std::string(TOPODRA_BINARY) +
      " run --topology-synthetic 'pack:1 core:2 pu:1' --node-name n1"
      " --kubeconfig " +
      dir + "/kubeconfig --kubelet-root-dir " + dir + "/kubelet --cdi-dir " + dir +
      "/cdi --state-dir " + dir + "/state --cgroup-root " + dir + "/cgroup --hook-dir " + dir +
      "/hook --metrics-address none --health-address none --reservations off 2>" + dir +
      "/log </dev/null";
  const int status = std::system(cmd.c_str());
  const std::string log = ReadFile(dir + "/log");
  // 124: timeout stopped it (it was still running, as it should be); the daemon said "stopped".
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 124) << log;
  EXPECT_THAT(log, HasSubstr("I stopped"));
  EXPECT_THAT(log, HasSubstr("CPU pinning is off (--enforce=none): the machine is simulated "
                             "(--topology-synthetic), its CPUs are not this host's"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("--enforce=cgroup:")));
  EXPECT_FALSE(std::ifstream(dir + "/hook/topodra-cpuset-hook").good());
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
