// WriteMetadataFiles and RemoveMetadataFiles on real files: a claim's metadata as prepare wrote it
// goes file by file, and whatever else is found (a stray file, a link in a directory's place, a
// path of another shape) leaves the tree to remove_all, which never follows a link out of it.
#include "driver/prepare/metadata_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace topodra::prepare {
namespace {

namespace fs = std::filesystem;

class RemoveMetadataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/metadata-files-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    claim_dir_ = dir_ + "/root/ns_claim";
    fs::create_directories(claim_dir_ + "/req");
    fs::create_directories(dir_ + "/cdi");
    std::ofstream(host_file()) << "{}";
    std::ofstream(dir_ + "/cdi/" + kCdiFile) << "{}";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string host_file() const { return claim_dir_ + "/req/metadata.json"; }
  absl::Status Remove(const std::vector<std::string>& host_files) {
    const cdi::SpecStore store(dir_ + "/cdi");
    return RemoveMetadataFiles(store, claim_dir_, {kCdiFile}, host_files);
  }
  static constexpr char kCdiFile[] = "dra.cpu_metadata_uid_req.json";
  std::string dir_;
  std::string claim_dir_;
};

TEST_F(RemoveMetadataFilesTest, TheFilesPrepareWroteGoOneByOne) {
  ASSERT_TRUE(Remove({host_file()}).ok());
  EXPECT_FALSE(fs::exists(claim_dir_));
  EXPECT_TRUE(fs::exists(dir_ + "/root"));
  EXPECT_FALSE(fs::exists(dir_ + "/cdi/" + kCdiFile));
  // Again: nothing there is fine.
  EXPECT_TRUE(Remove({host_file()}).ok());
}

TEST_F(RemoveMetadataFilesTest, AnythingElseInTheTreeIsRemovedWithIt) {
  std::ofstream(claim_dir_ + "/req/.metadata.json.1-0.tmp") << "torn";
  fs::create_directories(claim_dir_ + "/other");
  std::ofstream(claim_dir_ + "/other/metadata.json") << "{}";
  ASSERT_TRUE(Remove({host_file()}).ok());
  EXPECT_FALSE(fs::exists(claim_dir_));
}

TEST_F(RemoveMetadataFilesTest, ALinkInTheRequestDirectorysPlaceIsNotFollowed) {
  fs::create_directories(dir_ + "/elsewhere");
  std::ofstream(dir_ + "/elsewhere/metadata.json") << "keep";
  fs::remove_all(claim_dir_ + "/req");
  fs::create_directory_symlink(dir_ + "/elsewhere", claim_dir_ + "/req");
  ASSERT_TRUE(Remove({host_file()}).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(claim_dir_ + "/req")));
  EXPECT_FALSE(fs::exists(claim_dir_));
  EXPECT_TRUE(fs::exists(dir_ + "/elsewhere/metadata.json"));
}

TEST_F(RemoveMetadataFilesTest, ALinkInTheClaimDirectorysPlaceIsNotFollowed) {
  fs::create_directories(dir_ + "/elsewhere/req");
  std::ofstream(dir_ + "/elsewhere/req/metadata.json") << "keep";
  fs::remove_all(claim_dir_);
  fs::create_directory_symlink(dir_ + "/elsewhere", claim_dir_);
  ASSERT_TRUE(Remove({host_file()}).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(claim_dir_)));
  EXPECT_TRUE(fs::exists(dir_ + "/elsewhere/req/metadata.json"));
}

TEST_F(RemoveMetadataFilesTest, AHostFileOutsideTheClaimDirectoryIsLeftAlone) {
  fs::create_directories(dir_ + "/outside/req");
  std::ofstream(dir_ + "/outside/req/metadata.json") << "keep";
  ASSERT_TRUE(
      Remove({dir_ + "/outside/req/metadata.json", claim_dir_ + "/../x/metadata.json"}).ok());
  EXPECT_FALSE(fs::exists(claim_dir_));
  EXPECT_TRUE(fs::exists(dir_ + "/outside/req/metadata.json"));
}

