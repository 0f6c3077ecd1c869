#include "common/host_paths.h"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"

namespace topodra::files {
namespace {

std::string Describe(const PathStat& p) {
  return absl::StrFormat("\"%s\" (mode %04o, owner uid %d)", p.path, p.mode & 07777, p.uid);
}

constexpr mode_t kWritableByOthers = S_IWGRP | S_IWOTH;

// "/a/b/c" -> "/", "/a", "/a/b", "/a/b/c"; "a/b" -> "a", "a/b".
std::vector<std::string> Prefixes(const std::string& path) {
  std::vector<std::string> out;
  if (path.starts_with("/")) out.push_back("/");
  for (size_t pos = 0; pos < path.size();) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    if (end > pos) out.push_back(path.substr(0, end));
    pos = end + 1;
  }
  return out;
}

absl::StatusOr<PathStat> Stat(const std::string& path, bool follow) {
  struct stat st;
  if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) {
    return ErrnoStatus(errno, "stat", path);
  }
  return PathStat{path, st.st_mode, st.st_uid};
}

}  // namespace

absl::Status JudgePath(const PathStat& p, PathRole role, uid_t euid, const std::string& what,
                       const std::string& of) {
  const std::string desc = Describe(p);
  if (role == PathRole::kAncestor) {
    const std::string on_the_way = absl::StrCat(", on the path to ", what, " \"", of, "\",");
    if (p.uid != 0 && p.uid != euid) {
      return absl::FailedPreconditionError(absl::StrCat(
          desc, on_the_way, " is owned by uid ", p.uid, ", not by root or topodra's uid ", euid,
          ": that user could put another directory in its place; chown it to root"));
    }
    if ((p.mode & kWritableByOthers) != 0 && (p.mode & S_ISVTX) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          desc, on_the_way,
          " is writable by group or others without the sticky bit: any of them could rename \"", of,
          "\" away and put their own in its place; chmod go-w it"));
    }
    return absl::OkStatus();
  }
  const std::string named = absl::StrCat(what, " ", desc);
  if (role == PathRole::kOwnedFile && S_ISLNK(p.mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        named, " is a symbolic link: topodra does not write through links; remove it"));
  }
  if (role == PathRole::kOwnedFile ? !S_ISREG(p.mode) : !S_ISDIR(p.mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(named, " is a ", FileTypeName(p.mode), ", not a ",
                     role == PathRole::kOwnedFile ? "regular file" : "directory"));
  }
  if (p.uid != euid) {
    return absl::FailedPreconditionError(absl::StrCat(
        named, " is owned by uid ", p.uid, ", not by topodra's uid ", euid,
        ": that user could change what topodra writes there and the runtimes and the kubelet "
        "read; chown it to uid ",
        euid));
  }
  if ((p.mode & kWritableByOthers) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        named,
        " is writable by group or others: any of them could replace what topodra writes there "
        "and the runtimes and the kubelet read; chmod go-w it"));
  }
  return absl::OkStatus();
}

absl::Status PrepareOwnedDirectory(const OwnedDirectory& dir, uid_t euid) {
  if (dir.create) {
    if (absl::Status st = MakeDirectories(dir.path, dir.mode); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat(dir.what, ": ", st.message()));
    }
  } else if (struct stat st; ::stat(dir.path.c_str(), &st) != 0 && errno == ENOENT) {
    return absl::OkStatus();
  }
  // The path as given and as resolved: a link on the way is judged by where it leads, and the
  // directory holding the link by the prefix before it.
  std::vector<std::string> chain = Prefixes(dir.path);
  char resolved[PATH_MAX];
  if (::realpath(dir.path.c_str(), resolved) == nullptr) {
    return ErrnoStatus(errno, absl::StrCat(dir.what, ": resolve"), dir.path);
  }
  std::vector<std::string> real = Prefixes(resolved);
  chain.insert(chain.end() - 1, real.begin(), real.end() - 1);
  std::set<std::string> seen;
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    if (!seen.insert(chain[i]).second) continue;
    absl::StatusOr<PathStat> p = Stat(chain[i], /*follow=*/true);
    if (!p.ok()) return p.status();
    if (absl::Status st = JudgePath(*p, PathRole::kAncestor, euid, dir.what, dir.path); !st.ok()) {
      return st;
    }
  }
  absl::StatusOr<PathStat> p = Stat(dir.path, /*follow=*/true);
  if (!p.ok()) return p.status();
  return JudgePath(*p, PathRole::kOwnedDirectory, euid, dir.what);
}

absl::Status CheckOwnedFile(const std::string& what, const std::string& path, uid_t euid) {
  absl::StatusOr<PathStat> p = Stat(path, /*follow=*/false);
  if (!p.ok()) return absl::IsNotFound(p.status()) ? absl::OkStatus() : p.status();
  return JudgePath(*p, PathRole::kOwnedFile, euid, what);
}

}  // namespace topodra::files
