// Runs the real topodra binary: exit codes, one-line errors, and JSON that parses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result RunTopodra(const std::string& args) {
  const std::string dir = ::testing::TempDir();
  const std::string out = dir + "/cli_out", err = dir + "/cli_err";
  const std::string cmd =
      std::string(TOPODRA_BINARY) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

std::string Fixture(const std::string& name) {
  return std::string(TOPODRA_TOPOLOGIES_DIR) + "/" + name;
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(CliTest, TopologyJsonFromFile) {
  const Result r = RunTopodra("topology --topology-file " + Fixture("nvidiaDGX2.xml") + " -o json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["summary"]["gpus"], 16);
  EXPECT_EQ(j["summary"]["cpus"], 4);
}

TEST(CliTest, TopologyTextFromSynthetic) {
  const Result r = RunTopodra("topology --topology-synthetic 'pack:2 core:8 pu:4'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("Machine (synthetic:pack:2 core:8 pu:4): 2 packages"));
  EXPECT_THAT(r.out, HasSubstr("64 CPUs online (0-63)"));
}

TEST(CliTest, LiveMachine) {
  const Result r = RunTopodra("topology -o json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GE(nlohmann::json::parse(r.out)["summary"]["cpus"].get<int>(), 1);
}

TEST(CliTest, VersionAndHelp) {
  Result r = RunTopodra("version");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, StartsWith("topodra "));
  EXPECT_EQ(RunTopodra("--version").code, 0);
  for (const char* args : {"--help", "topology --help", "version --help"}) {
    r = RunTopodra(args);
    EXPECT_EQ(r.code, 0) << args;
    EXPECT_THAT(r.out, HasSubstr("Usage")) << args;
  }
  EXPECT_THAT(RunTopodra("topology --help").out, HasSubstr("--topology-synthetic"));
}

TEST(CliTest, BadInputIsOneLineAndExitCodeTwo) {
  const std::string garbage = ::testing::TempDir() + "/cli_garbage.xml";
  std::ofstream(garbage) << "not xml at all";
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {"", "A subcommand is required"},
      {"frobnicate", "unknown command \"frobnicate\""},
      {"topology --no-such-flag", "--no-such-flag"},
      {"topology -o yaml", "yaml"},
      {"topology --topology-file /nonexistent.xml", "/nonexistent.xml"},
      {"topology --topology-file " + garbage, "is not valid hwloc XML"},
      {"topology --topology-synthetic 'pack:2 bogus:3'", "invalid synthetic topology"},
      {"topology --topology-synthetic ''", "invalid synthetic topology"},
      {"topology --topology-file " + Fixture("fakecpukinds.xml") +
           " --topology-synthetic 'pack:1 pu:2'",
       "excludes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = RunTopodra(c.args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_THAT(r.err, StartsWith("topodra"));
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
}

}  // namespace
