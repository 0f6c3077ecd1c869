// Device metadata (KEP-5304) from the real `topodra run` as the kubelet simulator sees it: the
// host file and its CDI spec after NodePrepareResources, the CDI ids of the answer, their removal
// on unprepare, their restoration and clean-up at start, and --device-metadata=off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "test/integration/node_fixture.h"
#include "test/testing/cdi_validator.h"

namespace topodra::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class DeviceMetadataTest : public NodeTest {
 protected:
  std::string MetadataRoot(const std::string& driver = kCpu) const {
    return absl::StrCat(dirs_.kubelet_root, "/plugins/", driver, "/dra-device-metadata");
  }
  std::string HostFile(const PrepareClaim& c, const std::string& request,
                       const std::string& driver = kCpu) const {
    return absl::StrCat(MetadataRoot(driver), "/", c.ns, "_", c.name, "/", request,
                        "/metadata.json");
  }
  std::string SpecFile(const PrepareClaim& c, const std::string& request,
                       const std::string& driver = kCpu) const {
    return absl::StrCat(dirs_.cdi, "/", driver, "_metadata_", c.uid, "_", request, ".json");
  }
  // The objects of the JSON stream at `path`.
  static std::vector<json> Stream(const std::string& path) {
    std::vector<json> out;
    std::istringstream in(ReadFile(path));
    try {
      while (in >> std::ws, !in.eof()) {
        json j;
        in >> j;  // one value of the stream
        out.push_back(j);
      }
    } catch (const json::exception& e) {
      ADD_FAILURE() << path << ": " << e.what();
    }
    return out;
  }
};

TEST_F(DeviceMetadataTest, PrepareWritesTheFileAndItsCdiSpecAndUnprepareRemovesThem) {
  StartNode();
  PrepareClaim c = CpuClaim("meta", "cpudevnuma001", "4");
  ClaimResult r = PrepareOne(c);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 1u);
  const std::string meta_id = absl::StrCat("dra.cpu/metadata=", c.uid, "_cpus");
  EXPECT_THAT(r.devices[0].cdi_device_ids,
              ElementsAre(absl::StrCat("dra.cpu/claim=", c.uid, "-cpudevnuma001"), meta_id));

  const std::vector<json> stream = Stream(HostFile(c, "cpus"));
  ASSERT_EQ(stream.size(), 2u) << ReadFile(HostFile(c, "cpus"));
  EXPECT_EQ(stream[0]["apiVersion"], "metadata.resource.k8s.io/v1beta1");
  EXPECT_EQ(stream[1]["apiVersion"], "metadata.resource.k8s.io/v1alpha1");
  EXPECT_EQ(stream[0]["metadata"],
            json({{"name", "meta"}, {"namespace", "default"}, {"uid", c.uid}, {"generation", 1}}));
  const json& device = stream[0]["requests"][0]["devices"][0];
  EXPECT_EQ(stream[0]["requests"][0]["name"], "cpus");
  EXPECT_EQ(device["driver"], "dra.cpu");
  EXPECT_EQ(device["pool"], kNode);
  EXPECT_EQ(device["name"], "cpudevnuma001");
  // The same CPUs as the CDI environment, and what the slice published.
  EXPECT_EQ(device["attributes"]["dra.cpu/cpuset"]["string"], CdiCpus(c.uid).ToString());
  EXPECT_EQ(device["attributes"]["dra.cpu/numaNodes"], json({{"ints", {1}}}));
  EXPECT_EQ(device["attributes"]["dra.cpu/allocatedNumCPUs"], json({{"int", 4}}));
  EXPECT_EQ(device["attributes"]["resource.kubernetes.io/numaNode"], json({{"int", 1}}));

  const json spec = json::parse(ReadFile(SpecFile(c, "cpus")));
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "dra.cpu/metadata");
  EXPECT_EQ(spec["devices"][0]["name"], absl::StrCat(c.uid, "_cpus"));
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"],
            json::array({{{"hostPath", HostFile(c, "cpus")},
                          {"containerPath",
                           "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/meta/"
                           "cpus/dra.cpu-metadata.json"},
                          {"options", {"ro", "bind"}}}}));

  EXPECT_EQ(UnprepareOne(c), "");
  EXPECT_FALSE(fs::exists(SpecFile(c, "cpus")));
  EXPECT_FALSE(fs::exists(absl::StrCat(MetadataRoot(), "/default_meta")));
  EXPECT_EQ(UnprepareOne(c), "");  // again: still fine
}

