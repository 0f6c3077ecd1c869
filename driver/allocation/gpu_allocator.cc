#include "driver/allocation/gpu_allocator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace topodra::allocation {
namespace {

using topology::Gpu;
using topology::kNone;
using topology::Topology;

// A set of candidate indexes. Candidates are numbered in bus id order, so the set with the
// lowest bit where two sets differ is the one whose sorted bus id list is smaller.
struct Bits {
  static constexpr int kWords = kMaxGpus / 64;
  std::array<uint64_t, kWords> w{};

  void Set(int i) { w[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64); }
  bool Has(int i) const { return (w[static_cast<size_t>(i / 64)] >> (i % 64)) & 1; }
  Bits operator|(const Bits& o) const {
    Bits r;
    for (size_t i = 0; i < w.size(); ++i) r.w[i] = w[i] | o.w[i];
    return r;
  }
  // For two sets of the same size: true when this one's sorted list is lexicographically smaller.
  bool LexLess(const Bits& o) const {
    for (size_t i = 0; i < w.size(); ++i) {
      const uint64_t diff = w[i] ^ o.w[i];
      if (diff != 0) return (w[i] & (diff & (~diff + 1))) != 0;
    }
    return false;
  }
};

// The measures of one choice, compared in policy order. Each is a sum over the tree, so the
// measures of a union of disjoint subtree choices are the sums of theirs.
struct Entry {
  bool valid = false;
  int64_t groups = 0;      // step 1: NUMA nodes (GPUs without one count one each)
  int64_t roots = 0;       // step 2: host bridges
  int64_t tree = 0;        // step 3: sum of pairwise tree distances
  uint64_t numa_dist = 0;  // step 4: only filled in at the top, per NUMA node set
  Bits chosen;             // step 5

  auto Measures() const { return std::make_tuple(groups, roots, tree, numa_dist); }
  bool Better(const Entry& o) const {
    if (!o.valid) return valid;
    if (!valid) return false;
    if (Measures() != o.Measures()) return Measures() < o.Measures();
    return chosen.LexLess(o.chosen);
  }
};

// Table of a subtree: entry c is the best choice of exactly c GPUs inside it.
using Table = std::vector<Entry>;

enum class Level { kMachine, kNuma, kRoot, kBridge, kLeaf };

struct Node {
  Level level = Level::kBridge;
  bool orphan_group = false;  // the pseudo NUMA node holding GPUs that have none
  int numa = kNone;           // for kNuma nodes of a real node
  int gpu = -1;               // candidate index, for leaves
  // Bridge name (a pci_path entry or a pcie_root), for nodes looked up by name.
  bool named = false;
  std::string_view key;
  std::vector<int> children;
};

Table Merge(const Table& a, const Table& b, int count) {
  const size_t size = std::min(a.size() + b.size() - 1, static_cast<size_t>(count) + 1);
  Table out(size);
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].valid) continue;
    for (size_t j = 0; j < b.size() && i + j < size; ++j) {
      if (!b[j].valid) continue;
      Entry e;
      e.valid = true;
      e.groups = a[i].groups + b[j].groups;
      e.roots = a[i].roots + b[j].roots;
      e.tree = a[i].tree + b[j].tree;
      e.chosen = a[i].chosen | b[j].chosen;
      if (e.Better(out[i + j])) out[i + j] = e;
    }
  }
  return out;
}

std::string Quote(const std::vector<std::string>& ids) {
  return absl::StrCat("[",
                      absl::StrJoin(ids, ", ",
                                    [](std::string* out, const std::string& s) {
                                      absl::StrAppend(out, "\"", s, "\"");
                                    }),
                      "]");
}

