#include "topology/topology_codec.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace topodra::topology {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";

// Bytes that would end a field or a line, or make the text depend on an encoding.
bool NeedsEscape(unsigned char c) { return c <= 0x20 || c >= 0x7f || c == '%' || c == '~'; }

void PutText(std::string& out, absl::string_view text) {
  out.push_back(' ');
  if (text.empty()) {
    out.push_back('~');
    return;
  }
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (NeedsEscape(c)) {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    } else {
      out.push_back(ch);
    }
  }
}

void PutInt(std::string& out, int64_t v) { absl::StrAppend(&out, " ", v); }
void PutUint(std::string& out, uint64_t v) { absl::StrAppend(&out, " ", v); }

void PutSet(std::string& out, const CpuSet& set) {
  out.push_back(' ');
  if (set.Empty()) {
    out.push_back('~');
  } else {
    out += set.ToString();
  }
}

const char* TypeText(CoreType t) { return CoreTypeName(t); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The bound on every count in a record: no machine has more CPUs than a CpuSet holds.
constexpr int64_t kMaxCount = CpuSet::kMaxCpuId + 1;
// Bounds on the records of a model, far above any machine, so that a small damaged file cannot
// make the decoder allocate gigabytes. Packages, NUMA nodes, caches, cores and CPUs are bounded
// by kMaxCount; these have no CPU-sized bound of their own.
constexpr size_t kMaxKinds = 256;
constexpr size_t kMaxGpus = 4096;
constexpr size_t kMaxRoots = 4096;
// 64-bit words of all CPU sets of a model together (32 MiB): a model of 12,800 CPUs holds a
// few tens of thousands.
constexpr size_t kMaxSetWords = size_t{4} << 20;

// One record's fields. The first failure is kept (with the line it came from) and every later
// read returns a default, so a record is read straight through and checked once at the end.
class Fields {
 public:
  // The line is cut field by field as it is read: a line of many short fields costs no vector
  // of views the size of the line.
  Fields(absl::string_view line, int number, size_t* set_words)
      : line_(line), number_(number), set_words_(set_words) {
    const size_t space = line.find(' ');
    tag_ = line.substr(0, space);
    more_ = space != absl::string_view::npos;
    if (more_) rest_ = line.substr(space + 1);
  }

  absl::string_view tag() const { return tag_; }

  int64_t Int(const char* what, int64_t lo, int64_t hi) {
    const absl::string_view t = Take(what);
    if (!ok()) return 0;
    const bool negative = t[0] == '-';
    uint64_t magnitude = 0;
    if (!Digits(negative ? t.substr(1) : t, &magnitude) ||
        magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Fail(absl::StrCat(what, " \"", t, "\" is not a decimal integer"));
      return 0;
    }
    const int64_t v = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    if (v < lo || v > hi) {
      Fail(absl::StrCat(what, " ", v, " is outside [", lo, ", ", hi, "]"));
      return 0;
    }
    return v;
  }
  // Ids are whatever the machine reported; the ones that refer to another record are checked
  // against it once the whole model is read (CheckModel).
  int Id(const char* what) {
    return static_cast<int>(
        Int(what, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  }
  int Count(const char* what, int64_t max) { return static_cast<int>(Int(what, 0, max)); }

  uint64_t Uint(const char* what) {
    const absl::string_view t = Take(what);
    uint64_t v = 0;
    if (ok() && !Digits(t, &v)) Fail(absl::StrCat(what, " \"", t, "\" is not a decimal integer"));
    return v;
  }

  std::string Text(const char* what) {
    const absl::string_view t = Take(what);
    std::string out;
    if (!ok() || t == "~") return out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size(); ++i) {
      const auto c = static_cast<unsigned char>(t[i]);
      if (c != '%') {
        if (NeedsEscape(c)) {
          Fail(absl::StrCat(what, " has an unescaped byte at offset ", i));
          return {};
        }
        out.push_back(t[i]);
        continue;
      }
      const int hi = i + 2 < t.size() ? HexValue(t[i + 1]) : -1;
      const int lo = hi >= 0 ? HexValue(t[i + 2]) : -1;
      if (lo < 0) {
        Fail(absl::StrCat(what, " has a bad escape at offset ", i));
        return {};
      }
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    }
    return out;
  }

  CpuSet Set(const char* what) {
    const absl::string_view t = Take(what);
    if (!ok() || t == "~") return {};
    absl::StatusOr<CpuSet> set = CpuSet::Parse(std::string_view(t.data(), t.size()));
    if (!set.ok()) {
      Fail(absl::StrCat(what, ": ", set.status().message()));
      return {};
    }
    // One set is at most 8 KiB, but a short line can hold one ("0-65535"), so many lines
    // could make gigabytes: the sets of a whole model share a budget.
    *set_words_ += set->StoredWords();
    if (*set_words_ > kMaxSetWords) {
      Fail(absl::StrCat("the CPU sets so far exceed ", kMaxSetWords * 8, " bytes"));
      return {};
    }
    return *std::move(set);
  }

  CoreType Type(const char* what) {
    const absl::string_view t = Take(what);
    for (const CoreType c : {CoreType::kUnknown, CoreType::kPerformance, CoreType::kEfficiency}) {
      if (t == TypeText(c)) return c;
    }
    if (ok()) Fail(absl::StrCat(what, " \"", t, "\" is not a core type"));
    return CoreType::kUnknown;
  }

  void Fail(std::string message) {
    if (ok()) error_ = std::move(message);
  }
  bool ok() const { return error_.empty(); }

  // Every field read and each was good.
  absl::Status Done() {
    if (ok() && more_) {
      Fail(absl::StrCat(1 + std::count(rest_.begin(), rest_.end(), ' '), " fields too many"));
    }
    if (ok()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("line ", number_, " (\"", Excerpt(), "\"): ", error_));
  }

 private:
  absl::string_view Take(const char* what) {
    if (!ok()) return {};
    if (!more_) {
      Fail(absl::StrCat("no ", what));
      return {};
    }
    const size_t space = rest_.find(' ');
    const absl::string_view t = rest_.substr(0, space);
    more_ = space != absl::string_view::npos;
    rest_ = more_ ? rest_.substr(space + 1) : absl::string_view();
    if (t.empty()) Fail(absl::StrCat("empty ", what));
    return t;
  }

  // Canonical decimal: digits only, no leading zero, no overflow.
  static bool Digits(absl::string_view t, uint64_t* v) {
    if (t.empty() || t.size() > 20 || (t.size() > 1 && t[0] == '0')) return false;
    uint64_t out = 0;
    for (const char c : t) {
      if (c < '0' || c > '9') return false;
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (out > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
      out = out * 10 + d;
    }
    *v = out;
    return true;
  }

  std::string Excerpt() const {
    return line_.size() <= 60 ? std::string(line_) : absl::StrCat(line_.substr(0, 60), "...");
  }

  absl::string_view line_;
  int number_;
  size_t* set_words_;
  absl::string_view tag_;
  absl::string_view rest_;  // the fields not read yet
  bool more_ = false;       // a field follows (possibly empty)
  std::string error_;
};

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// What the daemon relies on without checking: see DecodeTopology in the header.
absl::Status CheckModel(const Topology& t) {
  if (t.cpus.empty()) return Invalid("no CPU");
  for (size_t i = 0; i < t.cpus.size(); ++i) {
    const Cpu& c = t.cpus[i];
    if (i > 0 && c.id <= t.cpus[i - 1].id) {
      return Invalid(absl::StrCat("CPU ", c.id, " is not after CPU ", t.cpus[i - 1].id));
    }
    if (c.id < 0 || c.id > CpuSet::kMaxCpuId) return Invalid(absl::StrCat("CPU id ", c.id));
    if (c.core < 0 || static_cast<size_t>(c.core) >= t.cores.size()) {
      return Invalid(absl::StrCat("CPU ", c.id, ": core ", c.core, " of ", t.cores.size()));
    }
    if (!t.cores[static_cast<size_t>(c.core)].cpus.Contains(c.id)) {
      return Invalid(absl::StrCat("CPU ", c.id, " is not among the CPUs of its core ", c.core));
    }
  }
  CpuSet listed;
  for (const Cpu& c : t.cpus) listed.Add(c.id);
  for (const Core& c : t.cores) {
    if (!c.cpus.IsSubsetOf(listed)) {
      return Invalid(absl::StrCat("core ", c.id, ": CPUs ", (c.cpus - listed).ToString(),
                                  " have no cpu record"));
    }
    auto index_ok = [](int i, size_t n) { return i == kNone || (i >= 0 && size_t(i) < n); };
    if (!index_ok(c.l3, t.l3.size())) {
      return Invalid(absl::StrCat("core ", c.id, ": L3 ", c.l3, " of ", t.l3.size()));
    }
    if (!index_ok(c.l2, t.l2.size())) {
      return Invalid(absl::StrCat("core ", c.id, ": L2 ", c.l2, " of ", t.l2.size()));
    }
    if (c.numa != kNone && t.FindNuma(c.numa) == nullptr) {
      return Invalid(absl::StrCat("core ", c.id, ": no NUMA node ", c.numa));
    }
    if (c.package != kNone && t.FindPackage(c.package) == nullptr) {
      return Invalid(absl::StrCat("core ", c.id, ": no package ", c.package));
    }
  }
  // Duplicates would make lookups by id ambiguous and the order Finalize sorts into depend on
  // the sort's treatment of equal keys.
  std::set<int> numa_ids, package_ids;
  for (const NumaNode& n : t.numa_nodes) {
    if (!numa_ids.insert(n.id).second) return Invalid(absl::StrCat("NUMA node ", n.id, " twice"));
  }
  for (const Package& p : t.packages) {
    if (!package_ids.insert(p.id).second) return Invalid(absl::StrCat("package ", p.id, " twice"));
  }
  std::set<std::string> names;
  for (const Gpu& g : t.gpus) {
    if (!names.insert(g.pci_bus_id).second) {
      return Invalid(absl::StrCat("GPU \"", g.pci_bus_id, "\" twice"));
    }
    if (g.numa != kNone && t.FindNuma(g.numa) == nullptr) {
      return Invalid(absl::StrCat("GPU \"", g.pci_bus_id, "\": no NUMA node ", g.numa));
    }
  }
  names.clear();
  for (const PcieRoot& r : t.pcie_roots) {
    if (!names.insert(r.name).second) {
      return Invalid(absl::StrCat("PCIe root \"", r.name, "\" twice"));
    }
    if (r.numa != kNone && t.FindNuma(r.numa) == nullptr) {
      return Invalid(absl::StrCat("PCIe root \"", r.name, "\": no NUMA node ", r.numa));
    }
  }
  const size_t n = t.numa_distances.size();
  if (n != 0 && n != t.numa_nodes.size()) {
    return Invalid(
        absl::StrCat("distances for ", n, " NUMA nodes, the machine has ", t.numa_nodes.size()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeTopology(const Topology& t) {
  std::string out;
  // About 20 bytes per CPU and per core on large machines: one allocation.
  out.reserve(256 + 24 * t.cpus.size() + 48 * t.cores.size());
  out += "source";
  PutText(out, t.source);
  out.push_back('\n');
  for (const Package& p : t.packages) {
    out += "package";
    PutInt(out, p.id);
    PutSet(out, p.cpus);
    out.push_back('\n');
  }
  for (const NumaNode& n : t.numa_nodes) {
    out += "numa";
    PutInt(out, n.id);
    PutSet(out, n.cpus);
    PutSet(out, n.local_cpus);
    PutText(out, n.subtype);
    PutUint(out, n.memory_bytes);
    out.push_back('\n');
  }
  for (const auto* caches : {&t.l3, &t.l2}) {
    for (const Cache& c : *caches) {
      out += caches == &t.l3 ? "l3" : "l2";
      PutInt(out, c.level);
      PutInt(out, c.id);
      PutUint(out, c.size_bytes);
      PutSet(out, c.cpus);
      out.push_back('\n');
    }
  }
  for (const Core& c : t.cores) {
    out += "core";
    PutInt(out, c.os_id);
    PutInt(out, c.package);
    PutInt(out, c.numa);
    PutInt(out, c.l3);
    PutInt(out, c.l2);
    out.push_back(' ');
    out += TypeText(c.type);
    PutSet(out, c.cpus);
    out.push_back('\n');
  }
  for (const Cpu& c : t.cpus) {
    out += "cpu";
    PutInt(out, c.id);
    PutInt(out, c.core);
    out.push_back('\n');
  }
  for (const CpuKind& k : t.cpu_kinds) {
    out += "kind";
    PutInt(out, k.efficiency);
    out.push_back(' ');
    out += TypeText(k.type);
    PutSet(out, k.cpus);
    PutUint(out, k.infos.size());
    for (const auto& [key, value] : k.infos) {
      PutText(out, key);
      PutText(out, value);
    }
    out.push_back('\n');
  }
  for (const Gpu& g : t.gpus) {
    out += "gpu";
    PutText(out, g.pci_bus_id);
    PutUint(out, g.vendor_id);
    PutUint(out, g.device_id);
    PutUint(out, g.class_id);
    PutText(out, g.vendor_name);
    PutText(out, g.device_name);
    PutText(out, g.model);
    PutText(out, g.uuid);
    PutInt(out, g.numa);
    PutSet(out, g.local_cpus);
    PutText(out, g.pcie_root);
    PutUint(out, g.memory_bytes);
    PutUint(out, g.pci_path.size());
    for (const std::string& bridge : g.pci_path) PutText(out, bridge);
    PutUint(out, g.os_devices.size());
    for (const OsDevice& d : g.os_devices) {
      PutText(out, d.name);
      PutText(out, d.kind);
      PutText(out, d.subtype);
    }
    out.push_back('\n');
  }
  for (const PcieRoot& r : t.pcie_roots) {
    out += "root";
    PutText(out, r.name);
    PutSet(out, r.local_cpus);
    PutInt(out, r.numa);
    out.push_back('\n');
  }
  out += "offline";
  PutSet(out, t.offline);
  out.push_back('\n');
  if (!t.numa_distances.empty()) {
    out += "distances";
    PutUint(out, t.numa_distances.size());
    for (const std::vector<uint64_t>& row : t.numa_distances) {
      for (const uint64_t v : row) PutUint(out, v);
    }
    out.push_back('\n');
  }
  return out;
}

absl::StatusOr<Topology> DecodeTopology(absl::string_view text) {
  if (text.empty() || text.back() != '\n') {
    return Invalid("the text does not end with a complete line");
  }
  text.remove_suffix(1);
  Topology t;
  bool seen_source = false, seen_offline = false, seen_distances = false;
  int number = 0;
  size_t set_words = 0;
  for (const absl::string_view line : absl::StrSplit(text, '\n')) {
    Fields f(line, ++number, &set_words);
    const absl::string_view tag = f.tag();
    auto once = [&f](bool& seen) {
      if (seen) f.Fail("a second record of this kind");
      seen = true;
    };
    if (tag == "source") {
      once(seen_source);
      t.source = f.Text("source");
    } else if (tag == "package") {
      Package p;
      p.id = f.Id("id");
      p.cpus = f.Set("cpus");
      t.packages.push_back(std::move(p));
    } else if (tag == "numa") {
      NumaNode n;
      n.id = f.Id("id");
      n.cpus = f.Set("cpus");
      n.local_cpus = f.Set("local cpus");
      n.subtype = f.Text("subtype");
      n.memory_bytes = f.Uint("memory");
      t.numa_nodes.push_back(std::move(n));
    } else if (tag == "l3" || tag == "l2") {
      Cache c;
      c.level = f.Id("level");
      c.id = f.Id("id");
      c.size_bytes = f.Uint("size");
      c.cpus = f.Set("cpus");
      (tag == "l3" ? t.l3 : t.l2).push_back(std::move(c));
    } else if (tag == "core") {
      Core c;
      c.id = static_cast<int>(t.cores.size());
      c.os_id = f.Id("os id");
      c.package = f.Id("package");
      c.numa = f.Id("NUMA node");
      c.l3 = f.Id("L3");
      c.l2 = f.Id("L2");
      c.type = f.Type("type");
      c.cpus = f.Set("cpus");
      t.cores.push_back(std::move(c));
    } else if (tag == "cpu") {
      Cpu c;
      c.id = f.Id("id");
      c.core = f.Id("core");
      t.cpus.push_back(c);
    } else if (tag == "kind") {
      CpuKind k;
      k.efficiency = f.Id("efficiency");
      k.type = f.Type("type");
      k.cpus = f.Set("cpus");
      for (int i = f.Count("infos", kMaxCount); i > 0 && f.ok(); --i) {
        std::string key = f.Text("info name");
        if (!k.infos.emplace(std::move(key), f.Text("info value")).second) {
          f.Fail("an info named twice");
        }
      }
      t.cpu_kinds.push_back(std::move(k));
    } else if (tag == "gpu") {
      Gpu g;
      g.pci_bus_id = f.Text("PCI bus id");
      g.vendor_id = static_cast<uint16_t>(f.Int("vendor id", 0, 0xffff));
      g.device_id = static_cast<uint16_t>(f.Int("device id", 0, 0xffff));
      g.class_id = static_cast<uint16_t>(f.Int("class id", 0, 0xffff));
      g.vendor_name = f.Text("vendor name");
      g.device_name = f.Text("device name");
      g.model = f.Text("model");
      g.uuid = f.Text("uuid");
      g.numa = f.Id("NUMA node");
      g.local_cpus = f.Set("local cpus");
      g.pcie_root = f.Text("PCIe root");
      g.memory_bytes = f.Uint("memory");
      for (int i = f.Count("bridges", kMaxCount); i > 0 && f.ok(); --i) {
        g.pci_path.push_back(f.Text("bridge"));
      }
      for (int i = f.Count("OS devices", kMaxCount); i > 0 && f.ok(); --i) {
        OsDevice d;
        d.name = f.Text("OS device name");
        d.kind = f.Text("OS device kind");
        d.subtype = f.Text("OS device subtype");
        g.os_devices.push_back(std::move(d));
      }
      t.gpus.push_back(std::move(g));
    } else if (tag == "root") {
      PcieRoot r;
      r.name = f.Text("name");
      r.local_cpus = f.Set("local cpus");
      r.numa = f.Id("NUMA node");
      t.pcie_roots.push_back(std::move(r));
    } else if (tag == "offline") {
      once(seen_offline);
      t.offline = f.Set("offline CPUs");
    } else if (tag == "distances") {
      once(seen_distances);
      // NUMA records come first, so the matrix is never larger than they make it; and never
      // larger than Linux's 1024 nodes make it (8 MiB), whatever a file's count of nodes.
      const int n = f.Count("NUMA nodes", std::min<int64_t>(1024, t.numa_nodes.size()));
      t.numa_distances.assign(static_cast<size_t>(n), std::vector<uint64_t>(size_t(n), 0));
      for (std::vector<uint64_t>& row : t.numa_distances) {
        for (uint64_t& v : row) v = f.Uint("distance");
      }
    } else {
      f.Fail(absl::StrCat("unknown record \"", tag, "\""));
    }
    const size_t most = std::max({t.packages.size(), t.numa_nodes.size(), t.l3.size(), t.l2.size(),
                                  t.cores.size(), t.cpus.size()});
    if (most > static_cast<size_t>(kMaxCount) || t.cpu_kinds.size() > kMaxKinds ||
        t.gpus.size() > kMaxGpus || t.pcie_roots.size() > kMaxRoots) {
      f.Fail("more records of this kind than any machine has");
    }
    if (absl::Status st = f.Done(); !st.ok()) return st;
  }
  if (!seen_source || !seen_offline) {
    return Invalid(absl::StrCat("no \"", seen_source ? "offline" : "source", "\" record"));
  }
  if (absl::Status st = CheckModel(t); !st.ok()) return st;
  t.Finalize();
  return t;
}

}  // namespace topodra::topology
