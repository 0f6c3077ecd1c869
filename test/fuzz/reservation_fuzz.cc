// A Reservation object from the API server (JSON, anything a user or an older CRD lets through)
// through ParseObject, the owner matcher and Decide: any input is a status or a decision, never a
// crash, a hang or a leak; a status the daemon would write is always JSON it can read back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/json_parse.h"
#include "driver/reservation/lifecycle.h"
#include "driver/reservation/spec.h"

namespace {

using topodra::reservation::Object;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)topodra::reservation::ParseDuration(text);
  (void)topodra::reservation::ParseRfc3339(text);
  absl::StatusOr<nlohmann::json> j = topodra::files::ParseJsonBounded(text, 32);
  if (!j.ok()) return 0;
  absl::StatusOr<Object> o = topodra::reservation::ParseObject(*j);
  if (!o.ok()) {
    // Also as a bare spec, to reach the spec parser without a valid envelope.
    (void)topodra::reservation::ParseSpec(*j);
    return 0;
  }
  if (o->parsed) {
    topodra::claims::Claim claim;
    claim.uid = "u";
    claim.namespace_name = "team-a";
    claim.name = "c";
    claim.labels = {{"app", "x"}};
    claim.controller = topodra::claims::ControllerRef{"v1", "Pod", "p", "pu"};
    (void)topodra::reservation::IsOwner(*o->parsed, claim);
  }
  const topodra::topology::Topology topo;
  const topodra::state::State st;
  topodra::reservation::Inputs in;
  in.objects.emplace();
  (*in.objects)[o->uid] = *o;
  in.state = &st;
  in.topo = &topo;
  in.now = absl::FromUnixSeconds(1795000000);
  const topodra::reservation::Outcome out = topodra::reservation::Decide(in);
  for (const auto& [uid, status] : out.status) {
    const std::string dumped = status.dump();
    if (!topodra::files::ParseJsonBounded(dumped, 64).ok()) std::abort();
  }
  return 0;
}
