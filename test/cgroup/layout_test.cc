// Classify over paths as the kubelet and the runtimes lay them out, Desired per level, Plan's
// exact writes on small trees, and a property test that simulates plans on random trees under
// cgroup v1's rule (a child's CPUs always within its parent's) at every single write.
#include "driver/cgroup/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace topodra::cgroup {

// Readable failures.
void PrintTo(const Write& w, std::ostream* os) {
  *os << w.path << " " << FileName(w.file) << " <- \"" << w.cpus << "\"";
}
void PrintTo(const Node& n, std::ostream* os) {
  *os << "{" << n.path << " level=" << static_cast<int>(n.level)
      << " driver=" << static_cast<int>(n.driver) << " pod=" << n.pod_uid
      << " container=" << n.container_id << "}";
}

namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

CpuSet Set(const char* text) {
  absl::StatusOr<CpuSet> s = CpuSet::Parse(text);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : CpuSet();
}

// A pod UID as the API server writes it, the same as the systemd driver escapes it, and a static
// pod's (the MD5 of its manifest, 32 hex without dashes).
constexpr char kUid[] = "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d";
constexpr char kUidEsc[] = "1b2c3d4e_5f60_4a7b_8c9d_0e1f2a3b4c5d";
constexpr char kStaticUid[] = "6c6b6a3e5d8f4b2c9a1e0f7d3c2b1a09";
// 64-hex container ids: containerd, CRI-O and Docker all use these.
constexpr char kCid[] = "4f3c2b1a09e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2918070605040302010ff";
constexpr char kCid2[] = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

std::string S(const std::string& a) { return a; }

Node Make(std::string path, Level level, Driver driver, std::string uid = "",
          std::string cid = "") {
  return Node{std::move(path), level, driver, std::move(uid), std::move(cid)};
}

// ---------------------------------------------------------------------------------------------
// Classify

struct ClassifyCase {
  std::string name;
  std::string path;
  std::optional<Node> want;
};

std::vector<ClassifyCase> AcceptedCases() {
  const Driver sd = Driver::kSystemd;
  const Driver fs = Driver::kCgroupfs;
  const std::string kp = "kubepods.slice";
  const std::string bu = kp + "/kubepods-burstable.slice";
  const std::string be = kp + "/kubepods-besteffort.slice";
  const std::string gpod = kp + "/kubepods-pod" + kUidEsc + ".slice";
  const std::string bpod = bu + "/kubepods-burstable-pod" + kUidEsc + ".slice";
  const std::string epod = be + "/kubepods-besteffort-pod" + kUidEsc + ".slice";
  const std::string cg = S("kubepods/pod") + kUid;
  const std::string cb = S("kubepods/burstable/pod") + kUid;
  const std::string ce = S("kubepods/besteffort/pod") + kUid;
  return {
      // systemd driver
      {"sd_kubepods", kp, Make(kp, Level::kKubepods, sd)},
      {"sd_kubepods_slashes", "/" + kp + "/", Make(kp, Level::kKubepods, sd)},
      {"sd_kubepods_many_slashes", "//" + kp + "//", Make(kp, Level::kKubepods, sd)},
      {"sd_burstable", bu, Make(bu, Level::kQos, sd)},
      {"sd_besteffort", be, Make(be, Level::kQos, sd)},
      {"sd_guaranteed_pod", gpod, Make(gpod, Level::kPod, sd, kUid)},
      {"sd_burstable_pod", bpod, Make(bpod, Level::kPod, sd, kUid)},
      {"sd_besteffort_pod", epod, Make(epod, Level::kPod, sd, kUid)},
      {"sd_static_pod", kp + "/kubepods-pod" + kStaticUid + ".slice",
       Make(kp + "/kubepods-pod" + kStaticUid + ".slice", Level::kPod, sd, kStaticUid)},
      {"sd_pod_leading_slash", "/" + bpod, Make(bpod, Level::kPod, sd, kUid)},
      {"sd_containerd_guaranteed", gpod + "/cri-containerd-" + kCid + ".scope",
       Make(gpod + "/cri-containerd-" + kCid + ".scope", Level::kContainer, sd, kUid, kCid)},
      {"sd_containerd_burstable", bpod + "/cri-containerd-" + kCid + ".scope",
       Make(bpod + "/cri-containerd-" + kCid + ".scope", Level::kContainer, sd, kUid, kCid)},
      {"sd_crio_burstable", bpod + "/crio-" + kCid + ".scope",
       Make(bpod + "/crio-" + kCid + ".scope", Level::kContainer, sd, kUid, kCid)},
      {"sd_crio_besteffort", epod + "/crio-" + kCid2 + ".scope",
       Make(epod + "/crio-" + kCid2 + ".scope", Level::kContainer, sd, kUid, kCid2)},
      {"sd_crio_conmon", bpod + "/crio-conmon-" + kCid + ".scope",
       Make(bpod + "/crio-conmon-" + kCid + ".scope", Level::kContainer, sd, kUid,
            S("conmon-") + kCid)},
      {"sd_docker", gpod + "/docker-" + kCid + ".scope",
       Make(gpod + "/docker-" + kCid + ".scope", Level::kContainer, sd, kUid, kCid)},
      {"sd_docker_besteffort", epod + "/docker-" + kCid + ".scope",
       Make(epod + "/docker-" + kCid + ".scope", Level::kContainer, sd, kUid, kCid)},
      // crun's sub-cgroup on v2: the same container as its scope.
      {"sd_crio_crun_subgroup", bpod + "/crio-" + kCid + ".scope/container",
       Make(bpod + "/crio-" + kCid + ".scope/container", Level::kContainer, sd, kUid, kCid)},
      {"sd_containerd_crun_subgroup", gpod + "/cri-containerd-" + kCid + ".scope/container/",
       Make(gpod + "/cri-containerd-" + kCid + ".scope/container", Level::kContainer, sd, kUid,
            kCid)},
      {"sd_short_id", gpod + "/cri-containerd-abc123.scope",
       Make(gpod + "/cri-containerd-abc123.scope", Level::kContainer, sd, kUid, "abc123")},
      // cgroupfs driver
      {"fs_kubepods", "kubepods", Make("kubepods", Level::kKubepods, fs)},
      {"fs_kubepods_slashes", "/kubepods/", Make("kubepods", Level::kKubepods, fs)},
      {"fs_burstable", "kubepods/burstable", Make("kubepods/burstable", Level::kQos, fs)},
      {"fs_besteffort", "kubepods/besteffort", Make("kubepods/besteffort", Level::kQos, fs)},
      {"fs_guaranteed_pod", cg, Make(cg, Level::kPod, fs, kUid)},
      {"fs_burstable_pod", cb, Make(cb, Level::kPod, fs, kUid)},
      {"fs_besteffort_pod", ce + "/", Make(ce, Level::kPod, fs, kUid)},
      {"fs_static_pod", S("kubepods/burstable/pod") + kStaticUid,
       Make(S("kubepods/burstable/pod") + kStaticUid, Level::kPod, fs, kStaticUid)},
      {"fs_containerd_guaranteed", cg + "/" + kCid,
       Make(cg + "/" + kCid, Level::kContainer, fs, kUid, kCid)},
      {"fs_containerd_burstable", cb + "/" + kCid2,
       Make(cb + "/" + kCid2, Level::kContainer, fs, kUid, kCid2)},
      {"fs_docker_besteffort", ce + "/" + kCid,
       Make(ce + "/" + kCid, Level::kContainer, fs, kUid, kCid)},
      {"fs_crio", cb + "/crio-" + kCid,
       Make(cb + "/crio-" + kCid, Level::kContainer, fs, kUid, kCid)},
      {"fs_crio_conmon", cg + "/crio-conmon-" + kCid,
       Make(cg + "/crio-conmon-" + kCid, Level::kContainer, fs, kUid, S("conmon-") + kCid)},
      // podman run --cgroup-parent <pod cgroup> (test/runtime's containers)
      {"fs_podman", ce + "/libpod-" + kCid,
       Make(ce + "/libpod-" + kCid, Level::kContainer, fs, kUid, kCid)},
      {"fs_podman_conmon", ce + "/conmon",
       Make(ce + "/conmon", Level::kContainer, fs, kUid, "conmon")},
      {"sd_podman", epod + "/libpod-" + kCid + ".scope",
       Make(epod + "/libpod-" + kCid + ".scope", Level::kContainer, sd, kUid, kCid)},
      {"sd_podman_conmon", epod + "/libpod-conmon-" + kCid + ".scope",
       Make(epod + "/libpod-conmon-" + kCid + ".scope", Level::kContainer, sd, kUid,
            S("conmon-") + kCid)},
  };
}

