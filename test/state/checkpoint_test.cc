#include "driver/state/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "driver/state/canonical_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/no_dac_override.h"

namespace topodra::state {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::AllOf;
using testing::HasSubstr;
using testing::IsEmpty;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

State Sample() {
  State state;
  Allocation claim;
  claim.owner = "6f1c-uid";
  claim.claim_namespace = "default";
  claim.claim_name = "gpu-claim";
  claim.cpus = CpuSet::Range(0, 3);
  claim.gpus = {"0000:3b:00.0", "0000:af:00.0"};
  claim.answer =
      json{{"devices", {{{"cdi", {"k8s.topodra.io/cpu=claim-6f1c"}}, {"pool", "node-a"}}}},
           {"ratio", 0.5},
           {"text", "ünïcode"}};
  claim.phase = Phase::kPrepared;
  EXPECT_TRUE(state.Add(claim).ok());
  Allocation plugin;
  plugin.kind = AllocationKind::kDevicePlugin;
  plugin.owner = "pod-uid/main/topodra.io/cpu";
  plugin.cpus = CpuSet{8, 10, 11};
  EXPECT_TRUE(state.Add(plugin).ok());
  return state;
}

// A checkpoint whose checksum is right for whatever payload it carries.
std::string WithChecksum(const json& payload, const json& version = 1) {
  return json{{"version", version}, {"checksum", ChecksumOf(payload)}, {"payload", payload}}.dump();
}

json PayloadAllocation(const std::string& owner, const std::string& cpus) {
  return {{"owner", owner}, {"kind", "DraClaim"},    {"namespace", "ns"}, {"name", "n-" + owner},
          {"cpus", cpus},   {"gpus", json::array()}, {"answer", nullptr}, {"phase", "Preparing"},
          {"driver", ""},   {"cdi", nullptr}};
}

class CheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "checkpoint_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    root_ = templ;
    dir_ = root_ + "/plugins/topodra";
    path_ = dir_ + "/state.json";
  }
  void TearDown() override {
    ::chmod(root_.c_str(), 0700);
    if (fs::exists(dir_)) ::chmod(dir_.c_str(), 0700);
    fs::remove_all(root_);
  }

  std::string root_;
  std::string dir_;
  std::string path_;
};

TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("a"), 0xC1D04330u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  // Long enough for the 8-bytes-a-step path, and not a multiple of 8 (value of a bytewise
  // CRC-32C over the same bytes).
  std::string bytes(1003, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7 + 3) & 0xFF);
  EXPECT_EQ(Crc32c(bytes), 0x42881E11u);
}

// The checksum is of the payload's canonical text; a file laid out otherwise (indented) with that
// checksum is read. A file in the layout Save writes is checked on its own bytes (no canonical
// text made again): a checksum of those bytes passes, a changed byte does not.
TEST_F(CheckpointTest, ChecksumIsOfTheCanonicalPayloadOrOfTheBytesAsSaved) {
  const State state = Sample();
  const json doc = json::parse(EncodeCheckpoint(state));
  absl::StatusOr<State> indented = DecodeCheckpoint(doc.dump(2));
  ASSERT_TRUE(indented.ok()) << indented.status();
  EXPECT_EQ(*indented, state);

  const std::string spaced_payload = doc["payload"].dump(1);
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", Crc32c(spaced_payload));
  const std::string as_saved =
      absl::StrCat("{\"checksum\":\"", hex, "\",\"payload\":", spaced_payload,
                   ",\"version\":", kCheckpointVersion, "}\n");
  absl::StatusOr<State> read = DecodeCheckpoint(as_saved);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, state);
  absl::StatusOr<State> changed =
      DecodeCheckpoint(absl::StrReplaceAll(as_saved, {{"\"0-3\"", "\"0-4\""}}));
  ASSERT_FALSE(changed.ok());
  EXPECT_THAT(changed.status().message(), HasSubstr("checksum mismatch"));
}

TEST_F(CheckpointTest, SaveThenLoadRoundTrips) {
  const Checkpoint checkpoint(path_);
  const State state = Sample();
  ASSERT_TRUE(checkpoint.Save(state).ok());
  absl::StatusOr<State> loaded = checkpoint.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, state);
  EXPECT_EQ(loaded->Find("6f1c-uid")->answer.Parse()["ratio"], 0.5);
  EXPECT_EQ(ReadFile(path_), EncodeCheckpoint(state));
  struct stat st;
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(Entries(dir_), std::vector<std::string>{"state.json"});
}

TEST_F(CheckpointTest, EncodingIsCanonical) {
  const std::string text = EncodeCheckpoint(Sample());
  const json doc = json::parse(text);
  EXPECT_EQ(doc["version"], kCheckpointVersion);
  EXPECT_EQ(doc["checksum"], ChecksumOf(doc["payload"]));
  EXPECT_EQ(doc["payload"]["reservations"], json::array());
  EXPECT_FALSE(doc["payload"].contains("seq"));
  EXPECT_FALSE(doc["payload"]["allocations"][0].contains("reservation"));
  EXPECT_EQ(text, doc.dump() + "\n");
  EXPECT_EQ(doc["payload"]["allocations"][0]["owner"], "6f1c-uid");
  EXPECT_EQ(doc["payload"]["allocations"][1]["cpus"], "8,10-11");
  EXPECT_EQ(doc["payload"]["allocations"][1]["kind"], "DevicePlugin");
}

TEST_F(CheckpointTest, MissingFileIsEmptyState) {
  absl::StatusOr<State> loaded = Checkpoint(path_).Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->Empty());
}

TEST_F(CheckpointTest, EmptyStateRoundTrips) {
  ASSERT_TRUE(Checkpoint(path_).Save(State{}).ok());
  absl::StatusOr<State> loaded = Checkpoint(path_).Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->Empty());
}

struct CorruptCase {
  std::string name;
  std::string text;
  absl::StatusCode code;
  std::string want;
};

