#include "driver/node/components.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/cgroup/pinning.h"
#include "driver/plugin/pod_resources.h"

namespace topodra::node {

// ---- Pinning

Pinning::Pinning(PinningSetup setup, const NodeConfig& config, state::Ledger* ledger,
                 std::function<CpuSet()> online, std::vector<topology::NumaNode> numa_nodes)
    : setup_(std::move(setup)),
      reserved_(config.publish.reserved_cpus),
      strict_(config.strict_cpu_reservation),
      ledger_(ledger),
      online_(std::move(online)),
      numa_memory_(config.numa_memory),
      numa_nodes_(std::move(numa_nodes)) {}

cgroup::Target Pinning::TargetNow() {
  const std::vector<cgroup::HookRecord> records =
      cgroup::ReadLiveRecords(setup_.records_dir, setup_.hierarchy.root, absl::Now());
  std::vector<std::string> stale;
  cgroup::Target t;
  const CpuSet online = online_();
  // The root's memory nodes are read each time: memory hotplug changes them.
  std::optional<cgroup::NumaMemory> memory;
  if (numa_memory_) {
    absl::StatusOr<CpuSet> all = cgroup::RootMems(setup_.hierarchy);
    if (all.ok()) {
      memory = cgroup::NumaMemory{*all, numa_nodes_};
    } else if (!root_mems_warned_.exchange(true)) {
      spdlog::warn("--numa-memory=claim: cpuset.mems is left alone: {}",
                   std::string(all.status().message()));
    }
  }
  ledger_->Read([&](const state::State& st) {
    t = cgroup::BuildTarget(online, reserved_, strict_, st, records, &stale,
                            memory ? &*memory : nullptr);
  });
  for (const std::string& f : stale) ::unlink((setup_.records_dir + "/" + f).c_str());
  return t;
}

absl::Status Pinning::Start() {
  stop_ = false;
  reconciler_ = std::make_unique<cgroup::Reconciler>(cgroup::NewCgroupFs(setup_.hierarchy),
                                                     setup_.hierarchy.root);
  // Containers created while the daemon was down are fixed before we serve.
  const cgroup::ApplyResult first = reconciler_->Apply(TargetNow());
  spdlog::info("CPU pinning: {} pod cgroups, {} cpusets written{}", first.cgroups, first.writes,
               first.failed > 0 ? absl::StrCat(", ", first.failed, " failed") : "");
  if (absl::Status st = reconciler_->Start(); !st.ok()) {
    spdlog::warn(
        "CPU pinning: not watching for new cgroups ({}); they are fixed at the next "
        "change",
        std::string(st.message()));
  }
  follow_ = std::thread([this] { FollowAllocations(); });
  records_ = std::thread([this] { WatchRecords(); });
  return absl::OkStatus();
}

void Pinning::FollowAllocations() {
  uint64_t seen = ledger_->changes().generation();
  while (!stop_.load()) {
    const uint64_t now = ledger_->changes().WaitChange(seen, absl::Milliseconds(500));
    if (now == seen || stop_.load()) continue;
    seen = now;
    reconciler_->SetTarget(TargetNow());
  }
}

// The hook's records of which container holds which claim: a new one changes the target.
void Pinning::WatchRecords() {
  const int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0 || inotify_add_watch(fd, setup_.records_dir.c_str(),
                                  IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE) < 0) {
    spdlog::warn("CPU pinning: cannot watch {}: hook records are seen at the next change",
                 setup_.records_dir);
    if (fd >= 0) ::close(fd);
    return;
  }
  char buf[4096];
  while (!stop_.load()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 500) <= 0) continue;
    while (::read(fd, buf, sizeof(buf)) > 0) {
    }
    ledger_->changes().Notify();
  }
  ::close(fd);
}

void Pinning::Stop() {
  stop_ = true;
  if (follow_.joinable()) follow_.join();
  if (records_.joinable()) records_.join();
  reconciler_->Stop();
}

// ---- DraDrivers

DraDrivers::DraDrivers(std::vector<Driver> drivers, const NodeConfig& config,
                       std::function<void()> checked)
    : drivers_(std::move(drivers)),
      kubelet_root_(config.kubelet_root_dir),
      cdi_dir_(config.cdi_dir),
      health_(config.dra_health),
      checked_(std::move(checked)) {}

