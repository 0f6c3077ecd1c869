// `topodra reservations`: what the daemon holds for Reservations, read from its state files
// without taking its lock or writing anything, so it works while the daemon runs (kubectl exec
// into the pod) and after it stopped (on the host).
#include <algorithm>
#include <iomanip>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cmd/commands.h"
#include "driver/reservation/lifecycle.h"
#include "driver/state/store.h"
#include "nlohmann/json.hpp"

namespace topodra::cmd {
namespace {

using json = nlohmann::json;

struct Row {
  std::string name, uid, phase, cpus, gpus, held_cpus, used, expires;
  json claims = json::array();
};

Row RowOf(const state::State& st, const state::Reservation& r) {
  Row row;
  row.name = r.name;
  row.uid = r.uid;
  row.cpus = r.cpus.ToString();
  row.gpus = absl::StrJoin(r.gpus, ",");
  row.expires = r.expires_at.empty() ? "never" : r.expires_at;
  // Placed devices another allocation still holds are waited for (preAllocation).
  const reservation::Waiting waiting = reservation::WaitingFor(st, r);
  const CpuSet& busy = waiting.cpus;
  const bool busy_gpu = !waiting.gpus.empty();
  row.held_cpus = (r.cpus - busy).ToString();
  if (r.ended) {
    row.phase = absl::StrCat("Ended (", r.end_reason, ")");
  } else {
    row.phase = busy.Empty() && !busy_gpu ? "Available" : "Waiting";
    // The daemon ends it at its next pass; when it is not running, say so here.
    absl::Time expires;
    std::string err;
    if (!r.expires_at.empty() &&
        absl::ParseTime(absl::RFC3339_full, r.expires_at, &expires, &err) &&
        expires <= absl::Now()) {
      row.phase += " (expired)";
    }
  }
  std::vector<std::string> used;
  for (const state::Allocation* a : st.AllocationsOf(r.uid)) {
    const std::string who = absl::StrCat(a->claim_namespace, "/", a->claim_name);
    if (std::find(used.begin(), used.end(), who) == used.end()) used.push_back(who);
    row.claims.push_back({{"namespace", a->claim_namespace},
                          {"name", a->claim_name},
                          {"uid", state::ClaimUid(*a)},
                          {"driver", a->driver},
                          {"cpus", a->cpus.ToString()},
                          {"gpus", a->gpus}});
  }
  row.used = used.empty() ? "-" : absl::StrJoin(used, ",");
  return row;
}

std::string Dash(const std::string& s) { return s.empty() ? "-" : s; }

}  // namespace

int RunReservations(const ReservationsCommand& cmd, std::ostream& out, std::ostream& err) {
  const std::string path = cmd.state_dir + "/checkpoint.json";
  absl::StatusOr<state::State> st = state::StateStore::Peek(path);
  if (!st.ok()) {
    err << "topodra reservations: error: " << st.status().message() << "\n";
    return kExitFailure;
  }
  std::vector<Row> rows;
  for (const auto& [uid, r] : st->reservations()) rows.push_back(RowOf(*st, r));
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.name != b.name ? a.name < b.name : a.uid < b.uid;
  });
  if (cmd.output == "json") {
    json list = json::array();
    for (const Row& r : rows) {
      list.push_back({{"name", r.name},
                      {"uid", r.uid},
                      {"phase", r.phase},
                      {"cpus", r.cpus},
                      {"heldCpus", r.held_cpus},
                      {"gpus", r.gpus},
                      {"expiresAt", r.expires},
                      {"claims", r.claims}});
    }
    out << json{{"stateFile", path}, {"reservations", list}}.dump(2) << "\n";
    return kExitOk;
  }
  if (rows.empty()) {
    out << "no reservations in " << path << "\n";
    return kExitOk;
  }
  const std::vector<std::string> header = {"NAME", "PHASE",   "CPUS",   "HELD CPUS",
                                           "GPUS", "USED BY", "EXPIRES"};
  std::vector<std::vector<std::string>> table = {header};
  for (const Row& r : rows) {
    table.push_back(
        {r.name, r.phase, Dash(r.cpus), Dash(r.held_cpus), Dash(r.gpus), r.used, r.expires});
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& line : table) {
    for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  for (const auto& line : table) {
    for (size_t i = 0; i < line.size(); ++i) {
      out << line[i];
      if (i + 1 < line.size()) out << std::string(width[i] - line[i].size() + 2, ' ');
    }
    out << "\n";
  }
  return kExitOk;
}

}  // namespace topodra::cmd
