// `topodra run`: the per-node daemon. Publishes the node's devices and keeps them published while
// the machine (CPUs going offline, GPUs disappearing) and the API server change.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <ctime>
#include <ostream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cdi/spec_store.h"
#include "cmd/commands.h"
#include "driver/kube/rest_client.h"
#include "driver/plugin/instance_lock.h"
#include "driver/plugin/kubelet_plugin.h"
#include "driver/prepare/claim_service.h"
#include "driver/prepare/gpu_nodes.h"
#include "driver/publish/slice_publisher.h"
#include "driver/state/store.h"

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

prepare::DriverSetup CpuSetup(const topology::Topology& topo, const publish::PublishOptions& opts) {
  prepare::DriverSetup setup;
  setup.driver = opts.cpu_driver;
  setup.kind = prepare::DriverKind::kCpu;
  setup.reserved = opts.reserved_cpus;
  setup.cpu_pool.name = opts.node_name;
  const claims::CpuDeviceKind kind =
      opts.cpu_mode == publish::CpuDeviceMode::kIndividual ? claims::CpuDeviceKind::kIndividual
      : opts.group_by == publish::GroupBy::kMachine        ? claims::CpuDeviceKind::kMachine
                                                           : claims::CpuDeviceKind::kGroup;
  for (auto& [name, cpus] : publish::CpuDeviceCpus(topo, opts)) {
    setup.cpu_pool.devices[name] = claims::CpuDevice{kind, cpus};
  }
  return setup;
}

// Only the GPUs the node publishes can be prepared.
prepare::DriverSetup GpuSetup(const topology::Topology& topo, const publish::PublishOptions& opts,
                              const std::vector<publish::Pool>& pools,
                              const std::string& host_root) {
  prepare::DriverSetup setup;
  setup.driver = opts.gpu_driver;
  setup.kind = prepare::DriverKind::kGpu;
  setup.gpu_pool = opts.node_name;
  std::set<std::string> published;
  if (std::optional<publish::Pool> pool = PoolOf(pools, opts.gpu_driver)) {
    for (const publish::Device& d : pool->devices) published.insert(d.name);
  }
  for (const topology::Gpu& gpu : topo.gpus) {
    const std::string name = publish::GpuDeviceName(gpu);
    if (!published.contains(name)) continue;
    setup.gpus[name] = prepare::GpuDevice{gpu.pci_bus_id, prepare::GpuDeviceNodes(gpu, host_root)};
  }
  return setup;
}

struct DriverRuntime {
  std::unique_ptr<prepare::ClaimService> service;
  std::unique_ptr<plugin::KubeletPlugin> plugin;
};

}  // namespace

