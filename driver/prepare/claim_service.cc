#include "driver/prepare/claim_service.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/status.h"
#include "driver/claims/allocation_result.h"
#include "driver/kube/rest_client.h"
#include "driver/prepare/identifiers.h"
#include "driver/prepare/metadata_files.h"
#include "driver/state/canonical_json.h"

namespace topodra::prepare {
namespace {

using json = nlohmann::json;

std::string Ref(const ClaimRef& ref) { return absl::StrCat(ref.ns, "/", ref.name); }

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Checks the CDI file a prepared claim's answer names ({"file", "spec"} as the planner stored
// it; anything else: the claim has none) and writes it again when it is missing or differs.
// Returns "" when it was right, else why it was written.
absl::StatusOr<std::string> RestoreCdiFile(const cdi::SpecStore& store, const json& cdi) {
  if (!cdi.is_object()) return std::string();
  const auto file = cdi.find("file");
  const auto spec = cdi.find("spec");
  if (file == cdi.end() || !file->is_string() || spec == cdi.end()) return std::string();
  const std::string name = file->get<std::string>();
  absl::StatusOr<cdi::Spec> want = cdi::FromJson(spec->dump());
  if (!want.ok()) {
    return absl::DataLossError(
        absl::StrCat("stored CDI spec of ", name, ": ", Message(want.status())));
  }
  absl::StatusOr<cdi::Spec> have = store.Read(name);
  if (have.ok() && *have == *want) return std::string();
  std::string why = "it differed";
  if (absl::IsNotFound(have.status())) {
    why = "it was missing";
  } else if (!have.ok()) {
    why = absl::StrCat("it could not be read: ", Message(have.status()));
  }
  // Not synced, as at prepare: the journal holds the content and start restores it.
  if (absl::StatusOr<cdi::Spec> w = store.Write(name, *want, /*synced=*/false); !w.ok()) {
    return w.status();
  }
  return why;
}

// The device metadata files a stored "cdi" JSON names (none when it has no "metadata").
absl::StatusOr<std::vector<MetadataFile>> StoredMetadata(const json& cdi) {
  if (!cdi.is_object() || !cdi.contains("metadata")) return std::vector<MetadataFile>{};
  return MetadataFilesFromJson(cdi["metadata"]);
}

// For the start-up: the metadata CDI specs a stored "cdi" JSON names, as stored (ReconcileCdiFiles
// parses one only when its file differs), and their host files' contents, checked as
// MetadataFilesFromJson checks them but for the spec. Parsing every spec of thousands of claims
// was a large part of the start.
absl::Status AddStoredMetadata(const json& cdi, std::map<std::string, std::string>* specs,
                               std::map<std::string, std::string>* host_files) {
  if (!cdi.is_object() || !cdi.contains("metadata")) return absl::OkStatus();
  const json& list = cdi["metadata"];
  auto bad = [](const std::string& what) {
    return absl::DataLossError(absl::StrCat("stored device metadata: ", what));
  };
  if (!list.is_array()) return bad("not a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    const std::string at = absl::StrCat("[", i, "]");
    if (!e.is_object()) return bad(at + " is not an object");
    for (const char* key : {"request", "hostPath", "cdiFile", "cdiId"}) {
      const auto it = e.find(key);
      if (it == e.end() || !it->is_string()) {
        return bad(absl::StrCat(at, ".", key, " is not a string"));
      }
    }
    const auto spec = e.find("cdiSpec");
    if (spec == e.end()) return bad(at + ".cdiSpec is missing");
    const std::string& host_path = e["hostPath"].get_ref<const std::string&>();
    const std::string& cdi_file = e["cdiFile"].get_ref<const std::string&>();
    if (!absl::StartsWith(host_path, "/") || cdi_file.empty()) {
      return bad(at + ": hostPath must be absolute and cdiFile set");
    }
    absl::StatusOr<std::string> content = StoredMetadataContent(e);
    if (!content.ok()) return bad(absl::StrCat(at, ".", content.status().message()));
    (*specs)[cdi_file] = spec->dump(-1, ' ', false, json::error_handler_t::replace);
    (*host_files)[host_path] = *std::move(content);
  }
  return absl::OkStatus();
}

// The start-up's AddStoredMetadata and more, from the stored "cdi" text without a JSON tree of it:
// the state keeps it in canonical form, so its parts are found by scanning (parsing 10,000 of
// them was a third of a start's instructions). kParse: not canonical, or not the shape the
// planner stores; the caller then parses it and decides as before.
enum class StoredCdi { kAdded, kParse };
StoredCdi AddStoredCdiText(absl::string_view text, std::map<std::string, std::string>* specs,
                           std::map<std::string, std::string>* host_files) {
  constexpr int kMaxDepth = 32;
  if (state::canonical::ScanCanonical(text, kMaxDepth) != text.size()) return StoredCdi::kParse;
  state::canonical::Members members;
  if (!state::canonical::ObjectMembers(text, &members)) return StoredCdi::kParse;
  absl::string_view file, spec, metadata;
  for (const auto& [key, value] : members) {
    if (key == "file" && !state::canonical::PlainString(value, &file)) return StoredCdi::kParse;
    if (key == "spec") spec = value;
    if (key == "metadata") metadata = value;
  }
  if (file.empty() || spec.empty()) return StoredCdi::kParse;
  std::vector<std::pair<std::string, std::string>> more_specs, more_files;
  more_specs.emplace_back(std::string(file), std::string(spec));
  std::vector<absl::string_view> entries;
  if (!metadata.empty() && !state::canonical::ArrayElements(metadata, &entries)) {
    return StoredCdi::kParse;
  }
  for (absl::string_view entry : entries) {
    if (!state::canonical::ObjectMembers(entry, &members)) return StoredCdi::kParse;
    absl::string_view host_path, cdi_file, cdi_spec, content, document;
    int strings = 0;
    for (const auto& [key, value] : members) {
      const bool is_string = value.front() == '"';
      if (key == "cdiSpec") cdi_spec = value;
      if (key == "request" || key == "cdiId") strings += is_string ? 1 : 0;
      if (key == "content") content = value;
      if (key == "document") document = value;
      if (key == "hostPath" && state::canonical::PlainString(value, &host_path)) ++strings;
      if (key == "cdiFile" && state::canonical::PlainString(value, &cdi_file)) ++strings;
    }
    if (strings != 4 || cdi_spec.empty() || !absl::StartsWith(host_path, "/") || cdi_file.empty() ||
        content.empty() == document.empty()) {
      return StoredCdi::kParse;
    }
    // A record of state version 4 keeps the file's v1beta1 object (its text is printed from it),
    // an older one the text itself.
    std::string text;
    if (!content.empty()) {
      if (content.front() != '"' || !state::canonical::UnescapedString(content, &text)) {
        return StoredCdi::kParse;
      }
    } else {
      const json doc = json::parse(document, nullptr, /*allow_exceptions=*/false);
      std::optional<std::string> printed = MetadataContentOf(doc);
      if (!printed) return StoredCdi::kParse;
      text = *std::move(printed);
    }
    more_specs.emplace_back(std::string(cdi_file), std::string(cdi_spec));
    more_files.emplace_back(std::string(host_path), std::move(text));
  }
  for (auto& [name, text_of] : more_specs) (*specs)[name] = std::move(text_of);
  for (auto& [path, content] : more_files) (*host_files)[path] = std::move(content);
  return StoredCdi::kAdded;
}

std::vector<std::string> CdiFilesOf(const std::vector<MetadataFile>& files) {
  std::vector<std::string> out;
  for (const MetadataFile& f : files) out.push_back(f.cdi_file);
  return out;
}

std::vector<std::string> HostFilesOf(const std::vector<MetadataFile>& files) {
  std::vector<std::string> out;
  for (const MetadataFile& f : files) out.push_back(f.host_path);
  return out;
}

}  // namespace

absl::StatusOr<json> ApiClaimSource::GetClaim(const std::string& ns, const std::string& name,
                                              const FetchLimits& limits) {
  const absl::Time deadline = absl::Now() + limits.timeout;
  std::string version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    version = version_;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string path =
        absl::StrCat("/apis/resource.k8s.io/", version, "/namespaces/", kube::UrlEncode(ns),
                     "/resourceclaims/", kube::UrlEncode(name));
    kube::RequestLimits request;
    // At least 1 ms: 0 would mean the client's own timeout.
    request.timeout =
        std::max(std::chrono::milliseconds(1), absl::ToChronoMilliseconds(deadline - absl::Now()));
    request.cancelled = limits.cancelled;
    request.caller_gone = limits.caller_gone;
    absl::StatusOr<kube::Response> got = client_->GetWithin(path, request);
    if (got.ok()) return std::move(got->body);
    // A 404 for the group version itself (not a Status about the claim): try the other one.
    const bool claim_not_found =
        absl::IsNotFound(got.status()) &&
        std::string(got.status().message()).find("resourceclaims") != std::string::npos &&
        std::string(got.status().message()).find("not found") != std::string::npos;
    if (!absl::IsNotFound(got.status()) || claim_not_found || attempt == 1) return got.status();
    version = version == "v1" ? "v1beta2" : "v1";
    std::lock_guard<std::mutex> lock(mu_);
    version_ = version;
  }
  return absl::InternalError("unreachable");
}

