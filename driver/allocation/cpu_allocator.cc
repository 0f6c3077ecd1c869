#include "driver/allocation/cpu_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace topodra::allocation {
namespace {

using topology::Core;
using topology::kNone;
using topology::Topology;

// The measures of the policy, packed so that comparing and adding them is integer arithmetic.
// Every measure counts nodes, cores, groups or CPUs of the machine, and CpuSet ids stop at 2^16,
// so 21 bits per field never overflow, even summed over a whole machine.
constexpr int kFieldBits = 21;
// Isolation: NUMA nodes, then cores held in part, then L3 groups.
constexpr int64_t kNumaUnit = int64_t{1} << (2 * kFieldBits);
constexpr int64_t kPartialCoreUnit = int64_t{1} << kFieldBits;
constexpr int64_t kGroupUnit = 1;
// Fragmentation: fully free cores, then fully free groups, that the answer cuts into.
constexpr int64_t kBrokenCoreUnit = int64_t{1} << kFieldBits;
constexpr int64_t kBrokenGroupUnit = 1;

struct Cost {
  int64_t isolation = 0;
  int64_t fragmentation = 0;
  auto operator<=>(const Cost&) const = default;
  Cost operator+(const Cost& o) const {
    return {isolation + o.isolation, fragmentation + o.fragmentation};
  }
};

// Best answer for each number of CPUs taken from one part of the machine (a core, a group, a
// node, the whole request). Answers are bitsets over the usable CPUs in ascending id order, so
// "lowest ids" is "the lowest differing bit is ours", and answers from disjoint parts combine by
// OR. Every measure is a sum over parts, which is what makes combining the best answers of parts
// give the best answer of the whole (knapsack over parts, exact).
class Table {
 public:
  explicit Table(int words) : words_(words) {}

  // Empties the table for answers of up to `cap` CPUs, keeping its memory: a pick reuses one
  // table per level of the machine instead of allocating one per core.
  void Reset(int cap) {
    cap_ = cap;
    const size_t rows = static_cast<size_t>(cap) + 1;
    valid_.assign(rows, 0);
    cost_.assign(rows, Cost{});
    bits_.assign(rows * static_cast<size_t>(words_), 0);
  }

  int cap() const { return cap_; }
  bool Valid(int x) const { return valid_[static_cast<size_t>(x)] != 0; }
  const Cost& CostOf(int x) const { return cost_[static_cast<size_t>(x)]; }
  uint64_t* Bits(int x) { return bits_.data() + static_cast<size_t>(x) * words_; }
  const uint64_t* Bits(int x) const { return bits_.data() + static_cast<size_t>(x) * words_; }
  void Set(int x, Cost c) {
    valid_[static_cast<size_t>(x)] = 1;
    cost_[static_cast<size_t>(x)] = c;
  }
  // Adds `c` to every answer that takes at least one CPU, and `partial` to those that take some
  // but fewer than `whole` CPUs (whole <= 0: never).
  void AddWhenTouched(Cost c, Cost partial, int whole) {
    for (int x = 1; x <= cap_; ++x) {
      if (!Valid(x)) continue;
      Cost& mine = cost_[static_cast<size_t>(x)];
      mine = mine + c;
      if (x < whole) mine = mine + partial;
    }
  }

  // Folds `child` (a part disjoint from everything folded so far) into this table, which holds
  // answers of up to `reach` CPUs so far; returns the new reach. In place, from the largest count
  // down, so every read of a smaller count still sees the table before this child.
  int Fold(const Table& child, int reach) {
    const int top = std::min(cap_, reach + child.cap());
    for (int r = top; r >= 0; --r) {
      int best = -1;
      Cost best_cost;
      for (int x = std::max(0, r - reach); x <= std::min(r, child.cap()); ++x) {
        if (!Valid(r - x) || !child.Valid(x)) continue;
        const Cost c = CostOf(r - x) + child.CostOf(x);
        if (best >= 0) {
          if (best_cost < c) continue;
          if (c == best_cost &&
              !Lower(Bits(r - x), child.Bits(x), Bits(r - best), child.Bits(best))) {
            continue;
          }
        }
        best = x;
        best_cost = c;
      }
      if (best < 0) {
        valid_[static_cast<size_t>(r)] = 0;
        continue;
      }
      // best == 0 keeps this row as it is, apart from the cost.
      if (best > 0) {
        uint64_t* out = Bits(r);
        const uint64_t* a = Bits(r - best);
        const uint64_t* b = child.Bits(best);
        for (int w = 0; w < words_; ++w) out[w] = a[w] | b[w];
      }
      Set(r, best_cost);
    }
    return top;
  }

