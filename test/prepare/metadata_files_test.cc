// RemoveMetadataFiles on real files: a claim's metadata as prepare wrote it goes file by file,
// and whatever else is found (a stray file, a link in a directory's place, a path of another
// shape) leaves the tree to remove_all, which never follows a link out of it.
#include "driver/prepare/metadata_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
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

}  // namespace
}  // namespace topodra::prepare
