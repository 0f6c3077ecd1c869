// topodra-cpuset-hook: the OCI createRuntime hook in the CDI spec of every CPU claim. The
// runtime runs it on the host once the container's cgroup exists and before the container's
// process starts; it records that the container holds the claim (so the daemon's reconciler
// keeps it on its CPUs and every other container off them) and puts the container's cgroup on
// the claim's CPUs, widening the pod's cgroups first where cgroup rules need it.
//
// With --mems (--numa-memory=claim), it also puts the container's memory on the claim's NUMA
// nodes (cpuset.mems), the union over the container's claims.
//
// usage: topodra-cpuset-hook --cpus LIST [--mems LIST] --claim ID --records DIR
//                            [--cgroup-root DIR]
// stdin: the OCI container state (JSON with "id" and "pid").
// Built statically: the host may have none of the daemon's libraries.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include "driver/cgroup/hook_core.h"
#include "nlohmann/json.hpp"

namespace {

namespace hook = topodra::cgroup::hook;

[[noreturn]] void Fail(const std::string& message) {
  std::cerr << "topodra-cpuset-hook: " << message << "\n";
  std::exit(1);
}

std::string Read(const std::string& path, bool* ok) {
  std::ifstream in(path);
  *ok = static_cast<bool>(in);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A record the daemon and this hook own: never through a link (root would read or overwrite
// what it points to), never blocking on a FIFO, only a regular file.
int OpenRecord(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

std::string ReadRecord(const std::string& path, bool* ok) {
  *ok = false;
  const int fd = OpenRecord(path, O_RDONLY);
  if (fd < 0) return "";
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  // Records are a few hundred bytes; a bigger one is not ours.
  while (text.size() < (64 << 10) && (n = ::read(fd, buf, sizeof(buf))) > 0) {
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  *ok = n == 0;
  return text;
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void WriteCgroupFile(const std::string& path, const std::string& value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) Fail("open " + path + ": " + std::strerror(errno));
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    Fail("write \"" + value + "\" to " + path + ": " + std::strerror(err));
  }
}

void WriteRecord(const std::string& dir, const std::string& name, const std::string& text) {
  ::mkdir(dir.c_str(), 0700);
  const std::string tmp = dir + "/." + name + ".tmp";
  const std::string path = dir + "/" + name;
  const int fd = OpenRecord(tmp, O_WRONLY | O_CREAT | O_TRUNC);
  if (fd < 0) Fail("open " + tmp + ": " + std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  if (::close(fd) != 0 || n != static_cast<ssize_t>(text.size())) {
    Fail("write " + tmp + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Fail("rename " + tmp + ": " + std::strerror(errno));
  }
}

bool SafeName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return s[0] != '.';
}

// A claim's CPU the root cpuset cannot give fails the hook, named, before the record or any
// cgroup is written: the kernel's own answer names neither the CPU nor the cause. On v1 that
// answer is ERANGE on the first ancestor widened. On v2 the root's cpuset.cpus.effective holds
// only online CPUs outside child partitions (root or isolated), and the kernel accepts a
// cpuset.cpus naming others but runs the container on the rest: fewer CPUs than claimed, or
// (none left) the parent's shared CPUs. That breaks the claim silently, so v2 fails too: a
// hook failure fails the container's creation, which the kubelet reports and retries. /sys's
// `present` list tells a CPU this machine lacks (a spec from another machine, a stale claim)
// from one that is offline or in a partition. No root file (an unusual mount): no check, the
// kernel decides as before.
void CheckRootCpuset(const std::string& hierarchy, bool v2, const std::set<int>& cpus,
                     const std::string& cpus_arg) {
  const std::string root_file = hierarchy + (v2 ? "/cpuset.cpus.effective" : "/cpuset.cpus");
  bool root_ok = false;
  const std::string root_text = Read(root_file, &root_ok);
  const std::optional<std::set<int>> usable = root_ok ? hook::ParseList(root_text) : std::nullopt;
  if (usable && !usable->empty()) {
    const std::string present_file = "/sys/devices/system/cpu/present";
    bool present_ok = false;
    const std::string present_text = Read(present_file, &present_ok);
    const std::optional<std::set<int>> present =
        present_ok ? hook::ParseList(present_text) : std::nullopt;
    std::set<int> absent, unusable;
    for (int c : cpus) {
      if (usable->contains(c)) continue;
      (present && !present->contains(c) ? absent : unusable).insert(c);
    }
    std::string why;
    if (!absent.empty()) {
      why = "CPU " + hook::FormatList(absent) + " is not present on this machine (" + present_file +
            " has " + hook::FormatList(*present) + ")";
    }
    if (!unusable.empty()) {
      why += std::string(why.empty() ? "" : "; ") + "CPU " + hook::FormatList(unusable) +
             " is not in the root cpuset (" + root_file + " has " + hook::FormatList(*usable) +
             (v2 ? "): offline or in a cpuset partition" : "): offline or excluded");
    }
    if (!why.empty()) Fail("--cpus \"" + cpus_arg + "\": " + why);
  }
}

// The same for --mems: a memory node the root cpuset does not have (a CPU-less node named in a
// claim's numaMemory that this machine lacks, or one offline) fails the hook before anything
// is written. Only the root's own list is looked at: /sys's node lists do not say which nodes
// a cpuset may use.
void CheckRootMems(const std::string& hierarchy, bool v2, const std::set<int>& mems,
                   const std::string& mems_arg) {
  const std::string root_file = hierarchy + (v2 ? "/cpuset.mems.effective" : "/cpuset.mems");
  bool root_ok = false;
  const std::string root_text = Read(root_file, &root_ok);
  const std::optional<std::set<int>> usable = root_ok ? hook::ParseList(root_text) : std::nullopt;
  if (!usable || usable->empty()) return;
  std::set<int> missing;
  for (int n : mems) {
    if (!usable->contains(n)) missing.insert(n);
  }
  if (!missing.empty()) {
    Fail("--mems \"" + mems_arg + "\": NUMA node " + hook::FormatList(missing) +
         " is not in the root cpuset (" + root_file + " has " + hook::FormatList(*usable) +
         "): no memory there, or offline");
  }
}

// Widens `file` ("cpuset.cpus", "cpuset.mems") of every ancestor in `chain` (the container
// last, not touched) to hold `want`, parents first, as cgroup v1 requires of a child's list.
void WidenAncestors(const std::string& hierarchy, const std::vector<std::string>& chain,
                    const std::string& file_name, const std::set<int>& want) {
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    const std::string file = hierarchy + "/" + chain[i] + "/" + file_name;
    bool read_ok = false;
    const std::string now = Read(file, &read_ok);
    if (!read_ok) continue;  // v2: cpuset not enabled at this level
    std::optional<std::set<int>> have = hook::ParseList(now);
    if (!have || have->empty()) continue;  // v2: empty inherits the parent's
    std::set<int> wider = *have;
    wider.insert(want.begin(), want.end());
    if (wider != *have) WriteCgroupFile(file, hook::FormatList(wider));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string cpus_arg, mems_arg, claim, records, cgroup_root = "/sys/fs/cgroup";
  bool have_mems = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--cpus") {
      cpus_arg = value();
    } else if (a == "--mems") {
      mems_arg = value();
      have_mems = true;
    } else if (a == "--claim") {
      claim = value();
    } else if (a == "--records") {
      records = value();
    } else if (a == "--cgroup-root") {
      cgroup_root = value();
    } else {
      Fail("unknown argument \"" + a + "\"");
    }
  }
  const std::optional<std::set<int>> cpus = hook::ParseList(cpus_arg);
  if (!cpus || cpus->empty()) Fail("--cpus \"" + cpus_arg + "\" is not a CPU list");
  const std::optional<std::set<int>> mems =
      have_mems ? hook::ParseList(mems_arg) : std::optional<std::set<int>>();
  if (have_mems && (!mems || mems->empty())) {
    Fail("--mems \"" + mems_arg + "\" is not a list of NUMA nodes");
  }
  if (!SafeName(claim)) Fail("--claim \"" + claim + "\" is not a claim id");
  if (records.empty()) Fail("--records is required");

  const std::string state_text((std::istreambuf_iterator<char>(std::cin)),
                               std::istreambuf_iterator<char>());
  const nlohmann::json state = nlohmann::json::parse(state_text, nullptr, false);
  if (!state.is_object() || !state.contains("pid") || !state["pid"].is_number_integer() ||
      !state.contains("id") || !state["id"].is_string()) {
    Fail("stdin is not an OCI container state with \"id\" and \"pid\"");
  }
  const long pid = state["pid"].get<long>();
  const std::string id = state["id"].get<std::string>();
  if (pid <= 0 || !SafeName(id)) Fail("bad container id or pid in the OCI state");

  const bool v2 =
      !IsDir(cgroup_root + "/cpuset") && std::ifstream(cgroup_root + "/cgroup.controllers").good();
  const std::string hierarchy = v2 ? cgroup_root : cgroup_root + "/cpuset";
  CheckRootCpuset(hierarchy, v2, *cpus, cpus_arg);
  if (mems) CheckRootMems(hierarchy, v2, *mems, mems_arg);
  bool ok = false;
  const std::string proc = Read("/proc/" + std::to_string(pid) + "/cgroup", &ok);
  if (!ok) Fail("cannot read /proc/" + std::to_string(pid) + "/cgroup");
  const std::optional<std::string> relative = hook::CpusetCgroupOf(proc, v2);
  if (!relative) Fail("no cpuset cgroup for pid " + std::to_string(pid) + " in: " + proc);

  // The record first: a reconcile that runs from now on keeps the container on its CPUs.
  WriteRecord(records, id + "_" + claim + ".json",
              hook::RecordJson(id, claim, hook::FormatList(*cpus), *relative,
                               mems ? hook::FormatList(*mems) : ""));

  // The container's CPUs: every CPU claim of it (a container may hold several); its memory
  // nodes likewise, when every one of those claims names them.
  std::set<int> want = *cpus;
  std::vector<std::optional<std::set<int>>> record_mems;
  {
    const std::string prefix = id + "_";
    DIR* d = ::opendir(records.c_str());
    if (d != nullptr) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name.rfind(prefix, 0) != 0) continue;
        bool read_ok = false;
        const nlohmann::json r =
            nlohmann::json::parse(ReadRecord(records + "/" + name, &read_ok), nullptr, false);
        if (!r.is_object() || !r.contains("cpus") || !r["cpus"].is_string()) continue;
        if (auto more = hook::ParseList(r["cpus"].get<std::string>())) {
          want.insert(more->begin(), more->end());
        }
        record_mems.push_back(r.contains("mems") && r["mems"].is_string()
                                  ? hook::ParseList(r["mems"].get<std::string>())
                                  : std::nullopt);
      }
      ::closedir(d);
    }
  }
  const std::string want_text = hook::FormatList(want);

  const std::vector<std::string> chain = hook::Chain(*relative);
  WidenAncestors(hierarchy, chain, "cpuset.cpus", want);
  // Memory nodes only when this claim names them: a claim prepared with --numa-memory=none
  // leaves cpuset.mems to the reconciler.
  const std::optional<std::set<int>> want_mems =
      mems ? hook::UnionMems(record_mems) : std::optional<std::set<int>>();
  if (want_mems) WidenAncestors(hierarchy, chain, "cpuset.mems", *want_mems);
  WriteCgroupFile(hierarchy + "/" + *relative + "/cpuset.cpus", want_text);
  if (want_mems) {
    WriteCgroupFile(hierarchy + "/" + *relative + "/cpuset.mems", hook::FormatList(*want_mems));
  }
  return 0;
}