 private:
  // Whether a1|b1 has lower ids than a2|b2 (both the same size).
  bool Lower(const uint64_t* a1, const uint64_t* b1, const uint64_t* a2, const uint64_t* b2) const {
    for (int w = 0; w < words_; ++w) {
      const uint64_t one = a1[w] | b1[w];
      const uint64_t two = a2[w] | b2[w];
      if (one != two) {
        const uint64_t diff = one ^ two;
        return (one & diff & (~diff + 1)) != 0;
      }
    }
    return false;
  }

  int cap_ = 0;
  int words_;
  std::vector<char> valid_;
  std::vector<Cost> cost_;
  std::vector<uint64_t> bits_;
};

// One core with CPUs this request may take. Its CPUs are dense ranks in Planner::ranks_ from
// `first`: the must_include ones, then the others ascending.
struct CoreChoice {
  int threads = 0;     // online threads of the core
  int first = 0;       // position of its CPUs in the rank list
  int must = 0;        // how many of them are must_include
  int available = 0;   // how many in all
  bool fresh = false;  // every online thread is available (nobody else holds any)
  int node = 0;        // dense NUMA node index
};

// Dense group key: the L3 when there is one, otherwise the part of a NUMA node inside one
// package, which is the next tightest locality that every machine reports.
using GroupKey = std::tuple<int, int, int>;
GroupKey KeyOf(const Core& c) {
  if (c.l3 != kNone) return {0, c.l3, 0};
  return {1, c.numa, c.package};
}

struct GroupInfo {
  int online = 0;          // online CPUs of the group on the whole machine
  int available = 0;       // of those, the ones this request may take
  std::vector<int> cores;  // indexes into the CoreChoice list
  std::vector<int> nodes;  // dense node indexes with cores in this group, ascending
};

struct NodeInfo {
  std::vector<int> groups;  // dense group indexes with cores in this node, ascending
};

class Planner {
 public:
  Planner(std::vector<CoreChoice> cores, std::vector<int> ranks, std::vector<GroupInfo> groups,
          int nodes, int need, int words)
      : cores_(std::move(cores)),
        ranks_(std::move(ranks)),
        groups_(std::move(groups)),
        nodes_(static_cast<size_t>(nodes)),
        need_(need),
        words_(words),
        scratch_{Table(words), Table(words), Table(words), Table(words)} {
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (int n : groups_[g].nodes) {
        nodes_[static_cast<size_t>(n)].groups.push_back(static_cast<int>(g));
      }
    }
    node_available_.assign(nodes_.size(), 0);
    for (const CoreChoice& c : cores_) node_available_[static_cast<size_t>(c.node)] += c.available;
  }

