#include "driver/cgroup/cgroupfs.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/cgroup/layout.h"
#include "driver/cgroup/reconciler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace topodra::cgroup {
namespace {

namespace fs = std::filesystem;
using testing::ElementsAre;
using testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// A directory tree shaped like a cgroup hierarchy: directories, each with the cpuset.cpus the
// kernel would show, in a fresh temporary directory removed at the end.
class FakeTree {
 public:
  FakeTree() {
    char pattern[] = "/tmp/topodra-cgroupfs-XXXXXX";
    const char* dir = ::mkdtemp(pattern);
    EXPECT_NE(dir, nullptr);
    base_ = dir != nullptr ? dir : "/nonexistent";
    root_ = base_ + "/root";
    fs::create_directories(root_);
    fs::create_directories(base_ + "/stage");
  }
  ~FakeTree() {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }
  const std::string& root() const { return root_; }
  std::string Path(const std::string& relative) const { return root_ + "/" + relative; }

  // mkdir -p, then cpuset.cpus (unless nullopt: a v2 cgroup without the cpuset controller).
  void Add(const std::string& relative, std::optional<std::string> cpus) {
    fs::create_directories(Path(relative));
    if (cpus) WriteFile(Path(relative) + "/cpuset.cpus", *cpus);
  }
  // The same, built aside and renamed into place, so the directory appears with its files (as
  // mkdir on cgroupfs makes it): a watcher never sees it half made.
  void AddAtomically(const std::string& relative, const std::string& cpus) {
    const std::string staged = base_ + "/stage/" + std::to_string(staged_++);
    fs::create_directories(staged);
    WriteFile(staged + "/cpuset.cpus", cpus);
    fs::rename(staged, Path(relative));
  }
  std::string Cpus(const std::string& relative) const {
    return ReadFile(Path(relative) + "/cpuset.cpus");
  }
  std::string Mems(const std::string& relative) const {
    return ReadFile(Path(relative) + "/cpuset.mems");
  }
  void SetMems(const std::string& relative, const std::string& mems) {
    WriteFile(Path(relative) + "/cpuset.mems", mems);
  }
  void SetControllers(const std::string& text) { WriteFile(root_ + "/cgroup.controllers", text); }

 private:
  std::string base_;
  std::string root_;
  int staged_ = 0;
};

const std::string kIdG = std::string(64, 'a');  // guaranteed pod's container (containerd)
const std::string kIdB = std::string(64, 'b');  // burstable pod's container (CRI-O)
const std::string kIdE = std::string(64, 'e');  // besteffort pod's container (containerd)
const std::string kIdN = std::string(64, 'c');  // added while the reconciler runs
constexpr char kUidG[] = "0000000a-0000-4000-8000-00000000000a";
constexpr char kUidB[] = "0000000b-0000-4000-8000-00000000000b";
constexpr char kUidE[] = "0000000e-0000-4000-8000-00000000000e";
constexpr char kUidN[] = "0000000f-0000-4000-8000-00000000000f";

std::string Escaped(std::string uid) {
  for (char& c : uid) {
    if (c == '-') c = '_';
  }
  return uid;
}

// Systemd driver paths.
const std::string kSysPodG = absl::StrCat("kubepods.slice/kubepods-pod", Escaped(kUidG), ".slice");
const std::string kSysCtrG = absl::StrCat(kSysPodG, "/cri-containerd-", kIdG, ".scope");
const std::string kSysPodB = absl::StrCat(
    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod", Escaped(kUidB), ".slice");
const std::string kSysCtrB = absl::StrCat(kSysPodB, "/crio-", kIdB, ".scope");
const std::string kSysConmonB = absl::StrCat(kSysPodB, "/crio-conmon-", kIdB, ".scope");
const std::string kSysPodE = absl::StrCat(
    "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod", Escaped(kUidE), ".slice");
const std::string kSysCtrE = absl::StrCat(kSysPodE, "/cri-containerd-", kIdE, ".scope");

// Cgroupfs driver paths.
const std::string kFsPodG = absl::StrCat("kubepods/pod", kUidG);
const std::string kFsCtrG = absl::StrCat(kFsPodG, "/", kIdG);
const std::string kFsPodB = absl::StrCat("kubepods/burstable/pod", kUidB);
const std::string kFsCtrB = absl::StrCat(kFsPodB, "/crio-", kIdB);
const std::string kFsPodE = absl::StrCat("kubepods/besteffort/pod", kUidE);
const std::string kFsCtrE = absl::StrCat(kFsPodE, "/", kIdE);

// cgroup v2, systemd driver, as the kernel shows it on an 8-CPU machine: cpuset.cpus is empty
// ("the parent's") until someone writes it.
void BuildV2Systemd(FakeTree& t) {
  t.SetControllers("cpuset cpu io memory hugetlb pids rdma misc\n");
  t.Add("system.slice", "\n");
  t.Add("system.slice/containerd.service", "\n");
  t.Add("kubepods.slice", "\n");
  t.Add("kubepods.slice/kubepods-burstable.slice", "\n");
  t.Add("kubepods.slice/kubepods-besteffort.slice", "\n");
  t.Add(kSysPodG, "\n");
  t.Add(kSysCtrG, "\n");
  t.Add(kSysCtrG + "/container", "\n");         // crun's subgroup: the same container
  t.Add(kSysCtrG + "/container/nested", "\n");  // what the container made: not ours
  t.Add(kSysPodB, "\n");
  t.Add(kSysCtrB, "\n");
  t.Add(kSysConmonB, "\n");
  t.Add(kSysPodE, "\n");
  t.Add(kSysCtrE, "\n");
  t.Add(kSysPodE + "/crio-" + std::string(64, 'd') + ".scope", std::nullopt);  // no cpuset
  t.Add("kubepods.slice/not-a-pod.slice", "\n");
}

void BuildV2Cgroupfs(FakeTree& t) {
  t.SetControllers("cpuset cpu io memory pids\n");
  t.Add("kubepods", "0-7\n");
  t.Add("kubepods/burstable", "0-7\n");
  t.Add("kubepods/besteffort", "0-7\n");
  t.Add(kFsPodG, "\n");
  t.Add(kFsCtrG, "\n");
  t.Add(kFsPodB, "\n");
  t.Add(kFsCtrB, "\n");
  t.Add(kFsPodE, "\n");
  t.Add(kFsCtrE, "\n");
}

// cgroup v1: the cpuset controller's own hierarchy in cpuset/, every cpuset.cpus filled (v1
// copies the parent's with cpuset.clone_children, and the kubelet writes them).
void BuildV1(FakeTree& t) {
  t.Add("cpuset", "0-7\n");
  t.Add("cpu,cpuacct", std::nullopt);
  const std::string p = "cpuset/";
  t.Add(p + "kubepods", "0-7\n");
  t.Add(p + "kubepods/burstable", "0-7\n");
  t.Add(p + "kubepods/besteffort", "0-7\n");
  t.Add(p + kFsPodG, "0-7\n");
  t.Add(p + kFsCtrG, "0-7\n");
  t.Add(p + kFsPodB, "0-7\n");
  t.Add(p + kFsCtrB, "0-7\n");
  t.Add(p + kFsPodE, "0-7\n");
  t.Add(p + kFsCtrE, "0-7\n");
  t.Add(p + "system.slice", "0-7\n");
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kKubepods:
      return "kubepods";
    case Level::kQos:
      return "qos";
    case Level::kPod:
      return "pod";
    case Level::kContainer:
      return "container";
  }
  return "?";
}

// One line per cgroup, so a mismatch prints readably.
std::vector<std::string> Lines(const std::vector<Observed>& tree) {
  std::vector<std::string> out;
  for (const Observed& o : tree) {
    out.push_back(absl::StrCat(o.node.path, " ", LevelName(o.node.level), " ",
                               o.node.driver == Driver::kSystemd ? "systemd" : "cgroupfs",
                               " pod=", o.node.pod_uid, " ctr=", o.node.container_id.substr(0, 12),
                               " cpus=", o.cpus.ToString()));
  }
  return out;
}

std::vector<std::string> ScanLines(const Hierarchy& h) {
  absl::StatusOr<std::vector<Observed>> tree = NewCgroupFs(h)->Scan();
  EXPECT_TRUE(tree.ok()) << tree.status();
  return tree.ok() ? Lines(*tree) : std::vector<std::string>{};
}

// ---- FindHierarchy

TEST(FindHierarchyTest, V2WhenRootControllersListCpuset) {
  FakeTree t;
  BuildV2Systemd(t);
  absl::StatusOr<Hierarchy> h = FindHierarchy(t.root() + "/");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, Version::kV2);
  EXPECT_EQ(h->root, t.root());
}

