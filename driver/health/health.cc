#include "driver/health/health.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace topodra::health {
namespace {

// sysfs attribute files are one page at most; anything longer is not what we asked for.
constexpr size_t kMaxSysfsText = 4096;

std::string Quote(absl::string_view s) {
  constexpr size_t kShown = 64;
  std::string out = "\"";
  for (char c : s.substr(0, kShown)) {
    if (std::isprint(static_cast<unsigned char>(c))) {
      out += c;
    } else {
      out += absl::StrFormat("\\x%02x", static_cast<unsigned char>(c));
    }
  }
  if (s.size() > kShown) out += "...";
  return out + "\"";
}

absl::string_view Trimmed(const std::string& text) {
  return absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
}

bool ParseCount(absl::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::string Speed(double gts) {
  if (gts <= 0) return "no speed";
  return absl::StrFormat("%g GT/s", gts);
}

std::string Cut(std::string s) {
  if (s.size() > kMaxMessage) s = s.substr(0, kMaxMessage - 3) + "...";
  return s;
}

}  // namespace

absl::StatusOr<double> ParseLinkSpeed(const std::string& text) {
  if (text.size() > kMaxSysfsText) {
    return absl::InvalidArgumentError(
        absl::StrCat("link speed of ", text.size(), " bytes (want one short line)"));
  }
  const absl::string_view s = Trimmed(text);
  if (s == "Unknown" || s == "Unknown speed") return 0.0;
  // "<number> GT/s" with an optional " PCIe" (kernels from 5.x add it); the number has at most
  // one decimal point and no sign.
  std::vector<absl::string_view> words = absl::StrSplit(s, ' ', absl::SkipEmpty());
  const bool shape = (words.size() == 2 || (words.size() == 3 && words[2] == "PCIe")) &&
                     words[1] == "GT/s" && !words[0].empty() && words[0].size() <= 8;
  if (shape) {
    int dots = 0, digits = 0;
    bool ok = true;
    for (char c : words[0]) {
      if (c == '.') {
        ++dots;
      } else if (c >= '0' && c <= '9') {
        ++digits;
      } else {
        ok = false;
      }
    }
    if (ok && dots <= 1 && digits > 0 && words[0].front() != '.' && words[0].back() != '.') {
      double v = 0;
      const std::string number(words[0]);
      const auto r = std::from_chars(number.data(), number.data() + number.size(), v);
      if (r.ec == std::errc() && r.ptr == number.data() + number.size() && std::isfinite(v)) {
        return v;
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "link speed ", Quote(s), " (want \"<n> GT/s\", \"<n> GT/s PCIe\" or \"Unknown\")"));
}

absl::StatusOr<int> ParseLinkWidth(const std::string& text) {
  const absl::string_view s = Trimmed(text);
  int64_t v = 0;
  if (text.size() > kMaxSysfsText || !ParseCount(s, &v) || v > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("link width ", Quote(s), " (want a lane count from 0 to 64)"));
  }
  return static_cast<int>(v);
}

absl::StatusOr<AerFatal> ParseAerFatal(const std::string& text) {
  if (text.size() > kMaxSysfsText) {
    return absl::InvalidArgumentError(absl::StrCat("aer_dev_fatal of ", text.size(),
                                                   " bytes (want at most ", kMaxSysfsText, ")"));
  }
  AerFatal out;
  bool total_seen = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    // The name may hold spaces ("Undefined", "Data Link Protocol"): the count is the last word.
    const size_t space = line.find_last_of(" \t");
    int64_t count = 0;
    if (space == absl::string_view::npos || !ParseCount(line.substr(space + 1), &count)) {
      return absl::InvalidArgumentError(absl::StrCat("aer_dev_fatal line ", line_no, " ",
                                                     Quote(line), " (want \"<error> <count>\")"));
    }
    const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, space));
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("aer_dev_fatal line ", line_no, " ", Quote(line), " has no error name"));
    }
    if (name == "TOTAL_ERR_FATAL") {
      if (total_seen) {
        return absl::InvalidArgumentError("aer_dev_fatal has TOTAL_ERR_FATAL twice");
      }
      total_seen = true;
      out.total = count;
    } else if (count > 0) {
      out.nonzero.emplace_back(std::string(name), count);
    }
  }
  if (!total_seen) return absl::InvalidArgumentError("aer_dev_fatal has no TOTAL_ERR_FATAL line");
  return out;
}

const char* GpuProblemName(GpuProblem p) {
  switch (p) {
    case GpuProblem::kNone:
      return "";
    case GpuProblem::kUnbound:
      return "unbound";
    case GpuProblem::kLinkDown:
      return "link-down";
    case GpuProblem::kLinkDegraded:
      return "link-degraded";
    case GpuProblem::kAerFatal:
      return "aer-fatal";
  }
  return "";
}

