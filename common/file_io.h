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

// write(2) of all of `content` to `fd`, retried on EINTR and short writes; `path` names the file
// in the error.
absl::Status WriteAll(int fd, absl::string_view content, const std::string& path);

// mkdir -p; what it creates gets exactly dir_mode, whatever the umask.
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

// "FIFO", "directory", "symbolic link"...: the type bits of an st_mode, for messages.
std::string FileTypeName(mode_t mode);

// Whether an open goes through a symbolic link in the last component of the path.
// kRefuse for every file the daemon owns (lock, journal, checkpoint, CDI specs, hook records,
// the installed hook): another user able to plant a link there would make root read, truncate
// or overwrite the file it points to. kFollow for host files it only reads (cgroupfs, the
// kubelet's files, its own binaries).
enum class Links { kRefuse, kFollow };

// open(2) of a regular file, never blocking: O_CLOEXEC, O_NONBLOCK while opening (cleared
// after) so a FIFO or device put in the file's place fails at once instead of hanging, and
// O_NOFOLLOW unless `links` says otherwise. A link, a FIFO or anything not a regular file is
// FailedPrecondition naming the path and its type; other errors as ErrnoStatus (ENOENT is
// NotFound). The caller closes the descriptor.
absl::StatusOr<int> OpenRegularFile(const std::string& path, int flags, mode_t mode = 0,
                                    Links links = Links::kRefuse);

// The content of a regular file, at most max_bytes + 1 bytes so the caller can report an
// oversized file. A missing file is NotFound; a link (unless followed) or a non-regular file is
// FailedPrecondition, found without blocking (see OpenRegularFile).
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes,
                                            Links links = Links::kRefuse);

}  // namespace topodra::files
