#include "driver/state/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "common/json_parse.h"
#include "common/json_print.h"
#include "driver/state/canonical_json.h"

namespace topodra::state {
namespace {

using json = nlohmann::json;
using files::ErrnoStatus;

// A record holds one allocation or reservation: an answer and CDI spec are bounded by the API's
// limits (32 results), a reservation's spec by its CRD; both far below this.
constexpr size_t kMaxLineBytes = 4 << 20;
constexpr int kMaxDepth = 32;

absl::Status WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("write: ", std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

namespace internal {

std::optional<FastPut> FastPutLine(absl::string_view line) {
  if (line.size() < 10 || line.size() > kMaxLineBytes || line[8] != ' ') return std::nullopt;
  uint32_t crc = 0;
  for (int i = 0; i < 8; ++i) {
    const char c = line[i];
    if (c >= '0' && c <= '9') {
      crc = (crc << 4) | static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      crc = (crc << 4) | static_cast<uint32_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
  }
  const absl::string_view text = line.substr(9);
  // One pass checks the line and splits it: the record's members (depth 1) and the allocation's
  // (depth 2).
  std::vector<canonical::Piece> pieces;
  if (!absl::StartsWith(text, R"({"put":{)") || Crc32c(text) != crc ||
      canonical::ScanCanonicalPieces(text, kMaxDepth, 2, &pieces) != text.size()) {
    return std::nullopt;
  }
  const size_t put_end = canonical::PieceEnd(pieces, 0);
  if (put_end + 1 != pieces.size() || pieces[0].key != "put" || pieces[put_end].key != "seq" ||
      pieces[put_end].value.front() == '-') {
    return std::nullopt;
  }
  FastPut out;
  if (!absl::SimpleAtoi(pieces[put_end].value, &out.seq)) return std::nullopt;
  canonical::Members members;
  for (size_t i = 1; i < put_end; ++i) members.emplace_back(pieces[i].key, pieces[i].value);
  std::optional<Allocation> a = AllocationFromCanonicalMembers(members);
  if (!a) return std::nullopt;
  out.allocation = *std::move(a);
  return out;
}

}  // namespace internal

struct StateStore::Replayed {
  uint64_t seq = 0;           // the last seq applied, or the snapshot's
  int64_t records = 0;        // intact lines
  size_t good_end = 0;        // offset after the last intact line
  int applied = 0;            // records after the snapshot, applied
  bool dropped_torn = false;  // the last line was torn and left out
};

absl::Status StateStore::Apply(const json& body, State* state) {
  if (const auto put = body.find("put"); put != body.end()) {
    absl::StatusOr<Allocation> a = AllocationFromJson(*put);
    if (!a.ok()) return a.status();
    (void)state->Remove(a->owner);
    return state->Insert(*std::move(a), /*check_reservations=*/false);
  }
  if (const auto remove = body.find("remove"); remove != body.end()) {
    return state->Remove(remove->get<std::string>());
  }
  if (const auto put = body.find("putReservation"); put != body.end()) {
    absl::StatusOr<Reservation> r = ReservationFromJson(*put);
    if (!r.ok()) return r.status();
    return state->PutReservation(*std::move(r));
  }
  return state->RemoveReservation(body.at("removeReservation").get<std::string>());
}

// The journal `content` applied to `state` (the snapshot, covering records up to snapshot_seq).
// A last line without its end of line is a torn append, left out. Any complete line that does
// not decode is DataLoss, the last one too: an append writes its line and '\n' in one write, so
// a crash cuts a record short but never completes a wrong one; a complete bad line is damage
// after the fact, and the change it held may have been acknowledged (a prepared claim whose CPUs
// would otherwise go to another). One exception: a last line with NUL bytes is the tail of a
// power cut (the file's size was kept, the data of an unsynced append was not): an acknowledged
// record was fdatasynced with everything before it, so it cannot be followed or led by them.
absl::Status StateStore::Replay(absl::string_view content, const std::string& journal,
                                uint64_t snapshot_seq, State* state, Replayed* out) {
  const std::string todo_journal = absl::StrCat("journal \"", journal, "\": ");
  if (content.size() > kMaxCheckpointBytes) {
    return absl::DataLossError(absl::StrCat(todo_journal, "larger than ", kMaxCheckpointBytes,
                                            " bytes", WhatToDo(absl::StatusCode::kDataLoss)));
  }
  out->seq = snapshot_seq;
  size_t pos = 0;
  while (pos < content.size()) {
    const size_t nl = content.find('\n', pos);
    if (nl == absl::string_view::npos) {
      // The append that was cut short by a crash: never acknowledged, so dropping it is right.
      out->dropped_torn = true;
      break;
    }
    const absl::string_view line = content.substr(pos, nl - pos);
    const std::string where =
        absl::StrCat(todo_journal, "line ", out->records + 1, " (byte ", pos, "): ");
    std::optional<internal::FastPut> fast = internal::FastPutLine(line);
    absl::StatusOr<json> body = fast ? absl::StatusOr<json>(json())
                                : line.size() > kMaxLineBytes
                                    ? absl::StatusOr<json>(absl::DataLossError(absl::StrCat(
                                          "record longer than ", kMaxLineBytes, " bytes")))
                                    : DecodeJournalLine(line);
    if (!body.ok() && nl + 1 == content.size() && line.find('\0') != absl::string_view::npos) {
      out->dropped_torn = true;
      break;
    }
    if (!body.ok()) {
      return absl::DataLossError(absl::StrCat(
          where, body.status().message(),
          " (a complete line, so not a torn write: the file was damaged after it was written)",
          WhatToDo(absl::StatusCode::kDataLoss)));
    }
    const uint64_t record_seq = fast ? fast->seq : (*body)["seq"].get<uint64_t>();
    if (record_seq <= out->seq && record_seq > snapshot_seq) {
      return absl::DataLossError(absl::StrCat(where, "repeats sequence number ", record_seq,
                                              WhatToDo(absl::StatusCode::kDataLoss)));
    }
    if (record_seq > snapshot_seq + 1 && out->applied == 0) {
      // Compaction writes the snapshot before it empties the journal, so a journal that starts
      // later than the snapshot ends lost the records in between with the snapshot they went to.
      return absl::DataLossError(
          absl::StrCat(where, "sequence number ", record_seq, " but the snapshot \"",
                       absl::StripSuffix(journal, ".journal"), "\" ",
                       snapshot_seq == 0 ? "is missing or empty"
                                         : absl::StrCat("ends at sequence number ", snapshot_seq),
                       ": the records before it are lost", WhatToDo(absl::StatusCode::kDataLoss)));
    }
    if (record_seq > snapshot_seq) {
      out->seq = record_seq;
      absl::Status applied;
      if (fast) {
        (void)state->Remove(fast->allocation.owner);
        applied = state->Insert(std::move(fast->allocation), /*check_reservations=*/false);
      } else {
        applied = Apply(*body, state);
      }
      if (!applied.ok()) {
        return absl::DataLossError(
            absl::StrCat(where, applied.message(), WhatToDo(absl::StatusCode::kDataLoss)));
      }
      ++out->applied;
    }
    ++out->records;
    out->good_end = nl + 1;
    pos = nl + 1;
  }
  return absl::OkStatus();
}

namespace {

// "<crc32c in hex> <text>\n".
std::string JournalLineOf(absl::string_view text) {
  const uint32_t crc = Crc32c(text);
  std::string hex(8, '0');
  for (int i = 7, shift = 0; i >= 0; --i, shift += 4)
    hex[i] = "0123456789abcdef"[(crc >> shift) & 0xFu];
  return absl::StrCat(hex, " ", text, "\n");
}

// The text of {"put": AllocationToJson(a)} without its closing brace, the same bytes, printed
// member by member in the order a json object keeps them (sorted): the allocation's answer and CDI
// texts (most of a record) go in as they are, and neither the allocation (to blank those two) nor
// a tree of it is made, which was most of a record's cost. AllocationToJson's members: change
// both together (PutRecordIsTheBytesOfItsJsonValue compares them).
std::string PutRecordOpen(const Allocation& a) {
  std::string out = R"({"put":{"answer":)";
  out += a.answer.dump();
  out += R"(,"cdi":)";
  out += a.cdi.dump();
  out += R"(,"cpus":)";
  AppendJsonString(a.cpus.ToString(), &out);
  out += R"(,"driver":)";
  AppendJsonString(a.driver, &out);
  out += R"(,"gpus":[)";
  bool first = true;
  for (const std::string& gpu : a.gpus) {
    if (!first) out += ',';
    first = false;
    AppendJsonString(gpu, &out);
  }
  out += R"(],"kind":)";
  AppendJsonString(KindName(a.kind), &out);
  if (!a.mems.Empty()) {
    out += R"(,"mems":)";
    AppendJsonString(a.mems.ToString(), &out);
  }
  out += R"(,"name":)";
  AppendJsonString(a.claim_name, &out);
  out += R"(,"namespace":)";
  AppendJsonString(a.claim_namespace, &out);
  out += R"(,"owner":)";
  AppendJsonString(a.owner, &out);
  out += R"(,"phase":)";
  AppendJsonString(PhaseName(a.phase), &out);
  if (!a.reservation.empty()) {
    out += R"(,"reservation":)";
    AppendJsonString(a.reservation, &out);
  }
  out += '}';
  return out;
}

}  // namespace

std::string EncodeJournalLine(const json& body) { return JournalLineOf(CanonicalText(body)); }

absl::StatusOr<json> DecodeJournalLine(absl::string_view line) {
  if (line.size() < 10 || line[8] != ' ') return absl::DataLossError("malformed record");
  uint32_t crc = 0;
  for (int i = 0; i < 8; ++i) {
    const char c = line[i];
    int v = 0;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else {
      return absl::DataLossError("malformed record checksum");
    }
    crc = (crc << 4) | static_cast<uint32_t>(v);
  }
  const absl::string_view text = line.substr(9);
  if (Crc32c(text) != crc) return absl::DataLossError("record checksum mismatch");
  absl::StatusOr<json> body = files::ParseJsonBounded(text, kMaxDepth);
  if (!body.ok()) return absl::DataLossError(body.status().message());
  auto has = [&body](const char* key, json::value_t type) {
    const auto it = body->find(key);
    return it != body->end() && it->type() == type;
  };
  if (!body->is_object() || body->size() != 2 || !body->contains("seq") ||
      !(*body)["seq"].is_number_unsigned() ||
      !(has("put", json::value_t::object) || has("remove", json::value_t::string) ||
        has("putReservation", json::value_t::object) ||
        has("removeReservation", json::value_t::string))) {
    return absl::DataLossError(
        "record is not {\"seq\", \"put\"|\"remove\"|\"putReservation\"|\"removeReservation\"}");
  }
  return body;
}

StateStore::StateStore(std::string path, int fd, uint64_t seq, int64_t records, int64_t bytes)
    : path_(std::move(path)),
      fd_(fd),
      next_seq_(seq),
      written_seq_(seq),
      synced_seq_(seq),
      records_(records),
      bytes_(bytes) {}

StateStore::~StateStore() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<StateStore::Opened> StateStore::Open(const std::string& path,
                                                    const std::function<absl::Status()>& if_new) {
  const std::string journal = path + ".journal";
  const Checkpoint snapshot(path);
  if (absl::Status st = files::MakeDirectories(snapshot.dir(), 0700); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("state directory: ", st.message()));
  }
  uint64_t snapshot_seq = 0;
  absl::StatusOr<State> state = snapshot.Load(&snapshot_seq);
  if (!state.ok()) return state.status();

  struct stat snapshot_stat;
  const bool snapshot_found = ::lstat(path.c_str(), &snapshot_stat) == 0;

  Opened out;
  out.loaded = *std::move(state);
  // Mapped, and released before anything below truncates the file (a torn last record).
  absl::StatusOr<StateFileText> text = StateFileText::Map(journal, kMaxCheckpointBytes);
  const bool journal_found = text.ok();
  if (!journal_found && !absl::IsNotFound(text.status())) return text.status();
  if (!journal_found && snapshot_seq > 0) {
    // Open creates the journal and nothing ever removes it: whatever was recorded after the
    // snapshot went with it.
    return absl::DataLossError(absl::StrCat(
        "journal \"", journal, "\" is missing, but the snapshot \"", path,
        "\" says one existed (it covers records up to sequence number ", snapshot_seq,
        "), so the changes recorded after it are lost; restore the journal with the snapshot",
        WhatToDo(absl::StatusCode::kDataLoss)));
  }
  Replayed replayed;
  absl::Status replay = Replay(journal_found ? text->view() : absl::string_view(), journal,
                               snapshot_seq, &out.loaded, &replayed);
  if (journal_found) *text = StateFileText();  // unmaps the journal before it may be truncated
  if (!replay.ok()) return replay;
  out.replayed = replayed.applied;
  out.dropped_torn = replayed.dropped_torn;
  out.is_new = !snapshot_found && !journal_found;
  if (out.is_new && if_new) {
    if (absl::Status st = if_new(); !st.ok()) return st;
  }
  const uint64_t seq = replayed.seq;
  const int64_t records = replayed.records;
  const size_t good_end = replayed.good_end;

  absl::StatusOr<int> opened = files::OpenRegularFile(journal, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  if (out.dropped_torn) {
    if (::ftruncate(fd, static_cast<off_t>(good_end)) != 0 || ::fdatasync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "drop the torn last record of", journal);
    }
  }
  if (absl::Status st = files::SyncDirectory(snapshot.dir()); !st.ok()) {
    ::close(fd);
    return st;
  }
  out.store.reset(new StateStore(path, fd, seq, records, static_cast<int64_t>(good_end)));
  // Journal records carry no version: once this build has appended to a journal behind an older
  // snapshot (or none), an older topodra would load records it cannot read (a claim's device
  // metadata kept as its object since version 4) instead of refusing the state. Rewritten first,
  // the snapshot is this version's, which an older topodra refuses.
  if (!IsCurrentVersionSnapshot(path)) {
    if (!snapshot_found && records == 0) {
      // Nothing recorded, nothing an older topodra could misread: the snapshot waits for the
      // first record, so a node's first start syncs no file before its sockets.
      out.store->snapshot_pending_ = true;
    } else if (absl::Status st = out.store->Rewrite(out.loaded); !st.ok()) {
      return st;
    }
  }
  return out;
}

bool StateStore::IsCurrentVersionSnapshot(const std::string& path) {
  // Save's layout ends the file with the version ({"checksum":..,"payload":..,"version":N}); a
  // file of any other layout is rewritten, which is always allowed.
  const std::string tail = absl::StrCat(",\"version\":", kCheckpointVersion, "}\n");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  std::string got(tail.size(), '\0');
  const bool ok =
      ::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(tail.size()) &&
      ::pread(fd, got.data(), got.size(), st.st_size - static_cast<off_t>(tail.size())) ==
          static_cast<ssize_t>(tail.size());
  ::close(fd);
  return ok && got == tail;
}

absl::Status StateStore::Rewrite(const State& state) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t seq = next_seq_;
  // Every allocation, those still being prepared too: the journal that had them goes.
  if (absl::Status st = Checkpoint(path_).Save(state, seq, /*prepared_only=*/false); !st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("the upgrade's one-time rewrite of the snapshot as version ",
                                     kCheckpointVersion,
                                     " (needs free space about the size of the "
                                     "snapshot): ",
                                     st.message()));
  }
  return EmptyJournal(seq);
}

absl::Status StateStore::Append(const json& body_without_seq) {
  std::string open = CanonicalText(body_without_seq);
  open.pop_back();  // its closing brace
  return AppendOpen(std::move(open));
}

absl::Status StateStore::AppendOpen(std::string open) {
  std::unique_lock<std::mutex> lock(mu_);
  if (snapshot_pending_) {
    // The state is empty and so is the journal: the snapshot is of an empty state.
    if (absl::Status st = Checkpoint(path_).Save(State{}, next_seq_, /*prepared_only=*/false);
        !st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("the snapshot of version ", kCheckpointVersion,
                                       " written before the first record: ", st.message()));
    }
    snapshot_pending_ = false;
  }
  const uint64_t seq = ++next_seq_;
  absl::StrAppend(&open, R"(,"seq":)", seq, "}");
  const std::string line = JournalLineOf(open);
  if (absl::Status st = WriteAll(fd_, line); !st.ok()) {
    // Cut the partial line off, or every later record would follow a corrupt one.
    (void)::ftruncate(fd_, static_cast<off_t>(bytes_));
    --next_seq_;
    return absl::Status(st.code(), absl::StrCat("append to ", journal_path(), ": ", st.message()));
  }
  bytes_ += static_cast<int64_t>(line.size());
  ++records_;
  written_seq_ = seq;
  // Group commit: one caller syncs for everyone written so far; the others wait for it.
  while (synced_seq_ < seq) {
    if (syncing_) {
      synced_cv_.wait(lock);
      continue;
    }
    syncing_ = true;
    const uint64_t target = written_seq_;
    const int fd = fd_;
    lock.unlock();
    const int rc = ::fdatasync(fd);
    const int err = errno;
    lock.lock();
    syncing_ = false;
    synced_cv_.notify_all();
    if (rc != 0) return ErrnoStatus(err, "sync", journal_path());
    if (target > synced_seq_) synced_seq_ = target;
  }
  return absl::OkStatus();
}