// Writes `c.text` as the checkpoint at `path`, loads it, and checks the error: its code, the file
// named, c.want; and that the file is left for the operator. Returns the message.
std::string LoadFails(const std::string& dir, const std::string& path, const CorruptCase& c) {
  EXPECT_TRUE(fs::create_directories(dir) || fs::is_directory(dir));
  WriteFile(path, c.text);
  absl::StatusOr<State> loaded = Checkpoint(path).Load();
  EXPECT_FALSE(loaded.ok());
  if (loaded.ok()) return "";
  EXPECT_EQ(loaded.status().code(), c.code) << loaded.status();
  EXPECT_THAT(loaded.status().message(),
              AllOf(HasSubstr(absl::StrCat("checkpoint \"", path, "\": ")), HasSubstr(c.want)));
  // Never silently discarded: the file is still there for the operator.
  EXPECT_EQ(ReadFile(path), c.text);
  return std::string(loaded.status().message());
}

TEST_F(CheckpointTest, CorruptFilesAreErrorsNamingTheFile) {
  const std::string good = EncodeCheckpoint(Sample());
  const json payload = json::parse(good)["payload"];
  json edited = payload;
  edited["allocations"][0]["cpus"] = "0-4";
  const std::string dl =
      "restore a good copy or move both checkpoint.json and checkpoint.json.journal aside to start "
      "empty";
  const std::vector<CorruptCase> cases = {
      {"empty file", "", absl::StatusCode::kDataLoss, "malformed JSON"},
      {"not json", "hello", absl::StatusCode::kDataLoss, "malformed JSON"},
      {"truncated", good.substr(0, good.size() / 2), absl::StatusCode::kDataLoss, "malformed JSON"},
      {"not an object", "[1]", absl::StatusCode::kDataLoss, "not a JSON object"},
      {"payload edited", absl::StrReplaceAll(good, {{"\"0-3\"", "\"0-4\""}}),
       absl::StatusCode::kDataLoss, "checksum mismatch"},
      {"payload edited, checksum kept",
       json{{"version", 1}, {"checksum", ChecksumOf(payload)}, {"payload", edited}}.dump(),
       absl::StatusCode::kDataLoss, "checksum mismatch"},
      {"unknown version", WithChecksum(payload, 5), absl::StatusCode::kFailedPrecondition,
       "unknown version 5 (this topodra reads versions 1 to 4)"},
      {"version 0", WithChecksum(payload, 0), absl::StatusCode::kFailedPrecondition,
       "unknown version 0 (this topodra reads versions 1 to 4)"},
      {"version not integer", WithChecksum(payload, "1"), absl::StatusCode::kDataLoss,
       "field \"version\": not an integer"},
      {"missing version", json{{"checksum", "0"}, {"payload", payload}}.dump(),
       absl::StatusCode::kDataLoss, "missing field \"version\""},
      {"missing checksum", json{{"version", 1}, {"payload", payload}}.dump(),
       absl::StatusCode::kDataLoss, "missing field \"checksum\""},
      {"unknown top-level field",
       json{{"version", 1}, {"checksum", ChecksumOf(payload)}, {"payload", payload}, {"x", 1}}
           .dump(),
       absl::StatusCode::kDataLoss, "unknown field \"x\""},
      {"invalid cpuset", WithChecksum({{"allocations", {PayloadAllocation("u1", "5-2")}}}),
       absl::StatusCode::kDataLoss, "allocation 0 field \"cpus\": invalid cpuset \"5-2\""},
      {"duplicate cpu holder",
       WithChecksum(
           {{"allocations", {PayloadAllocation("u1", "0-3"), PayloadAllocation("u2", "3")}}}),
       absl::StatusCode::kDataLoss, "allocation 1: claim ns/n-u2 (uid u2): CPU 3 is already held"},
      {"duplicate owner",
       WithChecksum(
           {{"allocations", {PayloadAllocation("u1", "0"), PayloadAllocation("u1", "0")}}}),
       absl::StatusCode::kDataLoss, "owner \"u1\" appears twice"},
      {"unknown kind", WithChecksum({{"allocations", {[] {
                                        json a = PayloadAllocation("u1", "0");
                                        a["kind"] = "Mystery";
                                        return a;
                                      }()}}}),
       absl::StatusCode::kDataLoss, "unknown kind \"Mystery\""},
      {"missing allocation field", WithChecksum({{"allocations", {[] {
                                                    json a = PayloadAllocation("u1", "0");
                                                    a.erase("phase");
                                                    return a;
                                                  }()}}}),
       absl::StatusCode::kDataLoss, "allocation 0: missing field \"phase\""},
      {"too deep", std::string(100, '[') + std::string(100, ']'), absl::StatusCode::kDataLoss,
       "nested deeper than 32 levels"},
  };
  for (const CorruptCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string message = LoadFails(dir_, path_, c);
    EXPECT_THAT(message, HasSubstr("which forgets every prepared claim"));
    if (c.code == absl::StatusCode::kDataLoss) {
      EXPECT_THAT(message, HasSubstr(dl));
    }
  }
}

TEST_F(CheckpointTest, OversizedFileIsRefused) {
  ASSERT_TRUE(fs::create_directories(dir_));
  {
    std::ofstream out(path_, std::ios::binary);
    out << std::string(kMaxCheckpointBytes + 10, ' ');
  }
  absl::StatusOr<State> loaded = Checkpoint(path_).Load();
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(), HasSubstr("larger than the limit"));
}

TEST_F(CheckpointTest, LoadRemovesStaleTempFilesOnly) {
  const Checkpoint checkpoint(path_);
  ASSERT_TRUE(checkpoint.Save(Sample()).ok());
  for (const char* name : {".state.json.123-0.tmp", ".state.json.9-77.tmp", ".other.json.1-0.tmp",
                           "state.json.bak", ".state.json"}) {
    WriteFile(dir_ + "/" + name, "partial");
  }
  absl::StatusOr<State> loaded = checkpoint.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, Sample());
  EXPECT_EQ(Entries(dir_), (std::vector<std::string>{".other.json.1-0.tmp", ".state.json",
                                                     "state.json", "state.json.bak"}));
}