ClaimService::ClaimService(DriverSetup setup, topology::Topology topo, state::Ledger* ledger,
                           const cdi::SpecStore* cdi, ClaimSource* source)
    : driver_(setup.driver),
      ledger_(ledger),
      cdi_(cdi),
      source_(source),
      fetchers_(kMaxFetcherThreads),
      view_(std::make_shared<const View>(std::move(setup), std::move(topo))) {}

std::shared_ptr<const ClaimService::View> ClaimService::view() const {
  absl::MutexLock lock(&view_mu_);
  return view_;
}

void ClaimService::Update(DriverSetup setup, topology::Topology topo) {
  {
    absl::MutexLock lock(&view_mu_);
    view_ = std::make_shared<const View>(std::move(setup), std::move(topo));
  }
  ledger_->changes().Notify();
}

std::vector<std::pair<std::string, std::string>> ClaimService::Devices() const {
  const std::shared_ptr<const View> v = view();
  std::vector<std::pair<std::string, std::string>> out;
  if (v->setup.kind == DriverKind::kCpu) {
    for (const auto& [name, device] : v->setup.cpu_pool.devices) {
      out.emplace_back(v->setup.cpu_pool.name, name);
    }
  } else {
    for (const auto& [name, gpu] : v->setup.gpus) out.emplace_back(v->setup.gpu_pool, name);
  }
  return out;
}

ClaimService::~ClaimService() { StopFileCheck(); }

namespace {

// The gate key of a file of this driver's claims (CdiFileName, MetadataCdiFileName): the uid it
// names; any other file is its own key.
std::string KeyOfFile(const std::string& driver, const std::string& file) {
  for (const std::string& prefix : {driver + "-claim_", driver + "_metadata_"}) {
    if (!absl::StartsWith(file, prefix)) continue;
    const std::string rest = file.substr(prefix.size());
    const size_t end = std::min(rest.find('_'), rest.find(".json"));
    if (end != std::string::npos && end > 0) return absl::StrCat("uid:", rest.substr(0, end));
  }
  return absl::StrCat("file:", file);
}

// The roots start walks for files of claims not prepared: today's and the kubelet plugin
// directory's (where runs without --device-metadata-dir wrote). Not a root only a record names: it
// may be another daemon's by now.
std::vector<std::string> MetadataRoots(const DriverSetup& setup) {
  std::vector<std::string> out;
  if (!setup.metadata_root.empty()) out.push_back(setup.metadata_root);
  for (const std::string& root : setup.metadata_former_roots) {
    if (!root.empty() && root != setup.metadata_root) out.push_back(root);
  }
  return out;
}

// "<root>/<ns>_<name>" of a host file "<root>/<ns>_<name>/<request>/metadata.json" of `driver`;
// "" for a file of another shape or claim.
std::string ClaimDirOf(const std::string& host_path, const std::string& driver,
                       const std::string& ns, const std::string& name) {
  const std::string root = MetadataRootOf(host_path, driver);
  if (root.empty()) return "";
  const std::string dir = MetadataClaimDir(root, ns, name);
  return absl::StartsWith(host_path, dir + "/") ? dir : "";
}

// The metadata of a claim the state does not know (a crashed prepare's): its CDI specs `specs`,
// and the claim directories they mount from, wherever the root was then. Today's directory of
// <ns>_<name> only when no spec names one: it may hold another prepared claim of that name (a
// new uid), which a spec of this uid mounting another root says nothing about.
void RemoveUnrecordedMetadata(const cdi::SpecStore& cdi, const std::vector<std::string>& specs,
                              const DriverSetup& setup, const std::string& ns,
                              const std::string& name) {
  std::set<std::string> dirs;
  bool mounts = false;
  for (const std::string& spec : specs) {
    for (const std::string& path : MountedHostPaths(cdi, spec)) {
      mounts = true;
      if (std::string dir = ClaimDirOf(path, setup.driver, ns, name); !dir.empty()) {
        dirs.insert(std::move(dir));
      }
    }
  }
  if (!mounts && !setup.metadata_root.empty()) {
    dirs.insert(MetadataClaimDir(setup.metadata_root, ns, name));
  }
  if (dirs.empty()) {
    for (const std::string& spec : specs) (void)cdi.Remove(spec, /*synced=*/false);
    return;
  }
  // The specs go with the first directory: RemoveMetadataFiles removes them before any file.
  bool first = true;
  for (const std::string& dir : dirs) {
    (void)RemoveMetadataFiles(cdi, dir, first ? specs : std::vector<std::string>{});
    first = false;
  }
}

// Host files told apart by their root's identity and their path below it, not by spelling.
class HostFilePlaces {
 public:
  using Place = std::pair<DirIdentity, std::string>;
  explicit HostFilePlaces(std::string driver) : driver_(std::move(driver)) {}
  // None for a path not below a metadata root that exists.
  std::optional<Place> Of(const std::string& path) {
    const std::string root = MetadataRootOf(path, driver_);
    if (root.empty()) return std::nullopt;
    auto it = ids_.find(root);
    if (it == ids_.end()) it = ids_.emplace(root, IdentityOf(root)).first;
    if (!it->second) return std::nullopt;
    return Place{*it->second, path.substr(root.size())};
  }
  std::set<Place> AllOf(const std::set<std::string>& paths) {
    std::set<Place> out;
    for (const std::string& p : paths) {
      if (std::optional<Place> place = Of(p)) out.insert(*std::move(place));
    }
    return out;
  }