TEST_F(DeviceMetadataTest, ATemplateClaimMountsUnderItsPodClaimNameAndGpusToo) {
  StartNode();
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());
  const std::string gpu = FirstGpu();
  ASSERT_FALSE(gpu.empty());
  json claim = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata",
                 {{"name", "pod-a-accel-x7k2p"},
                  {"namespace", "default"},
                  {"annotations", {{"resource.kubernetes.io/pod-claim-name", "accel"}}}}},
                {"spec", {{"devices", {{"requests", json::array({Request("g", kGpu)})}}}}}};
  auto created = server_->CreateClaim(claim);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(
      server_
          ->AllocateClaim(
              "default", "pod-a-accel-x7k2p",
              {{"devices", {{"results", {Result("g", gpu, "", kGpu)}}}}},
              json::array({{{"resource", "pods"}, {"name", "pod-a"}, {"uid", "pod-uid-a"}}}))
          .ok());
  PrepareClaim c{"default", (*created)["metadata"]["uid"].get<std::string>(), "pod-a-accel-x7k2p"};
  ClaimResult r = PrepareOne(c, kGpu);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].cdi_device_ids.back(),
            absl::StrCat("gpu.topodra.io/metadata=", c.uid, "_g"));
  const std::vector<json> stream = Stream(HostFile(c, "g", kGpu));
  ASSERT_EQ(stream.size(), 2u);
  EXPECT_EQ(stream[0]["podClaimName"], "accel");
  const json& attrs = stream[0]["requests"][0]["devices"][0]["attributes"];
  EXPECT_TRUE(attrs["resource.kubernetes.io/pciBusID"].contains("string")) << attrs.dump();
  EXPECT_EQ(attrs["gpu.topodra.io/type"], json({{"string", "gpu"}}));
  const json spec = json::parse(ReadFile(SpecFile(c, "g", kGpu)));
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/accel/g/"
            "gpu.topodra.io-metadata.json");
  // The metadata specs are read by Debian's CDI library like the claims' own.
  const std::string validator = BuildCdiValidator();
  ASSERT_FALSE(validator.empty());
  CommandResult v = RunCommand(validator + " " + dirs_.cdi);
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_THAT(v.output, HasSubstr("device: gpu.topodra.io/metadata=" + c.uid + "_g"));
  EXPECT_EQ(UnprepareOne(c, kGpu), "");
  EXPECT_FALSE(fs::exists(SpecFile(c, "g", kGpu)));
  EXPECT_FALSE(fs::exists(HostFile(c, "g", kGpu)));
}

