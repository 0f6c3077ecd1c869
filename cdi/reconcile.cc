#include "cdi/reconcile.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/status.h"

namespace topodra::cdi {

using json = nlohmann::json;

namespace {

// What SpecStore::Write puts in a file for the spec whose cdi::ToJson prints as `spec_text`
// (cdi::ToJsonText), without making a Spec of it.
std::string FileTextOf(std::string_view spec_text) {
  std::string text = IndentCompactJson(spec_text);
  text += '\n';
  return text;
}

}  // namespace

std::string IndentCompactJson(std::string_view compact) {
  std::string out;
  out.reserve(compact.size() * 2);
  int depth = 0;
  auto newline = [&out](int d) {
    out += '\n';
    out.append(static_cast<size_t>(std::max(d, 0)) * 2, ' ');
  };
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    if (c == '"') {
      const size_t start = i;
      for (++i; i < compact.size() && compact[i] != '"'; ++i) {
        if (compact[i] == '\\') ++i;
      }
      out.append(compact.substr(start, std::min(i + 1, compact.size()) - start));
    } else if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      if (i + 1 < compact.size() && compact[i + 1] == close) {  // {} and [] stay on one line
        out += c;
        out += close;
        ++i;
        continue;
      }
      out += c;
      newline(++depth);
    } else if (c == '}' || c == ']') {
      newline(--depth);
      out += c;
    } else if (c == ',') {
      out += c;
      newline(depth);
    } else if (c == ':') {
      out += ": ";
    } else {
      out += c;
    }
  }
  return out;
}

