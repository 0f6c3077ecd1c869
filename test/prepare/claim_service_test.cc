// ClaimService with a real StateStore and CDI SpecStore in a temporary directory and claims from a
// map: the side effects of prepare and unprepare, replay after a restart, CDI reconciliation, and
// many callers at once.
#include "driver/prepare/claim_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "driver/prepare/device_metadata.h"
#include "driver/prepare/metadata_files.h"
#include "driver/state/store.h"
#include "test/prepare/prepare_testing.h"

namespace topodra::prepare {
namespace {

// Every refused claim logs a warning; the assertions say what matters.
const bool kQuiet = [] {
  spdlog::set_level(spdlog::level::err);
  return true;
}();

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using namespace topodra::prepare::testing;  // NOLINT: test helpers

// The API server: ns/name -> claim, with failures on demand; counts GETs.
class FakeSource : public ClaimSource {
 public:
  void Set(const std::string& ns, const std::string& name, json claim) {
    std::lock_guard<std::mutex> lock(mu_);
    claims_[ns + "/" + name] = std::move(claim);
  }
  void Fail(const std::string& ns, const std::string& name, absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    failures_[ns + "/" + name] = std::move(status);
  }
  // GETs of the claim answer nothing until their timeout or cancellation, like an API server
  // that does not answer them.
  void Hang(const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    hanging_.insert(ns + "/" + name);
  }
  int gets() const { return gets_.load(); }
  // The largest number of GETs in flight at once.
  int most_in_flight() const { return most_in_flight_.load(); }
  // The timeouts GETs were given, by ns/name (the last one).
  absl::Duration timeout_of(const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return timeouts_[ns + "/" + name];
  }

  // The thread of the last GET.
  std::thread::id get_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return get_thread_;
  }

  absl::StatusOr<json> GetClaim(const std::string& ns, const std::string& name,
                                const FetchLimits& limits) override {
    ++gets_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      get_thread_ = std::this_thread::get_id();
    }
    const int now = ++in_flight_;
    for (int most = most_in_flight_.load(); now > most;) {
      if (most_in_flight_.compare_exchange_weak(most, now)) break;
    }
    struct Leave {
      std::atomic<int>* n;
      ~Leave() { --*n; }
    } leave{&in_flight_};
    bool hang = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      timeouts_[ns + "/" + name] = limits.timeout;
      hang = hanging_.contains(ns + "/" + name);
    }
    if (hang) {
      const absl::Time end = absl::Now() + limits.timeout;
      while (absl::Now() < end) {
        if ((limits.cancelled != nullptr && limits.cancelled->load()) ||
            (limits.caller_gone && limits.caller_gone())) {
          return absl::CancelledError("GET abandoned");
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
      return absl::DeadlineExceededError(absl::StrCat("GET ", name, ": Timeout was reached after ",
                                                      absl::FormatDuration(limits.timeout)));
    }
    // Some time in flight, so that GETs of one call overlap when they run concurrently.
    if (delay_ > absl::ZeroDuration()) absl::SleepFor(delay_);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = failures_.find(ns + "/" + name); it != failures_.end()) return it->second;
    auto it = claims_.find(ns + "/" + name);
    if (it == claims_.end()) {
      return absl::NotFoundError(
          absl::StrCat("resourceclaims.resource.k8s.io \"", name, "\" not found"));
    }
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, json> claims_;
  std::map<std::string, absl::Status> failures_;
  std::set<std::string> hanging_;
  std::map<std::string, absl::Duration> timeouts_;
  std::thread::id get_thread_;
  std::atomic<int> gets_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int> most_in_flight_{0};

 public:
  absl::Duration delay_ = absl::ZeroDuration();  // of every GET that does not hang
};

ClaimRef Ref(const std::string& ns, const std::string& name, const std::string& uid) {
  ClaimRef r;
  r.ns = ns;
  r.name = name;
  r.uid = uid;
  return r;
}

class ClaimServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/topodra-prepare-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    cdi_ = std::make_unique<cdi::SpecStore>(dir_ + "/cdi");
  }
  void TearDown() override {
    services_.clear();
    ledger_.reset();
    store_ = nullptr;
    std::filesystem::remove_all(dir_);
  }

  // Opens the state (again) and makes a fresh Ledger from what was on disk.
  void OpenNode() {
    absl::StatusOr<state::StateStore::Opened> opened =
        state::StateStore::Open(dir_ + "/state/checkpoint.json");
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = opened->store.get();
    ledger_ = std::make_unique<state::Ledger>(std::move(opened->store), opened->loaded);
  }

  ClaimService* Start(const DriverSetup& setup, const topology::Topology& topo) {
    if (ledger_ == nullptr) OpenNode();
    services_.push_back(
        std::make_unique<ClaimService>(setup, topo, ledger_.get(), cdi_.get(), &source_));
    return services_.back().get();
  }

  // The daemon stops (services, node state and store destroyed) and starts again on the same
  // files, with the same driver setups.
  void Restart(const std::vector<std::pair<DriverSetup, std::string>>& drivers) {
    services_.clear();
    ledger_.reset();
    store_ = nullptr;
    OpenNode();
    for (const auto& [setup, topo] : drivers) Start(setup, Load(topo));
  }

  ClaimService& service(size_t i = 0) { return *services_.at(i); }

  // Puts the claim in the fake API server and returns its ref.
  ClaimRef Add(const std::string& ns, const std::string& name, const std::string& uid,
               const std::vector<json>& results, const std::vector<json>& configs = {}) {
    source_.Set(ns, name, ClaimJson(uid, ns, name, results, configs));
    return Ref(ns, name, uid);
  }

  ClaimOutcome PrepareOk(const ClaimRef& ref, size_t service_index = 0) {
    std::map<std::string, ClaimOutcome> out = service(service_index).Prepare({ref});
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(out[ref.uid].error, "") << ref.ns << "/" << ref.name;
    EXPECT_FALSE(out[ref.uid].devices.empty()) << ref.ns << "/" << ref.name;
    return out[ref.uid];
  }

  std::string PrepareError(const ClaimRef& ref) {
    std::map<std::string, ClaimOutcome> out = service().Prepare({ref});
    EXPECT_EQ(out.size(), 1u);
    EXPECT_NE(out[ref.uid].error, "") << ref.ns << "/" << ref.name;
    EXPECT_TRUE(out[ref.uid].devices.empty());
    return out[ref.uid].error;
  }

  void UnprepareOk(const ClaimRef& ref, size_t service_index = 0) {
    std::map<std::string, std::string> out = service(service_index).Unprepare({ref});
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(out[ref.uid], "") << ref.ns << "/" << ref.name;
  }

  std::optional<state::Allocation> Held(const std::string& driver, const std::string& uid) {
    return ledger_->Read([&](const state::State& st) -> std::optional<state::Allocation> {
      const state::Allocation* a = st.Find(state::DraOwner(driver, uid));
      if (a == nullptr) return std::nullopt;
      return *a;
    });
  }
  CpuSet HeldCpus(const std::string& uid) {
    const std::optional<state::Allocation> a = Held(kCpuDriver, uid);
    return a ? a->cpus : CpuSet{};
  }

  bool CdiExists(const std::string& file) { return std::filesystem::exists(cdi_->PathOf(file)); }
  std::set<std::string> CdiFiles() {
    std::set<std::string> out;
    if (!std::filesystem::exists(cdi_->dir())) return out;
    for (const auto& e : std::filesystem::directory_iterator(cdi_->dir())) {
      out.insert(e.path().filename().string());
    }
    return out;
  }

  // What the planner alone says for the claim against the current state.
  Plan Expected(const ClaimRef& ref, const DriverSetup& setup, const topology::Topology& topo) {
    absl::StatusOr<json> j = source_.GetClaim(ref.ns, ref.name, FetchLimits());
    EXPECT_TRUE(j.ok());
    absl::StatusOr<Plan> plan = PlanClaim(Parse(*j), setup, topo, ledger_->Copy());
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *std::move(plan) : Plan{};
  }

  std::string dir_;
  FakeSource source_;
  std::unique_ptr<cdi::SpecStore> cdi_;
  state::StateStore* store_ = nullptr;  // owned by ledger_
  std::unique_ptr<state::Ledger> ledger_;
  std::vector<std::unique_ptr<ClaimService>> services_;
};

// k16 with one NUMA device of all 16 CPUs.
const char kNuma0[] = "cpudevnuma000";

TEST_F(ClaimServiceTest, PrepareWritesTheCdiSpecRecordsAndAnswers) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  Start(setup, topo);
  const ClaimRef ref = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "4")});
  const Plan want = Expected(ref, setup, topo);  // nothing held yet: what prepare must do

  const ClaimOutcome out = PrepareOk(ref);
  EXPECT_EQ(out.devices, want.devices);
  EXPECT_EQ(source_.gets(), 1 + 1);  // Expected() read it too

  // The CDI file is the plan's spec.
  EXPECT_EQ(want.cdi_file, "dra.cpu-claim_uid-1.json");
  absl::StatusOr<cdi::Spec> written = cdi_->Read(want.cdi_file);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, want.cdi_spec);
  EXPECT_EQ(CdiFiles(), std::set<std::string>{"dra.cpu-claim_uid-1.json"});

  // Held in memory, prepared, as planned.
  const std::optional<state::Allocation> a = Held(kCpuDriver, "uid-1");
  ASSERT_TRUE(a.has_value());
  state::Allocation prepared = want.allocation;
  prepared.phase = state::Phase::kPrepared;
  EXPECT_EQ(*a, prepared);
  EXPECT_EQ(a->cpus.Size(), 4);
  // And durable: the journal has it.
  EXPECT_EQ(store_->records(), 1);
}

TEST_F(ClaimServiceTest, RepeatedPrepareReplaysWithoutAGet) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef ref = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "4")});
  const ClaimOutcome first = PrepareOk(ref);
  const CpuSet cpus = HeldCpus("uid-1");
  EXPECT_EQ(source_.gets(), 1);
  // The claim changed on the server meanwhile: the kubelet still gets the first answer.
  Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "8")});
  for (int i = 0; i < 3; ++i) {
    const ClaimOutcome again = PrepareOk(ref);
    EXPECT_EQ(again.devices, first.devices);
  }
  EXPECT_EQ(source_.gets(), 1);
  EXPECT_EQ(HeldCpus("uid-1"), cpus);
  EXPECT_EQ(store_->records(), 1);
  // The same UID twice in one call: one outcome.
  std::map<std::string, ClaimOutcome> out = service().Prepare({ref, ref});
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out["uid-1"].devices, first.devices);
}

// Issue 15 item 8: the answer names CDI devices, so a repeated prepare checks that their file is
// there and is what prepare wrote, and writes it again before answering.
TEST_F(ClaimServiceTest, RepeatedPrepareWritesAMissingOrChangedCdiFileAgain) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef ref = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "4")});
  const ClaimOutcome first = PrepareOk(ref);
  const std::string file = "dra.cpu-claim_uid-1.json";
  absl::StatusOr<cdi::Spec> written = cdi_->Read(file);
  ASSERT_TRUE(written.ok()) << written.status();

  std::filesystem::remove(cdi_->PathOf(file));
  EXPECT_EQ(PrepareOk(ref).devices, first.devices);
  absl::StatusOr<cdi::Spec> back = cdi_->Read(file);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *written);

  // Changed behind our back (another CPU list): the stored content comes back.
  std::string text;
  {
    std::ifstream in(cdi_->PathOf(file));
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string cpus = HeldCpus("uid-1").ToString();
  ASSERT_NE(text.find(cpus), std::string::npos) << text;
  text.replace(text.find(cpus), cpus.size(), "0-15");
  std::ofstream(cdi_->PathOf(file), std::ios::trunc) << text;
  ASSERT_NE(*cdi_->Read(file), *written);
  EXPECT_EQ(PrepareOk(ref).devices, first.devices);
  EXPECT_EQ(*cdi_->Read(file), *written);
  // Replayed each time: no GET, no journal record.
  EXPECT_EQ(source_.gets(), 1);
  EXPECT_EQ(store_->records(), 1);
}

