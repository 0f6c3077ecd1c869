// Which host paths the daemon trusts (common/host_paths.h) and how it opens its own files
// (common/file_io.h): the verdict over stat results as a table, then the checks and opens on
// real files in a temporary directory.
#include "common/host_paths.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/file_io.h"

namespace topodra::files {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* name;
  PathStat stat;
  PathRole role;
  uid_t euid;
  const char* error;  // "" when accepted
};

TEST(JudgePathTest, Table) {
  const Case cases[] = {
      {"owned dir 0700", {"/s", S_IFDIR | 0700, 0}, PathRole::kOwnedDirectory, 0, ""},
      {"owned dir 0755", {"/s", S_IFDIR | 0755, 0}, PathRole::kOwnedDirectory, 0, ""},
      {"owned dir 0777",
       {"/s", S_IFDIR | 0777, 0},
       PathRole::kOwnedDirectory,
       0,
       "state directory \"/s\" (mode 0777, owner uid 0) is writable by group or others: any of "
       "them could replace what topodra writes there and the runtimes and the kubelet read; chmod "
       "go-w it"},
      {"owned dir group-writable",
       {"/s", S_IFDIR | 0775, 0},
       PathRole::kOwnedDirectory,
       0,
       "state directory \"/s\" (mode 0775, owner uid 0) is writable by group or others"},
      {"owned dir sticky does not help",
       {"/s", S_IFDIR | 01777, 0},
       PathRole::kOwnedDirectory,
       0,
       "state directory \"/s\" (mode 1777, owner uid 0) is writable by group or others"},
      {"owned dir of another user",
       {"/s", S_IFDIR | 0700, 1000},
       PathRole::kOwnedDirectory,
       0,
       "state directory \"/s\" (mode 0700, owner uid 1000) is owned by uid 1000, not by "
       "topodra's uid 0: that user could change what topodra writes there and the runtimes and "
       "the kubelet read; chown it to uid 0"},
      {"owned dir of a non-root daemon",
       {"/s", S_IFDIR | 0700, 1000},
       PathRole::kOwnedDirectory,
       1000,
       ""},
      {"owned dir is a file",
       {"/s", S_IFREG | 0600, 0},
       PathRole::kOwnedDirectory,
       0,
       "state directory \"/s\" (mode 0600, owner uid 0) is a regular file, not a directory"},
      {"hook 0755", {"/h", S_IFREG | 0755, 0}, PathRole::kOwnedFile, 0, ""},
      {"hook world-writable",
       {"/h", S_IFREG | 0777, 0},
       PathRole::kOwnedFile,
       0,
       "state directory \"/h\" (mode 0777, owner uid 0) is writable by group or others"},
      {"hook a link",
       {"/h", S_IFLNK | 0777, 0},
       PathRole::kOwnedFile,
       0,
       "state directory \"/h\" (mode 0777, owner uid 0) is a symbolic link: topodra does not "
       "write through links; remove it"},
      {"hook a FIFO",
       {"/h", S_IFIFO | 0644, 0},
       PathRole::kOwnedFile,
       0,
       "state directory \"/h\" (mode 0644, owner uid 0) is a FIFO, not a regular file"},
      {"ancestor 0755 root", {"/a", S_IFDIR | 0755, 0}, PathRole::kAncestor, 0, ""},
      {"ancestor /tmp-like", {"/a", S_IFDIR | 01777, 0}, PathRole::kAncestor, 0, ""},
      {"ancestor of the daemon's user",
       {"/a", S_IFDIR | 0755, 1000},
       PathRole::kAncestor,
       1000,
       ""},
      {"ancestor root's, non-root daemon",
       {"/a", S_IFDIR | 0755, 0},
       PathRole::kAncestor,
       1000,
       ""},
      {"ancestor world-writable",
       {"/a", S_IFDIR | 0777, 0},
       PathRole::kAncestor,
       0,
       "\"/a\" (mode 0777, owner uid 0), on the path to state directory \"/a/s\", is writable "
       "by group or others without the sticky bit: any of them could rename \"/a/s\" away and "
       "put their own in its place; chmod go-w it"},
      {"ancestor group-writable",
       {"/a", S_IFDIR | 0770, 0},
       PathRole::kAncestor,
       0,
       "is writable by group or others without the sticky bit"},
      {"ancestor of another user",
       {"/a", S_IFDIR | 0755, 1000},
       PathRole::kAncestor,
       0,
       "\"/a\" (mode 0755, owner uid 1000), on the path to state directory \"/a/s\", is owned "
       "by uid 1000, not by root or topodra's uid 0: that user could put another directory in "
       "its place; chown it to root"},
  };
  for (const Case& c : cases) {
    const absl::Status st = JudgePath(c.stat, c.role, c.euid, "state directory", "/a/s");
    if (*c.error == '\0') {
      EXPECT_TRUE(st.ok()) << c.name << ": " << st;
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << c.name;
      EXPECT_THAT(std::string(st.message()), HasSubstr(c.error)) << c.name;
    }
  }
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/host-paths-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static mode_t ModeOf(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
  }
  std::string dir_;
};

