// WorkerPool: jobs run on kept threads, a job never waits in a queue, and the pool's end waits
// for the jobs running.
#include "driver/prepare/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <mutex>
#include <set>
#include <thread>

namespace topodra::prepare {
namespace {

TEST(WorkerPoolTest, OneJobAfterAnotherReusesTheSameThread) {
  WorkerPool pool(4);
  std::mutex mu;
  std::set<std::thread::id> ran_on;
  for (int i = 0; i < 20; ++i) {
    std::latch done(1);
    ASSERT_TRUE(pool.TryRun([&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        ran_on.insert(std::this_thread::get_id());
      }
      done.count_down();
    }));
    done.wait();
    // The thread offers itself again after the job returns: wait until it has, so the next job
    // finds it idle rather than making a second thread.
    while (pool.idle() == 0) std::this_thread::yield();
  }
  EXPECT_EQ(pool.threads(), 1u);
  EXPECT_EQ(ran_on.size(), 1u);
  EXPECT_EQ(ran_on.count(std::this_thread::get_id()), 0u);
}

TEST(WorkerPoolTest, BusyThreadsGrowThePoolUpToItsMaximumThenTheCallerIsTold) {
  WorkerPool pool(3);
  std::latch started(3);
  std::latch release(1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.TryRun([&] {
      started.count_down();
      release.wait();
    }));
  }
  started.wait();
  EXPECT_EQ(pool.threads(), 3u);
  bool ran = false;
  EXPECT_FALSE(pool.TryRun([&] { ran = true; }));  // never queued
  release.count_down();
  while (pool.idle() < 3) std::this_thread::yield();
  std::latch again(1);
  EXPECT_TRUE(pool.TryRun([&] { again.count_down(); }));
  again.wait();
  EXPECT_FALSE(ran);
  EXPECT_EQ(pool.threads(), 3u);
}

TEST(WorkerPoolTest, TheEndWaitsForRunningJobs) {
  std::atomic<int> finished{0};
  {
    WorkerPool pool(2);
    std::latch started(2);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(pool.TryRun([&] {
        started.count_down();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++finished;
      }));
    }
    started.wait();
  }
  EXPECT_EQ(finished.load(), 2);
}

TEST(WorkerPoolTest, NoThreadsAtAllMeansEveryJobIsTheCallers) {
  WorkerPool pool(0);
  EXPECT_FALSE(pool.TryRun([] {}));
  EXPECT_EQ(pool.threads(), 0u);
}

}  // namespace
}  // namespace topodra::prepare