TEST_F(CheckpointTest, StaleTempFilesAreRemovedEvenWithoutCheckpoint) {
  ASSERT_TRUE(fs::create_directories(dir_));
  WriteFile(dir_ + "/.state.json.5-1.tmp", "{");
  absl::StatusOr<State> loaded = Checkpoint(path_).Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->Empty());
  EXPECT_THAT(Entries(dir_), IsEmpty());
}

TEST_F(CheckpointTest, SaveReplacesAtomically) {
  const Checkpoint checkpoint(path_);
  State first;
  Allocation a;
  a.owner = "u1";
  a.claim_namespace = "ns";
  a.claim_name = "one";
  a.cpus = CpuSet{1};
  ASSERT_TRUE(first.Add(a).ok());
  ASSERT_TRUE(checkpoint.Save(first).ok());
  const int old_fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(old_fd, 0);
  struct stat before;
  ASSERT_EQ(::fstat(old_fd, &before), 0);

  ASSERT_TRUE(checkpoint.Save(Sample()).ok());
  struct stat after;
  ASSERT_EQ(::stat(path_.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "rewritten in place";
  std::string old_text(static_cast<size_t>(before.st_size) + 16, '\0');
  const ssize_t n = ::pread(old_fd, old_text.data(), old_text.size(), 0);
  ::close(old_fd);
  ASSERT_GE(n, 0);
  old_text.resize(static_cast<size_t>(n));
  EXPECT_EQ(old_text, EncodeCheckpoint(first));
  EXPECT_EQ(ReadFile(path_), EncodeCheckpoint(Sample()));
  EXPECT_EQ(Entries(dir_), std::vector<std::string>{"state.json"});
}

TEST_F(CheckpointTest, UnwritableDirectoryIsAnErrorNamingThePath) {
  ASSERT_TRUE(fs::create_directories(dir_));
  ASSERT_EQ(::chmod(dir_.c_str(), 0500), 0);
  // As root too (CI): the save runs without root's permission overrides.
  absl::Status st = absl::UnknownError("not run");
  ASSERT_EQ(topodra::test_support::RunWithoutPermissionOverrides(
                [&] { st = Checkpoint(path_).Save(Sample()); }),
            "");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_THAT(st.message(), AllOf(HasSubstr(absl::StrCat("save checkpoint \"", path_, "\"")),
                                  HasSubstr("create \"" + dir_ + "/.state.json.")));
  EXPECT_THAT(Entries(dir_), IsEmpty());
}

TEST_F(CheckpointTest, DirectoryThatIsAFileIsAnError) {
  WriteFile(root_ + "/plugins", "not a directory");
  const absl::Status st = Checkpoint(path_).Save(Sample());
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("save checkpoint \"", path_, "\"")));
  EXPECT_THAT(st.message(), HasSubstr(root_ + "/plugins"));
}

TEST_F(CheckpointTest, CheckpointThatIsADirectoryIsAnError) {
  ASSERT_TRUE(fs::create_directories(path_));
  absl::StatusOr<State> loaded = Checkpoint(path_).Load();
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(loaded.status().message(), HasSubstr("not a regular file"));
}

TEST_F(CheckpointTest, TenThousandAllocationsRoundTrip) {
  State state;
  for (int i = 0; i < 10000; ++i) {
    Allocation a;
    if (i % 2 == 0) {
      a.owner = absl::StrCat("claim-", i);
      a.claim_namespace = "ns";
      a.claim_name = absl::StrCat("c", i);
      a.gpus = {absl::StrCat("0000:", i, ":00.0")};
      a.answer = json{{"i", i}};
      a.phase = Phase::kPrepared;
    } else {
      a.kind = AllocationKind::kDevicePlugin;
      a.owner = absl::StrCat("pod-", i, "/ctr/topodra.io/cpu");
    }
    a.cpus = CpuSet{i};
    ASSERT_TRUE(state.Add(std::move(a)).ok());
  }
  const Checkpoint checkpoint(path_);
  ASSERT_TRUE(checkpoint.Save(state).ok());
  absl::StatusOr<State> loaded = checkpoint.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->Size(), 10000);
  EXPECT_EQ(loaded->HeldCpus().ToString(), "0-9999");
  EXPECT_EQ(loaded->HolderOfCpu(9998), std::optional<std::string>("claim-9998"));
  EXPECT_EQ(*loaded, state);
}

// Sample plus reservations: r1 is used by a claim naming it and waits for CPU 8 (held by the
// device-plugin allocation since before it was placed); r2 has ended.
State SampleWithReservations() {
  State state = Sample();
  Reservation r1;
  r1.uid = "r1-uid";
  r1.name = "r1";
  r1.cpus = CpuSet{8, 20, 21, 22, 23};
  r1.gpus = {"0000:5e:00.0"};
  r1.placed_at = "2026-01-02T03:04:05Z";
  r1.expires_at = "2026-01-02T05:04:05Z";
  r1.spec = json{{"nodeName", "node-a"}, {"owners", {{{"namespace", "ml"}}}}, {"ttl", "2h"}};
  EXPECT_TRUE(state.PutReservation(r1).ok());
  Reservation r2;
  r2.uid = "r2-uid";
  r2.name = "r2";
  r2.cpus = CpuSet{30};
  r2.placed_at = "2026-01-01T00:00:00Z";
  r2.ended = true;
  r2.end_reason = "Expired";
  r2.ended_at = "2026-11-22T10:30:00Z";
  EXPECT_TRUE(state.PutReservation(r2).ok());
  Allocation owner;
  owner.owner = "dra.cpu/ml-uid";
  owner.driver = "dra.cpu";
  owner.claim_namespace = "ml";
  owner.claim_name = "train";
  owner.cpus = CpuSet{20, 21, 40};
  owner.gpus = {"0000:5e:00.0"};
  owner.phase = Phase::kPrepared;
  owner.reservation = "r1-uid";
  EXPECT_TRUE(state.Add(owner).ok());
  return state;
}

