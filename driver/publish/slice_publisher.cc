#include "driver/publish/slice_publisher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <system_error>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/json_text.h"
#include "driver/kube/quantity.h"
#include "driver/publish/slice_json.h"

namespace topodra::publish {
namespace {

using nlohmann::json;

// True when every field of `want` is in `have` with an equal value; extra fields in `have` are
// the server's (defaults, status, a taint's timeAdded). Quantities compare by value: servers
// canonicalise "1000" to "1k". The server never adds attributes, capacities, taints, includes or
// mixins, so those in `have` that `want` lacks are leftovers (e.g. of a reservation that ended)
// and make it not covered.
bool Covers(const json& want, const json& have, bool exact_keys = false);

// A member of `have` that `want` lacks: only a non-empty taints, includes or mixins matters.
bool LeftOver(const std::string& k, const json& v) {
  return !v.empty() && (k == "taints" || k == "includes" || k == "mixins");
}

// Both objects' members are sorted by key, so one walk over the two finds each wanted member
// (and every member `want` lacks) without a search per key: this check runs over every device
// of every slice written, on the daemon's CPU while the API server takes the other writes.
bool CoversObject(const json::object_t& want, const json::object_t& have, bool exact_keys) {
  if (exact_keys && have.size() != want.size()) return false;
  auto h = have.begin();
  for (const auto& [k, v] : want) {
    for (; h != have.end() && h->first < k; ++h) {
      if (LeftOver(h->first, h->second)) return false;
    }
    if (h == have.end() || h->first != k) return false;
    if (!Covers(v, h->second, k == "attributes" || k == "capacity")) return false;
    ++h;
  }
  for (; h != have.end(); ++h) {
    if (LeftOver(h->first, h->second)) return false;
  }
  return true;
}

bool Covers(const json& want, const json& have, bool exact_keys) {
  if (want.is_object()) {
    if (!have.is_object()) return false;
    return CoversObject(want.get_ref<const json::object_t&>(),
                        have.get_ref<const json::object_t&>(), exact_keys);
  }
  if (want.is_array()) {
    if (!have.is_array() || have.size() != want.size()) return false;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!Covers(want[i], have[i])) return false;
    }
    return true;
  }
  if (want == have) return true;
  return want.is_string() && have.is_string() &&
         kube::QuantitiesEqual(want.get<std::string>(), have.get<std::string>());
}

// True when every device taint of the sent spec is on the same device in the stored one: a
// server with DRADeviceTaints off accepts them and drops them silently.
bool TaintsKept(const json& sent_spec, const json& stored_spec) {
  std::map<std::string, const json*> stored;
  const json& devices = Field(stored_spec, "devices");
  if (devices.is_array()) {
    for (const json& d : devices) stored.emplace(StringField(d, "name"), &d);
  }
  const json& sent = Field(sent_spec, "devices");
  if (!sent.is_array()) return true;
  for (const json& d : sent) {
    const json& taints = Field(d, "taints");
    if (taints.is_null()) continue;
    auto it = stored.find(StringField(d, "name"));
    if (it == stored.end() || !Covers(taints, Field(*it->second, "taints"))) return false;
  }
  return true;
}

// True when, for every device of the sent spec, part(device) is kept on the stored device of the
// same name. part gives null for a device that does not carry the field.
template <typename Part>
bool DevicePartsKept(const json& sent_spec, const json& stored_spec, Part part) {
  std::map<std::string, const json*> stored;
  const json& devices = Field(stored_spec, "devices");
  if (devices.is_array()) {
    for (const json& d : devices) stored.emplace(StringField(d, "name"), &d);
  }
  const json& sent = Field(sent_spec, "devices");
  if (!sent.is_array()) return true;
  for (const json& d : sent) {
    const json want = part(d);
    if (want.is_null()) continue;
    auto it = stored.find(StringField(d, "name"));
    if (it == stored.end() || !Covers(want, part(*it->second))) return false;
  }
  return true;
}

// A device's list-typed attributes; null when it has none.
json ListAttributesOf(const json& device) {
  json out = json::object();
  const json& attrs = Field(device, "attributes");
  if (attrs.is_object()) {
    for (const auto& [k, v] : attrs.items()) {
      if (v.is_object() && (v.contains("strings") || v.contains("ints") || v.contains("bools") ||
                            v.contains("versions"))) {
        out[k] = v;
      }
    }
  }
  return out.empty() ? json(nullptr) : out;
}

int64_t GenerationOf(const json& slice) {
  const json& g = Field(Field(Field(slice, "spec"), "pool"), "generation");
  return g.is_number_integer() ? g.get<int64_t>() : 0;
}

std::string NameOf(const json& obj) { return StringField(Field(obj, "metadata"), "name"); }

// Nothing listens where the API server should be (it is restarting): asking again costs it
// nothing, while the node's devices stay unschedulable until the pool is back, so retries do not
// back off beyond this. A server that answers, even with errors, gets the full backoff.
constexpr std::chrono::milliseconds kRefusedMaxBackoff{1000};