TEST(FindHierarchyTest, V1CpusetDirectory) {
  FakeTree t;
  BuildV1(t);
  absl::StatusOr<Hierarchy> h = FindHierarchy(t.root());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, Version::kV1);
  EXPECT_EQ(h->root, t.root() + "/cpuset");
}

TEST(FindHierarchyTest, V1CoMountedCpuset) {
  FakeTree t;
  t.Add("cpu,cpuacct", std::nullopt);
  t.Add("cpuset", std::nullopt);  // an empty mount point: nothing mounted there
  t.Add("cpu,cpuset", "0-3\n");
  absl::StatusOr<Hierarchy> h = FindHierarchy(t.root());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, Version::kV1);
  EXPECT_EQ(h->root, t.root() + "/cpu,cpuset");
}

TEST(FindHierarchyTest, V1MountGivenDirectly) {
  FakeTree t;
  BuildV1(t);
  absl::StatusOr<Hierarchy> h = FindHierarchy(t.root() + "/cpuset");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, Version::kV1);
  EXPECT_EQ(h->root, t.root() + "/cpuset");
}

TEST(FindHierarchyTest, EmptyDirectoryIsNotFound) {
  FakeTree t;
  absl::StatusOr<Hierarchy> h = FindHierarchy(t.root());
  EXPECT_TRUE(absl::IsNotFound(h.status())) << h.status();
  EXPECT_THAT(h.status().message(), HasSubstr("\"" + t.root() + "\""));
  EXPECT_THAT(h.status().message(), HasSubstr("cgroup.controllers\" cannot be read"));
}

TEST(FindHierarchyTest, V2WithoutCpusetControllerIsNotFound) {
  FakeTree t;
  t.SetControllers("cpu io memory pids\n");
  absl::StatusOr<Hierarchy> h = FindHierarchy(t.root());
  EXPECT_TRUE(absl::IsNotFound(h.status())) << h.status();
  EXPECT_THAT(h.status().message(), HasSubstr("does not list cpuset"));
}

// ---- Scan

