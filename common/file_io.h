// Crash-safe file I/O shared by the CDI spec store and the state checkpoint: a file is replaced
// atomically (readers and crashes see the old or the new content, never a mix) and reads are
// bounded. Knows nothing of Kubernetes or of the rest of topodra.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace topodra::files {

// absl::ErrnoToStatus maps the code (ENOENT is NotFound, EACCES PermissionDenied) and appends
// the errno text without strerror's shared buffer: `<op> "<path>": <text>`.
absl::Status ErrnoStatus(int err, absl::string_view op, const std::string& path);

// mkdir -p; what it creates gets dir_mode.
absl::Status MakeDirectories(const std::string& dir, mode_t dir_mode);

// A rename or unlink survives a crash only once the directory itself is on disk.
absl::Status SyncDirectory(const std::string& dir);

// Writes dir/file_name: a temporary ".<file_name>.<pid>-<n>.tmp" created with O_EXCL, the whole
// content, fsync, close, rename over the target, fsync of the directory. The temporary file is
// removed on any failure before the rename; the directory is created if missing.
// kAtomicOnly skips both fsyncs: readers still never see a partial file, but after a power loss
// the file may be the old one or empty. For files that can be rebuilt from durable state.
enum class Durability { kSynced, kAtomicOnly };
absl::Status WriteFileAtomically(const std::string& dir, const std::string& file_name,
                                 absl::string_view content, mode_t file_mode, mode_t dir_mode,
                                 Durability durability = Durability::kSynced);

// True for the temporary names WriteFileAtomically uses for file_name (leftovers of a crash).
bool IsTempNameFor(absl::string_view name, absl::string_view file_name);

// The names in `dir` (not "." and ".."), and whether each is a regular file (symlinks are not
// followed). A directory that does not exist has no entries.
struct DirEntry {
  std::string name;
  bool regular = false;
};
absl::StatusOr<std::vector<DirEntry>> ListDirectory(const std::string& dir);

// The content of a regular file, at most max_bytes + 1 bytes so the caller can report an
// oversized file. A missing file is NotFound.
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes);

}  // namespace topodra::files