 private:
  std::string driver_;
  std::map<std::string, std::optional<DirIdentity>> ids_;  // root -> its identity (a stat each)
};

std::string DirKey(const std::string& ns, const std::string& name) {
  return absl::StrCat("dir:", ns, "_", name);
}

// The service whose file check runs on this thread: a stop asked from that thread (its `done`,
// a test's hook) cannot join it.
thread_local const ClaimService* checking_on_this_thread = nullptr;

}  // namespace

void ClaimService::Guarded(const std::vector<std::string>& keys, int add,
                           const std::function<int(int first, int any)>& fn) {
  std::unique_lock<std::mutex> lock(gate_mu_);
  gate_cv_.wait(lock, [&] {
    for (const std::string& k : keys) {
      if (auto it = gate_keys_.find(k); it != gate_keys_.end() && (it->second & kRunning) != 0) {
        return false;
      }
    }
    return true;
  });
  // A call that saw the check running may get here after it ended: nothing is left to exclude,
  // and keys made now would outlive the check (EndFileCheck has dropped them) into the next one.
  if (!checking_.load()) return;
  const int first = gate_keys_[keys.front()];
  int any = 0;
  for (const std::string& k : keys) {
    any |= gate_keys_[k];
    gate_keys_[k] |= kRunning;
  }
  lock.unlock();
  int more = 0;
  try {
    more = fn(first, any);
  } catch (...) {
    lock.lock();
    for (const std::string& k : keys) gate_keys_[k] &= ~kRunning;
    gate_cv_.notify_all();
    throw;
  }
  lock.lock();
  for (const std::string& k : keys) gate_keys_[k] = (gate_keys_[k] & ~kRunning) | add | more;
  gate_cv_.notify_all();
}

void ClaimService::BeforeClaimFiles(const ClaimRef& ref) {
  if (!checking_.load()) return;
  const std::string owner = state::DraOwner(driver_, ref.uid);
  Guarded({absl::StrCat("uid:", ref.uid), DirKey(ref.ns, ref.name)}, kChecked | kCalled,
          [&](int first, int any) {
            if ((first & kChecked) != 0) return 0;
            // A call of another claim of the same namespace and name (one deleted and made
            // again) owns the metadata directory now: its files are not this claim's to write.
            const bool host_files = (any & kCalled) == 0;
            if (absl::StatusOr<int> r = CheckClaimFiles(owner, host_files, nullptr); !r.ok()) {
              spdlog::warn("{}: checking its files before the call: {}", Who(ref),
                           Message(r.status()));
            }
            return 0;
          });
}

absl::StatusOr<int> ClaimService::CheckClaimFiles(const std::string& owner, bool host_files,
                                                  Wanted* wanted) {
  state::JsonText stored;
  ledger_->Read([&](const state::State& st) {
    if (const state::Allocation* a = st.Find(owner); a != nullptr) stored = a->cdi;
  });
  if (stored.is_null()) return 0;
  std::map<std::string, std::string> specs;              // CDI file -> spec text
  std::map<std::string, std::string> host_file_content;  // device metadata: path -> content
  if (AddStoredCdiText(stored.text(), &specs, &host_file_content) != StoredCdi::kAdded) {
    json cdi = stored.Parse();
    if (!cdi.is_object()) return 0;
    const auto file = cdi.find("file");
    const auto spec = cdi.find("spec");
    if (file == cdi.end() || !file->is_string() || spec == cdi.end()) return 0;
    specs[file->get<std::string>()] = spec->dump(-1, ' ', false, json::error_handler_t::replace);
    if (absl::Status st = AddStoredMetadata(cdi, &specs, &host_file_content); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("\"", owner, "\": ", st.message()));
    }
  }
  const std::string metadata_root = view()->setup.metadata_root;
  if (wanted != nullptr) {
    for (const auto& [path, content] : host_file_content) wanted->recorded_host_files.insert(path);
  }
  if (!host_files) host_file_content.clear();
  if (wanted != nullptr) {
    for (const auto& [file, text] : specs) wanted->cdi_files.insert(file);
    for (const auto& [path, content] : host_file_content) wanted->host_files.insert(path);
  }
  int written = 0;
  // The host files first: a metadata CDI spec must never mount a file not yet whole. When one
  // cannot be written, the metadata specs are left as they are (the claim's own spec is still
  // checked) and the failure returned.
  absl::Status host_failed;
  if (!metadata_root.empty()) {
    for (const auto& [path, content] : host_file_content) {
      absl::StatusOr<bool> w = CheckMetadataHostFile(path, content);
      if (!w.ok()) {
        host_failed = w.status();
        break;
      }
      written += *w ? 1 : 0;
    }
  }
  const std::string label = absl::StrCat("driver ", driver_);
  for (const auto& [file, text] : specs) {
    if (!host_failed.ok() && IsMetadataCdiFileOf(driver_, file)) continue;
    absl::StatusOr<bool> w = cdi::CheckCdiFileText(*cdi_, file, text, label);
    if (!w.ok()) return w.status();
    written += *w ? 1 : 0;
  }
  if (!host_failed.ok()) return host_failed;
  return written;
}