kube::InformerOptions InformerOptionsFor(const PublisherOptions& o) {
  kube::InformerOptions i;
  i.collections = ResourceSliceApi::Collections();
  i.field_selector = absl::StrCat("spec.driver=", o.driver, ",spec.nodeName=", o.node_name);
  i.initial_backoff = o.initial_backoff;
  i.max_backoff = o.max_backoff;
  i.refused_max_backoff = kRefusedMaxBackoff;
  i.watch_timeout_seconds = o.watch_timeout_seconds;
  i.wait = o.backoff_wait;
  return i;
}

}  // namespace

bool FirstWriteMustGoAlone(const std::vector<Slice>& slices, const ProbedFields& probed) {
  const char* allocatable = NodeAllocatableFieldName(probed.node_allocatable);
  auto has_list = [](const Attributes& attributes) {
    return std::any_of(attributes.begin(), attributes.end(),
                       [](const auto& a) { return std::holds_alternative<StringList>(a.second); });
  };
  for (const Slice& s : slices) {
    if (!s.mixins.empty() && !probed.mixins) return true;
    // CompactSlice moves attributes of every type, lists included, into the mixins, and may move
    // capacities there too: a device's own fields are not all there is to look at.
    for (const DeviceMixin& m : s.mixins) {
      if (!probed.lists && has_list(m.attributes)) return true;
      for (const auto& [name, c] : m.capacity) {
        if (c.request_policy) return true;
      }
    }
    // Spec fields not modelled (shared counters, ...) are gated or new, and never probed.
    if (!s.extra_spec.empty()) return true;
    for (const Device& d : s.devices) {
      if (!d.includes.empty() && !probed.mixins) return true;
      // Consumable capacity (DRAConsumableCapacity) is gated and not probed.
      if (d.allow_multiple_allocations) return true;
      for (const auto& [name, c] : d.capacity) {
        if (c.request_policy) return true;
      }
      if (!probed.lists && has_list(d.attributes)) return true;
      for (const auto& [k, v] : d.extra.items()) {
        if (k == "taints" ? !probed.taints : k != allocatable) return true;
      }
    }
  }
  return false;
}

absl::StatusOr<MixinMode> ParseMixinMode(const std::string& s) {
  if (s == "auto") return MixinMode::kAuto;
  if (s == "on") return MixinMode::kOn;
  if (s == "off") return MixinMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("invalid slice mixin mode \"", s, "\" (want auto, on or off)"));
}

absl::StatusOr<TaintMode> ParseTaintMode(const std::string& s) {
  if (s == "auto") return TaintMode::kAuto;
  if (s == "on") return TaintMode::kOn;
  if (s == "off") return TaintMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("invalid device taint mode \"", s, "\" (want auto, on or off)"));
}

SlicePublisher::SlicePublisher(kube::RestClient* client, PublisherOptions options)
    : api_(client), opts_(std::move(options)), informer_(client, InformerOptionsFor(opts_), this) {}

void SlicePublisher::SetDesired(std::optional<Pool> pool) {
  SetDesired(pool ? std::make_shared<const Pool>(*std::move(pool)) : nullptr);
}

void SlicePublisher::SetDesired(std::shared_ptr<const Pool> pool) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    desired_.known = true;
    desired_.pool = std::move(pool);
    ++desired_.version;
  }
  cv_.notify_all();
  informer_.Wake();
}

void SlicePublisher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  informer_.Stop();
}

void SlicePublisher::HoldWrites() {
  std::lock_guard<std::mutex> lock(mu_);
  writes_held_ = true;
}

void SlicePublisher::ReleaseWrites() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    writes_held_ = false;
  }
  cv_.notify_all();
}

bool SlicePublisher::WritesAllowed(bool* waited) {
  std::unique_lock<std::mutex> lock(mu_);
  *waited = writes_held_ && !stopped_;
  cv_.wait(lock, [this] { return stopped_ || !writes_held_; });
  return !stopped_;
}

bool SlicePublisher::WritesHeld() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_held_ && !stopped_;
}

bool SlicePublisher::WaitPublished(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t want = desired_.version;
  return cv_.wait_for(lock, timeout, [&] { return stopped_ || synced_version_ >= want; }) &&
         !stopped_;
}

PublisherStatus SlicePublisher::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void SlicePublisher::RecordResult(const absl::Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  // A stop (SIGTERM while the writes were held) is how the daemon ends, not a failed publish.
  if (stopped_ && absl::IsCancelled(s)) return;
  const std::string msg = s.ok() ? "" : std::string(s.message());
  if (!s.ok()) ++status_.errors;
  if (msg != status_.last_error) {
    // Once per change of state, not per retry: an API server that is down for an hour must not
    // fill the log.
    if (!s.ok()) {
      spdlog::warn("driver={} node={}: publishing ResourceSlices failed, retrying with backoff: {}",
                   opts_.driver, opts_.node_name, msg);
    } else {
      spdlog::info("driver={} node={}: publishing ResourceSlices works again", opts_.driver,
                   opts_.node_name);
    }
  }
  status_.last_error = msg;
  if (!s.ok()) status_.in_sync = false;
}

absl::Status SlicePublisher::OnList(std::vector<json> items) {
  // The list settled the API version (v1, or v1beta2 on a server without v1): writes follow it.
  api_.UseCollection(informer_.collection());
  cache_.clear();
  deleted_.clear();  // the watch resumes from this list, after those deletes
  for (json& item : items) {
    const std::string name = NameOf(item);
    if (!name.empty()) cache_[name] = std::move(item);
  }
  drift_ = true;  // compare against what the server really holds
  return absl::OkStatus();
}

