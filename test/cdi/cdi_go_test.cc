// Specs written by SpecStore, checked by an independent reader: the CDI Go library Debian ships
// (0.5.2, the generation embedded in containerd 1.7), through test/cdi/cdi_validate.go.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cdi/spec_store.h"
#include "gtest/gtest.h"
#include "test/testing/cdi_validator.h"

namespace topodra::cdi {
namespace {

namespace fs = std::filesystem;

using topodra::testing::CommandResult;
using topodra::testing::RunCommand;
using RunResult = CommandResult;

class CdiGoValidatorTest : public ::testing::Test {
 protected:
  // Builds the validator once; every case then runs the binary on its own directory.
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/cdi_go_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    work_ = new std::string(tmpl);
    std::string why;
    const std::string built = topodra::testing::BuildCdiValidator(&why);
    ASSERT_FALSE(built.empty()) << why;
    validator_ = new std::string(built);
  }

  static void TearDownTestSuite() {
    if (work_ != nullptr) {
      std::error_code ec;
      fs::remove_all(*work_, ec);
    }
    delete work_;
    delete validator_;
    work_ = validator_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(validator_, nullptr) << "the validator did not build";
    dir_ = *work_ + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  RunResult Validate() { return RunCommand(*validator_ + " " + dir_); }

  static std::string* work_;
  static std::string* validator_;
  std::string dir_;
};

std::string* CdiGoValidatorTest::work_ = nullptr;
std::string* CdiGoValidatorTest::validator_ = nullptr;

constexpr char kUid[] = "6f1d7c2e-9a4b-4c1e-8f3a-2b5d9e0c7a11";
constexpr char kUid2[] = "0b3e5f7a-1c2d-4e6f-8a9b-c0d1e2f3a4b5";

Spec CpuClaimSpec(const std::string& uid, const std::string& cpus) {
  Spec spec;
  spec.kind = "k8s.topodra.io/cpu";
  spec.devices = {
      {.name = "claim-" + uid, .container_edits = {.env = {"DRA_CPUSET_" + uid + "=" + cpus}}}};
  return spec;
}

Spec GpuClaimSpec(const std::string& uid) {
  Spec spec;
  spec.kind = "k8s.topodra.io/gpu";
  for (const auto& [bus, minor] :
       std::vector<std::pair<std::string, int>>{{"0000-3b-00-0", 0}, {"0000-86-00-0", 1}}) {
    Device gpu;
    gpu.name = uid + "-gpu-" + bus;
    gpu.container_edits.env = {"TOPODRA_GPU_" + bus + "=" + std::to_string(minor)};
    gpu.container_edits.device_nodes = {
        {.path = "/dev/nvidia" + std::to_string(minor),
         .type = "c",
         .major = 195,
         .minor = minor,
         .file_mode = 0666,
         .permissions = "rw",
         .uid = 0,
         .gid = 0},
        {.path = "/dev/dri/renderD" + std::to_string(128 + minor),
         .host_path = "/dev/dri/renderD" + std::to_string(128 + minor)}};
    spec.devices.push_back(std::move(gpu));
  }
  spec.container_edits.device_nodes = {{.path = "/dev/nvidiactl"}, {.path = "/dev/nvidia-uvm"}};
  spec.container_edits.mounts = {{.host_path = "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                  .container_path = "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                  .options = {"ro", "nosuid", "nodev", "bind"},
                                  .type = "bind"}};
  spec.container_edits.hooks = {{.hook_name = "createContainer",
                                 .path = "/usr/bin/nvidia-ctk",
                                 .args = {"nvidia-ctk", "hook", "update-ldcache"},
                                 .env = {"NVIDIA_CTK_DEBUG=false"},
                                 .timeout = 30}};
  return spec;
}

TEST_F(CdiGoValidatorTest, AcceptsWhatTheStoreWrites) {
  SpecStore store(dir_);
  const std::vector<std::pair<std::string, Spec>> specs = {
      {*TransientSpecFileName("k8s.topodra.io/cpu", std::string("claim-") + kUid),
       CpuClaimSpec(kUid, "2-5")},
      {*TransientSpecFileName("k8s.topodra.io/cpu", std::string("claim-") + kUid2),
       CpuClaimSpec(kUid2, "0,64-65")},
      {*TransientSpecFileName("k8s.topodra.io/gpu", kUid), GpuClaimSpec(kUid)},
  };
  std::vector<std::string> versions;
  for (const auto& [file, spec] : specs) {
    absl::StatusOr<Spec> written = store.Write(file, spec);
    ASSERT_TRUE(written.ok()) << written.status();
    versions.push_back(written->cdi_version);
  }
  // Env only: the baseline. Digit-led names and hostPath: 0.5.0, the most this library reads.
  EXPECT_EQ(versions, (std::vector<std::string>{"0.3.0", "0.3.0", "0.5.0"}));

  RunResult run = Validate();
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, absl::StrCat("device: k8s.topodra.io/cpu=claim-", kUid2, "\n",
                                     "device: k8s.topodra.io/cpu=claim-", kUid, "\n",
                                     "device: k8s.topodra.io/gpu=", kUid, "-gpu-0000-3b-00-0\n",
                                     "device: k8s.topodra.io/gpu=", kUid, "-gpu-0000-86-00-0\n"));
  // The names the validator printed are the ones QualifiedName builds.
  EXPECT_NE(run.output.find(*QualifiedName("k8s.topodra.io/cpu", std::string("claim-") + kUid)),
            std::string::npos);
}

// A device-metadata spec as the kubelet plugin library writes it (and the DRA drivers do):
// cdiVersion 0.5.0 whatever its fields need, a read-only bind mount of the metadata file, the
// device named "<claim uid>_<request>".
TEST_F(CdiGoValidatorTest, AcceptsTheDeviceMetadataSpecs) {
  SpecStore store(dir_);
  for (const std::string& uid :
       {std::string(kUid), std::string("b3e5f7a1-1c2d-4e6f-8a9b-c0d1e2f3a4b5")}) {
    Spec spec;
    spec.cdi_version = "0.5.0";
    spec.kind = "dra.cpu/metadata";
    spec.devices = {
        {.name = uid + "_cpus",
         .container_edits = {.mounts = {{"/var/lib/kubelet/plugins/dra.cpu/dra-device-metadata/"
                                         "default_c/cpus/metadata.json",
                                         "/var/run/kubernetes.io/dra-device-attributes/"
                                         "resourceclaims/c/cpus/dra.cpu-metadata.json",
                                         {"ro", "bind"},
                                         ""}}}}};
    absl::StatusOr<Spec> written = store.Write("dra.cpu_metadata_" + uid + "_cpus.json", spec, true,
                                               VersionPolicy::kAtLeastGiven);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->cdi_version, "0.5.0");
  }
  RunResult run = Validate();
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output,
            absl::StrCat("device: dra.cpu/metadata=", kUid, "_cpus\n",
                         "device: dra.cpu/metadata=b3e5f7a1-1c2d-4e6f-8a9b-c0d1e2f3a4b5_cpus\n"));
}

