// The simulated kubelet picks its health service as the real ones do (addendum §1.3: the 1.37
// table of pickHealthService; 1.34-1.36 always v1alpha1).
#include "test/kubelet_sim/health_sim.h"

#include <gtest/gtest.h>

namespace topodra::testing {
namespace {

TEST(PickHealthServiceTest, LikeTheKubelet) {
  struct Case {
    std::vector<std::string> supported;
    HealthKubelet kubelet;
    std::string want;
  };
  const Case cases[] = {
      {{"v1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"},
       HealthKubelet::k137,
       kHealthV1},
      {{"v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"}, HealthKubelet::k137, kHealthV1},
      {{"v1.DRAResourceHealth"}, HealthKubelet::k137, kHealthV1},
      {{"v1alpha1.DRAResourceHealth"}, HealthKubelet::k137, kHealthV1alpha1},
      {{"v1.DRAPlugin"}, HealthKubelet::k137, ""},
      {{}, HealthKubelet::k137, ""},
      {{"v1.DRAPlugin"}, HealthKubelet::k134_136, kHealthV1alpha1},
      {{"v1.DRAResourceHealth"}, HealthKubelet::k134_136, kHealthV1alpha1},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(PickHealthService(c.supported, c.kubelet), c.want)
        << ::testing::PrintToString(c.supported);
  }
}

TEST(HealthWatcherTest, UnknownServiceIsRefused) {
  EXPECT_FALSE(HealthWatcher::Start("/nonexistent.sock", "v2.DRAResourceHealth").ok());
}

}  // namespace
}  // namespace topodra::testing
