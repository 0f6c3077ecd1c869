// The device metadata (KEP-5304) as pure values: paths, names, the JSON stream, the attribute
// limits, and what PlanClaim adds to the kubelet's answer and the stored allocation.
#include "driver/prepare/device_metadata.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cdi/spec_store.h"
#include "common/file_io.h"
#include "driver/state/compact_json.h"
#include "driver/state/state.h"

#include "test/prepare/prepare_testing.h"

namespace topodra::prepare {
namespace {

using json = nlohmann::json;
using testing::Cpus;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Load;

constexpr char kUid[] = "6f1d7c2e-9a4b-4c1e-8f3a-2b5d9e0c7a11";
constexpr char kRoot[] = "/var/lib/kubelet/plugins/dra.cpu/dra-device-metadata";

// The objects of a JSON stream, in order.
std::vector<json> Objects(const std::string& stream) {
  std::vector<json> out;
  std::istringstream in(stream);
  while (in >> std::ws, !in.eof()) {
    json j;
    in >> j;
    out.push_back(j);
  }
  return out;
}

TEST(DeviceMetadataPaths, AreTheKubeletPluginLibrarysOnes) {
  struct Case {
    std::string got;
    std::string want;
  };
  const std::vector<Case> cases = {
      {MetadataClaimDir(kRoot, "ns", "claim"), std::string(kRoot) + "/ns_claim"},
      {MetadataHostPath(kRoot, "ns", "claim", "cpus"),
       std::string(kRoot) + "/ns_claim/cpus/metadata.json"},
      {MetadataContainerPath("dra.cpu", "claim", "", "cpus"),
       "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/claim/cpus/"
       "dra.cpu-metadata.json"},
      {MetadataContainerPath("gpu.topodra.io", "pod-x-gpu-abcde", "gpu", "g"),
       "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/g/"
       "gpu.topodra.io-metadata.json"},
      {MetadataCdiKind("dra.cpu"), "dra.cpu/metadata"},
      {MetadataCdiFileName("dra.cpu", kUid, "cpus"),
       std::string("dra.cpu_metadata_") + kUid + "_cpus.json"},
  };
  for (const Case& c : cases) EXPECT_EQ(c.got, c.want);
  EXPECT_TRUE(IsMetadataCdiFileOf("dra.cpu", MetadataCdiFileName("dra.cpu", kUid, "cpus")));
  EXPECT_FALSE(IsMetadataCdiFileOf("gpu.topodra.io", MetadataCdiFileName("dra.cpu", kUid, "a")));
  EXPECT_FALSE(IsMetadataCdiFileOf("dra.cpu", std::string("dra.cpu-claim_") + kUid + ".json"));
  EXPECT_FALSE(IsMetadataCdiFileOf("dra.cpu", "dra.cpu_metadata_.json"));
}

// The root a stored host file is under: how the file check finds a claim prepared under an
// earlier --device-metadata-dir. Only the shape prepare writes is recognised.
TEST(DeviceMetadataPaths, TheRootOfAHostFileIsFoundOnlyInTheShapePrepareWrites) {
  const std::string tmpfs = "/var/run/topodra/device-metadata/dra.cpu/dra-device-metadata";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {MetadataHostPath(kRoot, "ns", "claim", "cpus"), kRoot},
      {MetadataHostPath(tmpfs, "ns", "claim", "cpus"), tmpfs},
      {"/dra.cpu/dra-device-metadata/ns_c/cpus/metadata.json", "/dra.cpu/dra-device-metadata"},
      {std::string(kRoot) + "/ns_claim/cpus/other.json", ""},  // not a metadata file
      {std::string(kRoot) + "/ns_claim/metadata.json", ""},    // no request directory
      {std::string(kRoot) + "/ns_claim//metadata.json", ""},   // an empty one
      {std::string(kRoot) + "//cpus/metadata.json", ""},       // an empty claim directory
      {"/var/lib/kubelet/plugins/gpu.topodra.io/dra-device-metadata/ns_c/g/metadata.json", ""},
      {"/var/lib/kubelet/plugins/dra.cpu/other/ns_c/cpus/metadata.json", ""},
      {"var/lib/kubelet/plugins/dra.cpu/dra-device-metadata/ns_c/cpus/metadata.json", ""},
      {"/ns_c/cpus/metadata.json", ""},
      {"metadata.json", ""},
      {"", ""},
  };
  for (const auto& [path, want] : cases) EXPECT_EQ(MetadataRootOf(path, "dra.cpu"), want) << path;
}

TEST(DeviceMetadataAttributes, CpusetFitsOrIsCutAtCommas) {
  const topology::Topology& topo = Load(testing::k192);  // NUMA node n: 8n..8n+7, 192+8n..
  struct Case {
    std::string cpus;
    std::vector<MetadataAttribute> want;
  };
  // Every other CPU of 0-255: 128 single CPUs, about 400 bytes as a list.
  std::string scattered;
  for (int cpu = 0; cpu < 256; cpu += 2) absl::StrAppend(&scattered, cpu == 0 ? "" : ",", cpu);
  const std::vector<Case> cases = {
      {"8-11", {{kCpusetAttribute, {{"string", "8-11"}}}, {kNumaNodesAttribute, {{"ints", {1}}}}}},
      {"0-3,200-201",
       {{kCpusetAttribute, {{"string", "0-3,200-201"}}},
        {kNumaNodesAttribute, {{"ints", {0, 1}}}}}},
  };
  for (const Case& c : cases) EXPECT_EQ(CpuRequestAttributes(topo, Cpus(c.cpus)), c.want) << c.cpus;

  const std::vector<MetadataAttribute> long_set = CpuRequestAttributes(topo, Cpus(scattered));
  ASSERT_EQ(long_set.size(), 2u);
  EXPECT_EQ(long_set[0].first, kCpusetPartsAttribute);
  std::vector<std::string> pieces;
  for (const json& p : long_set[0].second["strings"]) {
    EXPECT_LE(p.get<std::string>().size(), kMaxMetadataString);
    EXPECT_NE(p.get<std::string>().back(), ',');
    pieces.push_back(p.get<std::string>());
  }
  EXPECT_GT(pieces.size(), 1u);
  EXPECT_EQ(absl::StrJoin(pieces, ","), scattered);   // joined, they are the list again
  EXPECT_EQ(long_set[1].second["ints"].size(), 24u);  // 0-191 alone spans all 24 NUMA nodes
}

TEST(DeviceMetadataAttributes, DecidedFirstQualifiedAndWithinTheLimits) {
  struct Case {
    std::string name;
    std::vector<MetadataAttribute> decided;
    json published;
    json want;
    std::vector<std::string> dropped;
  };
  json many = json::object();  // 40 published attributes a00..a39
  for (int i = 0; i < 40; ++i) many[absl::StrFormat("a%02d", i)] = {{"int", i}};
  json want_many = {{"dra.cpu/cpuset", {{"string", "0-3"}}}};
  std::vector<std::string> dropped_many;
  for (int i = 0; i < 40; ++i) {
    const std::string name = absl::StrFormat("dra.cpu/a%02d", i);
    if (i < 31) {
      want_many[name] = {{"int", i}};
    } else {
      dropped_many.push_back(name);
    }
  }
  const std::vector<Case> cases = {
      {"unqualified names get the driver's domain",
       {{kCpusetAttribute, {{"string", "0-3"}}}},
       {{"numCPUs", {{"int", 4}}}, {"resource.kubernetes.io/numaNode", {{"int", 0}}}},
       {{"dra.cpu/cpuset", {{"string", "0-3"}}},
        {"dra.cpu/numCPUs", {{"int", 4}}},
        {"resource.kubernetes.io/numaNode", {{"int", 0}}}},
       {}},
      {"a decided attribute wins over the published one of the same name",
       {{kPciBusIdAttribute, {{"string", "0000:3b:00.0"}}}},
       {{"resource.kubernetes.io/pciBusID", {{"string", "stale"}}}},
       {{"resource.kubernetes.io/pciBusID", {{"string", "0000:3b:00.0"}}}},
       {}},
      {"at most 32 attributes, decided kept",
       {{kCpusetAttribute, {{"string", "0-3"}}}},
       many,
       want_many,
       dropped_many},
      {"at most 48 values counting list elements",
       {{"dra.cpu/big", {{"ints", json(std::vector<int>(47, 1))}}}},
       {{"x", {{"ints", {1, 2}}}}, {"y", {{"bool", true}}}},
       {{"dra.cpu/big", {{"ints", json(std::vector<int>(47, 1))}}},
        {"dra.cpu/y", {{"bool", true}}}},
       {"dra.cpu/x"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> dropped;
    EXPECT_EQ(MetadataAttributes("dra.cpu", c.decided, c.published, &dropped), c.want) << c.name;
    EXPECT_EQ(dropped, c.dropped) << c.name;
  }
}

claims::Claim TestClaim(const std::string& pod_claim_name = "") {
  claims::Claim c;
  c.uid = kUid;
  c.namespace_name = "team";
  c.name = "train";
  c.pod_claim_name = pod_claim_name;
  return c;
}

TEST(PlanDeviceMetadata, OneFilePerBaseRequestWithBothVersions) {
  std::vector<MetadataDevice> devices = {
      {"cpus",
       "node1",
       "cpudevnuma000",
       {{kCpusetAttribute, {{"string", "0-3"}}}},
       {{"dra.cpu/numCPUs", {{"int", 16}}}}},
      {"b/small", "node1", "cpudevnuma001", {{kCpusetAttribute, {{"string", "8-9"}}}}, nullptr},
  };
  absl::StatusOr<DeviceMetadataPlan> plan =
      PlanDeviceMetadata(TestClaim("tmpl"), "dra.cpu", kRoot, devices);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->notes.empty());
  ASSERT_EQ(plan->files.size(), 2u);
  const MetadataFile& f = plan->files[0];
  EXPECT_EQ(f.request, "cpus");
  EXPECT_EQ(f.host_path, std::string(kRoot) + "/team_train/cpus/metadata.json");
  EXPECT_EQ(f.cdi_file, std::string("dra.cpu_metadata_") + kUid + "_cpus.json");
  EXPECT_EQ(f.cdi_id, std::string("dra.cpu/metadata=") + kUid + "_cpus");
  EXPECT_EQ(f.cdi_spec.cdi_version, "0.5.0");
  EXPECT_EQ(f.cdi_spec.kind, "dra.cpu/metadata");
  ASSERT_EQ(f.cdi_spec.devices.size(), 1u);
  EXPECT_EQ(f.cdi_spec.devices[0].name, std::string(kUid) + "_cpus");
  EXPECT_THAT(f.cdi_spec.devices[0].container_edits.mounts,
              ElementsAre(cdi::Mount{f.host_path,
                                     "/var/run/kubernetes.io/dra-device-attributes/"
                                     "resourceclaimtemplates/tmpl/cpus/dra.cpu-metadata.json",
                                     {"ro", "bind"},
                                     ""}));
  // Newest version first, each object pretty-printed and ended by a newline.
  EXPECT_EQ(f.content.back(), '\n');
  EXPECT_THAT(f.content, HasSubstr("}\n{"));
  const std::vector<json> objects = Objects(f.content);
  ASSERT_EQ(objects.size(), 2u);
  const json want = {
      {"kind", "DeviceMetadata"},
      {"apiVersion", "metadata.resource.k8s.io/v1beta1"},
      {"metadata", {{"name", "train"}, {"namespace", "team"}, {"uid", kUid}, {"generation", 1}}},
      {"podClaimName", "tmpl"},
      {"requests",
       {{{"name", "cpus"},
         {"devices",
          {{{"driver", "dra.cpu"},
            {"pool", "node1"},
            {"name", "cpudevnuma000"},
            {"attributes",
             {{"dra.cpu/cpuset", {{"string", "0-3"}}}, {"dra.cpu/numCPUs", {{"int", 16}}}}}}}}}}}};
  EXPECT_EQ(objects[0], want);
  json alpha = want;
  alpha["apiVersion"] = "metadata.resource.k8s.io/v1alpha1";
  EXPECT_EQ(objects[1], alpha);
  EXPECT_TRUE(f.content.starts_with("{\n  \"kind\": \"DeviceMetadata\",\n  \"apiVersion\""));
  // The subrequest's file is under its base request; its name inside keeps the subrequest.
  EXPECT_EQ(plan->files[1].host_path, std::string(kRoot) + "/team_train/b/metadata.json");
  EXPECT_EQ(Objects(plan->files[1].content)[0]["requests"][0]["name"], "b/small");
  // A claim the pod names itself has no podClaimName and mounts under resourceclaims/.
  absl::StatusOr<DeviceMetadataPlan> named =
      PlanDeviceMetadata(TestClaim(), "dra.cpu", kRoot, {devices[0]});
  ASSERT_TRUE(named.ok());
  EXPECT_FALSE(Objects(named->files[0].content)[0].contains("podClaimName"));
  EXPECT_THAT(named->files[0].cdi_spec.devices[0].container_edits.mounts[0].container_path,
              HasSubstr("/resourceclaims/train/cpus/"));
}

// The text as the plain way prints it: each version's document built whole, its attributes
// taken through a dump and a parse (which sorts the keys), pretty-printed.
std::string PrintedInFull(const claims::Claim& claim, const std::string& request,
                          const std::vector<MetadataDevice>& devices) {
  std::string out;
  for (const char* version : {kMetadataApiV1beta1, kMetadataApiV1alpha1}) {
    nlohmann::ordered_json doc;
    doc["kind"] = "DeviceMetadata";
    doc["apiVersion"] = version;
    doc["metadata"] = {{"name", claim.name},
                       {"namespace", claim.namespace_name},
                       {"uid", claim.uid},
                       {"generation", 1}};
    if (!claim.pod_claim_name.empty()) doc["podClaimName"] = claim.pod_claim_name;
    // Each request name's devices in order of its first device.
    nlohmann::ordered_json requests = nlohmann::ordered_json::array();
    for (const MetadataDevice& d : devices) {
      auto r = std::find_if(requests.begin(), requests.end(), [&](const nlohmann::ordered_json& x) {
        return x["name"] == d.request;
      });
      if (r == requests.end()) {
        requests.push_back({{"name", d.request}, {"devices", nlohmann::ordered_json::array()}});
        r = requests.end() - 1;
      }
      nlohmann::ordered_json& list = (*r)["devices"];
      nlohmann::ordered_json device;
      device["driver"] = "dra.cpu";
      device["pool"] = d.pool;
      device["name"] = d.name;
      const json attributes = MetadataAttributes("dra.cpu", d.decided, d.published, nullptr);
      if (!attributes.empty()) {
        device["attributes"] = nlohmann::ordered_json::parse(attributes.dump());
      }
      list.push_back(device);
    }
    // `request` is the base of every request name in the file.
    EXPECT_TRUE(absl::StartsWith(requests[0]["name"].get<std::string>(), request));
    doc["requests"] = requests;
    absl::StrAppend(&out, doc.dump(2, ' ', false, nlohmann::detail::error_handler_t::replace),
                    "\n");
  }
  return out;
}

// The file's text as start restores it: its stored form through the state's compact text
// (state::JsonText, as a record keeps it), parsed back, and printed from the document.
std::string ContentFromState(const MetadataFile& f) {
  EXPECT_FALSE(f.document.is_null());
  const state::JsonText kept(MetadataFilesToJson({f}));
  absl::StatusOr<std::vector<MetadataFile>> back = MetadataFilesFromJson(kept.Parse());
  EXPECT_TRUE(back.ok()) << back.status();
  if (!back.ok() || back->size() != 1) return "";
  EXPECT_FALSE(kept.text().find("\"content\"") != std::string::npos) << kept.text();
  return (*back)[0].content;
}

TEST(PlanDeviceMetadata, TheTextIsBothDocumentsAsPrintedInFull) {
  const json published = {
      {"numCPUs", {{"int", 16}}},
      {"zeta", {{"bool", true}}},
      {"alpha", {{"string", "quote \" backslash \\ tab \t é \u00ff"}}},
      {"dra.cpu/smt", {{"bools", {true, false}}}},
      {"version", {{"version", "1.2.3"}}},
      {"big", {{"int", -9007199254740993}}},
      {"frac", {{"float", 0.5}}},
      {"none", nullptr},
      {"nested", {{"ints", {1, 2, 3}}, {"extra", json::object()}}},
  };
  struct Case {
    const char* name;
    std::string pod_claim_name;
    std::vector<MetadataDevice> devices;
  };
  const std::vector<Case> cases = {
      {"no attributes", "", {{"cpus", "node1", "cpudevnuma000", {}, nullptr}}},
      {"decided only",
       "tmpl",
       {{"cpus", "node1", "cpudevnuma000", {{kCpusetAttribute, {{"string", "0-3"}}}}, nullptr}}},
      {"decided and published, two devices",
       "",
       {{"cpus",
         "node1",
         "cpudevnuma000",
         {{kCpusetAttribute, {{"string", "0-3"}}}, {kNumaNodesAttribute, {{"ints", {0, 1}}}}},
         published},
        {"cpus", "node1", "cpudevnuma001", {}, published}}},
      {"subrequests, devices of odd names",
       "",
       {{"cpus/a", "node \"1\"", "dev\\0", {{kCpusetAttribute, {{"string", "0-3"}}}}, published},
        {"cpus/b", "node1", "bad \xff name", {}, nullptr},
        {"cpus/a", "node1", "dev1", {}, {{"deep", {{"x", {{"y", {1, {{"z", "w"}}}}}}}}}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<DeviceMetadataPlan> plan =
        PlanDeviceMetadata(TestClaim(c.pod_claim_name), "dra.cpu", kRoot, c.devices);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->files.size(), 1u);
    EXPECT_EQ(plan->files[0].content,
              PrintedInFull(TestClaim(c.pod_claim_name), "cpus", c.devices));
    EXPECT_EQ(ContentFromState(plan->files[0]), plan->files[0].content);
  }
  // A published string that is not UTF-8 is printed with U+FFFD in both documents (printing it
  // through a dump of its own used to throw, failing the claim).
  absl::StatusOr<DeviceMetadataPlan> bad = PlanDeviceMetadata(
      TestClaim(), "dra.cpu", kRoot,
      {{"cpus", "node1", "cpudevnuma000", {}, {{"model", {{"string", "bad \xff end"}}}}}});
  ASSERT_TRUE(bad.ok()) << bad.status();
  const std::vector<json> objects = Objects(bad->files[0].content);
  ASSERT_EQ(objects.size(), 2u);
  for (const json& o : objects) {
    EXPECT_EQ(o["requests"][0]["devices"][0]["attributes"]["dra.cpu/model"]["string"],
              "bad \xef\xbf\xbd end");
  }
  // The stored document keeps the replacement, so start prints the same text.
  EXPECT_EQ(ContentFromState(bad->files[0]), bad->files[0].content);
}

// A random JSON value of the kinds a published attribute may carry (and some it may not).
json RandomValue(std::mt19937& rng, int depth) {
  auto text = [&] {
    static const std::vector<std::string> pieces = {"a",        "Z",  " ",    "\"",       "\\",
                                                    "\t",       "\n", "\x01", "\xc3\xa9", "\xff",
                                                    "\xe2\x82", "/",  "{",    "0"};
    std::string out;
    for (int n = rng() % 6; n > 0; --n) out += pieces[rng() % pieces.size()];
    return out;
  };
  switch (rng() % (depth > 2 ? 6 : 8)) {
    case 0:
      return json(static_cast<int64_t>(rng()) - static_cast<int64_t>(rng()) * 4096);
    case 1:
      return json(rng() % 2 == 0);
    case 2:
      return json(nullptr);
    case 3:
      return json(static_cast<double>(static_cast<int>(rng() % 2001) - 1000) / 8);
    case 4:
      return json(std::numeric_limits<uint64_t>::max() - rng() % 10);
    case 5:
      return json(text());
    case 6: {
      json a = json::array();
      for (int n = rng() % 4; n > 0; --n) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int n = rng() % 4; n > 0; --n) o[text()] = RandomValue(rng, depth + 1);
      return o;
    }
  }
}

// Against the plain printer, over random claims: the text printed from the stored document is
// what prepare wrote, and both are PrintedInFull's. (Invalid UTF-8 only in names: PrintedInFull
// takes published attributes through a strict dump.)
TEST(PlanDeviceMetadata, TheStoredDocumentPrintsTheSameTextForRandomClaims) {
  std::mt19937 rng(19);
  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE(round);
    const std::string pod_claim_name = rng() % 2 == 0 ? "" : "tmpl";
    std::vector<MetadataDevice> devices;
    for (int n = 1 + rng() % 4; n > 0; --n) {
      MetadataDevice d;
      d.request = rng() % 2 == 0 ? "cpus" : absl::StrCat("cpus/s", rng() % 3);
      d.pool = rng() % 3 == 0 ? "pool \"\xff\"" : "node1";
      d.name = absl::StrCat("dev", rng() % 100, rng() % 4 == 0 ? "\\\xc3" : "");
      if (rng() % 2 == 0) d.decided.emplace_back(kCpusetAttribute, json{{"string", "0-3"}});
      if (rng() % 3 != 0) {
        d.published = json::object();
        for (int k = rng() % 40; k > 0; --k) {
          std::string value_text =
              RandomValue(rng, 0).dump(-1, ' ', false, json::error_handler_t::replace);
          d.published[absl::StrCat(rng() % 2 == 0 ? "x/" : "", "attr", rng() % 50)] =
              json::parse(value_text);
        }
      }
      devices.push_back(std::move(d));
    }
    absl::StatusOr<DeviceMetadataPlan> plan =
        PlanDeviceMetadata(TestClaim(pod_claim_name), "dra.cpu", kRoot, devices);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->files.size(), 1u);
    EXPECT_EQ(plan->files[0].content, PrintedInFull(TestClaim(pod_claim_name), "cpus", devices));
    EXPECT_EQ(ContentFromState(plan->files[0]), plan->files[0].content);
  }
}

TEST(PlanDeviceMetadata, OnlyADocumentOfTheWrittenShapeIsPrinted) {
  absl::StatusOr<DeviceMetadataPlan> plan = PlanDeviceMetadata(
      TestClaim("tmpl"), "dra.cpu", kRoot,
      {{"cpus", "node1", "cpudevnuma000", {{kCpusetAttribute, {{"string", "0-3"}}}}, nullptr}});
  ASSERT_TRUE(plan.ok());
  const json doc = plan->files[0].document;
  ASSERT_EQ(MetadataContentOf(doc), plan->files[0].content);
  std::vector<std::pair<std::string, json>> damaged;
  auto damage = [&](const std::string& what, const std::function<void(json&)>& change) {
    json d = doc;
    change(d);
    damaged.emplace_back(what, d);
  };
  damage("alpha", [](json& d) { d["apiVersion"] = kMetadataApiV1alpha1; });
  damage("kind", [](json& d) { d["kind"] = "Other"; });
  damage("extra member", [](json& d) { d["status"] = json::object(); });
  damage("no requests", [](json& d) { d.erase("requests"); });
  damage("podClaimName a number", [](json& d) { d["podClaimName"] = 1; });
  damage("generation 2", [](json& d) { d["metadata"]["generation"] = 2; });
  damage("uid missing", [](json& d) { d["metadata"].erase("uid"); });
  damage("request extra", [](json& d) { d["requests"][0]["x"] = 1; });
  damage("devices not a list", [](json& d) { d["requests"][0]["devices"] = json::object(); });
  damage("device name a number", [](json& d) { d["requests"][0]["devices"][0]["name"] = 3; });
  damage("attributes a list",
         [](json& d) { d["requests"][0]["devices"][0]["attributes"] = json::array(); });
  damage("not an object", [](json& d) { d = json::array(); });
  for (const auto& [what, d] : damaged) {
    EXPECT_EQ(MetadataContentOf(d), std::nullopt) << what;
  }
}

TEST(PlanDeviceMetadata, NamesAPathCannotBeBuiltFromAreRefusedOrSkipped) {
  const MetadataDevice d{"cpus", "node1", "cpudevnuma000", {}, nullptr};
  struct Case {
    claims::Claim claim;
    MetadataDevice device;
    std::string error;  // "" for success
    std::string note;
  };
  claims::Claim long_name = TestClaim();
  long_name.name = std::string(251, 'a');  // "team_" + 251 bytes: one more than NAME_MAX
  MetadataDevice traversal = d;
  traversal.request = "../../etc";
  claims::Claim dotted = TestClaim();
  dotted.name = "../../../etc";
  const std::vector<Case> cases = {
      {dotted, d, "name \"../../../etc\" is not a DNS-1123 subdomain", ""},
      {TestClaim("../x"), d, "annotation resource.kubernetes.io/pod-claim-name \"../x\"", ""},
      {TestClaim(), traversal, "request \"..\" is not a DNS-1123 label", ""},
      {long_name, d, "", "no device metadata: the directory name"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<DeviceMetadataPlan> plan =
        PlanDeviceMetadata(c.claim, "dra.cpu", kRoot, {c.device});
    if (!c.error.empty()) {
      EXPECT_THAT(plan.status().message(), HasSubstr(c.error));
      EXPECT_THAT(plan.status().message(), HasSubstr("claim team/"));
      EXPECT_TRUE(absl::IsInvalidArgument(plan.status()));
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->files.empty());
    ASSERT_EQ(plan->notes.size(), 1u);
    EXPECT_THAT(plan->notes[0], HasSubstr(c.note));
  }
}

TEST(PlanDeviceMetadata, StoredFormRoundTripsAndRefusesDamage) {
  absl::StatusOr<DeviceMetadataPlan> plan = PlanDeviceMetadata(
      TestClaim(), "dra.cpu", kRoot, {{"cpus", "node1", "cpudevnuma000", {}, nullptr}});
  ASSERT_TRUE(plan.ok());
  const json stored = MetadataFilesToJson(plan->files);
  absl::StatusOr<std::vector<MetadataFile>> back =
      MetadataFilesFromJson(json::parse(stored.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, plan->files);
  for (const auto& [damage, want] : std::vector<std::pair<json, std::string>>{
           {json::object(), "not a list"},
           {json::array({1}), "[0] is not an object"},
           {json::array({json::object()}), "[0].request is not a string"}}) {
    EXPECT_THAT(MetadataFilesFromJson(damage).status().message(), HasSubstr(want));
  }
  json relative = stored;
  relative[0]["hostPath"] = "x/metadata.json";
  EXPECT_THAT(MetadataFilesFromJson(relative).status().message(), HasSubstr("absolute"));
  // Since state version 4 the file's object is stored, not its text.
  EXPECT_FALSE(stored[0].contains("content"));
  EXPECT_EQ(stored[0]["document"], plan->files[0].document);
  json both = stored;
  both[0]["content"] = plan->files[0].content;
  EXPECT_THAT(MetadataFilesFromJson(both).status().message(),
              HasSubstr("[0].holds neither or both"));
  json bad_document = stored;
  bad_document[0]["document"]["kind"] = "Other";
  EXPECT_THAT(MetadataFilesFromJson(bad_document).status().message(),
              HasSubstr("[0].document is not a metadata.resource.k8s.io/v1beta1 DeviceMetadata"));
  // A record of an older state keeps its text as it was (whatever it is), and is written back so.
  json old = stored;
  old[0].erase("document");
  old[0]["content"] = "as an older topodra wrote it\n";
  absl::StatusOr<std::vector<MetadataFile>> kept = MetadataFilesFromJson(old);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ((*kept)[0].content, "as an older topodra wrote it\n");
  EXPECT_TRUE((*kept)[0].document.is_null());
  EXPECT_EQ(MetadataFilesToJson(*kept), old);
  old[0]["content"] = 3;
  EXPECT_THAT(MetadataFilesFromJson(old).status().message(), HasSubstr("[0].content is not a"));
}

// Each metadata CDI text of `plan` is byte for byte what SpecStore::Write writes for its spec.
void ExpectWrittenAsSpecStoreWrites(const Plan& plan) {
  ASSERT_EQ(plan.metadata_cdi_texts.size(), plan.metadata.size());
  char tmpl[] = "/tmp/metadata-cdi-text-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  // Removed however the function returns (an ASSERT returns early).
  struct RemovedAtEnd {
    std::string dir;
    ~RemovedAtEnd() { std::filesystem::remove_all(dir); }
  } temp{tmpl};
  const cdi::SpecStore store(tmpl);
  for (size_t i = 0; i < plan.metadata.size(); ++i) {
    const MetadataFile& f = plan.metadata[i];
    ASSERT_TRUE(store.Write(f.cdi_file, f.cdi_spec, false, cdi::VersionPolicy::kAtLeastGiven).ok());
    absl::StatusOr<std::string> written =
        files::ReadFileBounded(store.PathOf(f.cdi_file), cdi::kMaxSpecBytes);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(plan.metadata_cdi_texts[i], *written) << f.cdi_file;
  }
}

// The stored "cdi" as the planner prints it, against the tree it stands for printed whole.
void ExpectStoredCdiIsTheTreesPrint(const Plan& plan) {
  json tree = {{"file", plan.cdi_file}, {"spec", cdi::ToJson(plan.cdi_spec)}};
  if (!plan.metadata.empty()) tree["metadata"] = MetadataFilesToJson(plan.metadata);
  EXPECT_EQ(plan.allocation.cdi.text(), state::CompactJson(tree));
}

// Through PlanClaim as the daemon's driver setups make it: the CDI ids of the answer, the stored
// allocation, and nothing at all when the flag is off.
TEST(PlanClaimDeviceMetadata, CpuAndGpuClaimsGetAFileAndACdiIdPerRequest) {
  const topology::Topology& topo = Load(testing::k192);
  DriverSetup setup = testing::CpuSetup(topo, testing::Mode::kNuma);
  ASSERT_EQ(setup.metadata_root, "");
  const json claim_json = testing::ClaimJson(
      kUid, "team", "train",
      {testing::Result("cpus", "cpudevnuma001", "4"), testing::Result("cpus", "cpudevnuma002", "2"),
       testing::Result("other", "cpudevnuma003", "2")});
  const claims::Claim claim = testing::Parse(claim_json);
  absl::StatusOr<Plan> off = PlanClaim(claim, setup, topo, state::State());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->metadata.empty());
  EXPECT_EQ(off->devices[0].cdi_device_ids.size(), 1u);
  EXPECT_FALSE(off->allocation.cdi.Parse().contains("metadata"));

  node::InventoryOptions o = testing::Options(testing::Mode::kNuma);
  o.plugins_dir = "/var/lib/kubelet/plugins";
  o.device_metadata = true;
  setup = node::Inventory::Build(o, topo, {}).CpuSetup();
  EXPECT_EQ(setup.metadata_root, kRoot);
  EXPECT_TRUE(setup.metadata_former_roots.empty());
  absl::StatusOr<Plan> on = PlanClaim(claim, setup, topo, state::State());
  ASSERT_TRUE(on.ok()) << on.status();
  ASSERT_EQ(on->metadata.size(), 2u);
  ASSERT_EQ(on->devices.size(), 3u);
  const std::string hw0 = std::string("dra.cpu/claim=") + kUid + "-cpudevnuma001";
  EXPECT_THAT(on->devices[0].cdi_device_ids,
              ElementsAre(hw0, std::string("dra.cpu/metadata=") + kUid + "_cpus"));
  EXPECT_EQ(on->devices[1].cdi_device_ids.size(), 1u);  // only the first device of a request
  EXPECT_THAT(on->devices[2].cdi_device_ids[1], std::string("dra.cpu/metadata=") + kUid + "_other");
  const json doc = Objects(on->metadata[0].content)[0];
  const json& first = doc["requests"][0]["devices"][0]["attributes"];
  const CpuSet cpus = Cpus(first["dra.cpu/cpuset"]["string"]);
  EXPECT_EQ(cpus.Size(), 6);  // the request's CPUs, on each of its devices
  EXPECT_EQ(doc["requests"][0]["devices"][1]["attributes"]["dra.cpu/cpuset"],
            first["dra.cpu/cpuset"]);
  EXPECT_EQ(first["dra.cpu/allocatedNumCPUs"], json({{"int", 4}}));
  EXPECT_EQ(doc["requests"][0]["devices"][1]["attributes"]["dra.cpu/allocatedNumCPUs"],
            json({{"int", 2}}));
  EXPECT_EQ(first["dra.cpu/numaNodes"], json({{"ints", {1, 2}}}));
  EXPECT_EQ(first["resource.kubernetes.io/numaNode"], json({{"int", 1}}));  // as published
  EXPECT_EQ(first["dra.cpu/numCPUs"], json({{"int", 16}}));
  // The journal keeps what start restores: each document beside its file.
  absl::StatusOr<std::vector<MetadataFile>> stored =
      MetadataFilesFromJson(on->allocation.cdi.Parse()["metadata"]);
  ASSERT_TRUE(stored.ok()) << stored.status();
  for (const MetadataFile& f : *stored) EXPECT_TRUE(f.document.is_object());
  EXPECT_EQ(*stored, on->metadata);
  // Printed directly, byte for byte the tree's compact print (the tree the planner built before).
  ExpectStoredCdiIsTheTreesPrint(*on);
  ExpectStoredCdiIsTheTreesPrint(*off);
  // The CDI specs as printed by the planner: what SpecStore::Write would have written.
  ExpectWrittenAsSpecStoreWrites(*on);
  EXPECT_EQ(DevicesFromJson(on->allocation.answer)->at(0).cdi_device_ids,
            on->devices[0].cdi_device_ids);

  const topology::Topology& dgx = Load(testing::kDgx);
  node::InventoryOptions g = testing::Options(testing::Mode::kNuma);
  g.plugins_dir = "/var/lib/kubelet/plugins";
  g.device_metadata = true;
  DriverSetup gpu_setup = node::Inventory::Build(g, dgx, {}).GpuSetup();
  ASSERT_FALSE(gpu_setup.gpus.empty());
  const auto& [gpu_name, gpu] = *gpu_setup.gpus.begin();
  const claims::Claim gpu_claim = testing::Parse(testing::ClaimJson(
      kUid, "team", "train", {testing::Result("gpu", gpu_name, "", testing::kGpuDriver)}));
  absl::StatusOr<Plan> gp = PlanClaim(gpu_claim, gpu_setup, dgx, state::State());
  ASSERT_TRUE(gp.ok()) << gp.status();
  ASSERT_EQ(gp->metadata.size(), 1u);
  EXPECT_EQ(gp->metadata[0].host_path,
            "/var/lib/kubelet/plugins/gpu.topodra.io/dra-device-metadata/team_train/gpu/"
            "metadata.json");
  const json gattrs =
      Objects(gp->metadata[0].content)[0]["requests"][0]["devices"][0]["attributes"];
  EXPECT_EQ(gattrs["resource.kubernetes.io/pciBusID"], json({{"string", gpu.pci_bus_id}}));
  EXPECT_EQ(gattrs["gpu.topodra.io/type"], json({{"string", "gpu"}}));
  EXPECT_EQ(gp->devices[0].cdi_device_ids.back(),
            std::string("gpu.topodra.io/metadata=") + kUid + "_gpu");
  ExpectWrittenAsSpecStoreWrites(*gp);
  ExpectStoredCdiIsTheTreesPrint(*gp);
}

// --device-metadata-dir: the host files go below it in the same per-driver layout, and the CDI
// spec mounts them from there into the same container path; the kubelet plugin directory's root
// stays the driver's (former) own, for the start-up check to clean up.
TEST(PlanClaimDeviceMetadata, ADirectoryOfItsOwnMovesTheHostFilesOnly) {
  const topology::Topology& topo = Load(testing::k192);
  const std::string tmpfs = "/var/run/topodra/device-metadata/dra.cpu/dra-device-metadata";
  struct Case {
    std::string dir;
    std::string root;
    std::vector<std::string> former;
  };
  const std::vector<Case> cases = {
      {"", kRoot, {}},
      {"/var/lib/kubelet/plugins", kRoot, {}},  // the default, given
      {"/var/run/topodra/device-metadata", tmpfs, {kRoot}},
      {"/", "/dra.cpu/dra-device-metadata", {kRoot}},
  };
  const claims::Claim claim = testing::Parse(
      testing::ClaimJson(kUid, "team", "train", {testing::Result("cpus", "cpudevnuma001", "4")}));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dir);
    node::InventoryOptions o = testing::Options(testing::Mode::kNuma);
    o.plugins_dir = "/var/lib/kubelet/plugins";
    o.metadata_dir = c.dir;
    o.device_metadata = true;
    const DriverSetup setup = node::Inventory::Build(o, topo, {}).CpuSetup();
    EXPECT_EQ(setup.metadata_root, c.root);
    EXPECT_EQ(setup.metadata_former_roots, c.former);
    absl::StatusOr<Plan> plan = PlanClaim(claim, setup, topo, state::State());
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->metadata.size(), 1u);
    const std::string host = c.root + "/team_train/cpus/metadata.json";
    EXPECT_EQ(plan->metadata[0].host_path, host);
    const std::vector<cdi::Mount>& mounts =
        plan->metadata[0].cdi_spec.devices.at(0).container_edits.mounts;
    ASSERT_EQ(mounts.size(), 1u);
    EXPECT_EQ(mounts[0].host_path, host);
    EXPECT_EQ(mounts[0].container_path, MetadataContainerPath("dra.cpu", "train", "", "cpus"));
    EXPECT_EQ(MetadataRootOf(host, "dra.cpu"), c.root);
  }
}

}  // namespace
}  // namespace topodra::prepare
