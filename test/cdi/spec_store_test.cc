#include "cdi/spec_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/no_dac_override.h"

namespace topodra::cdi {
namespace {

namespace fs = std::filesystem;
using testing::ElementsAre;
using testing::IsEmpty;

Spec CpuSpec(const std::string& uid, const std::string& cpus) {
  Spec spec;
  spec.kind = "k8s.topodra.io/cpu";
  spec.devices = {
      {.name = "claim-" + uid, .container_edits = {.env = {"DRA_CPUSET_" + uid + "=" + cpus}}}};
  return spec;
}

// Large enough that writing it takes many write() calls' worth of page cache, so a reader racing
// an in-place rewrite would see a prefix.
Spec BigSpec(char fill) {
  Spec spec = CpuSpec("big", "0-3");
  for (int i = 0; i < 2000; ++i) {
    spec.devices[0].container_edits.env.push_back("V" + std::to_string(i) + "=" +
                                                  std::string(200, fill));
  }
  return spec;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every entry, hidden ones included, to catch leftover temporary files.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class SpecStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cdi_store_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/run/cdi";
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(root_ + "/run/cdi", fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root_, ec);
  }

  std::string root_;
  std::string dir_;
};

TEST_F(SpecStoreTest, WriteCreatesDirectoryAndReadsBack) {
  SpecStore store(dir_ + "/");
  EXPECT_EQ(store.dir(), dir_);
  absl::StatusOr<Spec> written =
      store.Write("k8s.topodra.io-cpu_claim-1.json", CpuSpec("1", "2-5"));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->cdi_version, "0.3.0");

  struct stat st;
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  const std::string path = dir_ + "/k8s.topodra.io-cpu_claim-1.json";
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(ReadFile(path),
            "{\n"
            "  \"cdiVersion\": \"0.3.0\",\n"
            "  \"devices\": [\n"
            "    {\n"
            "      \"containerEdits\": {\n"
            "        \"env\": [\n"
            "          \"DRA_CPUSET_1=2-5\"\n"
            "        ]\n"
            "      },\n"
            "      \"name\": \"claim-1\"\n"
            "    }\n"
            "  ],\n"
            "  \"kind\": \"k8s.topodra.io/cpu\"\n"
            "}\n");

  absl::StatusOr<Spec> read = store.Read("k8s.topodra.io-cpu_claim-1.json");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, *written);
  EXPECT_THAT(Entries(dir_), ElementsAre("k8s.topodra.io-cpu_claim-1.json"));
}

TEST_F(SpecStoreTest, WriterPicksTheMinimumVersion) {
  SpecStore store(dir_);
  Spec spec = CpuSpec("1", "0");
  spec.cdi_version = "1.1.0";  // ignored: the store always writes the minimum
  EXPECT_EQ(store.Write("a.json", spec)->cdi_version, "0.3.0");
  spec.devices[0].name = "0a1b-gpu-0";
  EXPECT_EQ(store.Write("a.json", spec)->cdi_version, "0.5.0");
  spec.devices[0].container_edits.additional_gids = {44};
  EXPECT_EQ(store.Write("a.json", spec)->cdi_version, "0.7.0");
  EXPECT_EQ(store.Read("a.json")->cdi_version, "0.7.0");
}

// Kubernetes' device-metadata specs name their version (0.5.0) whatever their fields need; the
// given version is kept only when the store knows it and it is not below the minimum.
TEST_F(SpecStoreTest, AtLeastGivenKeepsAKnownVersionNotBelowTheMinimum) {
  SpecStore store(dir_);
  Spec spec = CpuSpec("1", "0");  // needs 0.3.0
  struct Case {
    std::string given;
    std::string written;
  };
  for (const Case& c : std::vector<Case>{
           {"0.5.0", "0.5.0"}, {"1.1.0", "1.1.0"}, {"", "0.3.0"}, {"9.9.9", "0.3.0"}}) {
    spec.cdi_version = c.given;
    absl::StatusOr<Spec> w = store.Write("a.json", spec, true, VersionPolicy::kAtLeastGiven);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->cdi_version, c.written) << c.given;
    EXPECT_EQ(store.Read("a.json")->cdi_version, c.written) << c.given;
  }
  spec.devices[0].container_edits.additional_gids = {44};  // needs 0.7.0
  spec.cdi_version = "0.5.0";
  EXPECT_EQ(store.Write("a.json", spec, true, VersionPolicy::kAtLeastGiven)->cdi_version, "0.7.0");
}

