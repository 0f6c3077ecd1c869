#include "driver/node/topology_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "driver/state/checkpoint.h"
#include "topology/topology_codec.h"

extern char** environ;

namespace topodra::node {
namespace {

constexpr char kMagic[] = "topodra-topology-cache";
// hwloc reads XML exports far smaller than this; the bound keeps a wrong path from being read.
constexpr size_t kMaxTopologyFileBytes = 512 << 20;

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("damaged: ", what));
}

std::string Hex32(uint32_t v) { return absl::StrFormat("%08x", v); }

// A sysfs or procfs file's one line; "absent" when the kernel has no such file.
absl::StatusOr<std::string> ReadLine(const std::string& path) {
  absl::StatusOr<std::string> text = files::ReadFileBounded(path, 1 << 16, files::Links::kFollow);
  if (absl::IsNotFound(text.status())) return std::string("absent");
  if (!text.ok()) return text.status();
  return std::string(absl::StripAsciiWhitespace(*text));
}

// The names in a sysfs directory, as a count and a CRC-32C of the sorted names: a device added,
// removed or renamed changes it. "absent" for a directory the kernel does not have.
absl::StatusOr<std::string> Listing(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::string("absent");
    return files::ErrnoStatus(errno, "stat", dir);
  }
  absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(dir);
  if (!entries.ok()) return entries.status();
  std::vector<std::string> names;
  for (files::DirEntry& e : *entries) names.push_back(std::move(e.name));
  std::sort(names.begin(), names.end());
  return absl::StrCat(names.size(), " names, crc32c ",
                      Hex32(state::Crc32c(absl::StrJoin(names, "\n"))));
}

// An XML export: what hwloc would read. The bytes' checksum, not only size and time: a file
// rewritten within the same second with the same size is still seen.
absl::StatusOr<std::string> FileKey(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return files::ErrnoStatus(errno, "stat", path);
  absl::StatusOr<std::string> bytes =
      files::ReadFileBounded(path, kMaxTopologyFileBytes, files::Links::kFollow);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() > kMaxTopologyFileBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", path, "\" is larger than ", kMaxTopologyFileBytes, " bytes"));
  }
  return absl::StrCat(bytes->size(), " bytes, mtime ", st.st_mtim.tv_sec, ".",
                      absl::StrFormat("%09d", st.st_mtim.tv_nsec), ", crc32c ",
                      Hex32(state::Crc32c(*bytes)));
}

// The daemon's binary: hwloc's API version is the same across a release series and the daemon
// version is the project's, so a rebuilt image on the same boot is told apart only by its file.
absl::StatusOr<std::string> ExecutableKey(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return files::ErrnoStatus(errno, "stat", path);
  return absl::StrCat(st.st_size, " bytes, mtime ", st.st_mtim.tv_sec, ".",
                      absl::StrFormat("%09d", st.st_mtim.tv_nsec), ", device ", st.st_dev,
                      ", inode ", st.st_ino);
}

// TopologySource::Describe's spelling, without linking the discoverer (the file's fuzz target
// and tests of the pure parts do without hwloc).
std::string SourceText(const topology::TopologySource& source) {
  switch (source.kind) {
    case topology::TopologySource::Kind::kXmlFile:
      return "xml:" + source.value;
    case topology::TopologySource::Kind::kSynthetic:
      return "synthetic:" + source.value;
    case topology::TopologySource::Kind::kLive:
      break;
  }
  return "live";
}

std::string Shorten(const std::string& s) {
  return s.size() <= 80 ? s : absl::StrCat(s.substr(0, 77), "...");
}

}  // namespace

std::vector<std::string> HwlocEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "HWLOC_", 6) == 0) out.emplace_back(*e);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string KeyDifference(const MachineKey& stored, const MachineKey& now) {
  for (size_t i = 0; i < std::max(stored.entries.size(), now.entries.size()); ++i) {
    if (i >= stored.entries.size()) return absl::StrCat(now.entries[i].first, " is new");
    if (i >= now.entries.size()) return absl::StrCat(stored.entries[i].first, " is gone");
    const auto& [name, before] = stored.entries[i];
    const auto& [now_name, after] = now.entries[i];
    if (name != now_name) return absl::StrCat(name, " is now ", now_name);
    if (before != after) {
      return absl::StrCat(name, " \"", absl::CEscape(Shorten(before)), "\" is now \"",
                          absl::CEscape(Shorten(after)), "\"");
    }
  }
  return "nothing differs";
}

