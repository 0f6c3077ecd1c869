#include "driver/state/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/json_parse.h"
#include "driver/state/canonical_json.h"
#include "driver/state/compact_json.h"

namespace topodra::state {
namespace {

using json = nlohmann::json;

// Deep enough for any answer we write (the answer sits at depth 5), shallow enough that
// dumping and destroying a parsed document cannot exhaust the stack.
constexpr int kMaxDepth = 32;

constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

using files::ErrnoStatus;

// ---- Decoding.

absl::Status Corrupt(absl::string_view what) { return absl::DataLossError(what); }

// Calls `field` for every member of `obj`, and fails unless all of `keys` and nothing but them
// and `optional` are present.
template <typename F>
absl::Status ReadObject(const json& obj, absl::string_view where, const std::set<std::string>& keys,
                        const std::set<std::string>& optional, F field) {
  if (!obj.is_object()) return Corrupt(absl::StrCat(where, ": not a JSON object"));
  for (const auto& [key, value] : obj.items()) {
    if (!keys.contains(key) && !optional.contains(key)) {
      return Corrupt(absl::StrCat(where, ": unknown field \"", key, "\""));
    }
    if (absl::Status st = field(key, value); !st.ok()) return st;
  }
  for (const std::string& key : keys) {
    if (!obj.contains(key)) return Corrupt(absl::StrCat(where, ": missing field \"", key, "\""));
  }
  return absl::OkStatus();
}

absl::Status ReadString(const json& v, absl::string_view where, std::string* out) {
  if (!v.is_string()) return Corrupt(absl::StrCat(where, ": not a string"));
  *out = v.get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadNonEmptyString(const json& v, absl::string_view where, std::string* out) {
  if (absl::Status st = ReadString(v, where, out); !st.ok()) return st;
  if (out->empty()) return Corrupt(absl::StrCat(where, ": empty"));
  return absl::OkStatus();
}

absl::Status ReadCpus(const json& v, absl::string_view where, CpuSet* out) {
  std::string text;
  if (absl::Status st = ReadString(v, where, &text); !st.ok()) return st;
  absl::StatusOr<CpuSet> cpus = CpuSet::Parse(text);
  if (!cpus.ok()) return Corrupt(absl::StrCat(where, ": ", cpus.status().message()));
  *out = *std::move(cpus);
  return absl::OkStatus();
}

absl::Status ReadGpus(const json& v, absl::string_view where, std::set<std::string>* out) {
  if (!v.is_array()) return Corrupt(absl::StrCat(where, ": not a JSON array"));
  std::string text;
  for (const json& gpu : v) {
    if (absl::Status st = ReadString(gpu, where, &text); !st.ok()) return st;
    if (!out->insert(text).second) {
      return Corrupt(absl::StrCat(where, ": GPU \"", text, "\" listed twice"));
    }
  }
  return absl::OkStatus();
}

// `version`: of the checkpoint (the journal's records are read as this build's: Open rewrites an
// older snapshot before appending, and versions 3 and 4 share the allocation fields): the optional
// fields "reservation" (from version 2) and "mems" (from version 3).
absl::Status ReadAllocation(const json& v, absl::string_view where, int version, Allocation* a) {
  static const std::set<std::string> kKeys = {"owner", "kind", "namespace", "name",  "driver",
                                              "cpus",  "gpus", "answer",    "phase", "cdi"};
  std::set<std::string> optional;
  if (version >= 2) optional.insert("reservation");
  if (version >= 3) optional.insert("mems");
  return ReadObject(v, where, kKeys, optional, [&](const std::string& key, const json& value) {
    const std::string at = absl::StrCat(where, " field \"", key, "\"");
    std::string text;
    if (key == "owner") return ReadString(value, at, &a->owner);
    // Written only when set, so never empty.
    if (key == "reservation") return ReadNonEmptyString(value, at, &a->reservation);
    if (key == "namespace") return ReadString(value, at, &a->claim_namespace);
    if (key == "name") return ReadString(value, at, &a->claim_name);
    if (key == "driver") return ReadString(value, at, &a->driver);
    if (key == "cdi") {
      if (!value.is_null() && !value.is_object())
        return Corrupt(absl::StrCat(at, ": not an object"));
      a->cdi = value;
      return absl::OkStatus();
    }
    if (key == "answer") {
      a->answer = value;
      return absl::OkStatus();
    }
    if (key == "kind") {
      if (absl::Status st = ReadString(value, at, &text); !st.ok()) return st;
      if (text == KindName(AllocationKind::kDraClaim)) {
        a->kind = AllocationKind::kDraClaim;
      } else if (text == KindName(AllocationKind::kDevicePlugin)) {
        a->kind = AllocationKind::kDevicePlugin;
      } else {
        return Corrupt(absl::StrCat(at, ": unknown kind \"", text, "\""));
      }
      return absl::OkStatus();
    }
    if (key == "phase") {
      if (absl::Status st = ReadString(value, at, &text); !st.ok()) return st;
      if (text == PhaseName(Phase::kPreparing)) {
        a->phase = Phase::kPreparing;
      } else if (text == PhaseName(Phase::kPrepared)) {
        a->phase = Phase::kPrepared;
      } else {
        return Corrupt(absl::StrCat(at, ": unknown phase \"", text, "\""));
      }
      return absl::OkStatus();
    }
    if (key == "cpus") return ReadCpus(value, at, &a->cpus);
    if (key == "mems") {
      // Written only when set, so never empty.
      if (absl::Status st = ReadCpus(value, at, &a->mems); !st.ok()) return st;
      if (a->mems.Empty()) return Corrupt(absl::StrCat(at, ": empty"));
      return absl::OkStatus();
    }
    return ReadGpus(value, at, &a->gpus);
  });
}

}  // namespace

namespace internal {

// ReadAllocation for the usual record, without a JSON tree even of its small fields: every string
// plain (no escape), the GPUs a list of such strings. nullopt for anything else, and for anything
// ReadAllocation refuses (FastAllocationMembers then decides).
std::optional<Allocation> DirectAllocation(const canonical::Members& members, int version) {
  Allocation a;
  // One bit per field: a field seen twice is refused (the full parser never sees two, its tree
  // keeps one), and every field ReadAllocation requires must be there.
  enum Field : unsigned {
    kAnswer = 1u << 0,
    kCdi = 1u << 1,
    kCpus = 1u << 2,
    kDriver = 1u << 3,
    kGpus = 1u << 4,
    kKind = 1u << 5,
    kName = 1u << 6,
    kNamespace = 1u << 7,
    kOwner = 1u << 8,
    kPhase = 1u << 9,
    kMems = 1u << 10,
    kReservation = 1u << 11,
  };
  constexpr unsigned kRequired =
      kAnswer | kCdi | kCpus | kDriver | kGpus | kKind | kName | kNamespace | kOwner | kPhase;
  unsigned seen = 0;
  absl::string_view text;
  auto cpus = [&](absl::string_view value, CpuSet* out) {
    if (!canonical::PlainString(value, &text)) return false;
    absl::StatusOr<CpuSet> parsed = CpuSet::Parse(std::string_view(text.data(), text.size()));
    if (!parsed.ok()) return false;
    *out = *std::move(parsed);
    return true;
  };
  for (const auto& [key, value] : members) {
    if (value.empty()) return std::nullopt;  // not a value (ScanCanonicalPieces never gives one)
    const bool plain = canonical::PlainString(value, &text);
    unsigned field = 0;
    if (key == "answer") {
      field = kAnswer;
      a.answer = JsonText::FromCanonicalText(value);
    } else if (key == "cdi") {
      field = kCdi;
      if (value != "null" && value.front() != '{') return std::nullopt;
      a.cdi = JsonText::FromCanonicalText(value);
    } else if (key == "cpus") {
      field = kCpus;
      if (!cpus(value, &a.cpus)) return std::nullopt;
    } else if (key == "driver" && plain) {
      field = kDriver;
      a.driver = std::string(text);
    } else if (key == "gpus") {
      field = kGpus;
      std::vector<absl::string_view> items;
      if (!canonical::ArrayElements(value, &items)) return std::nullopt;
      for (absl::string_view item : items) {
        absl::string_view gpu;
        if (!canonical::PlainString(item, &gpu) || !a.gpus.emplace(gpu).second) return std::nullopt;
      }
    } else if (key == "kind" && plain) {
      field = kKind;
      if (text == KindName(AllocationKind::kDraClaim)) {
        a.kind = AllocationKind::kDraClaim;
      } else if (text == KindName(AllocationKind::kDevicePlugin)) {
        a.kind = AllocationKind::kDevicePlugin;
      } else {
        return std::nullopt;
      }
    } else if (key == "name" && plain) {
      field = kName;
      a.claim_name = std::string(text);
    } else if (key == "namespace" && plain) {
      field = kNamespace;
      a.claim_namespace = std::string(text);
    } else if (key == "owner" && plain) {
      field = kOwner;
      a.owner = std::string(text);
    } else if (key == "phase" && plain) {
      field = kPhase;
      if (text == PhaseName(Phase::kPreparing)) {
        a.phase = Phase::kPreparing;
      } else if (text == PhaseName(Phase::kPrepared)) {
        a.phase = Phase::kPrepared;
      } else {
        return std::nullopt;
      }
    } else if (key == "mems" && version >= 3) {
      field = kMems;
      if (!cpus(value, &a.mems) || a.mems.Empty()) return std::nullopt;
    } else if (key == "reservation" && version >= 2 && plain && !text.empty()) {
      field = kReservation;
      a.reservation = std::string(text);
    } else {
      return std::nullopt;
    }
    if ((seen & field) != 0) return std::nullopt;
    seen |= field;
  }
  if ((seen & kRequired) != kRequired) return std::nullopt;
  return a;
}

}  // namespace internal

namespace {

// ReadAllocation of an allocation's canonical text (checked by ScanCanonical), split into its
// members, without a tree of its answer and CDI spec: they are kept as the text they are. nullopt
// for anything ReadAllocation might refuse or read otherwise (the caller then takes the full
// parser, for its message).
std::optional<Allocation> FastAllocationMembers(const canonical::Members& members, int version) {
  if (std::optional<Allocation> a = internal::DirectAllocation(members, version)) return a;
  json small = json::object();
  absl::string_view answer, cdi;
  bool has_answer = false, has_cdi = false;
  for (const auto& [key, value] : members) {
    // A field twice is no text of one allocation (a tree would keep one of them), an empty text
    // no value.
    if (value.empty() || small.contains(std::string(key))) return std::nullopt;
    if (key == "answer") {
      answer = value;
      has_answer = true;
      small["answer"] = nullptr;
      continue;
    }
    if (key == "cdi") {
      // ReadAllocation takes an object or null.
      if (value != "null" && (value.empty() || value.front() != '{')) return std::nullopt;
      cdi = value;
      has_cdi = true;
      small["cdi"] = nullptr;
      continue;
    }
    if (absl::string_view plain; canonical::PlainString(value, &plain)) {
      small[std::string(key)] = std::string(plain);
      continue;
    }
    json parsed = json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) return std::nullopt;
    small[std::string(key)] = std::move(parsed);
  }
  Allocation a;
  if (!ReadAllocation(small, "allocation", version, &a).ok()) return std::nullopt;
  if (has_answer) a.answer = JsonText::FromCanonicalText(answer);
  if (has_cdi) a.cdi = JsonText::FromCanonicalText(cdi);
  return a;
}

std::optional<Allocation> FastAllocation(absl::string_view text, int version) {
  canonical::Members members;
  if (!canonical::ObjectMembers(text, &members)) return std::nullopt;
  return FastAllocationMembers(members, version);
}

// The members of the object pieces[i] (an object whose members ScanCanonicalPieces listed);
// false when it is not an object. `end`: PieceEnd(pieces, i).
bool PieceMembers(const std::vector<canonical::Piece>& pieces, size_t i, size_t end,
                  canonical::Members* out) {
  out->clear();
  if (pieces[i].value.front() != '{') return false;
  for (size_t k = i + 1; k < end; ++k) {
    if (pieces[k].depth == pieces[i].depth + 1) out->emplace_back(pieces[k].key, pieces[k].value);
  }
  return true;
}

absl::Status ReadReservation(const json& v, absl::string_view where, Reservation* r) {
  static const std::set<std::string> kKeys = {"uid",       "name",  "cpus",      "gpus", "placedAt",
                                              "expiresAt", "ended", "endReason", "spec"};
  return ReadObject(v, where, kKeys, {"endedAt"}, [&](const std::string& key, const json& value) {
    const std::string at = absl::StrCat(where, " field \"", key, "\"");
    if (key == "endedAt") return ReadString(value, at, &r->ended_at);
    if (key == "uid") return ReadNonEmptyString(value, at, &r->uid);
    if (key == "name") return ReadNonEmptyString(value, at, &r->name);
    if (key == "placedAt") return ReadString(value, at, &r->placed_at);
    if (key == "expiresAt") return ReadString(value, at, &r->expires_at);
    if (key == "endReason") return ReadString(value, at, &r->end_reason);
    if (key == "cpus") return ReadCpus(value, at, &r->cpus);
    if (key == "ended") {
      if (!value.is_boolean()) return Corrupt(absl::StrCat(at, ": not a boolean"));
      r->ended = value.get<bool>();
      return absl::OkStatus();
    }
    if (key == "spec") {
      if (!value.is_null() && !value.is_object()) {
        return Corrupt(absl::StrCat(at, ": not an object"));
      }
      r->spec = value;
      return absl::OkStatus();
    }
    // gpus
    if (absl::Status st = ReadGpus(value, at, &r->gpus); !st.ok()) return st;
    if (r->gpus.contains("")) return Corrupt(absl::StrCat(at, ": empty GPU id"));
    return absl::OkStatus();
  });
}

absl::StatusOr<State> ReadPayload(const json& payload, int version, uint64_t* seq) {
  State state;
  *seq = 0;
  if (!payload.is_object()) return Corrupt("payload: not a JSON object");
  std::set<std::string> keys = {"allocations"};
  if (version >= 2) keys.insert("reservations");
  // "seq" (the last journal record the snapshot covers) is written only by a StateStore.
  const json* allocations = nullptr;
  const json* reservations = nullptr;
  absl::Status st =
      ReadObject(payload, "payload", keys, {"seq"}, [&](const std::string& key, const json& value) {
        if (key == "seq") {
          if (!value.is_number_unsigned()) return Corrupt("payload field \"seq\": not a count");
          *seq = value.get<uint64_t>();
          return absl::OkStatus();
        }
        if (!value.is_array()) {
          return Corrupt(absl::StrCat("payload field \"", key, "\": not a JSON array"));
        }
        (key == "allocations" ? allocations : reservations) = &value;
        return absl::OkStatus();
      });
  if (!st.ok()) return st;
  // Allocations before reservations: a reservation may be placed on CPUs an allocation still
  // holds (it waits for them), but an allocation may not take reserved CPUs.
  for (size_t i = 0; i < allocations->size(); ++i) {
    Allocation a;
    const std::string where = absl::StrCat("allocation ", i);
    if (absl::Status st = ReadAllocation((*allocations)[i], where, version, &a); !st.ok()) {
      return st;
    }
    if (state.Find(a.owner) != nullptr) {
      return Corrupt(absl::StrCat(where, ": owner \"", a.owner, "\" appears twice"));
    }
    if (absl::Status st = state.Add(std::move(a)); !st.ok()) {
      return Corrupt(absl::StrCat(where, ": ", st.message()));
    }
  }
  if (reservations == nullptr) return state;
  for (size_t i = 0; i < reservations->size(); ++i) {
    Reservation r;
    const std::string where = absl::StrCat("reservation ", i);
    if (absl::Status st = ReadReservation((*reservations)[i], where, &r); !st.ok()) return st;
    if (state.FindReservation(r.uid) != nullptr) {
      return Corrupt(absl::StrCat(where, ": uid \"", r.uid, "\" appears twice"));
    }
    if (absl::Status st = state.PutReservation(std::move(r)); !st.ok()) {
      return Corrupt(absl::StrCat(where, ": ", st.message()));
    }
  }
  return state;
}

}  // namespace

// StateStore's journal prints these members directly (PutRecordOpen in store.cc): change both.
json AllocationToJson(const Allocation& a) {
  json gpus = json::array();
  for (const std::string& gpu : a.gpus) gpus.push_back(gpu);
  json out{
      {"owner", a.owner},           {"kind", KindName(a.kind)},    {"namespace", a.claim_namespace},
      {"name", a.claim_name},       {"cpus", a.cpus.ToString()},   {"gpus", std::move(gpus)},
      {"answer", a.answer.Parse()}, {"phase", PhaseName(a.phase)}, {"driver", a.driver},
      {"cdi", a.cdi.Parse()}};
  if (!a.reservation.empty()) out["reservation"] = a.reservation;
  if (!a.mems.Empty()) out["mems"] = a.mems.ToString();
  return out;
}

std::optional<Allocation> AllocationFromCanonicalText(absl::string_view text, bool scanned) {
  if (!scanned && canonical::ScanCanonical(text, kMaxDepth) != text.size()) return std::nullopt;
  return FastAllocation(text, kCheckpointVersion);
}

std::optional<Allocation> AllocationFromCanonicalMembers(const canonical::Members& members) {
  return FastAllocationMembers(members, kCheckpointVersion);
}

absl::StatusOr<Allocation> AllocationFromJson(const json& value) {
  Allocation a;
  if (absl::Status st = ReadAllocation(value, "allocation", kCheckpointVersion, &a); !st.ok()) {
    return st;
  }
  return a;
}

json ReservationToJson(const Reservation& r) {
  json gpus = json::array();
  for (const std::string& gpu : r.gpus) gpus.push_back(gpu);
  json j = {{"uid", r.uid},
            {"name", r.name},
            {"cpus", r.cpus.ToString()},
            {"gpus", std::move(gpus)},
            {"placedAt", r.placed_at},
            {"expiresAt", r.expires_at},
            {"ended", r.ended},
            {"endReason", r.end_reason},
            {"spec", r.spec.Parse()}};
  if (!r.ended_at.empty()) j["endedAt"] = r.ended_at;
  return j;
}

absl::StatusOr<Reservation> ReservationFromJson(const json& value) {
  Reservation r;
  if (absl::Status st = ReadReservation(value, "reservation", &r); !st.ok()) return st;
  return r;
}

std::string WhatToDo(absl::StatusCode code) {
  // Starting empty while claims still run would hand their CPUs out again, and the CDI files
  // they left would stop the start (see CdiLeftovers in driver/prepare).
  const char* forget =
      "move both checkpoint.json and checkpoint.json.journal aside to start empty, which "
      "forgets every prepared claim and device-plugin allocation of this node (drain the node "
      "first, and move this node's topodra CDI files aside too)";
  if (code == absl::StatusCode::kFailedPrecondition) {
    return absl::StrCat("; run a topodra that reads this version, or ", forget);
  }
  return absl::StrCat("; restore a good copy or ", forget);
}

namespace {

uint32_t Crc32cTable(uint32_t crc, absl::string_view data) {
  for (char c : data) crc = (crc >> 8) ^ kCrc32cTable[(crc ^ static_cast<uint8_t>(c)) & 0xFFu];
  return crc;
}

#if defined(__x86_64__)
// The CPU's CRC-32C instruction (SSE 4.2): 8 bytes a step instead of one table lookup a byte.
// Every start checksums the whole state (tens of MB with 10,000 claims).
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(uint32_t crc, absl::string_view data) {
  const char* p = data.data();
  size_t n = data.size();
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = __builtin_ia32_crc32qi(c32, static_cast<unsigned char>(*p));
  return c32;
}
#endif

}  // namespace

uint32_t Crc32c(absl::string_view data) {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return Crc32cSse42(0xFFFFFFFFu, data) ^ 0xFFFFFFFFu;
#endif
  return Crc32cTable(0xFFFFFFFFu, data) ^ 0xFFFFFFFFu;
}

// CompactJson prints nlohmann's compact dump byte for byte (compact_json_test), faster.
std::string CanonicalText(const json& payload) { return CompactJson(payload); }

std::string ChecksumOf(const json& payload) {
  const uint32_t crc = Crc32c(CanonicalText(payload));
  std::string hex(8, '0');
  for (int i = 7, shift = 0; i >= 0; --i, shift += 4)
    hex[i] = "0123456789abcdef"[(crc >> shift) & 0xFu];
  return hex;
}

std::string EncodeCheckpoint(const State& state, uint64_t seq, bool prepared_only) {
  json list = json::array();
  for (const auto& [owner, allocation] : state.allocations()) {
    if (prepared_only && allocation.phase != Phase::kPrepared) continue;
    list.push_back(AllocationToJson(allocation));
  }
  json reservations = json::array();
  for (const auto& [uid, reservation] : state.reservations()) {
    reservations.push_back(ReservationToJson(reservation));
  }
  json payload = {{"allocations", std::move(list)}, {"reservations", std::move(reservations)}};
  if (seq != 0) payload["seq"] = seq;
  json doc = {{"version", kCheckpointVersion}, {"checksum", ChecksumOf(payload)}};
  doc["payload"] = std::move(payload);
  return absl::StrCat(doc.dump(-1, ' ', false, json::error_handler_t::replace), "\n");
}

absl::StatusOr<State> DecodeCheckpoint(absl::string_view text) {
  uint64_t seq = 0;
  return DecodeCheckpoint(text, &seq);
}

namespace {

// EncodeCheckpoint writes `{"checksum":"<8 hex>","payload":<CanonicalText(payload)>,"version":N}`:
// in a file as written, the payload's canonical text is there already and need not be made
// again (tens of MB for 10,000 claims, at every start).
struct Layout {
  absl::string_view checksum;  // the 8 characters of the "checksum" string
  absl::string_view payload;   // the payload's text
  absl::string_view version;   // the version's digits
};
std::optional<Layout> SplitLayout(absl::string_view text) {
  constexpr absl::string_view kHead = "{\"checksum\":\"";
  constexpr absl::string_view kPayload = "\",\"payload\":";
  constexpr absl::string_view kVersion = ",\"version\":";
  const size_t begin = kHead.size() + 8 + kPayload.size();
  if (!absl::StartsWith(text, kHead) || text.size() < begin ||
      text.substr(kHead.size() + 8, kPayload.size()) != kPayload) {
    return std::nullopt;
  }
  const size_t end = text.rfind(kVersion);
  if (end == absl::string_view::npos || end < begin) return std::nullopt;
  absl::string_view tail = text.substr(end + kVersion.size());
  if (absl::EndsWith(tail, "\n")) tail.remove_suffix(1);
  if (!absl::EndsWith(tail, "}")) return std::nullopt;
  tail.remove_suffix(1);
  if (tail.empty()) return std::nullopt;
  for (const char c : tail) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return Layout{text.substr(kHead.size(), 8), text.substr(begin, end - begin), tail};
}

std::string Hex8(uint32_t crc) {
  std::string hex(8, '0');
  for (int i = 7, shift = 0; i >= 0; --i, shift += 4)
    hex[i] = "0123456789abcdef"[(crc >> shift) & 0xFu];
  return hex;
}

// The checksum of the payload's own bytes, for a file in Save's layout; "" for another layout.
std::string RawPayloadChecksum(absl::string_view text) {
  const std::optional<Layout> layout = SplitLayout(text);
  return layout ? Hex8(Crc32c(layout->payload)) : "";
}

// DecodeCheckpoint of a file in Save's layout, its payload in canonical form and its checksum
// right, without a JSON tree of the payload (ReadPayload's rules, in its order). nullopt for
// anything else, and for anything ReadPayload would refuse: the full parser then decides, and
// says what is wrong.
std::optional<State> FastDecode(absl::string_view text, uint64_t* seq) {
  const std::optional<Layout> layout = SplitLayout(text);
  if (!layout) return std::nullopt;
  int version = 0;
  // Digits only (SplitLayout), and no leading zero, which JSON does not allow.
  if (layout->version.size() > 9 || layout->version.front() == '0' ||
      !absl::SimpleAtoi(layout->version, &version) || version < kOldestCheckpointVersion ||
      version > kCheckpointVersion) {
    return std::nullopt;
  }
  if (Hex8(Crc32c(layout->payload)) != layout->checksum) return std::nullopt;
  // The payload is one level inside the document, whose depth the full parser limits. One pass
  // checks it and lists its members (depth 1), the elements of its lists (2) and their members
  // (3: the allocations' fields).
  std::vector<canonical::Piece> pieces;
  if (layout->payload.empty() || layout->payload.front() != '{' ||
      canonical::ScanCanonicalPieces(layout->payload, kMaxDepth - 1, 3, &pieces) !=
          layout->payload.size()) {
    return std::nullopt;
  }
  // [begin, end) of `pieces`: the elements of "allocations" and "reservations" and their members.
  size_t allocations = 0, allocations_end = 0, reservations = 0, reservations_end = 0;
  bool has_allocations = false, has_reservations = false;
  uint64_t snapshot_seq = 0;
  for (size_t i = 0; i < pieces.size(); i = canonical::PieceEnd(pieces, i)) {
    const absl::string_view key = pieces[i].key, value = pieces[i].value;
    if (key == "allocations") {
      if (value.front() != '[') return std::nullopt;
      allocations = i + 1;
      allocations_end = canonical::PieceEnd(pieces, i);
      has_allocations = true;
    } else if (key == "reservations" && version >= 2) {
      if (value.front() != '[') return std::nullopt;
      reservations = i + 1;
      reservations_end = canonical::PieceEnd(pieces, i);
      has_reservations = true;
    } else if (key == "seq") {
      if (value.front() == '-' || !absl::SimpleAtoi(value, &snapshot_seq)) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  if (!has_allocations || (version >= 2 && !has_reservations)) return std::nullopt;
  State state;
  canonical::Members members;
  for (size_t i = allocations; i < allocations_end;) {
    const size_t end = canonical::PieceEnd(pieces, i);
    if (!PieceMembers(pieces, i, end, &members)) return std::nullopt;
    std::optional<Allocation> a = FastAllocationMembers(members, version);
    if (!a || state.Find(a->owner) != nullptr || !state.Add(*std::move(a)).ok()) {
      return std::nullopt;
    }
    i = end;
  }
  if (has_reservations) {
    std::vector<absl::string_view> items;
    for (size_t i = reservations; i < reservations_end; i = canonical::PieceEnd(pieces, i)) {
      items.push_back(pieces[i].value);
    }
    for (absl::string_view item : items) {
      // Few and small: the tree is cheap.
      json value = json::parse(item.begin(), item.end(), nullptr, /*allow_exceptions=*/false);
      Reservation r;
      if (value.is_discarded() || !ReadReservation(value, "reservation", &r).ok() ||
          state.FindReservation(r.uid) != nullptr || !state.PutReservation(std::move(r)).ok()) {
        return std::nullopt;
      }
    }
  }
  *seq = snapshot_seq;
  return state;
}

}  // namespace

absl::StatusOr<State> DecodeCheckpoint(absl::string_view text, uint64_t* seq) {
  if (text.size() > kMaxCheckpointBytes) {
    return Corrupt(
        absl::StrCat(text.size(), " bytes is larger than the limit of ", kMaxCheckpointBytes));
  }
  if (std::optional<State> fast = FastDecode(text, seq)) return *std::move(fast);
  return DecodeCheckpointFullParse(text, seq);
}

absl::StatusOr<State> DecodeCheckpointFullParse(absl::string_view text, uint64_t* seq) {
  *seq = 0;
  if (text.size() > kMaxCheckpointBytes) {
    return Corrupt(
        absl::StrCat(text.size(), " bytes is larger than the limit of ", kMaxCheckpointBytes));
  }
  absl::StatusOr<json> parsed = files::ParseJsonBounded(text, kMaxDepth);
  if (!parsed.ok()) return Corrupt(parsed.status().message());
  const json& doc = *parsed;
  if (!doc.is_object()) return Corrupt("not a JSON object");
  // The version first: a newer format may checksum differently.
  const auto version = doc.find("version");
  if (version == doc.end()) return Corrupt("missing field \"version\"");
  if (!version->is_number_integer()) {
    return Corrupt(absl::StrCat("field \"version\": not an integer: ", CanonicalText(*version)));
  }
  if (*version < kOldestCheckpointVersion || *version > kCheckpointVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("unknown version ", CanonicalText(*version), " (this topodra reads versions ",
                     kOldestCheckpointVersion, " to ", kCheckpointVersion, ")"));
  }
  const int version_number = version->get<int>();
  const json* payload = nullptr;
  std::string checksum;
  absl::Status st = ReadObject(doc, "checkpoint", {"version", "checksum", "payload"}, {},
                               [&](const std::string& key, const json& value) {
                                 if (key == "checksum") {
                                   return ReadString(value, "field \"checksum\"", &checksum);
                                 }
                                 if (key == "payload") payload = &value;
                                 return absl::OkStatus();
                               });
  if (!st.ok()) return st;
  if (const std::string raw = RawPayloadChecksum(text); !raw.empty() && raw == checksum) {
    return ReadPayload(*payload, version_number, seq);
  }
  if (const std::string actual = ChecksumOf(*payload); actual != checksum) {
    return Corrupt(absl::StrCat("checksum mismatch: the file says \"", checksum,
                                "\" but its payload has \"", actual, "\""));
  }
  return ReadPayload(*payload, version_number, seq);
}

Checkpoint::Checkpoint(std::string path) : path_(std::move(path)) {
  const size_t slash = path_.rfind('/');
  if (slash == std::string::npos) {
    dir_ = ".";
    file_name_ = path_;
  } else {
    dir_ = slash == 0 ? "/" : path_.substr(0, slash);
    file_name_ = path_.substr(slash + 1);
  }
}

absl::Status Checkpoint::Save(const State& state, uint64_t seq, bool prepared_only) const {
  auto fail = [this](absl::Status st) {
    return absl::Status(st.code(), absl::StrCat("save checkpoint \"", path_, "\": ", st.message()));
  };
  if (file_name_.empty()) return fail(absl::InvalidArgumentError("path names a directory"));
  // 0600 / 0700: the checkpoint names every pod's claims.
  if (absl::Status st = files::WriteFileAtomically(
          dir_, file_name_, EncodeCheckpoint(state, seq, prepared_only), 0600, 0700);
      !st.ok()) {
    return fail(st);
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::RemoveStaleTemps() const {
  absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(dir_);
  if (!entries.ok()) return entries.status();
  std::vector<std::string> stale;
  for (const files::DirEntry& e : *entries) {
    if (files::IsTempNameFor(e.name, file_name_)) stale.push_back(e.name);
  }
  for (const std::string& name : stale) {
    const std::string path = absl::StrCat(dir_, "/", name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, "remove stale temporary file", path);
    }
  }
  if (stale.empty()) return absl::OkStatus();
  return files::SyncDirectory(dir_);
}

StateFileText::StateFileText(StateFileText&& other) noexcept
    : text_(std::move(other.text_)),
      map_(std::exchange(other.map_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

StateFileText& StateFileText::operator=(StateFileText&& other) noexcept {
  if (this != &other) {
    Unmap();
    text_ = std::move(other.text_);
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

StateFileText::~StateFileText() { Unmap(); }

void StateFileText::Unmap() {
  if (map_ != nullptr) ::munmap(const_cast<char*>(map_), size_);
  map_ = nullptr;
  size_ = 0;
}

absl::StatusOr<StateFileText> StateFileText::Read(const std::string& path, std::size_t max_bytes) {
  absl::StatusOr<std::string> text = files::ReadFileBounded(path, max_bytes);
  if (!text.ok()) return text.status();
  StateFileText out;
  out.text_ = *std::move(text);
  return out;
}

absl::StatusOr<StateFileText> StateFileText::Map(const std::string& path, std::size_t max_bytes) {
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14; older kernels say EINVAL
#endif
  return MapWithAdvice(path, max_bytes, MADV_POPULATE_READ);
}

absl::StatusOr<StateFileText> StateFileText::MapWithAdvice(const std::string& path,
                                                           std::size_t max_bytes, int advice) {
  absl::StatusOr<int> raw = files::OpenRegularFile(path, O_RDONLY);
  if (!raw.ok()) return raw.status();
  const int fd = *raw;
  struct stat st;
  void* map = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size > 0 &&
      static_cast<std::size_t>(st.st_size) <= max_bytes) {
    map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  }
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) return Read(path, max_bytes);
  StateFileText out;
  out.map_ = static_cast<const char*>(map);
  out.size_ = static_cast<std::size_t>(st.st_size);
  // Any failure, EINVAL from a kernel before 5.14 included, is read instead: an unpopulated
  // mapping would turn an I/O error met while decoding into a SIGBUS rather than a status.
  if (::madvise(map, out.size_, advice) != 0) {
    out.Unmap();
    return Read(path, max_bytes);
  }
  return out;
}

absl::StatusOr<State> Checkpoint::Load() const {
  uint64_t seq = 0;
  return Load(&seq);
}

absl::StatusOr<State> Checkpoint::Load(uint64_t* seq) const {
  *seq = 0;
  if (!file_name_.empty()) {
    if (absl::Status st = RemoveStaleTemps(); !st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("load checkpoint \"", path_, "\": ", st.message()));
    }
  }
  return Read(seq, /*map=*/true);
}

absl::StatusOr<State> Checkpoint::Peek(uint64_t* seq) const { return Read(seq, /*map=*/false); }

absl::StatusOr<State> Checkpoint::Read(uint64_t* seq, bool map) const {
  *seq = 0;
  auto fail = [this](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("load checkpoint \"", path_, "\": ", st.message()));
  };
  if (file_name_.empty()) return fail(absl::InvalidArgumentError("path names a directory"));
  // One byte past the limit comes back, so DecodeCheckpoint reports an oversized file.
  absl::StatusOr<StateFileText> text = map ? StateFileText::Map(path_, kMaxCheckpointBytes)
                                           : StateFileText::Read(path_, kMaxCheckpointBytes);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) return State{};
    return fail(text.status());
  }
  absl::StatusOr<State> state = DecodeCheckpoint(text->view(), seq);
  if (!state.ok()) {
    return absl::Status(state.status().code(),
                        absl::StrCat("checkpoint \"", path_, "\": ", state.status().message(),
                                     WhatToDo(state.status().code())));
  }
  return state;
}

}  // namespace topodra::state