// WriteMetadataFiles: a claim whose directory is new gets its host files created in place when
// prepare asks for it; one whose directory is there (a crashed prepare's), and any write prepare
// does not make (a restore), the atomic way. Either way the same
// files, modes and CDI specs, whatever the umask, and no temporary file left.
class WriteMetadataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/metadata-write-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/root");
    fs::create_directories(dir_ + "/cdi");
    for (const std::string request : {"a", "b"}) {
      MetadataFile f;
      f.request = request;
      f.host_path = claim_dir() + "/" + request + "/metadata.json";
      f.content = "{\"request\": \"" + request + "\"}\n";
      f.cdi_file = "dra.cpu_metadata_uid_" + request + ".json";
      f.cdi_spec.cdi_version = "0.5.0";
      f.cdi_spec.kind = "dra.cpu/metadata";
      cdi::Device d;
      d.name = "uid_" + request;
      d.container_edits.mounts.push_back({f.host_path, "/m/" + request, {"ro", "bind"}, ""});
      f.cdi_spec.devices.push_back(d);
      files_.push_back(f);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string claim_dir() const { return dir_ + "/root/ns_claim"; }
  static mode_t ModeOf(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  absl::Status Prepare(const cdi::SpecStore& store,
                       const std::vector<std::string>* texts = nullptr) {
    return WriteMetadataFiles(store, files_, /*synced=*/false, texts,
                              HostFileWrite::kInPlaceIfNewClaimDir);
  }
  // Every file written as planned, nothing else in the claim's directory. Each CDI spec as
  // SpecStore::Write prints it, or `texts[i]` when that is not "".
  void ExpectWritten(const cdi::SpecStore& store, const std::vector<std::string>& texts = {}) {
    EXPECT_EQ(ModeOf(claim_dir()), 0755u);
    for (size_t i = 0; i < files_.size(); ++i) {
      const MetadataFile& f = files_[i];
      EXPECT_EQ(Read(f.host_path), f.content);
      EXPECT_EQ(ModeOf(f.host_path), 0644u);
      EXPECT_EQ(ModeOf(fs::path(f.host_path).parent_path()), 0755u);
      EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(f.host_path).parent_path()),
                              fs::directory_iterator()),
                1);
      const bool given = i < texts.size() && !texts[i].empty();
      EXPECT_EQ(Read(store.PathOf(f.cdi_file)), given ? texts[i] : cdi::ToJsonText(f.cdi_spec));
    }
    EXPECT_EQ(std::distance(fs::directory_iterator(claim_dir()), fs::directory_iterator()), 2);
  }
  std::string dir_;
  std::vector<MetadataFile> files_;
};

TEST_F(WriteMetadataFilesTest, ANewClaimDirectoryGetsTheFilesWithTheirModesWhateverTheUmask) {
  const cdi::SpecStore store(dir_ + "/cdi");
  const mode_t old = ::umask(0277);
  const absl::Status st = Prepare(store);
  ::umask(old);
  ASSERT_TRUE(st.ok()) << st;
  ExpectWritten(store);
}

TEST_F(WriteMetadataFilesTest, TextsGivenAreWrittenAsTheyAre) {
  const cdi::SpecStore store(dir_ + "/cdi");
  // The first text is a valid spec printed otherwise than SpecStore::Write prints it, so a text
  // that was not written as given shows; the second is printed here.
  const std::vector<std::string> texts = {cdi::ToJsonText(files_[0].cdi_spec, /*indent=*/4), ""};
  ASSERT_NE(texts[0], cdi::ToJsonText(files_[0].cdi_spec));
  ASSERT_TRUE(Prepare(store, &texts).ok());
  ExpectWritten(store, texts);
  absl::StatusOr<cdi::Spec> back = store.Read(files_[0].cdi_file);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, files_[0].cdi_spec);
}

