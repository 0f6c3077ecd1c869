// `topodra run`: the per-node daemon. Publishes the node's devices and keeps them published while
// the machine (CPUs going offline, GPUs disappearing) and the API server change.
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <ostream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cdi/reconcile.h"
#include "cdi/spec.h"
#include "cdi/spec_store.h"
#include "cmd/commands.h"
#include "cmd/enforcement.h"
#include "cmd/logging.h"
#include "common/file_io.h"
#include "common/host_paths.h"
#include "common/uevent.h"
#include "driver/cgroup/cgroupfs.h"
#include "driver/cgroup/pinning.h"
#include "driver/cgroup/reconciler.h"
#include "driver/deviceplugin/device_plugin_service.h"
#include "driver/kube/rest_client.h"
#include "driver/metrics/metrics.h"
#include "driver/metrics/metrics_server.h"
#include "driver/plugin/device_plugin_server.h"
#include "driver/plugin/instance_lock.h"
#include "driver/plugin/kubelet_plugin.h"
#include "driver/plugin/pod_resources.h"
#include "driver/prepare/claim_service.h"
#include "driver/prepare/gpu_nodes.h"
#include "driver/publish/slice_publisher.h"
#include "driver/reservation/controller.h"
#include "driver/state/ledger.h"
#include "driver/state/store.h"

namespace topodra::cmd {
namespace {

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

prepare::DriverSetup CpuSetup(const topology::Topology& topo, const publish::PublishOptions& opts,
                              const std::string& cdi_marker) {
  prepare::DriverSetup setup;
  setup.cdi_marker = cdi_marker;
  setup.driver = opts.cpu_driver;
  setup.kind = prepare::DriverKind::kCpu;
  setup.reserved = opts.reserved_cpus;
  setup.cpu_pool.name = opts.node_name;
  const claims::CpuDeviceKind kind =
      opts.cpu_mode == publish::CpuDeviceMode::kIndividual ? claims::CpuDeviceKind::kIndividual
      : opts.group_by == publish::GroupBy::kMachine        ? claims::CpuDeviceKind::kMachine
                                                           : claims::CpuDeviceKind::kGroup;
  std::set<std::string> reservation_devices;
  for (const publish::ReservedDevices& r : opts.reservations) {
    reservation_devices.insert(publish::ReservationCpuDeviceName(r.name));
  }
  for (auto& [name, cpus] : publish::CpuDeviceCpus(topo, opts)) {
    // A reservation's device is a group of its own in every grouped mode: topodra picks its
    // owners' CPUs inside it (or takes their opaque cpuset).
    const claims::CpuDeviceKind k =
        reservation_devices.contains(name) ? claims::CpuDeviceKind::kGroup : kind;
    setup.cpu_pool.devices[name] = claims::CpuDevice{k, cpus};
  }
  return setup;
}

// Only the GPUs the node publishes can be prepared.
prepare::DriverSetup GpuSetup(const topology::Topology& topo, const publish::PublishOptions& opts,
                              const std::vector<publish::Pool>& pools, const std::string& host_root,
                              const std::string& cdi_marker) {
  prepare::DriverSetup setup;
  setup.cdi_marker = cdi_marker;
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

deviceplugin::ResourceSetup DpSetup(deviceplugin::ResourceKind kind, const std::string& resource,
                                    const prepare::DriverSetup& dra) {
  deviceplugin::ResourceSetup setup;
  setup.kind = kind;
  setup.resource = resource;
  setup.reserved = dra.reserved;
  setup.cdi_marker = dra.cdi_marker;
  for (const auto& [name, gpu] : dra.gpus) setup.gpus[gpu.pci_bus_id] = gpu;
  return setup;
}

// The kubelet's rules for an extended resource name (it refuses Register otherwise), plus CDI's
// for a kind: the name is also the CDI kind of the allocations' specs.
absl::Status ValidateResourceName(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos ||
      name.substr(0, slash).ends_with("kubernetes.io") || name.starts_with("requests.")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resource name \"", name,
        "\" is not an extended resource name (want <domain>/<name>, not in kubernetes.io)"));
  }
  if (absl::Status st = cdi::ValidateKind(name); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource name \"", name, "\": ", std::string(st.message())));
  }
  return absl::OkStatus();
}

