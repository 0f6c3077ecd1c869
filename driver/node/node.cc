#include "driver/node/node.h"

#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/node/components.h"
#include "driver/node/startup.h"
#include "driver/prepare/gpu_nodes.h"
#include "driver/reservation/lifecycle.h"

namespace topodra::node {
namespace {

// How long reservation statuses wait for the slices showing what they name (AddReservations).
constexpr std::chrono::milliseconds kSlicesBeforeStatuses{1000};

// What the state load cost the thread that runs it (RUSAGE_THREAD: nothing another thread does
// counts), for `-v`: its page faults were most of what the load took beyond reading and parsing
// (docs/dev/benchmarks.md, restart).
struct LoadCost {
  long faults = 0;
  double user_ms = 0, sys_ms = 0;
  static LoadCost Now() {
    rusage r{};
    ::getrusage(RUSAGE_THREAD, &r);
    return {r.ru_minflt + r.ru_majflt, r.ru_utime.tv_sec * 1e3 + r.ru_utime.tv_usec / 1e3,
            r.ru_stime.tv_sec * 1e3 + r.ru_stime.tv_usec / 1e3};
  }
};

void LogStart(const NodeConfig& config, const topology::Topology& topo) {
  const publish::PublishOptions& opts = config.publish;
  spdlog::info("topodra {} starting on node {}: {} CPUs online, {} GPUs, CPU devices {}{}, API {}",
               config.version, opts.node_name, topo.cpus.size(), topo.gpus.size(),
               publish::CpuDeviceModeName(opts.cpu_mode),
               opts.cpu_mode == publish::CpuDeviceMode::kGrouped
                   ? absl::StrCat(" by ", publish::GroupByName(opts.group_by))
                   : "",
               config.api_server);
  if (!config.enforce_note.empty()) spdlog::info("{}", config.enforce_note);
}

}  // namespace

Node::Node(NodeConfig config, NodeDeps deps)
    : config_(std::move(config)),
      deps_(std::move(deps)),
      cdi_store_(config_.cdi_dir),
      claim_source_(deps_.client) {
  // The file holds what the node starts from; a model discovered at start is stored later.
  if (deps_.topology_start.from_cache) stored_key_ = deps_.topology_start.key;
}

Node::~Node() { Stop(); }

absl::StatusOr<std::unique_ptr<Node>> Node::Create(NodeConfig config, topology::Topology topo,
                                                   NodeDeps deps) {
  if (absl::Status st = Validate(config, topo); !st.ok()) return st;
  LogStart(config, topo);
  if (!deps.topology_start.note.empty()) spdlog::info("{}", deps.topology_start.note);
  if (absl::Status st = PrepareOwnedDirectories(config); !st.ok()) return st;
  absl::StatusOr<std::vector<std::unique_ptr<plugin::InstanceLock>>> locks =
      AcquireInstanceLocks(config);
  if (!locks.ok()) return locks.status();
  std::unique_ptr<Node> node(new Node(std::move(config), std::move(deps)));
  node->locks_ = *std::move(locks);
  if (absl::Status st = node->LoadState(); !st.ok()) return st;
  absl::StatusOr<std::optional<PinningSetup>> pinning = PreparePinning(node->config_);
  if (!pinning.ok()) return pinning.status();
  node->Assemble(std::move(topo), *std::move(pinning));
  return node;
}

absl::Status Node::LoadState() {
  // The mark in the names of the CDI files this instance writes: other instances sharing the
  // CDI directory leave them alone, and a wiped state directory still knows them.
  cdi_marker_ =
      prepare::CdiInstanceMarker(config_.publish.node_name, AbsoluteDir(config_.state_dir));
  const LoadCost before = LoadCost::Now();
  absl::StatusOr<state::StateStore::Opened> opened = OpenState(config_, cdi_marker_);
  const LoadCost after = LoadCost::Now();
  if (!opened.ok()) return opened.status();
  const std::string state_path = opened->store->path();
  ledger_ = std::make_unique<state::Ledger>(std::move(opened->store), std::move(opened->loaded));
  if (absl::Status st = ReleaseReservationsWhenOff(); !st.ok()) return st;
  spdlog::info("state {}: {} allocations loaded ({} journal records replayed{})", state_path,
               ledger_->Read([](const state::State& st) { return st.Size(); }), opened->replayed,
               opened->dropped_torn ? ", a torn last record dropped" : "");
  spdlog::debug(
      "state load (snapshot and journal read and replayed): {} page faults, CPU user {:.1f} ms, "
      "system {:.1f} ms",
      after.faults - before.faults, after.user_ms - before.user_ms, after.sys_ms - before.sys_ms);
  spdlog::info("CDI files of this instance: {}/*_i{}.json", config_.cdi_dir, cdi_marker_);
  return absl::OkStatus();
}

// --reservations=off: nobody would ever expire or release the reservations held from before,
// so their devices would be lost to the node.
absl::Status Node::ReleaseReservationsWhenOff() {
  if (config_.reservations) return absl::OkStatus();
  absl::StatusOr<int> released = state::ReleaseAllReservations(*ledger_);
  if (!released.ok()) {
    return absl::Status(released.status().code(),
                        absl::StrCat("--reservations=off: cannot release reservation ",
                                     released.status().message()));
  }
  if (*released > 0) {
    spdlog::info("--reservations=off: released the {} reservations held from before", *released);
  }
  return absl::OkStatus();
}

void Node::Assemble(topology::Topology topo, std::optional<PinningSetup> pinning) {
  inventory_options_.publish = config_.publish;
  inventory_options_.cdi_marker = cdi_marker_;
  inventory_options_.plugins_dir = absl::StrCat(config_.kubelet_root_dir, "/plugins");
  inventory_options_.metadata_dir = config_.device_metadata_dir;
  inventory_options_.device_metadata = config_.device_metadata;
  if (pinning) inventory_options_.cpuset_hook = pinning->hook;
  inventory_options_.gpu_nodes = [root = config_.host_root](const topology::Gpu& gpu) {
    return prepare::GpuDeviceNodes(gpu, root);
  };
  // Nothing is in flight yet: the loaded state is the durable one.
  held_ =
      ledger_->Read([](const state::State& st) { return ToPublish(reservation::HeldDevices(st)); });
  online_ = topo.online;
  device_health_ = std::make_unique<DeviceHealth>(config_);
  gpu_verdicts_ = device_health_->Assess(topo);
  inventory_options_.publish.unhealthy_gpus = DeviceHealth::Unhealthy(gpu_verdicts_);
  std::vector<topology::NumaNode> numa_nodes = topo.numa_nodes;
  inventory_ = Inventory::Build(inventory_options_, std::move(topo), held_);
  // The publishers start now, their writes held until the component's turn in Start: the list,
  // the probes and building the slices overlap the rest of the assembly (the health board, the
  // CPU setup with its device metadata, the claim services), which took 46-110 ms at 4096 CPUs
  // before them. The first write waits for the later of the probes and the DRA socket.
  auto publishing = std::make_unique<Publishing>(deps_.client, config_, inventory_);
  publishing->Prepare();
  device_health_->Publish(inventory_, gpu_verdicts_);
  if (config_.metrics_listen) {
    metrics::MetricsOptions mo;
    mo.version = config_.version;
    mo.drivers = {config_.publish.cpu_driver};
    if (inventory_.ServesGpus()) mo.drivers.push_back(config_.publish.gpu_driver);
    if (config_.device_plugin.serves(DevicePluginKind::kGpu)) {
      mo.resources.push_back(config_.device_plugin.gpu_resource);
    }
    if (config_.device_plugin.serves(DevicePluginKind::kCpu)) {
      mo.resources.push_back(config_.device_plugin.cpu_resource);
    }
    metrics_ = std::make_unique<metrics::Metrics>(mo);
  }
  if (pinning) {
    components_.Add(std::make_unique<Pinning>(
        *std::move(pinning), config_, ledger_.get(), [this] { return Online(); },
        std::move(numa_nodes)));
  }
  AddKubeletComponents();
  // Before publishing and reservations: a --metrics-address or --health-address that cannot be
  // bound stops the daemon before it writes to the API server or the journal. Its endpoints
  // read watch_ and publishing_ only when asked, and both exist by then (set below, at Create).
  if (config_.metrics_listen || config_.health_listen) AddHealth();
  publishing_ = components_.Add(std::move(publishing));
  if (config_.reservations) AddReservations();
  std::function<void()> first;
  if (deps_.topology_cache != nullptr) first = [this] { SettleStoredTopology(); };
  watch_ = components_.Add(std::make_unique<MachineWatch>(
      config_.topology_refresh, deps_.watch_uevents, [this] { OnMachineChanged(); }, first));
}

void Node::AddKubeletComponents() {
  std::vector<DraDrivers::Driver> drivers;
  for (const prepare::DriverKind kind : {prepare::DriverKind::kCpu, prepare::DriverKind::kGpu}) {
    const bool cpu = kind == prepare::DriverKind::kCpu;
    if (!cpu && !inventory_.ServesGpus()) continue;
    DraDrivers::Driver d{kind};
    d.service = std::make_unique<prepare::ClaimService>(
        cpu ? inventory_.CpuSetup() : inventory_.GpuSetup(), inventory_.topology(), ledger_.get(),
        &cdi_store_, &claim_source_);
    d.service->SetObserver(metrics_.get());
    // The CPU driver's plugin directory holds the second instance lock.
    if (cpu) d.keep_lock = [lock = locks_[1].get()] { return lock->Renew(); };
    d.health_board =
        device_health_->board(cpu ? config_.publish.cpu_driver : config_.publish.gpu_driver);
    drivers.push_back(std::move(d));
  }
  file_checks_.Expect(drivers.size());
  dra_ = components_.Add(std::make_unique<DraDrivers>(std::move(drivers), config_, [this] {
    if (deps_.file_check_ending) deps_.file_check_ending();
    file_checks_.Done();
  }));

  if (config_.device_plugin.kinds.empty()) return;
  std::vector<DevicePlugins::Plugin> plugins;
  for (const DevicePluginKind kind : {DevicePluginKind::kGpu, DevicePluginKind::kCpu}) {
    if (!config_.device_plugin.serves(kind)) continue;
    const deviceplugin::ResourceKind rk = kind == DevicePluginKind::kGpu
                                              ? deviceplugin::ResourceKind::kGpu
                                              : deviceplugin::ResourceKind::kCpu;
    DevicePlugins::Plugin p{rk};
    p.service = std::make_unique<deviceplugin::DevicePluginService>(
        inventory_.DevicePluginSetup(rk, config_.device_plugin.resource(kind)),
        inventory_.topology(), ledger_.get(), &cdi_store_);
    p.service->SetObserver(metrics_.get());
    plugins.push_back(std::move(p));
  }
  device_plugins_ = components_.Add(
      std::make_unique<DevicePlugins>(std::move(plugins), config_, NewExtendedResourceCheck()));
}

std::unique_ptr<ExtendedResourceCheck> Node::NewExtendedResourceCheck() const {
  const DevicePluginConfig& dp = config_.device_plugin;
  std::vector<std::string> resources;
  for (const DevicePluginKind kind : {DevicePluginKind::kGpu, DevicePluginKind::kCpu}) {
    if (dp.serves(kind)) resources.push_back(dp.resource(kind));
  }
  std::unique_ptr<deviceclass::MappingSource> source;
  if (dp.extended_resource_check != deviceclass::CheckMode::kOff) {
    source = deps_.device_classes ? deps_.device_classes()
                                  : deviceclass::NewApiMappingSource(deps_.client);
  }
  return std::make_unique<ExtendedResourceCheck>(dp.extended_resource_check, std::move(source),
                                                 std::move(resources));
}

void Node::AddReservations() {
  reservation::ControllerOptions ro;
  ro.node_name = config_.publish.node_name;
  // A status names the published devices owners select: they are on the API server first. Both
  // writes follow the journal, so a crash in between is repaired at start either way; the order
  // only spares a reader of the status a device not published yet, and keeps the status write
  // from competing with the slice write. Bounded, so an API server refusing the slices does not
  // hold the statuses back for long.
  ro.before_statuses = [this] {
    if (!publishing_->WaitPublished(kSlicesBeforeStatuses)) {
      spdlog::debug(
          "reservations: the slices are not stored after {} ms; writing the statuses anyway",
          kSlicesBeforeStatuses.count());
    }
  };
  reservations_ =
      components_.Add(std::make_unique<Reservations>(std::make_unique<reservation::Controller>(
          deps_.client, ro, ledger_.get(), reservation::RealClock(),
          [this] {
            std::lock_guard<std::mutex> lock(publish_mu_);
            return inventory_.ReservationContext();
          },
          [this](const std::vector<reservation::Held>& held) {
            {
              std::lock_guard<std::mutex> lock(publish_mu_);
              held_ = ToPublish(held);
              if (!Republish(inventory_.topology())) return;
            }
            spdlog::info("reservations changed the devices; republishing");
          })));
}

void Node::AddHealth() {
  if (metrics_ != nullptr) metrics_->SetSnapshotSource([this] { return Snapshot(); });
  metrics::Endpoints endpoints;
  if (metrics_ != nullptr) endpoints.metrics = [this] { return metrics_->Render(); };
  // The machine watch beats at every turn (at least every --topology-refresh); /healthz fails
  // when it has stopped for much longer than that.
  const absl::Duration stalled =
      2 * std::max(absl::Seconds(1), config_.topology_refresh) + absl::Seconds(30);
  endpoints.health = [this, stalled]() -> metrics::Probe {
    const absl::Duration since = absl::Now() - watch_->last_beat();
    if (since > stalled) {
      return {false,
              absl::StrCat("the main loop has not run for ", absl::ToInt64Seconds(since), " s")};
    }
    return {};
  };
  endpoints.ready = [this] { return Ready(); };
  components_.Add(std::make_unique<HealthServers>(config_, std::move(endpoints)));
}

absl::Status Node::Start() {
  publishing_->Prepare();  // started at assembly already: nothing to do then
  absl::Status st = components_.Start();
  // Assembly started the publishers before their component's turn: a component before it that
  // fails leaves them running (held) unless they are stopped here.
  if (!st.ok()) publishing_->Stop();
  // Discovery and start-up leave freed heap behind; give it back to the system.
  malloc_trim(0);
  return st;
}

void Node::Stop() {
  file_checks_.Stop();
  components_.Stop();
  // Assembly started the publishers (held) before their component's turn: a node stopped without
  // a successful Start still has them running.
  if (publishing_ != nullptr) publishing_->Stop();
}

bool Node::Republish(const topology::Topology& now, bool machine_changed) {
  inventory_options_.publish.unhealthy_gpus = DeviceHealth::Unhealthy(gpu_verdicts_);
  Inventory next = Inventory::Build(inventory_options_, now, held_);
  const bool changed = !next.SamePools(inventory_);
  inventory_ = std::move(next);
  // Health first: the streams tell the kubelet at once, the slices follow.
  device_health_->Publish(inventory_, gpu_verdicts_);
  if (changed || machine_changed) components_.OnInventory(inventory_);
  return changed;
}

void Node::SettleStoredTopology() {
  const StartTopology& start = deps_.topology_start;
  if (start.from_cache) {
    // Only once the claims' files are checked: the discovery (hwloc's import of a large machine
    // takes a CPU for a fifth of a second) would otherwise take a CPU from the kubelet's
    // registration and the check on a small node (restart_bench: 47 against 15 ms to register
    // with 10,000 claims on 2 CPUs). Not at a lower priority instead: at nice 19 an empty start
    // was 90 ms slower (a priority inversion on some lock, most likely a malloc arena's).
    if (file_checks_.Wait(std::chrono::minutes(1)) == StartLatch::WaitEnd::kStopped) return;
    Rediscover(true);
    return;
  }
  // Without a key nothing proves which machine and boot the model would be for.
  if (!start.key) return;
  topology::Topology topo;
  {
    std::lock_guard<std::mutex> lock(publish_mu_);
    topo = inventory_.topology();
  }
  KeepTopology(*start.key, topo, false);
}

void Node::KeepTopology(const MachineKey& key, const topology::Topology& topo,
                        bool machine_changed) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (!machine_changed && stored_key_ == key) return;
  const absl::Status st = deps_.topology_cache->Store(key, topo);
  if (!st.ok()) {
    // Once per failure streak: the next start discovers the machine, nothing worse.
    if (stored_key_.has_value() || !store_failed_) {
      spdlog::warn("cannot store the machine model for the next start: {}",
                   std::string(st.message()));
    }
    store_failed_ = true;
    stored_key_.reset();
    return;
  }
  store_failed_ = false;
  stored_key_ = key;
  spdlog::debug("machine model stored in {} for the next start", deps_.topology_cache->path());
}