  // The best answer, as dense ranks; empty if none exists.
  std::vector<int> Solve() {
    Table& all = scratch_[kAll];
    all.Reset(need_);
    all.Set(0, {});
    int reach = 0;
    // Parts of the machine where NUMA nodes and groups nest: a node with the groups inside it,
    // or a group with the nodes inside it. hwloc's tree gives nothing else; anything else (hand
    // made) is one part per (node, group) pair, which counts such a group once per node.
    std::vector<char> node_done(nodes_.size(), 0);
    std::vector<char> group_done(groups_.size(), 0);
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (group_done[g] || groups_[g].nodes.size() < 2) continue;
      bool nested = true;
      for (int n : groups_[g].nodes) {
        if (nodes_[static_cast<size_t>(n)].groups.size() != 1) nested = false;
      }
      if (!nested) continue;
      reach = all.Fold(GroupOfNodes(static_cast<int>(g)), reach);
      group_done[g] = 1;
      for (int n : groups_[g].nodes) node_done[static_cast<size_t>(n)] = 1;
    }
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (node_done[n]) continue;
      reach = all.Fold(NodeOfGroups(static_cast<int>(n)), reach);
    }
    std::vector<int> out;
    if (reach < need_ || !all.Valid(need_)) return out;
    const uint64_t* bits = all.Bits(need_);
    for (int w = 0; w < words_; ++w) {
      for (uint64_t v = bits[w]; v != 0; v &= v - 1) out.push_back(w * 64 + std::countr_zero(v));
    }
    return out;
  }

 private:
  // The levels of scratch tables: the whole answer, a part (node or group of nodes), the piece
  // of a part (group in a node, or node in a group), one core.
  enum Level { kAll = 0, kPart = 1, kPiece = 2, kCore = 3 };

  const Table& CoreTable(const CoreChoice& c) {
    Table& t = scratch_[kCore];
    t.Reset(std::min(need_, c.available));
    if (c.must == 0) t.Set(0, {});
    for (int x = std::max(c.must, 1); x <= t.cap(); ++x) {
      Cost cost;
      if (x < c.threads) {
        cost.isolation += kPartialCoreUnit;
        if (c.fresh) cost.fragmentation += kBrokenCoreUnit;
      }
      t.Set(x, cost);
      uint64_t* bits = t.Bits(x);
      for (int i = 0; i < x; ++i) {
        const int r = ranks_[static_cast<size_t>(c.first + i)];
        bits[r / 64] |= uint64_t{1} << (r % 64);
      }
    }
    return t;
  }

  // The cores of group g inside node n, into the table of `level`.
  Table& Cores(int g, int n, Level level) {
    int cap = 0;
    for (int ci : groups_[static_cast<size_t>(g)].cores) {
      const CoreChoice& c = cores_[static_cast<size_t>(ci)];
      if (c.node == n) cap += c.available;
    }
    Table& t = scratch_[level];
    t.Reset(std::min(cap, need_));
    t.Set(0, {});
    int reach = 0;
    for (int ci : groups_[static_cast<size_t>(g)].cores) {
      const CoreChoice& c = cores_[static_cast<size_t>(ci)];
      if (c.node != n) continue;
      reach = t.Fold(CoreTable(c), reach);
    }
    return t;
  }

  void AddGroupCosts(Table& t, int g) const {
    const GroupInfo& info = groups_[static_cast<size_t>(g)];
    const bool fresh = info.available == info.online;
    t.AddWhenTouched({kGroupUnit, 0}, {0, fresh ? kBrokenGroupUnit : 0}, info.online);
  }

  // A group spanning several NUMA nodes, each wholly inside it.
  const Table& GroupOfNodes(int g) {
    const GroupInfo& info = groups_[static_cast<size_t>(g)];
    Table& t = scratch_[kPart];
    t.Reset(std::min(info.available, need_));
    t.Set(0, {});
    int reach = 0;
    for (int n : info.nodes) {
      Table& node = Cores(g, n, kPiece);
      node.AddWhenTouched({kNumaUnit, 0}, {}, 0);
      reach = t.Fold(node, reach);
    }
    AddGroupCosts(t, g);
    return t;
  }

  // A NUMA node with its groups (or, for groups that also reach other nodes, their part here).
  const Table& NodeOfGroups(int n) {
    Table& t = scratch_[kPart];
    t.Reset(std::min(node_available_[static_cast<size_t>(n)], need_));
    t.Set(0, {});
    int reach = 0;
    for (int g : nodes_[static_cast<size_t>(n)].groups) {
      Table& group = Cores(g, n, kPiece);
      AddGroupCosts(group, g);
      reach = t.Fold(group, reach);
    }
    t.AddWhenTouched({kNumaUnit, 0}, {}, 0);
    return t;
  }

  std::vector<CoreChoice> cores_;
  std::vector<int> ranks_;
  std::vector<GroupInfo> groups_;
  std::vector<NodeInfo> nodes_;
  std::vector<int> node_available_;  // usable CPUs per node
  int need_;
  int words_;
  Table scratch_[4];
};

}  // namespace

CpuLayout::CpuLayout(const Topology& topo) {
  int max_id = -1;
  for (const Core& c : topo.cores) {
    if (const std::optional<int> last = c.cpus.Last()) max_id = std::max(max_id, *last);
  }
  core_of_.assign(static_cast<size_t>(max_id) + 1, -1);
  std::vector<int> l3_group(topo.l3.size(), -1);
  std::map<GroupKey, int> other_group;  // cores without a listed L3
  cores_.reserve(topo.cores.size());
  for (const Core& core : topo.cores) {
    int* slot = nullptr;
    if (core.l3 >= 0 && static_cast<size_t>(core.l3) < l3_group.size()) {
      slot = &l3_group[static_cast<size_t>(core.l3)];
    } else {
      slot = &other_group.try_emplace(KeyOf(core), -1).first->second;
    }
    if (*slot < 0) {
      *slot = static_cast<int>(group_online_.size());
      group_online_.push_back(0);
    }
    CoreInfo info{.cpus = core.cpus.ToVector(), .group = *slot, .numa = core.numa};
    group_online_[static_cast<size_t>(info.group)] += static_cast<int>(info.cpus.size());
    for (int cpu : info.cpus) {
      int& owner = core_of_[static_cast<size_t>(cpu)];
      if (owner >= 0) {
        shared_cpus_ = true;
      } else {
        owner = static_cast<int>(cores_.size());
      }
    }
    cores_.push_back(std::move(info));
  }
}

absl::StatusOr<CpuSet> AllocateCpus(const Topology& topo, const CpuRequest& req) {
  return AllocateCpus(CpuLayout(topo), req);
}