TEST_F(ClaimServiceTest, UnprepareRemovesTheFileAndFreesTheCpus) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kMachine), topo);
  const ClaimRef c1 = Add("default", "c1", "uid-1", {Result("cpus", "cpudevmachine", "2")},
                          {Config({}, Cpuset("4-5"))});
  const ClaimRef c2 = Add("team", "c2", "uid-2", {Result("cpus", "cpudevmachine", "2")},
                          {Config({}, Cpuset("5-6"))});
  PrepareOk(c1);
  EXPECT_TRUE(CdiExists("dra.cpu-claim_uid-1.json"));
  EXPECT_THAT(PrepareError(c2),
              HasSubstr("claim team/c2 request \"cpus\": cpuset \"5-6\": CPU 5 is already "
                        "prepared for claim default/c1 (uid uid-1)"));
  EXPECT_EQ(Held(kCpuDriver, "uid-2"), std::nullopt);
  EXPECT_FALSE(CdiExists("dra.cpu-claim_uid-2.json"));

  UnprepareOk(c1);
  EXPECT_FALSE(CdiExists("dra.cpu-claim_uid-1.json"));
  EXPECT_EQ(Held(kCpuDriver, "uid-1"), std::nullopt);
  EXPECT_TRUE(ledger_->Copy().Empty());
  UnprepareOk(c1);  // again: nothing left to do

  // The CPUs are free again.
  PrepareOk(c2);
  EXPECT_EQ(HeldCpus("uid-2").ToString(), "5-6");
  // And a later prepare of the unprepared claim starts over (a new GET, new CPUs check).
  EXPECT_THAT(PrepareError(c1),
              HasSubstr("CPU 5 is already prepared for claim team/c2 (uid uid-2)"));
}

TEST_F(ClaimServiceTest, UnprepareOfAnUnknownClaimSucceeds) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  // A prepare that crashed before its journal record may have left its CDI file.
  cdi::Spec leftover;
  leftover.kind = "dra.cpu/claim";
  cdi::Device d;
  d.name = "x";
  d.container_edits.env = {"A=1"};
  leftover.devices = {d};
  ASSERT_TRUE(cdi_->Write("dra.cpu-claim_ghost.json", leftover).ok());
  std::map<std::string, std::string> out = service().Unprepare(
      {Ref("default", "never", "never-prepared"), Ref("default", "ghost", "ghost")});
  EXPECT_EQ(out, (std::map<std::string, std::string>{{"never-prepared", ""}, {"ghost", ""}}));
  EXPECT_FALSE(CdiExists("dra.cpu-claim_ghost.json"));
  EXPECT_EQ(source_.gets(), 0);
  EXPECT_TRUE(ledger_->Copy().Empty());
}

TEST_F(ClaimServiceTest, OneBadClaimDoesNotAffectTheOthers) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef good1 = Add("default", "good-1", "uid-good-1", {Result("cpus", kNuma0, "2")});
  const ClaimRef good2 = Add("default", "good-2", "uid-good-2", {Result("cpus", kNuma0, "2")},
                             {Config({}, Cpuset("6,14"))});
  const ClaimRef missing = Ref("default", "missing", "uid-missing");
  source_.Fail("default", "flaky", absl::UnavailableError("connection refused"));
  const ClaimRef flaky = Ref("default", "flaky", "uid-flaky");
  source_.Set("team", "recreated",
              ClaimJson("uid-new", "team", "recreated", {Result("cpus", kNuma0, "2")}));
  const ClaimRef recreated = Ref("team", "recreated", "uid-old");
  source_.Set("default", "pending", PendingClaimJson("uid-pending", "default", "pending"));
  const ClaimRef pending = Ref("default", "pending", "uid-pending");
  const ClaimRef outside = Add("default", "outside", "uid-outside", {Result("cpus", kNuma0, "4")},
                               {Config({}, Cpuset("14-17"))});
  const ClaimRef unparsable = Add("default", "unparsable", "uid-unparsable",
                                  {Result("cpus", kNuma0, "2")}, {Config({}, Cpuset("3-x"))});
  const ClaimRef taken = Add("default", "taken", "uid-taken", {Result("cpus", kNuma0, "2")},
                             {Config({}, Cpuset("6-7"))});
  const ClaimRef wrong_device =
      Add("default", "wrong-device", "uid-wrong-device", {Result("cpus", "cpudevnuma009", "2")});
  json bad_type = ClaimJson("uid-bad-type", "default", "bad-type", {Result("cpus", kNuma0, "2")});
  bad_type["status"]["allocation"]["devices"]["results"][0]["pool"] = 7;
  source_.Set("default", "bad-type", bad_type);
  const ClaimRef bad_json = Ref("default", "bad-type", "uid-bad-type");
  const ClaimRef no_uid = Ref("default", "no-uid", "");

  const ClaimRef good3 = Add("default", "good-3", "uid-good-3", {Result("cpus", kNuma0, "2")});

  const std::vector<ClaimRef> refs = {good1,    good2,   missing,    flaky, recreated,
                                      pending,  outside, unparsable, taken, wrong_device,
                                      bad_json, no_uid,  good3};
  std::map<std::string, ClaimOutcome> out = service().Prepare(refs);
  ASSERT_EQ(out.size(), refs.size());
  for (const ClaimRef& r : refs) EXPECT_TRUE(out.contains(r.uid)) << r.name;

  for (const char* uid : {"uid-good-1", "uid-good-2", "uid-good-3"}) {
    EXPECT_EQ(out[uid].error, "") << uid;
    EXPECT_EQ(out[uid].devices.size(), 1u) << uid;
    EXPECT_EQ(HeldCpus(uid).Size(), 2) << uid;
    EXPECT_TRUE(CdiExists(CdiFileName(kCpuDriver, uid))) << uid;
  }
  EXPECT_EQ(HeldCpus("uid-good-2").ToString(), "6,14");

  struct Want {
    std::string uid;
    std::vector<std::string> has;
  };
  for (const Want& w : std::vector<Want>{
           {"uid-missing", {"claim default/missing: get ResourceClaim: ", "\"missing\" not found"}},
           {"uid-flaky", {"claim default/flaky: get ResourceClaim: connection refused"}},
           {"uid-old", {"claim team/recreated: ", "uid \"uid-new\"", "uid \"uid-old\""}},
           {"uid-pending", {"claim default/pending is not allocated"}},
           {"uid-outside",
            {"claim default/outside request \"cpus\": cpuset \"14-17\": CPUs 16-17 "
             "are not on this node"}},
           {"uid-unparsable", {"claim default/unparsable request \"cpus\": ", "cpuset", "3-x"}},
           {"uid-taken",
            {"claim default/taken request \"cpus\": cpuset \"6-7\": CPU 6 is already "
             "prepared for claim default/good-2 (uid uid-good-2)"}},
           {"uid-wrong-device",
            {"claim default/wrong-device request \"cpus\": device "
             "\"cpudevnuma009\" is not a CPU device of this node"}},
           {"uid-bad-type", {"claim default/bad-type: ", "results[0].pool"}},
           {"", {"default/no-uid", "namespace, name and uid are required"}},
       }) {
    SCOPED_TRACE(w.uid);
    const ClaimOutcome& o = out[w.uid];
    EXPECT_THAT(o.devices, IsEmpty());
    for (const std::string& s : w.has) EXPECT_THAT(o.error, HasSubstr(s));
    EXPECT_EQ(Held(kCpuDriver, w.uid), std::nullopt);
    EXPECT_FALSE(CdiExists(CdiFileName(kCpuDriver, w.uid)));
  }
  EXPECT_EQ(ledger_->Copy().Size(), 3);
  EXPECT_EQ(CdiFiles(),
            (std::set<std::string>{"dra.cpu-claim_uid-good-1.json", "dra.cpu-claim_uid-good-2.json",
                                   "dra.cpu-claim_uid-good-3.json"}));
  // A claim that failed is not remembered: once fixed, it prepares.
  source_.Set("default", "missing",
              ClaimJson("uid-missing", "default", "missing", {Result("cpus", kNuma0, "2")}));
  PrepareOk(missing);
}

// Issue 15 item 3: identifiers beyond the API's limits fail their claim alone, before any GET,
// with one sentence that quotes a bounded prefix and the length, never the whole value.
TEST_F(ClaimServiceTest, IdentifiersBeyondTheApiLimitsFailTheirClaimAlone) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef good = Add("default", "good", "uid-good", {Result("cpus", kNuma0, "2")});
  const std::string huge(1 << 20, 'a');
  const ClaimRef long_name = Ref("default", huge, "uid-long-name");
  const ClaimRef long_ns = Ref(std::string(64, 'n'), "c", "uid-long-ns");
  const ClaimRef long_uid = Ref("default", "c", std::string(129, '7'));
  const ClaimRef path_uid = Ref("default", "c", "../../etc/x");
  const ClaimRef upper_name = Ref("default", "Claim_1", "uid-upper");
  std::map<std::string, ClaimOutcome> out =
      service().Prepare({good, long_name, long_ns, long_uid, path_uid, upper_name});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out["uid-good"].error, "");
  EXPECT_EQ(out["uid-good"].devices.size(), 1u);
  EXPECT_EQ(source_.gets(), 1);  // only the good claim was fetched
  const std::string prefix64(64, 'a');
  EXPECT_EQ(out["uid-long-name"].error,
            absl::StrCat("claim default/\"", prefix64,
                         "...\" (1048576 bytes) uid \"uid-long-name\": "
                         "refused: name \"",
                         prefix64,
                         "...\" (1048576 bytes) is longer than 253 "
                         "characters, the limit of a ResourceClaim name (a DNS-1123 subdomain)"));
  EXPECT_THAT(
      out["uid-long-ns"].error,
      HasSubstr("refused: namespace \"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
                "nnnnnnnn\" is longer than 63 characters, the limit of a namespace (a "
                "DNS-1123 label)"));
  EXPECT_THAT(out[long_uid.uid].error,
              HasSubstr("(129 bytes) is longer than 128 characters (the API server's uids are "
                        "36-character UUIDs)"));
  EXPECT_THAT(out["../../etc/x"].error,
              HasSubstr("refused: uid \"../../etc/x\" has characters other than letters, digits "
                        "and '-'"));
  EXPECT_THAT(out["uid-upper"].error,
              HasSubstr("refused: name \"Claim_1\" is not a DNS-1123 subdomain"));
  for (const auto& [uid, o] : out) {
    EXPECT_LT(o.error.size(), 400u) << o.error.substr(0, 400);
    if (uid != "uid-good") {
      EXPECT_THAT(o.devices, IsEmpty());
    }
  }
  EXPECT_EQ(CdiFiles(), std::set<std::string>{"dra.cpu-claim_uid-good.json"});

  std::map<std::string, std::string> un = service().Unprepare({long_name, path_uid, good});
  EXPECT_THAT(un["uid-long-name"], HasSubstr("(1048576 bytes) is longer than 253 characters"));
  EXPECT_LT(un["uid-long-name"].size(), 400u);
  EXPECT_THAT(un["../../etc/x"], HasSubstr("has characters other than letters, digits and '-'"));
  EXPECT_EQ(un["uid-good"], "");
  EXPECT_TRUE(ledger_->Copy().Empty());
}

// Issue 15 item 11: the claims of one call are fetched concurrently, at most `parallel` at a time,
// and still prepared in request order (the later of two claims asking for the same CPUs fails).
TEST_F(ClaimServiceTest, ClaimsOfOneCallAreFetchedConcurrentlyAndPreparedInOrder) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  FetchOptions fetch;
  fetch.parallel = 4;
  service().SetFetchOptions(fetch);
  // Long enough that the 4 fetchers overlap even on a loaded CI machine.
  source_.delay_ = absl::Seconds(1);
  std::vector<ClaimRef> refs;
  for (int i = 0; i < 8; ++i) {
    refs.push_back(Add("default", absl::StrCat("c", i), absl::StrCat("uid-", i),
                       {Result("cpus", kNuma0, "1")}, {Config({}, Cpuset(absl::StrCat(i)))}));
  }
  // Wants CPU 3 as well; after c3 in the request, so it is the one that fails.
  refs.push_back(
      Add("default", "late", "uid-late", {Result("cpus", kNuma0, "1")}, {Config({}, Cpuset("3"))}));
  std::map<std::string, ClaimOutcome> out = service().Prepare(refs);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out[absl::StrCat("uid-", i)].error, "") << i;
    EXPECT_EQ(HeldCpus(absl::StrCat("uid-", i)).ToString(), absl::StrCat(i));
  }
  EXPECT_THAT(out["uid-late"].error, HasSubstr("CPU 3 is already prepared for claim default/c3"));
  EXPECT_EQ(source_.gets(), 9);
  EXPECT_EQ(source_.most_in_flight(), 4);
}