bool Node::Rediscover(bool confirming) {
  // The GPUs' health first, on the machine as last seen: a few sysfs files, so the health
  // streams hear of a fault before the (slower) rediscovery and republishing.
  {
    topology::Topology last;  // its GPUs and source are all Assess reads
    {
      std::lock_guard<std::mutex> lock(publish_mu_);
      last.gpus = inventory_.topology().gpus;
      last.source = inventory_.topology().source;
    }
    std::map<std::string, health::Verdict> early = device_health_->Assess(last);
    std::lock_guard<std::mutex> lock(publish_mu_);
    if (early != gpu_verdicts_) {
      gpu_verdicts_ = std::move(early);
      device_health_->Publish(inventory_, gpu_verdicts_);
    }
  }
  // Read before the discovery: a change in between makes the stored key older than the model,
  // so the next start discovers again rather than trusting it.
  std::optional<MachineKey> key;
  if (deps_.topology_cache != nullptr) {
    absl::StatusOr<MachineKey> k = deps_.topology_cache->ReadKey();
    if (k.ok()) {
      key = *std::move(k);
    } else {
      spdlog::debug("the machine's key cannot be read; the model found is not stored: {}",
                    std::string(k.status().message()));
    }
  }
  // CPUs hot-plugged or offlined, GPUs gone or back: rediscover and republish on change.
  const absl::Time started = absl::Now();
  absl::StatusOr<topology::Topology> now = deps_.discover();
  // A SIGTERM during the discovery (the first turn runs at once, so right after a start) waits
  // for it to end, but not for republishing and storing what it found too.
  if (watch_ != nullptr && watch_->Stopping()) {
    spdlog::debug("stopping: the machine just discovered is not used");
    return false;
  }
  if (!now.ok()) {
    spdlog::warn("topology rediscovery failed, keeping the last one: {}",
                 std::string(now.status().message()));
    return false;
  }
  // Every look at the machine re-reads the GPUs' health (sysfs, outside the lock): a link or
  // AER counter can change without a uevent, and the refresh timer catches it.
  std::map<std::string, health::Verdict> verdicts = device_health_->Assess(*now);
  bool changed = false;
  bool machine_changed = false;
  {
    std::lock_guard<std::mutex> lock(publish_mu_);
    gpu_verdicts_ = std::move(verdicts);
    machine_changed = !(*now == inventory_.topology());
    changed = Republish(*now, machine_changed);
  }
  if (key) KeepTopology(*key, *now, machine_changed);
  malloc_trim(0);
  if (confirming) {
    spdlog::info("{} ({} ms)",
                 !machine_changed ? "stored machine model confirmed by the discovery"
                 : changed        ? "the discovery found the machine differs from the stored model"
                                  : "the discovery found the machine differs from the stored "
                                    "model in details its devices do not show; now using it",
                 absl::ToInt64Milliseconds(absl::Now() - started));
  } else if (machine_changed && !changed) {
    spdlog::info("the machine changed in details its devices do not show; now using it");
  }
  if (!changed) return false;
  spdlog::info("topology changed: {} CPUs online, {} GPUs; republishing", now->cpus.size(),
               now->gpus.size());
  {
    std::lock_guard<std::mutex> lock(online_mu_);
    online_ = now->online;
  }
  // Reserved devices may have left the machine.
  if (reservations_ != nullptr) reservations_->Kick();
  return true;
}

