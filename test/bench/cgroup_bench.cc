// Cost of keeping the pod cgroups on their CPUs: re-applying the target to 500 containers after
// one prepare (the shared pool shrinks by 2 CPUs, one container becomes exclusive), on a fake
// cgroup v2 tree (systemd driver) in tmpfs. The floor, measured in the same run: one Scan of the
// tree, and writing 500 cpuset.cpus files with nothing else. tmpfs is the file I/O floor; on a
// real cgroupfs each write also moves the cgroup's tasks, which this does not measure.
// The same again with --numa-memory=claim: every cgroup's cpuset.mems read as well, the claim's
// container moved to one of 4 NUMA nodes (its pod and everyone else keep all), beside its own
// floor (Scan with mems, 500 cpuset.mems writes).
//
// usage: cgroup_bench [ROUNDS]
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/cgroup/cgroupfs.h"
#include "driver/cgroup/layout.h"
#include "driver/cgroup/reconciler.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using topodra::CpuSet;
using topodra::cgroup::ApplyResult;
using topodra::cgroup::Target;

constexpr int kPods = 125;
constexpr int kContainersPerPod = 4;

struct Stats {
  double min_ms = 0, p50_ms = 0, p99_ms = 0;
};

Stats Summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
  };
  return {ms.front(), at(0.5), at(0.99)};
}

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void Print(const char* label, const Stats& s, const std::string& extra = "") {
  std::printf("%-44s min %7.3f ms  p50 %7.3f ms  p99 %7.3f ms%s\n", label, s.min_ms, s.p50_ms,
              s.p99_ms, extra.c_str());
}

