#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/state/state.h"
#include "nlohmann/json.hpp"

namespace topodra::state {

// Version of the checkpoint format this build writes. It reads this one, version 3 (the same
// fields; a claim's device metadata files stored with their text, "content", where version 4
// stores the object it is printed from, "document": the allocation's "cdi" value is opaque here,
// and its reader, prepare::MetadataFilesFromJson, takes both), version 2 (before NUMA memory: no
// allocation "mems") and version 1 (before reservations: no "reservations", no allocation
// "reservation"). A topodra that reads up to 3 refuses a version 4 file ("unknown version").
inline constexpr int kCheckpointVersion = 4;
inline constexpr int kOldestCheckpointVersion = 1;
// A node holds at most a few thousand allocations; anything far larger is not ours.
inline constexpr std::size_t kMaxCheckpointBytes = 64 << 20;

// CRC-32C (Castagnoli, reflected, as in iSCSI and ext4): Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(absl::string_view data);

// The canonical text of `payload` (sorted keys, no whitespace, invalid UTF-8 replaced): what the
// checksum covers.
std::string CanonicalText(const nlohmann::json& payload);
// 8 lowercase hex digits of Crc32c(CanonicalText(payload)).
std::string ChecksumOf(const nlohmann::json& payload);

// The file format, pure: {"version": 4, "checksum": "<hex>", "payload": {"allocations": [...],
// "reservations": [...], "seq": N}}. `seq` (written when not 0) records the last journal record a
// StateStore snapshot covers; prepared_only leaves out allocations still being prepared
// (reservations are always written).
std::string EncodeCheckpoint(const State& state, uint64_t seq = 0, bool prepared_only = false);
// Strict inverse of EncodeCheckpoint, for version 1 to 4 files. DataLoss for anything corrupt
// (bad JSON, checksum mismatch, bad field, duplicate owner or holder, duplicate reservation uid,
// overlapping reservations), FailedPrecondition for an unknown version.
// Messages do not name a file; Checkpoint::Load adds that.
absl::StatusOr<State> DecodeCheckpoint(absl::string_view text);
absl::StatusOr<State> DecodeCheckpoint(absl::string_view text, uint64_t* seq);
// DecodeCheckpoint always through a JSON tree of the whole file. DecodeCheckpoint reads a file in
// the layout and canonical form Save writes without one (canonical_json.h), and gives the same
// result for every text (checkpoint_fuzz compares them); this is the reference it is checked
// against, and what it falls back to for any other text.
absl::StatusOr<State> DecodeCheckpointFullParse(absl::string_view text, uint64_t* seq);

// One allocation as the checkpoint and the journal spell it, and its strict inverse (DataLoss).
nlohmann::json AllocationToJson(const Allocation& allocation);
absl::StatusOr<Allocation> AllocationFromJson(const nlohmann::json& value);
// AllocationFromJson of the text of an allocation in canonical form (CanonicalText), without a
// JSON tree of its answer and CDI spec; nullopt when the text is not canonical or
// AllocationFromJson would refuse it (the caller then takes the full parser, for its message).
// `scanned`: ScanCanonical accepted the text already (as part of a larger one).
std::optional<Allocation> AllocationFromCanonicalText(absl::string_view text, bool scanned = false);
// The same from the members of that text (ScanCanonicalPieces split it): key, value text.
std::optional<Allocation> AllocationFromCanonicalMembers(
    const std::vector<std::pair<absl::string_view, absl::string_view>>& members);
// For tests: the reader AllocationFromCanonicalMembers tries first, for the usual record (every
// string without an escape), with the fields of checkpoint `version`. nullopt for anything else,
// and for a field twice or a required one missing (the caller then takes the slower reader).
namespace internal {
std::optional<Allocation> DirectAllocation(
    const std::vector<std::pair<absl::string_view, absl::string_view>>& members, int version);
}  // namespace internal
// One reservation, likewise: {"uid", "name", "cpus": "<cpu list>", "gpus": [...], "placedAt",
// "expiresAt", "ended", "endReason", "spec"}, every field always present.
nlohmann::json ReservationToJson(const Reservation& reservation);
absl::StatusOr<Reservation> ReservationFromJson(const nlohmann::json& value);

// What the operator can do about a corrupt (DataLoss) or unreadable-version (FailedPrecondition)
// state file, appended to the message that stops the daemon.
std::string WhatToDo(absl::StatusCode code);

// The bytes of a state file (snapshot or journal), held for one decoding.
class StateFileText {
 public:
  // The file mapped read-only, its pages read in one call (MADV_POPULATE_READ): for the start,
  // whose files nobody else writes while the daemon holds the instance lock. Read into fresh
  // memory instead, 10,000 claims' 42 MB cost a page fault every 4 KiB and two copies, about a
  // third of the state load (docs/dev/benchmarks.md, restart). Falls back to Read for an empty or
  // oversized file and whenever the mapping or its population fails (EINVAL from a kernel before
  // 5.14 included), so an I/O error reading the file is a status. What can still raise SIGBUS:
  // a page the kernel reclaims after the population and fails to read again, and a file that
  // another process shrinks while it is mapped (nobody may: the instance lock keeps a second
  // daemon out, and docs/user/dra-plugin.md says to stop the daemon before restoring the files).
  static absl::StatusOr<StateFileText> Map(const std::string& path, std::size_t max_bytes);
  // Map with `advice` in place of MADV_POPULATE_READ: tests give one the kernel refuses.
  static absl::StatusOr<StateFileText> MapWithAdvice(const std::string& path, std::size_t max_bytes,
                                                     int advice);
  // read(2) into memory (files::ReadFileBounded): for a file another process may truncate while it
  // is read (Peek of a running daemon's journal, which a compaction empties), where a mapped page
  // past the new end would fault with SIGBUS. Both: NotFound when missing; a file larger than
  // max_bytes gives more than max_bytes bytes (not necessarily all), so the decoder reports it.
  static absl::StatusOr<StateFileText> Read(const std::string& path, std::size_t max_bytes);

