#include "driver/reservation/lifecycle.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace topodra::reservation {
namespace {

using json = nlohmann::json;

struct Usage {
  CpuSet cpus;
  std::set<std::string> gpus;
  json claims = json::array();
};

// Whether an owner's prepare of `a` is complete (recorded durably): only that ends an
// allocateOnce reservation, since a prepare still under way may fail and be undone.
bool Done(const state::Allocation& a, const std::set<std::string>& in_flight) {
  return a.phase == state::Phase::kPrepared && !in_flight.contains(a.owner);
}

// Whether an owner's claim has been prepared (durably) on reservation `uid`.
bool UsedDurably(const state::State& st, const std::string& uid,
                 const std::set<std::string>& in_flight) {
  for (const state::Allocation* a : st.AllocationsOf(uid)) {
    if (Done(*a, in_flight)) return true;
  }
  return false;
}

// What owners' claims use of reservation `uid`. A claim prepared by both drivers is one entry.
Usage UsageOf(const state::State& st, const std::string& uid) {
  Usage u;
  std::map<std::string, json> by_claim;
  for (const state::Allocation* a : st.AllocationsOf(uid)) {
    u.cpus |= a->cpus;
    u.gpus.insert(a->gpus.begin(), a->gpus.end());
    const std::string claim_uid = state::ClaimUid(*a);
    json& c = by_claim[claim_uid];
    if (c.is_null()) {
      c = {{"namespace", a->claim_namespace},
           {"name", a->claim_name},
           {"uid", claim_uid},
           {"cpus", ""},
           {"gpus", json::array()}};
    }
    if (!a->cpus.Empty()) {
      absl::StatusOr<CpuSet> had = CpuSet::Parse(c["cpus"].get<std::string>());
      c["cpus"] = ((had.ok() ? *had : CpuSet()) | a->cpus).ToString();
    }
    for (const std::string& g : a->gpus) c["gpus"].push_back(g);
  }
  for (auto& [claim_uid, c] : by_claim) u.claims.push_back(std::move(c));
  return u;
}

using Busy = Waiting;

}  // namespace

Waiting WaitingFor(const state::State& st, const state::Reservation& r) {
  Waiting b;
  auto note = [&](const std::optional<std::string>& owner) {
    if (!owner) return false;
    const state::Allocation* a = st.Find(*owner);
    if (a == nullptr || a->reservation == r.uid) return false;
    b.holders.insert(state::Describe(*a));
    return true;
  };
  for (int cpu : r.cpus) {
    if (note(st.HolderOfCpu(cpu))) b.cpus.Add(cpu);
  }
  for (const std::string& g : r.gpus) {
    if (note(st.HolderOfGpu(g))) b.gpus.insert(g);
  }
  return b;
}

std::vector<Held> HeldDevices(const state::State& st) {
  std::vector<Held> out;
  for (const auto& [uid, r] : st.reservations()) {
    const Waiting waiting = WaitingFor(st, r);
    Held h;
    h.name = r.name;
    h.since = r.placed_at;
    h.cpus = r.cpus - waiting.cpus;
    for (const std::string& g : r.gpus) {
      if (!waiting.gpus.contains(g)) h.gpus.insert(g);
    }
    if (h.cpus.Empty() && h.gpus.empty()) continue;
    out.push_back(std::move(h));
  }
  return out;
}