// Issue 15 item 11: a GET that does not answer fails its claim alone, within the per-request
// timeout or the time left before the caller's deadline (less the margin), whichever is shorter;
// the message names the timeout.
TEST_F(ClaimServiceTest, HangingClaimsFailAloneWithAMessageNamingTheTimeout) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  FetchOptions fetch;
  fetch.request_timeout = absl::Milliseconds(300);
  fetch.margin = absl::Milliseconds(400);
  service().SetFetchOptions(fetch);
  std::vector<ClaimRef> refs;
  for (int i = 0; i < 3; ++i) {
    refs.push_back(Add("default", absl::StrCat("good-", i), absl::StrCat("uid-good-", i),
                       {Result("cpus", kNuma0, "1")}));
    refs.push_back(Add("default", absl::StrCat("stuck-", i), absl::StrCat("uid-stuck-", i),
                       {Result("cpus", kNuma0, "1")}));
    source_.Hang("default", absl::StrCat("stuck-", i));
  }
  CallLimits limits;
  limits.deadline = absl::Now() + absl::Seconds(30);
  std::map<std::string, ClaimOutcome> out = service().Prepare(refs, limits);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[absl::StrCat("uid-good-", i)].error, "") << i;
    EXPECT_EQ(out[absl::StrCat("uid-stuck-", i)].error,
              absl::StrCat("claim default/stuck-", i,
                           ": get ResourceClaim: no answer within 300ms (the per-request "
                           "timeout); the other claims of the call go on: GET stuck-",
                           i, ": Timeout was reached after 300ms"));
    EXPECT_EQ(source_.timeout_of("default", absl::StrCat("good-", i)), absl::Milliseconds(300));
  }
  EXPECT_EQ(ledger_->Copy().Size(), 3);

  // A caller with 5 s left: the margin is 400 ms, so a GET gets at most 4.6 s (less whatever a
  // loaded machine takes to get there).
  fetch.request_timeout = absl::Seconds(10);
  service().SetFetchOptions(fetch);
  const ClaimRef stuck = Add("default", "stuck-x", "uid-stuck-x", {Result("cpus", kNuma0, "1")});
  source_.Hang("default", "stuck-x");
  limits.deadline = absl::Now() + absl::Seconds(5);
  out = service().Prepare({stuck}, limits);
  const absl::Duration given = source_.timeout_of("default", "stuck-x");
  EXPECT_THAT(
      out["uid-stuck-x"].error,
      AllOf(HasSubstr(absl::StrCat("claim default/stuck-x: get ResourceClaim: no answer within ",
                                   absl::FormatDuration(given))),
            HasSubstr("(the time left before the caller's deadline, less 400ms to answer)")));
  EXPECT_GT(given, absl::Seconds(2));
  EXPECT_LE(given, absl::Milliseconds(4600));
}

// Issue 15 item 11: once the caller cancels, no claim is fetched or prepared any more; the GETs
// in flight are abandoned.
TEST_F(ClaimServiceTest, ACancelledCallStopsFetchingAndPreparing) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  FetchOptions fetch;
  fetch.parallel = 2;
  service().SetFetchOptions(fetch);
  source_.delay_ = absl::Milliseconds(20);
  std::vector<ClaimRef> refs;
  for (int i = 0; i < 200; ++i) {
    refs.push_back(Add("default", absl::StrCat("c", i), absl::StrCat("uid-", i),
                       {Result("cpus", kNuma0, "1")}));
  }
  const ClaimRef stuck = Add("default", "stuck", "uid-stuck", {Result("cpus", kNuma0, "1")});
  source_.Hang("default", "stuck");
  refs.insert(refs.begin() + 1, stuck);
  std::atomic<bool> gone{false};
  std::thread caller([&] {
    absl::SleepFor(absl::Milliseconds(300));
    gone = true;
  });
  CallLimits limits;
  limits.cancelled = [&] { return gone.load(); };
  std::map<std::string, ClaimOutcome> out = service().Prepare(refs, limits);
  caller.join();
  const int gets = source_.gets();
  ASSERT_EQ(out.size(), refs.size());
  EXPECT_LT(gets, 100);  // 2 at a time, 20 ms each, for 300 ms: about 30
  int not_prepared = 0;
  for (const auto& [uid, o] : out) {
    if (o.error.find("not prepared: the caller cancelled the call") != std::string::npos) {
      ++not_prepared;
    }
  }
  EXPECT_GT(not_prepared, 100);
  EXPECT_THAT(out["uid-stuck"].error, HasSubstr("the caller cancelled the call"));
  // Nothing goes on after the answer.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(source_.gets(), gets);
}

// Issue 19: a call of one claim has nothing to overlap, so its GET runs on the caller's thread
// (no hand-off to a fetcher and back), and a caller that goes away still abandons it at once.
TEST_F(ClaimServiceTest, OneClaimIsFetchedOnTheCallersThreadAndStillCancellable) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef one = Add("default", "one", "uid-one", {Result("cpus", kNuma0, "1")});
  EXPECT_EQ(PrepareOk(one).devices.size(), 1u);
  EXPECT_EQ(source_.get_thread(), std::this_thread::get_id());
  // Two claims still go to the fetchers.
  const ClaimRef a = Add("default", "a", "uid-a", {Result("cpus", kNuma0, "1")});
  const ClaimRef b = Add("default", "b", "uid-b", {Result("cpus", kNuma0, "1")});
  std::map<std::string, ClaimOutcome> out = service().Prepare({a, b});
  EXPECT_EQ(out["uid-a"].error, "");
  EXPECT_EQ(out["uid-b"].error, "");
  EXPECT_NE(source_.get_thread(), std::this_thread::get_id());

  // A hanging GET of a lone claim, the caller gone after 200 ms: abandoned long before its 30 s.
  const ClaimRef stuck = Add("default", "stuck", "uid-stuck", {Result("cpus", kNuma0, "1")});
  source_.Hang("default", "stuck");
  FetchOptions fetch;
  fetch.request_timeout = absl::Seconds(30);
  service().SetFetchOptions(fetch);
  const absl::Time gone_at = absl::Now() + absl::Milliseconds(200);
  std::atomic<bool> asked_elsewhere{false};
  const std::thread::id here = std::this_thread::get_id();
  CallLimits limits;
  limits.cancelled = [&] {
    if (std::this_thread::get_id() != here) asked_elsewhere = true;
    return absl::Now() >= gone_at;
  };
  out = service().Prepare({stuck}, limits);
  EXPECT_EQ(out["uid-stuck"].error,
            "claim default/stuck: not prepared: the caller cancelled the call");
  EXPECT_FALSE(asked_elsewhere);
  EXPECT_EQ(source_.timeout_of("default", "stuck"), absl::Seconds(30));
  EXPECT_EQ(Held(kCpuDriver, "uid-stuck"), std::nullopt);
}

TEST_F(ClaimServiceTest, ClaimWithoutResultsOfThisDriver) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef ref =
      Add("default", "gpu-only", "uid-g", {Result("gpu", "gpu-0000-34-00-0", "", kGpuDriver)});
  std::map<std::string, ClaimOutcome> out = service().Prepare({ref});
  EXPECT_EQ(out["uid-g"].error, "");
  EXPECT_THAT(out["uid-g"].devices, IsEmpty());
  EXPECT_THAT(CdiFiles(), IsEmpty());
  ASSERT_NE(Held(kCpuDriver, "uid-g"), std::nullopt);
  EXPECT_TRUE(HeldCpus("uid-g").Empty());
  // Replayed like any other.
  out = service().Prepare({ref});
  EXPECT_EQ(out["uid-g"].error, "");
  EXPECT_EQ(source_.gets(), 1);
  UnprepareOk(ref);
  EXPECT_TRUE(ledger_->Copy().Empty());
}

TEST_F(ClaimServiceTest, PreparedClaimsSurviveARestart) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  Start(setup, topo);
  const ClaimRef c1 = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "4")});
  const ClaimRef c2 =
      Add("default", "c2", "uid-2", {Result("cpus", kNuma0, "2")}, {Config({}, Cpuset("3,11"))});
  const ClaimRef c3 = Add("default", "c3", "uid-3", {Result("cpus", kNuma0, "2")});
  const ClaimOutcome a1 = PrepareOk(c1);
  const ClaimOutcome a2 = PrepareOk(c2);
  PrepareOk(c3);
  UnprepareOk(c3);
  const CpuSet cpus1 = HeldCpus("uid-1");
  const state::State before = ledger_->Copy();
  ASSERT_EQ(before.Size(), 2);
  const int gets = source_.gets();

  Restart({{setup, k16}});
  EXPECT_EQ(ledger_->Copy(), before);
  // Same answers, from the state, without asking the API server.
  EXPECT_EQ(PrepareOk(c1).devices, a1.devices);
  EXPECT_EQ(PrepareOk(c2).devices, a2.devices);
  EXPECT_EQ(source_.gets(), gets);
  EXPECT_EQ(HeldCpus("uid-1"), cpus1);

  // Their CPUs are still held: an overlapping claim is refused, naming the holder.
  const int first = *cpus1.First();
  const ClaimRef overlap = Add("team", "overlap", "uid-4", {Result("cpus", kNuma0, "1")},
                               {Config({}, Cpuset(std::to_string(first)))});
  EXPECT_THAT(PrepareError(overlap),
              HasSubstr(absl::StrCat("cpuset \"", first, "\": CPU ", first,
                                     " is already prepared for claim default/c1 (uid uid-1)")));
  // What is left is exactly the rest of the node.
  const ClaimRef rest = Add("team", "rest", "uid-5", {Result("cpus", kNuma0, "10")});
  PrepareOk(rest);
  EXPECT_EQ(HeldCpus("uid-5"), CpuSet::Range(0, 15) - cpus1 - (CpuSet{3, 11}));
  const ClaimRef more = Add("team", "more", "uid-6", {Result("cpus", kNuma0, "1")});
  EXPECT_THAT(PrepareError(more), HasSubstr("but only 0 are free there (none)"));

  // Unprepare after the restart, then restart again: the removal was recorded.
  UnprepareOk(c1);
  EXPECT_FALSE(CdiExists("dra.cpu-claim_uid-1.json"));
  Restart({{setup, k16}});
  EXPECT_EQ(Held(kCpuDriver, "uid-1"), std::nullopt);
  ASSERT_NE(Held(kCpuDriver, "uid-2"), std::nullopt);
  ASSERT_NE(Held(kCpuDriver, "uid-5"), std::nullopt);
  EXPECT_EQ(ledger_->Copy().Size(), 2);
  EXPECT_EQ(PrepareOk(c2).devices, a2.devices);
  EXPECT_EQ(CdiFiles(),
            (std::set<std::string>{"dra.cpu-claim_uid-2.json", "dra.cpu-claim_uid-5.json"}));
}

