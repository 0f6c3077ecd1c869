#include "driver/prepare/gpu_nodes.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace topodra::prepare {
namespace {

std::string Join(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return r + path;
}

bool IsCharDevice(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISREG(st.st_mode));
}

void Add(const std::string& root, const std::string& dev_path, std::vector<cdi::DeviceNode>* out) {
  const std::string host = Join(root, dev_path);
  if (!IsCharDevice(host)) return;
  for (const cdi::DeviceNode& n : *out) {
    if (n.path == dev_path) return;
  }
  cdi::DeviceNode node;
  node.path = dev_path;
  if (host != dev_path) node.host_path = host;
  out->push_back(std::move(node));
}

}  // namespace

std::vector<cdi::DeviceNode> GpuDeviceNodes(const topology::Gpu& gpu, const std::string& root) {
  std::vector<cdi::DeviceNode> out;
  // DRM: /sys/bus/pci/devices/<bdf>/drm/{card*,renderD*}.
  const std::string drm = Join(root, absl::StrCat("/sys/bus/pci/devices/", gpu.pci_bus_id, "/drm"));
  if (DIR* dir = ::opendir(drm.c_str()); dir != nullptr) {
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (absl::StartsWith(name, "card") || absl::StartsWith(name, "renderD")) {
        names.push_back(name);
      }
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) Add(root, "/dev/dri/" + name, &out);
  }
  // NVIDIA: the minor number is in /proc/driver/nvidia/gpus/<bdf>/information.
  if (gpu.vendor_id == 0x10de) {
    std::ifstream info(
        Join(root, absl::StrCat("/proc/driver/nvidia/gpus/", gpu.pci_bus_id, "/information")));
    std::string line;
    while (std::getline(info, line)) {
      absl::string_view rest(line);
      if (!absl::ConsumePrefix(&rest, "Device Minor:")) continue;
      int minor = -1;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &minor) && minor >= 0) {
        Add(root, absl::StrCat("/dev/nvidia", minor), &out);
        for (const char* ctl : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) {
          Add(root, ctl, &out);
        }
      }
    }
  }
  return out;
}

}  // namespace topodra::prepare