TEST(ScanTest, V2SystemdAllQosTiersParentsFirst) {
  FakeTree t;
  BuildV2Systemd(t);
  WriteFile(t.Path(kSysCtrB) + "/cpuset.cpus", "2-3,6\n");
  const std::string g = " pod=" + std::string(kUidG);
  const std::string b = " pod=" + std::string(kUidB);
  const std::string e = " pod=" + std::string(kUidE);
  EXPECT_THAT(
      ScanLines({Version::kV2, t.root()}),
      ElementsAre("kubepods.slice kubepods systemd pod= ctr= cpus=",
                  "kubepods.slice/kubepods-besteffort.slice qos systemd pod= ctr= cpus=",
                  kSysPodE + " pod systemd" + e + " ctr= cpus=",
                  kSysCtrE + " container systemd" + e + " ctr=eeeeeeeeeeee cpus=",
                  "kubepods.slice/kubepods-burstable.slice qos systemd pod= ctr= cpus=",
                  kSysPodB + " pod systemd" + b + " ctr= cpus=",
                  kSysCtrB + " container systemd" + b + " ctr=bbbbbbbbbbbb cpus=2-3,6",
                  kSysConmonB + " container systemd" + b + " ctr=conmon-bbbbb cpus=",
                  kSysPodG + " pod systemd" + g + " ctr= cpus=",
                  kSysCtrG + " container systemd" + g + " ctr=aaaaaaaaaaaa cpus=",
                  kSysCtrG + "/container container systemd" + g + " ctr=aaaaaaaaaaaa cpus="));
}

TEST(ScanTest, V2Cgroupfs) {
  FakeTree t;
  BuildV2Cgroupfs(t);
  const std::string g = " pod=" + std::string(kUidG);
  const std::string b = " pod=" + std::string(kUidB);
  const std::string e = " pod=" + std::string(kUidE);
  EXPECT_THAT(ScanLines({Version::kV2, t.root()}),
              ElementsAre("kubepods kubepods cgroupfs pod= ctr= cpus=0-7",
                          "kubepods/besteffort qos cgroupfs pod= ctr= cpus=0-7",
                          kFsPodE + " pod cgroupfs" + e + " ctr= cpus=",
                          kFsCtrE + " container cgroupfs" + e + " ctr=eeeeeeeeeeee cpus=",
                          "kubepods/burstable qos cgroupfs pod= ctr= cpus=0-7",
                          kFsPodB + " pod cgroupfs" + b + " ctr= cpus=",
                          kFsCtrB + " container cgroupfs" + b + " ctr=bbbbbbbbbbbb cpus=",
                          kFsPodG + " pod cgroupfs" + g + " ctr= cpus=",
                          kFsCtrG + " container cgroupfs" + g + " ctr=aaaaaaaaaaaa cpus="));
}

TEST(ScanTest, V1) {
  FakeTree t;
  BuildV1(t);
  const std::string g = " pod=" + std::string(kUidG);
  const std::string b = " pod=" + std::string(kUidB);
  const std::string e = " pod=" + std::string(kUidE);
  EXPECT_THAT(ScanLines({Version::kV1, t.root() + "/cpuset"}),
              ElementsAre("kubepods kubepods cgroupfs pod= ctr= cpus=0-7",
                          "kubepods/besteffort qos cgroupfs pod= ctr= cpus=0-7",
                          kFsPodE + " pod cgroupfs" + e + " ctr= cpus=0-7",
                          kFsCtrE + " container cgroupfs" + e + " ctr=eeeeeeeeeeee cpus=0-7",
                          "kubepods/burstable qos cgroupfs pod= ctr= cpus=0-7",
                          kFsPodB + " pod cgroupfs" + b + " ctr= cpus=0-7",
                          kFsCtrB + " container cgroupfs" + b + " ctr=bbbbbbbbbbbb cpus=0-7",
                          kFsPodG + " pod cgroupfs" + g + " ctr= cpus=0-7",
                          kFsCtrG + " container cgroupfs" + g + " ctr=aaaaaaaaaaaa cpus=0-7"));
}

TEST(ScanTest, NoKubepodsIsEmpty) {
  FakeTree t;
  t.SetControllers("cpuset\n");
  t.Add("system.slice", "0-3\n");
  absl::StatusOr<std::vector<Observed>> tree = NewCgroupFs({Version::kV2, t.root()})->Scan();
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_TRUE(tree->empty());
}

TEST(ScanTest, MalformedCpusFileIsAnErrorNamingIt) {
  FakeTree t;
  BuildV2Cgroupfs(t);
  WriteFile(t.Path(kFsCtrB) + "/cpuset.cpus", "3-1\n");
  absl::StatusOr<std::vector<Observed>> tree = NewCgroupFs({Version::kV2, t.root()})->Scan();
  EXPECT_TRUE(absl::IsInvalidArgument(tree.status())) << tree.status();
  EXPECT_THAT(tree.status().message(), HasSubstr(t.Path(kFsCtrB) + "/cpuset.cpus"));
  EXPECT_THAT(tree.status().message(), HasSubstr("3-1"));
}

// ---- WriteCpus

TEST(WriteCpusTest, WritesTheListAndReadsBack) {
  FakeTree t;
  BuildV1(t);
  std::unique_ptr<CgroupFs> cg = NewCgroupFs({Version::kV1, t.root() + "/cpuset"});
  ASSERT_TRUE(cg->WriteCpus(kFsCtrB, CpuSet{0, 2, 3, 7}).ok());
  EXPECT_EQ(t.Cpus("cpuset/" + kFsCtrB), "0,2-3,7\n");
  // Shorter than what was there: nothing of the old text is left.
  ASSERT_TRUE(cg->WriteCpus(kFsCtrB, CpuSet{5}).ok());
  EXPECT_EQ(t.Cpus("cpuset/" + kFsCtrB), "5\n");
  ASSERT_TRUE(cg->WriteCpus(kFsCtrB, CpuSet{}).ok());
  EXPECT_EQ(t.Cpus("cpuset/" + kFsCtrB), "\n");
  absl::StatusOr<std::vector<Observed>> tree = cg->Scan();
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ((*tree)[6].node.path, kFsCtrB);
  EXPECT_EQ((*tree)[6].cpus, CpuSet{});
}

