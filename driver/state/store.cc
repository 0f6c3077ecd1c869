#include "driver/state/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/json_parse.h"

namespace topodra::state {
namespace {

using json = nlohmann::json;
using files::ErrnoStatus;

// A record holds one allocation: its answer and CDI spec are bounded by the API's limits (32
// results), far below this.
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

std::string EncodeJournalLine(const json& body) {
  const std::string text = CanonicalText(body);
  const uint32_t crc = Crc32c(text);
  std::string hex(8, '0');
  for (int i = 7, shift = 0; i >= 0; --i, shift += 4)
    hex[i] = "0123456789abcdef"[(crc >> shift) & 0xFu];
  return absl::StrCat(hex, " ", text, "\n");
}

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
  if (!body->is_object() || body->size() != 2 || !body->contains("seq") ||
      !(*body)["seq"].is_number_unsigned() ||
      !(body->contains("put") || (body->contains("remove") && (*body)["remove"].is_string()))) {
    return absl::DataLossError("record is not {\"seq\", \"put\"|\"remove\"}");
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

absl::StatusOr<StateStore::Opened> StateStore::Open(const std::string& path) {
  const std::string journal = path + ".journal";
  const std::string todo_journal = absl::StrCat("journal \"", journal, "\": ");
  const Checkpoint snapshot(path);
  if (absl::Status st = files::MakeDirectories(snapshot.dir(), 0700); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("state directory: ", st.message()));
  }
  uint64_t snapshot_seq = 0;
  absl::StatusOr<State> state = snapshot.Load(&snapshot_seq);
  if (!state.ok()) return state.status();

  Opened out;
  out.loaded = *std::move(state);
  uint64_t seq = snapshot_seq;
  absl::StatusOr<std::string> text = files::ReadFileBounded(journal, kMaxCheckpointBytes);
  std::string content;
  if (text.ok()) {
    content = *std::move(text);
  } else if (!absl::IsNotFound(text.status())) {
    return text.status();
  }
  if (content.size() > kMaxCheckpointBytes) {
    return absl::DataLossError(absl::StrCat(todo_journal, "larger than ", kMaxCheckpointBytes,
                                            " bytes", WhatToDo(absl::StatusCode::kDataLoss)));
  }
  size_t good_end = 0;  // offset after the last intact record
  int64_t records = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    const size_t nl = content.find('\n', pos);
    const bool last = nl == std::string::npos || nl + 1 == content.size();
    const absl::string_view line = absl::string_view(content).substr(
        pos, (nl == std::string::npos ? content.size() : nl) - pos);
    absl::StatusOr<json> body =
        nl == std::string::npos || line.size() > kMaxLineBytes
            ? absl::StatusOr<json>(absl::DataLossError("record without end of line"))
            : DecodeJournalLine(line);
    if (!body.ok()) {
      // The append that was cut short by a crash: never acknowledged, so dropping it is right.
      if (last) {
        out.dropped_torn = true;
        break;
      }
      return absl::DataLossError(absl::StrCat(todo_journal, "record ", records + 1, " at byte ",
                                              pos, ": ", body.status().message(),
                                              WhatToDo(absl::StatusCode::kDataLoss)));
    }
    const uint64_t record_seq = (*body)["seq"].get<uint64_t>();
    if (record_seq <= seq && record_seq > snapshot_seq) {
      return absl::DataLossError(absl::StrCat(todo_journal, "record ", records + 1,
                                              " repeats sequence number ", record_seq,
                                              WhatToDo(absl::StatusCode::kDataLoss)));
    }
    if (record_seq > snapshot_seq) {
      seq = record_seq;
      absl::Status applied;
      if (body->contains("put")) {
        absl::StatusOr<Allocation> a = AllocationFromJson((*body)["put"]);
        if (!a.ok()) {
          applied = a.status();
        } else {
          (void)out.loaded.Remove(a->owner);
          applied = out.loaded.Add(*std::move(a));
        }
      } else {
        applied = out.loaded.Remove((*body)["remove"].get<std::string>());
      }
      if (!applied.ok()) {
        return absl::DataLossError(absl::StrCat(todo_journal, "record ", records + 1, ": ",
                                                applied.message(),
                                                WhatToDo(absl::StatusCode::kDataLoss)));
      }
      ++out.replayed;
    }
    ++records;
    good_end = nl + 1;
    pos = nl + 1;
  }

  const int fd = ::open(journal.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, "open journal", journal);
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
  return out;
}

absl::Status StateStore::Append(const json& body_without_seq) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t seq = ++next_seq_;
  json body = body_without_seq;
  body["seq"] = seq;
  const std::string line = EncodeJournalLine(body);
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
  return Append(json{{"put", AllocationToJson(allocation)}});
}

absl::Status StateStore::Remove(const std::string& owner) {
  return Append(json{{"remove", owner}});
}

bool StateStore::ShouldCompact(int state_size) const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_ >= kMinCompactRecords && records_ > 2 * static_cast<int64_t>(state_size);
}

int64_t StateStore::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

absl::Status StateStore::Compact(const State& state) {
  std::unique_lock<std::mutex> lock(mu_);
  while (syncing_) synced_cv_.wait(lock);
  const uint64_t seq = next_seq_;
  if (absl::Status st = Checkpoint(path_).Save(state, seq, /*prepared_only=*/true); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("compact: ", st.message()));
  }
  // The snapshot covers every record: the journal can go. A crash before this is harmless
  // (replay skips records up to seq).
  if (::ftruncate(fd_, 0) != 0 || ::fdatasync(fd_) != 0) {
    return ErrnoStatus(errno, "empty journal", journal_path());
  }
  records_ = 0;
  bytes_ = 0;
  synced_seq_ = written_seq_ = seq;
  return absl::OkStatus();
}

}  // namespace topodra::state
