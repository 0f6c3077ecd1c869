// The real daemon against its own paths made hostile, as a local user of the node could: links
// in place of the lock, the journal and the checkpoint, FIFOs in place of the state files,
// world-writable directories and hook. Start must be refused at once, with one line naming the
// path, and the link's target left alone. And signals an operator sends: SIGHUP is logged and
// changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "test/integration/daemon.h"
#include "test/testing/eventually.h"
#include "test/testing/fixtures.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using topodra::testing::Daemon;
using topodra::testing::DaemonDirs;
using topodra::testing::Eventually;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Connects(const std::string& socket_path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socket_path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

class HostPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dirs_ = DaemonDirs::Make();
    kubeconfig_ = dirs_.root + "/kubeconfig";
    // Nothing listens on port 1: what is tested happens before the API server matters.
    std::ofstream(kubeconfig_) << "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
                                  "    server: http://127.0.0.1:1\ncontexts:\n- name: c\n"
                                  "  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
                                  "users:\n- name: u\n  user:\n    token: t\n";
    fs::create_directories(dirs_.state);
    ASSERT_EQ(::chmod(dirs_.state.c_str(), 0700), 0);
  }
  void TearDown() override { fs::remove_all(dirs_.root); }

  void Start(Daemon& d, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--kubeconfig", kubeconfig_,       "--node-name",
        "node-a",       "--topology-file", topodra::testing::FixturePath("16em64t-4s2c2t.xml")};
    args.insert(args.end(), extra.begin(), extra.end());
    d.Start(dirs_, args);
  }

  // Starts the daemon, which must stop on its own with exit code 1 and a log naming `what`.
  void ExpectRefused(const std::string& what, const std::vector<std::string>& extra = {}) {
    Daemon d;
    Start(d, extra);
    // -1: still running after 20 s (the old daemon hung on a FIFO for ever).
    EXPECT_EQ(d.WaitExit(), 1) << d.Log();
    EXPECT_THAT(d.Log(), HasSubstr(what));
  }

  // A fake cgroup v2 tree for --enforce=cgroup; the hook goes to <root>/hook.
  std::vector<std::string> Pinning() {
    const std::string cg = dirs_.root + "/cg";
    fs::create_directories(cg);
    std::ofstream(cg + "/cgroup.controllers") << "cpuset cpu\n";
    return {"--enforce", "cgroup", "--cgroup-root", cg, "--hook-dir", dirs_.root + "/hook"};
  }

  std::string Uid() const { return std::to_string(::geteuid()); }

  DaemonDirs dirs_;
  std::string kubeconfig_;
};

TEST_F(HostPathsTest, LinksInPlaceOfTheLockJournalOrCheckpointAreRefusedAndTheirTargetUntouched) {
  for (const std::string name : {"topodra.lock", "checkpoint.json.journal", "checkpoint.json"}) {
    SCOPED_TRACE(name);
    const std::string victim = dirs_.root + "/victim";
    std::ofstream(victim) << "a root-owned file\n";
    const std::string link = dirs_.state + "/" + name;
    ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
    ExpectRefused("\"" + link +
                  "\" is a symbolic link: topodra does not open its own files "
                  "through links");
    EXPECT_EQ(Slurp(victim), "a root-owned file\n");
    fs::remove(link);
  }
}

TEST_F(HostPathsTest, AFifoAsJournalOrCheckpointIsRefusedAtOnce) {
  for (const std::string name : {"checkpoint.json.journal", "checkpoint.json"}) {
    SCOPED_TRACE(name);
    const std::string fifo = dirs_.state + "/" + name;
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    ExpectRefused("\"" + fifo + "\" is a FIFO, not a regular file");
    fs::remove(fifo);
  }
}

TEST_F(HostPathsTest, WorldWritableDirectoriesAreRefusedNamingModeAndOwner) {
  struct Dir {
    std::string what, path;
    bool pinning;
  };
  for (const Dir& d :
       {Dir{"state directory", dirs_.state, false}, Dir{"CDI directory", dirs_.cdi, false},
        Dir{"hook directory", dirs_.root + "/hook", true},
        Dir{"kubelet plugin registration directory", dirs_.kubelet_root + "/plugins_registry",
            false}}) {
    SCOPED_TRACE(d.what);
    fs::create_directories(d.path);
    ASSERT_EQ(::chmod(d.path.c_str(), 0777), 0);
    ExpectRefused("refusing to start: " + d.what + " \"" + d.path + "\" (mode 0777, owner uid " +
                      Uid() + ") is writable by group or others",
                  d.pinning ? Pinning() : std::vector<std::string>{});
    ASSERT_EQ(::chmod(d.path.c_str(), 0755), 0);
  }
}

// Anyone may rename the state directory away in a world-writable parent and put theirs there.
TEST_F(HostPathsTest, AWorldWritableAncestorWithoutTheStickyBitIsRefused) {
  const std::string open = dirs_.root + "/open";
  fs::create_directories(open);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  ExpectRefused("\"" + open + "\" (mode 0777, owner uid " + Uid() +
                    "), on the path to state directory \"" + open +
                    "/state\", is writable by group or others without the sticky bit",
                {"--state-dir", open + "/state"});
}

// A hook someone made world-writable may already be theirs: runtimes would run it as root.
TEST_F(HostPathsTest, AWorldWritableHookIsRefused) {
  const std::vector<std::string> pinning = Pinning();
  const std::string hook = dirs_.root + "/hook/topodra-cpuset-hook";
  fs::create_directories(dirs_.root + "/hook");
  ASSERT_EQ(::chmod((dirs_.root + "/hook").c_str(), 0755), 0);
  std::ofstream(hook) << "#!/bin/sh\necho replaced\n";
  ASSERT_EQ(::chmod(hook.c_str(), 0777), 0);
  ExpectRefused("the CPU pinning hook \"" + hook + "\" (mode 0777, owner uid " + Uid() +
                    ") is writable by group or others",
                pinning);
  EXPECT_EQ(Slurp(hook), "#!/bin/sh\necho replaced\n");
}

// SIGHUP's (and SIGUSR2's) default would end the daemon at once, its sockets left for the
// kubelet to dial.
TEST_F(HostPathsTest, SighupIsLoggedAndChangesNothingThenSigtermStopsCleanly) {
  Daemon d;
  Start(d);
  const std::string dra = dirs_.kubelet_root + "/plugins/dra.cpu/dra.sock";
  const std::string reg = dirs_.kubelet_root + "/plugins_registry/dra.cpu-reg.sock";
  ASSERT_TRUE(Eventually([&] { return Connects(dra) && Connects(reg); })) << d.Log();
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(Eventually([&] { return d.Log().find("received SIGHUP") != std::string::npos; }))
      << d.Log();
  EXPECT_THAT(d.Log(), HasSubstr("received SIGHUP: nothing to reload, still running (SIGTERM stops "
                                 "topodra)"));
  ASSERT_EQ(::kill(d.pid(), SIGUSR2), 0);
  ASSERT_TRUE(Eventually([&] { return d.Log().find("received SIGUSR2") != std::string::npos; }))
      << d.Log();
  int status = 0;
  EXPECT_EQ(::waitpid(d.pid(), &status, WNOHANG), 0) << "the daemon ended: " << status;
  EXPECT_TRUE(Connects(dra));
  EXPECT_TRUE(Connects(reg));
  EXPECT_EQ(d.Terminate(), 0) << d.Log();
  EXPECT_THAT(d.Log(), HasSubstr("received SIGTERM, stopping"));
  EXPECT_FALSE(fs::exists(dra));
  EXPECT_FALSE(fs::exists(reg));
}

}  // namespace
