#include "driver/cgroup/hook_core.h"

#include <charconv>

namespace topodra::cgroup::hook {
namespace {

constexpr int kMaxCpu = (1 << 16) - 1;

std::optional<int> Number(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  int v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > kMaxCpu) return std::nullopt;
  return v;
}

std::string Escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::optional<std::set<int>> ParseList(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::set<int> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string_view part = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const size_t dash = part.find('-');
    const std::optional<int> lo = Number(part.substr(0, dash));
    const std::optional<int> hi =
        dash == std::string_view::npos ? lo : Number(part.substr(dash + 1));
    if (!lo || !hi || *hi < *lo) return std::nullopt;
    for (int c = *lo; c <= *hi; ++c) out.insert(c);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string FormatList(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int lo = *it;
    int hi = lo;
    for (++it; it != cpus.end() && *it == hi + 1; ++it) hi = *it;
    if (!out.empty()) out += ',';
    out += std::to_string(lo);
    if (hi != lo) out += "-" + std::to_string(hi);
  }
  return out;
}

std::optional<std::string> CpusetCgroupOf(std::string_view proc_cgroup, bool v2) {
  while (!proc_cgroup.empty()) {
    const size_t nl = proc_cgroup.find('\n');
    const std::string_view line = proc_cgroup.substr(0, nl);
    proc_cgroup = nl == std::string_view::npos ? std::string_view() : proc_cgroup.substr(nl + 1);
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    bool match = false;
    if (v2) {
      match = line.substr(0, c1) == "0" && controllers.empty();
    } else {
      std::string_view rest = controllers;
      while (!rest.empty() && !match) {
        const size_t comma = rest.find(',');
        match = rest.substr(0, comma) == "cpuset";
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
    if (!match) continue;
    while (!path.empty() && path.front() == '/') path.remove_prefix(1);
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    if (path.empty() || path.find("..") != std::string_view::npos) return std::nullopt;
    return std::string(path);
  }
  return std::nullopt;
}

std::vector<std::string> Chain(const std::string& relative) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t slash = relative.find('/', pos);
    out.push_back(relative.substr(0, slash));
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return out;
}

std::string RecordJson(const std::string& container_id, const std::string& claim_uid,
                       const std::string& cpus, const std::string& cgroup,
                       const std::string& mems) {
  return "{\"container\":\"" + Escaped(container_id) + "\",\"claim\":\"" + Escaped(claim_uid) +
         "\",\"cpus\":\"" + Escaped(cpus) + "\",\"cgroup\":\"" + Escaped(cgroup) + "\"" +
         (mems.empty() ? std::string() : ",\"mems\":\"" + Escaped(mems) + "\"") + "}\n";
}

std::optional<std::set<int>> UnionMems(const std::vector<std::optional<std::set<int>>>& records) {
  std::set<int> out;
  for (const std::optional<std::set<int>>& r : records) {
    if (!r || r->empty()) return std::nullopt;
    out.insert(r->begin(), r->end());
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace topodra::cgroup::hook