json SlicePublisher::ObjectFor(const Slice& s, int64_t generation) const {
  json obj = SliceToJson(s, api_.api_version());
  obj["spec"]["pool"]["generation"] = generation;
  if (!node_uid_.empty()) {
    // Slices die with their Node (garbage collection), as the upstream helper arranges.
    obj["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "v1"},
                                                       {"kind", "Node"},
                                                       {"name", opts_.node_name},
                                                       {"uid", node_uid_},
                                                       {"controller", true}}});
  }
  return obj;
}

namespace {

// `s` cut down to its first device that includes mixins and the mixins that device includes;
// `s` itself when no device includes any.
Slice OneDeviceWithMixins(const Slice& s) {
  auto it = std::find_if(s.devices.begin(), s.devices.end(),
                         [](const Device& d) { return !d.includes.empty(); });
  if (it == s.devices.end()) return s;
  Slice out = s;
  out.devices = {*it};
  std::erase_if(out.mixins, [&](const DeviceMixin& m) {
    return std::find(it->includes.begin(), it->includes.end(), m.name) == it->includes.end();
  });
  return out;
}

}  // namespace

absl::StatusOr<bool> SlicePublisher::MixinsSupported(const std::vector<Slice>& mixed) {
  if (mixins_supported_) return *mixins_supported_;
  // A dry-run create with strict field validation: a server without KEP-5234 rejects the
  // unknown fields (400) or, if it accepts and drops them, returns an object without them.
  const Slice* with_mixins = nullptr;
  for (const Slice& s : mixed) {
    if (!s.mixins.empty()) with_mixins = &s;
  }
  if (with_mixins == nullptr) return false;
  // One device that includes mixins, with those mixins: the server checks the same fields as on
  // the whole slice, at a fraction of the cost (a slice of 128 devices is most of a create).
  const Slice probe = OneDeviceWithMixins(*with_mixins);
  json obj = ObjectFor(probe, 1);
  obj["metadata"].erase("name");
  obj["metadata"]["generateName"] = "topodra-mixin-probe-";
  // Taints have a probe of their own; a server that drops them must not look mixin-less.
  for (json& d : obj["spec"]["devices"]) d.erase("taints");
  absl::StatusOr<kube::Response> r = api_.Create(obj, /*dry_run=*/true);
  bool supported = false;
  if (r.ok()) {
    supported = Covers(obj["spec"], Field(r->body, "spec"));
  } else {
    const std::optional<int> code = kube::HttpCodeOf(r.status());
    if (!code || (*code != 400 && *code != 422)) return r.status();  // cannot tell yet
  }
  spdlog::info("driver={} node={}: API server {} ResourceSlice mixins (KEP-5234); publishing {}",
               opts_.driver, opts_.node_name, supported ? "accepts" : "does not accept",
               supported ? "the mixin form" : "flat slices");
  mixins_supported_ = supported;
  probed_this_pass_.mixins = supported;
  return supported;
}

void SlicePublisher::LogTaintDecision(bool supported) const {
  spdlog::info(
      "driver={} node={}: API server {} ResourceSlice device taints (DRADeviceTaints); "
      "publishing {}",
      opts_.driver, opts_.node_name, supported ? "accepts" : "does not accept",
      supported ? "reserved devices tainted" : "devices without taints");
}

absl::StatusOr<bool> SlicePublisher::TaintsSupported(const Pool& pool) {
  if (taints_supported_) return *taints_supported_;
  // A dry-run create of one device with the pool's first taints, and nothing else, so a field
  // other than taints that the server drops cannot decide this: a server without DRADeviceTaints
  // drops them (or, if it does not know the field at all, rejects it under strict validation).
  const Device* tainted = nullptr;
  for (const Device& d : pool.devices) {
    if (d.extra.contains("taints")) {
      tainted = &d;
      break;
    }
  }
  if (tainted == nullptr) return false;
  Slice probe;
  probe.driver = pool.driver;
  probe.pool = pool.name;
  probe.node_name = pool.node_name;
  Device d;
  d.name = tainted->name;
  d.extra["taints"] = tainted->extra.at("taints");
  probe.devices.push_back(std::move(d));
  json obj = ObjectFor(probe, 1);
  obj["metadata"]["generateName"] = "topodra-taint-probe-";
  absl::StatusOr<kube::Response> r = api_.Create(obj, /*dry_run=*/true);
  bool supported = false;
  if (r.ok()) {
    supported = TaintsKept(obj["spec"], Field(r->body, "spec"));
  } else {
    const std::optional<int> code = kube::HttpCodeOf(r.status());
    if (!code || (*code != 400 && *code != 422)) return r.status();  // cannot tell yet
  }
  LogTaintDecision(supported);
  taints_supported_ = supported;
  probed_this_pass_.taints = supported;
  return supported;
}

absl::StatusOr<bool> SlicePublisher::DryRunKeeps(const Slice& probe,
                                                 const std::string& generate_name) {
  json obj = ObjectFor(probe, 1);
  obj["metadata"].erase("name");
  obj["metadata"]["generateName"] = generate_name;
  absl::StatusOr<kube::Response> r = api_.Create(obj, /*dry_run=*/true);
  if (r.ok()) return Covers(obj["spec"], Field(r->body, "spec"));
  const std::optional<int> code = kube::HttpCodeOf(r.status());
  if (!code || (*code != 400 && *code != 422)) return r.status();  // cannot tell yet
  return false;
}