uint64_t Binomial(int n, int k) {
  if (k < 0 || k > n) return 0;
  uint64_t r = 1;
  for (int i = 1; i <= k; ++i) {
    r = r * static_cast<uint64_t>(n - k + i) / static_cast<uint64_t>(i);
    if (r > (uint64_t{1} << 40)) return r;  // large enough to mean "too many"
  }
  return r;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PreferGpus(const Topology& topo, const GpuRequest& req) {
  // Built only on the error paths: the success path allocates no message.
  auto what = [&req] {
    return absl::StrCat("GPU request for ", req.count, " GPUs (available ", Quote(req.available),
                        ", must_include ", Quote(req.must_include), ")");
  };
  if (req.count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": count ", req.count, " must be at least 1"));
  }
  // topo.gpus is sorted by bus id (Topology::Finalize); a hand-built model that is not gets a
  // linear search instead of a wrong answer.
  const bool sorted =
      std::is_sorted(topo.gpus.begin(), topo.gpus.end(),
                     [](const Gpu& a, const Gpu& b) { return a.pci_bus_id < b.pci_bus_id; });
  auto find = [&topo, sorted](const std::string& id) -> const Gpu* {
    if (sorted) {
      auto it =
          std::lower_bound(topo.gpus.begin(), topo.gpus.end(), id,
                           [](const Gpu& g, const std::string& v) { return g.pci_bus_id < v; });
      return it != topo.gpus.end() && it->pci_bus_id == id ? &*it : nullptr;
    }
    for (const Gpu& g : topo.gpus) {
      if (g.pci_bus_id == id) return &g;
    }
    return nullptr;
  };
  auto by_bus_id = [](const Gpu* a, const Gpu* b) { return a->pci_bus_id < b->pci_bus_id; };

  // Candidates: the known GPUs offered, once each, in bus id order.
  std::vector<const Gpu*> cand;
  cand.reserve(req.available.size());
  for (const std::string& id : req.available) {
    if (const Gpu* g = find(id)) cand.push_back(g);
  }
  std::sort(cand.begin(), cand.end(), by_bus_id);
  cand.erase(std::unique(cand.begin(), cand.end()), cand.end());

  std::vector<char> forced(cand.size(), 0);
  int must_count = 0;
  for (const std::string& id : req.must_include) {
    const Gpu* g = find(id);
    if (g == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what(), ": must_include \"", id, "\" is not a GPU of this node"));
    }
    auto it = std::lower_bound(cand.begin(), cand.end(), g, by_bus_id);
    if (it == cand.end() || *it != g) {
      return absl::InvalidArgumentError(
          absl::StrCat(what(), ": must_include \"", id, "\" is not in available"));
    }
    char& f = forced[static_cast<size_t>(it - cand.begin())];
    must_count += f == 0;
    f = 1;
  }
  if (must_count > req.count) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": must_include holds ", must_count,
                                                   " GPUs, more than the count ", req.count));
  }
  if (static_cast<int>(cand.size()) < req.count) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what(), ": only ", cand.size(), " known GPUs available, ", req.count, " requested"));
  }
  if (static_cast<int>(cand.size()) > kMaxGpus) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": ", cand.size(),
                                                   " known GPUs available, more than the ",
                                                   kMaxGpus, " supported"));
  }
  const int count = req.count;

  // The tree. Parents are created before their children, so walking the nodes backwards visits
  // every child before its parent. Children are found by a linear scan: a bridge has a handful.
  std::vector<Node> nodes(1);
  nodes.reserve(cand.size() * 4 + 1);
  nodes[0].level = Level::kMachine;
  auto add = [&nodes](int parent, Level level, std::string_view key) {
    const int id = static_cast<int>(nodes.size());
    nodes.emplace_back();
    nodes.back().level = level;
    nodes.back().key = key;
    nodes[static_cast<size_t>(parent)].children.push_back(id);
    return id;
  };
  auto child = [&nodes, &add](int parent, Level level, std::string_view key) {
    for (int c : nodes[static_cast<size_t>(parent)].children) {
      if (nodes[static_cast<size_t>(c)].named && nodes[static_cast<size_t>(c)].key == key) return c;
    }
    const int id = add(parent, level, key);
    nodes[static_cast<size_t>(id)].named = true;
    return id;
  };
  for (size_t i = 0; i < cand.size(); ++i) {
    const Gpu& g = *cand[i];
    int group = -1;
    for (int c : nodes[0].children) {
      if (nodes[static_cast<size_t>(c)].numa == g.numa) group = c;
    }
    if (group < 0) {
      group = add(0, Level::kNuma, {});
      nodes[static_cast<size_t>(group)].numa = g.numa;
      nodes[static_cast<size_t>(group)].orphan_group = g.numa == kNone;
    }
    int at;
    if (!g.pci_path.empty()) {
      at = child(group, Level::kRoot, g.pci_path[0]);
      for (size_t p = 1; p < g.pci_path.size(); ++p) at = child(at, Level::kBridge, g.pci_path[p]);
    } else if (!g.pcie_root.empty()) {
      // Without a path the host bridge is all we know.
      at = child(group, Level::kRoot, g.pcie_root);
    } else {
      at = add(group, Level::kRoot, {});  // without that either, the GPU is a root of its own
    }
    const int leaf = add(at, Level::kLeaf, {});
    nodes[static_cast<size_t>(leaf)].gpu = static_cast<int>(i);
  }

  std::vector<Table> tables(nodes.size());
  for (size_t v = nodes.size(); v-- > 1;) {
    const Node& n = nodes[v];
    Table t;
    if (n.level == Level::kLeaf) {
      const Gpu& g = *cand[static_cast<size_t>(n.gpu)];
      t.resize(2);
      t[0].valid = forced[static_cast<size_t>(n.gpu)] == 0;
      t[1].valid = true;
      t[1].chosen.Set(n.gpu);
      // GPUs without a NUMA node are each a group of their own.
      if (g.numa == kNone) t[1].groups = 1;
    } else {
      t.resize(1);
      t[0].valid = true;
      for (int c : n.children) t = Merge(t, tables[static_cast<size_t>(c)], count);
    }
    for (size_t c = 1; c < t.size(); ++c) {
      if (!t[c].valid) continue;
      if (n.level == Level::kNuma && !n.orphan_group) t[c].groups += 1;
      if (n.level == Level::kRoot) t[c].roots += 1;
      // The edge to the parent lies on the path between each of the c GPUs below it and each
      // of the count - c chosen elsewhere.
      const int64_t below = static_cast<int64_t>(c);
      t[c].tree += below * (count - below);
    }
    tables[v] = std::move(t);
  }

  // The top of the tree: the NUMA groups.
  const std::vector<int>& groups = nodes[0].children;
  Table top(1);
  top[0].valid = true;
  for (int g : groups) top = Merge(top, tables[static_cast<size_t>(g)], count);
  if (top.size() <= static_cast<size_t>(count) || !top[static_cast<size_t>(count)].valid) {
    return absl::InternalError(absl::StrCat(what(), ": no choice found"));  // not reachable
  }
  Entry best = top[static_cast<size_t>(count)];

  // Step 4: among the choices as good as the best on steps 1-3, the closest NUMA nodes.
  std::vector<int> real;  // nodes of groups that are real NUMA nodes
  Table orphans(1);
  orphans[0].valid = true;
  uint64_t forced_mask = 0;
  for (int g : groups) {
    const Node& n = nodes[static_cast<size_t>(g)];
    if (n.orphan_group) {
      orphans = tables[static_cast<size_t>(g)];
      continue;
    }
    if (!tables[static_cast<size_t>(g)][0].valid && real.size() < 64) {
      forced_mask |= uint64_t{1} << real.size();
    }
    real.push_back(g);
  }
  const int num_real = static_cast<int>(real.size());
  const int max_set = static_cast<int>(std::min<int64_t>(best.groups, num_real));
  if (!topo.numa_distances.empty() && max_set >= 2 && num_real < 64) {
    uint64_t sets = 0;
    for (int k = 0; k <= max_set; ++k) sets += Binomial(num_real, k);
    if (sets <= static_cast<uint64_t>(kMaxNumaNodeSets)) {
      auto distance = [&](uint64_t mask) {
        uint64_t sum = 0;
        for (int i = 0; i < num_real; ++i) {
          if (!((mask >> i) & 1)) continue;
          for (int j = 0; j < num_real; ++j) {
            if (i == j || !((mask >> j) & 1)) continue;
            sum += topo.NumaDistance(nodes[static_cast<size_t>(real[static_cast<size_t>(i)])].numa,
                                     nodes[static_cast<size_t>(real[static_cast<size_t>(j)])].numa)
                       .value_or(0);
          }
        }
        return sum;
      };
      best.numa_dist = UINT64_MAX;
      for (int k = 0; k <= max_set; ++k) {
        // Every mask of k bits, in increasing order (Gosper's hack).
        const uint64_t end = k == 0 ? 1 : uint64_t{1} << num_real;
        for (uint64_t mask = (uint64_t{1} << k) - 1; mask < end;) {
          if ((mask & forced_mask) == forced_mask) {
            Table t = orphans;
            for (int i = 0; i < num_real; ++i) {
              if (!((mask >> i) & 1)) continue;
              Table used = tables[static_cast<size_t>(real[static_cast<size_t>(i)])];
              used[0].valid = false;  // a node of the set must give at least one GPU
              t = Merge(t, used, count);
            }
            if (t.size() > static_cast<size_t>(count) && t[static_cast<size_t>(count)].valid) {
              Entry e = t[static_cast<size_t>(count)];
              if (std::make_tuple(e.groups, e.roots, e.tree) ==
                  std::make_tuple(best.groups, best.roots, best.tree)) {
                e.numa_dist = distance(mask);
                if (e.Better(best)) best = e;
              }
            }
          }
          if (mask == 0) break;
          const uint64_t low = mask & (~mask + 1);
          const uint64_t ripple = mask + low;
          mask = (((ripple ^ mask) >> 2) / low) | ripple;
        }
      }
    }
  }

  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(count));
  for (size_t i = 0; i < cand.size(); ++i) {
    if (best.chosen.Has(static_cast<int>(i))) out.push_back(cand[i]->pci_bus_id);
  }
  return out;
}

}  // namespace topodra::allocation