absl::StatusOr<ClaimService::Reconciled> ClaimService::RunFileCheck() {
  const std::string marker = view()->setup.cdi_marker;
  const std::vector<std::string> metadata_roots = MetadataRoots(view()->setup);
  struct Loaded {
    std::string owner;
    std::string uid_key;
    std::string dir_key;
  };
  std::vector<Loaded> loaded = ledger_->Read([&](const state::State& st) {
    std::vector<Loaded> out;
    for (const auto& [owner, a] : st.allocations()) {
      if (a.kind != state::AllocationKind::kDraClaim || a.driver != driver_) continue;
      out.push_back({owner, absl::StrCat("uid:", state::ClaimUid(a)),
                     DirKey(a.claim_namespace, a.claim_name)});
    }
    return out;
  });
  Reconciled out;
  absl::Status failed;
  Wanted wanted;
  for (const Loaded& l : loaded) {
    if (stop_check_.load()) return absl::CancelledError("the file check was stopped");
    if (before_claim_check_) before_claim_check_(l.owner);
    Guarded({l.uid_key, l.dir_key}, kChecked, [&](int first, int any) {
      if ((first & kChecked) != 0) return 0;
      // A prepare of another claim of the same namespace and name (one deleted and made again)
      // has taken the metadata directory over and written its own files there: this claim's
      // stored record must not write over them.
      absl::StatusOr<int> r = CheckClaimFiles(l.owner, (any & kCalled) == 0, &wanted);
      if (r.ok()) {
        out.written += *r;
        return 0;
      }
      if (failed.ok()) failed = r.status();
      return static_cast<int>(kKeep);
    });
  }
  // Files of claims not prepared, each removed under its claim's key unless a call has taken
  // the claim over (its prepare writes the same files; its unprepare removes them itself).
  // A stop ends the removals too (a check of 10,000 stale claims removes 30,000 files); the
  // listings still run to their end but remove nothing more.
  bool stopped = false;
  auto skip = [&](int flags) {
    stopped = stopped || stop_check_.load();
    return stopped || (flags & (kCalled | kKeep)) != 0;
  };
  // After the records' files are back, so that today's root exists if a record names it. Each
  // root walked once however spelled, and files matched by place: two spellings of one directory
  // walked apart would each take the other's wanted files for strays. What a crash left in a root
  // only a record names (an older --device-metadata-dir) stays: tmpfs clears it at reboot.
  const std::vector<DistinctDir> walked = DistinctDirs(metadata_roots);
  HostFilePlaces places(driver_);
  const std::set<HostFilePlaces::Place> wanted_places = places.AllOf(wanted.host_files);
  const std::set<HostFilePlaces::Place> recorded_places = places.AllOf(wanted.recorded_host_files);
  // A metadata spec is ours when it mounts from a root walked (or today's, not made yet) or a
  // file a record names; else another daemon's, whose roots may be any.
  auto ours = [&](const std::string& host_path) {
    if (wanted.recorded_host_files.contains(host_path)) return true;
    const std::string root = MetadataRootOf(host_path, driver_);
    if (root.empty()) return false;
    if (std::find(metadata_roots.begin(), metadata_roots.end(), root) != metadata_roots.end()) {
      return true;
    }
    const std::optional<HostFilePlaces::Place> place = places.Of(host_path);
    if (!place) return false;
    return recorded_places.contains(*place) ||
           std::any_of(walked.begin(), walked.end(),
                       [&](const DistinctDir& d) { return d.id == place->first; });
  };
  const absl::Status cancelled = absl::CancelledError("the file check was stopped");
  cdi::FileGuard guard = [&](const std::string& file, const std::function<void()>& act) {
    Guarded({KeyOfFile(driver_, file)}, 0, [&](int first, int) {
      if (!skip(first)) act();
      return 0;
    });
  };
  absl::StatusOr<int> removed = cdi::RemoveUnwantedCdiFiles(
      *cdi_, [&](const std::string& file) { return wanted.cdi_files.contains(file); },
      [&](const std::string& file) {
        if (IsMetadataCdiFileOf(driver_, file)) {
          return ClassifyMetadataSpec(*cdi_, file, ours);
        }
        return ClassifyCdiFile(IsCdiFileOf(driver_, file), file, marker);
      },
      absl::StrCat("driver ", driver_), guard);
  if (stopped) return cancelled;
  if (!removed.ok()) return removed.status();
  out.removed += *removed;
  for (const DistinctDir& root : walked) {
    absl::StatusOr<int> gone = RemoveUnwantedMetadata(
        root.path,
        [&](const std::string& path) {
          return wanted.host_files.contains(path) ||
                 wanted_places.contains({root.id, path.substr(root.path.size())});
        },
        [&](const std::string& dir_name, const std::function<void()>& act) {
          Guarded({absl::StrCat("dir:", dir_name)}, 0, [&](int first, int) {
            if (!skip(first)) act();
            return 0;
          });
        });
    if (stopped) return cancelled;
    if (!gone.ok()) return gone.status();
    out.removed += *gone;
  }
  if (!failed.ok()) return failed;
  return out;
}

void ClaimService::EndFileCheck() {
  std::unique_lock<std::mutex> lock(gate_mu_);
  checking_ = false;
  // A call that entered Guarded before this still runs its fn and then writes its key's flags:
  // dropping the keys under it would let a second call of the same claim in beside it, and its
  // flags, written after the drop, would make the next check skip that claim.
  gate_cv_.wait(lock, [&] {
    return std::none_of(gate_keys_.begin(), gate_keys_.end(),
                        [](const auto& k) { return (k.second & kRunning) != 0; });
  });
  gate_keys_.clear();
}

absl::StatusOr<ClaimService::Reconciled> ClaimService::ReconcileCdi() {
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    checking_ = true;
  }
  absl::StatusOr<Reconciled> r = RunFileCheck();
  EndFileCheck();
  return r;
}

void ClaimService::StartFileCheck(std::function<void(const absl::StatusOr<Reconciled>&)> done) {
  StopFileCheck();
  stop_check_ = false;
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    checking_ = true;
  }
  check_thread_ = std::thread([this, done = std::move(done)] {
    checking_on_this_thread = this;
    absl::StatusOr<Reconciled> r;
    try {
      r = RunFileCheck();
    } catch (const std::exception& e) {
      // STYLE.md: nothing throws on purpose; a bug here must not take the daemon down.
      r = absl::InternalError(absl::StrCat("the file check failed: ", e.what()));
    }
    EndFileCheck();
    {
      std::lock_guard<std::mutex> lock(check_error_mu_);
      check_error_ = r.ok() || absl::IsCancelled(r.status()) ? "" : Message(r.status());
    }
    if (done) done(r);
  });
}

void ClaimService::StopFileCheck() {
  stop_check_ = true;
  if (checking_on_this_thread != this && check_thread_.joinable()) check_thread_.join();
}

std::string ClaimService::FileCheckProblem() const {
  std::lock_guard<std::mutex> lock(check_error_mu_);
  return check_error_;
}

struct ClaimService::Known {
  std::string error;  // why it cannot be answered now; "" to replay
  std::vector<PreparedDevice> devices;
  json cdi;
};

struct ClaimService::Fetched {
  // The outcome is final: an error, or the answer of a claim prepared before.
  bool answered = false;
  // Answered because the caller gave up or its deadline was near: told in one line per call.
  bool given_up = false;
  ClaimOutcome outcome;
  std::optional<claims::Claim> claim;  // to commit, when not answered
};

