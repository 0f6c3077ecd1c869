// What becomes of every Reservation of the node, as one pure function: the objects the API server
// holds, the node's state (placed reservations, allocations), the machine and the time go in; the
// state changes to make and the status each object should show come out. The controller
// (controller.h) runs it after every change and applies the result.
//
//   no record   -> placed (Available, or Waiting while preAllocation waits for busy devices),
//                  or Pending (not enough free now: retried at every change), or Failed
//                  (invalid spec, impossible on this node, already expired)
//   active      -> ended when it expires (Failed/Expired), when its devices leave the machine
//                  (Failed/DevicesGone), when allocateOnce and an owner's claim used it
//                  (Succeeded), or when its object is deleted
//   ended       -> holds only what owners' claims still use; forgotten once nothing is used and
//                  its object is gone (kept as a tombstone while the object exists, so a
//                  restarted daemon never places it again)
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "driver/reservation/placement.h"
#include "driver/reservation/spec.h"
#include "driver/state/state.h"
#include "nlohmann/json.hpp"
#include "topology/topology.h"

namespace topodra::reservation {

struct DeviceRef {
  std::string driver;
  std::string pool;
  std::string device;
  bool operator==(const DeviceRef&) const = default;
};

struct Inputs {
  // The node's Reservation objects by uid; nullopt while they are not known yet (no successful
  // list since start): then nothing is placed or forgotten, only expiry and use are enforced.
  std::optional<std::map<std::string, Object>> objects;
  const state::State* state = nullptr;
  const topology::Topology* topo = nullptr;
  CpuSet reserved_cpus;                     // --reserved-cpus
  std::map<std::string, std::string> gpus;  // published GPUs: device name -> PCI bus id
  // The published devices carrying each reservation's name (from the built pools).
  std::map<std::string, std::vector<DeviceRef>> devices;
  absl::Time now;
  // Owners changed by a transaction whose journal record is not written yet (Ledger in flight):
  // not yet a use that ends an allocateOnce reservation (the prepare may still fail).
  std::set<std::string> in_flight;
};

// How long a Succeeded (allocateOnce) reservation keeps what its claim has not prepared yet: the
// kubelet prepares a claim's CPU and GPU drivers one after the other.
inline constexpr absl::Duration kSucceededGrace = absl::Seconds(30);

struct Outcome {
  // Apply `remove` first: a placement may reuse the devices of a reservation forgotten here.
  std::vector<std::string> remove;      // uids
  std::vector<state::Reservation> put;  // in order
  // Desired status by uid, for objects that exist; the controller writes those that differ.
  std::map<std::string, nlohmann::json> status;
  // When to run again at the latest (the next expiry), or nullopt.
  std::optional<absl::Time> next;
  // One line per decision, for the log ("reservation r1: placed CPUs 4-7 (Available)").
  std::vector<std::string> events;
};

Outcome Decide(const Inputs& in);

// The reservations whose devices `claim` may take now: placed, not ended, the claim matches an
// owner, and (allocateOnce) no other claim used it yet; or Succeeded by this very claim (its
// other driver's part, within kSucceededGrace). By uid.
std::set<std::string> UsableBy(const state::State& state, const claims::Claim& claim);

// The placed devices of `r` that allocations other than its owners' still hold: preAllocation
// waits for them.
struct Waiting {
  CpuSet cpus;
  std::set<std::string> gpus;
  std::set<std::string> holders;  // how messages name them: "claim ns/name (uid ...)"
};
Waiting WaitingFor(const state::State& st, const state::Reservation& r);

// What the daemon publishes for the placed reservations: their held devices (placed minus what
// others still hold), for those that hold any.
struct Held {
  std::string name;
  CpuSet cpus;
  std::set<std::string> gpus;
  std::string since;
  bool operator==(const Held&) const = default;
};
std::vector<Held> HeldDevices(const state::State& st);

// `Reservation "r1"`: how messages name a reservation.
std::string Describe(const state::Reservation& r);

// The status fields that are ours to compare (conditions without lastTransitionTime), so an
// unchanged status is not written again.
bool SameStatus(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace topodra::reservation
