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
#include "common/file_io.h"

namespace topodra::cdi {
namespace {

using files::ErrnoStatus;

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

absl::StatusOr<Spec> SpecStore::Write(absl::string_view file_name, const Spec& spec, bool synced,
                                      VersionPolicy version) const {
  const std::string path = PathOf(file_name);
  if (absl::Status st = ValidateSpecFileName(file_name); !st.ok()) return st;
  Spec out = spec;
  out.cdi_version = MinimumVersion(spec);
  if (version == VersionPolicy::kAtLeastGiven) {
    // KnownVersions is oldest first: the given one is usable when it comes at or after the minimum.
    const std::vector<std::string>& known = KnownVersions();
    const auto given = std::find(known.begin(), known.end(), spec.cdi_version);
    if (given != known.end() && given >= std::find(known.begin(), known.end(), out.cdi_version)) {
      out.cdi_version = spec.cdi_version;
    }
  }
  if (absl::Status st = Validate(out); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("CDI spec \"", path, "\": ", st.message()));
  }
  if (absl::Status st = WriteAtomically(std::string(file_name), ToJsonText(out), synced);
      !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("write CDI spec \"", path, "\": ", st.message()));
  }
  return out;
}

absl::Status SpecStore::WriteValidatedText(absl::string_view file_name, absl::string_view text,
                                           bool synced) const {
  if (absl::Status st = ValidateSpecFileName(file_name); !st.ok()) return st;
  if (absl::Status st = WriteAtomically(std::string(file_name), text, synced); !st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("write CDI spec \"", PathOf(file_name), "\": ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status SpecStore::WriteAtomically(const std::string& file_name, absl::string_view content,
                                        bool synced) const {
  // The runtime reads specs whatever our umask is; the directory is the usual 0755.
  return files::WriteFileAtomically(
      dir_, file_name, content, 0644, 0755,
      synced ? files::Durability::kSynced : files::Durability::kAtomicOnly);
}

absl::StatusOr<Spec> SpecStore::Read(absl::string_view file_name) const {
  const std::string path = PathOf(file_name);
  if (absl::Status st = ValidateSpecFileName(file_name); !st.ok()) return st;
  // One byte past the limit comes back, so FromJson reports an oversized file.
  absl::StatusOr<std::string> text = files::ReadFileBounded(path, kMaxSpecBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<Spec> spec = FromJson(*text);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CDI spec \"", path, "\": ", spec.status().message()));
  }
  if (absl::Status valid = Validate(*spec); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("CDI spec \"", path, "\": ", valid.message()));
  }
  return spec;
}

absl::Status SpecStore::Remove(absl::string_view file_name, bool synced) const {
  const std::string path = PathOf(file_name);
  if (absl::Status st = ValidateSpecFileName(file_name); !st.ok()) return st;
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, "remove", path);
  }
  return synced ? files::SyncDirectory(dir_) : absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SpecStore::List() const {
  absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(dir_);
  if (!entries.ok()) return entries.status();
  std::vector<std::string> names;
  for (const files::DirEntry& e : *entries) {
    if (!e.regular || !absl::EndsWith(e.name, ".json") || !ValidateSpecFileName(e.name).ok()) {
      continue;
    }
    names.push_back(e.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace topodra::cdi
