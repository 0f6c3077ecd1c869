// How long stopping takes: the metrics server alone (in process), and `topodra run` from SIGTERM
// to exit with the metrics server on and off (the floor: the same daemon without it). On
// civetweb, before its accept loop was woken at stop, the metrics server alone added up to 2 s
// (civetweb 1.15 polls its listening sockets 2 s at a time); our own loop wakes on an eventfd.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/metrics/metrics_server.h"
#include "test/bench/latency.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"

namespace topodra {
namespace {

using bench::Ms;
using bench::Of;
using Clock = std::chrono::steady_clock;

void Print(const char* label, const std::vector<double>& v) {
  const bench::Stats s = Of(v);
  std::printf("%-52s p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms  (%zu runs)\n", label, s.p50, s.p99,
              s.max, v.size());
}

// A port nothing listens on now: bound once to port 0, then let go.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// Runs the daemon until it has published its slices, then times SIGTERM -> exit.
double DaemonStop(testing::FakeApiServer& server, const std::string& kubeconfig,
                  const std::string& metrics_address, const std::string& fixture) {
  testing::DaemonDirs dirs = testing::DaemonDirs::Make();
  testing::Daemon d;
  d.Start(dirs, {"--kubeconfig", kubeconfig, "--node-name", "bench-node", "--topology-file",
                 fixture, "--metrics-address", metrics_address});
  double ms = -1;
  for (int i = 0; i < 2000; ++i) {
    if (d.Log().find("published") != std::string::npos) {
      // Let it settle (first scrape of state, threads started) before stopping it.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const auto t0 = Clock::now();
      d.Terminate();
      ms = Ms(Clock::now() - t0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (ms < 0) std::printf("the daemon never published:\n%s\n", d.Log().c_str());
  d.Kill();
  std::filesystem::remove_all(dirs.root);
  (void)server.Reset();
  return ms;
}

}  // namespace
}  // namespace topodra

int main(int argc, char** argv) {
  using namespace topodra;
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures/topologies";
  const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 10;

  metrics::Endpoints e;
  e.metrics = [] { return std::string("x 1\n"); };
  e.health = e.ready = [] { return metrics::Probe{}; };
  std::vector<double> floor_thread, server_stop;
  for (int i = 0; i < runs * 2; ++i) {
    auto t0 = Clock::now();
    std::thread([] {}).join();
    floor_thread.push_back(Ms(Clock::now() - t0));
    auto s = metrics::MetricsServer::Start("127.0.0.1:0", e);
    if (!s.ok()) {
      std::printf("metrics server: %s\n", std::string(s.status().message()).c_str());
      return 1;
    }
    // Stopped at various moments after its start.
    std::this_thread::sleep_for(std::chrono::milliseconds(37 * i % 400));
    t0 = Clock::now();
    s->reset();
    server_stop.push_back(Ms(Clock::now() - t0));
  }
  Print("floor: start and join a thread", floor_thread);
  Print("metrics server stop (in process)", server_stop);

  auto server = testing::FakeApiServer::Start({});
  if (!server.ok()) {
    std::printf("fake API server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  const std::string kubeconfig =
      (*server)->WriteKubeconfig((*server)->temp_dir() + "/kubeconfig.yaml");
  const std::string fixture = dir + "/16em64t-4s2c2t.xml";
  std::vector<double> without, with;
  for (int i = 0; i < runs; ++i) {
    const double a = DaemonStop(**server, kubeconfig, "none", fixture);
    if (a >= 0) without.push_back(a);
    const double b =
        DaemonStop(**server, kubeconfig, absl::StrCat("127.0.0.1:", FreePort()), fixture);
    if (b >= 0) with.push_back(b);
  }
  Print("floor: topodra run, SIGTERM -> exit, --metrics-address none", without);
  Print("topodra run, SIGTERM -> exit, metrics on 127.0.0.1", with);
  std::printf("target: the metrics server adds < 500 ms to a stop\n");
  return 0;
}
