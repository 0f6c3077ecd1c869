// The hwloc XML export of a regular machine, written without hwloc: what `--topology-file` reads
// on a node whose machine was exported once. restart_bench needs a 12,800-CPU machine, and hwloc's
// synthetic backend takes seconds to build one (it inserts every object by cpuset, quadratic in the
// CPUs), a cost of the test machine that no real node pays.
//
// The machine is the one `--topology-synthetic "pack:P numa:N core:C pu:T"` describes: OS numbers
// in order, each NUMA node (1 GiB) under a Group of its cores, no caches. restart_bench checks that
// both give the same Topology before it measures anything.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace topodra::bench {

// hwloc's bitmap text of the bits [first, first + count): 32-bit words, most significant first,
// "0x%08x" each, zero words below the highest one left empty but the lowest, "0x0"
// ("0x00030000,,0x0": bits 80 and 81).
inline std::string HwlocBitmap(int first, int count) {
  const int last = first + count - 1;
  std::string out;
  for (int word = last / 32; word >= 0; --word) {
    const int lo = std::max(first, word * 32) - word * 32;
    const int hi = std::min(last, word * 32 + 31) - word * 32;  // lo > hi: no bit in this word
    const uint32_t bits =
        lo > hi ? 0 : static_cast<uint32_t>(((uint64_t{1} << (hi - lo + 1)) - 1) << lo);
    if (word != last / 32) out += ',';
    if (bits != 0 || word == last / 32) {
      absl::StrAppend(&out, absl::StrFormat("0x%08x", bits));
    } else if (word == 0) {
      out += "0x0";
    }
  }
  return out;
}

inline std::string MachineXml(int packages, int numa_per_package, int cores_per_numa, int threads) {
  int gp = 0;
  auto sets = [](int cpu, int cpus, int node, int nodes) {
    const std::string c = HwlocBitmap(cpu, cpus);
    const std::string n = HwlocBitmap(node, nodes);
    return absl::StrCat("cpuset=\"", c, "\" complete_cpuset=\"", c, "\" nodeset=\"", n,
                        "\" complete_nodeset=\"", n, "\"");
  };
  const int cpus_per_numa = cores_per_numa * threads;
  const int nodes = packages * numa_per_package;
  const int cpus = nodes * cpus_per_numa;
  const std::string all_cpus = HwlocBitmap(0, cpus);
  const std::string all_nodes = HwlocBitmap(0, nodes);
  std::string x = absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
      "<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\" cpuset=\"",
      all_cpus, "\" complete_cpuset=\"", all_cpus, "\" allowed_cpuset=\"", all_cpus,
      "\" nodeset=\"", all_nodes, "\" complete_nodeset=\"", all_nodes, "\" allowed_nodeset=\"",
      all_nodes, "\" gp_index=\"", ++gp, "\">\n");
  int core = 0;
  for (int p = 0; p < packages; ++p) {
    const int node0 = p * numa_per_package;
    absl::StrAppend(
        &x, "<object type=\"Package\" os_index=\"", p, "\" ",
        sets(node0 * cpus_per_numa, numa_per_package * cpus_per_numa, node0, numa_per_package),
        " gp_index=\"", ++gp, "\">\n");
    for (int n = node0; n < node0 + numa_per_package; ++n) {
      const std::string node_sets = sets(n * cpus_per_numa, cpus_per_numa, n, 1);
      const int group_gp = ++gp;
      const int node_gp = ++gp;
      absl::StrAppend(&x, "<object type=\"Group\" ", node_sets, " gp_index=\"", group_gp,
                      "\" kind=\"1001\" subkind=\"0\">\n<object type=\"NUMANode\" os_index=\"", n,
                      "\" ", node_sets, " gp_index=\"", node_gp,
                      "\" local_memory=\"1073741824\">\n<page_type size=\"4096\" "
                      "count=\"262144\"/>\n</object>\n");
      for (int c = 0; c < cores_per_numa; ++c, ++core) {
        absl::StrAppend(&x, "<object type=\"Core\" os_index=\"", core, "\" ",
                        sets(core * threads, threads, n, 1), " gp_index=\"", ++gp, "\">\n");
        for (int t = 0; t < threads; ++t) {
          const int pu = core * threads + t;
          absl::StrAppend(&x, "<object type=\"PU\" os_index=\"", pu, "\" ", sets(pu, 1, n, 1),
                          " gp_index=\"", ++gp, "\"/>\n");
        }
        absl::StrAppend(&x, "</object>\n");
      }
      absl::StrAppend(&x, "</object>\n");
    }
    absl::StrAppend(&x, "</object>\n");
  }
  absl::StrAppend(&x, "</object>\n</topology>\n");
  return x;
}

}  // namespace topodra::bench
