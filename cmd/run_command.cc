// `topodra run`: the per-node daemon (driver/node/node.h) from the command line: flags to a
// NodeConfig, logging, then Create / Start, the signal wait, Stop.
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <cstdlib>
#include <ostream>

#include "cmd/commands.h"
#include "cmd/logging.h"
#include "cmd/memory_release.h"
#include "cmd/run_config.h"
#include "driver/kube/rest_client.h"
#include "driver/node/node.h"

namespace topodra::cmd {
namespace {

absl::StatusOr<kube::ClusterConfig> ClusterConfigFor(const RunCommand& cmd) {
  std::string path = cmd.kubeconfig;
  if (const char* env = std::getenv("KUBECONFIG"); path.empty() && env != nullptr && *env) {
    // KUBECONFIG may list several files; the first is the one that holds our context.
    path = std::string(env).substr(0, std::string(env).find(':'));
  }
  if (!path.empty()) return kube::KubeconfigConfig(path);
  return kube::InClusterConfig();
}

// Once the node is ready (registered, slices published), the memory only the start needed goes
// back (memory_release.h). Until then the wait wakes up to ask: every 200 ms for the first minute,
// then every 5 s (an API server down for long); after, it sleeps until a signal.
void ReleaseWhenReady(node::Node& node, bool& released) {
  if (released || !node.IsReady()) return;
  released = true;
  const MemoryRelease r = ReleaseStartupMemory();
  spdlog::debug("started: {} KiB of {} file mappings unmapped, heap trimmed: {}", r.unmapped_kib,
                r.mappings, r.trimmed);
}

// Until SIGTERM or SIGINT. Signals are taken synchronously by this thread only, so they never
// interrupt a worker; SIGHUP and SIGUSR2 (whose default would end the process at once, sockets
// left behind) are logged; SIGUSR1 asks for a rediscovery of the machine.
void WaitForStop(const sigset_t& signals, node::Node& node) {
  bool released = false;
  int polls = 0;
  while (true) {
    siginfo_t info{};
    const timespec poll = ++polls <= 300 ? timespec{0, 200'000'000} : timespec{5, 0};
    const int sig = released ? sigwaitinfo(&signals, &info) : sigtimedwait(&signals, &info, &poll);
    if (sig < 0) {
      ReleaseWhenReady(node, released);
      continue;
    }
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("received {}, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      return;
    }
    if (sig == SIGUSR1) node.RequestRediscovery();
    if (sig == SIGHUP || sig == SIGUSR2) {
      // Logs go to stderr (the container runtime's log file): there is nothing to reopen.
      spdlog::info("received {}: nothing to reload, still running (SIGTERM stops topodra)",
                   sig == SIGHUP ? "SIGHUP" : "SIGUSR2");
    }
  }
}

}  // namespace

int RunDaemonInProcess(const RunCommand& cmd, std::ostream& err) {
  // gRPC and the publishers run a dozen threads; glibc would give each its own malloc arena
  // (tens of MB of reserved, partly touched memory) for a daemon that allocates little.
  mallopt(M_ARENA_MAX, 2);
  const topology::TopologySource source = SourceFromFlags(cmd.topology);
  std::shared_ptr<const node::TopologyCache> cache;
  if (cmd.topology_cache == "on") {
    cache = std::make_shared<node::TopologyCache>(
        cmd.state_dir,
        node::MachineKeyInputs{source, TOPODRA_VERSION_STRING, topology::DiscovererVersion(),
                               node::HwlocEnvironment(), "/proc/self/exe"});
  }
  absl::StatusOr<node::StartTopology> start =
      node::FindTopologyAtStart(cache.get(), [&source] { return topology::Discover(source); });
  if (!start.ok()) {
    err << "topodra run: error: " << start.status().message() << "\n";
    // A named file or description is the user's input; the live machine failing is ours.
    return source.kind == topology::TopologySource::Kind::kLive ? kExitFailure : kExitUsage;
  }
  std::optional<topology::Topology> topo = std::move(start->topology);
  absl::StatusOr<node::NodeConfig> config = NodeConfigFromFlags(cmd, *topo);
  absl::StatusOr<kube::ClusterConfig> cluster =
      config.ok() ? ClusterConfigFor(cmd) : config.status();
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client =
      cluster.ok() ? kube::NewHttpRestClient(*cluster) : cluster.status();
  if (!client.ok()) {
    err << "topodra run: error: " << client.status().message() << "\n";
    return kExitUsage;
  }
  config->api_server = cluster->server;

  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP, SIGUSR2}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A peer closing a connection must be an error on that call, not the end of the daemon.
  signal(SIGPIPE, SIG_IGN);
  SetUpLogging(cmd.log_format, cmd.verbosity);

  node::NodeDeps deps{client->get(), [source] { return topology::Discover(source); }};
  deps.topology_cache = std::move(cache);
  deps.topology_start = *std::move(start);
  absl::StatusOr<std::unique_ptr<node::Node>> node =
      node::Node::Create(*std::move(config), *std::move(topo), std::move(deps));
  absl::Status started = node.ok() ? (*node)->Start() : node.status();
  if (!started.ok()) {
    spdlog::critical("{}", std::string(started.message()));
    return kExitFailure;
  }
  WaitForStop(signals, **node);
  (*node)->Stop();
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace topodra::cmd