// Copies the hook binary (built next to the daemon's binary) to `dir` on the host, atomically and
// only when it differs, so a container created meanwhile never runs a half-written hook.
absl::StatusOr<std::string> InstallHook(const std::string& dir) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return absl::InternalError("cannot find our own binary (/proc/self/exe)");
  self[n] = '\0';
  std::string from = std::string(self);
  from = from.substr(0, from.rfind('/')) + "/topodra-cpuset-hook";
  const std::string to = dir + "/topodra-cpuset-hook";
  // Runtimes run it as root: one another user could write may already be theirs.
  if (absl::Status st = files::CheckOwnedFile("the CPU pinning hook", to, ::geteuid()); !st.ok()) {
    return st;
  }
  absl::StatusOr<std::string> want = files::ReadFileBounded(from, 64 << 20, files::Links::kFollow);
  if (!want.ok()) {
    return absl::Status(want.status().code(),
                        absl::StrCat("the CPU pinning hook: ", want.status().message()));
  }
  if (absl::StatusOr<std::string> have = files::ReadFileBounded(to, 64 << 20);
      have.ok() && *have == *want) {
    return to;
  }
  if (absl::Status st = files::WriteFileAtomically(dir, "topodra-cpuset-hook", *want, 0755, 0755);
      !st.ok()) {
    return st;
  }
  return to;
}

// cpuManagerPolicy static would pin containers by itself and fight the reconciler.
void WarnAboutCpuManager(const std::string& kubelet_root) {
  absl::StatusOr<std::string> text =
      files::ReadFileBounded(kubelet_root + "/cpu_manager_state", 1 << 20, files::Links::kFollow);
  if (!text.ok()) return;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_object() && j.contains("policyName") && j["policyName"].is_string() &&
      j["policyName"] != "none") {
    spdlog::warn(
        "the kubelet's CPU manager policy is \"{}\" ({}/cpu_manager_state): it pins containers "
        "itself and will fight topodra's pinning; set the kubelet's cpuManagerPolicy to none",
        j["policyName"].get<std::string>(), kubelet_root);
  }
}

