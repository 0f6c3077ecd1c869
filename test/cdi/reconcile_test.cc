// The start-up reconciliation of a CDI directory (cdi/reconcile.h) on a temporary directory:
// what it writes, removes and leaves alone, and the leftovers check of a lost state.
#include "cdi/reconcile.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace topodra::cdi {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class ReconcileTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cdi_reconcile_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    store_ = SpecStore(root_ + "/cdi");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::set<std::string> CdiFiles() {
    std::set<std::string> out;
    if (!fs::exists(store_.dir())) return out;
    for (const auto& e : fs::directory_iterator(store_.dir())) {
      out.insert(e.path().filename().string());
    }
    return out;
  }

  std::string root_;
  SpecStore store_{""};
};

json SpecJson(const std::string& name) {
  return {{"cdiVersion", "0.3.0"},
          {"kind", "k8s.topodra.io/cpu"},
          {"devices", {{{"name", name}, {"containerEdits", {{"env", {"A=" + name}}}}}}}};
}

// ours-*: this instance's; old-*: unmarked; other-*: foreign.
CdiFileClass Classify(const std::string& file) {
  if (file.starts_with("ours-")) return CdiFileClass::kOurs;
  if (file.starts_with("old-")) return CdiFileClass::kUnmarked;
  return CdiFileClass::kForeign;
}

TEST_F(ReconcileTest, WritesWhatIsMissingAndRemovesOnlyOurs) {
  fs::create_directories(store_.dir());
  // Wanted and right: kept. Wanted and different: rewritten. Ours unwanted: removed, with our
  // interrupted writes. Unmarked and foreign unwanted: left alone.
  ASSERT_TRUE(store_.Write("ours-same.json", *FromJson(SpecJson("same").dump())).ok());
  std::ofstream(store_.PathOf("ours-stale.json")) << "{}";
  std::ofstream(store_.PathOf("ours-gone.json")) << "{}";
  std::ofstream(store_.PathOf(".ours-gone.json.4242-1.tmp")) << "{";
  std::ofstream(store_.PathOf(".other-x.json.4242-1.tmp")) << "{";
  std::ofstream(store_.PathOf("old-x.json")) << "{}";
  std::ofstream(store_.PathOf("other-x.json")) << "{}";
  const std::map<std::string, json> wanted = {{"ours-same.json", SpecJson("same")},
                                              {"ours-stale.json", SpecJson("stale")},
                                              {"ours-new.json", SpecJson("new")},
                                              {"old-adopted.json", SpecJson("adopted")}};
  absl::StatusOr<ReconciledCdi> r = ReconcileCdiFiles(store_, wanted, Classify, "test");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 3);
  EXPECT_EQ(r->removed, 2);
  EXPECT_EQ(CdiFiles(), (std::set<std::string>{"ours-same.json", "ours-stale.json", "ours-new.json",
                                               "old-adopted.json", "old-x.json", "other-x.json",
                                               ".other-x.json.4242-1.tmp"}));
  for (const auto& [file, spec] : wanted) {
    absl::StatusOr<Spec> have = store_.Read(file);
    ASSERT_TRUE(have.ok()) << file << ": " << have.status();
    EXPECT_EQ(*have, *FromJson(spec.dump())) << file;
  }
  // Run again: nothing to do.
  r = ReconcileCdiFiles(store_, wanted, Classify, "test");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 0);
  EXPECT_EQ(r->removed, 0);
}

// A file holding exactly the text Write makes of the stored spec is left alone without parsing
// either (the start with thousands of claims): even a spec today's validation refuses (a device
// name it does not allow) is kept when the file is that text; the same spec in a file that
// differs must be written again, which validation stops.
TEST_F(ReconcileTest, AFileHoldingTheStoredSpecsTextIsLeftAloneUnparsed) {
  fs::create_directories(store_.dir());
  const json spec = SpecJson("bad name!");
  std::ofstream(store_.PathOf("ours-a.json")) << spec.dump(2) << "\n";
  absl::StatusOr<ReconciledCdi> r =
      ReconcileCdiFiles(store_, {{"ours-a.json", spec}}, Classify, "test");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 0);
  std::ofstream(store_.PathOf("ours-a.json")) << spec.dump() << "\n";
  r = ReconcileCdiFiles(store_, {{"ours-a.json", spec}}, Classify, "test");
  EXPECT_FALSE(r.ok());
}