TEST(WriteCpusTest, RemovedCgroupIsNotFound) {
  FakeTree t;
  BuildV1(t);
  std::unique_ptr<CgroupFs> cg = NewCgroupFs({Version::kV1, t.root() + "/cpuset"});
  fs::remove_all(t.Path("cpuset/" + kFsCtrE));
  const absl::Status st = cg->WriteCpus(kFsCtrE, CpuSet::Range(2, 5));
  EXPECT_TRUE(absl::IsNotFound(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("\"2-5\""));
  EXPECT_THAT(st.message(), HasSubstr(t.Path("cpuset/" + kFsCtrE) + "/cpuset.cpus"));
  EXPECT_THAT(st.message(), HasSubstr("No such file or directory"));
  EXPECT_FALSE(fs::exists(t.Path("cpuset/" + kFsCtrE)));  // not created by the write
}

TEST(WriteCpusTest, PathOutsideTheHierarchyIsRefused) {
  FakeTree t;
  BuildV1(t);
  std::unique_ptr<CgroupFs> cg = NewCgroupFs({Version::kV1, t.root() + "/cpuset"});
  for (const std::string& path : {std::string("../cpuset"), std::string("/kubepods"),
                                  std::string("kubepods/../../x"), std::string()}) {
    const absl::Status st = cg->WriteCpus(path, CpuSet{1});
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << path << ": " << st;
  }
  EXPECT_EQ(t.Cpus("cpuset"), "0-7\n");
}

// ---- Reconciler

Target SampleTarget() {
  Target target;
  target.online = CpuSet::Range(0, 7);
  target.shared = CpuSet::Range(2, 7);
  target.exclusive[kIdG] = CpuSet{0, 1};
  return target;
}

TEST(ReconcilerTest, ApplyV2SystemdGivesDesiredEverywhereThenNothing) {
  FakeTree t;
  BuildV2Systemd(t);
  Reconciler r(NewCgroupFs({Version::kV2, t.root()}), "");
  const ApplyResult first = r.Apply(SampleTarget());
  EXPECT_EQ(first.cgroups, 11);
  EXPECT_EQ(first.writes, 11);  // every file was empty
  EXPECT_EQ(first.failed, 0);
  const std::map<std::string, std::string> want = {
      {"kubepods.slice", "0-7\n"},
      {"kubepods.slice/kubepods-burstable.slice", "0-7\n"},
      {"kubepods.slice/kubepods-besteffort.slice", "0-7\n"},
      {kSysPodG, "0-7\n"},  // shared | its container's exclusive CPUs
      {kSysCtrG, "0-1\n"},
      {kSysCtrG + "/container", "0-1\n"},
      {kSysPodB, "2-7\n"},
      {kSysCtrB, "2-7\n"},
      {kSysConmonB, "2-7\n"},
      {kSysPodE, "2-7\n"},
      {kSysCtrE, "2-7\n"},
      // Not the kubelet's, or no cpuset controller: untouched.
      {"system.slice", "\n"},
      {"kubepods.slice/not-a-pod.slice", "\n"},
      {kSysCtrG + "/container/nested", "\n"},
  };
  for (const auto& [path, cpus] : want) EXPECT_EQ(t.Cpus(path), cpus) << path;
  EXPECT_FALSE(
      fs::exists(t.Path(kSysPodE + "/crio-" + std::string(64, 'd') + ".scope") + "/cpuset.cpus"));

  const ApplyResult second = r.Apply(SampleTarget());
  EXPECT_EQ(second.cgroups, 11);
  EXPECT_EQ(second.writes, 0);
  EXPECT_EQ(second.failed, 0);
  EXPECT_EQ(r.applies(), 2);
}

TEST(ReconcilerTest, ApplyV1ShrinksAndMovesExclusive) {
  FakeTree t;
  BuildV1(t);
  Reconciler r(NewCgroupFs({Version::kV1, t.root() + "/cpuset"}), "");
  Target target = SampleTarget();
  target.exclusive.clear();
  target.exclusive[kIdB] = CpuSet{6, 7};
  target.shared = CpuSet::Range(1, 5);
  const ApplyResult result = r.Apply(target);
  EXPECT_EQ(result.cgroups, 9);
  EXPECT_EQ(result.writes, 6);  // kubepods and the QoS cgroups already hold every CPU
  EXPECT_EQ(result.failed, 0);
  const std::string p = "cpuset/";
  EXPECT_EQ(t.Cpus(p + "kubepods"), "0-7\n");
  EXPECT_EQ(t.Cpus(p + "kubepods/burstable"), "0-7\n");
  EXPECT_EQ(t.Cpus(p + kFsPodB), "1-7\n");
  EXPECT_EQ(t.Cpus(p + kFsCtrB), "6-7\n");
  EXPECT_EQ(t.Cpus(p + kFsPodG), "1-5\n");
  EXPECT_EQ(t.Cpus(p + kFsCtrG), "1-5\n");
  EXPECT_EQ(t.Cpus(p + kFsPodE), "1-5\n");
  EXPECT_EQ(t.Cpus(p + kFsCtrE), "1-5\n");
  EXPECT_EQ(t.Cpus(p + "system.slice"), "0-7\n");
  EXPECT_EQ(r.Apply(target).writes, 0);
}

// A CgroupFs whose writes fail as told, to count what Apply counts.
class ScriptedFs : public CgroupFs {
 public:
  ScriptedFs(std::vector<Observed> tree, std::map<std::string, absl::Status> errors)
      : tree_(std::move(tree)), errors_(std::move(errors)) {}
  absl::StatusOr<std::vector<Observed>> Scan(bool) override {
    if (!scan_error_.ok()) return scan_error_;
    return tree_;
  }
  absl::Status Write(const std::string& path, CpusetFile, const CpuSet&) override {
    auto it = errors_.find(path);
    return it == errors_.end() ? absl::OkStatus() : it->second;
  }
  absl::Status scan_error_;

 private:
  std::vector<Observed> tree_;
  std::map<std::string, absl::Status> errors_;
};

TEST(ReconcilerTest, RemovedCgroupsAreNotFailuresOtherErrorsAre) {
  std::vector<Observed> tree;
  for (const std::string& path : {std::string("kubepods"), kFsPodB, kFsCtrB, kFsPodE, kFsCtrE}) {
    std::optional<Node> node = Classify(path);
    ASSERT_TRUE(node.has_value()) << path;
    tree.push_back({*node, CpuSet::Range(0, 7)});
  }
  auto scripted = std::make_unique<ScriptedFs>(
      tree, std::map<std::string, absl::Status>{
                {kFsCtrB, absl::NotFoundError("gone")},
                {kFsCtrE, absl::PermissionDeniedError("write cpus \"2-7\" to ...: denied")}});
  ScriptedFs* raw = scripted.get();
  Reconciler r(std::move(scripted), "");
  ApplyResult result = r.Apply(SampleTarget());
  EXPECT_EQ(result.cgroups, 5);
  EXPECT_EQ(result.writes, 2);  // the two pods
  EXPECT_EQ(result.failed, 1);

  raw->scan_error_ = absl::PermissionDeniedError("denied");
  result = r.Apply(SampleTarget());
  EXPECT_EQ(result.cgroups, 0);
  EXPECT_EQ(result.writes, 0);
  EXPECT_EQ(result.failed, 1);
}

bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done();
}