// `dir` absolute and without ".", ".." or trailing slashes, spelled alike however the flag was
// (the CDI instance marker hashes it). Symbolic links are left unresolved: the marker must not
// change when a link is repointed.
std::string AbsoluteDir(const std::string& dir) {
  std::error_code ec;
  std::string out = std::filesystem::absolute(dir, ec).lexically_normal().string();
  if (ec) out = dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

struct DevicePluginRuntime {
  deviceplugin::ResourceKind kind;
  std::unique_ptr<deviceplugin::DevicePluginService> service;
  std::unique_ptr<plugin::DevicePluginServer> server;
};

// The devices each reservation's name marks in the pools (what owners' claims select).
std::map<std::string, std::vector<reservation::DeviceRef>> ReservedDevicesOf(
    const std::vector<publish::Pool>& pools) {
  std::map<std::string, std::vector<reservation::DeviceRef>> out;
  for (const publish::Pool& p : pools) {
    for (const publish::Device& d : p.devices) {
      auto it = d.attributes.find(publish::kReservationAttribute);
      if (it == d.attributes.end()) continue;
      if (const std::string* name = std::get_if<std::string>(&it->second)) {
        out[*name].push_back({p.driver, p.name, d.name});
      }
    }
  }
  return out;
}

std::vector<publish::ReservedDevices> ToPublish(const std::vector<reservation::Held>& held) {
  std::vector<publish::ReservedDevices> out;
  for (const reservation::Held& h : held) out.push_back({h.name, h.cpus, h.gpus, h.since});
  return out;
}

// Every directory the daemon writes (or puts its sockets in), created where missing and refused
// when another user could swap what is in it.
absl::Status PrepareOwnedDirectories(const RunCommand& cmd, const publish::PublishOptions& opts,
                                     bool pinning) {
  const std::string plugins = absl::StrCat(cmd.kubelet_root_dir, "/plugins/");
  std::vector<files::OwnedDirectory> dirs = {
      {"state directory", cmd.state_dir, 0700},
      {"CDI directory", cmd.cdi_dir, 0755},
      {"kubelet plugin directory", plugins + opts.cpu_driver, 0750},
      {"kubelet plugin directory", plugins + opts.gpu_driver, 0750, /*create=*/false},
      {"kubelet plugin registration directory", cmd.kubelet_root_dir + "/plugins_registry", 0755},
  };
  if (pinning) {
    dirs.push_back({"hook directory", cmd.hook_dir, 0755});
    dirs.push_back({"pinning records directory", cmd.state_dir + "/containers", 0700});
  }
  if (cmd.device_plugin != "none") {
    dirs.push_back({"device plugin directory", cmd.kubelet_root_dir + "/device-plugins", 0750});
  }
  for (const files::OwnedDirectory& d : dirs) {
    if (absl::Status st = files::PrepareOwnedDirectory(d, ::geteuid()); !st.ok()) return st;
  }
  return absl::OkStatus();
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
  absl::StatusOr<publish::TaintMode> taints = publish::ParseTaintMode(cmd.reservation_taints);
  if (!taints.ok()) {
    err << "topodra run: error: --reservation-taints: " << taints.status().message() << "\n";
    return kExitUsage;
  }
  const absl::StatusOr<Enforcement> enforcement = ResolveEnforcement(cmd);
  if (!enforcement.ok()) {
    err << "topodra run: error: " << enforcement.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::optional<std::string>> metrics_ports =
      metrics::ListeningPortsFor(cmd.metrics_address);
  if (!metrics_ports.ok()) {
    err << "topodra run: error: --metrics-address: " << metrics_ports.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::optional<std::string>> health_ports =
      metrics::ListeningPortsFor(cmd.health_address, "health address");
  if (!health_ports.ok()) {
    err << "topodra run: error: --health-address: " << health_ports.status().message() << "\n";
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
  // From the uevent thread: a device changed, rediscover now.
  sigaddset(&signals, SIGUSR1);
  // Their default is to end the process at once, sockets left behind: an operator's SIGHUP
  // ("reload") or a stray SIGUSR2 is logged and changes nothing.
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A peer closing a connection must be an error on that call, not the end of the daemon.
  signal(SIGPIPE, SIG_IGN);

  SetUpLogging(cmd.log_format, cmd.verbosity);
  spdlog::info("topodra {} starting on node {}: {} CPUs online, {} GPUs, CPU devices {}{}, API {}",
               TOPODRA_VERSION_STRING, opts->node_name, topo->cpus.size(), topo->gpus.size(),
               publish::CpuDeviceModeName(opts->cpu_mode),
               opts->cpu_mode == publish::CpuDeviceMode::kGrouped
                   ? absl::StrCat(" by ", publish::GroupByName(opts->group_by))
                   : "",
               cluster->server);
  if (!enforcement->note.empty()) spdlog::info("{}", enforcement->note);

  if (absl::Status st = PrepareOwnedDirectories(cmd, *opts, enforcement->mode == "cgroup");
      !st.ok()) {
    spdlog::critical("refusing to start: {}", std::string(st.message()));
    return kExitFailure;
  }
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
  // The mark in the names of the CDI files this instance writes: other instances sharing the
  // CDI directory leave them alone, and a wiped state directory still knows them.
  const std::string cdi_marker =
      prepare::CdiInstanceMarker(opts->node_name, AbsoluteDir(cmd.state_dir));
  // A state without snapshot or journal while this instance's CDI files remain was lost, not
  // new: starting empty would hand the CPUs and GPUs of running claims out again.
  bool leftovers = false;
  auto no_leftovers = [&]() -> absl::Status {
    auto is_trace = [&](const std::string& file) {
      const std::string marker = prepare::CdiMarkerOf(file);
      if (!marker.empty()) return marker == cdi_marker;
      return prepare::IsCdiFileOf(opts->cpu_driver, file) ||
             prepare::IsCdiFileOf(opts->gpu_driver, file) ||
             deviceplugin::IsDpCdiFileOf(cmd.device_plugin_gpu_resource, file) ||
             deviceplugin::IsDpCdiFileOf(cmd.device_plugin_cpu_resource, file);
    };
    absl::Status st =
        cdi::CheckNoCdiLeftovers(cdi::SpecStore(cmd.cdi_dir), is_trace, cmd.state_dir);
    leftovers = !st.ok();
    return st;
  };
  // A corrupt state file stops the daemon: guessing would hand CPUs out twice.
  absl::StatusOr<state::StateStore::Opened> opened =
      state::StateStore::Open(absl::StrCat(cmd.state_dir, "/checkpoint.json"), no_leftovers);
  if (!opened.ok()) {
    spdlog::critical("{}{}", leftovers ? "" : "cannot load the allocation state: ",
                     std::string(opened.status().message()));
    return kExitFailure;
  }
  const std::string state_path = opened->store->path();
  state::Ledger ledger(std::move(opened->store), std::move(opened->loaded));
  if (cmd.reservations == "off") {
    // Nobody would ever expire or release them: held devices would be lost to the node.
    absl::StatusOr<int> released = state::ReleaseAllReservations(ledger);
    if (!released.ok()) {
      spdlog::critical("--reservations=off: cannot release reservation {}",
                       std::string(released.status().message()));
      return kExitFailure;
    }
    if (*released > 0) {
      spdlog::info("--reservations=off: released the {} reservations held from before", *released);
    }
  }
  spdlog::info("state {}: {} allocations loaded ({} journal records replayed{})", state_path,
               ledger.Read([](const state::State& st) { return st.Size(); }), opened->replayed,
               opened->dropped_torn ? ", a torn last record dropped" : "");

  spdlog::info("CDI files of this instance: {}/*_i{}.json", cmd.cdi_dir, cdi_marker);

  // CPU pinning: the hook in every CPU claim's CDI spec, and the shared-pool reconciler.
  std::optional<prepare::CpusetHook> cpuset_hook;
  std::optional<cgroup::Hierarchy> hierarchy;
  const std::string records_dir = absl::StrCat(cmd.state_dir, "/containers");
  if (enforcement->mode == "cgroup") {
    absl::StatusOr<cgroup::Hierarchy> h = cgroup::FindHierarchy(cmd.cgroup_root);
    if (!h.ok()) {
      spdlog::critical("--enforce=cgroup: {} (use --enforce=none to run without CPU pinning)",
                       std::string(h.status().message()));
      return kExitFailure;
    }
    absl::StatusOr<std::string> hook = InstallHook(cmd.hook_dir);
    if (!hook.ok()) {
      spdlog::critical("--enforce=cgroup: install the hook in {}: {}", cmd.hook_dir,
                       std::string(hook.status().message()));
      return kExitFailure;
    }
    if (absl::Status st = files::MakeDirectories(records_dir, 0700); !st.ok()) {
      spdlog::critical("--enforce=cgroup: {}", std::string(st.message()));
      return kExitFailure;
    }
    hierarchy = *h;
    cpuset_hook =
        prepare::CpusetHook{*hook, records_dir, cmd.cgroup_root, cmd.strict_cpu_reservation};
    WarnAboutCpuManager(cmd.kubelet_root_dir);
    spdlog::info("CPU pinning: cgroup {} at {}, hook {}; reserved CPUs {} the shared pool",
                 h->version == cgroup::Version::kV2 ? "v2" : "v1", h->root, *hook,
                 cmd.strict_cpu_reservation ? "kept out of (--strict-cpu-reservation)" : "in");
  }

  // The shared pool follows every change of the allocations (prepare, unprepare, device plugin)
  // and of the hook's records; the reconciler also fixes every new pod cgroup as it appears.
  std::unique_ptr<cgroup::Reconciler> reconciler;
  std::atomic<bool> pinning_stop{false};
  std::thread pinning, records_watch;
  // Joined on every way out, early error returns included.
  struct Joiner {
    std::atomic<bool>* stop;
    std::thread* threads[2];
    ~Joiner() {
      stop->store(true);
      for (std::thread* t : threads) {
        if (t->joinable()) t->join();
      }
    }
  } joiner{&pinning_stop, {&pinning, &records_watch}};
  std::mutex online_mu;
  CpuSet online = topo->online;  // guarded by online_mu
  if (hierarchy) {
    reconciler =
        std::make_unique<cgroup::Reconciler>(cgroup::NewCgroupFs(*hierarchy), hierarchy->root);
    auto target_now = [&]() {
      const std::vector<cgroup::HookRecord> records =
          cgroup::ReadLiveRecords(records_dir, hierarchy->root, absl::Now());
      std::vector<std::string> stale;
      cgroup::Target t;
      ledger.Read([&](const state::State& st) {
        std::lock_guard<std::mutex> lock2(online_mu);
        t = cgroup::BuildTarget(online, opts->reserved_cpus, cmd.strict_cpu_reservation, st,
                                records, &stale);
      });
      for (const std::string& f : stale) ::unlink((records_dir + "/" + f).c_str());
      return t;
    };
    // Containers created while the daemon was down are fixed before we serve.
    const cgroup::ApplyResult first = reconciler->Apply(target_now());
    spdlog::info("CPU pinning: {} pod cgroups, {} cpusets written{}", first.cgroups, first.writes,
                 first.failed > 0 ? absl::StrCat(", ", first.failed, " failed") : "");
    if (absl::Status st = reconciler->Start(); !st.ok()) {
      spdlog::warn(
          "CPU pinning: not watching for new cgroups ({}); they are fixed at the next "
          "change",
          std::string(st.message()));
    }
    pinning = std::thread([&, target_now] {
      uint64_t seen = ledger.changes().generation();
      while (!pinning_stop.load()) {
        const uint64_t now = ledger.changes().WaitChange(seen, absl::Milliseconds(500));
        if (now == seen || pinning_stop.load()) continue;
        seen = now;
        reconciler->SetTarget(target_now());
      }
    });
    records_watch = std::thread([&] {
      const int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
      if (fd < 0 || inotify_add_watch(fd, records_dir.c_str(),
                                      IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE) < 0) {
        spdlog::warn("CPU pinning: cannot watch {}: hook records are seen at the next change",
                     records_dir);
        if (fd >= 0) ::close(fd);
        return;
      }
      char buf[4096];
      while (!pinning_stop.load()) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 500) <= 0) continue;
        while (::read(fd, buf, sizeof(buf)) > 0) {
        }
        ledger.changes().Notify();
      }
      ::close(fd);
    });
  }

  // What is published follows the machine and the reservations; both change at run time, from
  // the main loop and from the reservation controller.
  std::mutex publish_mu;
  publish::PublishOptions pub = *opts;  // guarded by publish_mu
  topology::Topology current = *topo;   // guarded by publish_mu
  pub.reservations =
      ledger.Read([](const state::State& st) { return ToPublish(reservation::HeldDevices(st)); });
  std::vector<publish::Pool> pools = publish::BuildPools(*topo, pub);  // guarded by publish_mu
  prepare::ApiClaimSource claim_source(client->get());
  const cdi::SpecStore cdi_store(cmd.cdi_dir);
  std::vector<DriverRuntime> drivers;
  const bool serve_gpus = opts->gpus && PoolOf(pools, opts->gpu_driver).has_value() &&
                          !PoolOf(pools, opts->gpu_driver)->devices.empty();
  // Outlives every service that reports to it.
  std::unique_ptr<metrics::Metrics> node_metrics;
  if (*metrics_ports) {
    metrics::MetricsOptions mo;
    mo.version = TOPODRA_VERSION_STRING;
    mo.drivers = {opts->cpu_driver};
    if (serve_gpus) mo.drivers.push_back(opts->gpu_driver);
    if (cmd.device_plugin.find("gpu") != std::string::npos) {
      mo.resources.push_back(cmd.device_plugin_gpu_resource);
    }
    if (cmd.device_plugin.find("cpu") != std::string::npos) {
      mo.resources.push_back(cmd.device_plugin_cpu_resource);
    }
    node_metrics = std::make_unique<metrics::Metrics>(mo);
  }
  for (int i = 0; i < (serve_gpus ? 2 : 1); ++i) {
    prepare::DriverSetup setup = i == 0 ? CpuSetup(*topo, pub, cdi_marker)
                                        : GpuSetup(*topo, pub, pools, cmd.host_root, cdi_marker);
    if (i == 0) setup.cpuset_hook = cpuset_hook;
    DriverRuntime d;
    d.service =
        std::make_unique<prepare::ClaimService>(setup, *topo, &ledger, &cdi_store, &claim_source);
    d.service->SetObserver(node_metrics.get());
    absl::StatusOr<prepare::ClaimService::Reconciled> reconciled = d.service->ReconcileCdi();
    if (!reconciled.ok()) {
      spdlog::critical("driver {}: CDI files in {}: {}", setup.driver, cmd.cdi_dir,
                       std::string(reconciled.status().message()));
      return kExitFailure;
    }
    plugin::PluginOptions po;
    po.driver = setup.driver;
    po.kubelet_root = cmd.kubelet_root_dir;
    if (i == 0) po.keep_lock = [lock = locks[1].get()] { return lock->Renew(); };  // its dir's
    absl::StatusOr<std::unique_ptr<plugin::KubeletPlugin>> p =
        plugin::KubeletPlugin::Start(po, d.service.get());
    if (!p.ok()) {
      spdlog::critical("driver {}: {}", setup.driver, std::string(p.status().message()));
      return kExitFailure;
    }
    d.plugin = *std::move(p);
    drivers.push_back(std::move(d));
  }

  // The legacy device-plugin API, on the same node allocations.
  std::vector<DevicePluginRuntime> device_plugins;
  for (const auto& [kind, resource] :
       std::vector<std::pair<deviceplugin::ResourceKind, std::string>>{
           {deviceplugin::ResourceKind::kGpu, cmd.device_plugin_gpu_resource},
           {deviceplugin::ResourceKind::kCpu, cmd.device_plugin_cpu_resource}}) {
    const bool gpu = kind == deviceplugin::ResourceKind::kGpu;
    if (cmd.device_plugin.find(gpu ? "gpu" : "cpu") == std::string::npos) continue;
    if (absl::Status st = ValidateResourceName(resource); !st.ok()) {
      spdlog::critical("--device-plugin-{}-resource: {}", gpu ? "gpu" : "cpu",
                       std::string(st.message()));
      return kExitUsage;
    }
    const prepare::DriverSetup dra = gpu ? GpuSetup(*topo, pub, pools, cmd.host_root, cdi_marker)
                                         : CpuSetup(*topo, pub, cdi_marker);
    DevicePluginRuntime d;
    d.kind = kind;
    deviceplugin::ResourceSetup dp_setup = DpSetup(kind, resource, dra);
    if (!gpu) dp_setup.cpuset_hook = cpuset_hook;
    d.service = std::make_unique<deviceplugin::DevicePluginService>(std::move(dp_setup), *topo,
                                                                    &ledger, &cdi_store);
    d.service->SetObserver(node_metrics.get());
    if (absl::StatusOr<cdi::ReconciledCdi> r = d.service->ReconcileCdi(); !r.ok()) {
      spdlog::critical("device plugin {}: CDI files in {}: {}", resource, cmd.cdi_dir,
                       std::string(r.status().message()));
      return kExitFailure;
    }
    plugin::DevicePluginOptions dpo;
    dpo.kubelet_root = cmd.kubelet_root_dir;
    absl::StatusOr<std::unique_ptr<plugin::DevicePluginServer>> server =
        plugin::DevicePluginServer::Start(dpo, d.service.get());
    if (!server.ok()) {
      spdlog::critical("device plugin {}: {}", resource, std::string(server.status().message()));
      return kExitFailure;
    }
    d.server = *std::move(server);
    device_plugins.push_back(std::move(d));
  }
  std::unique_ptr<plugin::DevicePluginReclaimer> reclaimer;
  if (!device_plugins.empty()) {
    const std::string socket = cmd.pod_resources_socket.empty()
                                   ? plugin::PodResourcesSocket(cmd.kubelet_root_dir)
                                   : cmd.pod_resources_socket;
    std::vector<deviceplugin::DevicePluginService*> services;
    for (DevicePluginRuntime& d : device_plugins) services.push_back(d.service.get());
    reclaimer = std::make_unique<plugin::DevicePluginReclaimer>(
        plugin::NewPodResourcesClient(socket, absl::Seconds(5)), std::move(services),
        absl::Milliseconds(static_cast<int64_t>(cmd.device_plugin_reclaim_seconds * 1000)));
  }

  std::vector<std::unique_ptr<publish::SlicePublisher>> publishers;
  for (const std::string& driver : {opts->cpu_driver, opts->gpu_driver}) {
    publish::PublisherOptions po;
    po.driver = driver;
    po.node_name = opts->node_name;
    po.mixins = *mixins;
    po.taints = *taints;
    publishers.push_back(std::make_unique<publish::SlicePublisher>(client->get(), po));
  }
  // A driver without a pool (no GPUs, --gpus=none) still runs: it removes stale slices.
  publishers[0]->SetDesired(PoolOf(pools, opts->cpu_driver));
  publishers[1]->SetDesired(PoolOf(pools, opts->gpu_driver));
  std::map<std::string, std::vector<reservation::DeviceRef>> reserved_devices =
      ReservedDevicesOf(pools);  // guarded by publish_mu

  // With publish_mu held: rebuilds the pools from the machine `now` and the reservations' held
  // devices; when they changed, republishes and tells prepare and the device plugin.
  auto republish = [&](const topology::Topology& now) {
    pub.reservations =
        ledger.Read([](const state::State& st) { return ToPublish(reservation::HeldDevices(st)); });
    std::vector<publish::Pool> next = publish::BuildPools(now, pub);
    current = now;
    if (next == pools) return false;
    pools = std::move(next);
    reserved_devices = ReservedDevicesOf(pools);
    publishers[0]->SetDesired(PoolOf(pools, opts->cpu_driver));
    publishers[1]->SetDesired(PoolOf(pools, opts->gpu_driver));
    prepare::DriverSetup cpu_setup = CpuSetup(now, pub, cdi_marker);
    cpu_setup.cpuset_hook = cpuset_hook;
    drivers[0].service->Update(std::move(cpu_setup), now);
    if (drivers.size() > 1) {
      drivers[1].service->Update(GpuSetup(now, pub, pools, cmd.host_root, cdi_marker), now);
    }
    for (DevicePluginRuntime& d : device_plugins) {
      const bool gpu = d.kind == deviceplugin::ResourceKind::kGpu;
      d.service->Update(DpSetup(d.kind, d.service->resource(),
                                gpu ? GpuSetup(now, pub, pools, cmd.host_root, cdi_marker)
                                    : CpuSetup(now, pub, cdi_marker)),
                        now);
    }
    return true;
  };

  // Reservations: placed in the state, published marked, statuses written.
  std::unique_ptr<reservation::Controller> reservations;
  if (cmd.reservations == "on") {
    reservation::ControllerOptions ro;
    ro.node_name = opts->node_name;
    reservations = std::make_unique<reservation::Controller>(
        client->get(), ro, &ledger, reservation::RealClock(),
        [&] {
          std::lock_guard<std::mutex> lock(publish_mu);
          reservation::NodeContext ctx;
          ctx.topo = current;
          ctx.reserved_cpus = pub.reserved_cpus;
          // The published GPUs by device name (no device-node lookups: this runs at every pass).
          std::set<std::string> published;
          if (std::optional<publish::Pool> pool = PoolOf(pools, opts->gpu_driver)) {
            for (const publish::Device& d : pool->devices) published.insert(d.name);
          }
          for (const topology::Gpu& gpu : current.gpus) {
            const std::string name = publish::GpuDeviceName(gpu);
            if (published.contains(name)) ctx.gpus[name] = gpu.pci_bus_id;
          }
          ctx.devices = reserved_devices;
          return ctx;
        },
        [&] {
          std::lock_guard<std::mutex> lock(publish_mu);
          if (republish(current)) spdlog::info("reservations changed the devices; republishing");
        });
  }

  // The main loop beats at every turn (at least every --topology-refresh seconds); /healthz
  // fails when it has stopped for much longer than that.
  std::atomic<int64_t> main_loop_beat{absl::ToUnixNanos(absl::Now())};
  const absl::Duration main_loop_stalled =
      absl::Seconds(2 * std::max(1, cmd.topology_refresh_seconds) + 30);
  // Declared after everything their callbacks read, so they stop before those go.
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  std::unique_ptr<metrics::MetricsServer> health_server;
  if (node_metrics != nullptr || *health_ports) {
    const std::vector<std::string> publisher_drivers = {opts->cpu_driver, opts->gpu_driver};
    if (node_metrics != nullptr) {
      node_metrics->SetSnapshotSource([&, publisher_drivers] {
        metrics::NodeSnapshot s;
        CpuSet held;
        ledger.Read([&](const state::State& st) {
          held = st.HeldCpus();
          s.gpus_allocated = static_cast<int>(st.HeldGpus().size());
        });
        CpuSet now_online;
        {
          std::lock_guard<std::mutex> lock(online_mu);
          now_online = online;
        }
        s.cpus_allocated = held.Size();
        s.cpus_reserved = opts->reserved_cpus.Size();
        s.cpus_available = (now_online - opts->reserved_cpus - held).Size();
        s.cpus_shared =
            prepare::SharedPool(now_online, opts->reserved_cpus, cmd.strict_cpu_reservation, held)
                .Size();
        for (size_t i = 0; i < publishers.size(); ++i) {
          s.slice_publish_errors[publisher_drivers[i]] = publishers[i]->status().errors;
        }
        return s;
      });
    }
    metrics::Endpoints endpoints;
    endpoints.metrics = [&] { return node_metrics->Render(); };
    endpoints.health = [&]() -> metrics::Probe {
      const absl::Duration since = absl::Now() - absl::FromUnixNanos(main_loop_beat.load());
      if (since > main_loop_stalled) {
        return {false,
                absl::StrCat("the main loop has not run for ", absl::ToInt64Seconds(since), " s")};
      }
      return {};
    };
    endpoints.ready = [&, publisher_drivers]() -> metrics::Probe {
      std::vector<std::string> missing;
      for (const DriverRuntime& d : drivers) {
        if (d.plugin->registrations() == 0) {
          missing.push_back(
              absl::StrCat("driver ", d.service->driver(), ": not registered with the kubelet"));
        }
        for (std::string& p : d.plugin->SocketProblems()) missing.push_back(std::move(p));
      }
      for (const DevicePluginRuntime& d : device_plugins) {
        if (std::string p = d.server->SocketProblem(); !p.empty()) missing.push_back(p);
      }
      for (size_t i = 0; i < publishers.size(); ++i) {
        const publish::PublisherStatus st = publishers[i]->status();
        if (!st.published_once) {
          missing.push_back(absl::StrCat(
              "driver ", publisher_drivers[i], ": ResourceSlices not published yet",
              st.last_error.empty() ? "" : " (", st.last_error, st.last_error.empty() ? "" : ")"));
        }
      }
      if (missing.empty()) return {};
      return {false, absl::StrJoin(missing, "\n")};
    };
    if (*health_ports) {
      absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> server =
          metrics::MetricsServer::Start(**health_ports, endpoints, metrics::Serving::kProbes);
      if (!server.ok()) {
        spdlog::critical("--health-address: {}", std::string(server.status().message()));
        return kExitFailure;
      }
      health_server = *std::move(server);
      spdlog::info("serving /healthz and /readyz on {}", cmd.health_address);
    }
    if (node_metrics != nullptr) {
      absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> server =
          metrics::MetricsServer::Start(**metrics_ports, std::move(endpoints));
      if (!server.ok()) {
        spdlog::critical("--metrics-address: {}", std::string(server.status().message()));
        return kExitFailure;
      }
      metrics_server = *std::move(server);
      spdlog::info("serving /metrics, /healthz and /readyz on {}", cmd.metrics_address);
    }
  }

  std::vector<std::thread> threads;
  for (auto& p : publishers) threads.emplace_back([&p] { p->Run(); });
  if (reservations != nullptr) reservations->Start();

  // CPUs going offline, GPUs disappearing: the kernel says so at once, so the device lists
  // (ListAndWatch, slices) follow within milliseconds instead of at the next periodic
  // rediscovery, which stays as the fallback.
  std::atomic<bool> stopping{false};
  std::thread uevents;
  if (absl::StatusOr<std::unique_ptr<uevent::Listener>> listener = uevent::Listener::Open();
      listener.ok()) {
    uevents = std::thread([&stopping, main_thread = pthread_self(), l = *std::move(listener)] {
      while (!stopping.load()) {
        std::optional<uevent::Uevent> e = l->Next(absl::Milliseconds(500));
        if (!e || !uevent::AffectsDevices(*e)) continue;
        spdlog::debug("uevent {}@{} ({}): rediscovering", e->action, e->devpath, e->subsystem);
        // One rediscovery for a burst (a CPU going offline sends several events).
        const absl::Time until = absl::Now() + absl::Milliseconds(10);
        while (absl::Now() < until && l->Next(until - absl::Now())) {
        }
        pthread_kill(main_thread, SIGUSR1);
      }
    });
  } else {
    spdlog::info("no kernel uevents ({}); device changes are found by the rediscovery every {} s",
                 std::string(listener.status().message()), cmd.topology_refresh_seconds);
  }

  // Discovery and start-up leave freed heap behind; give it back to the system.
  malloc_trim(0);
  const timespec refresh{std::max(1, cmd.topology_refresh_seconds), 0};
  while (true) {
    main_loop_beat = absl::ToUnixNanos(absl::Now());
    siginfo_t info{};
    const int sig = sigtimedwait(&signals, &info, &refresh);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("received {}, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    if (sig == SIGHUP || sig == SIGUSR2) {
      // Logs go to stderr (the container runtime's log file): there is nothing to reopen.
      spdlog::info("received {}: nothing to reload, still running (SIGTERM stops topodra)",
                   sig == SIGHUP ? "SIGHUP" : "SIGUSR2");
      continue;
    }
    if (sig == SIGUSR1) {
      // Coalesce: more wake-ups that came meanwhile are covered by this rediscovery.
      const timespec zero{0, 0};
      sigset_t usr1;
      sigemptyset(&usr1);
      sigaddset(&usr1, SIGUSR1);
      while (sigtimedwait(&usr1, &info, &zero) == SIGUSR1) {
      }
    }
    // CPUs hot-plugged or offlined, GPUs gone or back: rediscover and republish on change.
    absl::StatusOr<topology::Topology> now = topology::Discover(source);
    if (!now.ok()) {
      spdlog::warn("topology rediscovery failed, keeping the last one: {}",
                   std::string(now.status().message()));
      continue;
    }
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(publish_mu);
      changed = republish(*now);
    }
    malloc_trim(0);
    if (changed) {
      spdlog::info("topology changed: {} CPUs online, {} GPUs; republishing", now->cpus.size(),
                   now->gpus.size());
      {
        std::lock_guard<std::mutex> lock(online_mu);
        online = now->online;
      }
      // Reserved devices may have left the machine.
      if (reservations != nullptr) reservations->Kick();
    }
  }
  // Probes and scrapes read what is stopped next.
  metrics_server.reset();
  health_server.reset();
  stopping = true;
  if (uevents.joinable()) uevents.join();
  pinning_stop = true;
  if (pinning.joinable()) pinning.join();
  if (records_watch.joinable()) records_watch.join();
  if (reconciler != nullptr) reconciler->Stop();
  (void)joiner;
  // The kubelet first: it stops sending claims and deregisters before the slices go quiet.
  if (reservations != nullptr) reservations->Stop();
  if (reclaimer != nullptr) reclaimer->Stop();
  for (DevicePluginRuntime& d : device_plugins) d.server->Stop();
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