json PayloadReservation(const std::string& uid, const std::string& cpus,
                        json gpus = json::array()) {
  return {{"uid", uid},     {"name", "n-" + uid}, {"cpus", cpus},   {"gpus", std::move(gpus)},
          {"placedAt", ""}, {"expiresAt", ""},    {"ended", false}, {"endReason", ""},
          {"spec", nullptr}};
}

TEST_F(CheckpointTest, ReservationsRoundTrip) {
  const State state = SampleWithReservations();
  const Checkpoint checkpoint(path_);
  ASSERT_TRUE(checkpoint.Save(state, 42).ok());
  uint64_t seq = 0;
  absl::StatusOr<State> loaded = checkpoint.Load(&seq);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(seq, 42u);
  EXPECT_EQ(*loaded, state);
  ASSERT_EQ(loaded->reservations().size(), 2u);
  EXPECT_EQ(*loaded->FindReservation("r1-uid"), *state.FindReservation("r1-uid"));
  EXPECT_EQ(loaded->FindReservation("r1-uid")->spec.Parse()["ttl"], "2h");
  EXPECT_EQ(loaded->FindReservation("r2-uid")->end_reason, "Expired");
  EXPECT_EQ(loaded->FindReservation("r2-uid")->ended_at, "2026-11-22T10:30:00Z");
  EXPECT_TRUE(loaded->FindReservation("r2-uid")->ended);
  EXPECT_EQ(loaded->ReservationOfCpu(8), std::optional<std::string>("r1-uid"));
  EXPECT_EQ(loaded->HolderOfCpu(8), std::optional<std::string>("pod-uid/main/topodra.io/cpu"));
  EXPECT_EQ(loaded->ReservedCpus().ToString(), "8,20-23,30");
  ASSERT_EQ(loaded->AllocationsOf("r1-uid").size(), 1u);
  EXPECT_EQ(loaded->AllocationsOf("r1-uid")[0]->owner, "dra.cpu/ml-uid");
  EXPECT_EQ(EncodeCheckpoint(*loaded, 42), ReadFile(path_));

  const json payload = json::parse(ReadFile(path_))["payload"];
  EXPECT_EQ(payload["seq"], 42);
  EXPECT_EQ(payload["reservations"][0],
            (json{{"uid", "r1-uid"},
                  {"name", "r1"},
                  {"cpus", "8,20-23"},
                  {"gpus", {"0000:5e:00.0"}},
                  {"placedAt", "2026-01-02T03:04:05Z"},
                  {"expiresAt", "2026-01-02T05:04:05Z"},
                  {"ended", false},
                  {"endReason", ""},
                  {"spec", state.FindReservation("r1-uid")->spec.Parse()}}));
  EXPECT_EQ(payload["reservations"][1]["uid"], "r2-uid");
  // "reservation" only where set.
  EXPECT_EQ(payload["allocations"][0]["owner"], "6f1c-uid");
  EXPECT_FALSE(payload["allocations"][0].contains("reservation"));
  EXPECT_EQ(payload["allocations"][1]["owner"], "dra.cpu/ml-uid");
  EXPECT_EQ(payload["allocations"][1]["reservation"], "r1-uid");
}

TEST_F(CheckpointTest, PreparedOnlyFiltersAllocationsNotReservations) {
  State state = SampleWithReservations();
  const json payload = json::parse(EncodeCheckpoint(state, 7, /*prepared_only=*/true))["payload"];
  std::vector<std::string> owners;
  for (const json& a : payload["allocations"]) owners.push_back(a["owner"]);
  // The device-plugin allocation is still Preparing.
  EXPECT_EQ(owners, (std::vector<std::string>{"6f1c-uid", "dra.cpu/ml-uid"}));
  ASSERT_EQ(payload["reservations"].size(), 2u);
  EXPECT_EQ(payload["reservations"][0]["uid"], "r1-uid");
  EXPECT_EQ(payload["reservations"][1]["uid"], "r2-uid");
}

TEST_F(CheckpointTest, VersionOneFilesAreStillRead) {
  const json payload = {
      {"allocations", {PayloadAllocation("u1", "0-3"), PayloadAllocation("u2", "4")}}, {"seq", 9}};
  uint64_t seq = 0;
  absl::StatusOr<State> state = DecodeCheckpoint(WithChecksum(payload, 1), &seq);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(seq, 9u);
  EXPECT_EQ(state->Size(), 2);
  EXPECT_EQ(state->HeldCpus().ToString(), "0-4");
  EXPECT_EQ(state->Find("u1")->claim_name, "n-u1");
  EXPECT_EQ(state->Find("u1")->reservation, "");
  EXPECT_TRUE(state->reservations().empty());
  // Written back as the current version, and read again the same.
  const std::string v2 = EncodeCheckpoint(*state, seq);
  EXPECT_EQ(json::parse(v2)["version"], kCheckpointVersion);
  absl::StatusOr<State> again = DecodeCheckpoint(v2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *state);
}

