// `topodra run`: the per-node daemon. Publishes the node's devices and keeps them published while
// the machine (CPUs going offline, GPUs disappearing) and the API server change.
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <ctime>
#include <ostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cmd/commands.h"
#include "driver/kube/rest_client.h"
#include "driver/publish/slice_publisher.h"

namespace topodra::cmd {
namespace {

void SetUpLogging(const RunCommand& cmd) {
  auto logger = spdlog::stderr_logger_mt("topodra");
  spdlog::set_default_logger(logger);
  // STYLE.md: -v 0 info, 1 debug, 2 trace.
  spdlog::set_level(cmd.verbosity >= 2   ? spdlog::level::trace
                    : cmd.verbosity == 1 ? spdlog::level::debug
                                         : spdlog::level::info);
  if (cmd.log_format == "json") {
    spdlog::set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"%v"})",
                        spdlog::pattern_time_type::utc);
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %L %v", spdlog::pattern_time_type::utc);
  }
}

absl::StatusOr<kube::ClusterConfig> ClusterConfigFor(const RunCommand& cmd) {
  std::string path = cmd.kubeconfig;
  if (path.empty()) {
    if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
      path = env;
      // KUBECONFIG may list several files; the first is the one that holds our context.
      path = path.substr(0, path.find(':'));
    }
  }
  if (!path.empty()) return kube::KubeconfigConfig(path);
  return kube::InClusterConfig();
}

std::optional<publish::Pool> PoolOf(const std::vector<publish::Pool>& pools,
                                    const std::string& driver) {
  for (const publish::Pool& p : pools) {
    if (p.driver == driver) return p;
  }
  return std::nullopt;
}

}  // namespace

int RunDaemon(const RunCommand& cmd, std::ostream& err) {
  const topology::TopologySource source = SourceFromFlags(cmd.topology);
  int code = kExitOk;
  std::optional<topology::Topology> topo = DiscoverOrReport(cmd.topology, "run", err, &code);
  if (!topo) return code;
  absl::StatusOr<publish::PublishOptions> opts = PublishOptionsFromFlags(cmd.publish, *topo);
  if (!opts.ok()) {
    err << "topodra run: error: " << opts.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<publish::MixinMode> mixins = publish::ParseMixinMode(cmd.slice_mixins);
  if (!mixins.ok()) {
    err << "topodra run: error: --slice-mixins: " << mixins.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<kube::ClusterConfig> cluster = ClusterConfigFor(cmd);
  if (!cluster.ok()) {
    err << "topodra run: error: " << cluster.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client = kube::NewCurlRestClient(*cluster);
  if (!client.ok()) {
    err << "topodra run: error: " << client.status().message() << "\n";
    return kExitUsage;
  }

  // Signals are taken synchronously by this thread only, so they never interrupt a worker.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A peer closing a connection must be an error on that call, not the end of the daemon.
  signal(SIGPIPE, SIG_IGN);

  SetUpLogging(cmd);
  spdlog::info("topodra {} starting on node {}: {} CPUs online, {} GPUs, CPU devices {}{}, API {}",
               TOPODRA_VERSION_STRING, opts->node_name, topo->cpus.size(), topo->gpus.size(),
               publish::CpuDeviceModeName(opts->cpu_mode),
               opts->cpu_mode == publish::CpuDeviceMode::kGrouped
                   ? absl::StrCat(" by ", publish::GroupByName(opts->group_by))
                   : "",
               cluster->server);

  std::vector<std::unique_ptr<publish::SlicePublisher>> publishers;
  for (const std::string& driver : {opts->cpu_driver, opts->gpu_driver}) {
    publish::PublisherOptions po;
    po.driver = driver;
    po.node_name = opts->node_name;
    po.mixins = *mixins;
    publishers.push_back(std::make_unique<publish::SlicePublisher>(client->get(), po));
  }
  std::vector<publish::Pool> pools = publish::BuildPools(*topo, *opts);
  // A driver without a pool (no GPUs, --gpus=none) still runs: it removes stale slices.
  publishers[0]->SetDesired(PoolOf(pools, opts->cpu_driver));
  publishers[1]->SetDesired(PoolOf(pools, opts->gpu_driver));
  std::vector<std::thread> threads;
  for (auto& p : publishers) threads.emplace_back([&p] { p->Run(); });

  const timespec refresh{std::max(1, cmd.topology_refresh_seconds), 0};
  while (true) {
    siginfo_t info{};
    const int sig = sigtimedwait(&signals, &info, &refresh);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("received {}, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    // CPUs hot-plugged or offlined, GPUs gone or back: rediscover and republish on change.
    absl::StatusOr<topology::Topology> now = topology::Discover(source);
    if (!now.ok()) {
      spdlog::warn("topology rediscovery failed, keeping the last one: {}",
                   std::string(now.status().message()));
      continue;
    }
    std::vector<publish::Pool> next = publish::BuildPools(*now, *opts);
    if (next != pools) {
      spdlog::info("topology changed: {} CPUs online, {} GPUs; republishing", now->cpus.size(),
                   now->gpus.size());
      pools = std::move(next);
      publishers[0]->SetDesired(PoolOf(pools, opts->cpu_driver));
      publishers[1]->SetDesired(PoolOf(pools, opts->gpu_driver));
    }
  }
  for (auto& p : publishers) p->Stop();
  for (std::thread& t : threads) t.join();
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace topodra::cmd
