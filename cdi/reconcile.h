// The start-up reconciliation of a CDI spec directory against what the allocation state says
// should be there, and the check that a new state does not face files a lost one left behind.
// Which files are whose is the caller's to say (file naming belongs to the drivers).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cdi/spec_store.h"
#include "nlohmann/json.hpp"

namespace topodra::cdi {

// Whose a file in the CDI directory is, for the start-up reconciliation.
enum class CdiFileClass {
  kOurs,      // this instance's (its marker, or no marker when it has none)
  kUnmarked,  // one of our drivers' names without a marker: a topodra before instance markers
  kForeign,   // another driver's, or another instance's (its marker)
};

// At start: writes each wanted CDI spec (file name -> spec JSON, keeping its cdiVersion when that
// is at least the minimum) that is missing or differs, and
// removes the files and the temporary files of interrupted writes that `classify` says are
// kOurs and are not wanted. Unmarked files that are not wanted are left alone and logged (they
// may be another instance's); wanted ones, written by an older release, are adopted. `label`
// names the owner in logs.
struct ReconciledCdi {
  int written = 0;
  int removed = 0;
};
absl::StatusOr<ReconciledCdi> ReconcileCdiFiles(
    const cdi::SpecStore& store, const std::map<std::string, nlohmann::json>& wanted,
    const std::function<CdiFileClass(const std::string&)>& classify, const std::string& label);
// The same with each wanted spec as its compact JSON text (nlohmann's dump(), as the allocation
// state keeps it): a file is compared with the text SpecStore::Write makes of it without a JSON
// tree of either, and only a missing or different one is parsed.
absl::StatusOr<ReconciledCdi> ReconcileCdiFileTexts(
    const cdi::SpecStore& store, const std::map<std::string, std::string>& wanted,
    const std::function<CdiFileClass(const std::string&)>& classify, const std::string& label);

// ReconcileCdiFileTexts in pieces, for a check that runs while the files' owners are being
// prepared and unprepared (the DRA drivers check their files after registering):
//
// One wanted spec: written (synced) when missing or different. True when it was written.
absl::StatusOr<bool> CheckCdiFileText(const cdi::SpecStore& store, const std::string& file,
                                      const std::string& spec_text, const std::string& label);
// Runs `act`, which changes `file` (a spec file's name; for a temporary file, the name of the
// file it was writing), under whatever exclusion the file's owner needs, or skips it when the
// file is no longer the check's to change.
using FileGuard = std::function<void(const std::string& file, const std::function<void()>& act)>;
// The removals of ReconcileCdiFileTexts: temporary files of interrupted writes and spec files
// that `classify` says are kOurs and `wanted` does not want, each through `guard`. Returns how
// many were removed.
absl::StatusOr<int> RemoveUnwantedCdiFiles(
    const cdi::SpecStore& store, const std::function<bool(const std::string&)>& wanted,
    const std::function<CdiFileClass(const std::string&)>& classify, const std::string& label,
    const FileGuard& guard);

// nlohmann's dump(2) of the value whose compact dump() is `compact`, made from the text alone.
// For other text (not what dump() prints) the result is unspecified, never out of bounds.
std::string IndentCompactJson(std::string_view compact);

// At start, when the state is new (StateStore::Opened::is_new, checked by Open's if_new): OK when
// the CDI directory holds no file `is_trace` accepts (this instance's marker, or an unmarked
// name of one of its drivers or resources); else FailedPrecondition listing them and saying how
// to recover. Files of prepared claims outliving their state mean the state was lost, not
// that the node is new: starting empty would remove them and hand their CPUs and GPUs out again.
absl::Status CheckNoCdiLeftovers(const cdi::SpecStore& store,
                                 const std::function<bool(const std::string&)>& is_trace,
                                 const std::string& state_dir);

}  // namespace topodra::cdi