// Version 3 adds the allocation field "mems" (the claim's memory nodes, --numa-memory=claim),
// written only when set; version 2 files (without it) still load, and one that has it is corrupt.
TEST_F(CheckpointTest, MemsRoundTripAndVersionTwoFilesAreStillRead) {
  State state = Sample();
  Allocation hbm;
  hbm.owner = "dra.cpu/hbm-uid";
  hbm.driver = "dra.cpu";
  hbm.claim_namespace = "default";
  hbm.claim_name = "hbm";
  hbm.cpus = CpuSet{4, 5};
  hbm.mems = CpuSet{0, 4};
  hbm.phase = Phase::kPrepared;
  ASSERT_TRUE(state.Add(hbm).ok());
  const std::string text = EncodeCheckpoint(state);
  const json payload = json::parse(text)["payload"];
  for (const json& a : payload["allocations"]) {
    if (a["owner"] == "dra.cpu/hbm-uid") {
      EXPECT_EQ(a["mems"], "0,4");
    } else {
      EXPECT_FALSE(a.contains("mems")) << a;
    }
  }
  absl::StatusOr<State> back = DecodeCheckpoint(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, state);
  EXPECT_EQ(back->Find("dra.cpu/hbm-uid")->mems, (CpuSet{0, 4}));
  // The journal's spelling too.
  absl::StatusOr<Allocation> one = AllocationFromJson(AllocationToJson(hbm));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->mems, (CpuSet{0, 4}));

  const json v2_payload = {{"allocations", {PayloadAllocation("u1", "0-3")}},
                           {"reservations", json::array()}};
  absl::StatusOr<State> v2 = DecodeCheckpoint(WithChecksum(v2_payload, 2));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_TRUE(v2->Find("u1")->mems.Empty());

  json with_mems = PayloadAllocation("u1", "0-3");
  with_mems["mems"] = "0";
  const json v2_with_mems = {{"allocations", {with_mems}}, {"reservations", json::array()}};
  EXPECT_TRUE(absl::IsDataLoss(DecodeCheckpoint(WithChecksum(v2_with_mems, 2)).status()));
  EXPECT_TRUE(DecodeCheckpoint(WithChecksum(v2_with_mems, 3)).ok());
  for (const json& bad : {json(""), json("x"), json(3)}) {
    json a = PayloadAllocation("u1", "0-3");
    a["mems"] = bad;
    const absl::Status st =
        DecodeCheckpoint(WithChecksum({{"allocations", {a}}, {"reservations", json::array()}}, 3))
            .status();
    EXPECT_TRUE(absl::IsDataLoss(st)) << bad << ": " << st;
    EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("allocation 0 field \"mems\""));
  }
}