TEST_F(DeviceMetadataTest, StartRestoresLostFilesAndRemovesLeftovers) {
  StartNode();
  PrepareClaim kept = CpuClaim("kept", "cpudevnuma000", "2");
  ClaimResult first = PrepareOne(kept);
  ASSERT_EQ(first.error, "");
  const std::string content = ReadFile(HostFile(kept, "cpus"));
  const std::string spec = ReadFile(SpecFile(kept, "cpus"));
  ASSERT_FALSE(content.empty());
  sim_.reset();
  daemon_.Kill();
  // A power loss took the files written without fsync; a crashed prepare left others behind,
  // and another kubelet's topodra shares the CDI directory.
  fs::remove(HostFile(kept, "cpus"));
  fs::remove(SpecFile(kept, "cpus"));
  const std::string orphan_dir = MetadataRoot() + "/default_gone/cpus";
  fs::create_directories(orphan_dir);
  PutFileInPlaceOf(orphan_dir + "/metadata.json", "{}\n");
  PutFileInPlaceOf(orphan_dir + "/.metadata.json.99-1.tmp", "{");
  const std::string orphan_spec = dirs_.cdi + "/dra.cpu_metadata_0000-gone_cpus.json";
  json orphan = json::parse(spec);
  orphan["devices"][0]["name"] = "0000-gone_cpus";
  orphan["devices"][0]["containerEdits"]["mounts"][0]["hostPath"] = orphan_dir + "/metadata.json";
  PutFileInPlaceOf(orphan_spec, orphan.dump());
  const std::string foreign_spec = dirs_.cdi + "/dra.cpu_metadata_1111-other_cpus.json";
  json foreign = orphan;
  foreign["devices"][0]["name"] = "1111-other_cpus";
  foreign["devices"][0]["containerEdits"]["mounts"][0]["hostPath"] =
      "/var/lib/other-kubelet/plugins/dra.cpu/dra-device-metadata/default_x/cpus/metadata.json";
  PutFileInPlaceOf(foreign_spec, foreign.dump());

  StartNode();
  EXPECT_EQ(ReadFile(HostFile(kept, "cpus")), content);
  EXPECT_EQ(json::parse(ReadFile(SpecFile(kept, "cpus"))), json::parse(spec));
  EXPECT_FALSE(fs::exists(MetadataRoot() + "/default_gone")) << daemon_.Log();
  EXPECT_FALSE(fs::exists(orphan_spec));
  EXPECT_TRUE(fs::exists(foreign_spec));  // another instance's: its host file is not ours
  EXPECT_THAT(daemon_.Log(), HasSubstr("restored device metadata " + HostFile(kept, "cpus")));

  // A repeated prepare answers as before and puts back a file removed meanwhile.
  fs::remove(HostFile(kept, "cpus"));
  ClaimResult again = PrepareOne(kept);
  EXPECT_EQ(again.error, "");
  EXPECT_EQ(again.devices[0].cdi_device_ids, first.devices[0].cdi_device_ids);
  EXPECT_EQ(ReadFile(HostFile(kept, "cpus")), content);
  EXPECT_EQ(UnprepareOne(kept), "");
  EXPECT_FALSE(fs::exists(HostFile(kept, "cpus")));
}

// --device-metadata-dir set on a node with prepared claims (the chart moving the host files to
// tmpfs): a claim prepared before keeps its files where its CDI spec mounts them from, restored
// and removed there; a crashed prepare's leftovers there still go; new claims go to the new
// directory. A second daemon given the same directory is refused.
TEST_F(DeviceMetadataTest, ClaimsPreparedBeforeTheDirectoryMovedKeepTheirFilesWhereTheyWere) {
  StartNode();
  PrepareClaim before = CpuClaim("before", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(before).error, "");
  const std::string content = ReadFile(HostFile(before, "cpus"));
  const std::string spec = ReadFile(SpecFile(before, "cpus"));
  ASSERT_FALSE(content.empty());
  sim_.reset();
  ASSERT_EQ(daemon_.Terminate(), 0);
  fs::remove(HostFile(before, "cpus"));
  const std::string orphan_dir = MetadataRoot() + "/default_gone/cpus";
  fs::create_directories(orphan_dir);
  PutFileInPlaceOf(orphan_dir + "/metadata.json", "{}\n");

  const std::string moved = dirs_.root + "/run/device-metadata";
  const std::string moved_root = moved + "/dra.cpu/dra-device-metadata";
  StartNode({"--device-metadata-dir", moved});
  EXPECT_EQ(ReadFile(HostFile(before, "cpus")), content) << daemon_.Log();
  // Each served driver's directory made by the daemon, closed to others as the kubelet's are.
  for (const char* driver : {"dra.cpu", "gpu.topodra.io"}) {
    EXPECT_EQ(fs::status(moved + "/" + driver).permissions(), fs::perms(0750)) << driver;
  }
  EXPECT_EQ(ReadFile(SpecFile(before, "cpus")), spec);
  EXPECT_FALSE(fs::exists(MetadataRoot() + "/default_gone")) << daemon_.Log();

  PrepareClaim after = CpuClaim("after", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(after).error, "");
  const std::string after_file = moved_root + "/default_after/cpus/metadata.json";
  EXPECT_TRUE(fs::exists(after_file));
  EXPECT_FALSE(fs::exists(MetadataRoot() + "/default_after"));
  EXPECT_EQ(json::parse(ReadFile(
                SpecFile(after, "cpus")))["devices"][0]["containerEdits"]["mounts"][0]["hostPath"],
            after_file);
  EXPECT_EQ(UnprepareOne(before), "");
  EXPECT_FALSE(fs::exists(MetadataRoot() + "/default_before"));
  EXPECT_FALSE(fs::exists(SpecFile(before, "cpus")));
  EXPECT_EQ(UnprepareOne(after), "");
  EXPECT_FALSE(fs::exists(moved_root + "/default_after"));
  EXPECT_FALSE(fs::exists(SpecFile(after, "cpus")));

  const DaemonDirs other = DaemonDirs::Make();
  Daemon second;
  second.Start(other, {"--kubeconfig", kubeconfig_, "--node-name", kNode, "--topology-file",
                       FixturePath(kMachine), "--device-metadata-dir", moved});
  EXPECT_EQ(second.WaitExit(), 1);
  EXPECT_THAT(second.Log(), HasSubstr("another topodra is running on this node"));
  EXPECT_THAT(second.Log(), HasSubstr(moved + "/dra.cpu/topodra.lock"));
  std::error_code ec;
  fs::remove_all(other.root, ec);
  // The first one still serves.
  EXPECT_EQ(PrepareOne(CpuClaim("still-served", "cpudevnuma000", "2")).error, "");
}