std::vector<ClassifyCase> RejectedCases() {
  const std::string kp = "kubepods.slice";
  const std::string bu = kp + "/kubepods-burstable.slice";
  const std::string gpod = kp + "/kubepods-pod" + kUidEsc + ".slice";
  const std::string bpod = bu + "/kubepods-burstable-pod" + kUidEsc + ".slice";
  const std::string cb = S("kubepods/burstable/pod") + kUid;
  const std::string scope = bpod + "/crio-" + kCid + ".scope";
  std::vector<std::string> paths = {
      "",
      "/",
      "//",
      "system.slice",
      "system.slice/containerd.service",
      "user.slice/user-1000.slice/session-3.scope",
      "init.scope",
      "kubepods.slice.d",
      "kubepodsx",
      "Kubepods.slice",
      // kind and other nested setups (--cgroup-root=/kubelet): not the default layout.
      "kubelet.slice/kubelet-kubepods.slice",
      "kubelet/kubepods/burstable",
      // the QoS cgroups' and kubepods' other children
      kp + "/foo.scope",
      kp + "/kubepods-guaranteed.slice",
      bu + "/cri-containerd-" + kCid + ".scope",
      bu + "/kubepods-besteffort-pod" + kUidEsc + ".slice",
      bu + "/kubepods-pod" + kUidEsc + ".slice",
      kp + "/kubepods-burstable-pod" + kUidEsc + ".slice",
      kp + "//kubepods-burstable.slice",
      // bad pod slices
      kp + "/kubepods-pod" + kUid + ".slice",  // dashes are slice separators
      kp + "/kubepods-pod.slice",
      kp + "/kubepods-podnot_a_uid.slice",
      kp + "/kubepods-pod" + kUidEsc,
      kp + "/kubepods-pod" + kUidEsc + ".scope",
      kp + "/kubepods-pod1b2c3d4e_5f60_4a7b_8c9d_0e1f2a3b4c5.slice",   // one digit short
      kp + "/kubepods-pod1b2c3d4e5_f60_4a7b_8c9d_0e1f2a3b4c5d.slice",  // groups misplaced
      kp + "/kubepods-pod1b2c3d4e_5f60_4a7b_8c9d_0e1f2a3b4c5g.slice",  // not hex
      kp + "/kubepods-pod6c6b6a3e5d8f4b2c9a1e0f7d3c2b1a0.slice",       // 31 hex
      // bad container scopes
      bpod + "/runc-" + kCid + ".scope",
      bpod + "/cri-containerd-.scope",
      bpod + "/crio-.scope",
      bpod + "/crio-conmon-.scope",
      bpod + "/cri-containerd-" + kCid,
      bpod + "/" + kCid,  // the cgroupfs naming under a systemd slice
      bpod + "/cri-containerd-abc.def.scope",
      bpod + "/cri-containerd-abc_def.scope",
      bpod + "/cri-containerd-" + std::string(129, 'a') + ".scope",
      bpod + "/kubepods-burstable-pod" + kUidEsc + ".slice",
      // below a container
      scope + "/foo",
      scope + "/container/container",
      scope + "/container/foo",
      scope + "//container",
      bpod + "/crio-conmon-" + kCid + ".scope/container",
      gpod + "/docker-" + kCid + ".scope/init.scope",
      // cgroupfs
      "kubepods/guaranteed",
      "kubepods/burstable/besteffort",
      "kubepods/burstable/burstable",
      "kubepods/podxyz",
      "kubepods/pod",
      S("kubepods/pod") + kUidEsc,  // the systemd escaping under cgroupfs
      S("kubepods/besteffort/pod") + kUid + "x",
      S("kubepods/burstable/Pod") + kUid,
      cb + "/" + kCid + "/extra",
      cb + "/" + kCid + "/container",  // no crun sub-cgroup without systemd
      cb + "/crio-",
      cb + "/crio-conmon-",
      cb + "/libpod-",
      bpod + "/libpod-.scope",
      bpod + "/libpod-conmon-.scope",
      cb + "/cri-containerd-" + kCid + ".scope",
      cb + "/" + kCid + ".scope",
      cb + "/" + std::string(129, 'a'),
      "kubepods/kubepods-burstable.slice",
      kp + "/burstable",
      kp + "/kubepods-burstable.slice/pod" + kUid,
      "kubepods/burstable//pod" + std::string(kUid),
      std::string(5000, 'a'),
      "kubepods/" + std::string(5000, 'a'),
  };
  std::vector<ClassifyCase> out;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    out.push_back({"reject_" + std::to_string(i), paths[i], std::nullopt});
  }
  return out;
}

