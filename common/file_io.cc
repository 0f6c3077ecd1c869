#include "common/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace topodra::files {
namespace {

// Closes on every path out of a function, so an early error return cannot leak the descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  void Release() { fd_ = -1; }
  // A close error on a written file can be the first sign the data did not reach the disk.
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Unique among threads (counter) and processes (pid); O_EXCL catches a crashed process's
// leftover with the same pid.
std::string TempName(const std::string& file_name) {
  static std::atomic<uint64_t> counter{0};
  // Read once (getpid is a system call): a child of a fork shares the number and the counter
  // with its parent, and the name is created with O_EXCL, so a clash only takes the next one.
  static const pid_t pid = ::getpid();
  return absl::StrCat(".", file_name, ".", pid, "-", counter.fetch_add(1), ".tmp");
}

}  // namespace

absl::Status WriteAll(int fd, absl::string_view content, const std::string& path) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write", path);
    }
    // Not expected of a regular file, but a loop that could never end must not be one.
    if (n == 0) return ErrnoStatus(EIO, "write (nothing written)", path);
    content.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status ErrnoStatus(int err, absl::string_view op, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(op, " \"", path, "\""));
}

absl::Status MakeDirectories(const std::string& dir, mode_t dir_mode) {
  // The umask may have taken bits off a directory just made; a mode wider than asked is never
  // the result. Through a descriptor that refuses links: whoever can write the parent could have
  // swapped the new directory for a link, and a chmod would change the mode of what it points at.
  auto made = [dir_mode](const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoStatus(errno, "open the directory just created", path);
    if (::fchmod(fd.get(), dir_mode) != 0) return ErrnoStatus(errno, "chmod", path);
    return absl::OkStatus();
  };
  // From the directory itself up to the first one that is there, then back down making each:
  // a directory that exists costs one mkdir, not one per component (every prepare writes three
  // files into directories 3 to 8 components deep).
  std::vector<size_t> missing;  // lengths of the prefixes to make, deepest first
  for (size_t end = dir.size(); end > 0;) {
    const std::string prefix = dir.substr(0, end);
    if (::mkdir(prefix.c_str(), dir_mode) == 0) {
      if (absl::Status st = made(prefix); !st.ok()) return st;
      break;
    }
    if (errno == EEXIST) break;  // a file in its place fails below
    if (errno != ENOENT) return ErrnoStatus(errno, "create directory", prefix);
    missing.push_back(end);
    const size_t slash = prefix.rfind('/');
    end = slash == std::string::npos ? 0 : slash;
  }
  for (auto end = missing.rbegin(); end != missing.rend(); ++end) {
    const std::string prefix = dir.substr(0, *end);
    if (::mkdir(prefix.c_str(), dir_mode) == 0) {
      if (absl::Status st = made(prefix); !st.ok()) return st;
    } else if (errno != EEXIST) {
      return ErrnoStatus(errno, "create directory", prefix);
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", dir);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", dir, "\" is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(errno, "open directory", dir);
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync directory", dir);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& dir, const std::string& file_name,
                                 absl::string_view content, mode_t file_mode, mode_t dir_mode,
                                 Durability durability) {
  const bool sync = durability == Durability::kSynced;
  const std::string target = absl::StrCat(dir, "/", file_name);
  std::string temp;
  int raw_fd = -1;
  // The directory is made when the file cannot be created for want of it, not checked before
  // every write: most writes go to a directory that is there (a mkdir saved per write).
  bool made_dirs = false;
  for (int attempt = 0; attempt < 100 && raw_fd < 0; ++attempt) {
    temp = absl::StrCat(dir, "/", TempName(file_name));
    raw_fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file_mode);
    if (raw_fd < 0 && (errno == ENOENT || errno == ENOTDIR) && !made_dirs) {
      made_dirs = true;
      if (absl::Status st = MakeDirectories(dir, dir_mode); !st.ok()) return st;
      --attempt;
      continue;
    }
    if (raw_fd < 0 && errno != EEXIST) return ErrnoStatus(errno, "create", temp);
  }
  if (raw_fd < 0) return ErrnoStatus(EEXIST, "create", temp);
  Fd fd(raw_fd);
  // From here on the temporary file exists: every failure removes it.
  auto fail = [&temp](absl::Status st) {
    ::unlink(temp.c_str());
    return st;
  };
  // The mode is what the caller asked for, whatever the umask.
  if (::fchmod(fd.get(), file_mode) != 0) return fail(ErrnoStatus(errno, "chmod", temp));
  if (absl::Status st = WriteAll(fd.get(), content, temp); !st.ok()) return fail(st);
  if (sync && ::fsync(fd.get()) != 0) return fail(ErrnoStatus(errno, "fsync", temp));
  if (fd.Close() != 0) return fail(ErrnoStatus(errno, "close", temp));
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    return fail(ErrnoStatus(errno, absl::StrCat("rename \"", temp, "\" to"), target));
  }
  return sync ? SyncDirectory(dir) : absl::OkStatus();
}