namespace {

std::optional<Spec> SpecOf(const state::Reservation& r) {
  absl::StatusOr<Spec> s = ParseSpec(r.spec.Parse());
  if (!s.ok()) return std::nullopt;
  return *std::move(s);
}

struct Verdict {
  std::string phase;
  std::string reason;
  std::string message;
};

// A GPU as statuses name it: its published device name, else its PCI bus id.
json GpuNameList(const std::set<std::string>& pcis,
                 const std::map<std::string, std::string>& gpus) {
  std::map<std::string, std::string> by_pci;
  for (const auto& [name, pci] : gpus) by_pci[pci] = name;
  json out = json::array();
  for (const std::string& pci : pcis) {
    auto it = by_pci.find(pci);
    out.push_back(it != by_pci.end() ? it->second : pci);
  }
  return out;
}

std::string GpuNames(const std::set<std::string>& pcis,
                     const std::map<std::string, std::string>& gpus) {
  std::vector<std::string> names;
  for (const json& n : GpuNameList(pcis, gpus)) names.push_back(n.get<std::string>());
  return absl::StrJoin(names, ",");
}

std::string WhatItHolds(const state::Reservation& r,
                        const std::map<std::string, std::string>& gpus) {
  std::vector<std::string> parts;
  if (!r.cpus.Empty()) parts.push_back(absl::StrCat("CPUs ", r.cpus.ToString()));
  if (!r.gpus.empty()) parts.push_back(absl::StrCat("GPUs ", GpuNames(r.gpus, gpus)));
  return parts.empty() ? "nothing" : absl::StrJoin(parts, " and ");
}

// Status fields written by us or by anyone with access: never trust their types.
std::string StringAt(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}
int64_t IntAt(const json& obj, const char* key, int64_t fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

const json* ReadyCondition(const json& status) {
  auto it = status.find("conditions");
  if (it == status.end() || !it->is_array()) return nullptr;
  for (const json& c : *it) {
    if (StringAt(c, "type") == "Ready") return &c;
  }
  return nullptr;
}

json StatusFor(const Object& obj, const Verdict& v, const state::Reservation* rec,
               const state::State& st, const Inputs& in, std::optional<absl::Time> expiry) {
  json s = {{"phase", v.phase}, {"observedGeneration", obj.generation}};
  if (rec != nullptr) {
    const Busy busy = WaitingFor(st, *rec);
    s["cpus"] = rec->cpus.ToString();
    s["gpus"] = GpuNameList(rec->gpus, in.gpus);
    s["heldCpus"] = (rec->cpus - busy.cpus).ToString();
    std::set<std::string> held_gpus;
    for (const std::string& g : rec->gpus) {
      if (!busy.gpus.contains(g)) held_gpus.insert(g);
    }
    s["heldGpus"] = GpuNameList(held_gpus, in.gpus);
    json devices = json::array();
    if (auto it = in.devices.find(rec->name); it != in.devices.end()) {
      for (const DeviceRef& d : it->second) {
        devices.push_back({{"driver", d.driver}, {"pool", d.pool}, {"device", d.device}});
      }
    }
    s["devices"] = std::move(devices);
    Usage u = UsageOf(st, rec->uid);
    s["used"] = {{"cpus", (u.cpus & rec->cpus).ToString()},
                 {"gpus", GpuNameList(u.gpus, in.gpus)},
                 {"claims", std::move(u.claims)}};
    if (!rec->expires_at.empty()) s["expiresAt"] = rec->expires_at;
  } else if (expiry) {
    s["expiresAt"] = Rfc3339(*expiry);
  }
  const std::string cond_status = v.phase == "Available" ? "True" : "False";
  std::string since = Rfc3339(in.now);
  if (const json* old = ReadyCondition(obj.status);
      old != nullptr && StringAt(*old, "status") == cond_status &&
      StringAt(*old, "reason") == v.reason && !StringAt(*old, "lastTransitionTime").empty()) {
    since = StringAt(*old, "lastTransitionTime");
  }
  std::string message = v.message;
  if (message.size() > 1024) message = message.substr(0, 1021) + "...";
  s["conditions"] = json::array({{{"type", "Ready"},
                                  {"status", cond_status},
                                  {"reason", v.reason},
                                  {"message", message},
                                  {"lastTransitionTime", since},
                                  {"observedGeneration", obj.generation}}});
  return s;
}

json WithoutTransitionTimes(json s) {
  if (auto it = s.find("conditions"); it != s.end() && it->is_array()) {
    for (json& c : *it) {
      if (c.is_object()) c.erase("lastTransitionTime");
    }
  }
  return s;
}

}  // namespace

std::string Describe(const state::Reservation& r) {
  return absl::StrCat("Reservation \"", r.name, "\"");
}

bool SameStatus(const json& a, const json& b) {
  return WithoutTransitionTimes(a) == WithoutTransitionTimes(b);
}

std::set<std::string> UsableBy(const state::State& st, const claims::Claim& claim) {
  std::set<std::string> out;
  for (const auto& [uid, r] : st.reservations()) {
    if (r.ended) {
      // Succeeded by this claim: the rest of its results (its other driver) may follow.
      if (r.end_reason != "Succeeded") continue;
      for (const state::Allocation* a : st.AllocationsOf(uid)) {
        if (state::ClaimUid(*a) == claim.uid) out.insert(uid);
      }
      continue;
    }
    std::optional<Spec> spec = SpecOf(r);
    if (!spec || !IsOwner(*spec, claim)) continue;
    if (spec->allocate_once) {
      bool other = false;
      for (const state::Allocation* a : st.AllocationsOf(uid)) {
        if (state::ClaimUid(*a) != claim.uid) other = true;
      }
      if (other) continue;
    }
    out.insert(uid);
  }
  return out;
}

Outcome Decide(const Inputs& in) {
  Outcome out;
  const state::State& st = *in.state;
  std::map<std::string, state::Reservation> records = st.reservations();
  std::map<std::string, Verdict> unplaced;  // uid -> why it has no record
  auto soonest = [&](absl::Time t) {
    if (!out.next || t < *out.next) out.next = t;
  };
  std::set<std::string> published_gpus;
  for (const auto& [name, pci] : in.gpus) published_gpus.insert(pci);

  // Placed reservations: ended when their time, devices, use or object are gone.
  for (const auto& [uid, before] : st.reservations()) {
    state::Reservation r = before;
    const Object* obj = nullptr;
    if (in.objects) {
      if (auto it = in.objects->find(uid); it != in.objects->end()) obj = &it->second;
    }
    const bool gone = in.objects.has_value() && (obj == nullptr || obj->deleting);
    if (!r.ended) {
      // Owners, ttl and expires may change after placement; what is held may not (the CRD
      // makes cpus and gpus immutable, and the record keeps the placement anyway).
      if (obj != nullptr && obj->parsed) {
        if (!(r.spec == obj->spec)) r.spec = obj->spec;
        const std::optional<absl::Time> e = ExpiryOf(*obj->parsed, obj->created);
        r.expires_at = e ? Rfc3339(*e) : "";
      }
      std::optional<absl::Time> expiry;
      if (!r.expires_at.empty()) {
        if (absl::StatusOr<absl::Time> t = ParseRfc3339(r.expires_at); t.ok()) expiry = *t;
      }
      const std::optional<Spec> spec = SpecOf(r);
      std::set<std::string> lost_gpus;
      for (const std::string& g : r.gpus) {
        if (!published_gpus.contains(g)) lost_gpus.insert(g);
      }
      const CpuSet lost_cpus = r.cpus - in.topo->online;
      std::string reason, why;
      if (gone) {
        reason = "Deleted";
        why = "its object was deleted";
      } else if (expiry && in.now >= *expiry) {
        reason = "Expired";
        why = absl::StrCat("it expired at ", r.expires_at);
      } else if (!lost_cpus.Empty() || !lost_gpus.empty()) {
        reason = "DevicesGone";
        why = absl::StrCat(
            "its devices left the machine:",
            lost_cpus.Empty() ? "" : absl::StrCat(" CPUs ", lost_cpus.ToString()),
            lost_gpus.empty() ? "" : absl::StrCat(" GPUs ", GpuNames(lost_gpus, in.gpus)));
      } else if (spec && spec->allocate_once && UsedDurably(st, uid, in.in_flight)) {
        reason = "Succeeded";
        why = "an owner's claim used it (allocateOnce)";
      }
      if (!reason.empty()) {
        r.ended = true;
        r.end_reason = reason;
        r.ended_at = Rfc3339(in.now);
        out.events.push_back(absl::StrCat("reservation ", r.name, " (uid ", uid, "): ended, ", why,
                                          "; what owners do not use returns to the shared pool"));
      } else if (expiry) {
        soonest(*expiry);
      }
    }
    // A Succeeded reservation keeps the rest for its claim's other driver a little longer.
    std::optional<absl::Time> grace_until;
    // (Not once the claim is unprepared: then nothing more of it is coming.)
    if (r.ended && r.end_reason == "Succeeded" && !gone && !st.AllocationsOf(uid).empty()) {
      absl::StatusOr<absl::Time> at = ParseRfc3339(r.ended_at);
      if (at.ok() && in.now < *at + kSucceededGrace) grace_until = *at + kSucceededGrace;
    }
    if (grace_until) {
      soonest(*grace_until);
    } else if (r.ended) {
      const Usage u = UsageOf(st, uid);
      r.cpus &= u.cpus;
      std::set<std::string> kept;
      for (const std::string& g : r.gpus) {
        if (u.gpus.contains(g)) kept.insert(g);
      }
      r.gpus = std::move(kept);
      if (gone && r.cpus.Empty() && r.gpus.empty()) {
        out.remove.push_back(uid);
        records.erase(uid);
        out.events.push_back(
            absl::StrCat("reservation ", r.name, " (uid ", uid, "): forgotten, nothing in use"));
        continue;
      }
    }
    if (!(r == before)) {
      records[uid] = r;
      out.put.push_back(r);
    }
  }

  if (!in.objects) return out;

  // Objects without a record: placed oldest first, so an earlier reservation gets the first pick
  // (one that does not fit does not hold back later, smaller ones).
  std::vector<const Object*> order;
  for (const auto& [uid, obj] : *in.objects) {
    if (!records.contains(uid) && !obj.deleting) order.push_back(&obj);
  }
  std::sort(order.begin(), order.end(), [](const Object* a, const Object* b) {
    return a->created != b->created ? a->created < b->created : a->name < b->name;
  });
  for (const Object* obj : order) {
    const std::string phase = StringAt(obj->status, "phase");
    const int64_t observed = IntAt(obj->status, "observedGeneration", -1);
    if ((phase == "Succeeded" || phase == "Failed") && observed == obj->generation) {
      // Ended before (its record is gone with a restart or a lost state): never placed again.
      unplaced[obj->uid] = Verdict{};
      continue;
    }
    if (!obj->parsed) {
      unplaced[obj->uid] = {"Failed", "Invalid", obj->spec_error};
      continue;
    }
    if (obj->name.size() > 63) {
      // The name is published as an attribute string and a taint value, both at most 63.
      unplaced[obj->uid] = {"Failed", "Invalid",
                            absl::StrCat("metadata.name: ", obj->name.size(),
                                         " characters; a reservation name has at most 63")};
      continue;
    }
    const Spec& spec = *obj->parsed;
    const std::optional<absl::Time> expiry = ExpiryOf(spec, obj->created);
    if (expiry && in.now >= *expiry) {
      unplaced[obj->uid] = {
          "Failed", "Expired",
          absl::StrCat("it expired at ", Rfc3339(*expiry), " before it could be placed")};
      continue;
    }
    if (expiry) soonest(*expiry);
    // Published device names come from reservation names with '.' made '-': "a.b" and "a-b"
    // would share a device.
    auto label = [](std::string n) {
      std::replace(n.begin(), n.end(), '.', '-');
      return n;
    };
    bool name_in_use = false;
    for (const auto& [uid, r] : records) {
      // A tombstone that holds nothing publishes nothing: no device to share.
      if (r.cpus.Empty() && r.gpus.empty()) continue;
      if (label(r.name) == label(obj->name)) name_in_use = true;
    }
    if (name_in_use) {
      unplaced[obj->uid] = {"Pending", "NameInUse",
                            "another reservation of this name (or one that differs only in '.' "
                            "and '-') holds devices on this node; it is placed when that one is "
                            "gone"};
      continue;
    }
    NodeView view;
    view.reserved_cpus = in.reserved_cpus;
    view.busy_cpus = st.HeldCpus();
    view.gpus = in.gpus;
    view.busy_gpus = st.HeldGpus();
    for (const auto& [uid, r] : records) {
      view.other_reservations |= r.cpus;
      view.reserved_gpus.insert(r.gpus.begin(), r.gpus.end());
    }
    absl::StatusOr<Placement> p = Place(spec, *in.topo, view);
    if (!p.ok()) {
      const bool later = p.status().code() == absl::StatusCode::kResourceExhausted;
      unplaced[obj->uid] = Verdict{later ? std::string("Pending") : std::string("Failed"),
                                   later ? std::string("Insufficient") : std::string("Impossible"),
                                   std::string(p.status().message())};
      continue;
    }
    state::Reservation r;
    r.uid = obj->uid;
    r.name = obj->name;
    r.cpus = p->cpus;
    r.gpus = p->gpus;
    r.placed_at = Rfc3339(in.now);
    r.expires_at = expiry ? Rfc3339(*expiry) : "";
    r.spec = obj->spec;
    records[r.uid] = r;
    out.put.push_back(r);
    out.events.push_back(absl::StrCat("reservation ", r.name, " (uid ", r.uid, "): placed ",
                                      WhatItHolds(r, in.gpus)));
  }

  // The status every object should show.
  for (const auto& [uid, obj] : *in.objects) {
    if (obj.deleting) continue;
    auto rit = records.find(uid);
    if (rit == records.end()) {
      const Verdict& v = unplaced[uid];
      if (v.phase.empty()) {
        out.status[uid] = obj.status;  // terminal: left as it is
        continue;
      }
      std::optional<absl::Time> expiry;
      if (obj.parsed) expiry = ExpiryOf(*obj.parsed, obj.created);
      out.status[uid] = StatusFor(obj, v, nullptr, st, in, expiry);
      continue;
    }
    const state::Reservation& r = rit->second;
    Verdict v;
    if (r.ended) {
      v.phase = r.end_reason == "Succeeded" ? "Succeeded" : "Failed";
      v.reason = r.end_reason;
      v.message = r.end_reason == "Succeeded"
                      ? absl::StrCat(
                            "an owner's claim used it (allocateOnce); what the claim "
                            "leaves unused returns to the shared pool ",
                            absl::FormatDuration(kSucceededGrace), " after ", r.ended_at)
                  : r.end_reason == "Expired"     ? absl::StrCat("it expired at ", r.expires_at)
                  : r.end_reason == "DevicesGone" ? "its devices left the machine"
                                                  : "it ended";
      if (!r.cpus.Empty() || !r.gpus.empty()) {
        absl::StrAppend(&v.message, "; ", WhatItHolds(r, in.gpus),
                        " stay with the owners' claims until they are released");
      } else {
        absl::StrAppend(&v.message, "; its devices returned to the shared pool");
      }
    } else {
      const Busy busy = WaitingFor(st, r);
      if (busy.cpus.Empty() && busy.gpus.empty()) {
        v = {"Available", "Available",
             absl::StrCat(WhatItHolds(r, in.gpus), " are held for the owners")};
      } else {
        state::Reservation waiting;
        waiting.cpus = busy.cpus;
        waiting.gpus = busy.gpus;
        v = {"Waiting", "WaitingForRelease",
             absl::StrCat(WhatItHolds(waiting, in.gpus), " are still used by ",
                          absl::StrJoin(busy.holders, ", "),
                          "; they become reserved when released")};
      }
    }
    out.status[uid] = StatusFor(obj, v, &r, st, in, std::nullopt);
  }
  return out;
}

}  // namespace topodra::reservation