absl::Status DraDrivers::Start() {
  for (Driver& d : drivers_) {
    const std::string& driver = d.service->driver();
    // The claims' CDI and metadata files are checked in the background, beside the sockets'
    // start and the registration, claim by claim under the same exclusion as the kubelet's calls
    // (ClaimService::StartFileCheck): with thousands of claims reading every file before serving
    // was most of a restart. Until a file is checked the kubelet and
    // the runtime see it as the crash left it.
    spdlog::info("driver {}: checking CDI files in the background", driver);
    d.service->StartFileCheck([driver, dir = cdi_dir_, checked = checked_](
                                  const absl::StatusOr<prepare::ClaimService::Reconciled>& r) {
      if (checked) checked();
      if (absl::IsCancelled(r.status())) return;
      if (!r.ok()) {
        spdlog::error("driver {}: CDI files in \"{}\": {}", driver, dir,
                      std::string(r.status().message()));
        return;
      }
      // Also marks the end of the check in the log (restart_bench times it).
      spdlog::info("driver {}: CDI files checked: {} written, {} removed", driver, r->written,
                   r->removed);
    });
    plugin::PluginOptions po;
    po.driver = driver;
    po.kubelet_root = kubelet_root_;
    po.keep_lock = d.keep_lock;
    po.health = health_;
    po.health_board = d.health_board;
    absl::StatusOr<std::unique_ptr<plugin::KubeletPlugin>> p =
        plugin::KubeletPlugin::Start(po, d.service.get());
    if (!p.ok()) {
      Stop();
      return absl::Status(p.status().code(),
                          absl::StrCat("driver ", driver, ": ", p.status().message()));
    }
    d.plugin = *std::move(p);
  }
  return absl::OkStatus();
}

void DraDrivers::Stop() {
  for (Driver& d : drivers_) {
    if (d.plugin != nullptr) d.plugin->Stop();
    d.plugin.reset();
    d.service->StopFileCheck();
  }
}

void DraDrivers::OnInventory(const Inventory& now) {
  for (Driver& d : drivers_) {
    const bool cpu = d.kind == prepare::DriverKind::kCpu;
    d.service->Update(cpu ? now.CpuSetup() : now.GpuSetup(), now.topology());
  }
}

std::vector<std::string> DraDrivers::Problems() const {
  std::vector<std::string> out;
  for (const Driver& d : drivers_) {
    if (d.plugin == nullptr) continue;
    if (d.plugin->registrations() == 0) {
      out.push_back(
          absl::StrCat("driver ", d.service->driver(), ": not registered with the kubelet"));
    }
    for (std::string& p : d.plugin->SocketProblems()) out.push_back(std::move(p));
    if (std::string p = d.service->FileCheckProblem(); !p.empty()) {
      out.push_back(
          absl::StrCat("driver ", d.service->driver(), ": CDI files in \"", cdi_dir_, "\": ", p));
    }
  }
  return out;
}

// ---- DevicePlugins

DevicePlugins::DevicePlugins(std::vector<Plugin> plugins, const NodeConfig& config,
                             std::unique_ptr<ExtendedResourceCheck> check)
    : plugins_(std::move(plugins)), config_(config), check_(std::move(check)) {}

absl::Status DevicePlugins::Serve(size_t i) {
  plugin::DevicePluginOptions dpo;
  dpo.kubelet_root = config_.kubelet_root_dir;
  absl::StatusOr<std::unique_ptr<plugin::DevicePluginServer>> server =
      plugin::DevicePluginServer::Start(dpo, plugins_[i].service.get());
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("device plugin ", plugins_[i].service->resource(), ": ",
                                     server.status().message()));
  }
  servers_[i] = *std::move(server);
  return absl::OkStatus();
}

absl::Status DevicePlugins::Start() {
  absl::StatusOr<ExtendedResourceCheck::Refused> refused = check_->Check();
  if (!refused.ok()) return refused.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    servers_.resize(plugins_.size());
  }
  for (size_t i = 0; i < plugins_.size(); ++i) {
    deviceplugin::DevicePluginService* s = plugins_[i].service.get();
    if (absl::StatusOr<cdi::ReconciledCdi> r = s->ReconcileCdi(); !r.ok()) {
      Stop();
      return absl::Status(r.status().code(),
                          absl::StrCat("device plugin ", s->resource(), ": CDI files in \"",
                                       config_.cdi_dir, "\": ", r.status().message()));
    }
    if (auto it = refused->find(s->resource()); it != refused->end()) {
      spdlog::warn(
          "device plugin {}: not served: {}, and one node must not serve a resource "
          "through both a device plugin and DRA",
          s->resource(), it->second);
      continue;
    }
    absl::Status st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      st = Serve(i);
    }
    if (!st.ok()) {
      Stop();
      return st;
    }
  }
  check_->Watch([this](const ExtendedResourceCheck::Refused& r) { Follow(r); });
  if (plugins_.empty()) return absl::OkStatus();
  const std::string socket = config_.device_plugin.pod_resources_socket.empty()
                                 ? plugin::PodResourcesSocket(config_.kubelet_root_dir)
                                 : config_.device_plugin.pod_resources_socket;
  std::vector<deviceplugin::DevicePluginService*> services;
  for (const Plugin& p : plugins_) services.push_back(p.service.get());
  reclaimer_ = std::make_unique<plugin::DevicePluginReclaimer>(
      plugin::NewPodResourcesClient(socket, absl::Seconds(5)), std::move(services),
      config_.device_plugin.reclaim_interval);
  return absl::OkStatus();
}