bool IsTempNameFor(absl::string_view name, absl::string_view file_name) {
  return name.size() > file_name.size() + 6 && absl::StartsWith(name, ".") &&
         absl::StartsWith(name.substr(1), file_name) && name[file_name.size() + 1] == '.' &&
         absl::EndsWith(name, ".tmp");
}

absl::StatusOr<std::vector<DirEntry>> ListDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return std::vector<DirEntry>{};
    return ErrnoStatus(errno, "open directory", dir);
  }
  std::vector<DirEntry> out;
  int err = 0;
  while (true) {
    errno = 0;
    const dirent* entry = ::readdir(d);
    if (entry == nullptr) {
      err = errno;
      break;
    }
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    bool regular = entry->d_type == DT_REG;
    if (entry->d_type == DT_UNKNOWN) {
      struct stat st;
      regular = ::fstatat(::dirfd(d), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(st.st_mode);
    }
    out.push_back({name, regular});
  }
  ::closedir(d);
  if (err != 0) return ErrnoStatus(err, "read directory", dir);
  return out;
}

std::string FileTypeName(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "regular file";
    case S_IFDIR:
      return "directory";
    case S_IFLNK:
      return "symbolic link";
    case S_IFIFO:
      return "FIFO";
    case S_IFSOCK:
      return "socket";
    case S_IFCHR:
      return "character device";
    case S_IFBLK:
      return "block device";
    default:
      return "file of unknown type";
  }
}

absl::StatusOr<int> OpenRegularFile(const std::string& path, int flags, mode_t mode, Links links) {
  const int nofollow = links == Links::kRefuse ? O_NOFOLLOW : 0;
  const int raw = ::open(path.c_str(), flags | nofollow | O_NONBLOCK | O_CLOEXEC, mode);
  auto not_regular = [&path](mode_t type) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", path, "\" is a ", FileTypeName(type),
                     type == S_IFLNK ? ": topodra does not open its own files through links"
                                     : ", not a regular file"));
  };
  if (raw < 0) {
    const int err = errno;
    // ELOOP: the link O_NOFOLLOW refused; ENXIO: a FIFO without a reader; EISDIR: a directory.
    struct stat st;
    if ((err == ELOOP || err == ENXIO || err == EISDIR) && ::lstat(path.c_str(), &st) == 0 &&
        !S_ISREG(st.st_mode)) {
      return not_regular(st.st_mode & S_IFMT);
    }
    return ErrnoStatus(err, "open", path);
  }
  Fd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) return not_regular(st.st_mode & S_IFMT);
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "fcntl", path);
  }
  const int out = fd.get();
  fd.Release();
  return out;
}

absl::StatusOr<std::string> ReadFileBounded(const std::string& path, size_t max_bytes,
                                            Links links) {
  absl::StatusOr<int> raw = OpenRegularFile(path, O_RDONLY, 0, links);
  if (!raw.ok()) return raw.status();
  Fd fd(*raw);
  std::string text;
  // Sized once: the state files are tens of MB with thousands of claims, and growing the string
  // by doubling copied them again and again at every start.
  struct stat st;
  if (::fstat(fd.get(), &st) == 0 && st.st_size > 0) {
    text.reserve(std::min(static_cast<size_t>(st.st_size), max_bytes) + 1);
  }
  char buffer[64 * 1024];
  while (text.size() <= max_bytes) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read", path);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace topodra::files