TEST_F(ClaimServiceTest, ReconcileCdiRestoresAndRemovesOnlyItsOwnFiles) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  Start(setup, topo);
  const ClaimRef c1 = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "4")});
  const ClaimRef c2 = Add("default", "c2", "uid-2", {Result("cpus", kNuma0, "2")});
  const ClaimRef c3 = Add("default", "c3", "uid-3", {Result("cpus", kNuma0, "2")});
  PrepareOk(c1);
  PrepareOk(c2);
  PrepareOk(c3);
  absl::StatusOr<cdi::Spec> spec1 = cdi_->Read("dra.cpu-claim_uid-1.json");
  absl::StatusOr<cdi::Spec> spec2 = cdi_->Read("dra.cpu-claim_uid-2.json");
  absl::StatusOr<cdi::Spec> spec3 = cdi_->Read("dra.cpu-claim_uid-3.json");
  ASSERT_TRUE(spec1.ok() && spec2.ok() && spec3.ok());
  // Nothing to do when everything is in place.
  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 0);
  EXPECT_EQ(r->removed, 0);

  // A power loss took one file and another is stale; leftovers of claims that are gone; files
  // that belong to others.
  std::filesystem::remove(cdi_->PathOf("dra.cpu-claim_uid-1.json"));
  cdi::Spec stale = *spec2;
  stale.devices[0].container_edits.env = {"DRA_CPUSET_uid-2_cpus=0"};
  ASSERT_TRUE(cdi_->Write("dra.cpu-claim_uid-2.json", stale).ok());
  cdi::Spec other = stale;
  other.kind = "gpu.topodra.io/claim";
  ASSERT_TRUE(cdi_->Write("dra.cpu-claim_gone.json", stale).ok());
  ASSERT_TRUE(cdi_->Write("gpu.topodra.io-claim_x.json", other).ok());
  ASSERT_TRUE(cdi_->Write("vendor.example.com.json", other).ok());
  std::ofstream(cdi_->PathOf("dra.cpu-claim_broken.json")) << "{not json";
  std::ofstream(cdi_->PathOf("dra.cpu-claim_uid-3.json"), std::ios::trunc) << "{torn";
  std::ofstream(cdi_->PathOf("notes.txt")) << "keep me";
  std::ofstream(cdi_->PathOf("dra.cpu-claim_x.yaml")) << "keep me too";

  r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 3);
  EXPECT_EQ(r->removed, 2);
  absl::StatusOr<cdi::Spec> back1 = cdi_->Read("dra.cpu-claim_uid-1.json");
  absl::StatusOr<cdi::Spec> back2 = cdi_->Read("dra.cpu-claim_uid-2.json");
  absl::StatusOr<cdi::Spec> back3 = cdi_->Read("dra.cpu-claim_uid-3.json");
  ASSERT_TRUE(back1.ok()) << back1.status();
  ASSERT_TRUE(back2.ok()) << back2.status();
  ASSERT_TRUE(back3.ok()) << back3.status();
  EXPECT_EQ(*back1, *spec1);
  EXPECT_EQ(*back2, *spec2);
  EXPECT_EQ(*back3, *spec3);
  EXPECT_EQ(CdiFiles(), (std::set<std::string>{
                            "dra.cpu-claim_uid-1.json", "dra.cpu-claim_uid-2.json",
                            "dra.cpu-claim_uid-3.json", "gpu.topodra.io-claim_x.json",
                            "vendor.example.com.json", "notes.txt", "dra.cpu-claim_x.yaml"}));
  r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 0);
  EXPECT_EQ(r->removed, 0);
}

TEST_F(ClaimServiceTest, ReconcileRemovesTemporaryFilesOfInterruptedWrites) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  std::filesystem::create_directories(cdi_->dir());
  const std::string ours = cdi_->PathOf(".dra.cpu-claim_uid-9.json.4242-7.tmp");
  const std::string theirs = cdi_->PathOf(".gpu.topodra.io-claim_uid-9.json.4242-8.tmp");
  std::ofstream(ours) << "{";
  std::ofstream(theirs) << "{";
  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->removed, 1);
  EXPECT_FALSE(std::filesystem::exists(ours));
  EXPECT_TRUE(std::filesystem::exists(theirs));
}

// Instances sharing a CDI directory: each removes only what it wrote (its marker), adopts the
// unmarked files of claims its state holds (written before markers) and leaves the others alone.
TEST_F(ClaimServiceTest, ReconcileWithAMarkerTouchesOnlyThisInstancesFiles) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup unmarked = CpuSetup(topo, Mode::kNuma);
  DriverSetup marked = unmarked;
  marked.cdi_marker = CdiInstanceMarker("node-a", "/var/lib/topodra-a");
  const std::string other = CdiInstanceMarker("node-a", "/var/lib/topodra-b");
  const std::string ours = marked.cdi_marker;
  Start(unmarked, topo);
  const ClaimRef c2 = Add("default", "c2", "uid-2", {Result("cpus", kNuma0, "2")});
  PrepareOk(c2);  // by a topodra before markers
  Restart({{marked, k16}});
  const ClaimRef c1 = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "4")});
  PrepareOk(c1);
  const std::string file1 = "dra.cpu-claim_uid-1_i" + ours + ".json";
  const std::string file2 = "dra.cpu-claim_uid-2.json";
  absl::StatusOr<cdi::Spec> spec1 = cdi_->Read(file1);
  absl::StatusOr<cdi::Spec> spec2 = cdi_->Read(file2);
  ASSERT_TRUE(spec1.ok()) << spec1.status();
  ASSERT_TRUE(spec2.ok()) << spec2.status();
  const std::string theirs = "dra.cpu-claim_uid-7_i" + other + ".json";
  const std::string orphan = "dra.cpu-claim_uid-8_i" + ours + ".json";
  const std::string old_unknown = "dra.cpu-claim_uid-9.json";
  ASSERT_TRUE(cdi_->Write(theirs, *spec1).ok());
  ASSERT_TRUE(cdi_->Write(orphan, *spec1).ok());
  ASSERT_TRUE(cdi_->Write(old_unknown, *spec1).ok());
  std::ofstream(cdi_->PathOf("." + theirs + ".4242-1.tmp")) << "{";
  std::ofstream(cdi_->PathOf("." + orphan + ".4242-2.tmp")) << "{";
  std::filesystem::remove(cdi_->PathOf(file2));

  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 1);
  EXPECT_EQ(r->removed, 2);
  EXPECT_EQ(CdiFiles(), (std::set<std::string>{file1, file2, theirs, old_unknown,
                                               "." + theirs + ".4242-1.tmp"}));
  ASSERT_TRUE(cdi_->Read(file2).ok());
  EXPECT_EQ(*cdi_->Read(file2), *spec2);

  // Unpreparing a claim this instance does not hold leaves the other instance's file alone.
  UnprepareOk(Ref("default", "c7", "uid-7"));
  UnprepareOk(Ref("default", "c9", "uid-9"));
  UnprepareOk(c2);
  UnprepareOk(c1);
  EXPECT_EQ(CdiFiles(), (std::set<std::string>{theirs, old_unknown, "." + theirs + ".4242-1.tmp"}));
}

TEST_F(ClaimServiceTest, ReconcileWithNothingPreparedAndNoDirectory) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 0);
  EXPECT_EQ(r->removed, 0);
  EXPECT_FALSE(std::filesystem::exists(cdi_->dir()));
}

TEST_F(ClaimServiceTest, ReconcileAfterARestartRestoresLostFiles) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  Start(setup, topo);
  const ClaimRef c1 = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "4")});
  PrepareOk(c1);
  absl::StatusOr<cdi::Spec> spec = cdi_->Read("dra.cpu-claim_uid-1.json");
  ASSERT_TRUE(spec.ok());
  std::filesystem::remove_all(cdi_->dir());  // /var/run is a tmpfs: a reboot empties it
  Restart({{setup, k16}});
  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 1);
  EXPECT_EQ(r->removed, 0);
  absl::StatusOr<cdi::Spec> back = cdi_->Read("dra.cpu-claim_uid-1.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *spec);
}

TEST_F(ClaimServiceTest, GpuAndCpuDriversShareTheNode) {
  const topology::Topology& topo = Load(kDgx);
  const DriverSetup cpu = CpuSetup(topo, Mode::kNuma);  // cpudevnuma000: CPUs 0-1
  const DriverSetup gpu = GpuSetup(topo);
  Start(cpu, topo);
  Start(gpu, topo);
  const ClaimRef both = Add(
      "ml", "train", "uid-t",
      {Result("cpus", "cpudevnuma000", "2"), Result("gpus", "gpu-0000-34-00-0", "", kGpuDriver)});
  const ClaimOutcome c = PrepareOk(both, 0);
  const ClaimOutcome g = PrepareOk(both, 1);
  ASSERT_EQ(c.devices.size(), 1u);
  ASSERT_EQ(g.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].cdi_device_ids,
            std::vector<std::string>{"dra.cpu/claim=uid-t-cpudevnuma000"});
  EXPECT_EQ(g.devices[0].cdi_device_ids,
            std::vector<std::string>{"gpu.topodra.io/claim=uid-t-gpu-0000-34-00-0"});
  EXPECT_EQ(HeldCpus("uid-t").ToString(), "0-1");
  ASSERT_NE(Held(kGpuDriver, "uid-t"), std::nullopt);
  EXPECT_EQ(Held(kGpuDriver, "uid-t")->gpus, std::set<std::string>{"0000:34:00.0"});
  absl::StatusOr<cdi::Spec> spec = cdi_->Read("gpu.topodra.io-claim_uid-t.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->devices.size(), 1u);
  EXPECT_EQ(spec->devices[0].container_edits.device_nodes,
            gpu.gpus.at("gpu-0000-34-00-0").device_nodes);

  // The GPU is taken for another claim.
  const ClaimRef second =
      Add("ml", "eval", "uid-e", {Result("gpus", "gpu-0000-34-00-0", "", kGpuDriver)});
  std::map<std::string, ClaimOutcome> out = service(1).Prepare({second});
  EXPECT_THAT(out["uid-e"].error,
              HasSubstr("claim ml/eval request \"gpus\": GPU \"gpu-0000-34-00-0\" (0000:34:00.0) "
                        "is already prepared for claim ml/train (uid uid-t)"));

  // Each driver reconciles and unprepares its own part only.
  absl::StatusOr<ClaimService::Reconciled> r = service(0).ReconcileCdi();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->removed, 0);
  UnprepareOk(both, 0);
  EXPECT_FALSE(CdiExists("dra.cpu-claim_uid-t.json"));
  EXPECT_TRUE(CdiExists("gpu.topodra.io-claim_uid-t.json"));
  ASSERT_NE(Held(kGpuDriver, "uid-t"), std::nullopt);

  // The GPU part survives a restart, device nodes and all.
  Restart({{cpu, kDgx}, {gpu, kDgx}});
  EXPECT_EQ(PrepareOk(both, 1).devices, g.devices);
  std::filesystem::remove(cdi_->PathOf("gpu.topodra.io-claim_uid-t.json"));
  r = service(1).ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 1);
  absl::StatusOr<cdi::Spec> back = cdi_->Read("gpu.topodra.io-claim_uid-t.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *spec);
  UnprepareOk(both, 1);
  EXPECT_TRUE(ledger_->Copy().Empty());
  EXPECT_THAT(CdiFiles(), IsEmpty());
}

TEST_F(ClaimServiceTest, UpdateAppliesToLaterPrepares) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef c1 =
      Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "2")}, {Config({}, Cpuset("0,8"))});
  PrepareOk(c1);
  // CPUs 0-7 become reserved: the device shrinks, the prepared claim keeps its CPUs.
  service().Update(CpuSetup(topo, Mode::kNuma, CpuSet::Range(0, 7)), topo);
  EXPECT_EQ(HeldCpus("uid-1").ToString(), "0,8");
  const ClaimRef c2 = Add("default", "c2", "uid-2", {Result("cpus", kNuma0, "7")});
  PrepareOk(c2);
  EXPECT_EQ(HeldCpus("uid-2").ToString(), "9-15");
  const ClaimRef c3 =
      Add("default", "c3", "uid-3", {Result("cpus", kNuma0, "1")}, {Config({}, Cpuset("1"))});
  EXPECT_THAT(PrepareError(c3), HasSubstr("CPU 1 is reserved (--reserved-cpus)"));
}

TEST_F(ClaimServiceTest, InFlightClaimIsNotPreparedOrUnpreparedTwice) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef ref = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "2")});
  // Another call has planned it (Preparing) and not finished yet.
  state::Allocation busy = HeldBy(kCpuDriver, "uid-1", "default", "c1", CpuSet{2, 10});
  busy.phase = state::Phase::kPreparing;
  absl::StatusOr<state::Ledger::Txn> planning =
      ledger_->Reserve([&](state::Ledger::Edit& edit) { return edit.Add(busy); });
  ASSERT_TRUE(planning.ok()) << planning.status();
  EXPECT_THAT(
      PrepareError(ref),
      HasSubstr("claim default/c1: a concurrent call is preparing or unpreparing it; retry"));
  std::map<std::string, std::string> out = service().Unprepare({ref});
  EXPECT_THAT(
      out["uid-1"],
      HasSubstr("claim default/c1: a concurrent call is preparing or unpreparing it; retry"));
  EXPECT_EQ(source_.gets(), 0);
  ASSERT_NE(Held(kCpuDriver, "uid-1"), std::nullopt);
  EXPECT_EQ(Held(kCpuDriver, "uid-1")->phase, state::Phase::kPreparing);
  EXPECT_EQ(store_->records(), 0);
}