// A DeviceClass came to map a served resource: the server stops and its socket goes, so the
// kubelet counts none of it allocatable and the scheduler serves the name through DRA. One that
// no DeviceClass maps any more is served again.
void DevicePlugins::Follow(const ExtendedResourceCheck::Refused& refused) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < plugins_.size() && i < servers_.size(); ++i) {
    const std::string& resource = plugins_[i].service->resource();
    auto it = refused.find(resource);
    if (it != refused.end() && servers_[i] != nullptr) {
      servers_[i]->Stop();
      servers_[i].reset();
      spdlog::warn(
          "device plugin {}: no longer served: {}, and one node must not serve a "
          "resource through both a device plugin and DRA; allocations made are kept "
          "until their pods are gone",
          resource, it->second);
    } else if (it == refused.end() && servers_[i] == nullptr) {
      if (absl::Status st = Serve(i); !st.ok()) {
        spdlog::warn("{}; tried again at the next DeviceClass change", std::string(st.message()));
      } else {
        spdlog::info("device plugin {}: served again: no DeviceClass maps it", resource);
      }
    }
  }
}

void DevicePlugins::Stop() {
  check_->Stop();
  if (reclaimer_ != nullptr) reclaimer_->Stop();
  reclaimer_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : servers_) {
    if (s != nullptr) s->Stop();
  }
  servers_.clear();
}

void DevicePlugins::OnInventory(const Inventory& now) {
  for (const Plugin& p : plugins_) {
    p.service->Update(now.DevicePluginSetup(p.kind, p.service->resource()), now.topology());
  }
}

std::vector<std::string> DevicePlugins::Problems() const {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& s : servers_) {
    if (s == nullptr) continue;
    if (std::string p = s->SocketProblem(); !p.empty()) out.push_back(std::move(p));
  }
  return out;
}

// ---- Publishing

Publishing::Publishing(kube::RestClient* client, const NodeConfig& config, const Inventory& first) {
  for (const std::string& driver : {config.publish.cpu_driver, config.publish.gpu_driver}) {
    publish::PublisherOptions po;
    po.driver = driver;
    po.node_name = config.publish.node_name;
    po.mixins = config.slice_mixins;
    po.taints = config.reservation_taints;
    po.list_attributes = config.list_attributes;
    po.node_allocatable = config.node_allocatable;
    // A pool of a few dozen slices goes out in a few round trips instead of one per slice,
    // without holding more connections to the API server than a kubelet does.
    po.write_concurrency = 4;
    Publisher p;
    p.driver = driver;
    p.publisher = std::make_unique<publish::SlicePublisher>(client, po);
    publishers_.push_back(std::move(p));
  }
  OnInventory(first);
}

Publishing::~Publishing() { Stop(); }

void Publishing::Prepare() {
  for (Publisher& p : publishers_) {
    if (p.thread.joinable()) continue;
    p.publisher->HoldWrites();
    p.thread = std::thread([pub = p.publisher.get()] { pub->Run(); });
  }
}

absl::Status Publishing::Start() {
  for (Publisher& p : publishers_) {
    if (!p.thread.joinable()) p.thread = std::thread([pub = p.publisher.get()] { pub->Run(); });
    p.publisher->ReleaseWrites();
  }
  return absl::OkStatus();
}

void Publishing::Stop() {
  for (Publisher& p : publishers_) p.publisher->Stop();
  for (Publisher& p : publishers_) {
    if (p.thread.joinable()) p.thread.join();
  }
}

void Publishing::OnInventory(const Inventory& now) {
  for (Publisher& p : publishers_) p.publisher->SetDesired(now.SharedPool(p.driver));
}

bool Publishing::WaitPublished(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (Publisher& p : publishers_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !p.publisher->WaitPublished(left)) return false;
  }
  return true;
}

std::vector<std::pair<std::string, publish::PublisherStatus>> Publishing::Statuses() const {
  std::vector<std::pair<std::string, publish::PublisherStatus>> out;
  for (const Publisher& p : publishers_) out.emplace_back(p.driver, p.publisher->status());
  return out;
}