TEST_F(CheckpointTest, CorruptReservationsAreDataLossNamingTheField) {
  auto resv = [](const std::function<void(json&)>& edit) {
    json r = PayloadReservation("r1", "0-3");
    edit(r);
    return r;
  };
  auto v2 = [](json allocations, json reservations) {
    return WithChecksum(
        {{"allocations", std::move(allocations)}, {"reservations", std::move(reservations)}}, 2);
  };
  auto one = [&](json r) { return v2(json::array(), json::array({std::move(r)})); };
  json with_reservation = PayloadAllocation("u1", "0");
  with_reservation["reservation"] = "r1";
  json empty_reservation = PayloadAllocation("u1", "0");
  empty_reservation["reservation"] = "";
  json number_reservation = PayloadAllocation("u1", "0");
  number_reservation["reservation"] = 5;
  const std::vector<CorruptCase> cases = {
      {"uid not a string", one(resv([](json& r) { r["uid"] = 7; })), absl::StatusCode::kDataLoss,
       "reservation 0 field \"uid\": not a string"},
      {"empty uid", one(resv([](json& r) { r["uid"] = ""; })), absl::StatusCode::kDataLoss,
       "reservation 0 field \"uid\": empty"},
      {"empty name", one(resv([](json& r) { r["name"] = ""; })), absl::StatusCode::kDataLoss,
       "reservation 0 field \"name\": empty"},
      {"missing name", one(resv([](json& r) { r.erase("name"); })), absl::StatusCode::kDataLoss,
       "reservation 0: missing field \"name\""},
      {"unknown field", one(resv([](json& r) { r["owners"] = json::array(); })),
       absl::StatusCode::kDataLoss, "reservation 0: unknown field \"owners\""},
      {"invalid cpuset", one(resv([](json& r) { r["cpus"] = "7-2"; })), absl::StatusCode::kDataLoss,
       "reservation 0 field \"cpus\": invalid cpuset \"7-2\""},
      {"cpus as array", one(resv([](json& r) {
         r["cpus"] = {1, 2};
       })),
       absl::StatusCode::kDataLoss, "reservation 0 field \"cpus\": not a string"},
      {"gpus not an array", one(resv([](json& r) { r["gpus"] = "0000:3b:00.0"; })),
       absl::StatusCode::kDataLoss, "reservation 0 field \"gpus\": not a JSON array"},
      {"gpu not a string", one(resv([](json& r) { r["gpus"] = {1}; })), absl::StatusCode::kDataLoss,
       "reservation 0 field \"gpus\": not a string"},
      {"gpu twice", one(resv([](json& r) {
         r["gpus"] = {"g", "g"};
       })),
       absl::StatusCode::kDataLoss, "reservation 0 field \"gpus\": GPU \"g\" listed twice"},
      {"empty gpu", one(resv([](json& r) { r["gpus"] = {""}; })), absl::StatusCode::kDataLoss,
       "reservation 0 field \"gpus\": empty GPU id"},
      {"ended not a boolean", one(resv([](json& r) { r["ended"] = "true"; })),
       absl::StatusCode::kDataLoss, "reservation 0 field \"ended\": not a boolean"},
      {"placedAt not a string", one(resv([](json& r) { r["placedAt"] = 1700000000; })),
       absl::StatusCode::kDataLoss, "reservation 0 field \"placedAt\": not a string"},
      {"expiresAt null", one(resv([](json& r) { r["expiresAt"] = nullptr; })),
       absl::StatusCode::kDataLoss, "reservation 0 field \"expiresAt\": not a string"},
      {"endReason not a string", one(resv([](json& r) { r["endReason"] = false; })),
       absl::StatusCode::kDataLoss, "reservation 0 field \"endReason\": not a string"},
      {"spec a string", one(resv([](json& r) { r["spec"] = "{}"; })), absl::StatusCode::kDataLoss,
       "reservation 0 field \"spec\": not an object"},
      {"not an object", one(json::array()), absl::StatusCode::kDataLoss,
       "reservation 0: not a JSON object"},
      {"reservations not an array", v2(json::array(), json::object()), absl::StatusCode::kDataLoss,
       "payload field \"reservations\": not a JSON array"},
      {"reservations missing", WithChecksum({{"allocations", json::array()}}, 2),
       absl::StatusCode::kDataLoss, "payload: missing field \"reservations\""},
      {"duplicate uid",
       v2(json::array(), {PayloadReservation("r1", "0"), PayloadReservation("r1", "1")}),
       absl::StatusCode::kDataLoss, "reservation 1: uid \"r1\" appears twice"},
      {"overlapping cpus",
       v2(json::array(), {PayloadReservation("r1", "0-3"), PayloadReservation("r2", "3-4")}),
       absl::StatusCode::kDataLoss,
       "reservation 1: Reservation \"n-r2\": CPU 3 is already reserved by Reservation \"n-r1\""},
      {"overlapping gpus",
       v2(json::array(),
          {PayloadReservation("r1", "0", {"g1"}), PayloadReservation("r2", "1", {"g1"})}),
       absl::StatusCode::kDataLoss,
       "reservation 1: Reservation \"n-r2\": GPU \"g1\" is already reserved by Reservation "
       "\"n-r1\""},
      {"allocation reservation empty", v2({empty_reservation}, json::array()),
       absl::StatusCode::kDataLoss, "allocation 0 field \"reservation\": empty"},
      {"allocation reservation not a string", v2({number_reservation}, json::array()),
       absl::StatusCode::kDataLoss, "allocation 0 field \"reservation\": not a string"},
      {"version 1 with reservations",
       WithChecksum({{"allocations", json::array()}, {"reservations", json::array()}}, 1),
       absl::StatusCode::kDataLoss, "payload: unknown field \"reservations\""},
      {"version 1 allocation with reservation",
       WithChecksum({{"allocations", {with_reservation}}}, 1), absl::StatusCode::kDataLoss,
       "allocation 0: unknown field \"reservation\""},
  };
  for (const CorruptCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(LoadFails(dir_, path_, c), HasSubstr("restore a good copy"));
  }
  // The same allocation with its reservation, in a version 2 file, is fine.
  absl::StatusOr<State> ok =
      DecodeCheckpoint(v2({with_reservation}, {PayloadReservation("r1", "0")}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->Find("u1")->reservation, "r1");
}

TEST(ReservationJsonTest, RoundTripAndStrictParse) {
  Reservation r;
  r.uid = "u";
  r.name = "n";
  r.cpus = CpuSet{1, 2, 3, 9};
  r.gpus = {"0000:3b:00.0", "0000:af:00.0"};
  r.placed_at = "2026-01-02T03:04:05Z";
  r.ended = true;
  r.end_reason = "Deleted";
  r.spec = json{{"nodeName", "n1"}};
  const json j = ReservationToJson(r);
  EXPECT_EQ(j["cpus"], "1-3,9");
  EXPECT_EQ(j["gpus"], (json{"0000:3b:00.0", "0000:af:00.0"}));
  EXPECT_EQ(j["expiresAt"], "");
  EXPECT_EQ(j["spec"], (json{{"nodeName", "n1"}}));
  absl::StatusOr<Reservation> back = ReservationFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  // A default (null) spec round-trips as null.
  r.spec = JsonText();
  back = ReservationFromJson(ReservationToJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->spec.is_null());

  json bad = j;
  bad["ended"] = 1;
  EXPECT_EQ(ReservationFromJson(bad).status(),
            absl::DataLossError("reservation field \"ended\": not a boolean"));
  bad = j;
  bad.erase("placedAt");
  EXPECT_EQ(ReservationFromJson(bad).status(),
            absl::DataLossError("reservation: missing field \"placedAt\""));
  EXPECT_EQ(ReservationFromJson(json::array()).status(),
            absl::DataLossError("reservation: not a JSON object"));
}

TEST(AllocationJsonTest, ReservationIsOptionalAndWrittenOnlyWhenSet) {
  Allocation a;
  a.owner = "dra.cpu/u";
  a.driver = "dra.cpu";
  a.claim_namespace = "ns";
  a.claim_name = "c";
  EXPECT_FALSE(AllocationToJson(a).contains("reservation"));
  a.reservation = "r-uid";
  const json j = AllocationToJson(a);
  EXPECT_EQ(j["reservation"], "r-uid");
  absl::StatusOr<Allocation> back = AllocationFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);
  json without = j;
  without.erase("reservation");
  back = AllocationFromJson(without);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->reservation, "");
}

}  // namespace
}  // namespace topodra::state