using PrepareOwnedDirectoryTest = TempDir;

TEST_F(PrepareOwnedDirectoryTest, CreatesWithTheExactModeWhateverTheUmask) {
  const mode_t old = ::umask(077);
  const absl::Status cdi = PrepareOwnedDirectory({"CDI directory", dir_ + "/a/cdi", 0755}, 0);
  const absl::Status state = PrepareOwnedDirectory({"state directory", dir_ + "/s", 0700}, 0);
  ::umask(old);
  ASSERT_TRUE(cdi.ok()) << cdi;
  ASSERT_TRUE(state.ok()) << state;
  EXPECT_EQ(ModeOf(dir_ + "/a/cdi"), 0755u);
  EXPECT_EQ(ModeOf(dir_ + "/a"), 0755u);
  EXPECT_EQ(ModeOf(dir_ + "/s"), 0700u);
}

using MakeDirectoriesTest = TempDir;

// mkdir -p from the deepest directory up: whatever is missing is made with the exact mode, what
// is there keeps its own, and a file in the way is an error naming it.
TEST_F(MakeDirectoriesTest, MakesWhatIsMissingWithTheModeAndRefusesAFileInTheWay) {
  ASSERT_EQ(::mkdir((dir_ + "/there").c_str(), 0700), 0);
  std::ofstream(dir_ + "/file") << "x";
  struct Case {
    const char* name;
    std::string dir;
    std::vector<std::pair<std::string, mode_t>> modes;  // after the call
    std::string error;                                  // "" for none
  };
  const std::vector<Case> cases = {
      {"all there", dir_ + "/there", {{dir_ + "/there", 0700}}, ""},
      {"one missing", dir_ + "/there/a", {{dir_ + "/there", 0700}, {dir_ + "/there/a", 0751}}, ""},
      {"three missing",
       dir_ + "/b/c/d",
       {{dir_ + "/b", 0751}, {dir_ + "/b/c", 0751}, {dir_ + "/b/c/d", 0751}},
       ""},
      {"a trailing slash", dir_ + "/e/", {{dir_ + "/e", 0751}}, ""},
      {"a double slash", dir_ + "/f//g", {{dir_ + "/f", 0751}, {dir_ + "/f/g", 0751}}, ""},
      {"a file in the way", dir_ + "/file", {}, "\"" + dir_ + "/file\" is not a directory"},
      {"below a file", dir_ + "/file/h", {}, "create directory \"" + dir_ + "/file/h\""},
  };
  const mode_t old = ::umask(077);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status st = MakeDirectories(c.dir, 0751);
    if (c.error.empty()) {
      EXPECT_TRUE(st.ok()) << st;
    } else {
      EXPECT_THAT(std::string(st.message()), HasSubstr(c.error));
    }
    for (const auto& [path, mode] : c.modes) EXPECT_EQ(ModeOf(path), mode) << path;
  }
  ::umask(old);
}

