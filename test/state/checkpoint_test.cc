#include "driver/state/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

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
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["checksum"], ChecksumOf(doc["payload"]));
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

TEST_F(CheckpointTest, CorruptFilesAreErrorsNamingTheFile) {
  const std::string good = EncodeCheckpoint(Sample());
  const json payload = json::parse(good)["payload"];
  json edited = payload;
  edited["allocations"][0]["cpus"] = "0-4";
  const std::string dl = "restore a good copy or move it aside to start empty";
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
      {"unknown version", WithChecksum(payload, 2), absl::StatusCode::kFailedPrecondition,
       "unknown version 2 (this topodra reads version 1)"},
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
    ASSERT_TRUE(fs::create_directories(dir_) || fs::is_directory(dir_));
    WriteFile(path_, c.text);
    absl::StatusOr<State> loaded = Checkpoint(path_).Load();
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), c.code) << loaded.status();
    EXPECT_THAT(loaded.status().message(),
                AllOf(HasSubstr(absl::StrCat("checkpoint \"", path_, "\": ")), HasSubstr(c.want),
                      HasSubstr("which forgets every prepared claim")));
    if (c.code == absl::StatusCode::kDataLoss) {
      EXPECT_THAT(loaded.status().message(), HasSubstr(dl));
    }
    // Never silently discarded: the file is still there for the operator.
    EXPECT_EQ(ReadFile(path_), c.text);
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
  if (::access(dir_.c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: cannot deny writes";
  const absl::Status st = Checkpoint(path_).Save(Sample());
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

}  // namespace
}  // namespace topodra::state