TEST_F(ClaimServiceTest, CorruptStoredAnswerIsReported) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef ref = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "2")});
  state::Allocation bad = HeldBy(kCpuDriver, "uid-1", "default", "c1", CpuSet{2, 10});
  bad.answer = json{{"devices", "not a list"}};
  absl::StatusOr<state::Ledger::Txn> added =
      ledger_->Reserve([&](state::Ledger::Edit& edit) { return edit.Add(bad); });
  ASSERT_TRUE(added.ok()) << added.status();
  ASSERT_TRUE(ledger_->Commit(*added).ok());
  std::map<std::string, ClaimOutcome> out = service().Prepare({ref});
  EXPECT_EQ(out["uid-1"].error, "claim default/c1: stored answer: no devices list");
  EXPECT_THAT(out["uid-1"].devices, IsEmpty());
  EXPECT_EQ(source_.gets(), 0);
  EXPECT_EQ(HeldCpus("uid-1").ToString(), "2,10");  // still held: nothing is given away
}

TEST_F(ClaimServiceTest, CdiWriteFailureHoldsNothing) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  // The CDI directory cannot be created: a file is in the way.
  std::ofstream(cdi_->dir()) << "not a directory";
  const ClaimRef ref =
      Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "2")}, {Config({}, Cpuset("2,10"))});
  const std::string error = PrepareError(ref);
  EXPECT_THAT(error, HasSubstr("claim default/c1: "));
  EXPECT_THAT(error, HasSubstr(cdi_->dir()));
  EXPECT_TRUE(ledger_->Copy().Empty());
  EXPECT_EQ(store_->records(), 0);
  // Fixed: the same CPUs are there to take.
  std::filesystem::remove(cdi_->dir());
  PrepareOk(ref);
  EXPECT_EQ(HeldCpus("uid-1").ToString(), "2,10");
}

TEST_F(ClaimServiceTest, CdiRemoveFailureKeepsTheClaimPrepared) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef ref = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "2")});
  const ClaimOutcome first = PrepareOk(ref);
  const std::string path = cdi_->PathOf("dra.cpu-claim_uid-1.json");
  // Something the unlink cannot remove sits where the spec was.
  std::filesystem::remove(path);
  std::filesystem::create_directories(path + "/inside");
  std::map<std::string, std::string> out = service().Unprepare({ref});
  EXPECT_THAT(out["uid-1"], HasSubstr("claim default/c1: "));
  EXPECT_THAT(out["uid-1"], HasSubstr(path));
  // Still prepared, still holding its CPUs; a repeated prepare cannot put its CDI file back
  // while the directory is there, and says so.
  ASSERT_NE(Held(kCpuDriver, "uid-1"), std::nullopt);
  EXPECT_EQ(Held(kCpuDriver, "uid-1")->phase, state::Phase::kPrepared);
  EXPECT_THAT(PrepareError(ref),
              AllOf(HasSubstr("claim default/c1: prepared, but its CDI file cannot be written: "),
                    HasSubstr(path)));
  std::filesystem::remove_all(path);
  EXPECT_EQ(PrepareOk(ref).devices, first.devices);
  EXPECT_TRUE(std::filesystem::is_regular_file(path));
  UnprepareOk(ref);
  EXPECT_TRUE(ledger_->Copy().Empty());
}

// Files may not grow past their current size (RLIMIT_FSIZE): the journal, already the largest
// file, cannot take another record, while the small CDI specs are still written.
class JournalFull {
 public:
  explicit JournalFull(const std::string& journal) {
    ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    struct rlimit limit = saved_;
    limit.rlim_cur = std::filesystem::file_size(journal);
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~JournalFull() { ::setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  struct rlimit saved_;
};

TEST_F(ClaimServiceTest, JournalFailureUndoesThePrepare) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  PrepareOk(Add("default", "a", "uid-a", {Result("cpus", kNuma0, "2")}));
  PrepareOk(Add("default", "b", "uid-b", {Result("cpus", kNuma0, "2")}));
  const ClaimRef ref =
      Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "2")}, {Config({}, Cpuset("7,15"))});
  const int64_t records = store_->records();
  {
    JournalFull full(store_->journal_path());
    const std::string error = PrepareError(ref);
    EXPECT_THAT(error, HasSubstr("claim default/c1: record the allocation: "));
    EXPECT_THAT(error, HasSubstr(store_->journal_path()));
  }
  EXPECT_EQ(Held(kCpuDriver, "uid-1"), std::nullopt);
  EXPECT_FALSE(CdiExists("dra.cpu-claim_uid-1.json"));
  EXPECT_EQ(store_->records(), records);
  // The journal took nothing: it still opens, without the failed claim.
  const state::State in_memory = ledger_->Copy();
  Restart({{CpuSetup(topo, Mode::kNuma), k16}});
  EXPECT_EQ(ledger_->Copy(), in_memory);
  PrepareOk(ref);
  EXPECT_EQ(HeldCpus("uid-1").ToString(), "7,15");
}

TEST_F(ClaimServiceTest, JournalFailureKeepsTheClaimPreparedOnUnprepare) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  PrepareOk(Add("default", "a", "uid-a", {Result("cpus", kNuma0, "2")}));
  const ClaimRef ref =
      Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "2")}, {Config({}, Cpuset("7,15"))});
  const ClaimOutcome first = PrepareOk(ref);
  {
    JournalFull full(store_->journal_path());
    std::map<std::string, std::string> out = service().Unprepare({ref});
    EXPECT_THAT(out["uid-1"], HasSubstr("claim default/c1: record the release: "));
  }
  // Still held: the kubelet retries the unprepare.
  ASSERT_NE(Held(kCpuDriver, "uid-1"), std::nullopt);
  EXPECT_EQ(Held(kCpuDriver, "uid-1")->phase, state::Phase::kPrepared);
  EXPECT_EQ(HeldCpus("uid-1").ToString(), "7,15");
  UnprepareOk(ref);
  EXPECT_EQ(Held(kCpuDriver, "uid-1"), std::nullopt);
  Restart({{CpuSetup(topo, Mode::kNuma), k16}});
  EXPECT_EQ(Held(kCpuDriver, "uid-1"), std::nullopt);
  ASSERT_NE(Held(kCpuDriver, "uid-a"), std::nullopt);
}

// After an unprepare that failed at its journal record, the claim is Prepared again and a
// repeated prepare replays its answer: the CDI spec that answer names must be there.
TEST_F(ClaimServiceTest, FailedUnprepareKeepsTheCdiSpecOfTheStillPreparedClaim) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  PrepareOk(Add("default", "a", "uid-a", {Result("cpus", kNuma0, "2")}));
  const ClaimRef ref =
      Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "2")}, {Config({}, Cpuset("7,15"))});
  const ClaimOutcome first = PrepareOk(ref);
  absl::StatusOr<cdi::Spec> spec = cdi_->Read("dra.cpu-claim_uid-1.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  {
    JournalFull full(store_->journal_path());
    EXPECT_NE(service().Unprepare({ref})["uid-1"], "");
  }
  EXPECT_EQ(PrepareOk(ref).devices, first.devices);  // replayed: the kubelet is told it is ready
  absl::StatusOr<cdi::Spec> back = cdi_->Read("dra.cpu-claim_uid-1.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *spec);
}

// Enough changes for the journal to be compacted while claims come and go concurrently: what is
// on disk afterwards is still what is in memory.
TEST_F(ClaimServiceTest, CompactionUnderLoadKeepsTheState) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  Start(setup, topo);
  const ClaimRef keep = Add("default", "keep", "uid-keep", {Result("cpus", kNuma0, "2")},
                            {Config({}, Cpuset("0,8"))});
  const ClaimOutcome kept = PrepareOk(keep);
  constexpr int kThreads = 4;
  constexpr int kCycles = 140;  // 4 x 140 x 2 records: past state::kMinCompactRecords
  std::vector<ClaimRef> refs;
  for (int t = 0; t < kThreads; ++t) {
    refs.push_back(Add("default", absl::StrCat("w", t), absl::StrCat("uid-w", t),
                       {Result("cpus", kNuma0, "2")}));
  }
  std::atomic<int> failures{0};
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kCycles; ++i) {
          if (!service().Prepare({refs[t]})[refs[t].uid].error.empty()) ++failures;
          if (!service().Unprepare({refs[t]})[refs[t].uid].empty()) ++failures;
        }
        // Each worker ends prepared.
        if (!service().Prepare({refs[t]})[refs[t].uid].error.empty()) ++failures;
      });
    }
    for (std::thread& t : threads) t.join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(store_->records(), state::kMinCompactRecords);  // it was compacted
  const state::State in_memory = ledger_->Copy();
  EXPECT_EQ(in_memory.Size(), kThreads + 1);
  Restart({{setup, k16}});
  EXPECT_EQ(ledger_->Copy(), in_memory);
  EXPECT_EQ(PrepareOk(keep).devices, kept.devices);
  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 0);
  EXPECT_EQ(r->removed, 0);
  EXPECT_EQ(CdiFiles().size(), static_cast<size_t>(kThreads + 1));
}

// ---------------------------------------------------------------------------------------------
// Many callers at once.

// 16 claims on a machine-grouped 16-CPU node, claim i naming CPUs i and i+1 (mod 16): every
// claim overlaps both neighbours. Whatever the interleaving, no CPU may go to two claims, and a
// claim may fail only because a neighbour that succeeded holds its CPUs.
// Prepares and unprepares of the same claims racing each other: whatever interleaving, the journal
// must replay to exactly the state in memory (no claim brought back by a late record, no CPU held
// twice on replay).
TEST_F(ClaimServiceTest, RacingPrepareAndUnprepareKeepTheJournalConsistent) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kMachine);
  Start(setup, topo);
  constexpr int kClaims = 6;
  std::vector<ClaimRef> refs;
  for (int i = 0; i < kClaims; ++i) {
    refs.push_back(Add("default", absl::StrCat("c", i), absl::StrCat("uid-", i),
                       {Result("cpus", "cpudevmachine", "2")},
                       {Config({}, Cpuset(absl::StrCat(i, "-", i + 1)))}));
  }
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(round * 100 + t);
        for (int op = 0; op < 150; ++op) {
          const ClaimRef& ref = refs[rng() % kClaims];
          if (rng() % 2) {
            (void)service().Prepare({ref});
          } else {
            (void)service().Unprepare({ref});
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    const state::State in_memory = ledger_->Copy();
    Restart({{setup, k16}});
    {
      const state::State reloaded = ledger_->Copy();
      ASSERT_EQ(reloaded.Size(), in_memory.Size());
      for (const auto& [owner, a] : in_memory.allocations()) {
        const state::Allocation* back = reloaded.Find(owner);
        ASSERT_NE(back, nullptr) << owner;
        EXPECT_EQ(back->cpus, a.cpus) << owner;
      }
    }
  }
}

