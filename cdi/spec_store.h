// CDI spec files in one directory (e.g. /var/run/cdi), written so that a runtime scanning the
// directory at any moment sees either the old file or the new one, never part of one.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cdi/spec.h"

namespace topodra::cdi {

// A spec file name: one path component ending in ".json", not hidden, at most 200 bytes (the
// temporary name built from it must still fit in NAME_MAX).
absl::Status ValidateSpecFileName(absl::string_view file_name);

// Which cdiVersion SpecStore::Write puts in the file.
enum class VersionPolicy {
  kMinimum,       // MinimumVersion(spec), whatever the spec says
  kAtLeastGiven,  // the spec's own when it is known and not below the minimum (a format that
                  // names its version, e.g. Kubernetes' device-metadata specs, 0.5.0); else the
                  // minimum
};

// Thread-safe: every method may run concurrently with any other, in this process or another.
class SpecStore {
 public:
  explicit SpecStore(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string PathOf(absl::string_view file_name) const;

  // Sets cdiVersion as `version` says (by default MinimumVersion(spec)), validates, and replaces
  // dir/file_name atomically: a temporary file (hidden, ".tmp" suffix, so CDI scanners skip it) in
  // the same directory, written in full and fsynced, renamed over the target, then the directory
  // fsynced. Creates the directory (0755) if missing. A failure up to the rename leaves the
  // previous file as it was and no temporary file behind; only a failed fsync of the directory
  // after the rename is reported with the new file in place. Returns the spec as written. With
  // synced = false the fsyncs are skipped (atomic, not durable): for callers that keep the spec in
  // durable state of their own and rewrite lost files at start.
  absl::StatusOr<Spec> Write(absl::string_view file_name, const Spec& spec, bool synced = true,
                             VersionPolicy version = VersionPolicy::kMinimum) const;

  // Write for a spec already validated with its MinimumVersion and printed by ToJsonText (or
  // JsonTextOf): the same file, without validating and printing it again. Prepare writes one per
  // claim right after the planner did both.
  absl::Status WriteValidatedText(absl::string_view file_name, absl::string_view text,
                                  bool synced = true) const;

  // Parses and validates dir/file_name.
  absl::StatusOr<Spec> Read(absl::string_view file_name) const;

  // Removes dir/file_name; a file (or directory) that is not there is success, so that
  // unprepare can be repeated.
  // synced = false skips the directory fsync (see Write).
  absl::Status Remove(absl::string_view file_name, bool synced = true) const;

  // The "*.json" file names in the directory, sorted; none when the directory does not exist.
  absl::StatusOr<std::vector<std::string>> List() const;

 private:
  absl::Status WriteAtomically(const std::string& file_name, absl::string_view content,
                               bool synced) const;

  std::string dir_;
};

}  // namespace topodra::cdi
