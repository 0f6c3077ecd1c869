// Prints, as one JSON array, the ResourceSlices topodra builds for every machine, CPU device mode
// and reservation case of test/testing/slice_cases.h, flat and in mixin form, for the upstream
// schema check (schema_test.py). `topodra slices` cannot express Reservations (the daemon learns
// them from its state and the API), so this program builds every case itself; for the cases the
// CLI can express it also prints the command line, and the test compares the two outputs.
//
// usage: slice_cases_dump TOPOLOGIES_DIR
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_json.h"
#include "test/testing/slice_cases.h"
#include "topology/discoverer.h"

namespace {

using nlohmann::json;
using topodra::publish::SliceForm;

bool IsFile(const std::string& machine) {
  return machine.size() > 4 && machine.compare(machine.size() - 4, 4, ".xml") == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: slice_cases_dump TOPOLOGIES_DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<std::string> machines = topodra::testing::SliceMachines();
  json out = json::array();
  int node_index = 0;
  for (const std::string& machine : machines) {
    const std::string path = dir + "/" + machine;
    absl::StatusOr<topodra::topology::Topology> t = topodra::topology::Discover(
        IsFile(machine) ? topodra::topology::TopologySource::XmlFile(path)
                        : topodra::topology::TopologySource::Synthetic(machine));
    if (!t.ok()) {
      std::cerr << "slice_cases_dump: " << machine << ": " << t.status() << "\n";
      return 1;
    }
    for (const topodra::testing::SliceMode& m : topodra::testing::SliceModes()) {
      for (const topodra::testing::SliceCase& c : topodra::testing::SliceCasesFor(*t, m)) {
        topodra::publish::PublishOptions opts = c.opts;
        opts.node_name = "node-" + std::to_string(node_index++);
        const std::string label = machine + ", " + m.name + ", " + c.name;
        if (absl::Status st = topodra::publish::ValidateOptions(opts, *t); !st.ok()) {
          std::cerr << "slice_cases_dump: " << label << ": " << st << "\n";
          return 1;
        }
        json entry = {{"label", label}, {"cli", nullptr}};
        if (opts.reservations.empty()) {
          json args = {"slices", "-o", "json"};
          args.push_back(IsFile(machine) ? "--topology-file" : "--topology-synthetic");
          args.push_back(IsFile(machine) ? path : machine);
          for (const std::string& a :
               {std::string("--node-name"), opts.node_name, std::string("--cpu-device-mode"),
                std::string(topodra::publish::CpuDeviceModeName(opts.cpu_mode)),
                std::string("--group-by"),
                std::string(topodra::publish::GroupByName(opts.group_by))}) {
            args.push_back(a);
          }
          if (!opts.reserved_cpus.Empty()) {
            args.push_back("--reserved-cpus");
            args.push_back(opts.reserved_cpus.ToString());
          }
          if (opts.pcie_root_lists) {
            args.push_back("--list-attributes");
            args.push_back("on");
          }
          entry["cli"] = args;
        }
        for (SliceForm form : {SliceForm::kFlat, SliceForm::kMixins}) {
          std::vector<topodra::publish::Slice> all;
          for (const topodra::publish::Pool& pool : topodra::publish::BuildPools(*t, opts)) {
            absl::StatusOr<std::vector<topodra::publish::Slice>> s =
                topodra::publish::BuildSlices(pool, form);
            if (!s.ok()) {
              std::cerr << "slice_cases_dump: " << label << ": " << s.status() << "\n";
              return 1;
            }
            all.insert(all.end(), s->begin(), s->end());
          }
          entry[form == SliceForm::kFlat ? "flat" : "mixins"] =
              topodra::publish::SliceListToJson(all);
        }
        out.push_back(std::move(entry));
      }
    }
  }
  std::cout << topodra::DumpJson(out) << "\n";
  return 0;
}