namespace {

// A slice of the pool holding one device with only the fields `keep` copies, so that nothing
// else the server might drop decides the probe.
template <typename Keep>
Slice ProbeSlice(const Pool& pool, const Device& from, Keep keep) {
  Slice probe;
  probe.driver = pool.driver;
  probe.pool = pool.name;
  probe.node_name = pool.node_name;
  Device d;
  d.name = from.name;
  keep(from, d);
  probe.devices.push_back(std::move(d));
  return probe;
}

}  // namespace

absl::StatusOr<bool> SlicePublisher::ListAttributesSupported(const Pool& pool) {
  if (lists_supported_) return *lists_supported_;
  for (const Device& from : pool.devices) {
    Pool one;
    one.devices.push_back(from);
    if (!HasListAttributes(one)) continue;
    const Slice probe = ProbeSlice(pool, from, [](const Device& f, Device& d) {
      for (const auto& [k, v] : f.attributes) {
        if (std::holds_alternative<StringList>(v)) d.attributes[k] = v;
      }
    });
    absl::StatusOr<bool> kept = DryRunKeeps(probe, "topodra-list-probe-");
    if (!kept.ok()) return kept.status();
    spdlog::info(
        "driver={} node={}: API server {} list-type attributes (DRAListTypeAttributes); "
        "publishing {}",
        opts_.driver, opts_.node_name, *kept ? "keeps" : "does not keep",
        *kept ? "them" : "scalar attributes only");
    lists_supported_ = *kept;
    probed_this_pass_.lists = *kept;
    return *kept;
  }
  return false;
}

absl::StatusOr<NodeAllocatableField> SlicePublisher::NodeAllocatableFieldKept(const Pool& pool) {
  if (node_allocatable_field_) return *node_allocatable_field_;
  const Device* from = nullptr;
  for (const Device& d : pool.devices) {
    if (d.extra.is_object() && d.extra.contains(kNodeAllocatableResources)) {
      from = &d;
      break;
    }
  }
  if (from == nullptr) return NodeAllocatableField::kNone;
  // The capacity goes along: a mapping names one of the device's capacities.
  const Slice v137 = ProbeSlice(pool, *from, [](const Device& f, Device& d) {
    d.capacity = f.capacity;
    d.allow_multiple_allocations = f.allow_multiple_allocations;
    d.extra[kNodeAllocatableResources] = f.extra.at(kNodeAllocatableResources);
  });
  NodeAllocatableField field = NodeAllocatableField::kNone;
  for (NodeAllocatableField f : {NodeAllocatableField::kV137, NodeAllocatableField::kV136}) {
    Pool one;
    one.devices = v137.devices;
    Slice probe = v137;
    probe.devices = WithNodeAllocatableField(std::move(one), f).devices;
    absl::StatusOr<bool> kept = DryRunKeeps(probe, "topodra-allocatable-probe-");
    if (!kept.ok()) return kept.status();
    if (*kept) {
      field = f;
      break;
    }
  }
  if (field == NodeAllocatableField::kNone && opts_.node_allocatable == FeatureMode::kOn) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--node-allocatable-mapping=on, but the API server keeps neither ",
        kNodeAllocatableResources, " (1.37) nor ", kNodeAllocatableResourceMappings,
        " (1.36) on ResourceSlice devices: is the DRANodeAllocatableResources feature gate on?"));
  }
  spdlog::info("driver={} node={}: API server keeps {} (DRANodeAllocatableResources); {}",
               opts_.driver, opts_.node_name,
               field == NodeAllocatableField::kNone ? "no node-allocatable field"
                                                    : NodeAllocatableFieldName(field),
               field == NodeAllocatableField::kNone
                   ? "publishing CPU devices without the cpu mapping"
                   : "CPU devices map to the node's cpu allocatable");
  node_allocatable_field_ = field;
  probed_this_pass_.node_allocatable = field;
  return field;
}

// Strips or converts the alpha-gated fields the server does not keep (probing once per field).
absl::StatusOr<Pool> SlicePublisher::ApplyGatedFields(Pool p, Form* form) {
  if (HasListAttributes(p)) {
    bool keep = opts_.list_attributes == FeatureMode::kOn;
    if (opts_.list_attributes == FeatureMode::kAuto) {
      absl::StatusOr<bool> ok = ListAttributesSupported(p);
      if (!ok.ok()) return ok.status();
      keep = *ok;
    }
    if (!keep) p = WithoutListAttributes(std::move(p));
  }
  form->lists = HasListAttributes(p);
  if (HasNodeAllocatable(p)) {
    NodeAllocatableField field = NodeAllocatableField::kNone;
    if (opts_.node_allocatable != FeatureMode::kOff) {
      absl::StatusOr<NodeAllocatableField> f = NodeAllocatableFieldKept(p);
      if (!f.ok()) return f.status();
      field = *f;
    }
    p = WithNodeAllocatableField(std::move(p), field);
    form->node_allocatable = field;
  }
  return p;
}

