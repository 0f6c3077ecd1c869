#include "driver/health/pci_sysfs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status.h"

namespace topodra::health {
namespace {

constexpr size_t kMaxAttribute = 4096;

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A sysfs attribute; nullopt when absent (the device has no such capability).
std::optional<std::string> ReadAttribute(const std::string& path,
                                         std::vector<std::string>* errors) {
  absl::StatusOr<std::string> text = files::ReadFileBounded(path, kMaxAttribute);
  if (text.ok()) return *std::move(text);
  if (!absl::IsNotFound(text.status())) errors->push_back(Message(text.status()));
  return std::nullopt;
}

// The last component of the `driver` link: the bound driver's name.
std::optional<std::string> BoundDriver(const std::string& dir) {
  char target[4096];
  const ssize_t n = ::readlink(absl::StrCat(dir, "/driver").c_str(), target, sizeof(target) - 1);
  if (n <= 0) return std::nullopt;
  const std::string t(target, static_cast<size_t>(n));
  const size_t slash = t.rfind('/');
  return slash == std::string::npos ? t : t.substr(slash + 1);
}

// The lanes of the port above the device ("<dir>/.." follows the bus's symlink to the device's
// place under its bridge): an x16 GPU in an x8 slot trains to x8 for good, which is no fault.
// nullopt when there is no such port (the device sits on a root bus) or it says nothing.
std::optional<int> SlotWidth(const std::string& dir) {
  absl::StatusOr<std::string> text = files::ReadFileBounded(dir + "/../max_link_width", 64);
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<int> width = ParseLinkWidth(*text);
  if (!width.ok() || *width <= 0) return std::nullopt;
  return *width;
}

}  // namespace

GpuFacts PciSysfs::ReadDevice(const std::string& devices_dir, const std::string& bus_id) const {
  GpuFacts f;
  const std::string dir = absl::StrCat(devices_dir, "/", bus_id);
  f.present = IsDirectory(dir);
  if (!f.present) return f;
  f.driver = BoundDriver(dir);
  std::vector<std::string>& errors = f.unreadable;
  const auto speed = ReadAttribute(dir + "/current_link_speed", &errors);
  const auto width = ReadAttribute(dir + "/current_link_width", &errors);
  const auto max_speed = ReadAttribute(dir + "/max_link_speed", &errors);
  const auto max_width = ReadAttribute(dir + "/max_link_width", &errors);
  if (speed && width && max_speed && max_width) {
    absl::StatusOr<double> s = ParseLinkSpeed(*speed), ms = ParseLinkSpeed(*max_speed);
    absl::StatusOr<int> w = ParseLinkWidth(*width), mw = ParseLinkWidth(*max_width);
    if (s.ok() && ms.ok() && w.ok() && mw.ok()) {
      f.link = PciLink{*s, *w, *ms, std::min(*mw, SlotWidth(dir).value_or(*mw))};
    } else {
      for (const absl::Status& st : {s.status(), ms.status(), w.status(), mw.status()}) {
        if (!st.ok()) errors.push_back(absl::StrCat(dir, ": ", Message(st)));
      }
    }
  }
  if (auto aer = ReadAttribute(dir + "/aer_dev_fatal", &errors)) {
    absl::StatusOr<AerFatal> parsed = ParseAerFatal(*aer);
    if (parsed.ok()) {
      f.aer_fatal = *std::move(parsed);
    } else {
      errors.push_back(absl::StrCat(dir, "/aer_dev_fatal: ", Message(parsed.status())));
    }
  }
  return f;
}

std::optional<std::map<std::string, GpuFacts>> PciSysfs::Read(
    const std::vector<std::string>& bus_ids) {
  std::string root = host_root_;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  const std::string devices = absl::StrCat(root == "/" ? "" : root, "/sys/bus/pci/devices");
  if (!IsDirectory(devices)) return std::nullopt;
  std::map<std::string, GpuFacts> out;
  for (const std::string& id : bus_ids) out[id] = ReadDevice(devices, id);
  return out;
}

}  // namespace topodra::health