absl::Status StateStore::Put(const Allocation& allocation) {
  return AppendOpen(PutRecordOpen(allocation));
}

absl::Status StateStore::Remove(const std::string& owner) {
  return Append(json{{"remove", owner}});
}

absl::Status StateStore::PutReservation(const Reservation& reservation) {
  return Append(json{{"putReservation", ReservationToJson(reservation)}});
}

absl::Status StateStore::RemoveReservation(const std::string& uid) {
  return Append(json{{"removeReservation", uid}});
}

namespace {

// Which file a path names right now (nullopt: none). A compaction replaces the snapshot by
// renaming a new file over it, so a different identity means it was replaced.
struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  struct timespec mtime = {};
  struct timespec ctime = {};
  bool operator==(const FileIdentity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec &&
           ctime.tv_nsec == o.ctime.tv_nsec;
  }
};

absl::StatusOr<std::optional<FileIdentity>> IdentityOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    return ErrnoStatus(errno, "stat", path);
  }
  return FileIdentity{st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
}

}  // namespace

absl::StatusOr<State> StateStore::Peek(const std::string& path) {
  const std::string journal = path + ".journal";
  const Checkpoint snapshot(path);
  // The daemon may compact while we read: a snapshot read before the compaction with a journal
  // read after it would miss every record in between. Read again when the snapshot changed.
  constexpr int kAttempts = 5;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    absl::StatusOr<std::optional<FileIdentity>> before = IdentityOf(path);
    if (!before.ok()) return before.status();
    uint64_t snapshot_seq = 0;
    absl::StatusOr<State> state = snapshot.Peek(&snapshot_seq);
    if (!state.ok()) return state.status();
    absl::StatusOr<std::string> text = files::ReadFileBounded(journal, kMaxCheckpointBytes);
    std::string content;
    if (text.ok()) {
      content = *std::move(text);
    } else if (!absl::IsNotFound(text.status())) {
      return text.status();
    }
    absl::StatusOr<std::optional<FileIdentity>> after = IdentityOf(path);
    if (!after.ok()) return after.status();
    if (*before != *after) continue;
    Replayed replayed;
    if (absl::Status st = Replay(content, journal, snapshot_seq, &*state, &replayed); !st.ok()) {
      return st;
    }
    return state;
  }
  return absl::UnavailableError(absl::StrCat("snapshot \"", path, "\" was replaced ", kAttempts,
                                             " times while it was read (the daemon is compacting "
                                             "its state); try again"));
}

bool StateStore::ShouldCompact(int state_size) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_ >= kCompactJournalBytes) return true;
  return records_ >= kMinCompactRecords && records_ > 2 * static_cast<int64_t>(state_size);
}

int64_t StateStore::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

absl::Status StateStore::EmptyJournal(uint64_t snapshot_seq) {
  if (::ftruncate(fd_, 0) != 0 || ::fdatasync(fd_) != 0) {
    return ErrnoStatus(errno, "empty journal", journal_path());
  }
  records_ = 0;
  bytes_ = 0;
  synced_seq_ = written_seq_ = snapshot_seq;
  return absl::OkStatus();
}

absl::Status StateStore::Compact(const State& state) {
  std::unique_lock<std::mutex> lock(mu_);
  while (syncing_) synced_cv_.wait(lock);
  const uint64_t seq = next_seq_;
  if (absl::Status st = Checkpoint(path_).Save(state, seq, /*prepared_only=*/true); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("compact: ", st.message()));
  }
  snapshot_pending_ = false;
  // The snapshot covers every record: the journal can go. A crash before this is harmless
  // (replay skips records up to seq).
  return EmptyJournal(seq);
}

}  // namespace topodra::state