absl::StatusOr<CpuSet> AllocateCpus(const CpuLayout& layout, const CpuRequest& req) {
  auto describe = [&req] {
    return absl::StrCat("count ", req.count, ", available \"", req.available.ToString(),
                        "\", must_include \"", req.must_include.ToString(), "\"");
  };
  if (req.count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu request: count ", req.count, " must be at least 1 (", describe(), ")"));
  }
  // Only CPUs of known cores can be placed; anything else in available is not on this machine.
  // Membership tests and a rank table rather than set algebra: this runs on every pick. A CPU's
  // rank is its position among the usable CPUs in id order; -1 when it is not usable.
  const std::vector<int>& core_of = layout.core_of_;
  std::vector<int> rank(core_of.size(), -1);
  std::vector<int> ids;
  for (int cpu : req.available) {
    if (static_cast<size_t>(cpu) >= core_of.size()) break;  // ascending: none further is known
    if (core_of[static_cast<size_t>(cpu)] < 0) continue;
    rank[static_cast<size_t>(cpu)] = static_cast<int>(ids.size());
    ids.push_back(cpu);
  }
  auto usable = [&rank](int cpu) {
    return cpu >= 0 && static_cast<size_t>(cpu) < rank.size() &&
           rank[static_cast<size_t>(cpu)] >= 0;
  };
  CpuSet missing;
  for (int cpu : req.must_include) {
    if (!usable(cpu)) missing.Add(cpu);
  }
  if (!missing.Empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu request: must_include CPUs \"", missing.ToString(),
                     "\" are not available online CPUs (", describe(), ")"));
  }
  const int must_size = req.must_include.Size();
  if (must_size > req.count) {
    return absl::InvalidArgumentError(absl::StrCat("cpu request: must_include has ", must_size,
                                                   " CPUs, more than count ", req.count, " (",
                                                   describe(), ")"));
  }
  if (static_cast<int>(ids.size()) < req.count) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu request: cannot take ", req.count, " CPUs, only ", ids.size(),
                     " of the available ones are online (", describe(), ")"));
  }
  if (must_size == req.count) return req.must_include;

  // The cores holding a usable CPU, in topology order; a core with none adds nothing to the
  // search. Groups keep the layout's numbering (those with no usable CPU stay empty and are
  // skipped by the search), so parts fold in the same order as when every core was visited.
  std::vector<int> visit;
  if (layout.shared_cpus_) {
    visit.resize(layout.cores_.size());
    for (size_t i = 0; i < visit.size(); ++i) visit[i] = static_cast<int>(i);
  } else {
    visit.reserve(ids.size());
    for (int cpu : ids) visit.push_back(core_of[static_cast<size_t>(cpu)]);
    std::sort(visit.begin(), visit.end());
    visit.erase(std::unique(visit.begin(), visit.end()), visit.end());
  }
  // The bitsets of the search are over ranks in `ids`, so they are as small as the usable set
  // whatever the ids, and rank order is id order.
  std::map<int, int> node_index;
  std::vector<GroupInfo> groups(layout.group_online_.size());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].online = layout.group_online_[g];
  std::vector<CoreChoice> cores;
  std::vector<int> ranks;
  for (int ci : visit) {
    const CpuLayout::CoreInfo& core = layout.cores_[static_cast<size_t>(ci)];
    GroupInfo& group = groups[static_cast<size_t>(core.group)];
    const int threads = static_cast<int>(core.cpus.size());
    CoreChoice c{.threads = threads, .first = static_cast<int>(ranks.size())};
    for (int pass = 0; pass < 2; ++pass) {
      for (int cpu : core.cpus) {
        if (req.must_include.Contains(cpu) != (pass == 0) || !usable(cpu)) continue;
        ranks.push_back(rank[static_cast<size_t>(cpu)]);
        ++c.available;
        if (pass == 0) ++c.must;
      }
    }
    group.available += c.available;
    if (c.available == 0) continue;
    c.fresh = c.available == threads;
    auto [nit, new_node] = node_index.try_emplace(core.numa, static_cast<int>(node_index.size()));
    c.node = nit->second;
    if (std::find(group.nodes.begin(), group.nodes.end(), c.node) == group.nodes.end()) {
      group.nodes.push_back(c.node);
      std::sort(group.nodes.begin(), group.nodes.end());
    }
    group.cores.push_back(static_cast<int>(cores.size()));
    cores.push_back(c);
  }
  const int words = static_cast<int>((ids.size() + 63) / 64);
  Planner planner(std::move(cores), std::move(ranks), std::move(groups),
                  static_cast<int>(node_index.size()), req.count, words);
  const std::vector<int> chosen = planner.Solve();
  if (static_cast<int>(chosen.size()) != req.count) {
    // Unreachable while the capacity checks above hold; kept so that a bug shows as an error
    // rather than as a wrong-sized answer.
    return absl::InternalError(absl::StrCat("cpu request: no placement found for ", describe()));
  }
  CpuSet out;
  for (int r : chosen) out.Add(ids[static_cast<size_t>(r)]);
  return out;
}

}  // namespace topodra::allocation