namespace {

enum GiveUp : int { kGoOn = 0, kCancelled = 1, kDeadline = 2 };

std::string GiveUpText(int why) {
  return why == kCancelled ? "the caller cancelled the call" : "the caller's deadline has passed";
}

}  // namespace

// The fetching half of one Prepare call: up to FetchOptions::parallel of the service's fetcher
// threads run FetchOne over the claims in request order; Take(i) waits for claim i, polling the
// caller meanwhile (we ask CallLimits::cancelled on the caller's thread only, so it may be any
// callable, and tell the fetchers through an atomic). A call of one claim, or one that finds no
// fetcher free, fetches on the caller's own thread, and its GETs poll the caller themselves
// (FetchLimits::caller_gone). Destroyed, it stops the GETs and waits for its jobs to end.
class ClaimService::Call {
 public:
  Call(ClaimService* service, const std::vector<ClaimRef>& claims, const CallLimits& limits)
      : service_(service), limits_(limits) {
    // One piece of work per uid: the response has one entry per uid, and a uid repeated in one
    // call would otherwise race with itself.
    std::set<std::string> seen;
    for (const ClaimRef& ref : claims) {
      if (seen.insert(ref.uid).second) work_.push_back(&ref);
    }
    slots_ = std::vector<Slot>(work_.size());
  }
  ~Call() {
    int none = kGoOn;
    give_up_.compare_exchange_strong(none, kCancelled);
    stop_gets_ = true;
    // The jobs use this call: it ends after the last of them.
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return running_ == 0; });
  }

  size_t size() const { return work_.size(); }
  const ClaimRef& ref(size_t i) const { return *work_[i]; }
  absl::Time start() const { return call_start_; }
  std::chrono::steady_clock::time_point started(size_t i) const { return slots_[i].start; }
  // The GiveUp now (after a look at the caller), and as it was last seen.
  int why() {
    CheckCaller();
    return give_up_.load();
  }
  int last_why() const { return give_up_.load(); }

  void Start() {
    if (work_.size() == 1) {
      // Nothing to overlap: handing the one GET to a fetcher and its claim back cost two thread
      // wake-ups (measured in issue 19's sixth pass: 4.5 futex calls and 5-15 us per cycle).
      // The GET polls the caller itself.
      on_this_thread_ = true;
      Fetch();
      return;
    }
    const size_t wanted = std::min<size_t>(std::max(1, service_->fetch_.parallel), work_.size());
    size_t started = 0;
    for (; started < wanted; ++started) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++running_;
      }
      if (!service_->fetchers_.TryRun([this] { FetchAndFinish(); })) {
        std::lock_guard<std::mutex> lock(mu_);
        --running_;
        break;
      }
    }
    if (started == 0) {  // one at a time on this thread, still within the limits
      spdlog::debug("driver {}: no thread free for claim GETs, one at a time", service_->driver_);
      on_this_thread_ = true;
      Fetch();
    }
  }

  Fetched Take(size_t i) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!slots_[i].ready) {
      lock.unlock();
      CheckCaller();
      lock.lock();
      ready_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return slots_[i].ready; });
    }
    return std::move(slots_[i].fetched);
  }

 private:
  struct Slot {
    Fetched fetched;
    bool ready = false;  // guarded by mu_
    std::chrono::steady_clock::time_point start;
  };

  // Polled on the caller's thread only (see CallLimits::cancelled).
  void CheckCaller() {
    if (give_up_.load() != kGoOn) return;
    int why = kGoOn;
    if (limits_.cancelled && limits_.cancelled()) {
      why = kCancelled;
    } else if (absl::Now() >= limits_.deadline) {
      why = kDeadline;
    }
    if (why != kGoOn) {
      give_up_ = why;
      stop_gets_ = true;
    }
  }

  void Fetch() {
    for (size_t i; (i = next_++) < work_.size();) {
      if (on_this_thread_) CheckCaller();
      slots_[i].start = std::chrono::steady_clock::now();
      Fetched f = FetchGuarded(*work_[i]);
      {
        std::lock_guard<std::mutex> lock(mu_);
        slots_[i].fetched = std::move(f);
        slots_[i].ready = true;
      }
      ready_cv_.notify_all();
    }
  }

  // A job on one of the service's fetcher threads.
  void FetchAndFinish() {
    Fetch();
    // Told under the lock: once it is released the call may be gone.
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    done_cv_.notify_all();
  }

  Fetched FetchGuarded(const ClaimRef& ref) {
    Fetched f;
    try {
      if (const int why = give_up_.load(); why != kGoOn) {
        f.answered = f.given_up = true;
        f.outcome.error = absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name),
                                       ": not prepared: ", GiveUpText(why));
      } else {
        std::function<bool()> caller_gone;
        if (on_this_thread_) {
          caller_gone = [this] {
            CheckCaller();
            return give_up_.load() != kGoOn;
          };
        }
        f = service_->FetchOne(ref, limits_, call_start_, stop_gets_, std::move(caller_gone));
        if (f.given_up && give_up_.load() != kGoOn) {
          f.outcome.error = absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name),
                                         ": not prepared: ", GiveUpText(give_up_.load()));
        }
      }
    } catch (const std::exception& e) {
      // STYLE.md: nothing throws on purpose; this keeps one bug from failing every claim.
      f = Fetched();
      f.answered = true;
      f.outcome.error =
          absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name), ": internal error: ", e.what());
      spdlog::error("driver {}: {}", service_->driver_, f.outcome.error);
    }
    return f;
  }

  ClaimService* const service_;
  const CallLimits& limits_;
  const absl::Time call_start_ = absl::Now();
  std::vector<const ClaimRef*> work_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable ready_cv_;
  std::atomic<size_t> next_{0};
  // A GiveUp: set on the caller's thread, read by the fetchers (and the GETs they run) to stop.
  std::atomic<int> give_up_{kGoOn};
  std::atomic<bool> stop_gets_{false};
  bool on_this_thread_ = false;  // a call of one claim, or no fetcher thread was free
  int running_ = 0;              // jobs given to fetcher threads and not finished; guarded by mu_
  std::condition_variable done_cv_;
};