// The check can fail: a spec stamped with a newer cdiVersion than its fields need (what a writer
// that always writes the latest version produces) is rejected by this library.
TEST_F(CdiGoValidatorTest, RejectsSpecAboveItsVersion) {
  fs::create_directories(dir_);
  Spec spec = CpuClaimSpec(kUid, "1");
  spec.cdi_version = "0.6.0";
  spec.annotations = {{"topodra.io/claim", "default/cpu"}};
  ASSERT_TRUE(cdi::Validate(spec).ok());
  std::ofstream(dir_ + "/k8s.topodra.io-cpu_new.json") << ToJsonText(spec);
  std::ofstream(dir_ + "/k8s.topodra.io-cpu_ok.json") << ToJsonText([] {
    Spec ok = CpuClaimSpec(kUid2, "2");
    ok.cdi_version = "0.3.0";
    return ok;
  }());

  RunResult run = Validate();
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("error: " + dir_ + "/k8s.topodra.io-cpu_new.json: "), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("unknown field \"annotations\""), std::string::npos) << run.output;
  // The good file next to it still loads.
  EXPECT_NE(run.output.find(absl::StrCat("device: k8s.topodra.io/cpu=claim-", kUid2, "\n")),
            std::string::npos)
      << run.output;
}

// Both readers agree on what is broken: a spec our Validate rejects, written raw.
TEST_F(CdiGoValidatorTest, RejectsWhatValidateRejects) {
  fs::create_directories(dir_);
  Spec spec = CpuClaimSpec(kUid, "1");
  spec.cdi_version = "0.3.0";
  spec.devices[0].container_edits.env = {"=1"};
  ASSERT_FALSE(cdi::Validate(spec).ok());
  std::ofstream(dir_ + "/k8s.topodra.io-cpu_bad.json") << ToJsonText(spec);

  RunResult run = Validate();
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("invalid environment variable \"=1\""), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("device: "), std::string::npos) << run.output;
}

}  // namespace
}  // namespace topodra::cdi