class ClassifyTest : public ::testing::TestWithParam<ClassifyCase> {};

TEST_P(ClassifyTest, Table) {
  const ClassifyCase& c = GetParam();
  std::optional<Node> got = Classify(c.path);
  if (!c.want) {
    EXPECT_FALSE(got.has_value()) << "path \"" << c.path << "\" classified as "
                                  << ::testing::PrintToString(*got);
    return;
  }
  ASSERT_TRUE(got.has_value()) << "path \"" << c.path << "\" rejected";
  EXPECT_EQ(*got, *c.want);
}

std::string CaseName(const ::testing::TestParamInfo<ClassifyCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Accepted, ClassifyTest, ::testing::ValuesIn(AcceptedCases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Rejected, ClassifyTest, ::testing::ValuesIn(RejectedCases()), CaseName);

// The classified path is exactly the normalised input, so Plan's writes name real directories.
TEST(ClassifyPathTest, IsNormalisedInput) {
  for (const ClassifyCase& c : AcceptedCases()) {
    std::optional<Node> got = Classify(c.path);
    ASSERT_TRUE(got.has_value()) << c.path;
    EXPECT_FALSE(got->path.starts_with('/')) << c.path;
    EXPECT_FALSE(got->path.ends_with('/')) << c.path;
    EXPECT_NE(c.path.find(got->path), std::string::npos) << c.path;
  }
}

// ---------------------------------------------------------------------------------------------
// Desired

TEST(DesiredTest, PerLevel) {
  Target t;
  t.online = Set("0-15");
  t.shared = Set("0-3,12-15");
  t.exclusive = {{"a", Set("4-5")}, {"b", Set("8-9")}, {"gone", Set("10")}};
  const std::map<std::string, CpuSet> by_pod = {{"pod-p", Set("4-5,8-9")}};
  const Driver sd = Driver::kSystemd;
  struct Case {
    Node node;
    const char* want;
  } cases[] = {
      {Make("kubepods.slice", Level::kKubepods, sd), "0-15"},
      {Make("kubepods.slice/kubepods-burstable.slice", Level::kQos, sd), "0-15"},
      {Make("p", Level::kPod, sd, "pod-p"), "0-5,8-9,12-15"},
      {Make("q", Level::kPod, sd, "pod-q"), "0-3,12-15"},
      {Make("p/a", Level::kContainer, sd, "pod-p", "a"), "4-5"},
      {Make("p/b", Level::kContainer, sd, "pod-p", "b"), "8-9"},
      {Make("p/c", Level::kContainer, sd, "pod-p", "c"), "0-3,12-15"},
      {Make("p/conmon", Level::kContainer, sd, "pod-p", "conmon-a"), "0-3,12-15"},
      {Make("kubepods", Level::kKubepods, Driver::kCgroupfs), "0-15"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Desired(c.node, t, by_pod), Set(c.want)) << c.node.path;
  }
}

TEST(DesiredTest, EmptySharedPool) {
  Target t;
  t.online = Set("0-7");
  t.exclusive = {{"a", Set("4-5")}};
  EXPECT_EQ(Desired(Make("p/c", Level::kContainer, Driver::kCgroupfs, "u", "c"), t, {}), CpuSet());
  EXPECT_EQ(Desired(Make("p", Level::kPod, Driver::kCgroupfs, "u"), t, {}), CpuSet());
  EXPECT_EQ(Desired(Make("p", Level::kPod, Driver::kCgroupfs, "u"), t, {{"u", Set("4-5")}}),
            Set("4-5"));
}

// ---------------------------------------------------------------------------------------------
// Plan on small trees

// Paths of a systemd layout: guaranteed pod P (containers A, C), burstable pod Q (container D).
const std::string kKp = "kubepods.slice";
const std::string kBu = "kubepods.slice/kubepods-burstable.slice";
const std::string kPodP = "kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice";
const std::string kA = kPodP + "/cri-containerd-aaaa.scope";
const std::string kC = kPodP + "/cri-containerd-cccc.scope";
const std::string kPodQ = kBu + "/kubepods-burstable-pod99999999_8888_7777_6666_555555555555.slice";
const std::string kD = kPodQ + "/cri-containerd-dddd.scope";

Observed Obs(const std::string& path, const char* cpus) {
  std::optional<Node> node = Classify(path);
  EXPECT_TRUE(node.has_value()) << path;
  return Observed{node.value_or(Node{}), Set(cpus)};
}

std::vector<Observed> Tree(const char* kp, const char* bu, const char* p, const char* a,
                           const char* c, const char* q, const char* d) {
  return {Obs(kKp, kp), Obs(kBu, bu),  Obs(kPodP, p), Obs(kA, a),
          Obs(kC, c),   Obs(kPodQ, q), Obs(kD, d)};
}

Target MakeTarget(const char* online, const char* shared,
                  std::map<std::string, CpuSet> exclusive = {}) {
  return Target{Set(online), Set(shared), std::move(exclusive)};
}

TEST(PlanTest, V1FirstClaimOnlyShrinks) {
  auto tree = Tree("0-7", "0-7", "0-7", "0-7", "0-7", "0-7", "0-7");
  auto target = MakeTarget("0-7", "0-3,6-7", {{"aaaa", Set("4-5")}});
  // Bottom-up: D (depth 3), then depth 2 by path: Q ("kubepods-b..." < "kubepods-p..."), A, C.
  // kubepods, burstable and P (shared | A's 4-5 = 0-7) are already right.
  EXPECT_THAT(Plan(tree, target),
              ElementsAre(Write{kD, Set("0-3,6-7")}, Write{kPodQ, Set("0-3,6-7")},
                          Write{kA, Set("4-5")}, Write{kC, Set("0-3,6-7")}));
}

TEST(PlanTest, V1UnprepareOnlyGrows) {
  auto tree = Tree("0-7", "0-7", "0-7", "4-5", "0-3,6-7", "0-3,6-7", "0-3,6-7");
  auto target = MakeTarget("0-7", "0-7");
  // Top-down: depth 2 by path (Q, A, C), then D.
  EXPECT_THAT(Plan(tree, target), ElementsAre(Write{kPodQ, Set("0-7")}, Write{kA, Set("0-7")},
                                              Write{kC, Set("0-7")}, Write{kD, Set("0-7")}));
}

TEST(PlanTest, V1ClaimMovesGrowThenShrink) {
  // A held 4-5 and now holds 6-7 (4-5 went back to the shared pool).
  auto tree = Tree("0-7", "0-7", "0-7", "4-5", "0-3,6-7", "0-3,6-7", "0-3,6-7");
  auto target = MakeTarget("0-7", "0-5", {{"aaaa", Set("6-7")}});
  EXPECT_THAT(Plan(tree, target), ElementsAre(
                                      // phase 1, top-down: whatever must gain gets old | new
                                      Write{kPodQ, Set("0-7")}, Write{kA, Set("4-7")},
                                      Write{kC, Set("0-7")}, Write{kD, Set("0-7")},
                                      // phase 2, bottom-up: down to the target
                                      Write{kD, Set("0-5")}, Write{kPodQ, Set("0-5")},
                                      Write{kA, Set("6-7")}, Write{kC, Set("0-5")}));
}

TEST(PlanTest, V1KubepodsMissingCpusGrowsFirst) {
  // CPU 7 came online: kubepods and burstable lack it; the shared pool gains it.
  auto tree = Tree("0-6", "0-6", "0-6", "4-5", "0-3,6", "0-3,6", "0-3,6");
  auto target = MakeTarget("0-7", "0-3,6-7", {{"aaaa", Set("4-5")}});
  EXPECT_THAT(Plan(tree, target),
              ElementsAre(Write{kKp, Set("0-7")}, Write{kBu, Set("0-7")}, Write{kPodP, Set("0-7")},
                          Write{kPodQ, Set("0-3,6-7")}, Write{kC, Set("0-3,6-7")},
                          Write{kD, Set("0-3,6-7")}));
}

TEST(PlanTest, V1CpuGoneOfflineShrinksBottomUp) {
  auto tree = Tree("0-7", "0-7", "0-7", "4-5", "0-3,6-7", "0-3,6-7", "0-3,6-7");
  auto target = MakeTarget("0-6", "0-3,6", {{"aaaa", Set("4-5")}});
  EXPECT_THAT(Plan(tree, target), ElementsAre(Write{kD, Set("0-3,6")}, Write{kPodQ, Set("0-3,6")},
                                              Write{kC, Set("0-3,6")}, Write{kBu, Set("0-6")},
                                              Write{kPodP, Set("0-6")}, Write{kKp, Set("0-6")}));
}

TEST(PlanTest, AlreadyRightWritesNothing) {
  auto tree = Tree("0-7", "0-7", "0-7", "4-5", "0-3,6-7", "0-3,6-7", "0-3,6-7");
  auto target = MakeTarget("0-7", "0-3,6-7", {{"aaaa", Set("4-5")}});
  EXPECT_THAT(Plan(tree, target), IsEmpty());
}

TEST(PlanTest, V2EmptyValuesAreWrittenTopDown) {
  // v2: nobody wrote cpuset.cpus anywhere (all "the parent's"), except the runtime on C.
  auto tree = Tree("", "", "", "", "0-7", "", "");
  auto target = MakeTarget("0-7", "0-3,6-7", {{"aaaa", Set("4-5")}});
  EXPECT_THAT(Plan(tree, target),
              ElementsAre(
                  // phase 1: the empty ones (= desired), depth then path
                  Write{kKp, Set("0-7")}, Write{kBu, Set("0-7")}, Write{kPodP, Set("0-7")},
                  Write{kPodQ, Set("0-3,6-7")}, Write{kA, Set("4-5")}, Write{kD, Set("0-3,6-7")},
                  // phase 2: C had more than it may
                  Write{kC, Set("0-3,6-7")}));
}

TEST(PlanTest, ExclusiveContainerNotInTreeIsIgnored) {
  auto tree = Tree("0-7", "0-7", "0-3", "0-3", "0-3", "0-3", "0-3");
  auto target = MakeTarget("0-7", "0-3", {{"not-here", Set("4-7")}});
  EXPECT_THAT(Plan(tree, target), IsEmpty());
}

TEST(PlanTest, PodGetsUnionOfItsExclusiveContainers) {
  auto tree = Tree("0-7", "0-7", "0-7", "0-7", "0-7", "0-7", "0-7");
  auto target = MakeTarget("0-7", "0-1", {{"aaaa", Set("2-3")}, {"cccc", Set("6")}});
  EXPECT_THAT(Plan(tree, target),
              ElementsAre(Write{kD, Set("0-1")}, Write{kPodQ, Set("0-1")}, Write{kA, Set("2-3")},
                          Write{kC, Set("6")}, Write{kPodP, Set("0-3,6")}));
}

TEST(PlanTest, CrunSubgroupFollowsItsScope) {
  const std::string scope = kPodP + "/crio-aaaa.scope";
  const std::string sub = scope + "/container";
  std::vector<Observed> tree = {Obs(kKp, "0-7"), Obs(kPodP, "0-7"), Obs(scope, "0-7"),
                                Obs(sub, "0-7")};
  auto target = MakeTarget("0-7", "0-3", {{"aaaa", Set("4-5")}});
  EXPECT_THAT(Plan(tree, target), ElementsAre(Write{sub, Set("4-5")}, Write{scope, Set("4-5")},
                                              Write{kPodP, Set("0-5")}));
}

TEST(PlanTest, ConmonStaysSharedWhenItsContainerIsExclusive) {
  const std::string ctr = kPodP + "/crio-aaaa.scope";
  const std::string conmon = kPodP + "/crio-conmon-aaaa.scope";
  std::vector<Observed> tree = {Obs(kKp, "0-7"), Obs(kPodP, "0-7"), Obs(ctr, "0-7"),
                                Obs(conmon, "0-7")};
  auto target = MakeTarget("0-7", "0-3", {{"aaaa", Set("4-5")}});
  EXPECT_THAT(Plan(tree, target), ElementsAre(Write{ctr, Set("4-5")}, Write{conmon, Set("0-3")},
                                              Write{kPodP, Set("0-5")}));
}

TEST(PlanTest, EmptySharedPoolLeavesSharedCgroupsAlone) {
  // v1: C (no claim) keeps what it has, and so P keeps C's CPUs: P is not written.
  auto v1 = Tree("0-7", "0-7", "0-7", "0-7", "0-7", "0-7", "0-7");
  auto target = MakeTarget("0-7", "", {{"aaaa", Set("4-5")}});
  EXPECT_THAT(Plan(v1, target), ElementsAre(Write{kA, Set("4-5")}));
  // v2: the empty ones that would be emptied stay empty; P gets only what A needs.
  auto v2 = Tree("", "", "", "", "", "", "");
  EXPECT_THAT(Plan(v2, target), ElementsAre(Write{kKp, Set("0-7")}, Write{kBu, Set("0-7")},
                                            Write{kPodP, Set("4-5")}, Write{kA, Set("4-5")}));
}

TEST(PlanTest, EmptyTreeAndDuplicates) {
  EXPECT_THAT(Plan({}, MakeTarget("0-7", "0-7")), IsEmpty());
  // The first entry of a path counts.
  std::vector<Observed> tree = {Obs(kKp, "0-3"), Obs(kKp, "0-7")};
  EXPECT_THAT(Plan(tree, MakeTarget("0-7", "0-7")), ElementsAre(Write{kKp, Set("0-7")}));
}

TEST(PlanTest, CgroupfsTree) {
  const std::string kp = "kubepods";
  const std::string be = "kubepods/besteffort";
  const std::string pod = be + "/pod" + kUid;
  const std::string ctr = pod + "/" + kCid;
  const std::string sandbox = pod + "/" + kCid2;
  std::vector<Observed> tree = {Obs(sandbox, "0-7"), Obs(ctr, "0-7"), Obs(pod, "0-7"),
                                Obs(be, "0-7"), Obs(kp, "0-7")};
  auto target = MakeTarget("0-7", "1-7", {{kCid, Set("0")}});
  EXPECT_THAT(Plan(tree, target), ElementsAre(Write{ctr, Set("0")}, Write{sandbox, Set("1-7")}));
}

// ---------------------------------------------------------------------------------------------
// cpuset.mems: the same two phases after the cpus, over the cgroups whose mems were observed

Observed ObsMems(const std::string& path, const char* cpus, const char* mems) {
  Observed o = Obs(path, cpus);
  o.mems = Set(mems);
  return o;
}

constexpr CpusetFile kMems = CpusetFile::kMems;

TEST(PlanMemsTest, DesiredMemsPerLevel) {
  Target t = MakeTarget("0-7", "0-3");
  t.all_mems = Set("0-3");
  t.exclusive_mems = {{"aaaa", Set("1")}};
  EXPECT_EQ(DesiredMems(Make("k", Level::kKubepods, Driver::kSystemd), t), Set("0-3"));
  EXPECT_EQ(DesiredMems(Make("q", Level::kQos, Driver::kSystemd), t), Set("0-3"));
  EXPECT_EQ(DesiredMems(Make("p", Level::kPod, Driver::kSystemd, "u"), t), Set("0-3"));
  EXPECT_EQ(DesiredMems(Make("c", Level::kContainer, Driver::kSystemd, "u", "aaaa"), t), Set("1"));
  EXPECT_EQ(DesiredMems(Make("c", Level::kContainer, Driver::kSystemd, "u", "cccc"), t),
            Set("0-3"));
}

TEST(PlanMemsTest, V1ClaimNarrowsItsContainerOnly) {
  const std::vector<Observed> tree = {ObsMems(kKp, "0-7", "0-1"), ObsMems(kPodP, "0-7", "0-1"),
                                      ObsMems(kA, "0-7", "0-1"), ObsMems(kC, "0-7", "0-1")};
  Target target = MakeTarget("0-7", "0-3,6-7", {{"aaaa", Set("4-5")}});
  target.all_mems = Set("0-1");
  target.exclusive_mems = {{"aaaa", Set("1")}};
  // The cpus first (A narrowed, C to the shared pool), then A's memory.
  EXPECT_THAT(Plan(tree, target), ElementsAre(Write{kA, Set("4-5")}, Write{kC, Set("0-3,6-7")},
                                              Write{kA, Set("1"), kMems}));
}

TEST(PlanMemsTest, V1UnprepareWidensParentFirst) {
  // A was on node 1, its pod (wrongly) too: the pod grows before A does.
  const std::vector<Observed> tree = {ObsMems(kKp, "0-7", "0-1"), ObsMems(kPodP, "0-7", "1"),
                                      ObsMems(kA, "0-7", "1")};
  Target target = MakeTarget("0-7", "0-7");
  target.all_mems = Set("0-1");
  EXPECT_THAT(Plan(tree, target),
              ElementsAre(Write{kPodP, Set("0-1"), kMems}, Write{kA, Set("0-1"), kMems}));
}

TEST(PlanMemsTest, ClaimMovingToAnotherNodeGrowsThenShrinks) {
  // A moves from node 0 to node 1; on the way its pod must hold both.
  const std::vector<Observed> tree = {ObsMems(kPodP, "0-7", "0"), ObsMems(kA, "0-7", "0")};
  Target target = MakeTarget("0-7", "0-7");
  target.all_mems = Set("0-1");
  target.exclusive_mems = {{"aaaa", Set("1")}};
  EXPECT_THAT(Plan(tree, target),
              ElementsAre(Write{kPodP, Set("0-1"), kMems}, Write{kA, Set("0-1"), kMems},
                          Write{kA, Set("1"), kMems}));
}

TEST(PlanMemsTest, V2EmptyMemsAreWrittenTopDown) {
  const std::vector<Observed> tree = {ObsMems(kKp, "0-7", ""), ObsMems(kPodP, "0-7", ""),
                                      ObsMems(kA, "4-5", "")};
  Target target = MakeTarget("0-7", "0-3,6-7", {{"aaaa", Set("4-5")}});
  target.all_mems = Set("0-1");
  target.exclusive_mems = {{"aaaa", Set("1")}};
  EXPECT_THAT(Plan(tree, target),
              ElementsAre(Write{kKp, Set("0-1"), kMems}, Write{kPodP, Set("0-1"), kMems},
                          Write{kA, Set("1"), kMems}));
}

TEST(PlanMemsTest, NotManagedOrNotObservedIsNotWritten) {
  std::vector<Observed> tree = {ObsMems(kPodP, "0-7", "1"), ObsMems(kA, "0-7", "0")};
  Target target = MakeTarget("0-7", "0-7");
  // --numa-memory=none: no all_mems, no mems writes whatever the tree says.
  EXPECT_THAT(Plan(tree, target), IsEmpty());
  // Mems not read: that cgroup is left alone, the others still planned.
  target.all_mems = Set("0-1");
  tree[1].mems.reset();
  EXPECT_THAT(Plan(tree, target), ElementsAre(Write{kPodP, Set("0-1"), kMems}));
}

TEST(PlanMemsTest, EmptyClaimMemsLeaveTheContainerAsItIs) {
  const std::vector<Observed> tree = {ObsMems(kPodP, "0-7", "0-1"), ObsMems(kA, "0-7", "0")};
  Target target = MakeTarget("0-7", "0-7");
  target.all_mems = Set("0-1");
  target.exclusive_mems = {{"aaaa", CpuSet()}};
  EXPECT_THAT(Plan(tree, target), IsEmpty());
}

// ---------------------------------------------------------------------------------------------
// Property: random trees, plans simulated write by write.

struct Random {
  std::mt19937 gen;
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(gen); }
  std::string Hex(int n) {
    static const char kDigits[] = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < n; ++i) s += kDigits[Int(0, 15)];
    return s;
  }
  std::string Uid() {
    if (Chance(0.1)) return Hex(32);
    return Hex(8) + "-" + Hex(4) + "-" + Hex(4) + "-" + Hex(4) + "-" + Hex(12);
  }
  // Each member of `from` with probability p.
  CpuSet Subset(const CpuSet& from, double p) {
    CpuSet out;
    for (int cpu : from) {
      if (Chance(p)) out.Add(cpu);
    }
    return out;
  }
};

