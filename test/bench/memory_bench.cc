// Idle memory of the real `topodra run` (issue 19): the daemon on the 384-CPU fixture, registered
// with the kubelet simulator and its slices stored by the fake API server, then left idle. Read
// from /proc/<pid>/smaps_rollup:
//   PSS  Pss (shared pages divided among the processes mapping them),
//   USS  Private_Clean + Private_Dirty (pages no other process maps: what stopping it frees),
//   RSS  Rss (every resident page it maps).
// On a node the daemon's container maps its own copies of every library, so there its RSS is
// close to its USS; on this machine other processes (other daemons, other tests) may share some
// library pages, which lowers USS and PSS here, never RSS.
// Two setups: as prepare_bench starts it (plain HTTP, no metrics or health endpoint), and as the
// chart runs it (HTTPS with a CA and a bearer token, metrics and health endpoints on). The floor:
// memory_floor, a trivial C++ program linked the same way, measured in the same run.
// Then the mappings that cost most (Private + RSS from /proc/<pid>/smaps, per file), the
// libraries mapped only because libcurl needs them, the anonymous memory by kind (heap, malloc
// arenas, thread stacks) and the number of threads.
//
// usage: memory_bench [TOPOLOGIES_DIR] [STARTS] [IDLE_SECONDS]   (idle 1.5 s unless given)
#include <elf.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cmd/memory_release.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/kubelet_sim.h"

namespace {

using namespace topodra;
using testing::Daemon;
using testing::DaemonDirs;
using testing::FakeApiServer;
using testing::KubeletSimulator;

constexpr char kNode[] = "bench-node";
constexpr char kDriver[] = "dra.cpu";
constexpr double kTargetPssMb = 12, kTargetUssMb = 10, kTargetRssMb = 18;
// The breakdown's start: how long after clearing the accessed bits of the daemon's pages
// (/proc/<pid>/clear_refs) the Referenced pages are read.
constexpr std::chrono::milliseconds kTouchWindow{3000};

struct Rollup {
  long rss = 0, pss = 0, uss = 0, anon = 0;  // KiB
};

Rollup ReadRollup(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  Rollup r;
  std::string key;
  long value = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    if (!(s >> key >> value)) continue;
    if (key == "Rss:") r.rss = value;
    if (key == "Pss:") r.pss = value;
    if (key == "Private_Clean:" || key == "Private_Dirty:") r.uss += value;
    if (key == "Anonymous:") r.anon = value;
  }
  return r;
}

int Threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return 0;
}

struct Mapping {
  unsigned long start = 0, end = 0;
  std::string perms, path;  // path empty for anonymous memory
  long rss = 0, pss = 0, priv = 0, anon = 0, referenced = 0;
};

std::vector<Mapping> ReadSmaps(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  std::vector<Mapping> out;
  std::string line;
  cmd::SmapsHeader h;
  while (std::getline(in, line)) {
    if (cmd::ParseSmapsHeader(line, &h)) {
      Mapping m;
      m.start = h.start;
      m.end = h.end;
      m.perms = h.perms;
      m.path = h.path;
      out.push_back(m);
      continue;
    }
    if (out.empty()) continue;
    std::istringstream s(line);
    std::string key;
    long value = 0;
    if (!(s >> key >> value)) continue;
    if (key == "Rss:") out.back().rss = value;
    if (key == "Pss:") out.back().pss = value;
    if (key == "Private_Clean:" || key == "Private_Dirty:") out.back().priv += value;
    if (key == "Anonymous:") out.back().anon = value;
    if (key == "Referenced:") out.back().referenced = value;
  }
  return out;
}

std::string Base(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// DT_SONAME and DT_NEEDED of a shared object or executable (64-bit ELF, from its section headers).
struct ElfDeps {
  std::string soname;
  std::vector<std::string> needed;
};

ElfDeps ReadElfDeps(const std::string& path) {
  ElfDeps out;
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0) {
    return out;
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof(eh));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shoff + static_cast<size_t>(eh.e_shnum) * sizeof(Elf64_Shdr) > data.size()) {
    return out;
  }
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), data.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_type != SHT_DYNAMIC || s.sh_link >= sh.size()) continue;
    const Elf64_Shdr& strtab = sh[s.sh_link];
    if (s.sh_offset + s.sh_size > data.size() || strtab.sh_offset + strtab.sh_size > data.size()) {
      continue;
    }
    for (size_t off = 0; off + sizeof(Elf64_Dyn) <= s.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, data.data() + s.sh_offset + off, sizeof(d));
      if (d.d_tag != DT_NEEDED && d.d_tag != DT_SONAME) continue;
      if (d.d_un.d_val >= strtab.sh_size) continue;
      const std::string name(data.data() + strtab.sh_offset + d.d_un.d_val);
      if (d.d_tag == DT_NEEDED)
        out.needed.push_back(name);
      else
        out.soname = name;
    }
  }
  return out;
}

