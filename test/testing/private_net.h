// Kernel uevents without touching the host: the calling thread moves to a network namespace of
// its own (with loopback up, so servers on 127.0.0.1 started afterwards work as before), where
// root may send on the kernel's uevent multicast group what the kernel would send. Listeners in
// that namespace hear it; the host's udev and every other process hear nothing.
#pragma once

#include <fcntl.h>
#include <linux/netlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace topodra::testing {

// "" on success, else what failed. Only the calling thread (and the processes it starts after)
// move; needs CAP_SYS_ADMIN and CAP_NET_ADMIN (root).
inline std::string EnterPrivateNetwork() {
  if (::unshare(CLONE_NEWNET) != 0) {
    return std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  std::string error;
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    error = std::string("SIOCGIFFLAGS lo: ") + std::strerror(errno);
  } else {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) {
      error = std::string("SIOCSIFFLAGS lo: ") + std::strerror(errno);
    }
  }
  ::close(fd);
  return error;
}

// The calling thread's network namespace, to return to with LeavePrivateNetwork(); -1 on error.
inline int CurrentNetwork() { return ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC); }

// Moves the calling thread back to `saved` (from CurrentNetwork()) and closes it.
inline void LeavePrivateNetwork(int saved) {
  if (saved < 0) return;
  ::setns(saved, CLONE_NEWNET);
  ::close(saved);
}

// Sends `datagram` ("<action>@<devpath>\0KEY=value\0...") to the kernel's uevent group of the
// calling thread's network namespace; "" on success.
inline std::string SendUevent(const std::string& datagram) {
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
  if (fd < 0) return std::string("uevent socket: ") + std::strerror(errno);
  sockaddr_nl to{};
  to.nl_family = AF_NETLINK;
  to.nl_groups = 1;
  const ssize_t n = ::sendto(fd, datagram.data(), datagram.size(), 0,
                             reinterpret_cast<sockaddr*>(&to), sizeof(to));
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(datagram.size())) {
    return std::string("send uevent: ") + std::strerror(err);
  }
  return "";
}

}  // namespace topodra::testing