absl::StatusOr<MachineKey> ReadMachineKey(const MachineKeyInputs& in) {
  const std::string root = in.root == "/" ? "" : in.root;
  MachineKey key;
  auto add = [&key](std::string name, absl::StatusOr<std::string> value) -> absl::Status {
    if (!value.ok()) return value.status();
    key.entries.emplace_back(std::move(name), *std::move(value));
    return absl::OkStatus();
  };
  absl::Status st = add("daemon", in.version);
  if (st.ok()) st = add("discoverer", in.discoverer);
  if (st.ok()) {
    st = add("executable", in.executable.empty() ? absl::StatusOr<std::string>("none")
                                                 : ExecutableKey(in.executable));
  }
  if (st.ok()) st = add("source", SourceText(in.source));
  if (st.ok()) st = add("hwloc_environment", absl::StrJoin(in.hwloc_environment, "\n"));
  if (st.ok()) st = add("boot_id", ReadLine(root + "/proc/sys/kernel/random/boot_id"));
  switch (in.source.kind) {
    case topology::TopologySource::Kind::kXmlFile:
      if (st.ok()) st = add("file", FileKey(in.source.value));
      break;
    case topology::TopologySource::Kind::kSynthetic:
      break;  // the description, in the source, is all hwloc reads
    case topology::TopologySource::Kind::kLive:
      for (const char* file : {"/sys/devices/system/cpu/online", "/sys/devices/system/cpu/present",
                               "/sys/devices/system/node/online"}) {
        if (st.ok()) st = add(file, ReadLine(root + file));
      }
      for (const char* dir : {"/sys/bus/pci/devices", "/sys/class/drm"}) {
        if (st.ok()) st = add(dir, Listing(root + dir));
      }
      break;
  }
  if (!st.ok()) return st;
  return key;
}

std::string EncodeTopologyCache(const MachineKey& key, const topology::Topology& topo) {
  std::string body;
  for (const auto& [name, value] : key.entries) {
    absl::StrAppend(&body, "key ", name, " ", absl::CEscape(value), "\n");
  }
  body += "model\n";
  body += topology::EncodeTopology(topo);
  return absl::StrCat(kMagic, " ", kTopologyCacheVersion, "\nchecksum ", Hex32(state::Crc32c(body)),
                      "\n", body);
}

absl::StatusOr<StoredTopology> DecodeTopologyCache(absl::string_view text) {
  // The version before the checksum: another version may checksum otherwise.
  const size_t first_end = text.find('\n');
  if (first_end == absl::string_view::npos) return Corrupt("no complete first line");
  const absl::string_view first = text.substr(0, first_end);
  const std::string prefix = absl::StrCat(kMagic, " ");
  int version = 0;
  if (!absl::StartsWith(first, prefix)) {
    return Corrupt(absl::StrCat("not a topology cache (first line \"",
                                absl::CEscape(Shorten(std::string(first))), "\")"));
  }
  if (!absl::SimpleAtoi(first.substr(prefix.size()), &version) || version < 1) {
    return Corrupt(
        absl::StrCat("bad version \"", absl::CEscape(first.substr(prefix.size())), "\""));
  }
  if (version != kTopologyCacheVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("version ", version, ", this daemon reads version ", kTopologyCacheVersion));
  }
  text.remove_prefix(first_end + 1);
  const size_t second_end = text.find('\n');
  const absl::string_view checksum_prefix = "checksum ";
  if (second_end == absl::string_view::npos ||
      !absl::StartsWith(text.substr(0, second_end), checksum_prefix)) {
    return Corrupt("no checksum line");
  }
  const absl::string_view stored_sum =
      text.substr(checksum_prefix.size(), second_end - checksum_prefix.size());
  const absl::string_view body = text.substr(second_end + 1);
  const std::string sum = Hex32(state::Crc32c(body));
  if (stored_sum != sum) {
    return Corrupt(absl::StrCat("checksum \"", absl::CEscape(stored_sum), "\" stored, ", sum,
                                " computed (a torn or altered file)"));
  }
  StoredTopology out;
  absl::string_view rest = body;
  while (true) {
    const size_t end = rest.find('\n');
    if (end == absl::string_view::npos) return Corrupt("no \"model\" line");
    const absl::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 1);
    if (line == "model") break;
    const absl::string_view key_prefix = "key ";
    const size_t space = line.find(' ', key_prefix.size());
    std::string value;
    if (!absl::StartsWith(line, key_prefix) || space == absl::string_view::npos ||
        space == key_prefix.size() || !absl::CUnescape(line.substr(space + 1), &value)) {
      return Corrupt(
          absl::StrCat("bad key line \"", absl::CEscape(Shorten(std::string(line))), "\""));
    }
    out.key.entries.emplace_back(
        std::string(line.substr(key_prefix.size(), space - key_prefix.size())), std::move(value));
  }
  absl::StatusOr<topology::Topology> topo = topology::DecodeTopology(rest);
  if (!topo.ok()) return Corrupt(absl::StrCat("model: ", topo.status().message()));
  out.topology = *std::move(topo);
  return out;
}