  StateFileText() = default;
  StateFileText(StateFileText&& other) noexcept;
  StateFileText& operator=(StateFileText&& other) noexcept;
  StateFileText(const StateFileText&) = delete;
  StateFileText& operator=(const StateFileText&) = delete;
  ~StateFileText();

  absl::string_view view() const {
    return map_ != nullptr ? absl::string_view(map_, size_) : absl::string_view(text_);
  }
  bool mapped() const { return map_ != nullptr; }

 private:
  void Unmap();
  std::string text_;
  const char* map_ = nullptr;
  std::size_t size_ = 0;
};

// The State's file. Save replaces it atomically (temp file in the same directory, fsync, rename,
// directory fsync), so after a crash the file holds either the old or the new state, whole.
class Checkpoint {
 public:
  explicit Checkpoint(std::string path);

  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

  // Creates the directory (0700) if missing; the file is 0600.
  // seq and prepared_only as in EncodeCheckpoint (a StateStore snapshot).
  absl::Status Save(const State& state, uint64_t seq = 0, bool prepared_only = false) const;
  // A missing file is the empty state. A corrupt file is an error telling the operator what to
  // do, never silently dropped. Removes temporary files a crashed Save left behind, so call it
  // at start, not concurrently with Save. Maps the file (StateFileText::Map): nobody may shrink
  // it while it loads (the daemon holds the instance lock).
  absl::StatusOr<State> Load() const;
  // Also gives the journal sequence number a StateStore snapshot covers (0 for none).
  absl::StatusOr<State> Load(uint64_t* seq) const;
  // Load that writes nothing and removes nothing: for reading the file of a running daemon
  // (whose Save may be writing a temporary file right now).
  absl::StatusOr<State> Peek(uint64_t* seq) const;

 private:
  absl::Status RemoveStaleTemps() const;
  // Map: StateFileText::Map, else Read (Peek).
  absl::StatusOr<State> Read(uint64_t* seq, bool map) const;

  std::string path_;
  std::string dir_;
  std::string file_name_;
};

}  // namespace topodra::state
