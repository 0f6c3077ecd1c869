// The machine model as a compact text, for the daemon to keep what it discovered and start from
// it again without hwloc (driver/node/topology_cache.h). Unlike the JSON rendering
// (topology_format.h), which is for people and programs and leaves fields out, this text holds
// every field of a Topology, so DecodeTopology(EncodeTopology(t)) == t.
//
// One record per line, fields separated by one space, in the order of the model's vectors:
//   source <text>
//   package <id> <cpus>
//   numa <id> <cpus> <local cpus> <subtype> <memory bytes>
//   l3|l2 <level> <id> <size bytes> <cpus>
//   core <os id> <package> <numa> <l3> <l2> <type> <cpus>        (its id is its position)
//   cpu <id> <core>
//   kind <efficiency> <type> <cpus> <n> (<key> <value>){n}
//   gpu <bus id> <vendor> <device> <class> <vendor name> <device name> <model> <uuid> <numa>
//       <local cpus> <pcie root> <memory bytes> <n> <bridge>{n} <m> (<name> <kind> <subtype>){m}
//   root <name> <local cpus> <numa>
//   offline <cpus>
//   distances <n> <value>{n*n}
// Numbers are decimal, kNone is -1, CPU sets are in the Linux list format, and text is
// percent-encoded (space, control bytes, '%', '~' and bytes above 0x7e as %XX); an empty text or
// CPU set is "~".
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/topology.h"

namespace topodra::topology {

std::string EncodeTopology(const Topology& topo);

// Strict inverse of EncodeTopology: the text is outside input (a file the daemon wrote earlier,
// possibly damaged). InvalidArgument naming the line for anything malformed or beyond the
// bounds on record counts and on the CPU sets' total size, and for a model the rest of the
// daemon could not use safely: an index out of range (a CPU's core, a core's L3 or L2), a NUMA
// node that is not there (of a core, a GPU or a PCIe root; -1 is none), a package that is not
// there (of a core), CPU records not in ascending id order or not in their core, a core's CPU
// without a cpu record, a NUMA node id, package id, GPU bus id or PCIe root name given twice, a
// distance matrix that is not square over the NUMA nodes, no CPU at all.
absl::StatusOr<Topology> DecodeTopology(absl::string_view text);

}  // namespace topodra::topology
