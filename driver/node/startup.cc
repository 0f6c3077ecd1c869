#include "driver/node/startup.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cdi/reconcile.h"
#include "cdi/spec_store.h"
#include "common/file_io.h"
#include "common/host_paths.h"
#include "driver/deviceplugin/device_plugin_core.h"
#include "driver/prepare/claim_service.h"
#include "driver/prepare/metadata_files.h"
#include "nlohmann/json.hpp"

namespace topodra::node {
namespace {

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

// The same directory however spelled or reached ("a//b", a link to the kubelet root): a lock
// taken twice on one file by this process would refuse it as another instance. Lexical for a
// path not there yet, which no link can reach either.
bool SameDirectory(const std::string& a, const std::string& b) {
  const std::optional<prepare::DirIdentity> ia = prepare::IdentityOf(a);
  const std::optional<prepare::DirIdentity> ib = prepare::IdentityOf(b);
  if (ia && ib) return *ia == *ib;
  return NormalDir(a) == NormalDir(b);
}

absl::Status PrepareAll(const std::vector<files::OwnedDirectory>& dirs) {
  for (const files::OwnedDirectory& d : dirs) {
    if (absl::Status st = files::PrepareOwnedDirectory(d, ::geteuid()); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("refusing to start: ", st.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareOwnedDirectories(const NodeConfig& config) {
  const std::string plugins = absl::StrCat(config.kubelet_root_dir, "/plugins/");
  std::vector<files::OwnedDirectory> dirs = {
      {"state directory", config.state_dir, 0700},
      {"CDI directory", config.cdi_dir, 0755},
      {"kubelet plugin directory", plugins + config.publish.cpu_driver, 0750},
      {"kubelet plugin directory", plugins + config.publish.gpu_driver, 0750, /*create=*/false},
      {"kubelet plugin registration directory", config.kubelet_root_dir + "/plugins_registry",
       0755},
  };
  if (config.enforce == Enforce::kCgroup) {
    dirs.push_back({"hook directory", config.hook_dir, 0755});
    dirs.push_back({"pinning records directory", config.state_dir + "/containers", 0700});
  }
  if (!config.device_plugin.kinds.empty()) {
    dirs.push_back({"device plugin directory", config.kubelet_root_dir + "/device-plugins", 0750});
  }
  if (absl::Status st = PrepareAll(dirs); !st.ok()) return st;
  // After the kubelet plugin directory is there: the same directory through a link is told by
  // its identity only.
  const std::string& d = config.device_metadata_dir;
  if (d.empty() || SameDirectory(d, plugins)) return absl::OkStatus();
  return PrepareAll({
      {"device metadata directory", d + "/" + config.publish.cpu_driver, 0750},
      // Made here when the GPU driver is served, else its first write would make it 0755.
      {"device metadata directory", d + "/" + config.publish.gpu_driver, 0750,
       /*create=*/config.publish.gpus},
  });
}

absl::StatusOr<std::vector<std::unique_ptr<plugin::InstanceLock>>> AcquireInstanceLocks(
    const NodeConfig& config) {
  std::vector<std::unique_ptr<plugin::InstanceLock>> locks;
  const std::string plugins_dir = absl::StrCat(config.kubelet_root_dir, "/plugins");
  std::vector<std::string> paths = {
      absl::StrCat(config.state_dir, "/topodra.lock"),
      absl::StrCat(plugins_dir, "/", config.publish.cpu_driver, "/topodra.lock")};
  // Two daemons given the same --device-metadata-dir (the chart's default, say, on a host with
  // two kubelets) would each remove the other's files as leftovers of its own.
  if (!config.device_metadata_dir.empty() &&
      !SameDirectory(config.device_metadata_dir, plugins_dir)) {
    paths.push_back(
        absl::StrCat(config.device_metadata_dir, "/", config.publish.cpu_driver, "/topodra.lock"));
  }
  for (const std::string& path : paths) {
    absl::StatusOr<std::unique_ptr<plugin::InstanceLock>> lock =
        plugin::InstanceLock::Acquire(path);
    if (!lock.ok()) return lock.status();
    locks.push_back(*std::move(lock));
  }
  return locks;
}

std::string AbsoluteDir(const std::string& dir) {
  std::error_code ec;
  std::string out = std::filesystem::absolute(dir, ec).lexically_normal().string();
  if (ec) out = dir;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

absl::StatusOr<state::StateStore::Opened> OpenState(const NodeConfig& config,
                                                    const std::string& cdi_marker) {
  bool leftovers = false;
  auto no_leftovers = [&]() -> absl::Status {
    auto is_trace = [&](const std::string& file) {
      const std::string marker = prepare::CdiMarkerOf(file);
      if (!marker.empty()) return marker == cdi_marker;
      return prepare::IsCdiFileOf(config.publish.cpu_driver, file) ||
             prepare::IsCdiFileOf(config.publish.gpu_driver, file) ||
             deviceplugin::IsDpCdiFileOf(config.device_plugin.gpu_resource, file) ||
             deviceplugin::IsDpCdiFileOf(config.device_plugin.cpu_resource, file);
    };
    absl::Status st =
        cdi::CheckNoCdiLeftovers(cdi::SpecStore(config.cdi_dir), is_trace, config.state_dir);
    leftovers = !st.ok();
    return st;
  };
  absl::StatusOr<state::StateStore::Opened> opened =
      state::StateStore::Open(absl::StrCat(config.state_dir, "/checkpoint.json"), no_leftovers);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat(leftovers ? "" : "cannot load the allocation state: ",
                                     opened.status().message()));
  }
  return opened;
}

absl::StatusOr<std::optional<PinningSetup>> PreparePinning(const NodeConfig& config) {
  if (config.enforce != Enforce::kCgroup) return std::nullopt;
  absl::StatusOr<cgroup::Hierarchy> h = cgroup::FindHierarchy(config.cgroup_root);
  if (!h.ok()) {
    return absl::Status(h.status().code(),
                        absl::StrCat("--enforce=cgroup: ", h.status().message(),
                                     " (use --enforce=none to run without CPU pinning)"));
  }
  absl::StatusOr<std::string> hook = InstallHook(config.hook_dir);
  if (!hook.ok()) {
    return absl::Status(hook.status().code(),
                        absl::StrCat("--enforce=cgroup: install the hook in ", config.hook_dir,
                                     ": ", hook.status().message()));
  }
  const std::string records_dir = absl::StrCat(config.state_dir, "/containers");
  if (absl::Status st = files::MakeDirectories(records_dir, 0700); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("--enforce=cgroup: ", st.message()));
  }
  WarnAboutCpuManager(config.kubelet_root_dir);
  spdlog::info("CPU pinning: cgroup {} at {}, hook {}; reserved CPUs {} the shared pool; memory {}",
               h->version == cgroup::Version::kV2 ? "v2" : "v1", h->root, *hook,
               config.strict_cpu_reservation ? "kept out of (--strict-cpu-reservation)" : "in",
               config.numa_memory ? "on the claims' NUMA nodes (--numa-memory=claim)"
                                  : "left alone (--numa-memory=none)");
  return PinningSetup{*h, records_dir,
                      prepare::CpusetHook{*hook, records_dir, config.cgroup_root,
                                          config.strict_cpu_reservation, config.numa_memory}};
}

}  // namespace topodra::node
