// A fake /sys/bus/pci/devices tree under a test's host root, shaped like the kernel's: one
// directory per device with its link attributes, aer_dev_fatal and a `driver` symlink. Tests
// change it the way hardware faults would (unbind, link down, fatal AER errors, removal) and
// point --host-root (or health::PciSysfs) at the root.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace topodra::testing {

class FakePciSysfs {
 public:
  explicit FakePciSysfs(std::string host_root) : root_(std::move(host_root)) {
    std::filesystem::create_directories(Devices());
    std::filesystem::create_directories(root_ + "/sys/bus/pci/drivers");
  }
  std::string Devices() const { return root_ + "/sys/bus/pci/devices"; }

  // A healthy PCIe 4.0 x16 GPU bound to `driver`.
  void AddGpu(const std::string& bus_id, const std::string& driver = "nvidia") {
    std::filesystem::create_directories(Dir(bus_id));
    SetLink(bus_id, "16.0 GT/s PCIe", 16);
    Write(bus_id, "max_link_speed", "16.0 GT/s PCIe\n");
    Write(bus_id, "max_link_width", "16\n");
    SetAerFatal(bus_id, 0);
    Bind(bus_id, driver);
  }
  void SetLink(const std::string& bus_id, const std::string& speed, int width) {
    Write(bus_id, "current_link_speed", speed + "\n");
    Write(bus_id, "current_link_width", std::to_string(width) + "\n");
  }
  // `surprise_down` Surprise Down Errors, and that many in TOTAL_ERR_FATAL.
  void SetAerFatal(const std::string& bus_id, int surprise_down) {
    Write(bus_id, "aer_dev_fatal",
          "Undefined 0\nData Link Protocol 0\nSurprise Down Error " +
              std::to_string(surprise_down) + "\nPoisoned TLP 0\nMalformed TLP 0\n" +
              "TOTAL_ERR_FATAL " + std::to_string(surprise_down) + "\n");
  }
  void Bind(const std::string& bus_id, const std::string& driver) {
    const std::string drv = root_ + "/sys/bus/pci/drivers/" + driver;
    std::filesystem::create_directories(drv);
    Unbind(bus_id);
    std::filesystem::create_directory_symlink(drv, Dir(bus_id) + "/driver");
  }
  void Unbind(const std::string& bus_id) { std::filesystem::remove(Dir(bus_id) + "/driver"); }
  void Remove(const std::string& bus_id) { std::filesystem::remove_all(Dir(bus_id)); }

 private:
  std::string Dir(const std::string& bus_id) const { return Devices() + "/" + bus_id; }
  // Replaced by rename, as sysfs attributes change atomically for a reader.
  void Write(const std::string& bus_id, const std::string& name, const std::string& text) {
    const std::string path = Dir(bus_id) + "/" + name;
    {
      std::ofstream out(path + ".tmp", std::ios::trunc);
      out << text;
    }
    std::filesystem::rename(path + ".tmp", path);
  }

  std::string root_;
};

}  // namespace topodra::testing