absl::StatusOr<std::vector<Slice>> SlicePublisher::DesiredSlices(std::optional<Pool> pool,
                                                                 Form* form) {
  *form = Form{};
  std::vector<Slice> out;
  if (!pool) return out;
  // Taints and list attributes first: they change how many devices fit in a slice, and so the
  // slices the mixins probe looks at.
  Pool p = *std::move(pool);
  if (HasTaints(p)) {
    bool keep = opts_.taints == TaintMode::kOn;
    if (opts_.taints == TaintMode::kAuto) {
      absl::StatusOr<bool> ok = TaintsSupported(p);
      if (!ok.ok()) return ok.status();
      keep = *ok;
    }
    if (!keep) p = WithoutTaints(std::move(p));
  }
  form->tainted = HasTaints(p);
  absl::StatusOr<Pool> gated = ApplyGatedFields(std::move(p), form);
  if (!gated.ok()) return gated.status();
  p = *std::move(gated);
  SliceForm slice_form = opts_.mixins == MixinMode::kOn ? SliceForm::kMixins : SliceForm::kFlat;
  if (opts_.mixins == MixinMode::kAuto) {
    absl::StatusOr<bool> ok = mixins_supported_ ? *mixins_supported_ : ProbeMixins(p);
    if (!ok.ok()) return ok.status();
    if (*ok) slice_form = SliceForm::kMixins;
  }
  absl::StatusOr<std::vector<Slice>> slices = BuildSlices(std::move(p), slice_form, opts_.limits);
  if (!slices.ok()) return slices.status();
  for (const Slice& s : *slices) {
    if (!s.mixins.empty()) form->mixins = true;
  }
  return slices;
}

// The probe needs one slice in mixin form, not the whole pool in it (on a 4096-CPU node that is
// most of the start-up's CPU time, thrown away by servers without KEP-5234): the first devices'
// slice, or the whole pool when those share nothing.
absl::StatusOr<bool> SlicePublisher::ProbeMixins(const Pool& pool) {
  // Only the head's devices are copied: on a 4096-CPU node copying the whole pool to cut it down
  // cost more than the probe's build.
  const size_t n = static_cast<size_t>(std::max(1, opts_.limits.max_devices_with_taints));
  Pool head;
  head.driver = pool.driver;
  head.name = pool.name;
  head.node_name = pool.node_name;
  head.devices.assign(pool.devices.begin(),
                      pool.devices.begin() + static_cast<long>(std::min(n, pool.devices.size())));
  const Pool* const forms[] = {&head, &pool};
  for (const Pool* from : forms) {
    absl::StatusOr<std::vector<Slice>> mixed = BuildSlices(*from, SliceForm::kMixins, opts_.limits);
    if (!mixed.ok()) return mixed.status();
    const bool any =
        std::any_of(mixed->begin(), mixed->end(), [](const Slice& s) { return !s.mixins.empty(); });
    if (any || from == &pool) return MixinsSupported(*mixed);
  }
  return false;
}

absl::Status SlicePublisher::WriteFailed(const absl::Status& st) {
  // Whatever failed, the next pass plans from what the server holds, not from a cache that may
  // be why this write failed: the same stale plan must not be sent again and again.
  informer_.Relist();
  // 409 (AlreadyExists on create, Conflict or a failed precondition on update and delete): the
  // cache was stale, which a wipe or another writer makes normal. Re-list and go on at once, a
  // few times in a row; a writer that keeps racing us gets the backoff.
  if (kube::HttpCodeOf(st) == 409 && stale_retries_ < kStaleRetries) {
    ++stale_retries_;
    retry_now_ = true;
  }
  return st;
}

// An update when the cache holds a slice of that name: it carries the cached resourceVersion.
bool SlicePublisher::PrepareWrite(json& obj) const {
  auto it = cache_.find(NameOf(obj));
  if (it == cache_.end()) return false;
  obj["metadata"]["resourceVersion"] =
      StringField(Field(it->second, "metadata"), "resourceVersion");
  return true;
}

// Create-or-update of one desired slice: an update that finds the slice gone (a wipe the watch
// has not told us all of yet) creates it, since the server cannot create on update. Touches
// nothing of the publisher but the API, so several may run at once; the caller caches the result.
absl::StatusOr<kube::Response> SlicePublisher::SendWrite(json& obj, bool update) {
  if (!update) return api_.Create(obj);
  absl::StatusOr<kube::Response> r = api_.Update(obj);
  if (r.ok() || kube::HttpCodeOf(r.status()) != 404) return r;
  spdlog::debug("driver={} node={}: ResourceSlice \"{}\" is gone; creating it", opts_.driver,
                opts_.node_name, NameOf(obj));
  obj["metadata"].erase("resourceVersion");
  return api_.Create(obj);
}

namespace {

constexpr absl::string_view kNotSent = "not sent: an earlier write failed";

// The answer SendWrites gives a write it left unsent.
bool NotSent(const absl::Status& s) {
  return s.code() == absl::StatusCode::kCancelled && s.message() == kNotSent;
}

}  // namespace

