// Which host paths the daemon may trust. It runs as root and writes where container runtimes
// (the CDI specs, the pinning hook they execute as root) and the kubelet (its sockets) read: a
// directory of those that another user can write, or that sits in one another user can rename
// entries of, lets that user swap in what root then reads, runs or truncates. The verdict is a
// pure function of stat results so it is table-tested; the checks that stat sit beside it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace topodra::files {

// What stat says of one path.
struct PathStat {
  std::string path;
  mode_t mode = 0;  // st_mode: type and permission bits
  uid_t uid = 0;
};

enum class PathRole {
  // A directory the daemon writes, or a file it installs: the daemon's user owns it and nobody
  // else may write it.
  kOwnedDirectory,
  kOwnedFile,
  // A directory on the way to an owned one: owned by root or the daemon's user, and writable by
  // others only with the sticky bit (as /tmp), where they cannot rename what they do not own.
  kAncestor,
};

// Ok, or FailedPrecondition naming the path, its mode in octal and its owner, what is wrong and
// what to do. `what` names the owned path in messages ("state directory"); for an ancestor,
// `of` is the owned path it leads to.
absl::Status JudgePath(const PathStat& p, PathRole role, uid_t euid, const std::string& what,
                       const std::string& of = "");

// A directory the daemon writes: created with `mode` (exactly, whatever the umask) where
// missing, then judged with every ancestor on the path as given and on the resolved path.
struct OwnedDirectory {
  std::string what;  // "state directory", as in messages
  std::string path;
  mode_t mode = 0700;
  bool create = true;  // false: judged only when it exists
};
absl::Status PrepareOwnedDirectory(const OwnedDirectory& dir, uid_t euid);

// A file the daemon installs (the pinning hook), when it exists: a regular file, not a link,
// owned by the daemon's user and writable by nobody else.
absl::Status CheckOwnedFile(const std::string& what, const std::string& path, uid_t euid);

}  // namespace topodra::files
