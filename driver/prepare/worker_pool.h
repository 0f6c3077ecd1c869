// Threads kept for the claim GETs of prepare calls. A call hands its GETs to idle threads instead
// of creating threads of its own: a thread made and joined per call (clone3, its stack's mmap,
// rseq, robust list, signal mask, munmap) was a large part of a prepare's system time.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace topodra::prepare {

class WorkerPool {
 public:
  // At most `max_threads` threads, made when a job finds none idle; kept until destroyed.
  explicit WorkerPool(size_t max_threads) : max_threads_(max_threads) {}
  // Waits for the jobs running and joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs `job` on an idle thread, or on a new one while fewer than the maximum exist. False when
  // none is idle and none can be made (the maximum, or the system refused): `job` is not run, and
  // the caller does the work itself. Never queues: a job starts at once or not at all.
  bool TryRun(std::function<void()> job);

  // Threads made so far, and those waiting for a job (tests).
  size_t threads() const;
  size_t idle() const;

 private:
  struct Worker {
    std::condition_variable cv;  // a job was given, or the pool stops
    std::function<void()> job;   // guarded by mu_; empty while idle
    std::thread thread;
  };
  void Loop(Worker* self);

  const size_t max_threads_;
  mutable std::mutex mu_;
  bool stopping_ = false;                         // guarded by mu_
  std::vector<std::unique_ptr<Worker>> workers_;  // guarded by mu_
  std::vector<Worker*> idle_;                     // guarded by mu_; the last one is woken first
};

}  // namespace topodra::prepare