using WriteFileAtomicallyTest = TempDir;

// The directory is made only when the create finds it missing: a write into a directory that is
// there, into one that is not (made with the exact mode, whatever the umask), and below a file
// (refused as MakeDirectories refuses it, nothing written).
TEST_F(WriteFileAtomicallyTest, MakesTheDirectoryOnlyWhenMissingAndRefusesAFileInTheWay) {
  ASSERT_EQ(::mkdir((dir_ + "/there").c_str(), 0700), 0);
  std::ofstream(dir_ + "/file") << "x";
  const mode_t old = ::umask(077);
  const absl::Status there =
      WriteFileAtomically(dir_ + "/there", "a.json", "A", 0644, 0751, Durability::kAtomicOnly);
  const absl::Status missing =
      WriteFileAtomically(dir_ + "/b/c", "b.json", "B", 0644, 0751, Durability::kSynced);
  const absl::Status below_file =
      WriteFileAtomically(dir_ + "/file/d", "c.json", "C", 0644, 0751, Durability::kAtomicOnly);
  ::umask(old);
  ASSERT_TRUE(there.ok()) << there;
  ASSERT_TRUE(missing.ok()) << missing;
  EXPECT_EQ(Slurp(dir_ + "/there/a.json"), "A");
  EXPECT_EQ(ModeOf(dir_ + "/there/a.json"), 0644u);
  EXPECT_EQ(ModeOf(dir_ + "/there"), 0700u);  // not touched
  EXPECT_EQ(Slurp(dir_ + "/b/c/b.json"), "B");
  EXPECT_EQ(ModeOf(dir_ + "/b/c/b.json"), 0644u);
  EXPECT_EQ(ModeOf(dir_ + "/b"), 0751u);
  EXPECT_EQ(ModeOf(dir_ + "/b/c"), 0751u);
  EXPECT_THAT(std::string(below_file.message()),
              HasSubstr("create directory \"" + dir_ + "/file/d\""));
}

TEST_F(PrepareOwnedDirectoryTest, RefusesAWorldWritableDirectoryNamingItsModeAndOwner) {
  const std::string cdi = dir_ + "/cdi";
  ASSERT_EQ(::mkdir(cdi.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(cdi.c_str(), 0777), 0);
  const absl::Status st = PrepareOwnedDirectory({"CDI directory", cdi, 0755}, ::geteuid());
  EXPECT_EQ(st.message(), "CDI directory \"" + cdi + "\" (mode 0777, owner uid " +
                              std::to_string(::geteuid()) +
                              ") is writable by group or others: any of them could replace what "
                              "topodra writes there and the runtimes and the kubelet read; chmod "
                              "go-w it");
  // Refused, not repaired: the operator decides.
  EXPECT_EQ(ModeOf(cdi), 0777u);
}

TEST_F(PrepareOwnedDirectoryTest, RefusesAWorldWritableAncestorButNotAStickyOne) {
  const std::string open = dir_ + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  absl::Status st = PrepareOwnedDirectory({"state directory", open + "/state", 0700}, ::geteuid());
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("\"" + open + "\" (mode 0777, owner uid " + std::to_string(::geteuid()) +
                        "), on the path to state directory \"" + open +
                        "/state\", is writable by group or others without the sticky bit"));
  ASSERT_EQ(::chmod(open.c_str(), 01777), 0);
  st = PrepareOwnedDirectory({"state directory", open + "/state", 0700}, ::geteuid());
  EXPECT_TRUE(st.ok()) << st;
}

// A link on the way is judged by where it leads: a safe-looking path into an open directory is
// still refused.
TEST_F(PrepareOwnedDirectoryTest, FollowsALinkToJudgeWhereItLeads) {
  const std::string open = dir_ + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((open + "/real").c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  ASSERT_EQ(::symlink((open + "/real").c_str(), (dir_ + "/link").c_str()), 0);
  const absl::Status st =
      PrepareOwnedDirectory({"state directory", dir_ + "/link", 0700}, ::geteuid());
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("\"" + open + "\" (mode 0777, owner uid " + std::to_string(::geteuid()) +
                        "), on the path to state directory \"" + dir_ + "/link\""));
}