TEST_F(ClaimServiceTest, ConcurrentOverlappingCpusetsNeverShareACpu) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kMachine), topo);
  constexpr int kClaims = 16;
  std::vector<ClaimRef> refs;
  std::vector<CpuSet> wanted;
  for (int i = 0; i < kClaims; ++i) {
    const CpuSet cpus{i, (i + 1) % kClaims};
    wanted.push_back(cpus);
    refs.push_back(Add("default", absl::StrCat("c", i), absl::StrCat("uid-", i),
                       {Result("cpus", "cpudevmachine", "2")},
                       {Config({}, Cpuset(cpus.ToString()))}));
  }
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::vector<ClaimOutcome> outcomes(kClaims);
    {
      std::latch go(kClaims);
      std::vector<std::thread> threads;
      for (int i = 0; i < kClaims; ++i) {
        threads.emplace_back([&, i] {
          go.arrive_and_wait();
          std::map<std::string, ClaimOutcome> out = service().Prepare({refs[i]});
          outcomes[i] = out[refs[i].uid];
        });
      }
      for (std::thread& t : threads) t.join();
    }
    std::set<int> ok;
    CpuSet held;
    int held_size = 0;
    for (int i = 0; i < kClaims; ++i) {
      if (!outcomes[i].error.empty()) continue;
      ok.insert(i);
      EXPECT_EQ(HeldCpus(refs[i].uid), wanted[i]) << i;
      EXPECT_TRUE(CdiExists(CdiFileName(kCpuDriver, refs[i].uid))) << i;
      EXPECT_FALSE(held.Intersects(wanted[i])) << "claim " << i << " shares a CPU";
      held |= wanted[i];
      held_size += wanted[i].Size();
    }
    // No CPU twice, and the state holds exactly the successful claims.
    EXPECT_EQ(held_size, held.Size());
    EXPECT_EQ(ledger_->Copy().HeldCpus(), held);
    EXPECT_EQ(ledger_->Copy().Size(), static_cast<int>(ok.size()));
    for (int cpu : held) {
      std::optional<std::string> holder = ledger_->Copy().HolderOfCpu(cpu);
      ASSERT_TRUE(holder.has_value()) << cpu;
      int holders = 0;
      for (int i : ok) holders += wanted[i].Contains(cpu) ? 1 : 0;
      EXPECT_EQ(holders, 1) << cpu;
    }
    // A maximal set of non-overlapping claims: at least 16/3 of them.
    EXPECT_GE(ok.size(), 6u);
    EXPECT_LE(ok.size(), 8u);
    for (int i = 0; i < kClaims; ++i) {
      if (ok.contains(i)) continue;
      EXPECT_TRUE(outcomes[i].devices.empty());
      EXPECT_TRUE(wanted[i].Intersects(held))
          << "claim " << i << " failed for nothing: " << outcomes[i].error;
      const int left = (i + kClaims - 1) % kClaims;
      const int right = (i + 1) % kClaims;
      const bool names_holder =
          (ok.contains(left) &&
           outcomes[i].error.find(absl::StrCat("claim default/c", left, " (uid uid-", left, ")")) !=
               std::string::npos) ||
          (ok.contains(right) &&
           outcomes[i].error.find(absl::StrCat("claim default/c", right, " (uid uid-", right,
                                               ")")) != std::string::npos);
      EXPECT_TRUE(names_holder) << "claim " << i << ": " << outcomes[i].error;
      EXPECT_FALSE(CdiExists(CdiFileName(kCpuDriver, refs[i].uid))) << i;
    }
    // What is in memory is what is on disk.
    const state::State in_memory = ledger_->Copy();
    Restart({{CpuSetup(topo, Mode::kMachine), k16}});
    EXPECT_EQ(ledger_->Copy(), in_memory);

    // Everything released at once, also concurrently.
    {
      std::vector<std::thread> threads;
      std::vector<std::string> errors(kClaims);
      for (int i = 0; i < kClaims; ++i) {
        threads.emplace_back([&, i] { errors[i] = service().Unprepare({refs[i]})[refs[i].uid]; });
      }
      for (std::thread& t : threads) t.join();
      for (int i = 0; i < kClaims; ++i) EXPECT_EQ(errors[i], "") << i;
    }
    EXPECT_TRUE(ledger_->Copy().Empty());
    EXPECT_THAT(CdiFiles(), IsEmpty());
  }
}

// 16 claims for 2 CPUs each from one 16-CPU NUMA device: exactly 8 fit, and they split it.
TEST_F(ClaimServiceTest, ConcurrentGroupedClaimsGetDisjointCpus) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  constexpr int kClaims = 16;
  std::vector<ClaimRef> refs;
  for (int i = 0; i < kClaims; ++i) {
    refs.push_back(Add("default", absl::StrCat("g", i), absl::StrCat("uid-g", i),
                       {Result("cpus", kNuma0, "2")}));
  }
  std::vector<ClaimOutcome> outcomes(kClaims);
  {
    std::latch go(kClaims);
    std::vector<std::thread> threads;
    for (int i = 0; i < kClaims; ++i) {
      threads.emplace_back([&, i] {
        go.arrive_and_wait();
        outcomes[i] = service().Prepare({refs[i]})[refs[i].uid];
      });
    }
    for (std::thread& t : threads) t.join();
  }
  CpuSet all;
  int ok = 0;
  for (int i = 0; i < kClaims; ++i) {
    if (!outcomes[i].error.empty()) {
      EXPECT_THAT(outcomes[i].error,
                  HasSubstr(absl::StrCat("claim default/g", i,
                                         " request \"cpus\": 2 CPUs wanted "
                                         "from device \"cpudevnuma000\" but only 0 are free "
                                         "there (none)")));
      continue;
    }
    ++ok;
    const CpuSet cpus = HeldCpus(refs[i].uid);
    EXPECT_EQ(cpus.Size(), 2) << i;
    EXPECT_EQ(topo.SmtSiblings(*cpus.First()), cpus) << i << ": not one core: " << cpus.ToString();
    EXPECT_FALSE(all.Intersects(cpus)) << i << ": " << cpus.ToString() << " vs " << all.ToString();
    all |= cpus;
    absl::StatusOr<cdi::Spec> spec = cdi_->Read(CdiFileName(kCpuDriver, refs[i].uid));
    ASSERT_TRUE(spec.ok()) << spec.status();
    std::string safe_uid = refs[i].uid;
    std::replace(safe_uid.begin(), safe_uid.end(), '-', '_');
    EXPECT_EQ(spec->container_edits.env,
              (std::vector<std::string>{"DRA_CPUSET_" + refs[i].uid + "=" + cpus.ToString(),
                                        "DRA_CPUSET_" + safe_uid + "=" + cpus.ToString()}));
  }
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(all.ToString(), "0-15");
  EXPECT_EQ(ledger_->Copy().HeldCpus(), all);
}

// The kubelet retrying one claim while the first call is still running.
TEST_F(ClaimServiceTest, ConcurrentPreparesOfOneClaim) {
  const topology::Topology& topo = Load(k16);
  Start(CpuSetup(topo, Mode::kNuma), topo);
  const ClaimRef ref = Add("default", "c1", "uid-1", {Result("cpus", kNuma0, "4")});
  constexpr int kCalls = 8;
  std::vector<ClaimOutcome> outcomes(kCalls);
  {
    std::latch go(kCalls);
    std::vector<std::thread> threads;
    for (int i = 0; i < kCalls; ++i) {
      threads.emplace_back([&, i] {
        go.arrive_and_wait();
        outcomes[i] = service().Prepare({ref})["uid-1"];
      });
    }
    for (std::thread& t : threads) t.join();
  }
  const ClaimOutcome settled = PrepareOk(ref);
  for (int i = 0; i < kCalls; ++i) {
    if (outcomes[i].error.empty()) {
      EXPECT_EQ(outcomes[i].devices, settled.devices) << i;
    } else {
      EXPECT_THAT(outcomes[i].error,
                  HasSubstr("claim default/c1: a concurrent call is preparing or unpreparing it; "
                            "retry"));
    }
  }
  EXPECT_EQ(ledger_->Copy().Size(), 1);
  EXPECT_EQ(HeldCpus("uid-1").Size(), 4);
  EXPECT_EQ(CdiFiles(), std::set<std::string>{"dra.cpu-claim_uid-1.json"});
}

}  // namespace
}  // namespace topodra::prepare

namespace topodra::prepare {
namespace {

using namespace topodra::prepare::testing;  // NOLINT: test helpers

// Device metadata (device_metadata.h) written and removed inside the prepare and unprepare
// transactions: a write that fails undoes everything, as for the CDI spec.
class ClaimServiceMetadataTest : public ClaimServiceTest {
 protected:
  DriverSetup MetadataSetup(const topology::Topology& topo) {
    node::InventoryOptions o = Options(Mode::kNuma);
    o.plugins_dir = dir_ + "/plugins";
    o.device_metadata = true;
    return node::Inventory::Build(o, topo, {}).CpuSetup();
  }
  std::string HostFile(const std::string& name) {
    return absl::StrCat(dir_, "/plugins/dra.cpu/dra-device-metadata/default_", name,
                        "/cpus/metadata.json");
  }
};

TEST_F(ClaimServiceMetadataTest, PrepareWritesUnprepareRemovesAndAFailedWriteUndoesAll) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = MetadataSetup(topo);
  Start(setup, topo);
  const ClaimRef ok = Add("default", "m1", "uid-m1", {Result("cpus", kNuma0, "4")});
  const ClaimOutcome out = PrepareOk(ok);
  ASSERT_EQ(out.devices.size(), 1u);
  EXPECT_EQ(out.devices[0].cdi_device_ids.back(), "dra.cpu/metadata=uid-m1_cpus");
  EXPECT_TRUE(std::filesystem::exists(HostFile("m1")));
  EXPECT_TRUE(CdiExists("dra.cpu_metadata_uid-m1_cpus.json"));
  UnprepareOk(ok);
  EXPECT_FALSE(std::filesystem::exists(HostFile("m1")));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/plugins/dra.cpu/dra-device-metadata/default_m1"));
  EXPECT_THAT(CdiFiles(), IsEmpty());

  // The claim's directory cannot be made (a file is in its place): the claim fails, its CDI
  // spec is removed again and its CPUs stay free.
  std::filesystem::create_directories(dir_ + "/plugins/dra.cpu/dra-device-metadata");
  std::ofstream(dir_ + "/plugins/dra.cpu/dra-device-metadata/default_m2") << "in the way";
  const ClaimRef bad = Add("default", "m2", "uid-m2", {Result("cpus", kNuma0, "16")});
  EXPECT_THAT(PrepareError(bad),
              AllOf(HasSubstr("claim default/m2: write device metadata"), HasSubstr("default_m2")));
  EXPECT_FALSE(Held(kCpuDriver, "uid-m2").has_value());
  EXPECT_THAT(CdiFiles(), IsEmpty());
  const ClaimRef all = Add("default", "m3", "uid-m3", {Result("cpus", kNuma0, "16")});
  PrepareOk(all);  // all 16 CPUs: nothing of m2 is held
}

// Unprepare takes the files to remove from what prepare remembered, or, for a claim prepared
// before the start (nothing remembered), from the stored text: both remove the same files.
TEST_F(ClaimServiceMetadataTest, UnprepareRemovesTheSameFilesRememberedOrReadBack) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = MetadataSetup(topo);
  Start(setup, topo);
  const ClaimRef before = Add("default", "b1", "uid-b1", {Result("cpus", kNuma0, "2")});
  const ClaimRef kept = Add("default", "k1", "uid-k1", {Result("cpus", kNuma0, "2")});
  PrepareOk(before);
  PrepareOk(kept);
  Restart({{setup, k16}});
  const ClaimRef after = Add("default", "a1", "uid-a1", {Result("cpus", kNuma0, "2")});
  PrepareOk(after);
  const std::set<std::string> all = {
      "dra.cpu-claim_uid-a1.json",         "dra.cpu-claim_uid-b1.json",
      "dra.cpu-claim_uid-k1.json",         "dra.cpu_metadata_uid-a1_cpus.json",
      "dra.cpu_metadata_uid-b1_cpus.json", "dra.cpu_metadata_uid-k1_cpus.json"};
  ASSERT_EQ(CdiFiles(), all);
  const std::string root = dir_ + "/plugins/dra.cpu/dra-device-metadata/";
  for (const auto& [ref, files] : std::vector<std::pair<ClaimRef, std::set<std::string>>>{
           {before,  // prepared before the restart: read back
            {"dra.cpu-claim_uid-a1.json", "dra.cpu-claim_uid-k1.json",
             "dra.cpu_metadata_uid-a1_cpus.json", "dra.cpu_metadata_uid-k1_cpus.json"}},
           {after,  // remembered
            {"dra.cpu-claim_uid-k1.json", "dra.cpu_metadata_uid-k1_cpus.json"}}}) {
    SCOPED_TRACE(ref.name);
    UnprepareOk(ref);
    EXPECT_EQ(CdiFiles(), files);
    EXPECT_FALSE(std::filesystem::exists(root + "default_" + ref.name));
    EXPECT_FALSE(Held(kCpuDriver, ref.uid).has_value());
  }
  EXPECT_TRUE(std::filesystem::exists(HostFile("k1")));
  // Prepared again after its unprepare, a claim is remembered again with its new files.
  PrepareOk(after);
  UnprepareOk(after);
  EXPECT_EQ(CdiFiles(), (std::set<std::string>{"dra.cpu-claim_uid-k1.json",
                                               "dra.cpu_metadata_uid-k1_cpus.json"}));
}

