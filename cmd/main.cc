// The topodra binary. This is the only file that includes CLI11 (slow to compile); it turns the
// command line into option structs and hands them to the subcommands in commands.h.
#include <exception>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "cmd/commands.h"

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

bool IsKnownSubcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == name) return true;
  }
  return false;
}

int Main(int argc, char** argv) {
  CLI::App app{"topodra: topology-aware Kubernetes DRA driver for CPUs and GPUs", "topodra"};
  app.require_subcommand(1);
  app.set_version_flag("--version", TOPODRA_VERSION);

  topodra::cmd::TopologyCommand topology_cmd;
  CLI::App* topology = app.add_subcommand("topology", "Print the machine's topology");
  AddTopologyFlags(topology, &topology_cmd.topology);
  topology->add_option("-o,--output", topology_cmd.output, "Output format: text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  CLI::App* version = app.add_subcommand("version", "Print the version");

  try {
    app.parse(argc, argv);
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

  if (topology->parsed()) return topodra::cmd::RunTopology(topology_cmd, std::cout, std::cerr);
  if (version->parsed()) {
    std::cout << "topodra " << TOPODRA_VERSION << "\n";
    return kExitOk;
  }
  return kExitUsage;
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
