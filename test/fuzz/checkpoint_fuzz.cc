// The state files' readers on arbitrary input: any input is a status, never a crash, a hang or a
// leak, and every fast reader gives exactly what the full parser gives. Random bytes almost never
// carry a right CRC-32C, so the target also fixes it: a JSON object is decoded again with its
// checksum fixed (to reach the payload parser) and in the layout Save writes with the checksum of
// its payload's bytes (to reach the fast path that reads it without a JSON tree); an input whose
// bytes after the first 9 are JSON is read again as a journal line with its CRC fixed (to reach
// the replay's fast reader). It compares:
// - a checkpoint: DecodeCheckpoint (fast path first) against DecodeCheckpointFullParse, the same
//   status and, when it decodes, the same State and seq; that State re-encodes to text that
//   decodes to the same State and re-encodes to the same text;
// - a journal line: FastPutLine (the replay's reader of "put" lines: CRC, one-pass check and split
//   to depth 2, AllocationFromCanonicalMembers) against DecodeJournalLine + AllocationFromJson:
//   whenever it gives a record, the full parser accepts the line with the same seq and an equal
//   allocation; AllocationFromCanonicalText and AllocationFromCanonicalMembers (of a depth-1
//   split) of the put's canonical text against AllocationFromJson and against each other; and a
//   record re-encodes to a line that decodes to the same record.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/json_parse.h"
#include "driver/state/canonical_json.h"
#include "driver/state/checkpoint.h"
#include "driver/state/store.h"
#include "nlohmann/json.hpp"

namespace {

void Check(const std::string& text) {
  uint64_t seq = 0, full_seq = 0;
  absl::StatusOr<topodra::state::State> state = topodra::state::DecodeCheckpoint(text, &seq);
  absl::StatusOr<topodra::state::State> full =
      topodra::state::DecodeCheckpointFullParse(text, &full_seq);
  if (state.status() != full.status()) std::abort();
  if (state.ok() && (!(*state == *full) || seq != full_seq)) std::abort();
  if (!state.ok()) {
    if (state.status().message().empty()) std::abort();
    return;
  }
  const std::string encoded = topodra::state::EncodeCheckpoint(*state);
  absl::StatusOr<topodra::state::State> back = topodra::state::DecodeCheckpoint(encoded);
  if (!back.ok()) std::abort();
  if (topodra::state::EncodeCheckpoint(*back) != encoded) std::abort();
  if (back->Size() != state->Size()) std::abort();
  if (!(back->HeldCpus() == state->HeldCpus()) || back->HeldGpus() != state->HeldGpus()) {
    std::abort();
  }
}

// A journal line (StateStore::Open reads them from disk): a status, and a record that decodes
// re-encodes to a line that decodes to the same record.
void CheckJournalLine(const std::string& text) {
  absl::StatusOr<nlohmann::json> body = topodra::state::DecodeJournalLine(text);
  // The replay's fast reader: a record only where the full parser reads the same one.
  if (std::optional<topodra::state::internal::FastPut> fast =
          topodra::state::internal::FastPutLine(text)) {
    if (!body.ok() || !body->contains("put") || !(*body)["seq"].is_number_unsigned() ||
        (*body)["seq"].get<uint64_t>() != fast->seq) {
      std::abort();
    }
    absl::StatusOr<topodra::state::Allocation> slow =
        topodra::state::AllocationFromJson((*body)["put"]);
    if (!slow.ok() || !(*slow == fast->allocation)) std::abort();
  }
  if (!body.ok()) return;
  // The journal's fast path: a canonical allocation reads as AllocationFromJson reads it.
  if (body->contains("put")) {
    const std::string put =
        (*body)["put"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::optional<topodra::state::Allocation> fast =
        topodra::state::AllocationFromCanonicalText(put);
    absl::StatusOr<topodra::state::Allocation> slow =
        topodra::state::AllocationFromJson((*body)["put"]);
    if (fast.has_value() && (!slow.ok() || !(*fast == *slow))) std::abort();
    // The one-pass split the journal and the snapshot use reads it as the two-pass one.
    std::vector<topodra::state::canonical::Piece> pieces;
    if (topodra::state::canonical::ScanCanonicalPieces(put, 32, 1, &pieces) != put.size()) {
      if (fast.has_value()) std::abort();
    } else {
      topodra::state::canonical::Members members;
      for (const auto& p : pieces) members.emplace_back(p.key, p.value);
      std::optional<topodra::state::Allocation> split =
          topodra::state::AllocationFromCanonicalMembers(members);
      if (split.has_value() != fast.has_value() || (split && !(*split == *fast))) std::abort();
    }
  }
  if (body->contains("put")) (void)topodra::state::AllocationFromJson((*body)["put"]);
  if (body->contains("putReservation")) {
    (void)topodra::state::ReservationFromJson((*body)["putReservation"]);
  }
  std::string line = topodra::state::EncodeJournalLine(*body);
  line.pop_back();
  absl::StatusOr<nlohmann::json> back = topodra::state::DecodeJournalLine(line);
  if (!back.ok() || *back != *body) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Check(text);
  CheckJournalLine(text);
  // With a right checksum, to reach the record parser.
  if (size > 9) {
    absl::StatusOr<nlohmann::json> body = topodra::files::ParseJsonBounded(text.substr(9), 32);
    if (body.ok()) {
      std::string fixed = topodra::state::EncodeJournalLine(*body);
      fixed.pop_back();
      CheckJournalLine(fixed);
    }
  }
  // Depth-bounded like the decoder, so that re-dumping below cannot exhaust the stack.
  bool too_deep = false;
  nlohmann::json doc = nlohmann::json::parse(
      text,
      [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth > 32) too_deep = true;
        return !too_deep;
      },
      /*allow_exceptions=*/false);
  if (too_deep || !doc.is_object() || !doc.contains("payload")) return 0;
  doc["checksum"] = topodra::state::ChecksumOf(doc["payload"]);
  Check(doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  // In Save's layout with the payload's own bytes checksummed, whatever the version says.
  if (doc.contains("version") && doc["version"].is_number_integer()) {
    const std::string payload =
        doc["payload"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", topodra::state::Crc32c(payload));
    Check("{\"checksum\":\"" + std::string(hex) + "\",\"payload\":" + payload +
          ",\"version\":" + doc["version"].dump() + "}\n");
  }
  return 0;
}
