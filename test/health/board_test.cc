#include "driver/health/board.h"

#include <gtest/gtest.h>

namespace topodra::health {
namespace {

TEST(BoardTest, ListenersHearChangesOnly) {
  Board b;
  int calls = 0;
  b.Listen([&] { ++calls; });
  b.Set({});
  EXPECT_EQ(calls, 1);  // the first list counts, even empty
  EXPECT_EQ(b.Get().version, 1u);
  b.Set({});
  EXPECT_EQ(calls, 1);
  b.Set({{"p", "d", false, "bad"}});
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(b.Get().version, 2u);
  EXPECT_EQ(b.Get().devices, (std::vector<DeviceStatus>{{"p", "d", false, "bad"}}));
  b.Set({{"p", "d", false, "bad"}});
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace topodra::health