namespace topodra::state {
namespace {

// A claim as a node holds thousands of them: its answer and CDI spec are what start keeps as
// text, with the characters the canonical printer escapes.
State ClaimsWithTexts() {
  State state;
  for (int i = 0; i < 3; ++i) {
    Allocation a;
    a.owner = absl::StrCat("dra.cpu/uid-", i);
    a.claim_namespace = "default";
    a.claim_name = absl::StrCat("claim-", i);
    a.driver = "dra.cpu";
    a.cpus = CpuSet{i};
    a.phase = Phase::kPrepared;
    a.answer = json{{"devices",
                     {{{"cdiDeviceIds", {absl::StrCat("dra.cpu/claim=uid-", i)}},
                       {"device", "cpudevnuma000"},
                       {"requestNames", {"cpus"}}}}}};
    a.cdi = json{{"file", absl::StrCat("dra.cpu-claim_uid-", i, ".json")},
                 {"spec", {{"cdiVersion", "0.5.0"}, {"kind", "dra.cpu/claim"}, {"n", -i}}},
                 {"metadata",
                  {{{"content", "{\n  \"kind\": \"DeviceMetadata\",\t\x01 \xc3\xbc\"\\\n}\n"},
                    {"cdiSpec", json::object()}}}}};
    if (i == 1) a.mems = CpuSet{0};
    if (i == 2) a.answer = JsonText();
    EXPECT_TRUE(state.Add(a).ok());
  }
  Reservation r;
  r.uid = "r-uid";
  r.name = "r";
  r.cpus = CpuSet{7};
  r.spec = json{{"owners", json::array()}};
  EXPECT_TRUE(state.PutReservation(r).ok());
  return state;
}

// DecodeCheckpoint reads a file as Save writes it without a JSON tree (its answers and CDI specs
// are kept as the text they are); it must give what the full parser gives, for that file and for
// any other, canonical or not, right or damaged.
TEST(CheckpointFastPathTest, GivesWhatTheFullParserGives) {
  const State state = ClaimsWithTexts();
  const std::string saved = EncodeCheckpoint(state, /*seq=*/42);
  const json doc = json::parse(saved);
  const std::string payload = doc["payload"].dump();
  auto laid_out = [](const std::string& payload_text, const std::string& version) {
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", Crc32c(payload_text));
    return absl::StrCat("{\"checksum\":\"", hex, "\",\"payload\":", payload_text,
                        ",\"version\":", version, "}\n");
  };
  std::vector<std::string> texts = {
      saved,
      EncodeCheckpoint(Sample()),  // a float in an answer: not canonical for the fast path
      EncodeCheckpoint(State()),
      doc.dump(2),                            // another layout
      laid_out(doc["payload"].dump(1), "3"),  // whitespace
      laid_out(payload, "03"), laid_out(payload, "4"),
      laid_out(payload, "1"),  // "reservations" and "mems" unknown in version 1
      laid_out(absl::StrReplaceAll(payload, {{"\"seq\":42", "\"seq\":-42"}}), "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"phase\":\"Prepared\"", "\"phase\":\"Done\""}}),
               "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"cpus\":\"1\"", "\"cpus\":\"0\""}}), "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"cdi\":{", "\"cdi\":[{"}, {"}]}}", "}]}]}"}}), "3"),
      absl::StrReplaceAll(saved, {{"uid-1", "uid-2"}}),  // damaged: checksum mismatch
      saved.substr(0, saved.size() / 2),                 // torn
      // The one-pass split and the direct field reader against the full parser: a field with an
      // escape (read through the tree), no payload, lists that are not lists, a GPU twice, a
      // field the version does not have, an unknown field, an allocation that is not an object.
      laid_out(absl::StrReplaceAll(payload, {{"\"name\":\"claim-0\"", "\"name\":\"claim\\\"0\""}}),
               "3"),
      laid_out("", "3"), laid_out("[]", "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"allocations\":[", "\"allocations\":{\"a\":["},
                                             {"],\"reservations\"", "]},\"reservations\""}}),
               "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"gpus\":[]", "\"gpus\":[\"g\",\"g\"]"}}), "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"gpus\":[]", "\"gpus\":[\"g\\u0001\"]"}}), "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"gpus\":[]", "\"gpus\":\"g\""}}), "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"kind\":", "\"junk\":1,\"kind\":"}}), "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"kind\":", "\"jmems\":1,\"kind\":"}}), "3"),
      laid_out(absl::StrReplaceAll(payload, {{"\"allocations\":[", "\"allocations\":[1,"}}), "3"),
      laid_out(payload, "2"),  // "mems" unknown in version 2
  };
  // Nested as deep as the reader allows, one level more, and one less (in a reservation's spec,
  // kept as it is): the payload sits one level inside the document, whose depth is what the full
  // parser limits.
  for (const int arrays : {27, 28, 29}) {
    const std::string deep = absl::StrReplaceAll(
        payload, {{"\"owners\":[]", absl::StrCat("\"owners\":[],\"zz\":", std::string(arrays, '['),
                                                 "1", std::string(arrays, ']'))}});
    ASSERT_NE(deep, payload);
    texts.push_back(laid_out(deep, "3"));
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("text ", i, ": ", texts[i].substr(0, 200)));
    uint64_t fast_seq = 1, full_seq = 1;
    absl::StatusOr<State> fast = DecodeCheckpoint(texts[i], &fast_seq);
    absl::StatusOr<State> full = DecodeCheckpointFullParse(texts[i], &full_seq);
    ASSERT_EQ(fast.status(), full.status());
    if (!fast.ok()) continue;
    EXPECT_EQ(*fast, *full);
    EXPECT_EQ(fast_seq, full_seq);
    EXPECT_EQ(EncodeCheckpoint(*fast), EncodeCheckpoint(*full));
  }
  uint64_t seq = 0;
  absl::StatusOr<State> read = DecodeCheckpoint(saved, &seq);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, state);
  EXPECT_EQ(seq, 42u);
  EXPECT_EQ(read->Find("dra.cpu/uid-0")->cdi.text(), state.Find("dra.cpu/uid-0")->cdi.text());
  EXPECT_TRUE(read->Find("dra.cpu/uid-2")->answer.is_null());
}

TEST(CheckpointFastPathTest, AnAllocationsCanonicalTextReadsAsItsJson) {
  const State state = ClaimsWithTexts();
  for (const auto& [owner, a] : state.allocations()) {
    const std::string text = CanonicalText(AllocationToJson(a));
    std::optional<Allocation> fast = AllocationFromCanonicalText(text);
    ASSERT_TRUE(fast.has_value()) << text;
    EXPECT_EQ(*fast, a);
  }
  // Not canonical, or not an allocation: the caller takes AllocationFromJson.
  EXPECT_FALSE(AllocationFromCanonicalText(R"({"owner": "x"})").has_value());
  EXPECT_FALSE(AllocationFromCanonicalText(R"({"owner":"x"})").has_value());
  EXPECT_FALSE(AllocationFromCanonicalText("[]").has_value());
}

