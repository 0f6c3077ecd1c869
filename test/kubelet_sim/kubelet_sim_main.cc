// kubelet_sim: the kubelet simulator as a command, for `make demo` and manual checks.
//
//   kubelet_sim --root-dir D wait DRIVER [--timeout 10s]
//   kubelet_sim --root-dir D prepare DRIVER NS/NAME/UID... [--timeout 10s]
//   kubelet_sim --root-dir D unprepare DRIVER NS/NAME/UID... [--timeout 10s]
//   kubelet_sim --root-dir D allocate RESOURCE COUNT [--timeout 10s]
//   kubelet_sim --root-dir D health DRIVER [MESSAGES] [--health-kubelet 1.37|1.36]
//
// Each run is a freshly started kubelet: it discovers the plugin's registration socket, registers
// it (waiting up to --timeout) and then makes the one call. Exit codes: 0 ok (prepare/unprepare:
// the RPC succeeded, even with per-claim errors), 1 the work failed, 2 bad flags.
// `allocate` is the device manager's side: it serves <root-dir>/device-plugins/kubelet.sock,
// waits for the plugin of RESOURCE to register and list COUNT healthy devices, asks for its
// preferred allocation of COUNT among the healthy ones and allocates them for one container,
// as the kubelet does when a container requests COUNT of RESOURCE.
// `health` is the kubelet's DRA health client: it picks the DRAResourceHealth version a kubelet
// of --health-kubelet would (1.37: from supported_versions; 1.36 and older: v1alpha1), reads
// MESSAGES messages (default 1) and prints its per-device cache.
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "test/kubelet_sim/device_plugin_sim.h"
#include "test/kubelet_sim/health_sim.h"
#include "test/kubelet_sim/kubelet_sim.h"