// The mapped files that only libcurl needs: libcurl and every library reachable from it through
// DT_NEEDED, minus those topodra-daemon (the process `topodra run` execs) reaches without passing
// libcurl.
std::set<std::string> CurlOnly(const std::vector<Mapping>& maps, const std::string& executable) {
  std::map<std::string, std::string> by_soname;  // soname (or file name) -> mapped path
  std::map<std::string, ElfDeps> deps;           // mapped path -> its dependencies
  for (const Mapping& m : maps) {
    if (m.path.empty() || m.path[0] != '/' || deps.count(m.path) > 0) continue;
    ElfDeps d = ReadElfDeps(m.path);
    by_soname[Base(m.path)] = m.path;
    if (!d.soname.empty()) by_soname[d.soname] = m.path;
    deps[m.path] = std::move(d);
  }
  auto reach = [&](std::vector<std::string> todo, const std::string& skip) {
    std::set<std::string> seen;
    while (!todo.empty()) {
      const std::string p = todo.back();
      todo.pop_back();
      if (p == skip || !seen.insert(p).second) continue;
      for (const std::string& n : deps[p].needed) {
        if (by_soname.count(n) > 0) todo.push_back(by_soname[n]);
      }
    }
    return seen;
  };
  const std::string curl = by_soname.count("libcurl.so.4") > 0 ? by_soname["libcurl.so.4"] : "";
  if (curl.empty()) return {};
  std::vector<std::string> roots;
  for (const auto& [path, d] : deps) {
    if (Base(path) == "topodra-daemon" || path == executable) roots.push_back(path);
  }
  const std::set<std::string> without = reach(roots, curl);
  std::set<std::string> only;
  for (const std::string& p : reach({curl}, "")) {
    if (without.count(p) == 0) only.insert(p);
  }
  return only;
}

bool IsAnon(const Mapping& m) { return m.path.empty(); }

// Anonymous memory by kind: glibc puts a PROT_NONE guard page right below each thread stack, and
// reserves each extra malloc arena as 64 MiB of which the used part is read-write (the rest
// PROT_NONE, right above it).
std::string AnonKind(const std::vector<Mapping>& maps, size_t i) {
  const Mapping& m = maps[i];
  if (!IsAnon(m)) return m.path;
  if (m.perms.rfind("---", 0) == 0) return "[anon: reserved, PROT_NONE]";
  if (i > 0 && IsAnon(maps[i - 1]) && maps[i - 1].end == m.start &&
      maps[i - 1].perms.rfind("---", 0) == 0 && maps[i - 1].end - maps[i - 1].start <= 65536) {
    return "[anon: thread stacks]";
  }
  if (i + 1 < maps.size() && IsAnon(maps[i + 1]) && maps[i + 1].start == m.end &&
      maps[i + 1].perms.rfind("---", 0) == 0 && maps[i + 1].end - m.start == 64ul << 20) {
    return "[anon: malloc arenas]";
  }
  return "[anon: other]";
}

struct Group {
  long rss = 0, pss = 0, priv = 0;
  int count = 0;
};