std::string Hex(int n, int width) {
  char buffer[80];
  std::snprintf(buffer, sizeof(buffer), "%0*x", width, n);
  return buffer;
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A v2 systemd tree as the kubelet leaves it: every cpuset.cpus empty ("the parent's"). Returns
// the containers' relative paths and ids.
void BuildTree(const std::string& root, std::vector<std::string>& containers,
               std::vector<std::string>& ids) {
  Write(root + "/cgroup.controllers", "cpuset cpu io memory pids\n");
  auto add = [&](const std::string& relative) {
    fs::create_directories(root + "/" + relative);
    Write(root + "/" + relative + "/cpuset.cpus", "\n");
    Write(root + "/" + relative + "/cpuset.mems", "\n");
  };
  add("kubepods.slice");
  add("kubepods.slice/kubepods-burstable.slice");
  add("kubepods.slice/kubepods-besteffort.slice");
  for (int p = 0; p < kPods; ++p) {
    // 8-4-4-4-12, escaped for systemd.
    const std::string uid = absl::StrCat(Hex(p, 8), "_0000_4000_8000_", Hex(p, 12));
    std::string pod;
    switch (p % 3) {
      case 0:
        pod = absl::StrCat("kubepods.slice/kubepods-pod", uid, ".slice");
        break;
      case 1:
        pod = absl::StrCat("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod", uid,
                           ".slice");
        break;
      default:
        pod = absl::StrCat("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod", uid,
                           ".slice");
    }
    add(pod);
    for (int c = 0; c < kContainersPerPod; ++c) {
      const std::string id = Hex(p * kContainersPerPod + c, 64);
      const std::string container = absl::StrCat(pod, "/cri-containerd-", id, ".scope");
      add(container);
      containers.push_back(container);
      ids.push_back(id);
    }
  }
}

// One run of every measurement for targets `a` and `b` (b: a after one prepare); `mems` says
// whether they manage cpuset.mems (then the floors read and write mems too).
void Measure(const topodra::cgroup::Hierarchy& hierarchy,
             const std::vector<std::string>& containers, const Target& a, const Target& b,
             int rounds, bool mems, const char* tag) {
  topodra::cgroup::Reconciler reconciler(topodra::cgroup::NewCgroupFs(hierarchy), "");
  auto start = Clock::now();
  ApplyResult first = reconciler.Apply(a);
  std::printf("%-44s %7.3f ms  (%d cgroups, %d writes, %d failed)\n",
              absl::StrCat("first apply (every file)", tag).c_str(), MsSince(start), first.cgroups,
              first.writes, first.failed);

  std::vector<double> apply_ms;
  int writes_min = 1 << 30, writes_max = 0, failed = 0;
  for (int i = 0; i < rounds; ++i) {
    start = Clock::now();
    const ApplyResult r = reconciler.Apply(i % 2 == 0 ? b : a);
    apply_ms.push_back(MsSince(start));
    writes_min = std::min(writes_min, r.writes);
    writes_max = std::max(writes_max, r.writes);
    failed += r.failed;
  }
  std::vector<double> noop_ms;
  for (int i = 0; i < rounds; ++i) {
    start = Clock::now();
    reconciler.Apply(a);
    noop_ms.push_back(MsSince(start));
  }

  std::unique_ptr<topodra::cgroup::CgroupFs> cg = topodra::cgroup::NewCgroupFs(hierarchy);
  std::vector<double> scan_ms;
  size_t scanned = 0;
  for (int i = 0; i < rounds; ++i) {
    start = Clock::now();
    auto tree = cg->Scan(mems);
    scan_ms.push_back(MsSince(start));
    scanned = tree.ok() ? tree->size() : 0;
  }
  std::vector<double> write_ms;
  for (int i = 0; i < rounds; ++i) {
    const CpuSet cpus = i % 2 == 0 ? b.shared : a.shared;
    start = Clock::now();
    for (const std::string& c : containers) {
      if (!cg->WriteCpus(c, cpus).ok()) ++failed;
    }
    write_ms.push_back(MsSince(start));
  }
  std::vector<double> write_mems_ms;
  for (int i = 0; mems && i < rounds; ++i) {
    const CpuSet nodes = i % 2 == 0 ? CpuSet{1} : a.all_mems;
    start = Clock::now();
    for (const std::string& c : containers) {
      if (!cg->WriteMems(c, nodes).ok()) ++failed;
    }
    write_mems_ms.push_back(MsSince(start));
  }

  Print(absl::StrCat("re-apply after one prepare (A<->B)", tag).c_str(), Summarize(apply_ms),
        absl::StrCat("  (", writes_min, "-", writes_max, " writes)"));
  Print(absl::StrCat("re-apply, nothing changed", tag).c_str(), Summarize(noop_ms));
  Print(absl::StrCat("floor: Scan only", tag).c_str(), Summarize(scan_ms),
        absl::StrCat("  (", scanned, " cgroups)"));
  Print("floor: write 500 cpuset.cpus files", Summarize(write_ms));
  if (mems) Print("floor: write 500 cpuset.mems files", Summarize(write_mems_ms));
  if (failed > 0) std::printf("FAILED writes: %d\n", failed);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(2, std::atoi(argv[1])) : 50;
  struct stat st;
  const std::string tmp = ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
  std::string pattern = tmp + "/topodra-cgroup-bench-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string root = pattern;
  std::vector<std::string> containers, ids;
  BuildTree(root, containers, ids);
  const topodra::cgroup::Hierarchy hierarchy{topodra::cgroup::Version::kV2, root};

  // 64 CPUs, 0-1 reserved; target B is target A after one prepare of 2 CPUs for one container.
  Target a;
  a.online = CpuSet::Range(0, 63);
  a.shared = CpuSet::Range(2, 63);
  Target b = a;
  b.shared = CpuSet::Range(4, 63);
  b.exclusive[ids[ids.size() / 2]] = CpuSet{2, 3};

  std::printf("cgroup re-apply, fake cgroup v2 tree in %s: %d pods x %d containers, %d rounds\n",
              tmp.c_str(), kPods, kContainersPerPod, rounds);
  Measure(hierarchy, containers, a, b, rounds, /*mems=*/false, "");

  // --numa-memory=claim: 4 memory nodes; the claim's container on node 1 (its CPUs' node).
  Target am = a;
  am.all_mems = CpuSet::Range(0, 3);
  Target bm = b;
  bm.all_mems = am.all_mems;
  bm.exclusive_mems[ids[ids.size() / 2]] = CpuSet{1};
  std::printf("\nwith --numa-memory=claim (cpuset.mems too, 4 NUMA nodes)\n");
  Measure(hierarchy, containers, am, bm, rounds, /*mems=*/true, " +mems");
  std::printf("\ntarget: re-apply to 500 containers < 50 ms, with or without mems\n");

  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