TEST(ReconcilerTest, BackgroundThreadAppliesToNewCgroupsAndNewTargets) {
  FakeTree t;
  BuildV2Systemd(t);
  Reconciler r(NewCgroupFs({Version::kV2, t.root()}), t.root());
  r.Apply(SampleTarget());
  ASSERT_TRUE(r.Start().ok());
  // Start's own apply done first, so what follows can only be found through inotify.
  ASSERT_TRUE(WaitFor([&] { return r.applies() == 2; })) << r.applies();

  // A container appears in an existing pod.
  const std::string new_ctr = absl::StrCat(kSysPodB, "/cri-containerd-", kIdN, ".scope");
  t.AddAtomically(new_ctr, "0-7\n");
  EXPECT_TRUE(WaitFor([&] { return t.Cpus(new_ctr) == "2-7\n"; })) << t.Cpus(new_ctr);

  // A pod appears; its container shows up right after, before the pod's directory is watched.
  const std::string new_pod = absl::StrCat(
      "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod", Escaped(kUidN), ".slice");
  const std::string pod_ctr = absl::StrCat(new_pod, "/crio-", std::string(64, '9'), ".scope");
  t.AddAtomically(new_pod, "\n");
  t.AddAtomically(pod_ctr, "\n");
  EXPECT_TRUE(WaitFor([&] { return t.Cpus(pod_ctr) == "2-7\n" && t.Cpus(new_pod) == "2-7\n"; }))
      << t.Cpus(new_pod) << " " << t.Cpus(pod_ctr);

  // One more prepare: the new container gets 2-3, the shared pool shrinks.
  Target next = SampleTarget();
  next.shared = CpuSet::Range(4, 7);
  next.exclusive[kIdN] = CpuSet{2, 3};
  r.SetTarget(next);
  EXPECT_TRUE(WaitFor([&] {
    return t.Cpus(new_ctr) == "2-3\n" && t.Cpus(kSysCtrB) == "4-7\n" &&
           t.Cpus(kSysPodB) == "2-7\n" && t.Cpus(kSysCtrE) == "4-7\n" &&
           t.Cpus(pod_ctr) == "4-7\n" && t.Cpus(kSysCtrG) == "0-1\n";
  })) << t.Cpus(new_ctr)
      << " " << t.Cpus(kSysCtrB) << " " << t.Cpus(kSysPodB) << " " << t.Cpus(kSysCtrE);

  r.Stop();
  const int applies = r.applies();
  r.SetTarget(SampleTarget());  // stopped: nothing happens
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(r.applies(), applies);
  EXPECT_EQ(t.Cpus(new_ctr), "2-3\n");
}

TEST(ReconcilerTest, KubepodsCreatedAfterStartIsWatched) {
  FakeTree t;
  t.SetControllers("cpuset\n");
  Reconciler r(NewCgroupFs({Version::kV2, t.root()}), t.root());
  r.SetTarget(SampleTarget());
  ASSERT_TRUE(r.Start().ok());
  ASSERT_TRUE(WaitFor([&] { return r.applies() == 1; })) << r.applies();
  t.AddAtomically("kubepods", "\n");
  EXPECT_TRUE(WaitFor([&] { return t.Cpus("kubepods") == "0-7\n"; })) << t.Cpus("kubepods");
  t.AddAtomically("kubepods/besteffort", "\n");
  t.AddAtomically(kFsPodE, "\n");
  t.AddAtomically(kFsCtrE, "\n");
  EXPECT_TRUE(WaitFor([&] { return t.Cpus(kFsCtrE) == "2-7\n"; })) << t.Cpus(kFsCtrE);
  EXPECT_EQ(t.Cpus("kubepods/besteffort"), "0-7\n");
  EXPECT_EQ(t.Cpus(kFsPodE), "2-7\n");
}