struct World {
  std::vector<std::string> paths;  // every cgroup, parents before children
  std::vector<std::string> container_ids;
  Target target;
};

std::string Escape(std::string uid) {
  std::replace(uid.begin(), uid.end(), '-', '_');
  return uid;
}

// A kubelet pod hierarchy with random pods, containers (some with crun's sub-cgroup or CRI-O's
// conmon) and a target whose shared and exclusive CPUs are disjoint and within online.
World MakeWorld(Random& r, bool allow_empty) {
  World w;
  const bool systemd = r.Chance(0.5);
  const std::string kp = systemd ? "kubepods.slice" : "kubepods";
  w.paths.push_back(kp);
  const std::string qos[2] = {
      systemd ? kp + "/kubepods-burstable.slice" : kp + "/burstable",
      systemd ? kp + "/kubepods-besteffort.slice" : kp + "/besteffort",
  };
  for (const std::string& q : qos) w.paths.push_back(q);
  const int pods = r.Int(0, 5);
  for (int p = 0; p < pods; ++p) {
    const int tier = r.Int(0, 2);  // guaranteed, burstable, besteffort
    const std::string uid = r.Uid();
    std::string pod;
    if (systemd) {
      static const char* kPrefix[3] = {"kubepods-pod", "kubepods-burstable-pod",
                                       "kubepods-besteffort-pod"};
      pod = (tier == 0 ? kp : qos[tier - 1]) + "/" + kPrefix[tier] + Escape(uid) + ".slice";
    } else {
      pod = (tier == 0 ? kp : qos[tier - 1]) + "/pod" + uid;
    }
    w.paths.push_back(pod);
    const int containers = r.Int(0, 4);
    for (int c = 0; c < containers; ++c) {
      const std::string id = r.Hex(r.Chance(0.5) ? 64 : 6);
      w.container_ids.push_back(id);
      const int runtime = r.Int(0, 2);  // containerd, CRI-O, Docker
      std::string ctr;
      if (systemd) {
        static const char* kScope[3] = {"cri-containerd-", "crio-", "docker-"};
        ctr = pod + "/" + kScope[runtime] + id + ".scope";
      } else {
        ctr = pod + "/" + (runtime == 1 ? "crio-" + id : id);
      }
      w.paths.push_back(ctr);
      if (systemd && runtime != 2 && r.Chance(0.3)) w.paths.push_back(ctr + "/container");
      if (runtime == 1 && r.Chance(0.5)) {
        w.paths.push_back(pod + "/" +
                          (systemd ? "crio-conmon-" + id + ".scope" : "crio-conmon-" + id));
      }
    }
  }

  const int ncpu = r.Int(1, 40);
  CpuSet online = r.Subset(CpuSet::Range(0, ncpu + 20), 0.7);
  if (online.Empty()) online.Add(ncpu);
  w.target.online = online;
  CpuSet free = online - r.Subset(online, 0.1);  // minus reserved
  for (const std::string& id : w.container_ids) {
    if (!r.Chance(0.4)) continue;
    CpuSet mine = r.Subset(free, 0.2);
    if (mine.Empty() && !allow_empty) continue;
    free -= mine;
    w.target.exclusive[id] = mine;
  }
  // Claims of containers not (yet, or any more) seen.
  if (r.Chance(0.3)) {
    CpuSet gone = r.Subset(free, 0.2);
    if (!gone.Empty()) {
      free -= gone;
      w.target.exclusive["ffff" + r.Hex(4)] = gone;
    }
  }
  if (free.Empty() && !allow_empty) {
    // Give one claimed CPU back (every claim keeps at least one, or is dropped).
    for (auto it = w.target.exclusive.begin(); it != w.target.exclusive.end(); ++it) {
      const int cpu = *it->second.First();
      it->second.Remove(cpu);
      free.Add(cpu);
      if (it->second.Empty()) w.target.exclusive.erase(it);
      break;
    }
    if (free.Empty()) free = online;
  }
  w.target.shared = allow_empty && r.Chance(0.2) ? CpuSet() : free;
  return w;
}