TEST_F(SpecStoreTest, InvalidSpecIsNotWritten) {
  SpecStore store(dir_);
  Spec spec = CpuSpec("1", "0");
  spec.devices[0].container_edits.env = {"=0"};
  absl::StatusOr<Spec> written = store.Write("a.json", spec);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(written.status().message(),
            "CDI spec \"" + dir_ +
                "/a.json\": devices[0].containerEdits.env[0]: invalid environment variable "
                "\"=0\": want NAME=value with a non-empty NAME");
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(SpecStoreTest, ListRemoveAndOverwrite) {
  SpecStore store(dir_);
  EXPECT_THAT(*store.List(), IsEmpty());  // no directory yet
  ASSERT_TRUE(store.Write("b.json", CpuSpec("b", "1")).ok());
  ASSERT_TRUE(store.Write("a.json", CpuSpec("a", "2")).ok());
  ASSERT_TRUE(store.Write("a.json", CpuSpec("a", "3")).ok());
  // Not specs: other suffixes, hidden files, directories.
  std::ofstream(dir_ + "/c.yaml") << "x";
  std::ofstream(dir_ + "/.d.json") << "x";
  std::ofstream(dir_ + "/e.json.tmp") << "x";
  fs::create_directory(dir_ + "/f.json");
  EXPECT_THAT(*store.List(), ElementsAre("a.json", "b.json"));
  EXPECT_EQ(store.Read("a.json")->devices[0].container_edits.env[0], "DRA_CPUSET_a=3");

  EXPECT_TRUE(store.Remove("a.json").ok());
  EXPECT_TRUE(store.Remove("a.json").ok());  // again: already gone is success
  EXPECT_THAT(*store.List(), ElementsAre("b.json"));
  EXPECT_TRUE(SpecStore(root_ + "/nowhere").Remove("x.json").ok());
  EXPECT_EQ(store.Read("a.json").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Read("a.json").status().message(),
            "open \"" + dir_ + "/a.json\": No such file or directory");
}

TEST_F(SpecStoreTest, FileNamesAreChecked) {
  SpecStore store(dir_);
  for (const char* bad : {"", ".json", "a.yaml", "a", ".hidden.json", "../a.json", "x/a.json"}) {
    EXPECT_EQ(store.Write(bad, CpuSpec("1", "0")).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_FALSE(store.Remove(bad).ok()) << bad;
    EXPECT_FALSE(store.Read(bad).ok()) << bad;
  }
  EXPECT_EQ(store.Remove("../a.json").message(),
            "invalid spec file name \"../a.json\": must be a file name, not hidden, without '/'");
  EXPECT_EQ(store.Remove("a.yaml").message(),
            "invalid spec file name \"a.yaml\": want <name>.json");
  EXPECT_EQ(store.Remove(std::string(196, 'a') + ".json").message(),
            "invalid spec file name \"" + std::string(196, 'a') + ".json\": longer than 200 bytes");
  EXPECT_TRUE(store.Write(std::string(195, 'a') + ".json", CpuSpec("1", "0")).ok());
}

TEST_F(SpecStoreTest, ReadRejectsBadFiles) {
  SpecStore store(dir_);
  fs::create_directories(dir_);
  std::ofstream(dir_ + "/bad.json") << R"({"cdiVersion":"0.3.0","kind":"a/b","devices":[],"x":1})";
  EXPECT_EQ(store.Read("bad.json").status().message(),
            "CDI spec \"" + dir_ + "/bad.json\": x: unknown field");
  std::ofstream(dir_ + "/invalid.json") << R"({"cdiVersion":"0.3.0","kind":"a/b","devices":[]})";
  EXPECT_EQ(store.Read("invalid.json").status().message(),
            "CDI spec \"" + dir_ + "/invalid.json\": devices: a spec needs at least one device");
  fs::create_directory(dir_ + "/dir.json");
  EXPECT_EQ(store.Read("dir.json").status().message(),
            "\"" + dir_ + "/dir.json\" is a directory, not a regular file");
}

TEST_F(SpecStoreTest, BadDirectory) {
  // A regular file where the directory should be.
  std::ofstream(root_ + "/file") << "x";
  SpecStore store(root_ + "/file");
  absl::StatusOr<Spec> written = store.Write("a.json", CpuSpec("1", "0"));
  EXPECT_EQ(written.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(written.status().message(), "write CDI spec \"" + root_ + "/file/a.json\": \"" + root_ +
                                            "/file\" is not a directory");
  EXPECT_EQ(store.List().status().message(),
            "open directory \"" + root_ + "/file\": Not a directory");

  SpecStore below(root_ + "/file/cdi");
  EXPECT_EQ(below.Write("a.json", CpuSpec("1", "0")).status().message(),
            "write CDI spec \"" + root_ + "/file/cdi/a.json\": create directory \"" + root_ +
                "/file/cdi\": Not a directory");
}

// As root too (CI): the write runs without root's permission overrides.
TEST_F(SpecStoreTest, UnwritableDirectoryLeavesOldFileIntact) {
  SpecStore store(dir_);
  ASSERT_TRUE(store.Write("a.json", CpuSpec("a", "1")).ok());
  const std::string before = ReadFile(dir_ + "/a.json");
  ASSERT_EQ(::chmod(dir_.c_str(), 0555), 0);
  absl::StatusOr<Spec> written = absl::UnknownError("not run");
  ASSERT_EQ(topodra::test_support::RunWithoutPermissionOverrides(
                [&] { written = store.Write("a.json", CpuSpec("a", "2")); }),
            "");
  ::chmod(dir_.c_str(), 0755);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(
      std::string(written.status().message()),
      testing::MatchesRegex("write CDI spec \".*/a.json\": create \".*/\\.a\\.json\\.[0-9]+-"
                            "[0-9]+\\.tmp\": Permission denied"));
  EXPECT_EQ(ReadFile(dir_ + "/a.json"), before);
  EXPECT_THAT(Entries(dir_), ElementsAre("a.json"));
}

// A write that fails half way (file size limit, as on a full disk) removes its temporary file
// and leaves the previous spec as it was. Works as root too, unlike a read-only directory.
TEST_F(SpecStoreTest, FailedWriteLeavesOldFileIntactAndNoTempFile) {
  SpecStore store(dir_);
  ASSERT_TRUE(store.Write("a.json", CpuSpec("a", "1")).ok());
  const std::string before = ReadFile(dir_ + "/a.json");

  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 16 * 1024;
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  absl::StatusOr<Spec> written = store.Write("a.json", BigSpec('x'));
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(written.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(written.status().message()),
              testing::MatchesRegex("write CDI spec \".*/a.json\": write \".*/\\.a\\.json\\.[0-9]+-"
                                    "[0-9]+\\.tmp\": File too large"));
  EXPECT_EQ(ReadFile(dir_ + "/a.json"), before);
  EXPECT_THAT(Entries(dir_), ElementsAre("a.json"));
}

TEST_F(SpecStoreTest, FailedRenameRemovesTempFile) {
  SpecStore store(dir_);
  fs::create_directories(dir_ + "/a.json/inside");  // rename cannot replace a directory
  absl::StatusOr<Spec> written = store.Write("a.json", CpuSpec("a", "1"));
  EXPECT_FALSE(written.ok());
  EXPECT_THAT(
      std::string(written.status().message()),
      testing::MatchesRegex("write CDI spec \".*/a.json\": rename \".*/\\.a\\.json\\.[0-9]+-"
                            "[0-9]+\\.tmp\" to \".*/a.json\": Is a directory"));
  EXPECT_THAT(Entries(dir_), ElementsAre("a.json"));
}

// The target is replaced by rename, never rewritten in place: a descriptor opened on the old
// file still reads the whole old content, and the path now names a different inode.
TEST_F(SpecStoreTest, OverwriteReplacesTheFileInOneRename) {
  SpecStore store(dir_);
  ASSERT_TRUE(store.Write("a.json", BigSpec('a')).ok());
  const std::string old_text = ReadFile(dir_ + "/a.json");
  const int old_fd = ::open((dir_ + "/a.json").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(old_fd, 0);
  struct stat old_st, new_st;
  ASSERT_EQ(::fstat(old_fd, &old_st), 0);

  ASSERT_TRUE(store.Write("a.json", BigSpec('b')).ok());
  ASSERT_EQ(::stat((dir_ + "/a.json").c_str(), &new_st), 0);
  EXPECT_NE(old_st.st_ino, new_st.st_ino);
  std::string still(old_text.size() + 1, '\0');
  EXPECT_EQ(::pread(old_fd, still.data(), still.size(), 0), static_cast<ssize_t>(old_text.size()));
  still.resize(old_text.size());
  EXPECT_EQ(still, old_text);
  ::close(old_fd);
  EXPECT_EQ(store.Read("a.json")->devices[0].container_edits.env[1].substr(3, 3), "bbb");
}

// A reader racing repeated overwrites always sees one complete spec or the other.
TEST_F(SpecStoreTest, ConcurrentReaderNeverSeesPartialFile) {
  SpecStore store(dir_);
  const Spec a = BigSpec('a'), b = BigSpec('b');
  ASSERT_TRUE(store.Write("a.json", a).ok());
  const Spec written_a = *store.Read("a.json");
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, bad{0};
  std::thread reader([&] {
    while (!done.load()) {
      absl::StatusOr<Spec> spec = store.Read("a.json");
      if (!spec.ok() || spec->devices[0].container_edits.env.size() != 2001) ++bad;
      ++reads;
    }
  });
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(store.Write("a.json", i % 2 ? a : b).ok());
  }
  done = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(*store.Read("a.json"), written_a);
  EXPECT_THAT(Entries(dir_), ElementsAre("a.json"));
}

TEST_F(SpecStoreTest, ConcurrentWritersOfManyFiles) {
  SpecStore store(dir_);
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string id = std::to_string(t) + "x" + std::to_string(i % 3);
        if (!store.Write("s" + id + ".json", CpuSpec(id, std::to_string(i))).ok()) ++failures;
      }
    });
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store.List()->size(), 12u);
  EXPECT_EQ(Entries(dir_).size(), 12u);
}

}  // namespace
}  // namespace topodra::cdi