std::map<std::string, ClaimOutcome> ClaimService::Prepare(const std::vector<ClaimRef>& claims,
                                                          const CallLimits& limits) {
  Call call(this, claims, limits);
  call.Start();
  std::map<std::string, ClaimOutcome> out;
  int given_up = 0;
  for (size_t i = 0; i < call.size(); ++i) {
    const ClaimRef& ref = call.ref(i);
    Fetched f = call.Take(i);
    ClaimOutcome outcome;
    if (f.answered) {
      outcome = std::move(f.outcome);
      if (f.given_up) ++given_up;
    } else if (const int why = call.why(); why != kGoOn) {
      outcome.error = absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name),
                                   ": fetched but not prepared: ", GiveUpText(why));
      ++given_up;
    } else {
      try {
        outcome = PrepareOne(ref, *f.claim);
      } catch (const std::exception& e) {
        outcome = ClaimOutcome();
        outcome.error = absl::StrCat("claim ", Ref(ref), ": internal error: ", e.what());
        spdlog::error("{}: {}", Who(ref), outcome.error);
      }
    }
    if (observer_ != nullptr) {
      observer_->OnPrepare(driver_, outcome.error.empty(), SecondsSince(call.started(i)));
    }
    out[ref.uid] = std::move(outcome);
  }
  if (given_up > 0) {
    // One line for the call, not one per claim: a call of thousands of claims may give up.
    const int why = call.last_why();
    spdlog::warn(
        "driver {}: {} of {} claims of a prepare call were not prepared after {}: {}", driver_,
        given_up, call.size(), absl::FormatDuration(absl::Now() - call.start()),
        why != kGoOn ? GiveUpText(why) : "too little time was left before the caller's deadline");
  }
  return out;
}

ClaimService::Fetched ClaimService::FetchOne(const ClaimRef& ref, const CallLimits& limits,
                                             absl::Time call_start,
                                             const std::atomic<bool>& gave_up,
                                             std::function<bool()> caller_gone) {
  Fetched f;
  f.answered = true;
  if (absl::Status id = ValidateClaimIdentity(ref.ns, ref.name, ref.uid); !id.ok()) {
    // Who() would echo the whole value: only bounded forms of what the kubelet sent.
    f.outcome.error = absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name), " uid ",
                                   ShowValue(ref.uid), ": refused: ", Message(id));
    spdlog::warn("driver {}: prepare failed: {}", driver_, f.outcome.error);
    return f;
  }
  BeforeClaimFiles(ref);
  auto fail = [&](std::string message) {
    spdlog::warn("{}: prepare failed: {}", Who(ref), message);
    f.outcome.error = std::move(message);
    return std::move(f);
  };
  std::optional<Known> known;
  // Holds a known claim (no unprepare meanwhile) until the end of this function.
  absl::StatusOr<state::Ledger::Txn> held = ledger_->Reserve([&](state::Ledger::Edit& edit) {
    known = Lookup(edit, ref);
    return absl::OkStatus();
  });
  if (known) {
    f.outcome = Replay(ref, *std::move(known));
    return f;
  }

  // Each GET ends in time for the claims of the call to be prepared and answered before the
  // caller's deadline.
  const absl::Duration margin = std::min(fetch_.margin, (limits.deadline - call_start) / 4);
  const absl::Duration left = limits.deadline - absl::Now() - margin;
  const absl::Duration timeout = std::min(fetch_.request_timeout, left);
  if (timeout <= absl::ZeroDuration()) {
    f.given_up = true;
    f.outcome.error =
        absl::StrCat("claim ", Ref(ref), ": not fetched: less than ", absl::FormatDuration(margin),
                     " was left before the caller's deadline");
    return f;
  }
  const auto t0 = std::chrono::steady_clock::now();
  FetchLimits fetch_limits;
  fetch_limits.timeout = timeout;
  fetch_limits.cancelled = &gave_up;
  fetch_limits.caller_gone = std::move(caller_gone);
  absl::StatusOr<json> object = source_->GetClaim(ref.ns, ref.name, fetch_limits);
  const auto t1 = std::chrono::steady_clock::now();
  if (absl::IsCancelled(object.status()) && gave_up.load()) {
    f.given_up = true;
    f.outcome.error = absl::StrCat("claim ", Ref(ref), ": not fetched: the caller gave up");
    return f;
  }
  if (absl::IsDeadlineExceeded(object.status())) {
    return fail(absl::StrCat(
        "claim ", Ref(ref), ": get ResourceClaim: no answer within ", absl::FormatDuration(timeout),
        timeout == fetch_.request_timeout
            ? " (the per-request timeout)"
            : absl::StrCat(" (the time left before the caller's deadline, less ",
                           absl::FormatDuration(margin), " to answer)"),
        "; the other claims of the call go on: ", Message(object.status())));
  }
  if (!object.ok()) {
    return fail(
        absl::StrCat("claim ", Ref(ref), ": get ResourceClaim: ", Message(object.status())));
  }
  absl::StatusOr<claims::Claim> claim = claims::ParseClaim(*object);
  if (!claim.ok()) {
    return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(claim.status())));
  }
  if (!claim->pods.empty() && claim->uid == ref.uid) {
    std::lock_guard<std::mutex> lock(pods_mu_);
    pods_[ref.uid] = absl::StrJoin(claim->pods, ",");
  }
  if (claim->uid != ref.uid) {
    return fail(absl::StrCat("claim ", Ref(ref), ": the API server has uid \"", claim->uid,
                             "\" but the kubelet asked for uid \"", ref.uid,
                             "\" (the claim was deleted and re-created)"));
  }
  spdlog::debug("{}: get took {} us", Who(ref),
                std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
  f.answered = false;
  f.claim = *std::move(claim);
  return f;
}

std::optional<ClaimService::Known> ClaimService::Lookup(state::Ledger::Edit& edit,
                                                        const ClaimRef& ref) {
  const std::string owner = state::DraOwner(driver_, ref.uid);
  const state::Allocation* a = edit.state().Find(owner);
  if (a == nullptr && !edit.Busy(owner)) return std::nullopt;
  Known k;
  if (a == nullptr || a->phase != state::Phase::kPrepared || edit.InFlight(owner)) {
    k.error = absl::StrCat("claim ", Ref(ref),
                           ": a concurrent call is preparing or unpreparing it; retry");
    return k;
  }
  absl::StatusOr<std::vector<PreparedDevice>> devices = DevicesFromJson(a->answer.Parse());
  if (!devices.ok()) {
    k.error = absl::StrCat("claim ", Ref(ref), ": ", Message(devices.status()));
    return k;
  }
  k.devices = *std::move(devices);
  k.cdi = a->cdi.Parse();
  // The answer names CDI devices: their file must be there (a user or a cleanup may have removed
  // it since). Checked outside the lock; an unprepare waits for it (retry).
  edit.Hold(owner);
  return k;
}