TEST_F(ClaimServiceMetadataTest, ReplayAndStartRestoreTheFilesAndRemoveLeftovers) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = MetadataSetup(topo);
  Start(setup, topo);
  const ClaimRef ref = Add("default", "r1", "uid-r1", {Result("cpus", kNuma0, "2")});
  const ClaimOutcome first = PrepareOk(ref);
  std::ifstream in(HostFile("r1"));
  const std::string content((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(content.empty());

  // A prepare asked again rewrites a file changed meanwhile.
  std::ofstream(HostFile("r1")) << "changed";
  EXPECT_EQ(PrepareOk(ref).devices, first.devices);
  std::ifstream again(HostFile("r1"));
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), {}), content);

  // Start: a lost spec and host file come back; a leftover of an unknown claim goes.
  std::filesystem::remove(HostFile("r1"));
  std::filesystem::remove(cdi_->PathOf("dra.cpu_metadata_uid-r1_cpus.json"));
  std::filesystem::create_directories(std::filesystem::path(HostFile("gone")).parent_path());
  std::ofstream(HostFile("gone")) << "{}";
  Restart({{setup, k16}});
  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 2);
  EXPECT_EQ(r->removed, 1);
  std::ifstream restored(HostFile("r1"));
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(restored)), {}), content);
  EXPECT_TRUE(CdiExists("dra.cpu_metadata_uid-r1_cpus.json"));
  EXPECT_EQ(cdi_->Read("dra.cpu_metadata_uid-r1_cpus.json")->cdi_version, "0.5.0");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/plugins/dra.cpu/dra-device-metadata/default_gone"));
  // Nothing to do the second time.
  r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->written + r->removed, 0);
}

// A state written by a topodra of state version 3, whose records keep each metadata file's text
// ("content") where version 4 keeps its object ("document"): a snapshot holding one claim and a
// journal record putting another. Start restores both claims' files from the stored text as it
// is and rewrites the snapshot as version 4 with the records unchanged (StateStore::Open), and
// the files stay the same through a compaction, another start and the unprepare.
TEST_F(ClaimServiceMetadataTest, AVersion3StateStartsRestoresAndIsRewrittenAsVersion4) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = MetadataSetup(topo);
  Start(setup, topo);
  const ClaimRef r1 = Add("default", "r1", "uid-r1", {Result("cpus", kNuma0, "2")});
  const ClaimRef r2 = Add("default", "r2", "uid-r2", {Result("cpus", kNuma0, "2")});
  PrepareOk(r1);
  PrepareOk(r2);
  auto contents = [&](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const std::string content1 = contents(HostFile("r1"));
  const std::string content2 = contents(HostFile("r2"));
  ASSERT_FALSE(content1.empty());
  // Each claim's record as version 3 wrote it: the text in place of the object.
  auto as_version3 = [&](const ClaimRef& ref) {
    state::Allocation a = *Held(kCpuDriver, ref.uid);
    json cdi = a.cdi.Parse();
    for (json& f : cdi["metadata"]) {
      EXPECT_TRUE(f.contains("document"));
      f["content"] = *MetadataContentOf(f["document"]);
      f.erase("document");
    }
    a.cdi = cdi;
    return a;
  };
  const state::Allocation old1 = as_version3(r1);
  const state::Allocation old2 = as_version3(r2);
  services_.clear();
  ledger_.reset();
  const std::string path = dir_ + "/state/checkpoint.json";
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".journal");
  {
    absl::StatusOr<state::StateStore::Opened> fresh = state::StateStore::Open(path);
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    state::State first;
    ASSERT_TRUE(first.Add(old1).ok());
    ASSERT_TRUE(fresh->store->Put(old1).ok());
    ASSERT_TRUE(fresh->store->Compact(first).ok());
    ASSERT_TRUE(fresh->store->Put(old2).ok());
  }
  // The checksum covers the payload only: the snapshot is version 3's file.
  std::string snapshot = contents(path);
  ASSERT_TRUE(absl::EndsWith(snapshot, ",\"version\":4}\n")) << snapshot;
  snapshot.replace(snapshot.size() - 3, 1, "3");
  std::ofstream(path, std::ios::trunc) << snapshot;
  std::filesystem::remove(HostFile("r1"));
  std::ofstream(HostFile("r2"), std::ios::trunc) << "damaged";

  Restart({{setup, k16}});
  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 2);
  EXPECT_EQ(contents(HostFile("r1")), content1);
  EXPECT_EQ(contents(HostFile("r2")), content2);
  EXPECT_EQ(Held(kCpuDriver, "uid-r1")->cdi, old1.cdi);  // kept as it was
  EXPECT_EQ(Held(kCpuDriver, "uid-r2")->cdi, old2.cdi);
  EXPECT_TRUE(absl::EndsWith(contents(path), ",\"version\":4}\n"));
  EXPECT_EQ(contents(path + ".journal"), "");
  ASSERT_TRUE(store_->Compact(ledger_->Copy()).ok());
  const std::string rewritten = contents(path);
  EXPECT_TRUE(absl::EndsWith(rewritten, ",\"version\":4}\n"));
  EXPECT_TRUE(absl::StrContains(rewritten, "\"content\":")) << rewritten;

  Restart({{setup, k16}});
  r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written + r->removed, 0);
  EXPECT_EQ(contents(HostFile("r1")), content1);
  EXPECT_EQ(Held(kCpuDriver, "uid-r1")->cdi, old1.cdi);
  UnprepareOk(r1);
  EXPECT_FALSE(std::filesystem::exists(HostFile("r1")));
  EXPECT_FALSE(CdiExists("dra.cpu_metadata_uid-r1_cpus.json"));
  // Prepared again, the claim's record is version 4's, the file the same.
  PrepareOk(r1);
  EXPECT_EQ(contents(HostFile("r1")), content1);
  EXPECT_FALSE(absl::StrContains(Held(kCpuDriver, "uid-r1")->cdi.text(), "\"content\""));
}

// The check DraDrivers starts in the background as a driver starts: the same repairs and removals
// as ReconcileCdi, on a thread of its own.
class ClaimServiceFileCheckTest : public ClaimServiceMetadataTest {
 protected:
  std::string Contents(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  // Every file of the claims, by path: its content.
  std::map<std::string, std::string> Snapshot(const std::vector<std::string>& names) {
    std::map<std::string, std::string> out;
    for (const std::string& name : names) {
      for (const std::string& path :
           {cdi_->PathOf(absl::StrCat("dra.cpu-claim_uid-", name, ".json")),
            cdi_->PathOf(absl::StrCat("dra.cpu_metadata_uid-", name, "_cpus.json")),
            HostFile(name)}) {
        out[path] = Contents(path);
      }
    }
    return out;
  }
  // The service started on k16 with device metadata on and default/<name> (uid `uid`, two CPUs of
  // NUMA node 0) prepared: the setup, for a restart.
  DriverSetup StartWithOnePrepared(const std::string& name, const std::string& uid) {
    const topology::Topology& topo = Load(k16);
    const DriverSetup setup = MetadataSetup(topo);
    Start(setup, topo);
    PrepareOk(Add("default", name, uid, {Result("cpus", kNuma0, "2")}));
    return setup;
  }
  // Starts the check in the background; the returned function waits for its outcome.
  std::function<absl::StatusOr<ClaimService::Reconciled>()> StartCheck() {
    auto done = std::make_shared<std::promise<absl::StatusOr<ClaimService::Reconciled>>>();
    service().StartFileCheck(
        [done](const absl::StatusOr<ClaimService::Reconciled>& r) { done->set_value(r); });
    return [done] { return done->get_future().get(); };
  }
};

TEST_F(ClaimServiceFileCheckTest, RepairsDamagedFilesAndRemovesStaleOnesAfterStart) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = MetadataSetup(topo);
  Start(setup, topo);
  const ClaimRef r1 = Add("default", "r1", "uid-r1", {Result("cpus", kNuma0, "2")});
  const ClaimRef r2 = Add("default", "r2", "uid-r2", {Result("cpus", kNuma0, "2")});
  const ClaimRef s1 = Add("default", "s1", "uid-s1", {Result("cpus", kNuma0, "2")});
  PrepareOk(r1);
  PrepareOk(r2);
  PrepareOk(s1);
  const std::map<std::string, std::string> good = Snapshot({"r1", "r2"});
  // s1's files outlive its unprepare (a crash after its journal record, before the removals).
  const std::map<std::string, std::string> stale = Snapshot({"s1"});
  UnprepareOk(s1);
  for (const auto& [path, content] : stale) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << content;
  }
  // Damage: a truncated CDI spec, a changed metadata spec, a lost host file.
  std::ofstream(cdi_->PathOf("dra.cpu-claim_uid-r1.json")) << "{\"cdiVersion\":";
  std::ofstream(cdi_->PathOf("dra.cpu_metadata_uid-r2_cpus.json")) << "{}";
  std::filesystem::remove(HostFile("r1"));

  Restart({{setup, k16}});
  absl::StatusOr<ClaimService::Reconciled> r = StartCheck()();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 3);
  EXPECT_EQ(r->removed, 3);  // s1's CDI spec, metadata spec and host file
  EXPECT_EQ(Snapshot({"r1", "r2"}), good);
  EXPECT_FALSE(CdiExists("dra.cpu-claim_uid-s1.json"));
  EXPECT_FALSE(CdiExists("dra.cpu_metadata_uid-s1_cpus.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/plugins/dra.cpu/dra-device-metadata/default_s1"));
  EXPECT_EQ(service().FileCheckProblem(), "");
  // The check has ended: calls go on as before, and a second check finds nothing to do.
  UnprepareOk(r2);
  r = StartCheck()();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written + r->removed, 0);
}

// The check writes a claim's host files before its metadata CDI specs: when a host file cannot be
// written, no metadata spec mounts it, while the claim's own spec is still put back.
TEST_F(ClaimServiceFileCheckTest, NoMetadataSpecIsWrittenBeforeItsHostFile) {
  const DriverSetup setup = StartWithOnePrepared("r1", "uid-r1");
  const std::string claim_dir = dir_ + "/plugins/dra.cpu/dra-device-metadata/default_r1";
  ASSERT_TRUE(std::filesystem::exists(HostFile("r1")));
  // All its files lost, and a file in the place of its metadata directory.
  std::filesystem::remove(cdi_->PathOf("dra.cpu-claim_uid-r1.json"));
  std::filesystem::remove(cdi_->PathOf("dra.cpu_metadata_uid-r1_cpus.json"));
  std::filesystem::remove_all(claim_dir);
  std::ofstream(claim_dir) << "in the way";

  Restart({{setup, k16}});
  absl::StatusOr<ClaimService::Reconciled> r = StartCheck()();
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("default_r1"));
  EXPECT_FALSE(CdiExists("dra.cpu_metadata_uid-r1_cpus.json"));
  EXPECT_TRUE(CdiExists("dra.cpu-claim_uid-r1.json"));
}

// A claim deleted and made again under the same name: the stale one (still in the state) and
// the new one share the metadata directory. Once the new one's prepare has written its files
// there, the check of the stale one must not write its stored files over them.
TEST_F(ClaimServiceFileCheckTest, TheCheckOfAStaleClaimLeavesTheDirectoryOfANewOneAlone) {
  const DriverSetup setup = StartWithOnePrepared("same", "uid-stale");
  const std::string stale_content = Contents(HostFile("same"));
  Restart({{setup, k16}});
  const ClaimRef fresh = Add("default", "same", "uid-fresh", {Result("cpus", kNuma0, "4")});
  std::string fresh_content;
  // The new claim's prepare comes just before the check reaches the stale one.
  service().SetBeforeClaimCheckForTest([&](const std::string& owner) {
    if (!absl::StrContains(owner, "uid-stale")) return;
    PrepareOk(fresh);
    fresh_content = Contents(HostFile("same"));
  });
  absl::StatusOr<ClaimService::Reconciled> r = StartCheck()();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(fresh_content, "");
  ASSERT_NE(fresh_content, stale_content);
  EXPECT_EQ(Contents(HostFile("same")), fresh_content);
  EXPECT_EQ(r->written, 0);
  // The stale claim's own specs are still wanted: nothing of it was removed.
  EXPECT_TRUE(CdiExists("dra.cpu-claim_uid-stale.json"));
  EXPECT_TRUE(CdiExists("dra.cpu_metadata_uid-stale_cpus.json"));
}