TEST(ReconcilerTest, WithoutWatchRootSetTargetStillApplies) {
  FakeTree t;
  BuildV2Cgroupfs(t);
  Reconciler r(NewCgroupFs({Version::kV2, t.root()}), "");
  ASSERT_TRUE(r.Start().ok());
  EXPECT_EQ(r.applies(), 0);  // no target yet: nothing to apply
  r.SetTarget(SampleTarget());
  EXPECT_TRUE(WaitFor([&] { return t.Cpus(kFsCtrE) == "2-7\n"; })) << t.Cpus(kFsCtrE);
  EXPECT_EQ(t.Cpus(kFsCtrG), "0-1\n");
  EXPECT_FALSE(r.Start().ok());  // already running
}

// ---- cpuset.mems (--numa-memory=claim)

// Every cgroup of a tree gets `mems` as its cpuset.mems (v1: the kubelet copies the parent's;
// v2: "\n", the parent's, as the kernel starts them).
void AddMems(FakeTree& t, const std::string& prefix, const std::vector<std::string>& paths,
             const std::string& mems) {
  for (const std::string& path : paths) t.SetMems(prefix + path, mems);
}

const std::vector<std::string> kFsPaths = {"kubepods",
                                           "kubepods/burstable",
                                           "kubepods/besteffort",
                                           kFsPodG,
                                           kFsCtrG,
                                           kFsPodB,
                                           kFsCtrB,
                                           kFsPodE,
                                           kFsCtrE};

TEST(CgroupFsMemsTest, ScanReadsMemsOnlyWhenAsked) {
  FakeTree t;
  BuildV1(t);
  AddMems(t, "cpuset/", kFsPaths, "0-1\n");
  t.SetMems("cpuset/" + kFsCtrE, "garbage\n");
  std::remove(t.Path("cpuset/" + kFsCtrB + "/cpuset.mems").c_str());
  std::unique_ptr<CgroupFs> cg = NewCgroupFs({Version::kV1, t.root() + "/cpuset"});
  absl::StatusOr<std::vector<Observed>> without = cg->Scan();
  ASSERT_TRUE(without.ok()) << without.status();
  for (const Observed& o : *without) EXPECT_FALSE(o.mems.has_value()) << o.node.path;
  absl::StatusOr<std::vector<Observed>> with = cg->Scan(/*mems=*/true);
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_EQ(with->size(), 9u);
  for (const Observed& o : *with) {
    if (o.node.path == kFsCtrE || o.node.path == kFsCtrB) {
      // Unreadable or missing: nullopt, and the scan goes on.
      EXPECT_FALSE(o.mems.has_value()) << o.node.path;
    } else {
      EXPECT_EQ(o.mems, (CpuSet{0, 1})) << o.node.path;
    }
  }
}

TEST(CgroupFsMemsTest, WriteMemsAndRootMems) {
  FakeTree t;
  BuildV1(t);
  t.SetMems("cpuset", "0-3\n");
  AddMems(t, "cpuset/", kFsPaths, "0-3\n");
  const Hierarchy v1{Version::kV1, t.root() + "/cpuset"};
  std::unique_ptr<CgroupFs> cg = NewCgroupFs(v1);
  ASSERT_TRUE(cg->WriteMems(kFsCtrB, CpuSet{1, 3}).ok());
  EXPECT_EQ(t.Mems("cpuset/" + kFsCtrB), "1,3\n");
  EXPECT_EQ(t.Cpus("cpuset/" + kFsCtrB), "0-7\n");  // the other file untouched
  const absl::Status bad = cg->WriteMems("../etc", CpuSet{1});
  EXPECT_EQ(bad.message(), "write mems \"1\": invalid cgroup path \"../etc\"");
  fs::remove_all(t.Path("cpuset/" + kFsCtrE));
  EXPECT_TRUE(absl::IsNotFound(cg->WriteMems(kFsCtrE, CpuSet{0})));

  absl::StatusOr<CpuSet> root = RootMems(v1);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root, CpuSet::Range(0, 3));
  t.SetMems("cpuset", "\n");
  EXPECT_THAT(RootMems(v1).status().message(), HasSubstr("cpuset/cpuset.mems\" is empty"));
  t.SetMems("cpuset", "x\n");
  EXPECT_THAT(RootMems(v1).status().message(), HasSubstr("cpuset/cpuset.mems\": "));

  // v2: the root cgroup has only the effective list.
  FakeTree t2;
  BuildV2Systemd(t2);
  WriteFile(t2.root() + "/cpuset.mems.effective", "0-1\n");
  EXPECT_EQ(RootMems({Version::kV2, t2.root()}).value_or(CpuSet{}), (CpuSet{0, 1}));
  EXPECT_TRUE(absl::IsNotFound(RootMems({Version::kV2, t2.root() + "/nothing"}).status()));
}

Target MemsTarget() {
  Target target = SampleTarget();  // kIdG exclusive on 0-1, shared 2-7
  target.all_mems = CpuSet{0, 1};
  target.exclusive_mems[kIdG] = CpuSet{0};
  return target;
}

