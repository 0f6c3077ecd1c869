#include "driver/prepare/worker_pool.h"

#include <system_error>
#include <utility>

namespace topodra::prepare {

WorkerPool::~WorkerPool() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (const auto& w : workers_) w->cv.notify_one();
    workers = std::move(workers_);
  }
  for (const auto& w : workers) {
    if (w->thread.joinable()) w->thread.join();
  }
}

bool WorkerPool::TryRun(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return false;
  if (!idle_.empty()) {
    // The most recently idle thread: its stack is the warmest.
    Worker* w = idle_.back();
    idle_.pop_back();
    w->job = std::move(job);
    w->cv.notify_one();
    return true;
  }
  if (workers_.size() >= max_threads_) return false;
  auto worker = std::make_unique<Worker>();
  Worker* w = worker.get();
  w->job = std::move(job);
  try {
    // Started under the lock: Loop takes it before it looks at its job.
    w->thread = std::thread([this, w] { Loop(w); });
  } catch (const std::system_error&) {
    return false;
  }
  workers_.push_back(std::move(worker));
  return true;
}

size_t WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_.size();
}

size_t WorkerPool::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_.size();
}

void WorkerPool::Loop(Worker* self) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    self->cv.wait(lock, [&] { return self->job || stopping_; });
    if (!self->job) return;  // stopping, nothing given
    std::function<void()> job = std::move(self->job);
    self->job = nullptr;
    lock.unlock();
    job();
    job = nullptr;  // what it holds goes before the thread is offered again
    lock.lock();
    if (stopping_) return;
    idle_.push_back(self);
  }
}

}  // namespace topodra::prepare
