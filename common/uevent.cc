#include "common/uevent.h"

#include <linux/netlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace topodra::uevent {

std::optional<Uevent> Parse(std::string_view datagram) {
  const size_t header_end = datagram.find('\0');
  if (header_end == std::string_view::npos) return std::nullopt;
  const std::string_view header = datagram.substr(0, header_end);
  const size_t at = header.find('@');
  if (at == std::string_view::npos || at == 0 || at + 1 >= header.size()) return std::nullopt;
  Uevent e;
  e.action = std::string(header.substr(0, at));
  e.devpath = std::string(header.substr(at + 1));
  std::string_view rest = datagram.substr(header_end + 1);
  while (!rest.empty()) {
    const size_t end = rest.find('\0');
    const std::string_view kv = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = kv.substr(0, eq);
    const std::string_view value = kv.substr(eq + 1);
    if (key == "ACTION") e.action = std::string(value);
    if (key == "DEVPATH") e.devpath = std::string(value);
    if (key == "SUBSYSTEM") e.subsystem = std::string(value);
  }
  if (e.action.empty() || e.devpath.empty()) return std::nullopt;
  return e;
}

bool AffectsDevices(const Uevent& event) {
  const bool subsystem = event.subsystem == "cpu" || event.subsystem == "pci" ||
                         event.subsystem == "drm" || event.subsystem == "nvidia";
  const bool action = event.action == "add" || event.action == "remove" ||
                      event.action == "online" || event.action == "offline" ||
                      event.action == "change" || event.action == "bind" ||
                      event.action == "unbind";
  return subsystem && action;
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::Open() {
  const int fd =
      ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("uevent socket: ", std::strerror(errno)));
  }
  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = 1;  // the kernel's own events, not udev's re-broadcasts
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("uevent bind: ", std::strerror(err)));
  }
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("uevent wake-up eventfd: ", std::strerror(err)));
  }
  return std::unique_ptr<Listener>(new Listener(fd, wake_fd));
}

Listener::~Listener() {
  ::close(fd_);
  ::close(wake_fd_);
}

void Listener::Wake() {
  const uint64_t one = 1;
  // Only fails when the counter is full, and then a wake-up is pending anyway.
  (void)!::write(wake_fd_, &one, sizeof(one));
}

std::optional<Uevent> Listener::Next(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::array<char, 8192> buf;
  while (true) {
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n > 0) {
      if (std::optional<Uevent> e = Parse(std::string_view(buf.data(), static_cast<size_t>(n)))) {
        return e;
      }
      continue;
    }
    if (n < 0 && errno == ENOBUFS) {
      // The socket overflowed and events were lost: one of them may have mattered.
      return Uevent{"change", "/devices", "cpu"};
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return std::nullopt;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    ::poll(p, 2, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    uint64_t wakes = 0;
    if ((p[1].revents & POLLIN) != 0 && ::read(wake_fd_, &wakes, sizeof(wakes)) > 0) {
      return std::nullopt;
    }
  }
}

}  // namespace topodra::uevent