TEST(ReconcilerMemsTest, ApplyV1NarrowsClaimContainersOnlyThenNothing) {
  FakeTree t;
  BuildV1(t);
  AddMems(t, "cpuset/", kFsPaths, "0-1\n");
  t.SetMems("cpuset/system.slice", "0-1\n");
  Reconciler r(NewCgroupFs({Version::kV1, t.root() + "/cpuset"}), "");
  const ApplyResult first = r.Apply(MemsTarget());
  EXPECT_EQ(first.failed, 0);
  const std::string p = "cpuset/";
  EXPECT_EQ(t.Mems(p + kFsCtrG), "0\n");
  for (const std::string& path : kFsPaths) {
    if (path != kFsCtrG) {
      EXPECT_EQ(t.Mems(p + path), "0-1\n") << path;
    }
  }
  EXPECT_EQ(t.Cpus(p + kFsCtrG), "0-1\n");
  EXPECT_EQ(r.Apply(MemsTarget()).writes, 0);

  // The claim is unprepared: its container gets every node back, its cpus the shared pool.
  Target after = SampleTarget();
  after.exclusive.clear();
  after.shared = CpuSet::Range(0, 7);
  after.all_mems = CpuSet{0, 1};
  EXPECT_EQ(r.Apply(after).failed, 0);
  EXPECT_EQ(t.Mems(p + kFsCtrG), "0-1\n");
  EXPECT_EQ(t.Cpus(p + kFsCtrG), "0-7\n");

  // --numa-memory=none: mems are left as they are, whatever they are.
  t.SetMems(p + kFsCtrE, "1\n");
  EXPECT_EQ(r.Apply(SampleTarget()).failed, 0);
  EXPECT_EQ(t.Mems(p + kFsCtrE), "1\n");
  EXPECT_EQ(t.Mems(p + kFsCtrG), "0-1\n");
}

TEST(ReconcilerMemsTest, ApplyV2WritesEmptyMemsTopDown) {
  FakeTree t;
  BuildV2Systemd(t);
  const std::vector<std::string> paths = {"kubepods.slice",
                                          "kubepods.slice/kubepods-burstable.slice",
                                          "kubepods.slice/kubepods-besteffort.slice",
                                          kSysPodG,
                                          kSysCtrG,
                                          kSysCtrG + "/container",
                                          kSysPodB,
                                          kSysCtrB,
                                          kSysConmonB,
                                          kSysPodE,
                                          kSysCtrE};
  AddMems(t, "", paths, "\n");
  Reconciler r(NewCgroupFs({Version::kV2, t.root()}), "");
  const ApplyResult first = r.Apply(MemsTarget());
  EXPECT_EQ(first.failed, 0);
  EXPECT_EQ(first.writes, 22);  // every cpus and every mems file was empty
  for (const std::string& path : paths) {
    const bool claim = path == kSysCtrG || path == kSysCtrG + "/container";
    EXPECT_EQ(t.Mems(path), claim ? "0\n" : "0-1\n") << path;
  }
  EXPECT_EQ(r.Apply(MemsTarget()).writes, 0);
}

// ---- The real cpuset controller of this machine

class ChildProcess {
 public:
  // A process that blocks in read(2) until we close the pipe or kill it: single-threaded, so
  // the cgroup's CPUs become its affinity at once.
  ChildProcess() {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      char c;
      while (::read(fds[0], &c, 1) < 0) {
      }
      ::_exit(0);
    }
    ::close(fds[0]);
    write_end_ = fds[1];
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
    }
    if (write_end_ >= 0) ::close(write_end_);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int write_end_ = -1;
};

std::optional<CpuSet> AffinityOf(pid_t pid) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(pid, sizeof(mask), &mask) != 0) return std::nullopt;
  CpuSet out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) out.Add(cpu);
  }
  return out;
}