// The nearest listed ancestor, or "" for the hierarchy's root.
std::string ParentOf(const std::string& path, const std::map<std::string, CpuSet>& state) {
  std::string p = path;
  while (true) {
    const std::size_t slash = p.rfind('/');
    if (slash == std::string::npos) return "";
    p.resize(slash);
    if (state.count(p)) return p;
  }
}

// Current values of a v1 tree: each within its parent's (the root has every online CPU and
// possibly some that have gone offline since).
std::map<std::string, CpuSet> V1State(Random& r, const World& w) {
  std::map<std::string, CpuSet> state;
  const CpuSet root = w.target.online | r.Subset(CpuSet::Range(0, 63), 0.1);
  for (const std::string& path : w.paths) {  // parents first
    const std::string parent = ParentOf(path, state);
    const CpuSet& above = parent.empty() ? root : state[parent];
    const double keep = r.Chance(0.3) ? 1.0 : 0.8;
    state[path] = r.Chance(0.05) ? CpuSet() : r.Subset(above, keep);
  }
  return state;
}

std::map<std::string, CpuSet> V2State(Random& r, const World& w) {
  std::map<std::string, CpuSet> state;
  for (const std::string& path : w.paths) {
    state[path] = r.Chance(0.5) ? CpuSet() : r.Subset(CpuSet::Range(0, 63), 0.5);
  }
  return state;
}