// The members of an allocation's canonical text, as the snapshot and journal readers split it.
canonical::Members MembersOf(const std::string& text) {
  std::vector<canonical::Piece> pieces;
  EXPECT_EQ(canonical::ScanCanonicalPieces(text, 32, 1, &pieces), text.size()) << text;
  canonical::Members members;
  for (const canonical::Piece& p : pieces) members.emplace_back(p.key, p.value);
  return members;
}

// Allocations with every field: ClaimsWithTexts' and one with a reservation, NUMA memory, two
// GPUs, of the other kind and phase.
std::vector<Allocation> EveryKindOfAllocation() {
  std::vector<Allocation> all;
  const State claims = ClaimsWithTexts();
  for (const auto& [owner, a] : claims.allocations()) all.push_back(a);
  Allocation plugin;
  plugin.kind = AllocationKind::kDevicePlugin;
  plugin.owner = "pod-uid/main/topodra.io/cpu";
  plugin.driver = "dra.cpu";
  plugin.cpus = CpuSet{8, 10, 11};
  plugin.mems = CpuSet{0, 1};
  plugin.gpus = {"0000:3b:00.0", "0000:af:00.0"};
  plugin.reservation = "r-uid";
  plugin.phase = Phase::kPreparing;
  all.push_back(plugin);
  return all;
}

// Every allocation as Save and Put write it is taken by the direct reader, not by the slower one
// that builds a tree of its small fields: a field AllocationToJson writes that DirectAllocation
// does not read would still decode right, only slower, and only this test tells.
TEST(CheckpointFastPathTest, TheDirectReaderTakesEveryAllocationAsWritten) {
  for (const Allocation& a : EveryKindOfAllocation()) {
    const std::string text = CanonicalText(AllocationToJson(a));
    SCOPED_TRACE(text);
    std::optional<Allocation> direct = internal::DirectAllocation(MembersOf(text), 3);
    ASSERT_TRUE(direct.has_value());
    EXPECT_EQ(*direct, a);
  }
  // And every allocation of a saved file, as FastDecode splits it.
  const std::string saved = EncodeCheckpoint(ClaimsWithTexts(), 7);
  const json doc = json::parse(saved);
  for (const json& a : doc["payload"]["allocations"]) {
    EXPECT_TRUE(internal::DirectAllocation(MembersOf(CanonicalText(a)), 3).has_value()) << a;
  }
}

// The direct reader keeps one bit per field: a field twice is refused even when the count of
// fields is right, and so is a required field missing.
TEST(CheckpointFastPathTest, TheDirectReaderDeclinesAFieldTwiceOrMissing) {
  const Allocation a = EveryKindOfAllocation().back();
  const std::string text = CanonicalText(AllocationToJson(a));
  const canonical::Members members = MembersOf(text);
  ASSERT_TRUE(internal::DirectAllocation(members, 3).has_value());
  std::deque<std::string> keep;  // the added texts, which outlive the views of them
  auto with = [&members, &keep](const std::string& drop,
                                const std::vector<std::pair<std::string, std::string>>& add) {
    canonical::Members out;
    for (const auto& [key, value] : members) {
      if (key != drop) out.emplace_back(key, value);
    }
    for (const auto& [key, value] : add) {
      keep.push_back(key);
      const absl::string_view k = keep.back();
      keep.push_back(value);
      out.emplace_back(k, keep.back());
    }
    return out;
  };
  const std::vector<std::pair<std::string, canonical::Members>> cases = {
      {"owner twice, no kind", with("kind", {{"owner", "\"other\""}})},
      {"kind twice", with("", {{"kind", "\"DraClaim\""}})},
      {"answer twice, no cdi", with("cdi", {{"answer", "null"}})},
      {"mems twice, no driver", with("driver", {{"mems", "\"1\""}})},
      {"reservation twice", with("", {{"reservation", "\"r2\""}})},
      {"no owner", with("owner", {})},
      {"no gpus", with("gpus", {})},
      {"cdi with no value", with("cdi", {{"cdi", ""}})},
      {"answer with no value", with("answer", {{"answer", ""}})},
  };
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(internal::DirectAllocation(c, 3).has_value());
    EXPECT_FALSE(AllocationFromCanonicalMembers(c).has_value());
  }
}

// The fuzz seed of a version-3 checkpoint in Save's layout, with every allocation field, NUMA
// memory, a reservation and two GPUs (test/fuzz/corpus/checkpoint_fuzz/v3_all_fields.json),
// carries a right checksum and reaches the direct reader: without it, the fuzz runs of CI never
// reach DirectAllocation's success path.
TEST(CheckpointFastPathTest, TheVersionThreeFuzzSeedReachesTheDirectReader) {
  const std::string text =
      ReadFile(TOPODRA_SOURCE_DIR "/test/fuzz/corpus/checkpoint_fuzz/v3_all_fields.json");
  ASSERT_FALSE(text.empty());
  uint64_t seq = 0, full_seq = 0;
  absl::StatusOr<State> fast = DecodeCheckpoint(text, &seq);
  ASSERT_TRUE(fast.ok()) << fast.status();
  absl::StatusOr<State> full = DecodeCheckpointFullParse(text, &full_seq);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(*fast, *full);
  EXPECT_EQ(seq, full_seq);
  const json doc = json::parse(text);
  EXPECT_EQ(doc["version"], 3);
  ASSERT_EQ(doc["payload"]["allocations"].size(), 2u);
  bool every_field = false;
  for (const json& a : doc["payload"]["allocations"]) {
    EXPECT_TRUE(internal::DirectAllocation(MembersOf(CanonicalText(a)), 3).has_value()) << a;
    every_field |= a.contains("mems") && a.contains("reservation") && a["gpus"].size() == 2;
  }
  EXPECT_TRUE(every_field);
}

}  // namespace
}  // namespace topodra::state