TopologyCache::TopologyCache(std::string state_dir, MachineKeyInputs inputs)
    : dir_(std::move(state_dir)),
      path_(absl::StrCat(dir_, "/", kTopologyCacheFile)),
      inputs_(std::move(inputs)) {}

absl::StatusOr<topology::Topology> TopologyCache::Load(const MachineKey& key) const {
  absl::StatusOr<std::string> text = files::ReadFileBounded(path_, kMaxTopologyCacheBytes);
  if (!text.ok()) return text.status();
  if (text->size() > kMaxTopologyCacheBytes) {
    return absl::DataLossError(
        absl::StrCat("\"", path_, "\" is larger than ", kMaxTopologyCacheBytes, " bytes"));
  }
  absl::StatusOr<StoredTopology> stored = DecodeTopologyCache(*text);
  if (!stored.ok()) {
    return absl::Status(stored.status().code(),
                        absl::StrCat("\"", path_, "\": ", stored.status().message()));
  }
  if (!(stored->key == key)) {
    return absl::FailedPreconditionError(
        absl::StrCat("stored for another machine or boot: ", KeyDifference(stored->key, key)));
  }
  return std::move(stored->topology);
}

absl::Status TopologyCache::Store(const MachineKey& key, const topology::Topology& topo) const {
  // A crash between the temporary file's creation and its rename leaves it behind, under a
  // name (the pid) no later Store reuses.
  absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(dir_);
  if (!entries.ok()) return entries.status();
  for (const files::DirEntry& e : *entries) {
    if (!files::IsTempNameFor(e.name, kTopologyCacheFile)) continue;
    const std::string path = absl::StrCat(dir_, "/", e.name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return files::ErrnoStatus(errno, "remove stale temporary file", path);
    }
  }
  return files::WriteFileAtomically(dir_, kTopologyCacheFile, EncodeTopologyCache(key, topo), 0600,
                                    0700);
}

absl::StatusOr<StartTopology> FindTopologyAtStart(
    const TopologyCache* cache,
    const std::function<absl::StatusOr<topology::Topology>()>& discover) {
  StartTopology out;
  std::string why_not = "--topology-cache=off";
  if (cache != nullptr) {
    absl::StatusOr<MachineKey> key = cache->ReadKey();
    if (key.ok()) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<topology::Topology> stored = cache->Load(*key);
      if (stored.ok()) {
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
        out.topology = *std::move(stored);
        out.from_cache = true;
        out.key = *std::move(key);
        out.note = absl::StrFormat(
            "machine read from %s (stored on this boot, key matches) in %.1f ms; discovering it "
            "in the background to confirm",
            cache->path(), static_cast<double>(us) / 1000.0);
        return out;
      }
      why_not = absl::IsNotFound(stored.status())
                    ? absl::StrCat("no stored machine at ", cache->path())
                    : std::string(stored.status().message());
      out.key = *std::move(key);
    } else {
      why_not = absl::StrCat("the machine's key cannot be read (", key.status().message(),
                             "), so nothing is stored either");
    }
  }
  absl::StatusOr<topology::Topology> found = discover();
  if (!found.ok()) return found.status();
  out.topology = *std::move(found);
  out.note = absl::StrCat("machine discovered (", why_not, ")");
  return out;
}

}  // namespace topodra::node