// A stop reaches the removals too: asked while the last claim is checked, it leaves the files
// of a claim that is not prepared for the next check.
TEST_F(ClaimServiceFileCheckTest, AStopEndsTheRemovalsToo) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = MetadataSetup(topo);
  Start(setup, topo);
  const ClaimRef kept = Add("default", "kept", "uid-kept", {Result("cpus", kNuma0, "2")});
  const ClaimRef stale = Add("default", "stale", "uid-stale", {Result("cpus", kNuma0, "2")});
  PrepareOk(kept);
  PrepareOk(stale);
  const std::map<std::string, std::string> files = Snapshot({"stale"});
  UnprepareOk(stale);
  for (const auto& [path, content] : files) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << content;
  }
  Restart({{setup, k16}});
  service().SetBeforeClaimCheckForTest([&](const std::string&) { service().StopFileCheck(); });
  absl::StatusOr<ClaimService::Reconciled> r = StartCheck()();
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_EQ(Snapshot({"stale"}), files);
  // The next check removes them.
  service().SetBeforeClaimCheckForTest(nullptr);
  r = StartCheck()();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->removed, 3);
}

// --device-metadata-dir changed across a restart (the chart moving the files to tmpfs): a claim
// prepared under the old root keeps its files there, where its CDI spec mounts them from and its
// containers have them mounted. The check restores them there and its unprepare removes them
// there; what crashed prepares left under the old root goes, at the check or at the kubelet's
// unprepare; new claims go under the new root.
TEST_F(ClaimServiceFileCheckTest, FilesOfClaimsPreparedUnderAnEarlierRootStayAndGoThere) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup before = MetadataSetup(topo);
  const std::string old_root = dir_ + "/plugins/dra.cpu/dra-device-metadata";
  ASSERT_EQ(before.metadata_root, old_root);
  Start(before, topo);
  const ClaimRef kept = Add("default", "kept", "uid-kept", {Result("cpus", kNuma0, "2")});
  PrepareOk(kept);
  const std::string content = Contents(HostFile("kept"));
  ASSERT_FALSE(content.empty());
  // Two prepares that crashed after writing their files: no record names them.
  const ClaimRef checked = Add("default", "checked", "uid-checked", {Result("cpus", kNuma0, "2")});
  const ClaimRef called = Add("default", "called", "uid-called", {Result("cpus", kNuma0, "2")});
  PrepareOk(checked);
  PrepareOk(called);
  const std::map<std::string, std::string> crashed = Snapshot({"checked", "called"});
  UnprepareOk(checked);
  UnprepareOk(called);
  for (const auto& [path, text] : crashed) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }

  node::InventoryOptions o = Options(Mode::kNuma);
  o.plugins_dir = dir_ + "/plugins";
  o.metadata_dir = dir_ + "/run";
  o.device_metadata = true;
  const DriverSetup after = node::Inventory::Build(o, topo, {}).CpuSetup();
  const std::string new_root = dir_ + "/run/dra.cpu/dra-device-metadata";
  ASSERT_EQ(after.metadata_root, new_root);
  std::filesystem::remove(HostFile("kept"));
  Restart({{after, k16}});
  // The kubelet's unprepare of a crashed prepare, before the check got to it.
  UnprepareOk(called);
  EXPECT_FALSE(std::filesystem::exists(old_root + "/default_called"));
  EXPECT_FALSE(CdiExists("dra.cpu_metadata_uid-called_cpus.json"));
  absl::StatusOr<ClaimService::Reconciled> r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 1);
  EXPECT_EQ(Contents(HostFile("kept")), content);
  EXPECT_EQ(r->removed, 3);  // the CDI spec, metadata spec and host file of `checked`
  EXPECT_FALSE(std::filesystem::exists(old_root + "/default_checked"));
  EXPECT_FALSE(CdiExists("dra.cpu_metadata_uid-checked_cpus.json"));

  const ClaimRef fresh = Add("default", "fresh", "uid-fresh", {Result("cpus", kNuma0, "2")});
  PrepareOk(fresh);
  auto mounted = [&](const std::string& uid) {
    absl::StatusOr<cdi::Spec> spec =
        cdi_->Read(absl::StrCat("dra.cpu_metadata_", uid, "_cpus.json"));
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? spec->devices.at(0).container_edits.mounts.at(0).host_path : "";
  };
  EXPECT_EQ(mounted("uid-fresh"), new_root + "/default_fresh/cpus/metadata.json");
  EXPECT_EQ(mounted("uid-kept"), HostFile("kept"));
  EXPECT_TRUE(std::filesystem::exists(new_root + "/default_fresh/cpus/metadata.json"));
  EXPECT_FALSE(std::filesystem::exists(old_root + "/default_fresh"));

  // Moved once more: the second root is not the kubelet's, and only a record names it. It is not
  // walked (another daemon may use it by now): what a crashed prepare left there stays, and the
  // recorded claim's files are checked where the record says.
  const std::string crashed_file = new_root + "/default_crashed/cpus/metadata.json";
  std::filesystem::create_directories(std::filesystem::path(crashed_file).parent_path());
  std::ofstream(crashed_file) << "{}\n";
  // Its spec too: it mounts from a root no longer walked, which may be another daemon's.
  const std::string crashed_spec = "dra.cpu_metadata_uid-crashed_cpus.json";
  std::string spec_text = Contents(cdi_->PathOf("dra.cpu_metadata_uid-fresh_cpus.json"));
  absl::StrReplaceAll({{"default_fresh", "default_crashed"}, {"uid-fresh", "uid-crashed"}},
                      &spec_text);
  std::ofstream(cdi_->PathOf(crashed_spec)) << spec_text;
  ASSERT_EQ(MountedHostPaths(*cdi_, crashed_spec), std::vector<std::string>{crashed_file});
  std::filesystem::remove(new_root + "/default_fresh/cpus/metadata.json");
  o.metadata_dir = dir_ + "/run2";
  Restart({{node::Inventory::Build(o, topo, {}).CpuSetup(), k16}});
  r = service().ReconcileCdi();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, 1);
  EXPECT_EQ(r->removed, 0);
  EXPECT_TRUE(std::filesystem::exists(crashed_file));
  EXPECT_TRUE(CdiExists(crashed_spec));
  EXPECT_TRUE(std::filesystem::exists(new_root + "/default_fresh/cpus/metadata.json"));
  UnprepareOk(kept);
  EXPECT_FALSE(std::filesystem::exists(old_root + "/default_kept"));
  UnprepareOk(fresh);
  EXPECT_FALSE(std::filesystem::exists(new_root + "/default_fresh"));
  std::filesystem::remove(cdi_->PathOf(crashed_spec));
  EXPECT_THAT(CdiFiles(), IsEmpty());
}

// The kubelet's unprepare of a claim a crashed prepare left (no record names it) whose spec mounts
// from a root no longer known (two moves ago): its directory there goes, and not today's
// directory of its namespace and name, which the claim made again under that name has prepared.
TEST_F(ClaimServiceFileCheckTest, AnUnrecordedClaimsFilesGoFromWhereItsSpecMountsThem) {
  namespace fs = std::filesystem;
  const topology::Topology& topo = Load(k16);
  node::InventoryOptions o = Options(Mode::kNuma);
  o.plugins_dir = dir_ + "/plugins";
  o.metadata_dir = dir_ + "/run1";
  o.device_metadata = true;
  Start(node::Inventory::Build(o, topo, {}).CpuSetup(), topo);
  const ClaimRef old = Add("default", "same", "uid-old", {Result("cpus", kNuma0, "2")});
  PrepareOk(old);
  const std::string old_dir = dir_ + "/run1/dra.cpu/dra-device-metadata/default_same";
  const std::string old_file = old_dir + "/cpus/metadata.json";
  const std::string old_spec = "dra.cpu_metadata_uid-old_cpus.json";
  const std::string host_text = Contents(old_file);
  const std::string spec_text = Contents(cdi_->PathOf(old_spec));
  ASSERT_FALSE(host_text.empty());
  UnprepareOk(old);
  fs::create_directories(fs::path(old_file).parent_path());
  std::ofstream(old_file) << host_text;
  std::ofstream(cdi_->PathOf(old_spec)) << spec_text;

  o.metadata_dir = dir_ + "/run2";
  Restart({{node::Inventory::Build(o, topo, {}).CpuSetup(), k16}});
  const ClaimRef again = Add("default", "same", "uid-new", {Result("cpus", kNuma0, "2")});
  PrepareOk(again);
  const std::string new_file =
      dir_ + "/run2/dra.cpu/dra-device-metadata/default_same/cpus/metadata.json";
  const std::string new_text = Contents(new_file);
  ASSERT_FALSE(new_text.empty());
  UnprepareOk(old);
  EXPECT_FALSE(fs::exists(old_dir));
  EXPECT_FALSE(CdiExists(old_spec));
  EXPECT_EQ(Contents(new_file), new_text);
  EXPECT_TRUE(CdiExists("dra.cpu_metadata_uid-new_cpus.json"));
  UnprepareOk(again);
  EXPECT_FALSE(fs::exists(new_file));
}

// Calls made while the check runs: whatever the interleaving, a prepared claim's files are
// right once its prepare answers, an unprepared claim's files stay gone (the check never brings
// them back), and a claim prepared anew keeps the files a stale copy of it had left (the check
// never removes them under it).
TEST_F(ClaimServiceFileCheckTest, CallsRacingTheCheckAlwaysSeeCorrectFiles) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = MetadataSetup(topo);
  Start(setup, topo);
  std::vector<ClaimRef> refs;
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) {
    names.push_back(absl::StrCat("c", i));
    refs.push_back(Add("default", names.back(), absl::StrCat("uid-", names.back()),
                       {Result("cpus", kNuma0, "1")}));
    PrepareOk(refs.back());
  }
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    // c0..c3 stale (their files outlive their unprepare), the others damaged.
    for (int i = 0; i < 4; ++i) {
      const std::map<std::string, std::string> files = Snapshot({names[i]});
      if (Held(kCpuDriver, refs[i].uid)) UnprepareOk(refs[i]);
      for (const auto& [path, content] : files) {
        std::filesystem::create_directories(std::filesystem::path(path).parent_path());
        std::ofstream(path) << content;
      }
    }
    for (int i = 4; i < 12; ++i) {
      std::ofstream(cdi_->PathOf(absl::StrCat("dra.cpu-claim_uid-", names[i], ".json"))) << "{";
      std::filesystem::remove(HostFile(names[i]));
    }
    Restart({{setup, k16}});
    auto wait = StartCheck();
    // At once, beside the check: prepare two stale claims anew, unprepare two damaged ones,
    // prepare (replay) the rest.
    std::vector<std::thread> calls;
    std::atomic<int> failures{0};
    for (int i = 0; i < 12; ++i) {
      calls.emplace_back([&, i] {
        if (i < 2 || i >= 6) {
          if (!service().Prepare({refs[i]})[refs[i].uid].error.empty()) ++failures;
        } else if (i >= 4) {
          if (!service().Unprepare({refs[i]})[refs[i].uid].empty()) ++failures;
        }
      });
    }
    for (std::thread& t : calls) t.join();
    absl::StatusOr<ClaimService::Reconciled> r = wait();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(failures.load(), 0);
    for (int i = 0; i < 12; ++i) {
      SCOPED_TRACE(names[i]);
      const bool prepared = i < 2 || i >= 6;
      EXPECT_EQ(Held(kCpuDriver, refs[i].uid).has_value(), prepared);
      if (prepared) {
        // What its stored record makes: the files written again by a replayed prepare.
        const std::map<std::string, std::string> after_race = Snapshot({names[i]});
        for (const auto& [path, content] : after_race) std::filesystem::remove(path);
        PrepareOk(refs[i]);
        EXPECT_EQ(after_race, Snapshot({names[i]})) << "files of a prepared claim";
      } else {
        EXPECT_FALSE(CdiExists(absl::StrCat("dra.cpu-claim_uid-", names[i], ".json")));
        EXPECT_FALSE(CdiExists(absl::StrCat("dra.cpu_metadata_uid-", names[i], "_cpus.json")));
        EXPECT_FALSE(std::filesystem::exists(HostFile(names[i])));
      }
    }
    // Back to all prepared for the next round.
    for (int i = 0; i < 12; ++i) {
      if (!Held(kCpuDriver, refs[i].uid)) PrepareOk(refs[i]);
    }
  }
}

}  // namespace
}  // namespace topodra::prepare