std::vector<absl::StatusOr<kube::Response>> SlicePublisher::SendWrites(Planned& planned,
                                                                       int64_t generation,
                                                                       size_t begin, size_t n,
                                                                       std::vector<char>& covered) {
  covered.assign(n, 0);
  std::vector<json>& objs = planned.objects;
  std::vector<absl::StatusOr<kube::Response>> out(n, absl::CancelledError(kNotSent));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  // Writes are taken in order, so every write left unsent comes after one that failed. A write
  // the server stored without some of the fields sent stops the rest too: the ordered loop of
  // the caller takes the fallback (no taints, flat slices) before more slices go out that way.
  auto work = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      try {
        // Built here when the writes were allowed before the planning thread got to it: the
        // workers build the slices' JSON side by side, each just before its create. Only this
        // worker touches objs[begin + i]; the cache is not written while the batch runs.
        json& obj = objs[begin + i];
        if (obj.is_null()) {
          obj = ObjectFor(planned.slices[begin + i], generation);
          // Building takes a while: another write may have failed meanwhile.
          if (failed) break;
        }
        out[i] = SendWrite(obj, PrepareWrite(obj));
        covered[i] =
            out[i].ok() && Covers(Field(objs[begin + i], "spec"), Field(out[i]->body, "spec"));
        if (!covered[i]) failed = true;
      } catch (const std::exception& e) {
        out[i] = absl::InternalError(absl::StrCat(
            "writing ResourceSlice \"", StringField(planned.slices[begin + i].metadata, "name"),
            "\": ", e.what()));
        failed = true;
      }
    }
  };
  {
    // jthreads join on every way out of this block, before `out` and the rest go away.
    std::vector<std::jthread> helpers;
    const size_t threads = std::min<size_t>(n, std::max(1, opts_.write_concurrency));
    for (size_t t = 1; t < threads; ++t) {
      try {
        helpers.emplace_back(work);
      } catch (const std::system_error& e) {
        // No thread to be had (pids limit): the ones started and this one do the writes.
        spdlog::warn("driver={} node={}: writing slices with {} threads, not {}: {}", opts_.driver,
                     opts_.node_name, t, threads, e.what());
        break;
      }
    }
    work();
  }
  return out;
}

// The server accepted `sent` and stored `stored`: an error when it dropped fields, after taking
// the fallback (no taints, flat slices) that explains it where auto mode allows one.
absl::Status SlicePublisher::CheckStored(const json& sent, const json& stored, const Form& form,
                                         bool covered) {
  if (covered || Covers(Field(sent, "spec"), Field(stored, "spec"))) return absl::OkStatus();
  const bool tainted = form.tainted;
  const bool mixin_form = form.mixins;
  if (form.node_allocatable != NodeAllocatableField::kNone) {
    const char* name = NodeAllocatableFieldName(form.node_allocatable);
    if (!DevicePartsKept(Field(sent, "spec"), Field(stored, "spec"),
                         [&](const json& d) { return Field(d, name); })) {
      // The server changed under us (an upgrade from 1.36 to 1.37 prunes the 1.36 field, a gate
      // turned off): probe again on the next pass.
      node_allocatable_field_.reset();
      informer_.Relist();
      if (opts_.node_allocatable == FeatureMode::kAuto) retry_now_ = true;
      return absl::UnavailableError(absl::StrCat("the API server dropped ", name,
                                                 "; probing the node-allocatable field again"));
    }
  }
  if (form.lists && opts_.list_attributes == FeatureMode::kAuto &&
      !DevicePartsKept(Field(sent, "spec"), Field(stored, "spec"), ListAttributesOf)) {
    lists_supported_ = false;
    spdlog::info(
        "driver={} node={}: API server dropped list-type attributes (DRAListTypeAttributes); "
        "publishing scalar attributes only",
        opts_.driver, opts_.node_name);
    informer_.Relist();
    retry_now_ = true;
    return absl::UnavailableError(
        "the API server dropped the list attributes; republishing without them");
  }
  if (tainted && opts_.taints == TaintMode::kAuto &&
      !TaintsKept(Field(sent, "spec"), Field(stored, "spec"))) {
    // Accepted, but the taints were dropped: DRADeviceTaints is off after all.
    taints_supported_ = false;
    LogTaintDecision(false);
    informer_.Relist();
    retry_now_ = true;
    return absl::UnavailableError(
        "the API server dropped the device taints; republishing without them");
  }
  if (mixin_form && opts_.mixins == MixinMode::kAuto) {
    // Accepted, but the fields were dropped: this server has no mixins after all.
    mixins_supported_ = false;
    spdlog::info(
        "driver={} node={}: API server dropped ResourceSlice mixins (KEP-5234); publishing "
        "flat slices",
        opts_.driver, opts_.node_name);
    informer_.Relist();
    retry_now_ = true;
    return absl::UnavailableError("the API server dropped spec.mixins; republishing flat slices");
  }
  informer_.Relist();
  return absl::FailedPreconditionError(
      absl::StrCat("the API server stored ResourceSlice \"", NameOf(sent),
                   "\" without some of the fields sent (a feature gate is off?); sent ",
                   DumpJson(Field(sent, "spec")).substr(0, 300)));
}

