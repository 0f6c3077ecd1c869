// The sockets the daemon serves, kept at their paths: what is at a path (never following a
// symlink), and a ServedSocket that serves again what was deleted but leaves anything else alone,
// with one log line per change.
#include "driver/plugin/socket_server.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "proto/pluginregistration/api.grpc.pb.h"

namespace topodra::plugin {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

// A Unix socket bound at `path` and closed: a file of type socket nobody serves.
void MakeSocketFile(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  ::close(fd);
}

// Log lines written while it lives (messages only).
class LogCapture {
 public:
  LogCapture() {
    previous_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

class SocketServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sst-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(SocketServerTest, InspectSocketPathNeverFollowsASymlink) {
  const std::string path = dir_ + "/x.sock";
  EXPECT_EQ(InspectSocketPath(path, 0).kind, SocketPath::kMissing);

  MakeSocketFile(path);
  const unsigned long ours = InodeOf(path);
  EXPECT_NE(ours, 0u);
  EXPECT_EQ(InspectSocketPath(path, ours).kind, SocketPath::kOurs);
  EXPECT_EQ(InspectSocketPath(path, 0).kind, SocketPath::kOtherSocket);
  EXPECT_EQ(InspectSocketPath(path, ours + 1).kind, SocketPath::kOtherSocket);

  // A symlink to our own socket is still not our socket.
  const std::string link = dir_ + "/link.sock";
  fs::create_symlink(path, link);
  SocketPath at = InspectSocketPath(link, ours);
  EXPECT_EQ(at.kind, SocketPath::kNotASocket);
  EXPECT_EQ(at.what, "a symbolic link");

  const std::string file = dir_ + "/file.sock";
  std::ofstream(file) << "x";
  at = InspectSocketPath(file, 0);
  EXPECT_EQ(at.kind, SocketPath::kNotASocket);
  EXPECT_EQ(at.what, "a regular file");

  const std::string sub = dir_ + "/dir.sock";
  fs::create_directory(sub);
  EXPECT_EQ(InspectSocketPath(sub, 0).what, "a directory");

  const std::string fifo = dir_ + "/fifo.sock";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(InspectSocketPath(fifo, 0).what, "a FIFO");
}

TEST_F(SocketServerTest, ASymlinkInPlaceOfTheSocketIsLeftAloneUntilItIsGone) {
  const std::string path = dir_ + "/s/served.sock";
  fs::create_directory(dir_ + "/s");
  // Any service: its methods answer UNIMPLEMENTED, which is enough to serve the socket.
  ::pluginregistration::Registration::Service service;
  ServedSocket s("test socket", path, {&service}, 0750, std::chrono::milliseconds(100));
  LogCapture log;
  ASSERT_TRUE(s.Serve().ok());
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(s.Problem(), "");
  s.Keep();  // ours: nothing to do, nothing said

  // Someone else's socket behind a symlink put in our place (one step, like an attacker would).
  const std::string target = dir_ + "/target.sock";
  MakeSocketFile(target);
  fs::create_symlink(target, path + ".tmp");
  fs::rename(path + ".tmp", path);
  for (int i = 0; i < 3; ++i) s.Keep();
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(path)));
  EXPECT_TRUE(fs::is_socket(fs::symlink_status(target)));
  EXPECT_EQ(s.Problem(), "test socket " + path +
                             " is a symbolic link, not the daemon's socket: remove it (the daemon "
                             "does not)");

  ASSERT_TRUE(fs::remove(path));
  EXPECT_EQ(s.Problem(), "test socket " + path + " is missing");
  s.Keep();
  EXPECT_EQ(s.Problem(), "");
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // Deleted: served again at once, with its directory.
  fs::remove_all(dir_ + "/s");
  s.Keep();
  EXPECT_EQ(s.Problem(), "");
  s.Stop();
  EXPECT_FALSE(fs::exists(fs::symlink_status(path)));
  EXPECT_TRUE(fs::is_socket(fs::symlink_status(target)));
  EXPECT_THAT(log.Lines(),
              ElementsAre("test socket " + path +
                              ": a symbolic link is there instead of the socket; the daemon leaves "
                              "it alone (it removes only its own sockets) and serves no socket "
                              "there until it is removed",
                          "test socket " + path +
                              " is served again (before: a symbolic link was in its place)",
                          "test socket " + path + " was removed; serving a fresh one"));
}

TEST_F(SocketServerTest, StoppingKeepsASymlinkPutInPlaceOfTheSocket) {
  const std::string path = dir_ + "/served.sock", target = dir_ + "/target.sock";
  ::pluginregistration::Registration::Service service;
  ServedSocket s("test socket", path, {&service}, 0750, std::chrono::milliseconds(100));
  ASSERT_TRUE(s.Serve().ok());
  MakeSocketFile(target);
  fs::create_symlink(target, path + ".tmp");
  fs::rename(path + ".tmp", path);
  s.Keep();
  s.Stop();
  // gRPC's own clean-up at the end of a server would have removed it (it stats through links).
  ASSERT_TRUE(fs::is_symlink(fs::symlink_status(path)));
  EXPECT_EQ(fs::read_symlink(path), target);
  EXPECT_TRUE(fs::is_socket(fs::symlink_status(target)));
  EXPECT_FALSE(fs::exists(fs::symlink_status(path + ".kept")));
}

// Issue 15 review: the identity of our socket had its change time in it, so a chmod, chown or
// touch of the live socket (restorecon, an operator) made the daemon take it for someone else's:
// it removed it, served a new one, cancelled the calls in flight and said so.
TEST_F(SocketServerTest, ChmodOrTouchOfOurSocketLeavesItServed) {
  const std::string path = dir_ + "/served.sock";
  ::pluginregistration::Registration::Service service;
  ServedSocket s("test socket", path, {&service}, 0750, std::chrono::milliseconds(100));
  LogCapture log;
  ASSERT_TRUE(s.Serve().ok());
  struct stat before {};
  ASSERT_EQ(::lstat(path.c_str(), &before), 0);
  auto channel = grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
  auto stub = ::pluginregistration::Registration::NewStub(channel);
  auto call = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ::pluginregistration::PluginInfo info;
    return stub->GetInfo(&ctx, ::pluginregistration::InfoRequest(), &info).error_code();
  };
  // Served (the service answers UNIMPLEMENTED: it has no methods of its own).
  ASSERT_EQ(call(), grpc::StatusCode::UNIMPLEMENTED);

  ASSERT_EQ(::chmod(path.c_str(), 0660), 0);
  s.Keep();
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  s.Keep();
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW), 0);
  s.Keep();
  EXPECT_EQ(s.Problem(), "");
  struct stat after {};
  ASSERT_EQ(::lstat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mode & 0777, 0600u);
  // The same connection, never broken.
  EXPECT_EQ(call(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(log.Lines(), ElementsAre());

  // A socket made in its place is still told apart, even where the file system hands the deleted
  // socket's inode number to the next file: ours is held open, so its number is not free.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  MakeSocketFile(path);
  EXPECT_EQ(s.Problem(), "test socket " + path + " is not the daemon's socket");
  s.Keep();
  EXPECT_EQ(s.Problem(), "");
  EXPECT_THAT(log.Lines(), ElementsAre("test socket " + path +
                                       " was replaced by a socket the daemon did not make, which "
                                       "it removes; serving a fresh one"));
}

}  // namespace
}  // namespace topodra::plugin