// ---- MachineWatch

MachineWatch::MachineWatch(absl::Duration refresh, bool uevents, std::function<void()> changed,
                           std::function<void()> first)
    : refresh_(refresh),
      uevents_(uevents),
      changed_(std::move(changed)),
      first_(std::move(first)),
      beat_(absl::ToUnixNanos(absl::Now())) {}

absl::Status MachineWatch::Start() {
  if (uevents_) {
    absl::StatusOr<std::unique_ptr<uevent::Listener>> listener = uevent::Listener::Open();
    if (listener.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      listener_ = *std::move(listener);
    } else {
      spdlog::info("no kernel uevents ({}); device changes are found by the rediscovery every {} s",
                   std::string(listener.status().message()), absl::ToInt64Seconds(refresh_));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  beat_ = absl::ToUnixNanos(absl::Now());
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void MachineWatch::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (listener_ != nullptr) listener_->Wake();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  listener_.reset();
}

void MachineWatch::Request() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    requested_ = true;
    // The loop may be waiting on the uevent socket rather than on cv_: wake it there too.
    if (listener_ != nullptr) listener_->Wake();
  }
  cv_.notify_all();
}

// Waits at most until `until` (and at most 500 ms, a bound kept in case a wake-up is ever lost)
// for a device uevent, a request or Stop; true when a rediscovery is due.
bool MachineWatch::WaitForChange(absl::Time until) {
  const absl::Duration slice =
      std::clamp(until - absl::Now(), absl::ZeroDuration(), absl::Milliseconds(500));
  if (listener_ != nullptr) {
    std::optional<uevent::Uevent> e = listener_->Next(slice);
    if (e && uevent::AffectsDevices(*e)) {
      spdlog::debug("uevent {}@{} ({}): rediscovering", e->action, e->devpath, e->subsystem);
      // One rediscovery for a burst (a CPU going offline sends several events at once): the
      // burst ends at the first quiet gap, 10 ms at most. An event that comes later only costs
      // another rediscovery.
      const absl::Time burst_end = absl::Now() + kBurstMax;
      while (absl::Now() < burst_end &&
             listener_->Next(std::min(kBurstGap, burst_end - absl::Now()))) {
      }
      // This rediscovery answers a request made before it, too.
      std::lock_guard<std::mutex> lock(mu_);
      requested_ = false;
      return true;
    }
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(requested_, false);
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, absl::ToChronoNanoseconds(slice), [this] { return stop_ || requested_; });
  return std::exchange(requested_, false);
}

bool MachineWatch::Stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

void MachineWatch::Run() {
  if (first_ && !Stopping()) first_();
  absl::Time next = absl::Now() + refresh_;
  while (!Stopping()) {
    beat_ = absl::ToUnixNanos(absl::Now());
    const bool timer = absl::Now() >= next;
    const bool due = timer || WaitForChange(next);
    if (!due || Stopping()) continue;
    // Every discovery the daemon makes after its start has one of three causes; say which.
    spdlog::debug(
        "rediscovering the machine: {}",
        timer ? absl::StrCat("--topology-refresh (", absl::ToInt64Seconds(refresh_), " s) elapsed")
              : std::string("a device uevent or a request (SIGUSR1)"));
    next = absl::Now() + refresh_;
    changed_();
  }
}

// ---- HealthServers

HealthServers::HealthServers(const NodeConfig& config, metrics::Endpoints endpoints)
    : config_(config), endpoints_(std::move(endpoints)) {}

absl::Status HealthServers::Start() {
  if (config_.health_listen) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> server = metrics::MetricsServer::Start(
        *config_.health_listen, endpoints_, metrics::Serving::kProbes);
    if (!server.ok()) {
      return absl::Status(server.status().code(),
                          absl::StrCat("--health-address: ", server.status().message()));
    }
    health_ = *std::move(server);
    spdlog::info("serving /healthz and /readyz on {}", config_.health_address);
  }
  if (config_.metrics_listen) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> server =
        metrics::MetricsServer::Start(*config_.metrics_listen, endpoints_);
    if (!server.ok()) {
      health_.reset();
      return absl::Status(server.status().code(),
                          absl::StrCat("--metrics-address: ", server.status().message()));
    }
    metrics_ = *std::move(server);
    spdlog::info("serving /metrics, /healthz and /readyz on {}", config_.metrics_address);
  }
  return absl::OkStatus();
}

void HealthServers::Stop() {
  metrics_.reset();
  health_.reset();
}

}  // namespace topodra::node
