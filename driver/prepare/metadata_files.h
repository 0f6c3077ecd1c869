// The device metadata files of prepared claims on the host (device_metadata.h says what they
// hold and where): written before the kubelet is answered, removed on unprepare, brought in line
// with the allocation state at start. Like the claims' CDI specs, they are written without fsync
// at prepare (the journal holds their content) and fsynced when start restores them; a claim
// directory prepare makes gets its files created in place, any other write is atomic.
#pragma once

#include <sys/types.h>

#include <compare>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cdi/reconcile.h"
#include "cdi/spec_store.h"
#include "driver/prepare/device_metadata.h"

namespace topodra::prepare {

// The largest metadata file read back; a bigger one is rewritten.
inline constexpr std::size_t kMaxMetadataFileBytes = 1 << 20;

// How WriteMetadataFiles writes the host files. kInPlaceIfNewClaimDir is for prepare's first
// write of a claim's files only: unsynced, the host files of a claim whose directory is not there
// yet are created in place in a directory made for them (no reader can see them before their CDI
// spec is written, and a crash leaves a torn file no record names). Any other write (unprepare
// putting back what it removed) is kAtomic: its files are named by a durable record, and a crash
// mid-write must leave the old content or the new, never a torn file a container could mount.
enum class HostFileWrite { kAtomic, kInPlaceIfNewClaimDir };

// Each host file (0644; directories made 0755) and its CDI spec (its cdiVersion kept), each
// replaced atomically, or the host files in place as `how` allows; fsynced with `synced`.
// `cdi_texts`, when given, holds each file's CDI spec as SpecStore::Write would print it, already
// validated ("" for one to print here): written as it is. Stops at the first failure.
absl::Status WriteMetadataFiles(const cdi::SpecStore& cdi, const std::vector<MetadataFile>& files,
                                bool synced, const std::vector<std::string>* cdi_texts = nullptr,
                                HostFileWrite how = HostFileWrite::kAtomic);

// Checks every host file and CDI spec of `files` and writes again those missing or different:
// "" when all were right, else which were written and why.
absl::StatusOr<std::string> RestoreMetadataFiles(const cdi::SpecStore& cdi,
                                                 const std::vector<MetadataFile>& files);

// Removes a claim's metadata: `claim_dir` (MetadataClaimDir) with everything in it, and the CDI
// specs `cdi_files`. What is not there is fine, so unprepare can be repeated. `host_files`, when
// given, are the host files the claim was prepared with (all under `claim_dir`): they and their
// directories are removed one by one, and only a directory holding anything else is walked.
absl::Status RemoveMetadataFiles(const cdi::SpecStore& cdi, const std::string& claim_dir,
                                 const std::vector<std::string>& cdi_files,
                                 const std::vector<std::string>& host_files = {});

// The metadata CDI specs of `driver` for claim `uid` in the CDI directory, by name (a claim the
// state does not know may still have the files of a prepare that crashed).
std::vector<std::string> MetadataCdiFilesOfClaim(const cdi::SpecStore& cdi,
                                                 const std::string& driver, const std::string& uid);

// Whose a "<driver>_metadata_*.json" spec is. Its name carries no instance marker (the kubelet
// plugin library fixes it), so the host files it mounts tell: one that `ours` accepts (below this
// daemon's roots, or named by its records) makes it ours, else it is another kubelet's topodra's;
// a spec that cannot be read is left alone (kUnmarked).
cdi::CdiFileClass ClassifyMetadataSpec(const cdi::SpecStore& cdi, const std::string& file,
                                       const std::function<bool(const std::string&)>& ours);

// A directory as the kernel knows it: two spellings of one directory ("a/b", "a//b", a link to
// it) have the same.
struct DirIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  friend auto operator<=>(const DirIdentity&, const DirIdentity&) = default;
};
// The identity of the directory `path` names (following links); none when it is not one.
std::optional<DirIdentity> IdentityOf(const std::string& path);
struct DistinctDir {
  std::string path;
  DirIdentity id;
};
// The directories among `dirs` that exist, each once (under its first spelling): a walk of one
// directory under two spellings would take the files wanted under one for strays under the other.
std::vector<DistinctDir> DistinctDirs(const std::vector<std::string>& dirs);

// The host paths the mounts of the metadata CDI spec `file` name (none when it cannot be read).
std::vector<std::string> MountedHostPaths(const cdi::SpecStore& cdi, const std::string& file);

// At start: writes the wanted host files (absolute path -> content) that are missing or differ,
// fsynced, and removes below `root` every metadata.json not wanted, the temporary files of
// interrupted writes, and the directories that leaves empty. Anything else below `root` is left
// alone.
struct ReconciledMetadata {
  int written = 0;
  int removed = 0;
};
absl::StatusOr<ReconciledMetadata> ReconcileMetadataDir(
    const std::string& root, const std::map<std::string, std::string>& wanted);

// ReconcileMetadataDir in pieces, for a check that runs while claims are being prepared and
// unprepared. One wanted host file: written (fsynced) when missing or different; true if it was.
absl::StatusOr<bool> CheckMetadataHostFile(const std::string& path, const std::string& content);
// Runs `act`, which changes the claim directory `<root>/<dir_name>`, under whatever exclusion
// its claim needs, or skips it.
using MetadataDirGuard =
    std::function<void(const std::string& dir_name, const std::function<void()>& act)>;
// The removals of ReconcileMetadataDir, one claim directory at a time through `guard`. Returns
// how many files were removed.
absl::StatusOr<int> RemoveUnwantedMetadata(const std::string& root,
                                           const std::function<bool(const std::string&)>& wanted,
                                           const MetadataDirGuard& guard);

}  // namespace topodra::prepare