TEST_F(ReconcileTest, AStoredSpecThatIsNotOneIsDataLoss) {
  const absl::StatusOr<ReconciledCdi> r =
      ReconcileCdiFiles(store_, {{"ours-a.json", json{{"kind", 1}}}}, Classify, "test");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(CdiFiles().empty());
}

TEST_F(ReconcileTest, LeftoversOfALostStateAreListedWithWhatToDo) {
  std::filesystem::create_directories(store_.dir());
  auto is_trace = [](const std::string& file) { return file.starts_with("dra.cpu-claim_"); };
  EXPECT_TRUE(CheckNoCdiLeftovers(store_, is_trace, "/var/lib/topodra").ok());
  std::ofstream(store_.PathOf("gpu.topodra.io-claim_x.json")) << "{}";
  EXPECT_TRUE(CheckNoCdiLeftovers(store_, is_trace, "/var/lib/topodra").ok());
  for (int i = 0; i < 12; ++i) {
    std::ofstream(store_.PathOf(absl::StrCat("dra.cpu-claim_u", 10 + i, ".json"))) << "{}";
  }
  const absl::Status st = CheckNoCdiLeftovers(store_, is_trace, "/var/lib/topodra");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(st.message()),
            absl::StrCat(
                "the allocation state in /var/lib/topodra is gone (no checkpoint.json, no journal) "
                "but 12 CDI spec file(s) this daemon wrote are still in ",
                store_.dir(),
                ": dra.cpu-claim_u10.json, dra.cpu-claim_u11.json, dra.cpu-claim_u12.json, "
                "dra.cpu-claim_u13.json, dra.cpu-claim_u14.json, dra.cpu-claim_u15.json, "
                "dra.cpu-claim_u16.json, dra.cpu-claim_u17.json, dra.cpu-claim_u18.json, "
                "dra.cpu-claim_u19.json and 2 more. Their claims may still be running; starting "
                "empty would remove these files and hand their CPUs and GPUs out again. Restore "
                "checkpoint.json and checkpoint.json.journal in /var/lib/topodra from a backup and "
                "restart; or, once no pod on this node uses these claims (drain the node), move "
                "these files out of ",
                store_.dir(), " and restart"));
  EXPECT_EQ(CdiFiles().size(), 13u) << "nothing removed";
}

}  // namespace
}  // namespace topodra::cdi

namespace topodra::cdi {
namespace {

// The start-up compares each stored spec's file with IndentCompactJson of the stored compact text
// instead of printing a JSON tree of it: it must be nlohmann's dump(2), byte for byte.
TEST(IndentCompactJsonTest, IsTheIndentedDumpOfTheValue) {
  const std::vector<nlohmann::json> values = {
      nullptr,
      1,
      "x",
      nlohmann::json::object(),
      nlohmann::json::array(),
      nlohmann::json::parse(R"({"a":{},"b":[],"c":[1,[2,{}],{"d":"e,f:g{[\"]}"}],"k":"\u0001\n"})"),
      nlohmann::json::parse(R"([{"x":[[]]},{"y":{"z":null}},true,false,-3])"),
      nlohmann::json::parse(
          R"({"cdiVersion":"0.5.0","devices":[{"containerEdits":{"env":["A=1","B=x y"],)"
          R"("mounts":[{"containerPath":"/c","hostPath":"/h","options":["ro","bind"]}]},)"
          R"("name":"u_cpus"}],"kind":"dra.cpu/metadata"})"),
  };
  for (const nlohmann::json& v : values) {
    const std::string compact = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    SCOPED_TRACE(compact);
    EXPECT_EQ(IndentCompactJson(compact),
              v.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  // Text that is not a compact dump: anything, never a crash.
  for (const char* odd : {"", "\"", "{", "}", "]]", "\"\\", "{\"a\":"})
    (void)IndentCompactJson(odd);
}

}  // namespace
}  // namespace topodra::cdi