void Node::RequestRediscovery() { watch_->Request(); }

Inventory Node::inventory() const {
  std::lock_guard<std::mutex> lock(publish_mu_);
  return inventory_;
}

CpuSet Node::Online() const {
  std::lock_guard<std::mutex> lock(online_mu_);
  return online_;
}

metrics::NodeSnapshot Node::Snapshot() {
  metrics::NodeSnapshot s;
  CpuSet held;
  ledger_->Read([&](const state::State& st) {
    held = st.HeldCpus();
    s.gpus_allocated = static_cast<int>(st.HeldGpus().size());
  });
  const CpuSet online = Online();
  const CpuSet& reserved = config_.publish.reserved_cpus;
  s.cpus_allocated = held.Size();
  s.cpus_reserved = reserved.Size();
  s.cpus_available = (online - reserved - held).Size();
  s.cpus_shared =
      prepare::SharedPool(online, reserved, config_.strict_cpu_reservation, held).Size();
  for (const auto& [driver, st] : publishing_->Statuses()) {
    s.slice_publish_errors[driver] = st.errors;
  }
  return s;
}

metrics::Probe Node::Ready() {
  std::vector<std::string> missing = dra_->Problems();
  if (device_plugins_ != nullptr) {
    for (std::string& p : device_plugins_->Problems()) missing.push_back(std::move(p));
  }
  for (const auto& [driver, st] : publishing_->Statuses()) {
    if (!st.published_once) {
      missing.push_back(absl::StrCat("driver ", driver, ": ResourceSlices not published yet",
                                     st.last_error.empty() ? "" : " (", st.last_error,
                                     st.last_error.empty() ? "" : ")"));
    }
  }
  if (missing.empty()) return {};
  return {false, absl::StrJoin(missing, "\n")};
}

}  // namespace topodra::node