std::vector<Observed> ToTree(const std::map<std::string, CpuSet>& state) {
  std::vector<Observed> tree;
  for (const auto& [path, cpus] : state) {
    std::optional<Node> node = Classify(path);
    EXPECT_TRUE(node.has_value()) << path;
    if (node) tree.push_back(Observed{*node, cpus});
  }
  return tree;
}

std::map<std::string, CpuSet> DesiredState(const std::vector<Observed>& tree, const Target& t) {
  std::map<std::string, CpuSet> by_pod;
  for (const Observed& o : tree) {
    if (o.node.level != Level::kContainer) continue;
    auto it = t.exclusive.find(o.node.container_id);
    if (it != t.exclusive.end()) by_pod[o.node.pod_uid] |= it->second;
  }
  std::map<std::string, CpuSet> out;
  for (const Observed& o : tree) out[o.node.path] = Desired(o.node, t, by_pod);
  return out;
}

// Applies `writes` to `state`, checking v1's rule (when `v1`) before each one. Returns the
// first violation, or "".
std::string Simulate(std::map<std::string, CpuSet>& state, const std::vector<Write>& writes,
                     bool v1) {
  std::map<std::string, std::string> parent_of;
  for (const auto& entry : state) parent_of[entry.first] = ParentOf(entry.first, state);
  for (std::size_t i = 0; i < writes.size(); ++i) {
    const Write& w = writes[i];
    const std::string at =
        "write " + std::to_string(i) + " (" + w.path + " <- \"" + w.cpus.ToString() + "\"): ";
    auto it = state.find(w.path);
    if (it == state.end()) return at + "unknown cgroup";
    if (w.cpus.Empty()) return at + "empty";
    if (w.cpus == it->second) return at + "no-op";
    if (v1) {
      const std::string& parent = parent_of[w.path];
      if (!parent.empty() && !w.cpus.IsSubsetOf(state[parent])) {
        return at + "not within parent " + parent + " \"" + state[parent].ToString() + "\"";
      }
      for (const auto& [path, cpus] : state) {
        if (parent_of[path] == w.path && !cpus.IsSubsetOf(w.cpus)) {
          return at + "child " + path + " \"" + cpus.ToString() + "\" not within";
        }
      }
    }
    it->second = w.cpus;
  }
  return "";
}