void PrintBreakdown(pid_t pid, const std::string& executable, int top) {
  const std::vector<Mapping> maps = ReadSmaps(pid);
  std::map<std::string, Group> by_file;
  for (size_t i = 0; i < maps.size(); ++i) {
    const std::string key = AnonKind(maps, i);
    Group& g = by_file[key.empty() || key[0] == '/' ? Base(key) : key];
    g.rss += maps[i].rss;
    g.pss += maps[i].pss;
    g.priv += maps[i].priv;
    ++g.count;
  }
  std::vector<std::pair<std::string, Group>> sorted(by_file.begin(), by_file.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second.priv + a.second.rss > b.second.priv + b.second.rss;
  });
  std::printf("  top mappings by Private + RSS (KiB; per file, or anonymous memory by kind):\n");
  std::printf("    %-44s %7s %7s %7s %5s\n", "mapping", "Private", "RSS", "PSS", "maps");
  for (int i = 0; i < top && i < static_cast<int>(sorted.size()); ++i) {
    const auto& [name, g] = sorted[i];
    std::printf("    %-44s %7ld %7ld %7ld %5d\n", name.c_str(), g.priv, g.rss, g.pss, g.count);
  }
  long libs_rss = 0, libs_priv = 0, libs_pss = 0;
  int libs = 0;
  for (const Mapping& m : maps) {
    if (m.path.empty() || m.path[0] != '/') continue;
    libs_rss += m.rss;
    libs_priv += m.priv;
    libs_pss += m.pss;
  }
  std::set<std::string> files;
  for (const Mapping& m : maps) {
    if (!m.path.empty() && m.path[0] == '/') files.insert(m.path);
  }
  libs = static_cast<int>(files.size());
  std::printf("  all %d mapped files: Private %ld, RSS %ld, PSS %ld KiB\n", libs, libs_priv,
              libs_rss, libs_pss);
  const std::set<std::string> curl = CurlOnly(maps, executable);
  Group c;
  std::string names;
  for (const Mapping& m : maps) {
    if (curl.count(m.path) == 0) continue;
    c.rss += m.rss;
    c.pss += m.pss;
    c.priv += m.priv;
  }
  for (const std::string& p : curl) absl::StrAppend(&names, names.empty() ? "" : " ", Base(p));
  std::printf(
      "  libcurl and the %zu libraries mapped only for it: Private %ld, RSS %ld, PSS %ld KiB%s%s\n",
      curl.empty() ? 0 : curl.size() - 1, c.priv, c.rss, c.pss, curl.empty() ? " (none)" : ": ",
      names.c_str());
  // The daemon's executable by segment: its text and read-only data are file pages it may drop
  // once started (cmd/memory_release.h), its data, RELRO and bss are its own (Anonymous).
  // Referenced: pages whose accessed bit was set since MeasureOnce cleared them all, kTouchWindow
  // before (what the idle daemon actually reads, against what fault-around keeps mapped).
  std::printf("  topodra-daemon by mapping (KiB; touched: referenced in the last %.0f s):\n",
              kTouchWindow.count() / 1000.0);
  std::printf("    %-5s %8s %7s %9s %7s\n", "perms", "size", "RSS", "Anonymous", "touched");
  for (const Mapping& m : maps) {
    if (Base(m.path) != "topodra-daemon") continue;
    std::printf("    %-5s %8lu %7ld %9ld %7ld\n", m.perms.c_str(), (m.end - m.start) / 1024, m.rss,
                m.anon, m.referenced);
  }
  std::printf("  threads: %d\n", Threads(pid));
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

struct Setup {
  const char* label;
  bool deployed;  // HTTPS + token, metrics and health endpoints (as the chart runs it)
};

// One fresh daemon, idle: registered, its slices stored, then `idle` without work.
struct Idle {
  Rollup r;
  bool ok = false;
};

Idle MeasureOnce(const Setup& setup, const std::vector<std::string>& machine, bool breakdown,
                 int top, std::chrono::milliseconds idle) {
  testing::FakeApiServerOptions o;
  o.nodes = {{kNode, "uid-bench-node"}};
  if (setup.deployed) {
    o.tls = true;
    o.token = "bench-token";
  }
  auto server = FakeApiServer::Start(o);
  if (!server.ok()) {
    std::printf("fake API server: %s\n", std::string(server.status().message()).c_str());
    return {};
  }
  DaemonDirs dirs = DaemonDirs::Make();
  const std::string kubeconfig = (*server)->WriteKubeconfig(dirs.root + "/kubeconfig.yaml");
  testing::KubeletSimOptions so;
  so.root_dir = dirs.kubelet_root;
  auto sim = KubeletSimulator::Start(so);
  if (!sim.ok()) return {};
  std::vector<std::string> args = {"--kubeconfig", kubeconfig, "--node-name", kNode};
  if (std::filesystem::is_directory("/dev/shm")) {
    args.push_back("--cdi-dir");
    args.push_back(std::string(dirs.root).replace(0, 4, "/dev/shm") + "-cdi");
  }
  if (setup.deployed) {
    args.insert(args.end(), {"--metrics-address", absl::StrCat("127.0.0.1:", FreePort()),
                             "--health-address", absl::StrCat("127.0.0.1:", FreePort())});
  }
  args.insert(args.end(), machine.begin(), machine.end());
  Daemon daemon;
  daemon.Start(dirs, args);
  Idle out;
  auto reg = (*sim)->WaitForRegistration(kDriver, 1, absl::Seconds(30));
  if (!reg.ok()) {
    std::printf("not registered: %s\n%s\n", std::string(reg.status().message()).c_str(),
                daemon.Log().c_str());
    return out;
  }
  // Slices stored: the publisher has done its start-up work.
  bool stored = false;
  for (int i = 0; i < 300 && !stored; ++i) {
    auto slices = (*server)->Api("GET", "/apis/resource.k8s.io/v1/resourceslices");
    stored = slices.ok() && slices->contains("items") && !(*slices)["items"].empty();
    if (!stored) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!stored) {
    std::printf("no slices stored after 6 s\n%s\n", daemon.Log().c_str());
    return out;
  }
  std::this_thread::sleep_for(idle);
  out.r = ReadRollup(daemon.pid());
  out.ok = out.r.rss > 0;
  if (breakdown) {
    std::ofstream("/proc/" + std::to_string(daemon.pid()) + "/clear_refs") << "1";
    std::this_thread::sleep_for(kTouchWindow);
    PrintBreakdown(daemon.pid(), TOPODRA_BINARY, top);
  }
  sim->reset();
  const int exit_code = daemon.Terminate();
  if (exit_code != 0) {
    std::printf("warning: the daemon exited with %d on SIGTERM\n%s\n", exit_code,
                daemon.Log().c_str());
  }
  (void)(*server)->Stop();
  std::filesystem::remove_all(dirs.root);
  std::filesystem::remove_all(std::string(dirs.root).replace(0, 4, "/dev/shm") + "-cdi");
  return out;
}

