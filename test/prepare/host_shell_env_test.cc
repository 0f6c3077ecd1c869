// Runs the host's dash (Debian's /bin/sh) on the environment of a CPU claim's CDI spec: dash, like
// busybox sh, drops variables whose name is not a shell name (DRA_CPUSET_<uid> has the UID's
// dashes) from the environment of the commands it starts, so a container started with `sh -c`
// only keeps the shell-safe names. Skipped only where no dash is installed; Debian (CI, the
// build image) always has it. Nothing outside the child process is touched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "driver/prepare/planner.h"
#include "test/prepare/prepare_testing.h"

namespace topodra::prepare {
namespace {

using namespace topodra::prepare::testing;  // NOLINT: test helpers
using ::testing::Contains;
using ::testing::Not;

// The first dash found; empty when none is installed.
std::string DashPath() {
  for (const char* p : {"/bin/dash", "/usr/bin/dash"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// `shell -c env` with exactly `env` as its environment: the lines its child printed.
std::set<std::string> EnvThroughShell(const std::string& shell,
                                      const std::vector<std::string>& env) {
  int out[2];
  if (::pipe(out) != 0) {
    ADD_FAILURE() << "pipe: " << errno;
    return {};
  }
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    char* const argv[] = {const_cast<char*>(shell.c_str()), const_cast<char*>("-c"),
                          const_cast<char*>("env"), nullptr};
    ::execve(shell.c_str(), argv, envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof(buf))) > 0) text.append(buf, n);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << shell << ": status " << status;
  std::set<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.insert(line);
  return lines;
}

TEST(HostShellEnvTest, HostDashKeepsTheShellSafeCpusetVariablesAndDropsTheDashedOnes) {
  const std::string dash = DashPath();
  if (dash.empty()) GTEST_SKIP() << "no dash on this host (/bin/dash, /usr/bin/dash)";
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kMachine);
  const std::string uid = "8d4e5c1a-aaaa-bbbb-cccc-000000000001";
  absl::StatusOr<Plan> plan =
      PlanClaim(Parse(ClaimJson(uid, "ns1", "web", {Result("main-req", "cpudevmachine", "2")},
                                {Config({"main-req"}, Cpuset("2,10"))})),
                setup, topo, state::State{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->cdi_spec.devices.size(), 1u);
  // What the runtime puts in the container for the claim's one device.
  std::vector<std::string> env = plan->cdi_spec.container_edits.env;
  for (const std::string& e : plan->cdi_spec.devices[0].container_edits.env) env.push_back(e);
  EXPECT_EQ(env, (std::vector<std::string>{
                     "DRA_CPUSET_8d4e5c1a-aaaa-bbbb-cccc-000000000001=2,10",
                     "DRA_CPUSET_8d4e5c1a_aaaa_bbbb_cccc_000000000001=2,10",
                     "DRA_CPUSET_8d4e5c1a-aaaa-bbbb-cccc-000000000001_main-req=2,10",
                     "DRA_CPUSET_8d4e5c1a_aaaa_bbbb_cccc_000000000001_main_req=2,10",
                 }));

  const std::set<std::string> seen = EnvThroughShell(dash, env);
  EXPECT_THAT(seen, Contains("DRA_CPUSET_8d4e5c1a_aaaa_bbbb_cccc_000000000001=2,10"));
  EXPECT_THAT(seen, Contains("DRA_CPUSET_8d4e5c1a_aaaa_bbbb_cccc_000000000001_main_req=2,10"));
  // Why the shell-safe names exist: dash drops dra-driver-cpu's names.
  EXPECT_THAT(seen, Not(Contains("DRA_CPUSET_8d4e5c1a-aaaa-bbbb-cccc-000000000001=2,10")));
  EXPECT_THAT(seen, Not(Contains("DRA_CPUSET_8d4e5c1a-aaaa-bbbb-cccc-000000000001_main-req=2,10")));
}

}  // namespace
}  // namespace topodra::prepare