int RunDaemonInProcess(const RunCommand& cmd, std::ostream& err) {
  // gRPC and the publishers run a dozen threads; glibc would give each its own malloc arena
  // (tens of MB of reserved, partly touched memory) for a daemon that allocates little.
  mallopt(M_ARENA_MAX, 2);
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

  // One instance per node: the state and the kubelet sockets are not to be shared.
  std::vector<std::unique_ptr<plugin::InstanceLock>> locks;
  for (const std::string& path :
       {absl::StrCat(cmd.state_dir, "/topodra.lock"),
        absl::StrCat(cmd.kubelet_root_dir, "/plugins/", opts->cpu_driver, "/topodra.lock")}) {
    absl::StatusOr<std::unique_ptr<plugin::InstanceLock>> lock =
        plugin::InstanceLock::Acquire(path);
    if (!lock.ok()) {
      spdlog::critical("{}", std::string(lock.status().message()));
      return kExitFailure;
    }
    locks.push_back(*std::move(lock));
  }
  // A corrupt state file stops the daemon: guessing would hand CPUs out twice.
  absl::StatusOr<state::StateStore::Opened> opened =
      state::StateStore::Open(absl::StrCat(cmd.state_dir, "/checkpoint.json"));
  if (!opened.ok()) {
    spdlog::critical("cannot load the allocation state: {}",
                     std::string(opened.status().message()));
    return kExitFailure;
  }
  prepare::NodeAllocations node;
  node.store = opened->store.get();
  node.state = std::move(opened->loaded);
  spdlog::info("state {}: {} allocations loaded ({} journal records replayed{})",
               opened->store->path(), node.state.Size(), opened->replayed,
               opened->dropped_torn ? ", a torn last record dropped" : "");

  std::vector<publish::Pool> pools = publish::BuildPools(*topo, *opts);
  prepare::ApiClaimSource claim_source(client->get());
  const cdi::SpecStore cdi_store(cmd.cdi_dir);
  std::vector<DriverRuntime> drivers;
  const bool serve_gpus = opts->gpus && PoolOf(pools, opts->gpu_driver).has_value() &&
                          !PoolOf(pools, opts->gpu_driver)->devices.empty();
  for (int i = 0; i < (serve_gpus ? 2 : 1); ++i) {
    prepare::DriverSetup setup =
        i == 0 ? CpuSetup(*topo, *opts) : GpuSetup(*topo, *opts, pools, cmd.host_root);
    DriverRuntime d;
    d.service =
        std::make_unique<prepare::ClaimService>(setup, *topo, &node, &cdi_store, &claim_source);
    absl::StatusOr<prepare::ClaimService::Reconciled> reconciled = d.service->ReconcileCdi();
    if (!reconciled.ok()) {
      spdlog::critical("driver {}: CDI files in {}: {}", setup.driver, cmd.cdi_dir,
                       std::string(reconciled.status().message()));
      return kExitFailure;
    }
    plugin::PluginOptions po;
    po.driver = setup.driver;
    po.kubelet_root = cmd.kubelet_root_dir;
    absl::StatusOr<std::unique_ptr<plugin::KubeletPlugin>> p =
        plugin::KubeletPlugin::Start(po, d.service.get());
    if (!p.ok()) {
      spdlog::critical("driver {}: {}", setup.driver, std::string(p.status().message()));
      return kExitFailure;
    }
    d.plugin = *std::move(p);
    drivers.push_back(std::move(d));
  }

  std::vector<std::unique_ptr<publish::SlicePublisher>> publishers;
  for (const std::string& driver : {opts->cpu_driver, opts->gpu_driver}) {
    publish::PublisherOptions po;
    po.driver = driver;
    po.node_name = opts->node_name;
    po.mixins = *mixins;
    publishers.push_back(std::make_unique<publish::SlicePublisher>(client->get(), po));
  }
  // A driver without a pool (no GPUs, --gpus=none) still runs: it removes stale slices.
  publishers[0]->SetDesired(PoolOf(pools, opts->cpu_driver));
  publishers[1]->SetDesired(PoolOf(pools, opts->gpu_driver));
  std::vector<std::thread> threads;
  for (auto& p : publishers) threads.emplace_back([&p] { p->Run(); });

  // Discovery and start-up leave freed heap behind; give it back to the system.
  malloc_trim(0);
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
    malloc_trim(0);
    if (next != pools) {
      spdlog::info("topology changed: {} CPUs online, {} GPUs; republishing", now->cpus.size(),
                   now->gpus.size());
      pools = std::move(next);
      publishers[0]->SetDesired(PoolOf(pools, opts->cpu_driver));
      publishers[1]->SetDesired(PoolOf(pools, opts->gpu_driver));
      drivers[0].service->Update(CpuSetup(*now, *opts), *now);
      if (drivers.size() > 1) {
        drivers[1].service->Update(GpuSetup(*now, *opts, pools, cmd.host_root), *now);
      }
    }
  }
  // The kubelet first: it stops sending claims and deregisters before the slices go quiet.
  for (DriverRuntime& d : drivers) d.plugin->Stop();
  for (auto& p : publishers) p->Stop();
  for (std::thread& t : threads) t.join();
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace topodra::cmd

// What run_loader.cc looks up with dlsym.
extern "C" __attribute__((visibility("default"))) int topodra_run_daemon(
    const topodra::cmd::RunCommand* cmd, std::ostream* err) {
  return topodra::cmd::RunDaemonInProcess(*cmd, *err);
}