ClaimOutcome ClaimService::Replay(const ClaimRef& ref, Known known) {
  ClaimOutcome o;
  if (known.error.empty()) {
    absl::StatusOr<std::string> restored = RestoreCdiFile(*cdi_, known.cdi);
    absl::StatusOr<std::vector<MetadataFile>> metadata = StoredMetadata(known.cdi);
    if (restored.ok() && !metadata.ok()) restored = metadata.status();
    if (restored.ok() && !metadata->empty()) {
      absl::StatusOr<std::string> again = RestoreMetadataFiles(*cdi_, *metadata);
      if (!again.ok()) {
        restored = again.status();
      } else if (!again->empty()) {
        spdlog::info("{}: already prepared; restored its device metadata {}", Who(ref), *again);
      }
    }
    if (!restored.ok()) {
      known.error = absl::StrCat(
          "claim ", Ref(ref),
          ": prepared, but its CDI file cannot be written: ", Message(restored.status()));
    } else if (!restored->empty()) {
      spdlog::info("{}: already prepared; restored its CDI spec {} ({})", Who(ref),
                   cdi_->PathOf(known.cdi["file"].get<std::string>()), *restored);
    } else {
      spdlog::debug("{}: already prepared, same answer", Who(ref));
    }
  }
  if (!known.error.empty()) {
    spdlog::warn("{}: prepare failed: {}", Who(ref), known.error);
    o.error = std::move(known.error);
    return o;
  }
  o.devices = std::move(known.devices);
  return o;
}

absl::Status ClaimService::PlanOne(state::Ledger::Edit& edit, const ClaimRef& ref,
                                   const claims::Claim& claim, const View& view,
                                   std::optional<Known>* known, Plan* plan) {
  // Another call may have prepared it while we fetched it.
  if ((*known = Lookup(edit, ref))) return absl::OkStatus();
  absl::StatusOr<Plan> planned =
      PlanClaim(claim, view.setup, view.topo, edit.state(), &view.cpu_layout);
  if (!planned.ok()) return planned.status();
  *plan = *std::move(planned);
  absl::Status added = edit.Add(plan->allocation);
  if (added.ok()) return added;
  return absl::Status(added.code(), absl::StrCat("claim ", Ref(ref), ": ", Message(added)));
}

ClaimOutcome ClaimService::PrepareOne(const ClaimRef& ref, const claims::Claim& claim) {
  ClaimOutcome out;
  auto fail = [&](std::string message) {
    spdlog::warn("{}: prepare failed: {}", Who(ref), message);
    out.error = std::move(message);
    return out;
  };
  const auto t1 = std::chrono::steady_clock::now();
  const std::shared_ptr<const View> v = view();
  std::optional<Known> known;
  Plan plan;
  absl::StatusOr<state::Ledger::Txn> txn = ledger_->Reserve(
      [&](state::Ledger::Edit& edit) { return PlanOne(edit, ref, claim, *v, &known, &plan); });
  if (!txn.ok()) return fail(Message(txn.status()));
  if (known) return Replay(ref, *std::move(known));
  const auto t2 = std::chrono::steady_clock::now();
  auto undo = [&] {
    if (!plan.metadata.empty()) {
      (void)RemoveMetadataFiles(
          *cdi_, MetadataClaimDir(v->setup.metadata_root, claim.namespace_name, claim.name),
          CdiFilesOf(plan.metadata), HostFilesOf(plan.metadata));
    }
    if (!plan.cdi_file.empty()) (void)cdi_->Remove(plan.cdi_file, /*synced=*/false);
    Forget(plan.allocation.owner);
    ledger_->Abort(*txn);
  };
  if (!plan.cdi_file.empty()) {
    // Validated and printed by the planner, when it could.
    absl::Status w = !plan.cdi_text.empty()
                         ? cdi_->WriteValidatedText(plan.cdi_file, plan.cdi_text, /*synced=*/false)
                         : cdi_->Write(plan.cdi_file, plan.cdi_spec, /*synced=*/false).status();
    if (!w.ok()) {
      undo();
      return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(w)));
    }
  }
  // Not synced, as the CDI spec: the journal record below holds the content, start restores it.
  if (absl::Status st =
          WriteMetadataFiles(*cdi_, plan.metadata, /*synced=*/false, &plan.metadata_cdi_texts,
                             HostFileWrite::kInPlaceIfNewClaimDir);
      !st.ok()) {
    undo();
    return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(st)));
  }
  for (const std::string& note : plan.notes) spdlog::warn("{}: {}", Who(ref), note);
  const auto t3 = std::chrono::steady_clock::now();
  // Remembered while the claim is still in flight: once Commit returns an unprepare may run at
  // once, and an entry written after it had forgotten the claim would outlive the claim.
  if (!plan.cdi_file.empty()) {
    Remember(plan.allocation.owner, plan.allocation.cdi,
             {plan.cdi_file, CdiFilesOf(plan.metadata),
              plan.metadata.empty() ? std::string() : plan.metadata.front().host_path,
              HostFilesOf(plan.metadata)});
  }
  if (absl::Status st = ledger_->Commit(*txn); !st.ok()) {
    undo();
    return fail(absl::StrCat("claim ", Ref(ref), ": record the allocation: ", Message(st)));
  }
  const auto t4 = std::chrono::steady_clock::now();
  auto us = [](auto d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
  spdlog::info("{}: prepared cpus={} gpus={} devices={}", Who(ref),
               plan.allocation.cpus.Empty() ? "none" : plan.allocation.cpus.ToString(),
               plan.allocation.gpus.size(), plan.devices.size());
  spdlog::debug("{}: prepare took plan {} us, cdi {} us, journal {} us", Who(ref), us(t2 - t1),
                us(t3 - t2), us(t4 - t3));
  out.devices = std::move(plan.devices);
  return out;
}

std::map<std::string, std::string> ClaimService::Unprepare(const std::vector<ClaimRef>& claims) {
  std::map<std::string, std::string> out;
  for (const ClaimRef& ref : claims) {
    std::string error;
    const auto start = std::chrono::steady_clock::now();
    try {
      error = UnprepareOne(ref);
    } catch (const std::exception& e) {
      error =
          absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name), ": internal error: ", e.what());
      spdlog::error("driver {}: {}", driver_, error);
    }
    if (observer_ != nullptr) observer_->OnUnprepare(driver_, error.empty(), SecondsSince(start));
    out[ref.uid] = std::move(error);
  }
  return out;
}