Verdict AssessGpu(const std::string& bus_id, const std::optional<GpuFacts>& facts) {
  const std::string gpu = absl::StrCat("GPU ", bus_id);
  if (!facts) return {true, GpuProblem::kNone, Cut(absl::StrCat(gpu, ": no PCI facts in sysfs"))};
  const GpuFacts& f = *facts;
  auto bad = [&](GpuProblem p, std::string why) {
    return Verdict{false, p, Cut(absl::StrCat(gpu, ": ", why))};
  };
  if (!f.present) {
    return {true, GpuProblem::kNone, Cut(absl::StrCat(gpu, ": not in sysfs, health unknown"))};
  }
  if (!f.driver) return bad(GpuProblem::kUnbound, "no kernel driver is bound to it");
  if (f.aer_fatal && f.aer_fatal->total > 0) {
    std::vector<std::string> kinds;
    for (const auto& [name, n] : f.aer_fatal->nonzero) kinds.push_back(absl::StrCat(name, " ", n));
    return bad(
        GpuProblem::kAerFatal,
        absl::StrCat(f.aer_fatal->total, " fatal PCIe error", f.aer_fatal->total == 1 ? "" : "s",
                     " (AER", kinds.empty() ? "" : ": ", absl::StrJoin(kinds, ", "),
                     "); reset the device or reboot the node to clear"));
  }
  std::string link;
  if (f.link) {
    const PciLink& l = *f.link;
    link = absl::StrCat("PCIe ", Speed(l.speed), " x", l.width, " of ", Speed(l.max_speed), " x",
                        l.max_width);
    if (l.width == 0 || l.speed <= 0)
      return bad(GpuProblem::kLinkDown, link + ": the link is down");
    if (l.max_width > 0 && l.width < l.max_width) {
      return bad(GpuProblem::kLinkDegraded, link + ": the link trained to fewer lanes");
    }
  }
  std::string msg = absl::StrCat(gpu, ": healthy, driver ", *f.driver);
  if (!link.empty()) absl::StrAppend(&msg, ", ", link);
  if (!f.unreadable.empty())
    absl::StrAppend(&msg, "; unreadable: ", absl::StrJoin(f.unreadable, "; "));
  return {true, GpuProblem::kNone, Cut(std::move(msg))};
}

Tracker::Output Tracker::Update(const Input& in) {
  Output out;
  // CPU devices. Both maps are in name order: each device's place is found from the one before
  // (at 1024 CPUs the searches were most of a node's health update).
  auto hint = cpus_seen_.begin();
  for (const auto& [name, cpus] : in.cpu_devices) {
    hint = cpus_seen_.try_emplace(hint, name);
    hint->second |= cpus;
    ++hint;
  }
  out.cpus.reserve(cpus_seen_.size());
  auto now = in.cpu_devices.begin();
  for (auto it = cpus_seen_.begin(); it != cpus_seen_.end();) {
    const std::string& name = it->first;
    const CpuSet gone = it->second & in.offline;
    while (now != in.cpu_devices.end() && now->first < name) ++now;
    const bool published = now != in.cpu_devices.end() && now->first == name;
    if (!published && gone.Empty()) {
      it = cpus_seen_.erase(it);  // left the pool for another reason (reserved, a reservation)
      continue;
    }
    DeviceStatus s{in.pool, name, true, ""};
    if (!gone.Empty() && (in.individual_cpus || !published)) {
      s.healthy = false;
      s.message =
          absl::StrCat("CPU ", gone.ToString(), gone.Size() == 1 ? " is" : " are", " offline");
    } else if (!gone.Empty()) {
      s.message =
          absl::StrCat("CPU ", gone.ToString(), " offline: capacity ", now->second.Size(), " CPUs");
    } else {
      s.message = absl::StrCat("CPU ", now->second.ToString(), " online");
    }
    s.message = Cut(std::move(s.message));
    out.cpus.push_back(std::move(s));
    ++it;
  }
  // GPU devices: a published one has its verdict; one seen before and not published now is
  // gone from the bus until it comes back.
  for (const auto& [name, bus] : in.gpus) gpus_seen_[name] = bus;
  for (auto it = gpus_seen_.begin(); it != gpus_seen_.end();) {
    const auto& [name, bus] = *it;
    DeviceStatus s{in.pool, name, true, ""};
    if (!in.gpus.contains(name)) {
      s.healthy = false;
      s.message = absl::StrCat("GPU ", bus, ": gone from the PCI bus");
    } else if (auto v = in.gpu_verdicts.find(bus); v != in.gpu_verdicts.end()) {
      s.healthy = v->second.healthy;
      s.message = v->second.message;
    } else {
      s.message = absl::StrCat("GPU ", bus, ": healthy");
    }
    out.gpus.push_back(std::move(s));
    ++it;
  }
  return out;
}

}  // namespace topodra::health
