// The State on disk, made for thousands of claims and concurrent callers: a snapshot in the
// Checkpoint format plus an append-only journal of changes.
//
// Why not rewrite the checkpoint on every change: with 10,000 prepared claims that file is
// megabytes, and every prepare would pay for encoding and writing all of it. A journal record is
// one line, and concurrent callers share one fdatasync (group commit), so a prepare costs one
// small write and, at most, one sync.
//
// Files, both 0600 in a 0700 directory:
//   <path>          snapshot: the Checkpoint format with payload.seq = last record it covers
//   <path>.journal  lines "<crc32c hex> <json>\n", json = {"seq":N,"put":{allocation}},
//                   {"seq":N,"remove":"<owner>"}, {"seq":N,"putReservation":{reservation}} or
//                   {"seq":N,"removeReservation":"<uid>"}; the CRC covers the json text
//
// Crash safety: a record is durable before Put/Remove return. A crash while appending leaves at
// most one torn last line, which Open drops (that change was never acknowledged). A bad line
// followed by good ones is corruption, reported like a corrupt snapshot, never skipped.
// Compaction writes a new snapshot atomically, then empties the journal; records the snapshot
// already covers (seq <= payload.seq) are skipped on replay, so a crash in between is harmless.
//
// Replay applies records in order, with every rule of State but one: an allocation is put back
// even on CPUs or GPUs reserved for others since, because the State allowed it when it was made
// (a reservation may be placed between a claim's Add and its record). Callers must record
// changes in the order they make them to the State.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "driver/state/checkpoint.h"
#include "driver/state/state.h"

namespace topodra::state {

// Where the Ledger (ledger.h) records changes: the StateStore, or a test's double. Put, Remove,
// PutReservation and RemoveReservation are durable when they return OK and are called from
// several threads at once; Compact is never called while one of them runs.
class Journal {
 public:
  virtual ~Journal() = default;
  virtual absl::Status Put(const Allocation& allocation) = 0;
  virtual absl::Status Remove(const std::string& owner) = 0;
  virtual absl::Status PutReservation(const Reservation& reservation) = 0;
  virtual absl::Status RemoveReservation(const std::string& uid) = 0;
  virtual bool ShouldCompact(int state_size) const = 0;
  virtual absl::Status Compact(const State& state) = 0;
};

class StateStore : public Journal {
 public:
  // Loads snapshot + journal (the result is in `loaded`), drops a torn last record, and opens
  // the journal for appending. Errors name the file and what to do; never a silent reset: a
  // snapshot that covers journal records but has no journal, or a journal whose first record
  // does not follow the snapshot (the snapshot is missing or older), is DataLoss.
  struct Opened {
    std::unique_ptr<StateStore> store;
    State loaded;
    int replayed = 0;           // journal records applied
    bool dropped_torn = false;  // a torn last record was dropped
    // Neither a snapshot nor a journal file was there: a new node, or one whose state files were
    // deleted. (Open creates the journal and nothing removes it, so an empty or torn-only journal
    // is a state that recorded nothing yet, e.g. a crash during the first prepare ever.)
    bool is_new = false;
  };
  // `if_new` runs when the state is new (see is_new) before Open creates anything: its error
  // stops Open, so a refusal stays a refusal at the next start. The caller tells a new node from
  // a lost state by what the state leaves elsewhere (CDI files). Maps both files
  // (StateFileText::Map): nobody may shrink them while Open runs (the caller holds the instance
  // lock).
  static absl::StatusOr<Opened> Open(const std::string& path,
                                     const std::function<absl::Status()>& if_new = {});
  // The state Open would load, for reading a running daemon's files from another process:
  // writes nothing, takes no lock, removes no temporary files, and ignores a torn last record
  // (an append in progress). A missing snapshot and journal is the empty state. Unavailable
  // when a compaction kept replacing the files while they were read.
  static absl::StatusOr<State> Peek(const std::string& path);

  ~StateStore() override;
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const std::string& path() const { return path_; }
  std::string journal_path() const { return path_ + ".journal"; }

