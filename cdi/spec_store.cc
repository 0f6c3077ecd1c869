#include "cdi/spec_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace topodra::cdi {
namespace {

// absl::ErrnoToStatus maps the code (ENOENT is NotFound, EACCES PermissionDenied) and appends
// the errno text without strerror's shared buffer.
absl::Status Errno(int err, absl::string_view op, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(op, " \"", path, "\""));
}

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
  // Closes now and reports the error, which for a written file can be the first sign that
  // the data did not reach the disk.
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// mkdir -p with mode 0755 for what it creates.
absl::Status MakeDirectories(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return Errno(errno, "create directory", prefix);
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Errno(errno, "stat", dir);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", dir, "\" is not a directory"));
  }
  return absl::OkStatus();
}

// A rename or unlink survives a crash only once the directory itself is on disk.
absl::Status SyncDirectory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Errno(errno, "open directory", dir);
  if (::fsync(fd.get()) != 0) return Errno(errno, "fsync directory", dir);
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view content, const std::string& path) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "write", path);
    }
    content.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Unique among the threads of this process (counter) and among processes (pid); O_EXCL catches
// a leftover of a crashed process that had the same pid.
std::string TempName(const std::string& file_name) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(".", file_name, ".", ::getpid(), "-", counter.fetch_add(1), ".tmp");
}

}  // namespace

absl::Status ValidateSpecFileName(absl::string_view file_name) {
  const std::string q = absl::StrCat("\"", file_name, "\"");
  if (file_name.size() > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid spec file name ", q, ": longer than 200 bytes"));
  }
  if (!absl::EndsWith(file_name, ".json") || file_name.size() == 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid spec file name ", q, ": want <name>.json"));
  }
  if (file_name.front() == '.' || file_name.find('/') != absl::string_view::npos ||
      file_name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid spec file name ", q, ": must be a file name, not hidden, without '/'"));
  }
  return absl::OkStatus();
}

SpecStore::SpecStore(std::string dir) : dir_(std::move(dir)) {
  // "/var/run/cdi/" and "/var/run/cdi" are the same store; keep paths in messages clean.
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string SpecStore::PathOf(absl::string_view file_name) const {
  return absl::StrCat(dir_, "/", file_name);
}

absl::StatusOr<Spec> SpecStore::Write(absl::string_view file_name, const Spec& spec) const {
  const std::string path = PathOf(file_name);
  if (absl::Status st = ValidateSpecFileName(file_name); !st.ok()) return st;
  Spec out = spec;
  out.cdi_version = MinimumVersion(spec);
  if (absl::Status st = Validate(out); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("CDI spec \"", path, "\": ", st.message()));
  }
  if (absl::Status st = WriteAtomically(std::string(file_name), ToJsonText(out)); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("write CDI spec \"", path, "\": ", st.message()));
  }
  return out;
}

absl::Status SpecStore::WriteAtomically(const std::string& file_name,
                                        absl::string_view content) const {
  if (absl::Status st = MakeDirectories(dir_); !st.ok()) return st;
  const std::string target = PathOf(file_name);
  std::string temp;
  int raw_fd = -1;
  for (int attempt = 0; attempt < 100 && raw_fd < 0; ++attempt) {
    temp = PathOf(TempName(file_name));
    raw_fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (raw_fd < 0 && errno != EEXIST) return Errno(errno, "create", temp);
  }
  if (raw_fd < 0) return Errno(EEXIST, "create", temp);
  Fd fd(raw_fd);
  // From here on the temporary file exists: every failure removes it.
  auto fail = [&temp](absl::Status st) {
    ::unlink(temp.c_str());
    return st;
  };
  // The runtime reads the spec whatever our umask is.
  if (::fchmod(fd.get(), 0644) != 0) return fail(Errno(errno, "chmod", temp));
  if (absl::Status st = WriteAll(fd.get(), content, temp); !st.ok()) return fail(st);
  if (::fsync(fd.get()) != 0) return fail(Errno(errno, "fsync", temp));
  if (fd.Close() != 0) return fail(Errno(errno, "close", temp));
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    return fail(Errno(errno, absl::StrCat("rename \"", temp, "\" to"), target));
  }
  return SyncDirectory(dir_);
}

absl::StatusOr<Spec> SpecStore::Read(absl::string_view file_name) const {
  const std::string path = PathOf(file_name);
  if (absl::Status st = ValidateSpecFileName(file_name); !st.ok()) return st;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Errno(errno, "open", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("\"", path, "\" is not a regular file"));
  }
  std::string text;
  char buffer[64 * 1024];
  // Read one byte past the limit so that FromJson reports an oversized file.
  while (text.size() <= kMaxSpecBytes) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "read", path);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  absl::StatusOr<Spec> spec = FromJson(text);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CDI spec \"", path, "\": ", spec.status().message()));
  }
  if (absl::Status valid = Validate(*spec); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("CDI spec \"", path, "\": ", valid.message()));
  }
  return spec;
}

absl::Status SpecStore::Remove(absl::string_view file_name) const {
  const std::string path = PathOf(file_name);
  if (absl::Status st = ValidateSpecFileName(file_name); !st.ok()) return st;
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Errno(errno, "remove", path);
  }
  return SyncDirectory(dir_);
}

absl::StatusOr<std::vector<std::string>> SpecStore::List() const {
  DIR* dir = ::opendir(dir_.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return Errno(errno, "open directory", dir_);
  }
  std::vector<std::string> names;
  int err = 0;
  while (true) {
    errno = 0;
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) {
      err = errno;
      break;
    }
    const absl::string_view name = entry->d_name;
    if (!absl::EndsWith(name, ".json") || !ValidateSpecFileName(name).ok()) continue;
    if (entry->d_type != DT_REG && entry->d_type != DT_UNKNOWN) continue;
    if (entry->d_type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode)) {
        continue;
      }
    }
    names.emplace_back(name);
  }
  ::closedir(dir);
  if (err != 0) return Errno(err, "read directory", dir_);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace topodra::cdi