bool WriteSmall(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

TEST(CgroupFsRealHostTest, WriteCpusPinsAProcessInTheCgroup) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups (euid " << ::geteuid() << ")";
  absl::StatusOr<Hierarchy> h = FindHierarchy("/sys/fs/cgroup");
  if (!h.ok()) GTEST_SKIP() << "no cpuset controller on this machine: " << h.status();
  const bool v2 = h->version == Version::kV2;
  if (v2 && ReadFile(h->root + "/cgroup.subtree_control").find("cpuset") == std::string::npos) {
    GTEST_SKIP() << "cgroup v2 at " << h->root
                 << " does not delegate cpuset to its children (cgroup.subtree_control lacks "
                    "cpuset); enabling it is left to the machine's owner";
  }
  // v2's root cgroup has no cpuset.cpus: what it can give is its effective set.
  const std::string parent_file = h->root + (v2 ? "/cpuset.cpus.effective" : "/cpuset.cpus");
  absl::StatusOr<CpuSet> parent = CpuSet::Parse(ReadFile(parent_file));
  ASSERT_TRUE(parent.ok()) << parent_file << ": " << parent.status();
  ASSERT_FALSE(parent->Empty()) << parent_file;

  const std::string name = absl::StrCat("topodra-test-", ::getpid());
  const std::string dir = h->root + "/" + name;
  if (::mkdir(dir.c_str(), 0755) != 0) {
    GTEST_SKIP() << "cannot create a cgroup in " << h->root << " (" << std::strerror(errno)
                 << "): the cpuset controller is not writable here";
  }
  struct RemoveCgroup {
    std::string dir;
    ~RemoveCgroup() {
      // The child was reaped before this runs; an exiting task can hold the cgroup a moment.
      for (int i = 0; i < 100 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  } remove_cgroup{dir};
  if (!v2) {
    // v1 starts a cgroup with empty cpus and mems, and refuses tasks until both are set.
    const std::string mems = ReadFile(h->root + "/cpuset.mems");
    ASSERT_TRUE(WriteSmall(dir + "/cpuset.mems", mems)) << std::strerror(errno);
  }

  std::unique_ptr<CgroupFs> cg = NewCgroupFs(*h);
  const CpuSet last{*parent->Last()};
  ASSERT_TRUE(cg->WriteCpus(name, last).ok());
  EXPECT_EQ(ReadFile(dir + "/cpuset.cpus"), last.ToString() + "\n");

  {
    ChildProcess child;
    ASSERT_GT(child.pid(), 0);
    ASSERT_TRUE(WriteSmall(dir + "/cgroup.procs", std::to_string(child.pid())))
        << std::strerror(errno);
    EXPECT_EQ(AffinityOf(child.pid()), last);

    // Changing the cgroup's CPUs moves the process already in it.
    const CpuSet first{*parent->First()};
    ASSERT_TRUE(cg->WriteCpus(name, first).ok());
    EXPECT_EQ(ReadFile(dir + "/cpuset.cpus"), first.ToString() + "\n");
    EXPECT_EQ(AffinityOf(child.pid()), first);
    if (parent->Size() > 1) {
      ASSERT_TRUE(cg->WriteCpus(name, *parent).ok());
      EXPECT_EQ(AffinityOf(child.pid()), *parent);
    }

    // CPUs the parent does not have: the kernel's error comes back with the file and CPUs.
    if (parent->Last() < CpuSet::kMaxCpuId) {
      const CpuSet outside{*parent->Last() + 1};
      const absl::Status st = cg->WriteCpus(name, outside);
      EXPECT_FALSE(st.ok());
      EXPECT_THAT(st.message(), HasSubstr(dir + "/cpuset.cpus"));
      EXPECT_THAT(st.message(), HasSubstr("\"" + outside.ToString() + "\""));
    }
  }  // the child is killed and reaped here, leaving the cgroup empty

  EXPECT_EQ(::rmdir(dir.c_str()), 0) << std::strerror(errno);
  const absl::Status gone = cg->WriteCpus(name, last);
  EXPECT_TRUE(absl::IsNotFound(gone)) << gone;
}

// The reconciler's cpuset.mems path on this machine's real hierarchy: a claim's container
// narrowed to one memory node (the kernel applies it to the process in it), then widened back.
TEST(CgroupFsRealHostTest, ApplyNarrowsAndWidensARealContainersMems) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups (euid " << ::geteuid() << ")";
  absl::StatusOr<Hierarchy> h = FindHierarchy("/sys/fs/cgroup");
  if (!h.ok()) GTEST_SKIP() << "no cpuset controller on this machine: " << h.status();
  if (h->version != Version::kV1) GTEST_SKIP() << "the v1 hierarchy is what this test covers";
  absl::StatusOr<CpuSet> all = RootMems(*h);
  ASSERT_TRUE(all.ok()) << all.status();
  const std::string root_cpus = ReadFile(h->root + "/cpuset.cpus");
  // A kubelet-like tree of our own: kubepods/pod<uid>/<container>, removed whatever happens.
  const std::string kubepods = h->root + "/kubepods";
  if (fs::exists(kubepods)) GTEST_SKIP() << kubepods << " exists: a real kubelet's, not ours";
  const std::vector<std::string> dirs = {"kubepods", kFsPodG, kFsCtrG};
  struct RemoveCgroups {
    std::string root;
    std::vector<std::string> dirs;
    ~RemoveCgroups() {
      for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
        for (int i = 0; i < 100 && ::rmdir((root + "/" + *it).c_str()) != 0 && errno == EBUSY;
             ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    }
  } remove{h->root, {}};
  for (const std::string& dir : dirs) {
    if (::mkdir((h->root + "/" + dir).c_str(), 0755) != 0) {
      GTEST_SKIP() << "cannot create a cgroup in " << h->root << ": " << std::strerror(errno);
    }
    remove.dirs.push_back(dir);
    ASSERT_TRUE(WriteSmall(h->root + "/" + dir + "/cpuset.mems", all->ToString()));
    ASSERT_TRUE(WriteSmall(h->root + "/" + dir + "/cpuset.cpus", root_cpus));
  }
  ChildProcess child;
  ASSERT_GT(child.pid(), 0);
  ASSERT_TRUE(WriteSmall(h->root + "/" + kFsCtrG + "/cgroup.procs", std::to_string(child.pid())));

  absl::StatusOr<CpuSet> online = CpuSet::Parse(root_cpus);
  ASSERT_TRUE(online.ok());
  Target target;
  target.online = *online;
  target.shared = *online;
  target.exclusive[kIdG] = *online;
  target.all_mems = *all;
  const int node = *all->Last();
  target.exclusive_mems[kIdG] = CpuSet{node};
  Reconciler r(NewCgroupFs(*h), "");
  EXPECT_EQ(r.Apply(target).failed, 0);
  EXPECT_EQ(ReadFile(h->root + "/" + kFsCtrG + "/cpuset.mems"), absl::StrCat(node, "\n"));
  EXPECT_EQ(ReadFile(h->root + "/" + kFsPodG + "/cpuset.mems"), all->ToString() + "\n");
  EXPECT_THAT(ReadFile(absl::StrCat("/proc/", child.pid(), "/status")),
              HasSubstr(absl::StrCat("Mems_allowed_list:\t", node, "\n")));
  // A node outside the root: the kernel refuses, the error names the file and the nodes.
  if (*all->Last() < CpuSet::kMaxCpuId) {
    const CpuSet outside{*all->Last() + 1};
    std::unique_ptr<CgroupFs> cg = NewCgroupFs(*h);
    const absl::Status st = cg->WriteMems(kFsCtrG, outside);
    EXPECT_FALSE(st.ok());
    EXPECT_THAT(st.message(), HasSubstr(kFsCtrG + "/cpuset.mems"));
    EXPECT_THAT(st.message(), HasSubstr("write mems \"" + outside.ToString() + "\""));
  }
  // Unprepared: every node again.
  target.exclusive.clear();
  target.exclusive_mems.clear();
  EXPECT_EQ(r.Apply(target).failed, 0);
  EXPECT_EQ(ReadFile(h->root + "/" + kFsCtrG + "/cpuset.mems"), all->ToString() + "\n");
  EXPECT_THAT(ReadFile(absl::StrCat("/proc/", child.pid(), "/status")),
              HasSubstr("Mems_allowed_list:\t" + all->ToString() + "\n"));
}

}  // namespace
}  // namespace topodra::cgroup
