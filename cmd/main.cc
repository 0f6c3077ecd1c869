// The topodra binary. This is the only file that includes CLI11 (slow to compile); it turns the
// command line into option structs and hands them to the subcommands in commands.h.
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cmd/commands.h"
#include "cmd/yaml_json.h"

#ifndef TOPODRA_VERSION
#define TOPODRA_VERSION "0.0.0-dev"
#endif

namespace {

using topodra::cmd::kExitOk;
using topodra::cmd::kExitUsage;

// CLI11 2.1 has no std::optional binding; the callbacks record that a flag was given at all, so
// an explicitly empty value is an error rather than "use the live machine".
void AddTopologyFlags(CLI::App* app, topodra::cmd::TopologyFlags* flags) {
  CLI::Option* file =
      app->add_option_function<std::string>(
             "--topology-file", [flags](const std::string& v) { flags->file = v; },
             "Read the machine from an hwloc XML export instead of the live machine")
          ->check(CLI::ExistingFile);
  CLI::Option* synth = app->add_option_function<std::string>(
      "--topology-synthetic", [flags](const std::string& v) { flags->synthetic = v; },
      "Simulate a machine from an hwloc synthetic description, e.g. \"pack:2 core:8 pu:2\"");
  file->excludes(synth);
}

void AddPublishFlags(CLI::App* app, topodra::cmd::PublishFlags* f) {
  app->add_option("--node-name", f->node_name,
                  "Node (and pool) name; default $NODE_NAME, else the host name");
  app->add_option("--cpu-driver-name", f->cpu_driver, "Driver name of the CPU devices")
      ->capture_default_str();
  app->add_option("--gpu-driver-name", f->gpu_driver, "Driver name of the GPU devices")
      ->capture_default_str();
  app->add_option("--cpu-device-mode", f->cpu_device_mode,
                  "grouped: one device per group with consumable CPU capacity; individual: one "
                  "device per CPU")
      ->check(CLI::IsMember({"grouped", "individual"}))
      ->capture_default_str();
  app->add_option("--group-by", f->group_by, "Grouping in grouped mode: numa, socket or machine")
      ->check(CLI::IsMember({"numa", "numanode", "socket", "machine"}))
      ->capture_default_str();
  app->add_option("--reserved-cpus", f->reserved_cpus,
                  "CPUs never published or handed out (Linux list format, e.g. \"0-1,32-33\")");
  app->add_option("--gpus", f->gpus, "auto: publish the node's GPUs; none: publish no GPUs")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  app->add_option("--list-attributes", f->list_attributes,
                  "CPU devices carry resource.kubernetes.io/pcieRoot as a list of their PCIe "
                  "roots (DRAListTypeAttributes): auto (when the API server keeps list "
                  "attributes), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app->add_option("--node-allocatable-mapping", f->node_allocatable_mapping,
                  "CPU devices map to the node's cpu allocatable (DRANodeAllocatableResources, "
                  "1.36 or 1.37 field): auto (the field the API server keeps, if any), on (an "
                  "error when it keeps neither), off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
}

bool IsKnownSubcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == name) return true;
  }
  return false;
}

