// Test helpers: a temporary directory and the scriptable HTTP(S) stub (http_stub.py) run as a
// child of /usr/bin/python3 that dies with the test process.
#pragma once

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace topodra::kube::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "topodra-kube-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::string Write(const std::string& name, const std::string& content) const {
    std::ofstream(File(name), std::ios::binary | std::ios::trunc) << content;
    return File(name);
  }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct StubTls {
  std::string cert, key, client_ca;  // client_ca set: client certificates are required
};

class StubServer {
 public:
  // Starts the stub with {"routes": routes}; port() is 0 when that failed (a test failure is
  // recorded).
  explicit StubServer(const nlohmann::json& routes, const StubTls& tls = {}) {
    const std::string routes_file =
        dir_.Write("routes.json", nlohmann::json{{"routes", routes}}.dump());
    log_file_ = dir_.Write("requests.jsonl", "");
    scheme_ = tls.cert.empty() ? "http" : "https";
    std::vector<std::string> args = {"/usr/bin/python3",
                                     TOPODRA_SOURCE_DIR "/test/kube/http_stub.py",
                                     "--routes",
                                     routes_file,
                                     "--log",
                                     log_file_};
    if (!tls.cert.empty()) args.insert(args.end(), {"--cert", tls.cert, "--key", tls.key});
    if (!tls.client_ca.empty()) args.insert(args.end(), {"--client-ca", tls.client_ca});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int out[2];
    if (pipe(out) != 0) {
      ADD_FAILURE() << "pipe failed";
      return;
    }
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    if (pid_ < 0) {
      close(out[0]);
      ADD_FAILURE() << "fork failed";
      return;
    }
    std::string line;
    pollfd pfd{out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && poll(&pfd, 1, 15000) == 1) {
      char buf[64];
      const ssize_t n = read(out[0], buf, sizeof(buf));
      if (n <= 0) break;
      line.append(buf, static_cast<std::size_t>(n));
    }
    close(out[0]);
    if (line.rfind("PORT ", 0) != 0) {
      ADD_FAILURE() << "http_stub.py did not start: \"" << line << "\"";
      return;
    }
    port_ = std::stoi(line.substr(5));
  }

  ~StubServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  StubServer(const StubServer&) = delete;
  StubServer& operator=(const StubServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return scheme_ + "://127.0.0.1:" + std::to_string(port_); }

  // The requests served so far, oldest first: {"method", "path", "authorization", "body"}.
  std::vector<nlohmann::json> Requests() const {
    std::vector<nlohmann::json> requests;
    std::istringstream log(ReadFile(log_file_));
    for (std::string line; std::getline(log, line);) {
      requests.push_back(nlohmann::json::parse(line, nullptr, false));
    }
    return requests;
  }

 private:
  TempDir dir_;
  std::string log_file_;
  std::string scheme_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace topodra::kube::testing