absl::Status SlicePublisher::WriteDesired(Planned& planned, const std::set<std::string>& wanted,
                                          int64_t generation, const Form& form, int64_t* writes) {
  std::vector<json>& desired = planned.objects;
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (wanted.count(it->first)) {
      ++it;
      continue;
    }
    const json& meta = Field(it->second, "metadata");
    if (absl::Status st =
            api_.Delete(it->first, StringField(meta, "uid"), StringField(meta, "resourceVersion"));
        !st.ok()) {
      return WriteFailed(st);
    }
    ++*writes;
    deleted_[it->first] = StringField(meta, "uid");
    it = cache_.erase(it);
  }
  for (json& obj : desired) {
    if (!obj.is_null()) obj["spec"]["pool"]["generation"] = generation;
  }
  // When the slices carry a field no probe of this Reconcile has shown the server keeps, the
  // first write goes alone: a server that drops it is found (and the fallback taken) before
  // anything else is written. Otherwise all go out opts_.write_concurrency at a time, which saves
  // one create's round trip at start; their answers are looked at in order, as if sent so.
  const bool first_alone = FirstWriteMustGoAlone(planned.slices, probed_this_pass_);
  for (size_t done = 0; done < desired.size();) {
    const size_t n =
        (done == 0 && first_alone) || opts_.write_concurrency <= 1 ? 1 : desired.size() - done;
    std::vector<char> covered;
    std::vector<absl::StatusOr<kube::Response>> results =
        SendWrites(planned, generation, done, n, covered);
    // Consumers may have seen this generation already: never publish it again.
    if (std::any_of(results.begin(), results.end(), [](const auto& r) { return r.ok(); })) {
      highest_generation_ = std::max(highest_generation_, generation);
    }
    for (size_t i = 0; i < n; ++i) {
      const json& obj = desired[done + i];
      if (!results[i].ok()) {
        // A writer may take a write, then see another fail and leave it unsent: the failure
        // that stopped it can come later in order. Report that one, so that a 409 re-lists at
        // once and a dropped field takes its fallback.
        for (size_t j = i + 1; j < n && NotSent(results[i].status()); ++j) {
          if (!results[j].ok()) {
            if (!NotSent(results[j].status())) return WriteFailed(results[j].status());
          } else if (!covered[j]) {
            absl::Status st = CheckStored(desired[done + j], results[j]->body, form, false);
            if (!st.ok()) return st;
          }
        }
        return WriteFailed(results[i].status());
      }
      ++*writes;
      if (absl::Status st = CheckStored(obj, results[i]->body, form, covered[i]); !st.ok()) {
        return st;
      }
      cache_[NameOf(obj)] = std::move(results[i]->body);
    }
    done += n;
  }
  spdlog::info("driver={} node={}: published {} ResourceSlices, pool generation {}, {} form{}{}{}",
               opts_.driver, opts_.node_name, desired.size(), generation,
               form.mixins ? "mixin" : "flat", form.tainted ? ", with device taints" : "",
               form.lists ? ", with list attributes" : "",
               form.node_allocatable == NodeAllocatableField::kNone
                   ? ""
                   : absl::StrCat(", with ", NodeAllocatableFieldName(form.node_allocatable)));
  return absl::OkStatus();
}

absl::Status SlicePublisher::Reconcile() {
  // Two plans at most: only a hold waits, and the pool that came during it is planned once more.
  // Without a hold a newer pool waits for the next pass, so a pool changing faster than a plan
  // takes (reservations, health republishes) is still written, one pass behind.
  // A probe answer from an earlier Reconcile still decides the form, but no longer vouches for
  // the server: see probed_this_pass_.
  probed_this_pass_ = ProbedFields{};
  for (int plan = 0;; ++plan) {
    std::shared_ptr<const Pool> shared;
    uint64_t version = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!desired_.known) return absl::OkStatus();  // nothing decided yet: touch nothing
      shared = desired_.pool;
      version = desired_.version;
    }
    // Copied outside the lock: building the slices consumes it.
    std::optional<Pool> pool;
    if (shared != nullptr) pool = *shared;
    if (node_uid_.empty()) {
      absl::StatusOr<std::string> uid = api_.NodeUid(opts_.node_name);
      if (uid.ok()) {
        node_uid_ = *uid;
      } else if (kube::HttpCodeOf(uid.status()) != 404) {
        return uid.status();
      }
      // A missing Node (tests, a node being deleted) only costs the owner reference.
    }
    Form form;
    absl::StatusOr<std::vector<Slice>> slices = DesiredSlices(std::move(pool), &form);
    if (!slices.ok()) return slices.status();
    Planned planned;
    planned.slices = *std::move(slices);
    planned.objects.resize(planned.slices.size());
    std::vector<json>* desired = &planned.objects;

    // Generations only grow, even when every slice was deleted behind our back: consumers that saw
    // the old pool must not mistake the new one for something older.
    int64_t generation = highest_generation_;
    for (const auto& [name, obj] : cache_) generation = std::max(generation, GenerationOf(obj));
    std::set<std::string> wanted;
    bool in_sync = desired->size() == cache_.size();
    for (size_t i = 0; i < planned.slices.size(); ++i) {
      const std::string name = StringField(planned.slices[i].metadata, "name");
      wanted.insert(name);
      auto it = cache_.find(name);
      // A slice the server lacks is written whatever its JSON: that is built later.
      if (it == cache_.end()) {
        in_sync = false;
        continue;
      }
      json& obj = planned.objects[i] = ObjectFor(planned.slices[i], generation);
      if (!Covers(obj["metadata"].value("ownerReferences", json::array()),
                  Field(Field(it->second, "metadata"), "ownerReferences")) ||
          !Covers(obj["spec"], Field(it->second, "spec"))) {
        in_sync = false;
      }
    }
    int64_t writes = 0;
    if (!in_sync) {
      // While the writes are held the node is still starting: build what is left now. Once they
      // may go, the writers build the rest, each slice just before its create.
      for (size_t i = 0; i < planned.slices.size() && WritesHeld(); ++i) {
        if (planned.objects[i].is_null()) {
          planned.objects[i] = ObjectFor(planned.slices[i], generation);
        }
      }
      // Held at start until the daemon may publish: what to write is known by then.
      bool waited = false;
      if (!WritesAllowed(&waited)) return absl::CancelledError("stopped before publishing");
      bool changed = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        changed = desired_.version != version;
      }
      // A new pool came while the writes were held: publish that one, not this.
      if (waited && changed && plan == 0) continue;
      // Every change gets a new generation in every slice, so consumers never mix old and new.
      ++generation;
      if (absl::Status st = WriteDesired(planned, wanted, generation, form, &writes); !st.ok()) {
        return st;
      }
    }
    highest_generation_ = std::max(highest_generation_, generation);
    stale_retries_ = 0;
    std::lock_guard<std::mutex> lock(mu_);
    status_.in_sync = true;
    status_.published_once = true;
    status_.generation = generation;
    status_.slices = static_cast<int>(desired->size());
    status_.mixins = form.mixins;
    status_.taints = form.tainted;
    status_.list_attributes = form.lists;
    status_.node_allocatable = form.node_allocatable;
    status_.writes += writes;
    synced_version_ = version;
    drift_ = false;
    cv_.notify_all();  // WaitPublished
    return absl::OkStatus();
  }
}