// `topodra run --config FILE`: a YAML (or JSON) map whose keys are the long flag names of `run`
// without dashes. Its values go in front of the command line, and with TakeLast a flag given on
// the command line wins. Returns the arguments (without argv[0]) or an error line.
bool ExpandConfig(const CLI::App& run, std::vector<std::string>* args, std::string* error) {
  std::string path;
  for (size_t i = 1; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    if (a == "--config" && i + 1 < args->size()) path = (*args)[i + 1];
    if (a.rfind("--config=", 0) == 0) path = a.substr(9);
  }
  if (path.empty()) return true;
  std::ifstream in(path);
  if (!in) {
    *error = "--config: cannot read \"" + path + "\"";
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<nlohmann::json> doc = topodra::cmd::ParseJsonOrYaml(text.str());
  if (!doc.ok()) {
    *error = "--config \"" + path + "\": " + std::string(doc.status().message());
    return false;
  }
  if (!doc->is_object()) {
    *error = "--config \"" + path + "\": expected a map of flag names to values";
    return false;
  }
  std::vector<std::string> from_file;
  for (const auto& [key, value] : doc->items()) {
    const std::string flag = "--" + key;
    const CLI::Option* opt = nullptr;
    try {
      opt = run.get_option_no_throw(flag);
    } catch (const std::exception&) {
      opt = nullptr;
    }
    if (opt == nullptr || key == "config" || key == "help") {
      *error = "--config \"" + path + "\": unknown key \"" + key +
               "\" (keys are the long flags of "
               "topodra run, without dashes)";
      return false;
    }
    // The command line wins: a key also given as a flag is not even looked at.
    bool on_command_line = false;
    for (size_t i = 1; i < args->size(); ++i) {
      const std::string& a = (*args)[i];
      on_command_line = on_command_line || a == flag || a.rfind(flag + "=", 0) == 0;
    }
    if (on_command_line) continue;
    std::string v;
    if (value.is_string()) {
      v = value.get<std::string>();
    } else if (value.is_number() || value.is_boolean()) {
      v = value.dump();
    } else {
      *error = "--config \"" + path + "\": key \"" + key + "\" needs a string, number or boolean";
      return false;
    }
    from_file.push_back(flag + "=" + v);
  }
  // args[0] is "run"; the file's flags go right after it.
  args->insert(args->begin() + 1, from_file.begin(), from_file.end());
  return true;
}

// `topodra run`'s flags. --config is read by ExpandConfig before parsing; here it is only named.
void AddRunFlags(CLI::App* run, topodra::cmd::RunCommand* cmd, std::string* config_file) {
  AddTopologyFlags(run, &cmd->topology);
  AddPublishFlags(run, &cmd->publish);
  run->add_option("--kubeconfig", cmd->kubeconfig,
                  "kubeconfig file; default $KUBECONFIG, else the in-cluster service account")
      ->check(CLI::ExistingFile);
  run->add_option("--slice-mixins", cmd->slice_mixins,
                  "auto: use KEP-5234 mixins when the API server stores them; on; off (flat)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  run->add_option("--topology-refresh", cmd->topology_refresh_seconds,
                  "Seconds between rediscoveries of the machine (CPU hotplug, GPU loss)")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  run->add_option("--topology-cache", cmd->topology_cache,
                  "on: start from the machine model stored in --state-dir when the boot and the "
                  "machine's inputs are the same, and confirm it by a discovery in the "
                  "background; off: discover at every start")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  run->add_option("--log-format", cmd->log_format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  run->add_flag("-v", cmd->verbosity, "More detail: -v debug, -vv trace")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--kubelet-root-dir", cmd->kubelet_root_dir,
                  "The kubelet's --root-dir: plugins_registry/ and plugins/ live there")
      ->capture_default_str();
  run->add_option("--cdi-dir", cmd->cdi_dir, "Where per-claim CDI spec files are written")
      ->capture_default_str();
  run->add_option("--state-dir", cmd->state_dir,
                  "Crash-safe allocation state (checkpoint, journal, instance lock)")
      ->capture_default_str();
  run->add_option("--host-root", cmd->host_root,
                  "Where the host's /sys, /dev and /proc are seen (GPU device nodes)")
      ->capture_default_str();
  run->add_option("--device-plugin", cmd->device_plugin,
                  "Also serve the legacy device-plugin API: none, gpu, cpu or gpu,cpu")
      ->check(CLI::IsMember({"none", "gpu", "cpu", "gpu,cpu", "cpu,gpu"}))
      ->capture_default_str();
  run->add_option("--device-plugin-gpu-resource", cmd->device_plugin_gpu_resource,
                  "Extended resource name of GPUs served through the device plugin")
      ->capture_default_str();
  run->add_option("--device-plugin-cpu-resource", cmd->device_plugin_cpu_resource,
                  "Extended resource name of exclusive CPUs served through the device plugin")
      ->capture_default_str();
  run->add_option("--device-plugin-reclaim-interval", cmd->device_plugin_reclaim_seconds,
                  "Seconds between checks of the kubelet's PodResources API; a device-plugin "
                  "allocation no container uses in two checks is released")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  run->add_option("--pod-resources-socket", cmd->pod_resources_socket,
                  "The kubelet's PodResources API socket (default "
                  "<kubelet-root-dir>/pod-resources/kubelet.sock)");
  run->add_option("--extended-resource-check", cmd->extended_resource_check,
                  "Leave out a device plugin whose resource a DeviceClass maps "
                  "(extendedResourceName), so no name is served through both APIs: auto (list "
                  "and watch DeviceClasses; forbidden or not served: no check), on (a failed list "
                  "at start is an error), off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  run->add_option_function<std::string>(
         "--enforce", [cmd](const std::string& v) { cmd->enforce = v; },
         "CPU pinning: cgroup (containers of CPU claims run only on their CPUs, all others only "
         "on the shared pool) or none (the CDI environment only); default cgroup, none with "
         "--topology-file or --topology-synthetic")
      ->check(CLI::IsMember({"cgroup", "none"}));
  run->add_option("--cgroup-root", cmd->cgroup_root, "The host's cgroup mount")
      ->capture_default_str();
  run->add_flag("--strict-cpu-reservation", cmd->strict_cpu_reservation,
                "Keep --reserved-cpus out of the shared pool too (the kubelet's "
                "strict-cpu-reservation); by default they are never handed out exclusively but "
                "containers without a CPU claim run on them");
  run->add_option("--numa-memory", cmd->numa_memory,
                  "With --enforce=cgroup: claim (containers of CPU claims allocate memory only on "
                  "the NUMA nodes of their CPUs, plus what the claim's numaMemory config names; "
                  "everyone else on all nodes) or none (cpuset.mems is left alone)")
      ->check(CLI::IsMember({"claim", "none"}))
      ->capture_default_str();
  run->add_option("--hook-dir", cmd->hook_dir,
                  "Host directory the CPU pinning hook is installed in (same path in the pod)")
      ->capture_default_str();
  run->add_option("--metrics-address", cmd->metrics_address,
                  "Serve Prometheus /metrics and the /healthz and /readyz probes on this address "
                  "(:port, host:port; none to disable)")
      ->capture_default_str();
  run->add_option("--health-address", cmd->health_address,
                  "Serve only the /healthz and /readyz probes on this address, for the kubelet "
                  "(host:port, :port; none to disable); keep it off the network")
      ->capture_default_str();
  run->add_option("--reservations", cmd->reservations,
                  "on: hold CPUs and GPUs for this node's Reservation objects (topodra.io); off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  run->add_option("--reservation-taints", cmd->reservation_taints,
                  "Taint reserved devices so only owners that tolerate them get them: auto (when "
                  "the API server keeps device taints), on, off (the attribute only)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  run->add_option("--dra-health", cmd->dra_health,
                  "on: stream device health to the kubelet (DRAResourceHealth v1 and v1alpha1, "
                  "the kubelet picks); off: advertise neither")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  run->add_option("--device-metadata", cmd->device_metadata,
                  "on: give each prepared claim's containers a read-only JSON file of its "
                  "devices, CPUs and NUMA nodes (Kubernetes device metadata, beta in 1.37; needs "
                  "CDI in the container runtime); off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  run->add_option("--device-metadata-dir", cmd->device_metadata_dir,
                  "Absolute host directory the device metadata files are written under "
                  "(<dir>/<driver>/dra-device-metadata/...; the CDI spec mounts them from there); "
                  "default <kubelet-root-dir>/plugins");
  run->add_option("--config", *config_file,
                  "YAML file with the same keys as these flags (without dashes); flags win");
}

int Main(int argc, char** argv) {
  // hwloc loads every plugin it finds on each discovery (the daemon rediscovers every 30 s) and
  // only then applies our component blacklist: OpenCL, GL (X11), libpciaccess and libxml2 (ICU)
  // would be mapped into the daemon each time. The environment stops the loading itself. Set
  // before any thread exists (setenv is not thread-safe); an operator's own value wins.
  setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_opencl,hwloc_gl,hwloc_pci,hwloc_xml_libxml", 0);
#ifndef TOPODRA_DAEMON
  // `run` is topodra-daemon's (cmd/run_loader.cc): it parses the same flags itself.
  if (argc > 1 && std::string(argv[1]) == "run") return topodra::cmd::ExecDaemon(argv, std::cerr);
#endif
  CLI::App app{"topodra: topology-aware Kubernetes DRA driver for CPUs and GPUs", "topodra"};
  // A flag given twice takes the last value: how --config values yield to the command line.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  app.set_version_flag("--version", TOPODRA_VERSION);

  topodra::cmd::TopologyCommand topology_cmd;
  CLI::App* topology = app.add_subcommand("topology", "Print the machine's topology");
  AddTopologyFlags(topology, &topology_cmd.topology);
  topology->add_option("-o,--output", topology_cmd.output, "Output format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  topodra::cmd::SlicesCommand slices_cmd;
  CLI::App* slices = app.add_subcommand(
      "slices", "Print the ResourceSlices this node would publish (no API server needed)");
  AddTopologyFlags(slices, &slices_cmd.topology);
  AddPublishFlags(slices, &slices_cmd.publish);
  slices->add_flag("--flatten", slices_cmd.flatten,
                   "Print flat slices (no KEP-5234 mixins), as servers without mixins need");
  slices->add_option("-o,--output", slices_cmd.output, "Output format: json or yaml")
      ->check(CLI::IsMember({"json", "yaml"}))
      ->capture_default_str();

  topodra::cmd::ReservationsCommand reservations_cmd;
  CLI::App* reservations = app.add_subcommand(
      "reservations", "List this node's reservations and what they hold (the daemon's state)");
  reservations->add_option("--state-dir", reservations_cmd.state_dir, "The daemon's --state-dir")
      ->capture_default_str();
  reservations->add_option("-o,--output", reservations_cmd.output, "Output format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  topodra::cmd::FlattenCommand flatten_cmd;
  CLI::App* flatten = app.add_subcommand(
      "flatten", "Expand the mixins of ResourceSlices read from a file (JSON or YAML) or -");
  flatten
      ->add_option("FILE", flatten_cmd.file,
                   "ResourceSlice, List or ResourceSliceList; - for stdin")
      ->required();
  flatten->add_option("-o,--output", flatten_cmd.output, "Output format: json or yaml")
      ->check(CLI::IsMember({"json", "yaml"}))
      ->capture_default_str();

  topodra::cmd::RunCommand run_cmd;
  std::string config_file;
  CLI::App* run = app.add_subcommand("run", "Run the node daemon: publish this node's devices");
  AddRunFlags(run, &run_cmd, &config_file);

  CLI::App* version = app.add_subcommand("version", "Print the version");

  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "run") {
    std::string error;
    if (!ExpandConfig(*run, &args, &error)) {
      std::cerr << "topodra run: error: " << error << "\n";
      return kExitUsage;
    }
  }
  try {
    // CLI11 takes a vector in reverse order.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, no usage dump: operators read this in pod logs and scripts grep it.
    if (argc > 1 && argv[1][0] != '-' && !IsKnownSubcommand(app, argv[1])) {
      std::cerr << "topodra: error: unknown command \"" << argv[1]
                << "\" (run with --help for usage)\n";
    } else {
      std::cerr << "topodra: error: " << e.what() << " (run with --help for usage)\n";
    }
    return kExitUsage;
  }

#ifdef TOPODRA_DAEMON
  // topodra-daemon: `run` only, so it links none of the other commands' code.
  if (run->parsed()) return topodra::cmd::RunDaemonInProcess(run_cmd, std::cerr);
  if (version->parsed()) {
    std::cout << "topodra " << TOPODRA_VERSION << "\n";
    return kExitOk;
  }
  std::cerr << "topodra-daemon: error: only `run` is served here (the other commands are "
               "topodra's)\n";
  return kExitUsage;
#else
  if (topology->parsed()) return topodra::cmd::RunTopology(topology_cmd, std::cout, std::cerr);
  if (run->parsed()) return topodra::cmd::ExecDaemon(argv, std::cerr);
  if (slices->parsed()) return topodra::cmd::RunSlices(slices_cmd, std::cout, std::cerr);
  if (flatten->parsed()) {
    return topodra::cmd::RunFlatten(flatten_cmd, std::cin, std::cout, std::cerr);
  }
  if (reservations->parsed()) {
    return topodra::cmd::RunReservations(reservations_cmd, std::cout, std::cerr);
  }
  if (version->parsed()) {
    std::cout << "topodra " << TOPODRA_VERSION << "\n";
    return kExitOk;
  }
  return kExitUsage;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  // Nothing below should throw, but an escaped exception must still end in one clear line.
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "topodra: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "topodra: internal error\n";
  }
  return topodra::cmd::kExitFailure;
}
