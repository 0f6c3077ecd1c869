// Runs a function as a user without the permission overrides root has, so a test of a
// read-only directory fails as it would for the daemon's user, also when the tests run as root
// (as in CI). Capabilities are per thread on Linux: the function runs on a thread of its own
// whose effective set lacks CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER; the rest of
// the process keeps them, and nothing outside the process changes.
#pragma once

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

namespace topodra::test_support {

// "" when `fn` ran without the overrides, else why it could not (and `fn` did not run).
inline std::string RunWithoutPermissionOverrides(const std::function<void()>& fn) {
  std::string error;
  std::thread t([&] {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (::syscall(SYS_capget, &header, data) != 0) {
      error = std::string("capget: ") + std::strerror(errno);
      return;
    }
    for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
      data[cap / 32].effective &= ~(1u << (cap % 32));
    }
    if (::syscall(SYS_capset, &header, data) != 0) {
      error = std::string("capset: ") + std::strerror(errno);
      return;
    }
    fn();
  });
  t.join();
  return error;
}

}  // namespace topodra::test_support