TEST_F(WriteMetadataFilesTest, AClaimDirectoryThereIsWrittenIntoAtomically) {
  // A crashed prepare's leftovers: an old file and the other request missing.
  fs::create_directories(claim_dir() + "/a");
  std::ofstream(files_[0].host_path) << "old";
  const cdi::SpecStore store(dir_ + "/cdi");
  ASSERT_TRUE(Prepare(store).ok());
  ExpectWritten(store);
  // And again over what is there now (unprepare's restore), synced or not.
  ASSERT_TRUE(WriteMetadataFiles(store, files_, /*synced=*/false).ok());
  ASSERT_TRUE(WriteMetadataFiles(store, files_, /*synced=*/true).ok());
  ExpectWritten(store);
}

TEST_F(WriteMetadataFilesTest, AMissingMetadataRootIsMade) {
  fs::remove_all(dir_ + "/root");
  const cdi::SpecStore store(dir_ + "/cdi");
  ASSERT_TRUE(Prepare(store).ok());
  ExpectWritten(store);
}

// Two files in the same request directory tell the ways apart: in place, the second mkdir of the
// request directory fails; the atomic way writes over the first file.
TEST_F(WriteMetadataFilesTest, AFailedWriteLeavesWhatTheUndoRemoves) {
  const cdi::SpecStore store(dir_ + "/cdi");
  files_[1].host_path = claim_dir() + "/a/metadata.json";  // the same request directory twice
  const absl::Status st = Prepare(store);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("device metadata"), std::string::npos) << st;
  ASSERT_TRUE(RemoveMetadataFiles(store, claim_dir(), {files_[0].cdi_file, files_[1].cdi_file},
                                  {files_[0].host_path})
                  .ok());
  EXPECT_FALSE(fs::exists(claim_dir()));
}

TEST_F(WriteMetadataFilesTest, ARestoreIntoAMissingClaimDirectoryIsAtomic) {
  const cdi::SpecStore store(dir_ + "/cdi");
  files_[1].host_path = claim_dir() + "/a/metadata.json";  // the same request directory twice
  // Unprepare's restore after the claim directory was removed: unsynced, not prepare's write.
  const absl::Status st = WriteMetadataFiles(store, files_, /*synced=*/false);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(Read(files_[1].host_path), files_[1].content);
  EXPECT_EQ(std::distance(fs::directory_iterator(claim_dir() + "/a"), fs::directory_iterator()), 1);
  // Synced, even when prepare's way is asked for.
  fs::remove_all(claim_dir());
  ASSERT_TRUE(WriteMetadataFiles(store, files_, /*synced=*/true, nullptr,
                                 HostFileWrite::kInPlaceIfNewClaimDir)
                  .ok());
  EXPECT_EQ(Read(files_[1].host_path), files_[1].content);
}

// The start-up check walks each metadata root once: the kubelet's plugin directory given as
// --device-metadata-dir under another spelling (or through a link) is the same root, and a root
// not there is not walked at all.
TEST(DistinctDirs, OneDirectoryUnderSeveralSpellingsIsOne) {
  char tmpl[] = "/tmp/distinct-dirs-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  fs::create_directories(dir + "/kubelet/plugins");
  fs::create_directories(dir + "/run");
  fs::create_directory_symlink(dir + "/kubelet", dir + "/link");
  const std::vector<DistinctDir> got = DistinctDirs({
      dir + "/kubelet/plugins",
      dir + "/kubelet//plugins",
      dir + "/kubelet/./plugins/",
      dir + "/link/plugins",
      dir + "/missing",
      dir + "/run",
      dir + "/run/../kubelet/plugins",
  });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].path, dir + "/kubelet/plugins");
  EXPECT_EQ(got[1].path, dir + "/run");
  EXPECT_NE(got[0].id, got[1].id);
  EXPECT_EQ(IdentityOf(dir + "/link/plugins"), got[0].id);
  EXPECT_EQ(IdentityOf(dir + "/missing"), std::nullopt);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace topodra::prepare
