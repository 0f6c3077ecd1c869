#include "driver/prepare/metadata_files.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/status.h"

namespace topodra::prepare {
namespace {

namespace fs = std::filesystem;

struct Split {
  std::string dir;
  std::string name;
};
Split SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

absl::Status WriteHostFile(const MetadataFile& f, bool synced) {
  const Split p = SplitPath(f.host_path);
  absl::Status st = files::WriteFileAtomically(
      p.dir, p.name, f.content, 0644, 0755,
      synced ? files::Durability::kSynced : files::Durability::kAtomicOnly);
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat("write device metadata: ", st.message()));
}

// "" when the host file holds `content`, else why not.
std::string HostFileProblem(const MetadataFile& f) {
  absl::StatusOr<std::string> have = files::ReadFileBounded(f.host_path, kMaxMetadataFileBytes);
  if (have.ok()) return *have == f.content ? "" : "it differed";
  if (absl::IsNotFound(have.status())) return "it was missing";
  return absl::StrCat("it could not be read: ", Message(have.status()));
}

std::error_code Removed(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);  // does not follow symbolic links
  return ec;
}

// A directory opened for the *at calls, never through a link in the last component.
class DirFd {
 public:
  DirFd(int parent, const std::string& name)
      : fd_(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) {}
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
  ~DirFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// The claim's directory as prepare made it: "<claim_dir>/<request>/<file>" for each host file,
// nothing else. Removes those files, their directories and the claim's: seven system calls for
// one request where remove_all's walk takes about fifteen. False, having removed what it could,
// when anything else is found (a file left by hand, a torn write's temporary file, a link where a
// directory should be) or a name is not of that shape: the caller then removes the whole tree.
// Everything goes through descriptors opened without following a link: a path through a link in
// the claim directory's place would reach the link's target, outside the metadata root.
bool RemovedOneByOne(const std::string& claim_dir, const std::vector<std::string>& host_files) {
  const DirFd claim(AT_FDCWD, claim_dir);
  if (claim.get() < 0) return errno == ENOENT;
  std::vector<std::string> requests;
  for (const std::string& path : host_files) {
    const Split p = SplitPath(path);
    const Split request = SplitPath(p.dir);
    if (request.dir != claim_dir || request.name.empty() || request.name == "." ||
        request.name == ".." || p.name.empty() || p.name == "." || p.name == "..") {
      return false;
    }
    const DirFd dir(claim.get(), request.name);
    if (dir.get() < 0) {
      if (errno == ENOENT) continue;
      return false;
    }
    if (::unlinkat(dir.get(), p.name.c_str(), 0) != 0 && errno != ENOENT) return false;
    if (std::find(requests.begin(), requests.end(), request.name) == requests.end()) {
      requests.push_back(request.name);
    }
  }
  for (const std::string& name : requests) {
    if (::unlinkat(claim.get(), name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) return false;
  }
  // rmdir does not follow a link in the last component: a link put in the claim directory's
  // place since it was opened fails here (ENOTDIR) and goes to remove_all, which removes the link.
  return ::rmdir(claim_dir.c_str()) == 0 || errno == ENOENT;
}

// The mode asked for, whatever the umask (the socket server narrows it for a moment while it
// binds, and a file or directory made meanwhile would lose bits).
absl::Status ExactMode(int fd, mode_t mode, const std::string& path) {
  if (::fchmod(fd, mode) == 0) return absl::OkStatus();
  return files::ErrnoStatus(errno, "chmod", path);
}

// The host files of a claim whose directory is not there yet, written in place: the claim
// directory made here (Make), each request directory in it and the file created with O_EXCL, all
// through descriptors that refuse links. No temporary file and rename are needed, as no reader
// can see a half-written file: the directory is new, no CDI spec mounts the file before it is
// written (WriteMetadataFiles writes the spec after), and the claim is in flight, so no other
// call and no file check touches it meanwhile. A crash mid-write leaves a torn file that no
// durable record names (the journal record comes after), which the start-up file check removes,
// as it removes files of an unrecorded claim written the atomic way. On ext4 that saves the
// rename, the temporary name's directory entry, a failing create and mkdir and a stat per claim.
// Only for prepare's first write of a claim's files: a restore (unprepare putting back what it
// removed) writes files a durable record already names, so they stay atomic (the old content or
// the new, never a torn one).
class FreshClaimDir {
 public:
  explicit FreshClaimDir(std::string path) : path_(std::move(path)) {}
  FreshClaimDir(const FreshClaimDir&) = delete;
  FreshClaimDir& operator=(const FreshClaimDir&) = delete;
  ~FreshClaimDir() {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& path() const { return path_; }

  // Makes the claim directory. False when it was there (or its parent was not): nothing made, and
  // the caller writes atomically. An error for any other failure.
  absl::StatusOr<bool> Make() {
    if (::mkdir(path_.c_str(), 0755) != 0) {
      if (errno == EEXIST || errno == ENOENT) return false;
      return files::ErrnoStatus(errno, "create directory", path_);
    }
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0) return files::ErrnoStatus(errno, "open the directory just created", path_);
    if (absl::Status st = ExactMode(fd_, 0755, path_); !st.ok()) return st;
    return true;
  }

  // <claim dir>/<request>/<name>, the request directory made here.
  absl::Status Write(const std::string& request, const std::string& name,
                     absl::string_view content) const {
    const std::string dir = absl::StrCat(path_, "/", request);
    if (::mkdirat(fd_, request.c_str(), 0755) != 0) {
      return files::ErrnoStatus(errno, "create directory", dir);
    }
    const DirFd req(fd_, request);
    if (req.get() < 0) return files::ErrnoStatus(errno, "open the directory just created", dir);
    if (absl::Status st = ExactMode(req.get(), 0755, dir); !st.ok()) return st;
    const std::string path = absl::StrCat(dir, "/", name);
    const int fd = ::openat(req.get(), name.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return files::ErrnoStatus(errno, "create", path);
    absl::Status st = ExactMode(fd, 0644, path);
    if (st.ok()) st = files::WriteAll(fd, content, path);
    // A close error on a written file can be the first sign the data did not reach the disk.
    if (::close(fd) != 0 && st.ok()) st = files::ErrnoStatus(errno, "close", path);
    if (!st.ok()) ::unlinkat(req.get(), name.c_str(), 0);
    return st;
  }

 private:
  const std::string path_;
  int fd_ = -1;
};

// Whether `f`'s host file is "<claim_dir>/<request>/<name>" with plain names (as planned), and
// those names.
bool InClaimDir(const MetadataFile& f, const std::string& claim_dir, std::string* request,
                std::string* name) {
  const Split p = SplitPath(f.host_path);
  const Split r = SplitPath(p.dir);
  auto plain = [](const std::string& n) { return !n.empty() && n != "." && n != ".."; };
  if (r.dir != claim_dir || !plain(r.name) || !plain(p.name)) return false;
  *request = r.name;
  *name = p.name;
  return true;
}

}  // namespace

absl::Status WriteMetadataFiles(const cdi::SpecStore& cdi, const std::vector<MetadataFile>& files,
                                bool synced, const std::vector<std::string>* cdi_texts,
                                HostFileWrite how) {
  // Only prepare's first write, unsynced, into a claim directory that is not there yet goes in
  // place (FreshClaimDir); restores, synced writes and any other case the atomic way.
  std::optional<FreshClaimDir> fresh;
  bool fresh_made = false;
  if (how == HostFileWrite::kInPlaceIfNewClaimDir && !synced && !files.empty()) {
    fresh.emplace(SplitPath(SplitPath(files.front().host_path).dir).dir);
    std::string request, name;
    const bool all_in = std::all_of(files.begin(), files.end(), [&](const MetadataFile& f) {
      return InClaimDir(f, fresh->path(), &request, &name);
    });
    if (all_in) {
      absl::StatusOr<bool> made = fresh->Make();
      if (!made.ok()) {
        return absl::Status(made.status().code(),
                            absl::StrCat("write device metadata: ", made.status().message()));
      }
      fresh_made = *made;
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const MetadataFile& f = files[i];
    // The host file first: a CDI spec must never mount a file that is not there.
    std::string request, name;
    if (fresh_made && InClaimDir(f, fresh->path(), &request, &name)) {
      if (absl::Status st = fresh->Write(request, name, f.content); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat("write device metadata: ", st.message()));
      }
    } else if (absl::Status st = WriteHostFile(f, synced); !st.ok()) {
      return st;
    }
    if (cdi_texts != nullptr && i < cdi_texts->size() && !(*cdi_texts)[i].empty()) {
      if (absl::Status st = cdi.WriteValidatedText(f.cdi_file, (*cdi_texts)[i], synced); !st.ok()) {
        return st;
      }
      continue;
    }
    absl::StatusOr<cdi::Spec> w =
        cdi.Write(f.cdi_file, f.cdi_spec, synced, cdi::VersionPolicy::kAtLeastGiven);
    if (!w.ok()) return w.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RestoreMetadataFiles(const cdi::SpecStore& cdi,
                                                 const std::vector<MetadataFile>& files) {
  std::vector<std::string> done;
  for (const MetadataFile& f : files) {
    if (std::string why = HostFileProblem(f); !why.empty()) {
      if (absl::Status st = WriteHostFile(f, /*synced=*/false); !st.ok()) return st;
      done.push_back(absl::StrCat(f.host_path, " (", why, ")"));
    }
    absl::StatusOr<cdi::Spec> have = cdi.Read(f.cdi_file);
    if (have.ok() && *have == f.cdi_spec) continue;
    absl::StatusOr<cdi::Spec> w =
        cdi.Write(f.cdi_file, f.cdi_spec, /*synced=*/false, cdi::VersionPolicy::kAtLeastGiven);
    if (!w.ok()) return w.status();
    done.push_back(absl::StrCat(cdi.PathOf(f.cdi_file), absl::IsNotFound(have.status())
                                                            ? " (it was missing)"
                                                            : " (it differed)"));
  }
  return absl::StrJoin(done, ", ");
}

absl::Status RemoveMetadataFiles(const cdi::SpecStore& cdi, const std::string& claim_dir,
                                 const std::vector<std::string>& cdi_files,
                                 const std::vector<std::string>& host_files) {
  // The CDI specs first: none may mount a file that is gone.
  for (const std::string& file : cdi_files) {
    if (absl::Status st = cdi.Remove(file, /*synced=*/false); !st.ok()) return st;
  }
  if (!host_files.empty() && RemovedOneByOne(claim_dir, host_files)) return absl::OkStatus();
  if (std::error_code ec = Removed(claim_dir); ec) {
    return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                        absl::StrCat("remove device metadata \"", claim_dir, "\": ", ec.message()));
  }
  return absl::OkStatus();
}

std::vector<std::string> MetadataCdiFilesOfClaim(const cdi::SpecStore& cdi,
                                                 const std::string& driver,
                                                 const std::string& uid) {
  std::vector<std::string> out;
  absl::StatusOr<std::vector<std::string>> all = cdi.List();
  if (!all.ok()) return out;
  const std::string prefix = absl::StrCat(driver, "_metadata_", uid, "_");
  for (const std::string& f : *all) {
    if (absl::StartsWith(f, prefix)) out.push_back(f);
  }
  return out;
}

cdi::CdiFileClass ClassifyMetadataSpec(const cdi::SpecStore& cdi, const std::string& file,
                                       const std::function<bool(const std::string&)>& ours) {
  absl::StatusOr<cdi::Spec> spec = cdi.Read(file);
  if (!spec.ok()) return cdi::CdiFileClass::kUnmarked;
  for (const cdi::Device& d : spec->devices) {
    for (const cdi::Mount& m : d.container_edits.mounts) {
      if (ours(m.host_path)) return cdi::CdiFileClass::kOurs;
    }
  }
  return cdi::CdiFileClass::kForeign;
}

std::optional<DirIdentity> IdentityOf(const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  return DirIdentity{st.st_dev, st.st_ino};
}

std::vector<DistinctDir> DistinctDirs(const std::vector<std::string>& dirs) {
  std::vector<DistinctDir> out;
  for (const std::string& dir : dirs) {
    const std::optional<DirIdentity> id = IdentityOf(dir);
    if (!id) continue;
    if (std::none_of(out.begin(), out.end(), [&](const DistinctDir& d) { return d.id == *id; })) {
      out.push_back({dir, *id});
    }
  }
  return out;
}

std::vector<std::string> MountedHostPaths(const cdi::SpecStore& cdi, const std::string& file) {
  std::vector<std::string> out;
  absl::StatusOr<cdi::Spec> spec = cdi.Read(file);
  if (!spec.ok()) return out;
  for (const cdi::Device& d : spec->devices) {
    for (const cdi::Mount& m : d.container_edits.mounts) out.push_back(m.host_path);
  }
  return out;
}

absl::StatusOr<bool> CheckMetadataHostFile(const std::string& path, const std::string& content) {
  MetadataFile f;
  f.host_path = path;
  f.content = content;
  if (HostFileProblem(f).empty()) return false;
  if (absl::Status st = WriteHostFile(f, /*synced=*/true); !st.ok()) return st;
  // The directories the write may have made must be on disk too.
  const std::string request_dir = SplitPath(path).dir;
  const std::string claim_dir = SplitPath(request_dir).dir;
  for (const std::string& d : {claim_dir, SplitPath(claim_dir).dir}) {
    if (absl::Status st = files::SyncDirectory(d); !st.ok()) return st;
  }
  spdlog::info("restored device metadata {}", path);
  return true;
}

absl::StatusOr<int> RemoveUnwantedMetadata(const std::string& root,
                                           const std::function<bool(const std::string&)>& wanted,
                                           const MetadataDirGuard& guard) {
  int removed = 0;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(root, ec))) return removed;
  // <root>/<ns>_<name>/<request>/metadata.json
  // Iterated with increment(ec): a directory that fails to read mid-way is an error value, not an
  // exception thrown out of the start-up.
  // A directory is removed once nothing is left in it; one that keeps a file is not even tried
  // (with thousands of prepared claims, that was thousands of failing rmdir calls at every start).
  for (fs::directory_iterator claim(root, ec), end; !ec && claim != end; claim.increment(ec)) {
    if (std::error_code e; !claim->is_directory(e) || claim->is_symlink(e)) continue;
    guard(claim->path().filename().string(), [&] {
      bool claim_keeps = false;
      std::error_code ec2;
      for (fs::directory_iterator request(claim->path(), ec2), none; !ec2 && request != none;
           request.increment(ec2)) {
        if (std::error_code e; !request->is_directory(e) || request->is_symlink(e)) {
          claim_keeps = true;
          continue;
        }
        bool request_keeps = false;
        std::error_code ec3;
        for (fs::directory_iterator file(request->path(), ec3); !ec3 && file != none;
             file.increment(ec3)) {
          const std::string name = file->path().filename().string();
          const std::string path = file->path().string();
          const bool ours =
              name == kMetadataFileName || files::IsTempNameFor(name, kMetadataFileName);
          if (!ours || wanted(path)) {
            request_keeps = true;
            continue;
          }
          if (::unlink(path.c_str()) == 0) {
            spdlog::info("removed device metadata {}: its claim is not prepared", path);
            ++removed;
          } else {
            request_keeps = true;
          }
        }
        // rmdir fails, as it should, if anything is left in it after all.
        if (request_keeps || ec3 || ::rmdir(request->path().c_str()) != 0) claim_keeps = true;
      }
      if (!claim_keeps && !ec2) ::rmdir(claim->path().c_str());
    });
  }
  if (ec) {
    return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                        absl::StrCat("list device metadata \"", root, "\": ", ec.message()));
  }
  return removed;
}

absl::StatusOr<ReconciledMetadata> ReconcileMetadataDir(
    const std::string& root, const std::map<std::string, std::string>& wanted) {
  ReconciledMetadata out;
  for (const auto& [path, content] : wanted) {
    absl::StatusOr<bool> written = CheckMetadataHostFile(path, content);
    if (!written.ok()) return written.status();
    if (*written) ++out.written;
  }
  absl::StatusOr<int> removed = RemoveUnwantedMetadata(
      root, [&](const std::string& path) { return wanted.contains(path); },
      [](const std::string&, const std::function<void()>& act) { act(); });
  if (!removed.ok()) return removed.status();
  out.removed = *removed;
  return out;
}

}  // namespace topodra::prepare