TEST_F(PrepareOwnedDirectoryTest, AMissingDirectoryNotToCreateIsNotJudged) {
  EXPECT_TRUE(PrepareOwnedDirectory({"x", dir_ + "/none", 0700, false}, ::geteuid()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/none"));
}

using OpenRegularFileTest = TempDir;

// A link in place of the lock or the journal: root would truncate or append to its target.
TEST_F(OpenRegularFileTest, RefusesALinkAndLeavesItsTargetAlone) {
  const std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::symlink(victim.c_str(), (dir_ + "/topodra.lock").c_str()), 0);
  absl::StatusOr<int> fd =
      OpenRegularFile(dir_ + "/topodra.lock", O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().message(), "\"" + dir_ +
                                       "/topodra.lock\" is a symbolic link: topodra does not open "
                                       "its own files through links");
  absl::StatusOr<std::string> read = ReadFileBounded(dir_ + "/topodra.lock", 100);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Slurp(victim), "precious\n");
  // Host files the daemon only reads may be links.
  read = ReadFileBounded(dir_ + "/topodra.lock", 100, Links::kFollow);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "precious\n");
}

// open(2) of a FIFO without a writer waits forever; these return at once.
TEST_F(OpenRegularFileTest, RefusesAFifoWithoutBlocking) {
  const std::string fifo = dir_ + "/checkpoint.json.journal";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<std::string> read = ReadFileBounded(fifo, 100);
  EXPECT_EQ(read.status().message(), "\"" + fifo + "\" is a FIFO, not a regular file");
  absl::StatusOr<int> append = OpenRegularFile(fifo, O_WRONLY | O_CREAT | O_APPEND, 0600);
  EXPECT_EQ(append.status().message(), "\"" + fifo + "\" is a FIFO, not a regular file");
  absl::StatusOr<int> rw = OpenRegularFile(fifo, O_RDWR | O_CREAT, 0600);
  EXPECT_EQ(rw.status().message(), "\"" + fifo + "\" is a FIFO, not a regular file");
  absl::StatusOr<int> dir = OpenRegularFile(dir_, O_RDONLY);
  EXPECT_EQ(dir.status().message(), "\"" + dir_ + "\" is a directory, not a regular file");
}

TEST_F(OpenRegularFileTest, OpensARegularFileBlockingAndCloseOnExec) {
  absl::StatusOr<int> fd = OpenRegularFile(dir_ + "/f", O_RDWR | O_CREAT, 0600);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(::fcntl(*fd, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(::fcntl(*fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ::close(*fd);
  EXPECT_EQ(ModeOf(dir_ + "/f"), 0600u);
}

TEST_F(OpenRegularFileTest, CheckOwnedFileRefusesAWorldWritableHook) {
  const std::string hook = dir_ + "/topodra-cpuset-hook";
  EXPECT_TRUE(CheckOwnedFile("the CPU pinning hook", hook, ::geteuid()).ok());  // not there yet
  std::ofstream(hook) << "#!/bin/sh\n";
  ASSERT_EQ(::chmod(hook.c_str(), 0755), 0);
  EXPECT_TRUE(CheckOwnedFile("the CPU pinning hook", hook, ::geteuid()).ok());
  ASSERT_EQ(::chmod(hook.c_str(), 0777), 0);
  EXPECT_THAT(std::string(CheckOwnedFile("the CPU pinning hook", hook, ::geteuid()).message()),
              HasSubstr("the CPU pinning hook \"" + hook + "\" (mode 0777, owner uid " +
                        std::to_string(::geteuid()) + ") is writable by group or others"));
}

}  // namespace
}  // namespace topodra::files
