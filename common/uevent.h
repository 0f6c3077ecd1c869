// Kernel uevents (NETLINK_KOBJECT_UEVENT): how the daemon hears at once that a CPU went offline
// or online, or a PCI or DRM device came or went, instead of at the next periodic rediscovery.
// The parser is pure; the listener is a thin socket wrapper.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace topodra::uevent {

struct Uevent {
  std::string action;     // add, remove, change, online, offline, bind, unbind, move
  std::string devpath;    // /devices/system/cpu/cpu3
  std::string subsystem;  // cpu, pci, drm, ...
  bool operator==(const Uevent&) const = default;
};

// One kernel datagram: "<action>@<devpath>\0KEY=value\0...". nullopt for anything else (udev's
// re-broadcasts start with "libudev\0", truncated or malformed datagrams). ACTION, DEVPATH and
// SUBSYSTEM keys win over the header when present.
std::optional<Uevent> Parse(std::string_view datagram);

// True for events that can change what the node offers: CPUs (hotplug, online/offline) and PCI,
// DRM and NVIDIA devices appearing, disappearing or changing drivers.
bool AffectsDevices(const Uevent& event);

class Listener {
 public:
  // Binds to the kernel's uevent multicast group. Fails (with the errno text) where the process
  // may not, e.g. in a network namespace other than the host's.
  static absl::StatusOr<std::unique_ptr<Listener>> Open();
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // The next event, or nullopt after `timeout` without one, or at once after Wake().
  std::optional<Uevent> Next(absl::Duration timeout);
  // Makes the Next waiting now, or else the next one to wait, return nullopt at once (one
  // wake-up for any number of calls). Thread-safe, never blocks: for a request from another
  // thread (SIGUSR1's rediscovery, stopping).
  void Wake();

 private:
  Listener(int fd, int wake_fd) : fd_(fd), wake_fd_(wake_fd) {}
  int fd_;
  int wake_fd_;  // an eventfd, polled with fd_
};

}  // namespace topodra::uevent