TEST(PlanPropertyTest, V1EveryStepKeepsChildrenWithinParentsAndEndsAtDesired) {
  Random r{std::mt19937(20240611)};
  int writes = 0;
  for (int round = 0; round < 1500; ++round) {
    World w = MakeWorld(r, /*allow_empty=*/false);
    std::map<std::string, CpuSet> state = V1State(r, w);
    const std::vector<Observed> tree = ToTree(state);
    const std::vector<Write> plan = Plan(tree, w.target);
    writes += static_cast<int>(plan.size());
    ASSERT_EQ(Simulate(state, plan, /*v1=*/true), "") << "round " << round;
    EXPECT_EQ(state, DesiredState(tree, w.target)) << "round " << round;
    // Nothing left to do, and each cgroup written at most twice (grow, shrink).
    EXPECT_THAT(Plan(ToTree(state), w.target), IsEmpty()) << "round " << round;
    std::map<std::string, int> per_path;
    for (const Write& write : plan) ++per_path[write.path];
    for (const auto& [path, n] : per_path) EXPECT_LE(n, 2) << path;
  }
  EXPECT_GT(writes, 1000);  // the generator does produce work
}

TEST(PlanPropertyTest, V2EndsAtDesiredWithoutEmptyOrNoOpWrites) {
  Random r{std::mt19937(7)};
  for (int round = 0; round < 1500; ++round) {
    World w = MakeWorld(r, /*allow_empty=*/false);
    std::map<std::string, CpuSet> state = V2State(r, w);
    const std::vector<Observed> tree = ToTree(state);
    ASSERT_EQ(Simulate(state, Plan(tree, w.target), /*v1=*/false), "") << "round " << round;
    EXPECT_EQ(state, DesiredState(tree, w.target)) << "round " << round;
  }
}

