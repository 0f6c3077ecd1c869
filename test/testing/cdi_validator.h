// Debian's CDI Go library (0.5.2, the generation containerd 1.7 embeds) as an independent reader
// of the CDI specs topodra writes: test/cdi/cdi_validate.go, built once per test process.
// Needs golang-go and golang-github-container-orchestrated-devices-container-device-interface-dev.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace topodra::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

inline CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline std::string FindGo() {
  if (const char* env = std::getenv("TOPODRA_GO"); env != nullptr && *env != '\0') return env;
  for (const char* candidate : {"/usr/bin/go", "/usr/lib/go/bin/go", "/usr/local/go/bin/go"}) {
    if (::access(candidate, X_OK) == 0) return candidate;
  }
  return "";
}

inline constexpr char kCdiGoLibrary[] =
    "/usr/share/gocode/src/github.com/container-orchestrated-devices/container-device-interface/"
    "pkg/cdi";

// Builds cdi_validate into a temporary directory (once per process) and returns its path; on
// failure returns "" and puts the reason in *why. `go_cache` should be a writable directory that
// outlives the test (the build tree), so later runs are fast.
inline std::string BuildCdiValidator(std::string* why = nullptr,
                                     const std::string& go_cache = TOPODRA_GO_CACHE) {
  static std::string built;
  static std::string failure;
  if (!built.empty() || !failure.empty()) {
    if (why != nullptr) *why = failure;
    return built;
  }
  const std::string go = FindGo();
  if (go.empty()) {
    failure =
        "the Go toolchain is missing (looked in /usr/bin/go, /usr/lib/go/bin/go, "
        "/usr/local/go/bin/go, $TOPODRA_GO): apt-get install golang-go";
  } else if (!std::filesystem::is_directory(kCdiGoLibrary)) {
    failure = std::string("the CDI Go library is missing (") + kCdiGoLibrary +
              "): apt-get install "
              "golang-github-container-orchestrated-devices-container-device-interface-dev";
  } else {
    char tmpl[] = "/tmp/cdi_validate.XXXXXX";
    const std::string work = ::mkdtemp(tmpl) != nullptr ? tmpl : "/tmp";
    // GOPATH mode against Debian's packaged sources; HOME because its default may be read-only.
    const std::string command = std::string("cd ") + TOPODRA_SOURCE_DIR +
                                "/test/cdi && env GO111MODULE=off GOFLAGS= GOPATH=" + work +
                                "/gopath:/usr/share/gocode GOCACHE=" + go_cache + " HOME=" + work +
                                " " + go + " build -o " + work + "/cdi_validate cdi_validate.go";
    const CommandResult r = RunCommand(command);
    if (r.exit_code == 0) {
      built = work + "/cdi_validate";
    } else {
      failure = command + "\n" + r.output;
    }
  }
  if (why != nullptr) *why = failure;
  return built;
}

}  // namespace topodra::testing
