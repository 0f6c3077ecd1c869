// The stored machine model (driver/node/topology_cache.h) on arbitrary input: any input is a
// status, never a crash, a hang or a leak. Random bytes almost never carry a right CRC-32C, so
// the target also reads the input as the part after the checksum line, with the checksum made
// right, and as a model text alone, to reach the key and model parsers. A file or model that
// decodes must encode to text that decodes to the same, and the model's queries must answer
// for every CPU it lists.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/str_format.h"
#include "driver/node/topology_cache.h"
#include "driver/state/checkpoint.h"
#include "topology/topology_codec.h"

namespace {

void Use(const topodra::topology::Topology& t) {
  for (const topodra::topology::Cpu& c : t.cpus) {
    if (t.CoreOf(c.id) == nullptr) std::abort();
    (void)t.SmtSiblings(c.id);
    (void)t.CpusOfL3(t.L3Of(c.id));
    (void)t.CpusOfNuma(t.NumaOf(c.id));
  }
  (void)t.MaxThreadsPerCore();
  (void)t.PcieRootsNear(t.online);
}

void CheckModel(const std::string& text) {
  absl::StatusOr<topodra::topology::Topology> t = topodra::topology::DecodeTopology(text);
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();
    return;
  }
  Use(*t);
  absl::StatusOr<topodra::topology::Topology> again =
      topodra::topology::DecodeTopology(topodra::topology::EncodeTopology(*t));
  if (!again.ok() || !(*again == *t)) std::abort();
}

void CheckFile(const std::string& text) {
  absl::StatusOr<topodra::node::StoredTopology> s = topodra::node::DecodeTopologyCache(text);
  if (!s.ok()) {
    if (s.status().message().empty()) std::abort();
    return;
  }
  Use(s->topology);
  absl::StatusOr<topodra::node::StoredTopology> again =
      topodra::node::DecodeTopologyCache(topodra::node::EncodeTopologyCache(s->key, s->topology));
  if (!again.ok() || !(again->key == s->key) || !(again->topology == s->topology)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  CheckFile(input);
  CheckFile(absl::StrFormat("topodra-topology-cache %d\nchecksum %08x\n",
                            topodra::node::kTopologyCacheVersion, topodra::state::Crc32c(input)) +
            input);
  const size_t model = input.find("model\n");
  CheckModel(model == std::string::npos ? input : input.substr(model + 6));
  return 0;
}