// Empty shared pool or empty claims: what would be emptied is left as it is, the rest gets at
// least its Desired, and v1's rule still holds at every step.
TEST(PlanPropertyTest, V1WithEmptyDesiredLeavesThoseCgroupsAlone) {
  Random r{std::mt19937(99)};
  for (int round = 0; round < 1500; ++round) {
    World w = MakeWorld(r, /*allow_empty=*/true);
    std::map<std::string, CpuSet> state = V1State(r, w);
    const std::map<std::string, CpuSet> before = state;
    const std::vector<Observed> tree = ToTree(state);
    ASSERT_EQ(Simulate(state, Plan(tree, w.target), /*v1=*/true), "") << "round " << round;
    const std::map<std::string, CpuSet> desired = DesiredState(tree, w.target);
    for (const auto& [path, cpus] : state) {
      if (desired.at(path).Empty()) {
        EXPECT_EQ(cpus, before.at(path)) << path;
      } else {
        EXPECT_TRUE(desired.at(path).IsSubsetOf(cpus)) << path;
      }
    }
    EXPECT_THAT(Plan(ToTree(state), w.target), IsEmpty()) << "round " << round;
  }
}

// The mems half: random memory nodes for the machine and the claims, every write of each file
// simulated under v1's rule on its own tree, both ending at what Desired and DesiredMems say.
TEST(PlanPropertyTest, V1MemsFollowTheSameRulesAndEndAtDesiredMems) {
  Random r{std::mt19937(424242)};
  int mems_writes = 0;
  for (int round = 0; round < 1000; ++round) {
    World w = MakeWorld(r, /*allow_empty=*/false);
    const int nodes = r.Int(1, 8);
    w.target.all_mems = r.Subset(CpuSet::Range(0, nodes - 1), 0.8);
    if (w.target.all_mems.Empty()) w.target.all_mems.Add(0);
    for (const auto& [id, cpus] : w.target.exclusive) {
      if (!r.Chance(0.7)) continue;
      CpuSet mine = r.Subset(w.target.all_mems, 0.4);
      if (mine.Empty()) mine.Add(*w.target.all_mems.First());
      w.target.exclusive_mems[id] = mine;
    }
    std::map<std::string, CpuSet> cpus = V1State(r, w);
    // The mems tree: a v1 tree over the memory nodes (the root has every one of them).
    World mw = w;
    mw.target.online = w.target.all_mems;
    std::map<std::string, CpuSet> mems = V1State(r, mw);
    std::vector<Observed> tree = ToTree(cpus);
    for (Observed& o : tree) o.mems = mems.at(o.node.path);
    const std::vector<Write> plan = Plan(tree, w.target);
    std::vector<Write> cpu_writes, mem_writes;
    bool mems_started = false;
    for (const Write& write : plan) {
      if (write.file == CpusetFile::kMems) mems_started = true;
      // Every cpus write comes before the first mems write.
      ASSERT_TRUE(write.file == CpusetFile::kMems || !mems_started) << "round " << round;
      (write.file == CpusetFile::kMems ? mem_writes : cpu_writes).push_back(write);
    }
    mems_writes += static_cast<int>(mem_writes.size());
    ASSERT_EQ(Simulate(cpus, cpu_writes, /*v1=*/true), "") << "round " << round;
    ASSERT_EQ(Simulate(mems, mem_writes, /*v1=*/true), "") << "round " << round;
    EXPECT_EQ(cpus, DesiredState(tree, w.target)) << "round " << round;
    for (const Observed& o : tree) {
      EXPECT_EQ(mems.at(o.node.path), DesiredMems(o.node, w.target))
          << "round " << round << " " << o.node.path;
    }
    std::vector<Observed> after = ToTree(cpus);
    for (Observed& o : after) o.mems = mems.at(o.node.path);
    EXPECT_THAT(Plan(after, w.target), IsEmpty()) << "round " << round;
  }
  EXPECT_GT(mems_writes, 500);
}

TEST(PlanPropertyTest, DeterministicInAnyInputOrder) {
  Random r{std::mt19937(5)};
  for (int round = 0; round < 300; ++round) {
    World w = MakeWorld(r, /*allow_empty=*/r.Chance(0.5));
    std::vector<Observed> tree = ToTree(r.Chance(0.5) ? V1State(r, w) : V2State(r, w));
    const std::vector<Write> first = Plan(tree, w.target);
    EXPECT_EQ(Plan(tree, w.target), first);
    std::shuffle(tree.begin(), tree.end(), r.gen);
    EXPECT_EQ(Plan(tree, w.target), first) << "round " << round;
  }
}

}  // namespace
}  // namespace topodra::cgroup