absl::StatusOr<ReconciledCdi> ReconcileCdiFiles(
    const cdi::SpecStore& store, const std::map<std::string, json>& wanted,
    const std::function<CdiFileClass(const std::string&)>& classify, const std::string& label) {
  std::map<std::string, std::string> texts;
  for (const auto& [file, spec_json] : wanted) {
    texts[file] = spec_json.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return ReconcileCdiFileTexts(store, texts, classify, label);
}

absl::StatusOr<bool> CheckCdiFileText(const cdi::SpecStore& store, const std::string& file,
                                      const std::string& spec_text, const std::string& label) {
  // The name comes from the state: never a path outside the CDI directory, fast path or not.
  if (absl::Status st = cdi::ValidateSpecFileName(file); !st.ok()) {
    return absl::DataLossError(absl::StrCat("stored CDI spec of ", file, ": ", Message(st)));
  }
  // A file holding exactly the text Write makes of the stored spec holds that spec: no need to
  // parse either (at start, with thousands of claims, parsing was most of the cost).
  if (absl::StatusOr<std::string> bytes = files::ReadFileBounded(store.PathOf(file), kMaxSpecBytes);
      bytes.ok() && *bytes == FileTextOf(spec_text)) {
    return false;
  }
  absl::StatusOr<cdi::Spec> want = cdi::FromJson(spec_text);
  if (!want.ok()) {
    return absl::DataLossError(
        absl::StrCat("stored CDI spec of ", file, ": ", Message(want.status())));
  }
  absl::StatusOr<cdi::Spec> have = store.Read(file);
  if (have.ok() && *have == *want) return false;
  // A stored spec keeps its version (it is at least the minimum it was written with).
  if (absl::StatusOr<cdi::Spec> w =
          store.Write(file, *want, /*synced=*/true, VersionPolicy::kAtLeastGiven);
      !w.ok()) {
    return w.status();
  }
  spdlog::info("{}: restored CDI spec {}", label, store.PathOf(file));
  return true;
}

absl::StatusOr<int> RemoveUnwantedCdiFiles(
    const cdi::SpecStore& store, const std::function<bool(const std::string&)>& wanted,
    const std::function<CdiFileClass(const std::string&)>& classify, const std::string& label,
    const FileGuard& guard) {
  int removed = 0;
  absl::Status failed;
  // Temporary files of writes a crash interrupted (".<file>.<pid>-<n>.tmp"): hidden and ".tmp",
  // so runtimes skip them, but they would pile up. Only ours: another instance may be writing.
  // Guarded by the file they were writing: a prepare of its claim may be writing one now.
  absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(store.dir());
  if (!entries.ok()) return entries.status();
  for (const files::DirEntry& e : *entries) {
    if (!absl::StartsWith(e.name, ".") || !absl::EndsWith(e.name, ".tmp")) continue;
    const size_t dot = e.name.rfind('.', e.name.size() - 5);
    if (dot == std::string::npos || dot < 2) continue;
    const std::string of = e.name.substr(1, dot - 1);
    if (classify(of) != CdiFileClass::kOurs) continue;
    guard(of, [&] {
      if (::unlink(store.PathOf(e.name).c_str()) == 0) ++removed;
    });
  }
  std::vector<std::string> unmarked;
  for (const files::DirEntry& e : *entries) {
    const std::string& file = e.name;
    if (!e.regular || !absl::EndsWith(file, ".json") || !cdi::ValidateSpecFileName(file).ok() ||
        wanted(file)) {
      continue;
    }
    const CdiFileClass c = classify(file);
    if (c == CdiFileClass::kUnmarked) unmarked.push_back(file);
    if (c != CdiFileClass::kOurs) continue;
    guard(file, [&] {
      if (absl::Status st = store.Remove(file); !st.ok()) {
        if (failed.ok()) failed = st;
        return;
      }
      spdlog::info("{}: removed CDI spec {}: its owner holds nothing", label, store.PathOf(file));
      ++removed;
    });
  }
  if (!failed.ok()) return failed;
  if (!unmarked.empty()) {
    std::sort(unmarked.begin(), unmarked.end());
    constexpr size_t kNamed = 10;
    std::string named =
        absl::StrJoin(unmarked.begin(), unmarked.begin() + std::min(unmarked.size(), kNamed), ", ");
    if (unmarked.size() > kNamed)
      absl::StrAppend(&named, " and ", unmarked.size() - kNamed, " more");
    spdlog::warn(
        "{}: left {} CDI spec(s) in {} alone: written by a topodra without instance markers for "
        "nothing this state holds, so possibly another instance's ({}); remove them by hand if "
        "no other topodra shares that directory",
        label, unmarked.size(), store.dir(), named);
  }
  return removed;
}

absl::StatusOr<ReconciledCdi> ReconcileCdiFileTexts(
    const cdi::SpecStore& store, const std::map<std::string, std::string>& wanted,
    const std::function<CdiFileClass(const std::string&)>& classify, const std::string& label) {
  ReconciledCdi out;
  for (const auto& [file, spec_text] : wanted) {
    absl::StatusOr<bool> written = CheckCdiFileText(store, file, spec_text, label);
    if (!written.ok()) return written.status();
    if (*written) ++out.written;
  }
  absl::StatusOr<int> removed = RemoveUnwantedCdiFiles(
      store, [&](const std::string& file) { return wanted.contains(file); }, classify, label,
      [](const std::string&, const std::function<void()>& act) { act(); });
  if (!removed.ok()) return removed.status();
  out.removed = *removed;
  return out;
}

absl::Status CheckNoCdiLeftovers(const cdi::SpecStore& store,
                                 const std::function<bool(const std::string&)>& is_trace,
                                 const std::string& state_dir) {
  absl::StatusOr<std::vector<std::string>> on_disk = store.List();
  if (!on_disk.ok()) return on_disk.status();
  std::vector<std::string> left;
  for (const std::string& file : *on_disk) {
    if (is_trace(file)) left.push_back(file);
  }
  if (left.empty()) return absl::OkStatus();
  constexpr size_t kNamed = 10;
  std::string named =
      absl::StrJoin(left.begin(), left.begin() + std::min(left.size(), kNamed), ", ");
  if (left.size() > kNamed) absl::StrAppend(&named, " and ", left.size() - kNamed, " more");
  return absl::FailedPreconditionError(absl::StrCat(
      "the allocation state in ", state_dir, " is gone (no checkpoint.json, no journal) but ",
      left.size(), " CDI spec file(s) this daemon wrote are still in ", store.dir(), ": ", named,
      ". Their claims may still be running; starting empty would remove these files and hand "
      "their CPUs and GPUs out again. Restore checkpoint.json and checkpoint.json.journal in ",
      state_dir,
      " from a backup and restart; or, once no pod on this node uses these claims (drain the "
      "node), move these files out of ",
      store.dir(), " and restart"));
}

}  // namespace topodra::cdi