Rollup MeasureFloor() {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::close(pipefd[0]);
    ::execl(TOPODRA_MEMORY_FLOOR, TOPODRA_MEMORY_FLOOR, static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(pipefd[1]);
  char buf[256];
  const bool ready = ::read(pipefd[0], buf, sizeof(buf)) > 0;
  ::close(pipefd[0]);
  Rollup r = ready ? ReadRollup(pid) : Rollup{};
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return r;
}

double Mb(long kib) { return kib / 1024.0; }

std::string Verdict(double value, double target, const char* what) {
  if (value <= target) return "";
  return absl::StrCat("  MISSES target ", what, " <= ", static_cast<int>(target), " MB");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures/topologies";
  const int starts = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  const auto idle = std::chrono::milliseconds(
      argc > 3 ? static_cast<long>(std::max(0.0, std::atof(argv[3])) * 1000) : 1500);
  const std::vector<std::string> fixture = {"--topology-file", dir + "/192em64t-24n8c2t.xml"};
  ::signal(SIGPIPE, SIG_IGN);

  const Rollup floor = MeasureFloor();
  std::printf(
      "idle daemon memory, 384-CPU fixture (192em64t-24n8c2t.xml), %d fresh starts each, idle "
      "%.1f s after its slices are stored\n",
      starts, idle.count() / 1000.0);
  std::printf(
      "floor: a trivial C++ program linked the same way: PSS %.1f / USS %.1f / RSS %.1f MB\n",
      Mb(floor.pss), Mb(floor.uss), Mb(floor.rss));
  const Setup setups[] = {{"as prepare_bench (HTTP, no endpoints)", false},
                          {"as deployed (HTTPS + token, metrics + health)", true}};
  for (const Setup& setup : setups) {
    std::vector<Rollup> runs;
    for (int i = 0; i < starts; ++i) {
      Idle one = MeasureOnce(setup, fixture, false, 0, idle);
      if (one.ok) runs.push_back(one.r);
    }
    if (runs.empty()) return 1;
    auto median = [&](long Rollup::*field) {
      std::vector<long> v;
      for (const Rollup& r : runs) v.push_back(r.*field);
      std::sort(v.begin(), v.end());
      return std::make_pair(v[v.size() / 2], std::make_pair(v.front(), v.back()));
    };
    const auto pss = median(&Rollup::pss), uss = median(&Rollup::uss), rss = median(&Rollup::rss),
               anon = median(&Rollup::anon);
    std::printf(
        "%-46s PSS %.1f / USS %.1f / RSS %.1f MB (median; RSS %.1f-%.1f; anonymous %.1f "
        "MB)%s%s%s\n",
        setup.label, Mb(pss.first), Mb(uss.first), Mb(rss.first), Mb(rss.second.first),
        Mb(rss.second.second), Mb(anon.first), Verdict(Mb(pss.first), kTargetPssMb, "PSS").c_str(),
        Verdict(Mb(uss.first), kTargetUssMb, "USS").c_str(),
        Verdict(Mb(rss.first), kTargetRssMb, "RSS").c_str());
    std::printf("%-46s PSS %.1f / USS %.1f / RSS %.1f MB above the floor\n", "",
                Mb(pss.first - floor.pss), Mb(uss.first - floor.uss), Mb(rss.first - floor.rss));
  }
  std::printf("targets: PSS <= %.0f MB, USS <= %.0f MB, RSS <= %.0f MB\n", kTargetPssMb,
              kTargetUssMb, kTargetRssMb);
  std::printf("\nwhere it goes, one more start as deployed:\n");
  (void)MeasureOnce(setups[1], fixture, true, 30, idle);
  return 0;
}