  // Thread-safe. Durable when they return OK. Put records the whole allocation (an upsert).
  absl::Status Put(const Allocation& allocation) override;
  absl::Status Remove(const std::string& owner) override;
  // Likewise for reservations: PutReservation records the whole reservation (an upsert).
  absl::Status PutReservation(const Reservation& reservation) override;
  absl::Status RemoveReservation(const std::string& uid) override;

  // True when the journal has grown past the size that makes a snapshot worthwhile.
  bool ShouldCompact(int state_size) const override;
  // Writes `state` (its Prepared allocations, all its reservations) as the snapshot and empties
  // the journal. The caller must pass a state that reflects every Put/Remove issued so far and
  // issue none meanwhile (the Ledger compacts its committed state with no record in flight).
  absl::Status Compact(const State& state) override;

  int64_t records() const;

 private:
  // Whether `path` is a snapshot of kCheckpointVersion in Save's layout.
  static bool IsCurrentVersionSnapshot(const std::string& path);
  // Writes `state` whole (allocations being prepared too) as the snapshot, then empties the
  // journal: Open's upgrade of an older state.
  absl::Status Rewrite(const State& state);
  // After a snapshot covering every record up to `snapshot_seq` (a crash before this is harmless:
  // replay skips them). mu_ held.
  absl::Status EmptyJournal(uint64_t snapshot_seq);
  StateStore(std::string path, int fd, uint64_t seq, int64_t records, int64_t bytes);
  absl::Status Append(const nlohmann::json& body);
  // Appends the record `open` + ',"seq":N}' (the text of its JSON object, without its closing
  // brace: "seq" sorts after every other key of a record), and waits until it is durable. The
  // caller prints the record outside the lock.
  absl::Status AppendOpen(std::string open);
  // Journal replay, shared by Open and Peek.
  struct Replayed;
  static absl::Status Replay(absl::string_view content, const std::string& journal,
                             uint64_t snapshot_seq, State* state, Replayed* out);
  static absl::Status Apply(const nlohmann::json& body, State* state);

  const std::string path_;
  mutable std::mutex mu_;
  std::condition_variable synced_cv_;
  int fd_ = -1;
  uint64_t next_seq_ = 0;     // last seq handed out
  uint64_t written_seq_ = 0;  // last seq whose line is in the file
  uint64_t synced_seq_ = 0;   // last seq known durable
  bool syncing_ = false;
  int64_t records_ = 0;  // lines in the journal
  int64_t bytes_ = 0;    // size of the journal
  // A new state's snapshot of this version, written before its first record (Open's upgrade
  // rewrite, deferred while nothing is recorded).
  bool snapshot_pending_ = false;
};

// Minimum journal length before ShouldCompact says yes; beyond it, compaction happens once the
// journal has more records than twice the state, so its cost per change stays constant.
inline constexpr int64_t kMinCompactRecords = 1000;
// A journal this large is compacted whatever its record count: records of big claims (device
// metadata of a claim of many individual CPUs is ~100 KB) would otherwise reach the read limit
// (kMaxCheckpointBytes) within 1000 records, and the next start would refuse the state.
inline constexpr int64_t kCompactJournalBytes = 16 << 20;

// The journal line of a record, and its strict parse (errors are DataLoss): a body is
// {"seq": N} and one of "put" (object), "remove" (string), "putReservation" (object) or
// "removeReservation" (string).
std::string EncodeJournalLine(const nlohmann::json& body);
absl::StatusOr<nlohmann::json> DecodeJournalLine(absl::string_view line);

namespace internal {
// A "put" record read without a JSON tree of its allocation (most records of a busy node, and
// most of their bytes), when its line is intact and its text canonical; nullopt for anything else
// (DecodeJournalLine then decides, and says what is wrong). Whenever it gives a value, it is the
// seq and AllocationFromJson of what DecodeJournalLine gives (store_test, checkpoint_fuzz).
struct FastPut {
  uint64_t seq = 0;
  Allocation allocation;
};
std::optional<FastPut> FastPutLine(absl::string_view line);
}  // namespace internal

}  // namespace topodra::state