absl::Status SlicePublisher::SyncOnce() {
  retry_now_ = false;
  absl::Status st = informer_.List();
  if (st.ok()) st = Reconcile();
  // A discovery that the server dropped mixins or taints asks for one more pass without them
  // (each can happen once), and so does a stale cache (kStaleRetries times in a row at most).
  for (int pass = 0; pass < 2 + kStaleRetries && !st.ok() && retry_now_; ++pass) {
    retry_now_ = false;
    st = informer_.List();
    if (st.ok()) st = Reconcile();
  }
  retry_now_ = false;
  RecordResult(st);
  return st;
}

absl::Status SlicePublisher::Sync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!drift_ && desired_.version == synced_version_) return absl::OkStatus();
  }
  retry_now_ = false;
  absl::Status st = Reconcile();
  // As in SyncOnce: a fallback was taken (and logged), or the cache was stale and is re-listed:
  // the next pass is a new attempt, not a failure.
  for (int pass = 0; pass < 2 + kStaleRetries && !st.ok() && retry_now_; ++pass) {
    retry_now_ = false;
    st = informer_.List();
    if (st.ok()) st = Reconcile();
  }
  retry_now_ = false;
  return st;
}

kube::InformerHandler::Next SlicePublisher::OnEvent(const std::string& type, const json& obj) {
  const std::string rv = StringField(Field(obj, "metadata"), "resourceVersion");
  const std::string name = NameOf(obj);
  if (name.empty()) return Next::kContinue;
  if (auto gone = deleted_.find(name);
      gone != deleted_.end() && gone->second == StringField(Field(obj, "metadata"), "uid")) {
    if (type == "DELETED") deleted_.erase(gone);
    return Next::kContinue;
  }
  auto it = cache_.find(name);
  const bool known =
      it != cache_.end() && StringField(Field(it->second, "metadata"), "resourceVersion") == rv;
  if (type == "DELETED") {
    // Our own delete, already applied; or an older object of that name, deleted before we
    // created the one we hold (events replayed after a heal).
    if (it == cache_.end() || StringField(Field(it->second, "metadata"), "uid") !=
                                  StringField(Field(obj, "metadata"), "uid")) {
      return Next::kContinue;
    }
    // Someone else deletes our slices, most likely all of them (the kubelet's wipe at its start,
    // shared/spec kubelet-grpc.md §4.6): plan from what the server holds now, not from a cache
    // that the rest of the wipe's events have not reached yet.
    cache_.erase(it);
    drift_ = true;
    return Next::kRelist;
  }
  if (type == "ADDED" || type == "MODIFIED") {
    // A watch resumed from before two quick writes of ours replays the first one's echo after the
    // second's answer is cached: that older version must not replace the newer one (the next
    // update would carry a stale resourceVersion and get 409). resourceVersions are opaque, but
    // every server we know numbers them; only when both are numbers is the order trusted.
    if (it != cache_.end() && !known) {
      uint64_t have = 0, got = 0;
      const std::string have_text = StringField(Field(it->second, "metadata"), "resourceVersion");
      if (absl::SimpleAtoi(have_text, &have) && absl::SimpleAtoi(rv, &got) && got < have) {
        return Next::kContinue;
      }
    }
    // The echo of our own write: the cache holds that version already (the write's answer), and
    // copying every echoed slice cost the daemon CPU while the server was still taking the rest.
    if (known) return Next::kContinue;
    cache_[name] = obj;
    drift_ = true;
    return Next::kSync;
  }
  return Next::kContinue;
}

void SlicePublisher::Run() {
  {
    // Nothing is listed or touched before the daemon has decided what to publish.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stopped_ || desired_.known; });
    if (stopped_) return;
  }
  informer_.Run();
}

}  // namespace topodra::publish