namespace {

using topodra::testing::ClaimResult;
using topodra::testing::KubeletSimOptions;
using topodra::testing::KubeletSimulator;
using topodra::testing::PrepareClaim;
using topodra::testing::Registration;
using Json = nlohmann::ordered_json;

constexpr char kUsage[] =
    "usage: kubelet_sim --root-dir DIR [--timeout 10s] [--known-versions v1.DRAPlugin,...] "
    "COMMAND DRIVER [ARGS]\n"
    "commands:\n"
    "  wait DRIVER                   wait for the driver to register; print the registration\n"
    "  prepare DRIVER NS/NAME/UID... NodePrepareResources for the claims; print the response\n"
    "  unprepare DRIVER NS/NAME/UID... NodeUnprepareResources for the claims; print the response\n"
    "  allocate RESOURCE COUNT       device manager: GetPreferredAllocation (if offered) +\n"
    "                                Allocate of COUNT healthy devices for one container +\n"
    "                                PreStartContainer (if required); print the response\n"
    "  health DRIVER [MESSAGES]      open the DRA health stream a kubelet of --health-kubelet\n"
    "                                (1.37, default, or 1.36) picks; read MESSAGES messages\n"
    "                                (default 1); print the service and per-device health\n";

int Fail(int code, const std::string& msg) {
  std::cerr << "kubelet_sim: " << msg << "\n";
  return code;
}

std::string Dump(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

Json RegistrationJson(const Registration& r) {
  return Json{{"driver", r.driver},
              {"endpoint", r.endpoint},
              {"version", r.version},
              {"socketPath", r.socket_path},
              {"supportedVersions", r.supported_versions},
              {"generation", r.generation}};
}

Json PrepareJson(const std::map<std::string, ClaimResult>& results) {
  Json out = Json::object();
  for (const auto& [uid, result] : results) {
    Json devices = Json::array();
    for (const auto& d : result.devices) {
      Json dev{{"requestNames", d.request_names},
               {"poolName", d.pool},
               {"deviceName", d.device},
               {"cdiDeviceIds", d.cdi_device_ids}};
      if (d.share_id) dev["shareId"] = *d.share_id;
      devices.push_back(std::move(dev));
    }
    out[uid] = Json{{"devices", std::move(devices)}, {"error", result.error}};
  }
  return out;
}

int Allocate(const std::string& dir, const std::string& resource, int count,
             absl::Duration timeout) {
  using topodra::testing::DevicePluginSimulator;
  using topodra::testing::PluginDevice;
  auto dp = DevicePluginSimulator::Start({dir});
  // Starting the simulator is the work failing (its directory, its socket), not a bad flag.
  if (!dp.ok()) return Fail(1, std::string(dp.status().message()));
  auto reg = (*dp)->WaitForResource(resource, 1, timeout);
  if (!reg.ok()) return Fail(1, std::string(reg.status().message()));
  auto healthy_of = [](const std::vector<PluginDevice>& devices) {
    std::vector<std::string> ids;
    for (const PluginDevice& d : devices) {
      if (d.health == "Healthy") ids.push_back(d.id);
    }
    return ids;
  };
  auto devices = (*dp)->WaitForDevices(
      resource,
      [&](const std::vector<PluginDevice>& d) {
        return healthy_of(d).size() >= static_cast<size_t>(count);
      },
      timeout);
  if (!devices.ok()) {
    return Fail(1, resource + ": fewer than " + std::to_string(count) +
                       " healthy devices: " + std::string(devices.status().message()));
  }
  // As the kubelet: ask for a preference only where the plugin offers one (otherwise the first
  // COUNT healthy devices), and call PreStartContainer before the container starts where the
  // plugin asks for it.
  std::vector<std::string> chosen = healthy_of(*devices);
  chosen.resize(static_cast<size_t>(count));
  if (reg->preferred_allocation_available) {
    auto preferred = (*dp)->GetPreferredAllocation(resource, healthy_of(*devices), {}, count);
    if (!preferred.ok()) {
      return Fail(1, "GetPreferredAllocation: " + preferred.status().ToString());
    }
    chosen = *preferred;
  }
  auto allocated = (*dp)->Allocate(resource, {chosen});
  if (!allocated.ok()) return Fail(1, "Allocate: " + allocated.status().ToString());
  if (allocated->size() != 1) {
    return Fail(1, "Allocate: " + std::to_string(allocated->size()) +
                       " container responses for 1 container request");
  }
  if (reg->pre_start_required) {
    if (absl::Status s = (*dp)->PreStartContainer(resource, chosen); !s.ok()) {
      return Fail(1, "PreStartContainer: " + s.ToString());
    }
  }
  const auto& a = allocated->front();
  Json envs = Json::object();
  for (const auto& [k, v] : a.envs) envs[k] = v;
  std::cout << Dump(Json{{"deviceIds", chosen},
                         {"envs", std::move(envs)},
                         {"devices", a.device_node_host_paths},
                         {"cdiDevices", a.cdi_devices}},
                    2)
            << std::endl;
  return 0;
}

int Health(const Registration& reg, topodra::testing::HealthKubelet kubelet, int messages,
           absl::Duration timeout) {
  const std::string service = topodra::testing::PickHealthService(reg.supported_versions, kubelet);
  if (service.empty()) {
    std::cout << Dump(Json{{"service", nullptr}, {"devices", Json::object()}}, 2) << std::endl;
    return 0;
  }
  auto watcher = topodra::testing::HealthWatcher::Start(reg.endpoint, service);
  if (!watcher.ok()) return Fail(1, std::string(watcher.status().message()));
  auto cache = (*watcher)->WaitForMessages(messages, timeout);
  if (!cache.ok()) return Fail(1, std::string(cache.status().message()));
  Json devices = Json::object();
  for (const auto& [key, v] : *cache) {
    devices[key] =
        Json{{"health", v.health}, {"message", v.message}, {"timeoutSeconds", v.timeout_seconds}};
  }
  std::cout << Dump(Json{{"service", service}, {"devices", devices}}, 2) << std::endl;
  return 0;
}

int Run(int argc, char** argv) {
  KubeletSimOptions opts;
  absl::Duration timeout = absl::Seconds(10);
  topodra::testing::HealthKubelet health_kubelet = topodra::testing::HealthKubelet::k137;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (arg.rfind("--", 0) != 0) {
      args.push_back(arg);
      continue;
    }
    std::string value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Fail(2, "flag " + arg + " needs a value");
    }
    if (arg == "--root-dir") {
      opts.root_dir = value;
    } else if (arg == "--timeout") {
      if (!absl::ParseDuration(value, &timeout) || timeout < absl::ZeroDuration()) {
        return Fail(2, "invalid --timeout \"" + value + "\" (want e.g. 10s, 500ms)");
      }
    } else if (arg == "--health-kubelet") {
      if (value == "1.37") {
        health_kubelet = topodra::testing::HealthKubelet::k137;
      } else if (value == "1.34" || value == "1.35" || value == "1.36") {
        health_kubelet = topodra::testing::HealthKubelet::k134_136;
      } else {
        return Fail(2, "invalid --health-kubelet \"" + value + "\" (want 1.34 to 1.37)");
      }
    } else if (arg == "--known-versions") {
      std::vector<std::string> versions = absl::StrSplit(value, ',', absl::SkipEmpty());
      opts.known_versions = std::move(versions);
    } else {
      return Fail(2, "unknown flag " + arg + "\n" + kUsage);
    }
  }
  if (opts.root_dir.empty()) return Fail(2, std::string("--root-dir is required\n") + kUsage);
  if (args.size() < 2) return Fail(2, std::string("missing COMMAND or DRIVER\n") + kUsage);
  const std::string command = args[0];
  const std::string driver = args[1];
  std::vector<PrepareClaim> claims;
  if (command == "allocate") {
    if (args.size() != 3) return Fail(2, "allocate takes RESOURCE COUNT");
    int count = 0;
    if (!absl::SimpleAtoi(args[2], &count) || count < 1) {
      return Fail(2, "invalid COUNT \"" + args[2] + "\" (want a positive number)");
    }
    return Allocate(opts.root_dir + "/device-plugins", driver, count, timeout);
  }
  int health_messages = 1;
  if (command == "wait") {
    if (args.size() != 2) return Fail(2, "wait takes only DRIVER");
  } else if (command == "health") {
    if (args.size() > 3) return Fail(2, "health takes DRIVER [MESSAGES]");
    if (args.size() == 3 && (!absl::SimpleAtoi(args[2], &health_messages) || health_messages < 1)) {
      return Fail(2, "invalid MESSAGES \"" + args[2] + "\" (want a positive number)");
    }
  } else if (command == "prepare" || command == "unprepare") {
    if (args.size() < 3) return Fail(2, command + " needs at least one NS/NAME/UID");
    for (size_t i = 2; i < args.size(); ++i) {
      std::vector<std::string> parts = absl::StrSplit(args[i], '/');
      if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty()) {
        return Fail(2, "invalid claim \"" + args[i] + "\" (want NAMESPACE/NAME/UID)");
      }
      claims.push_back(PrepareClaim{parts[0], parts[2], parts[1]});
    }
  } else {
    return Fail(2, "unknown command \"" + command + "\"\n" + kUsage);
  }

  auto sim = KubeletSimulator::Start(opts);
  if (!sim.ok()) return Fail(2, std::string(sim.status().message()));
  auto reg = (*sim)->WaitForRegistration(driver, 1, timeout);
  if (!reg.ok()) return Fail(1, std::string(reg.status().message()));
  if (command == "wait") {
    std::cout << Dump(RegistrationJson(*reg), -1) << std::endl;
    return 0;
  }
  if (command == "health") return Health(*reg, health_kubelet, health_messages, timeout);
  if (command == "prepare") {
    auto results = (*sim)->Prepare(driver, claims);
    if (!results.ok()) return Fail(1, "NodePrepareResources: " + results.status().ToString());
    std::cout << Dump(PrepareJson(*results), 2) << std::endl;
    return 0;
  }
  auto results = (*sim)->Unprepare(driver, claims);
  if (!results.ok()) return Fail(1, "NodeUnprepareResources: " + results.status().ToString());
  Json out = Json::object();
  for (const auto& [uid, error] : *results) out[uid] = Json{{"error", error}};
  std::cout << Dump(out, 2) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    return Fail(1, std::string("internal error: ") + e.what());
  } catch (...) {
    return Fail(1, "internal error");
  }
}