std::string ClaimService::UnprepareOne(const ClaimRef& ref) {
  if (absl::Status id = ValidateClaimIdentity(ref.ns, ref.name, ref.uid); !id.ok()) {
    // Who() would echo the whole value: only bounded forms of what the kubelet sent.
    std::string error = absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name), " uid ",
                                     ShowValue(ref.uid), ": refused: ", Message(id));
    spdlog::warn("driver {}: unprepare failed: {}", driver_, error);
    return error;
  }
  BeforeClaimFiles(ref);
  const std::string owner = state::DraOwner(driver_, ref.uid);
  auto fail = [&](std::string message) {
    spdlog::warn("{}: unprepare failed: {}", Who(ref), message);
    return message;
  };
  state::Allocation held;
  bool absent = false;
  absl::StatusOr<state::Ledger::Txn> txn =
      ledger_->Reserve([&](state::Ledger::Edit& edit) -> absl::Status {
        const state::Allocation* a = edit.state().Find(owner);
        if (a == nullptr) {
          absent = true;
          edit.Hold(owner);  // no prepare of it starts while its CDI file is removed
          return absl::OkStatus();
        }
        // A prepare whose journal record is still being written would append it after our
        // removal record and bring the claim back on replay: that call must finish first. A
        // repeated prepare rewriting its CDI file (held) would leave it behind.
        if (a->phase != state::Phase::kPrepared || edit.Busy(owner)) {
          return absl::FailedPreconditionError(
              "a concurrent call is preparing or unpreparing it; retry");
        }
        held = *a;
        return edit.Release(owner);
      });
  if (!txn.ok()) return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(txn.status())));
  if (absent) {
    // Not ours (another instance's, or never prepared): nothing to do, but a CDI file of a
    // crashed prepare may still be there.
    const std::shared_ptr<const View> v = view();
    (void)cdi_->Remove(CdiFileName(driver_, ref.uid, v->setup.cdi_marker), /*synced=*/false);
    if (const std::vector<std::string> specs = MetadataCdiFilesOfClaim(*cdi_, driver_, ref.uid);
        !specs.empty()) {
      RemoveUnrecordedMetadata(*cdi_, specs, v->setup, ref.ns, ref.name);
    }
    Forget(owner);
    spdlog::debug("{}: not prepared, nothing to unprepare", Who(ref));
    return "";
  }
  const auto t1 = std::chrono::steady_clock::now();
  absl::StatusOr<ClaimFiles> files = FilesOf(owner, held.cdi);
  if (!files.ok()) {
    ledger_->Abort(*txn);
    return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(files.status())));
  }
  // The claim stays prepared after all: its files go back (parsed from the stored text, as
  // start would restore them). With `spec`, its CDI spec too.
  auto restore = [&](bool spec) {
    const json stored = held.cdi.Parse();
    if (spec && !files->cdi_file.empty() && stored.is_object() && stored.contains("spec")) {
      absl::StatusOr<cdi::Spec> s = cdi::FromJson(stored["spec"].dump());
      if (s.ok()) (void)cdi_->Write(files->cdi_file, *s, false);
    }
    if (absl::StatusOr<std::vector<MetadataFile>> m = StoredMetadata(stored); m.ok()) {
      (void)WriteMetadataFiles(*cdi_, *m, /*synced=*/false);
    }
  };
  if (!files->metadata_cdi_files.empty()) {
    // The directory of the host files is the claim's ("<root>/<ns>_<name>"), wherever the root
    // was when they were written.
    const std::string& host_path = files->metadata_host_path;
    const std::string request_dir = host_path.substr(0, host_path.rfind('/'));
    std::string claim_dir = request_dir.substr(0, request_dir.rfind('/'));
    // remove_all of a path read back from the journal: only ever this claim's own directory.
    if (!absl::EndsWith(claim_dir, MetadataClaimDir("", held.claim_namespace, held.claim_name))) {
      claim_dir =
          MetadataClaimDir(view()->setup.metadata_root, held.claim_namespace, held.claim_name);
    }
    if (absl::Status st = RemoveMetadataFiles(*cdi_, claim_dir, files->metadata_cdi_files,
                                              files->metadata_host_files);
        !st.ok()) {
      ledger_->Abort(*txn);
      return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(st)));
    }
  }
  // Not synced: the journal record below is what makes the release durable, and a file that
  // comes back after a power loss belongs to no prepared claim and is removed at start.
  if (absl::Status st =
          files->cdi_file.empty() ? absl::OkStatus() : cdi_->Remove(files->cdi_file, false);
      !st.ok()) {
    restore(/*spec=*/false);  // still prepared
    ledger_->Abort(*txn);
    return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(st)));
  }
  const auto t2 = std::chrono::steady_clock::now();
  if (absl::Status st = ledger_->Commit(*txn); !st.ok()) {
    // Still prepared: its CDI file must be there for a replayed prepare.
    restore(/*spec=*/true);
    ledger_->Abort(*txn);  // Prepared again, and recorded again
    return fail(absl::StrCat("claim ", Ref(ref), ": record the release: ", Message(st)));
  }
  Forget(owner);
  const auto t3 = std::chrono::steady_clock::now();
  spdlog::info("{}: unprepared, freed cpus={} gpus={}", Who(ref),
               held.cpus.Empty() ? "none" : held.cpus.ToString(), held.gpus.size());
  auto us = [](auto d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
  spdlog::debug("{}: unprepare took files {} us, journal {} us", Who(ref), us(t2 - t1),
                us(t3 - t2));
  {
    std::lock_guard<std::mutex> lock(pods_mu_);
    pods_.erase(ref.uid);
  }
  return "";
}

void ClaimService::Remember(const std::string& owner, const state::JsonText& cdi,
                            ClaimFiles files) {
  Remembered r{cdi.text().size(), std::hash<std::string>{}(cdi.text()), std::move(files)};
  std::lock_guard<std::mutex> lock(files_mu_);
  files_[owner] = std::move(r);
}

void ClaimService::Forget(const std::string& owner) {
  std::lock_guard<std::mutex> lock(files_mu_);
  files_.erase(owner);
}

absl::StatusOr<ClaimService::ClaimFiles> ClaimService::FilesOf(const std::string& owner,
                                                               const state::JsonText& cdi) {
  const size_t hash = std::hash<std::string>{}(cdi.text());
  {
    std::lock_guard<std::mutex> lock(files_mu_);
    if (auto it = files_.find(owner);
        it != files_.end() && it->second.size == cdi.text().size() && it->second.hash == hash) {
      return it->second.files;
    }
  }
  const json stored = cdi.Parse();
  ClaimFiles files;
  if (stored.is_object() && stored.contains("file") && stored["file"].is_string()) {
    files.cdi_file = stored["file"].get<std::string>();
  }
  absl::StatusOr<std::vector<MetadataFile>> metadata = StoredMetadata(stored);
  if (!metadata.ok()) return metadata.status();
  files.metadata_cdi_files = CdiFilesOf(*metadata);
  if (!metadata->empty()) files.metadata_host_path = metadata->front().host_path;
  files.metadata_host_files = HostFilesOf(*metadata);
  return files;
}

std::string ClaimService::Who(const ClaimRef& ref) const {
  std::string pods;
  {
    std::lock_guard<std::mutex> lock(pods_mu_);
    if (auto it = pods_.find(ref.uid); it != pods_.end()) pods = it->second;
  }
  // The kubelet's call names no pod; the claim's reservedFor does, once it has been fetched.
  return absl::StrCat("claim ", Ref(ref), " uid=", ref.uid, " driver=", driver_,
                      " pod=", pods.empty() ? "unknown" : pods);
}

}  // namespace topodra::prepare
