// Allocated CPU claims for the benchmarks that drive the real daemon through the kubelet
// simulator (prepare_bench, restart_bench): created on the fake API server as the scheduler
// would leave them.
#pragma once

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/kubelet_sim.h"

namespace topodra::bench {

// `count` claims "<prefix><i>" in namespace "bench", each consuming one CPU of NUMA device
// i % numa_devices of `node`'s dra.cpu pool, created from 8 threads.
inline std::vector<testing::PrepareClaim> MakeCpuClaims(testing::FakeApiServer& server,
                                                        const std::string& node,
                                                        const std::string& prefix, int count,
                                                        int numa_devices) {
  using json = nlohmann::json;
  std::vector<testing::PrepareClaim> out(count);
  std::atomic<int> next{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        const std::string name = absl::StrCat(prefix, i);
        json claim = {
            {"metadata", {{"name", name}, {"namespace", "bench"}}},
            {"spec",
             {{"devices",
               {{"requests", json::array({{{"name", "cpus"},
                                           {"exactly", {{"deviceClassName", "dra.cpu"}}}}})}}}}}};
        auto created = server.CreateClaim(claim);
        if (!created.ok()) {
          ++failures;
          continue;
        }
        char device[32];
        std::snprintf(device, sizeof(device), "cpudevnuma%03d", i % numa_devices);
        json allocation = {
            {"devices",
             {{"results", json::array({{{"request", "cpus"},
                                        {"driver", "dra.cpu"},
                                        {"pool", node},
                                        {"device", device},
                                        {"consumedCapacity", {{"dra.cpu/cpu", "1"}}}}})}}}};
        if (!server.AllocateClaim("bench", name, allocation).ok()) ++failures;
        out[i] = {"bench", (*created)["metadata"]["uid"].get<std::string>(), name};
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (failures > 0) std::printf("warning: %d claims could not be created\n", failures.load());
  return out;
}

}  // namespace topodra::bench
