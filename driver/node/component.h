// One part of the node daemon that runs: a thread, a server, a watch. The Node keeps them in a
// list: started in its order, stopped in the reverse, so what starts later (and may call into
// what started earlier) always stops first.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "driver/node/inventory.h"

namespace topodra::node {

class Component {
 public:
  virtual ~Component() = default;
  virtual const char* name() const = 0;
  // Returns once the component runs; an error says what failed, for the daemon's last log line.
  virtual absl::Status Start() = 0;
  // Returns once it has stopped. Only called after a Start that succeeded.
  virtual void Stop() = 0;
  // What the node publishes changed (the machine, the reservations): later work uses `now`.
  // Called with the node's publish lock held, started or not.
  virtual void OnInventory(const Inventory& /*now*/) {}
};

class ComponentList {
 public:
  ComponentList() = default;
  ComponentList(const ComponentList&) = delete;
  ComponentList& operator=(const ComponentList&) = delete;
  ~ComponentList();  // Stop()

  // Appends; the order of Add is the start order. Returns the component, still owned here.
  template <typename T>
  T* Add(std::unique_ptr<T> c) {
    T* raw = c.get();
    components_.push_back(std::move(c));
    return raw;
  }
  // Starts each in order; on the first error stops those started, in reverse, and returns it.
  absl::Status Start();
  // Stops the started ones in reverse order; a second call does nothing.
  void Stop();
  void OnInventory(const Inventory& now);
  std::vector<std::string> Names() const;

 private:
  std::vector<std::unique_ptr<Component>> components_;
  size_t started_ = 0;  // components_[0, started_) run
};

}  // namespace topodra::node
