// Pool healing figures for issue 14: time from a loss of the node's ResourceSlices to the complete
// pool stored again by the real `topodra run` (individual mode), for pools of 1 to 9 slices:
//   wipe      the kubelet's node-wide wipe at its start: one DELETE of the collection
//   restart   the API server restarted with an empty store (a new process on the same port),
//             timed from the moment it listens again
//   reset     the store wiped under a running server (open watches get 410 Expired)
//   mix       half of the slices deleted one by one and one other slice changed
// "Stored again" is seen through a watch of our own: every slice of the pool present, all in one
// generation newer than before the loss. The floor, measured in the same run on the same server,
// is the same number of creates of the same slices, sent one after the other by this program
// and seen through the same watch.
//
// usage: heal_bench [TOPOLOGIES_DIR] [ROUNDS] [MACHINE_LABEL_PART]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "driver/kube/rest_client.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_json.h"
#include "test/bench/latency.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/integration/fake_apiserver_client.h"
#include "topology/discoverer.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using namespace topodra;
using topodra::bench::Ms;
using topodra::bench::Of;

constexpr char kNode[] = "bench-node";
constexpr char kDriver[] = "dra.cpu";
constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";

// Follows the node's slices of the CPU driver through a watch (re-listing when it breaks, as after
// a restart) and tells when they form a complete pool in a generation newer than a given one.
class PoolWatcher {
 public:
  PoolWatcher(kube::RestClient* client, size_t slices) : client_(client), slices_(slices) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~PoolWatcher() {
    stop_ = true;
    thread_.join();
  }

  // The newest generation in which the pool was complete (0: never).
  int64_t Generation() {
    std::lock_guard<std::mutex> lock(mu_);
    return complete_generation_;
  }

  // Waits until the pool is complete in a generation newer than `than`; the time it was seen.
  std::optional<Clock::time_point> WaitNewer(int64_t than, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, limit, [&] { return complete_generation_ > than; })) {
      return std::nullopt;
    }
    return complete_at_;
  }

 private:
  void Loop() {
    const std::string selector =
        kube::UrlEncode(absl::StrCat("spec.driver=", kDriver, ",spec.nodeName=", kNode));
    std::string rv;
    while (!stop_) {
      if (rv.empty()) {
        absl::StatusOr<kube::Response> list =
            client_->Get(absl::StrCat(kSlices, "?fieldSelector=", selector));
        if (!list.ok()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        std::lock_guard<std::mutex> lock(mu_);
        stored_.clear();
        for (const json& item : list->body["items"]) Apply("ADDED", item);
        rv = StringField(Field(list->body, "metadata"), "resourceVersion");
      }
      absl::Status st = client_->Watch(
          absl::StrCat(kSlices, "?watch=true&allowWatchBookmarks=true&fieldSelector=", selector,
                       "&resourceVersion=", rv, "&timeoutSeconds=30"),
          [&](const json& event) {
            const std::string type = StringField(event, "type");
            if (type == "ERROR") {
              rv.clear();
              return false;
            }
            const json& obj = Field(event, "object");
            rv = StringField(Field(obj, "metadata"), "resourceVersion");
            if (type == "BOOKMARK") return true;
            std::lock_guard<std::mutex> lock(mu_);
            Apply(type, obj);
            return true;
          },
          &stop_);
      if (!st.ok()) rv.clear();
    }
  }

  // Caller holds mu_.
  void Apply(const std::string& type, const json& obj) {
    const std::string name = StringField(Field(obj, "metadata"), "name");
    if (type == "DELETED") {
      stored_.erase(name);
      return;
    }
    const json& pool = Field(Field(obj, "spec"), "pool");
    stored_[name] = {pool.value("generation", int64_t{0}), pool.value("resourceSliceCount", 0)};
    if (stored_.size() != slices_) return;
    const int64_t generation = stored_.begin()->second.first;
    for (const auto& [n, g] : stored_) {
      if (g.first != generation || g.second != static_cast<int64_t>(slices_)) return;
    }
    if (generation > complete_generation_) {
      complete_generation_ = generation;
      complete_at_ = Clock::now();
      cv_.notify_all();
    }
  }

  kube::RestClient* client_;
  const size_t slices_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::pair<int64_t, int64_t>> stored_;  // name -> generation, count
  int64_t complete_generation_ = 0;
  Clock::time_point complete_at_;
  std::thread thread_;
};

