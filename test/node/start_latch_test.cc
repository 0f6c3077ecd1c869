// StartLatch: what the stored machine model's confirmation waits for (the DRA drivers' file
// checks), and that a stop always ends the wait.
#include "driver/node/start_latch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace topodra::node {
namespace {

using std::chrono::milliseconds;
using WaitEnd = StartLatch::WaitEnd;

TEST(StartLatchTest, NothingExpectedIsDoneAtOnce) {
  StartLatch latch;
  EXPECT_EQ(latch.Wait(milliseconds(0)), WaitEnd::kDone);
  latch.Expect(0);
  EXPECT_EQ(latch.Wait(milliseconds(0)), WaitEnd::kDone);
}

TEST(StartLatchTest, WaitsForEveryExpectedPiece) {
  StartLatch latch;
  latch.Expect(2);
  latch.Done();
  EXPECT_EQ(latch.Wait(milliseconds(20)), WaitEnd::kTimedOut);  // one of two ended
  std::thread other([&] { latch.Done(); });
  EXPECT_EQ(latch.Wait(std::chrono::minutes(1)), WaitEnd::kDone);
  other.join();
  latch.Done();  // more than expected: ignored, still done
  EXPECT_EQ(latch.Wait(milliseconds(0)), WaitEnd::kDone);
}

TEST(StartLatchTest, AStopEndsAWaitForPiecesThatNeverEnd) {
  StartLatch latch;
  latch.Expect(1);
  std::thread stopper([&] { latch.Stop(); });
  EXPECT_EQ(latch.Wait(std::chrono::minutes(1)), WaitEnd::kStopped);
  stopper.join();
  latch.Done();  // a piece ending after the stop does not undo it
  EXPECT_EQ(latch.Wait(milliseconds(0)), WaitEnd::kStopped);
}

}  // namespace
}  // namespace topodra::node