// The kubelet's plugin directory given as --device-metadata-dir, however spelled or reached (a
// link to the kubelet root), is the default: the same files, and no second lock on the same file
// (which would refuse the daemon itself). A restart keeps them: the start-up check must not take
// them, found under one spelling, for strays of the other.
TEST_F(DeviceMetadataTest, TheKubeletsPluginDirectoryGivenIsTheDefault) {
  const std::string link = dirs_.root + "/kubelet-link";
  fs::create_directory_symlink(dirs_.kubelet_root, link);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"given", dirs_.kubelet_root + "/"}, {"linked", link}};
  for (const auto& [name, kubelet_root] : cases) {
    SCOPED_TRACE(name);
    const std::vector<std::string> flags = {"--kubelet-root-dir", kubelet_root,
                                            "--device-metadata-dir",
                                            dirs_.kubelet_root + "/plugins"};
    StartNode(flags);
    PrepareClaim c = CpuClaim(name, "cpudevnuma000", "2");
    ASSERT_EQ(PrepareOne(c).error, "");
    const std::string content = ReadFile(HostFile(c, "cpus"));
    ASSERT_FALSE(content.empty());
    sim_.reset();
    ASSERT_EQ(daemon_.Terminate(), 0);

    StartNode(flags);
    EXPECT_EQ(ReadFile(HostFile(c, "cpus")), content) << daemon_.Log();
    EXPECT_THAT(daemon_.Log(), Not(HasSubstr("removed device metadata")));
    EXPECT_EQ(UnprepareOne(c), "");
    EXPECT_FALSE(fs::exists(MetadataRoot() + "/default_" + name));
    sim_.reset();
    ASSERT_EQ(daemon_.Terminate(), 0);
  }
}

TEST_F(DeviceMetadataTest, OffWritesNothingAndCleansUpWhatAnEarlierRunLeft) {
  StartNode();
  PrepareClaim c = CpuClaim("was-on", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(c).error, "");
  ASSERT_EQ(UnprepareOne(c), "");
  // A file of a claim no longer prepared (a crash between removal and journal, say).
  const std::string left = MetadataRoot() + "/default_was-on/cpus";
  fs::create_directories(left);
  PutFileInPlaceOf(left + "/metadata.json", "{}\n");
  sim_.reset();
  EXPECT_EQ(daemon_.Terminate(), 0);

  StartNode({"--device-metadata", "off"});
  EXPECT_FALSE(fs::exists(MetadataRoot() + "/default_was-on"));
  PrepareClaim off = CpuClaim("off", "cpudevnuma000", "2");
  ClaimResult r = PrepareOne(off);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.devices[0].cdi_device_ids.size(), 1u);
  EXPECT_FALSE(fs::exists(SpecFile(off, "cpus")));
  EXPECT_FALSE(fs::exists(HostFile(off, "cpus")));
}

}  // namespace
}  // namespace topodra::testing