struct Machine {
  std::string label;
  topology::TopologySource source;
  std::vector<std::string> args;  // the same source as topodra flags
};

void Print(const std::string& label, const std::string& what, const std::vector<double>& ms,
           int failed) {
  const bench::Stats s = Of(ms);
  std::printf("%-26s %-34s p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms  (%zu rounds%s)\n",
              label.c_str(), what.c_str(), s.p50, s.p99, s.max, ms.size(),
              failed ? absl::StrCat(", ", failed, " never healed within 20 s").c_str() : "");
}

void BenchMachine(const Machine& m, int rounds) {
  absl::StatusOr<topology::Topology> topo = topology::Discover(m.source);
  if (!topo.ok()) {
    std::printf("%s: %s\n", m.label.c_str(), std::string(topo.status().message()).c_str());
    return;
  }
  publish::PublishOptions o;
  o.node_name = kNode;
  o.cpu_mode = publish::CpuDeviceMode::kIndividual;
  const publish::Pool pool = publish::BuildPools(*topo, o)[0];
  const std::vector<publish::Slice> slices = *publish::BuildSlices(pool, publish::SliceForm::kFlat);
  const std::string label = absl::StrCat(m.label, " ", slices.size(), " slices");

  testing::FakeApiServerOptions so;
  so.nodes = {{kNode, "uid-bench-node"}};
  absl::StatusOr<std::unique_ptr<testing::FakeApiServer>> started =
      testing::FakeApiServer::Start(so);
  if (!started.ok()) {
    std::printf("fake API server: %s\n", std::string(started.status().message()).c_str());
    return;
  }
  testing::FakeApiServer& server = **started;
  const testing::DaemonDirs dirs = testing::DaemonDirs::Make();
  const std::string kubeconfig = server.WriteKubeconfig(dirs.root + "/kubeconfig.yaml");
  std::unique_ptr<kube::RestClient> client = testing::ClientFor(server, std::chrono::seconds(10));
  std::unique_ptr<kube::RestClient> watch_client =
      testing::ClientFor(server, std::chrono::seconds(10));
  if (client == nullptr || watch_client == nullptr) return;
  auto watcher = std::make_unique<PoolWatcher>(watch_client.get(), slices.size());

  std::vector<std::string> args = {"--kubeconfig", kubeconfig,          "--node-name",
                                   kNode,          "--cpu-device-mode", "individual"};
  args.insert(args.end(), m.args.begin(), m.args.end());
  testing::Daemon daemon;
  daemon.Start(dirs, args);
  if (!watcher->WaitNewer(0, std::chrono::seconds(60))) {
    std::printf("%s: the daemon never published the pool\n%s\n", label.c_str(),
                daemon.Log().c_str());
    return;
  }

  const std::string node_selector = kube::UrlEncode(absl::StrCat("spec.nodeName=", kNode));
  const auto wipe = [&] {
    (void)client->Delete(absl::StrCat(kSlices, "?fieldSelector=", node_selector),
                         {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}});
  };
  struct Case {
    std::string what;
    // Makes the loss; returns the moment the clock starts.
    std::function<Clock::time_point()> lose;
  };
  const std::vector<Case> cases = {
      {"node-wide wipe (delete-collection)",
       [&] {
         const auto t0 = Clock::now();
         wipe();
         return t0;
       }},
      {"API server restarted empty",
       [&] {
         // A watcher of its own on the new server, as one that lived through the restart
         // could miss the pool coming back.
         watcher.reset();
         const absl::Status st = server.Restart();
         watcher = std::make_unique<PoolWatcher>(watch_client.get(), slices.size());
         if (!st.ok()) {
           std::printf("restart: %s\n", std::string(st.message()).c_str());
         }
         return Clock::now();
       }},
      {"store wiped in place (410)",
       [&] {
         const auto t0 = Clock::now();
         (void)server.Reset();
         return t0;
       }},
      {"mix: half deleted, one changed",
       [&] {
         const auto t0 = Clock::now();
         const size_t n = slices.size();
         for (size_t i = 0; i < (n + 1) / 2; ++i) {
           (void)client->Delete(absl::StrCat(kSlices, "/", StringField(slices[i].metadata, "name")),
                                json::object());
         }
         const std::string changed =
             absl::StrCat(kSlices, "/", StringField(slices[n - 1].metadata, "name"));
         absl::StatusOr<kube::Response> cur = client->Get(changed);
         if (cur.ok()) {
           json obj = cur->body;
           obj["spec"]["devices"][0]["attributes"]["dra.cpu/numaNodeID"] = {{"int", 99}};
           (void)client->Put(changed, obj);
         }
         return t0;
       }},
  };
  for (const Case& c : cases) {
    std::vector<double> ms;
    int failed = 0;
    for (int i = 0; i < rounds; ++i) {
      const int64_t before = watcher->Generation();
      const Clock::time_point t0 = c.lose();
      const std::optional<Clock::time_point> healed =
          watcher->WaitNewer(before, std::chrono::seconds(20));
      if (healed) {
        ms.push_back(Ms(*healed - t0));
      } else if (++failed == 1) {
        const std::string log = daemon.Log();
        std::printf("%s %s: not healed within 20 s; daemon log ends:\n%s\n", label.c_str(),
                    c.what.c_str(), log.substr(log.size() > 2000 ? log.size() - 2000 : 0).c_str());
      }
    }
    Print(label, c.what, ms, failed);
  }
  daemon.Terminate();

  // The floor: the same slices created by us, one after the other, after the same wipe.
  std::vector<double> floor;
  int failed = 0;
  int64_t generation = watcher->Generation();
  for (int i = 0; i < rounds; ++i) {
    wipe();
    ++generation;
    const auto t0 = Clock::now();
    for (publish::Slice s : slices) {
      s.generation = generation;
      (void)client->Post(kSlices, publish::SliceToJson(s, "resource.k8s.io/v1"));
    }
    const std::optional<Clock::time_point> stored =
        watcher->WaitNewer(generation - 1, std::chrono::seconds(20));
    if (stored) {
      floor.push_back(Ms(*stored - t0));
    } else {
      ++failed;
    }
  }
  Print(label, absl::StrCat("floor: ", slices.size(), " creates seen by watch"), floor, failed);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures as they come, also into a file
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures/topologies";
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 30;
  const std::vector<Machine> machines = {
      {"32em64t (32 CPUs)",
       topology::TopologySource::XmlFile(dir + "/32em64t-2n8c2t-pci-normalio.xml"),
       {"--topology-file", dir + "/32em64t-2n8c2t-pci-normalio.xml", "--gpus", "none"}},
      {"192em64t (384 CPUs)",
       topology::TopologySource::XmlFile(dir + "/192em64t-24n8c2t.xml"),
       {"--topology-file", dir + "/192em64t-24n8c2t.xml"}},
      {"synthetic 1024 CPUs",
       topology::TopologySource::Synthetic("pack:4 numa:2 l3:4 core:16 pu:2"),
       {"--topology-synthetic", "pack:4 numa:2 l3:4 core:16 pu:2"}},
      {"synthetic 1152 CPUs",
       topology::TopologySource::Synthetic("pack:4 numa:2 l3:3 core:24 pu:2"),
       {"--topology-synthetic", "pack:4 numa:2 l3:3 core:24 pu:2"}},
  };
  std::printf(
      "time from the loss of the node's slices to the complete pool stored again (topodra run,\n"
      "individual mode, fake API server); target: p99 < 2000 ms\n");
  const std::string only = argc > 3 ? argv[3] : "";  // a part of a machine's label
  for (const Machine& m : machines) {
    if (m.label.find(only) != std::string::npos) BenchMachine(m, rounds);
  }
  return 0;
}
