#include "driver/allocation/cpu_allocator.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
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

// A core with CPUs this request may still choose (beyond must_include). Cores are the unit of
// choice because whole cores are what the policy hands out; a unit is only cut when no exact
// combination of whole units exists.
struct Unit {
  int core = 0;   // index into Topology::cores, i.e. topology order
  int node = 0;   // dense index into Model::nodes
  int group = 0;  // dense index into Model::groups
  int package = kNone;
  std::vector<int> rest;  // available CPUs not already in must_include, ascending
  bool whole = false;     // every online thread of the core is available
  bool forced = false;    // the core also holds must_include CPUs
  int Size() const { return static_cast<int>(rest.size()); }
};

struct NodeInfo {
  int id = kNone;             // OS id
  std::vector<int> packages;  // sorted; several when a NUMA node spans sockets
  std::vector<int> units;     // indexes into Model::units, in core order
  int capacity = 0;           // CPUs of its units
  bool forced = false;        // holds must_include CPUs
};

// Everything the search needs, in dense indexes, so candidates are scored without set algebra.
struct Model {
  std::vector<Unit> units;
  std::vector<NodeInfo> nodes;
  int group_count = 0;
  std::vector<char> group_forced;
  std::vector<std::vector<int>> group_units;      // per group, unit indexes in core order
  std::vector<int> forced_units;                  // units that hold must_include CPUs
  std::vector<std::vector<uint64_t>> distance;    // dense node x dense node, 0 when unknown
  std::vector<std::vector<char>> shares_package;  // dense node x dense node
  // Cores holding must_include CPUs: they count towards every measure whatever else is chosen.
  std::vector<int> must_nodes, must_groups, must_packages;
  std::vector<int> must_cpus;
  int need = 0;  // CPUs to choose beyond must_include
};

// Dense group key: the L3 when there is one, otherwise the part of a NUMA node inside one
// package, which is the next tightest locality that every machine reports.
using GroupKey = std::tuple<int, int, int>;
GroupKey KeyOf(const Core& c) {
  if (c.l3 != kNone) return {0, c.l3, 0};
  return {1, c.numa, c.package};
}

Model BuildModel(const Topology& topo, const CpuSet& usable, const CpuSet& must, int need) {
  Model m;
  m.need = need;
  std::map<int, int> node_index;
  std::map<GroupKey, int> group_index;
  std::set<int> must_nodes, must_groups, must_packages;
  for (size_t ci = 0; ci < topo.cores.size(); ++ci) {
    const Core& core = topo.cores[ci];
    // Membership tests rather than set algebra: this loop runs over every core of the machine
    // on every request, and a set operation allocates.
    std::vector<int> rest;
    int avail = 0;
    int forced = 0;
    for (int cpu : core.cpus) {
      if (!usable.Contains(cpu)) continue;
      ++avail;
      if (must.Contains(cpu)) {
        ++forced;
      } else {
        rest.push_back(cpu);
      }
    }
    if (avail == 0) continue;
    auto [nit, new_node] = node_index.try_emplace(core.numa, static_cast<int>(m.nodes.size()));
    if (new_node) m.nodes.push_back(NodeInfo{.id = core.numa});
    NodeInfo& node = m.nodes[static_cast<size_t>(nit->second)];
    if (core.package != kNone && std::find(node.packages.begin(), node.packages.end(),
                                           core.package) == node.packages.end()) {
      node.packages.push_back(core.package);
      std::sort(node.packages.begin(), node.packages.end());
    }
    auto [git, new_group] = group_index.try_emplace(KeyOf(core), m.group_count);
    if (new_group) {
      ++m.group_count;
      m.group_forced.push_back(0);
      m.group_units.emplace_back();
    }
    if (forced > 0) {
      node.forced = true;
      m.group_forced[static_cast<size_t>(git->second)] = 1;
      must_nodes.insert(nit->second);
      must_groups.insert(git->second);
      must_packages.insert(core.package);
    }
    Unit u{.core = static_cast<int>(ci),
           .node = nit->second,
           .group = git->second,
           .package = core.package,
           .rest = std::move(rest),
           .whole = avail == core.cpus.Size(),
           .forced = forced > 0};
    if (u.rest.empty()) continue;
    node.capacity += u.Size();
    const int index = static_cast<int>(m.units.size());
    node.units.push_back(index);
    m.group_units[static_cast<size_t>(u.group)].push_back(index);
    if (u.forced) m.forced_units.push_back(index);
    m.units.push_back(std::move(u));
  }
  m.must_nodes.assign(must_nodes.begin(), must_nodes.end());
  m.must_groups.assign(must_groups.begin(), must_groups.end());
  m.must_packages.assign(must_packages.begin(), must_packages.end());
  m.must_cpus = must.ToVector();
  m.distance.assign(m.nodes.size(), std::vector<uint64_t>(m.nodes.size(), 0));
  m.shares_package.assign(m.nodes.size(), std::vector<char>(m.nodes.size(), 0));
  // Positions in topo.numa_nodes, looked up once: the matrix is read n^2 times.
  std::vector<size_t> position(m.nodes.size(), topo.numa_nodes.size());
  for (size_t a = 0; a < m.nodes.size(); ++a) {
    for (size_t i = 0; i < topo.numa_nodes.size(); ++i) {
      if (topo.numa_nodes[i].id == m.nodes[a].id) position[a] = i;
    }
  }
  auto distance = [&](size_t a, size_t b) -> uint64_t {
    const size_t pa = position[a];
    const size_t pb = position[b];
    if (pa >= topo.numa_distances.size() || pb >= topo.numa_distances[pa].size()) return 0;
    return topo.numa_distances[pa][pb];
  };
  for (size_t a = 0; a < m.nodes.size(); ++a) {
    for (size_t b = 0; b < m.nodes.size(); ++b) {
      m.distance[a][b] = distance(a, b);
      for (int p : m.nodes[a].packages) {
        if (std::binary_search(m.nodes[b].packages.begin(), m.nodes[b].packages.end(), p)) {
          m.shares_package[a][b] = 1;
        }
      }
    }
  }
  return m;
}

// How many CPUs each unit contributes to one candidate answer.
struct Selection {
  std::vector<std::pair<int, int>> taken;  // (unit, CPUs taken from its rest)
};

// Chooses `need` CPUs from `pool` (unit indexes in priority order). Whole units first: if some
// combination of whole units adds up exactly, no core is split; otherwise exactly one core is
// split, and it is the one with the fewest free threads, i.e. one another claim already broke.
Selection Choose(const Model& m, const std::vector<int>& all, int need) {
  Selection sel;
  // The rest of a must_include core goes first: leaving it out splits that core anyway, so
  // taking it is never worse and keeps the claim's own cores whole.
  std::vector<int> pool;
  for (int u : all) {
    const Unit& unit = m.units[static_cast<size_t>(u)];
    if (unit.forced && unit.Size() <= need) {
      sel.taken.emplace_back(u, unit.Size());
      need -= unit.Size();
    } else {
      pool.push_back(u);
    }
  }
  if (need == 0) return sel;
  int max_size = 0;
  for (int u : pool) max_size = std::max(max_size, m.units[static_cast<size_t>(u)].Size());
  std::vector<int> n_by_size(static_cast<size_t>(max_size) + 1, 0);
  for (int u : pool) ++n_by_size[static_cast<size_t>(m.units[static_cast<size_t>(u)].Size())];

  // reach[s][r]: r CPUs can be made of whole units of sizes 1..s. Bounded subset sum over at
  // most a handful of sizes (threads per core), linear in need per size.
  const size_t width = static_cast<size_t>(need) + 1;
  std::vector<std::vector<char>> reach(static_cast<size_t>(max_size) + 1,
                                       std::vector<char>(width, 0));
  reach[0][0] = 1;
  std::vector<int> used(width, 0);
  for (int s = 1; s <= max_size; ++s) {
    const auto& prev = reach[static_cast<size_t>(s) - 1];
    auto& cur = reach[static_cast<size_t>(s)];
    const int n = n_by_size[static_cast<size_t>(s)];
    for (int r = 0; r <= need; ++r) {
      const size_t ri = static_cast<size_t>(r);
      if (prev[ri]) {
        cur[ri] = 1;
        used[ri] = 0;
      } else if (r >= s && cur[ri - static_cast<size_t>(s)] &&
                 used[ri - static_cast<size_t>(s)] < n) {
        cur[ri] = 1;
        used[ri] = used[ri - static_cast<size_t>(s)] + 1;
      }
    }
  }

  std::vector<char> taken(pool.size(), 0);
  if (reach[static_cast<size_t>(max_size)][static_cast<size_t>(need)]) {
    // Largest units first: whole fresh cores before the leftovers of broken ones.
    std::vector<int> count_of(static_cast<size_t>(max_size) + 1, 0);
    int r = need;
    for (int s = max_size; s >= 1; --s) {
      int t = std::min(n_by_size[static_cast<size_t>(s)], r / s);
      while (t > 0 && !reach[static_cast<size_t>(s) - 1][static_cast<size_t>(r - t * s)]) --t;
      count_of[static_cast<size_t>(s)] = t;
      r -= t * s;
    }
    for (size_t i = 0; i < pool.size(); ++i) {
      const Unit& u = m.units[static_cast<size_t>(pool[i])];
      int& left = count_of[static_cast<size_t>(u.Size())];
      if (left > 0) {
        --left;
        taken[i] = 1;
        sel.taken.emplace_back(pool[i], u.Size());
      }
    }
    return sel;
  }

  int remaining = need;
  for (size_t i = 0; i < pool.size() && remaining > 0; ++i) {
    const int size = m.units[static_cast<size_t>(pool[i])].Size();
    if (size <= remaining) {
      taken[i] = 1;
      remaining -= size;
      sel.taken.emplace_back(pool[i], size);
    }
  }
  if (remaining > 0) {
    size_t best = pool.size();
    for (size_t i = 0; i < pool.size(); ++i) {
      if (taken[i]) continue;
      if (best == pool.size() || m.units[static_cast<size_t>(pool[i])].Size() <
                                     m.units[static_cast<size_t>(pool[best])].Size()) {
        best = i;
      }
    }
    // The pool always holds at least need CPUs, so some untaken unit is larger than what is left.
    if (best < pool.size()) sel.taken.emplace_back(pool[best], remaining);
  }
  return sel;
}

// The measures a candidate is ranked by, compared lexicographically: the three promised ones
// first, then locality and fit. Equal scores fall back to the lowest CPU ids (see Search), so
// equal candidates resolve the same way every time.
struct Score {
  int numa = 0;
  int l3 = 0;
  int splits = 0;
  int packages = 0;
  uint64_t distance = 0;
  int group_leftover = 0;
  int node_leftover = 0;
  auto Key() const {
    return std::tie(numa, l3, splits, packages, distance, group_leftover, node_leftover);
  }
};

// Within one set of NUMA nodes the fewest groups come from taking the largest groups whole and
// finishing in one more; which group finishes is what varies. Those variants are tried tightest
// first, and the search stops once one without a split has been seen and only looser ones
// remain, or after this many: later ones could only win on packages or distance, which groups of
// the same nodes rarely differ in.
constexpr int kMaxGroupChoicesPerNodeSet = 4;

// Scores candidate placements and keeps the best. Scratch buffers live here so that scoring a
// candidate allocates little: a 384-CPU machine may see a few hundred candidates.
class Search {
 public:
  explicit Search(const Model& m)
      : m_(m),
        group_capacity_(static_cast<size_t>(m.group_count), 0),
        position_(static_cast<size_t>(m.group_count), -1),
        in_set_(m.nodes.size(), 0),
        touched_(m.units.size(), 0) {}

  void TryNodeSet(const std::vector<int>& node_set);
  bool Found() const { return best_.has_value(); }
  std::vector<int> BestCpus() const { return CpusOf(best_selection_); }

 private:
  Score ScoreOf(const Selection& sel, int group_capacity, int node_capacity);
  std::vector<int> CpusOf(const Selection& sel) const;
  void Offer(const Score& s, Selection sel);

  const Model& m_;
  std::optional<Score> best_;
  Selection best_selection_;
  std::vector<int> best_cpus_;  // CpusOf(best_selection_) once computed, else empty
  std::vector<int> group_capacity_;
  std::vector<int> position_;
  std::vector<char> in_set_;
  std::vector<char> touched_;
};

std::vector<int> Search::CpusOf(const Selection& sel) const {
  std::vector<int> cpus = m_.must_cpus;
  for (const auto& [ui, n] : sel.taken) {
    const Unit& u = m_.units[static_cast<size_t>(ui)];
    cpus.insert(cpus.end(), u.rest.begin(), u.rest.begin() + n);
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

void Search::Offer(const Score& s, Selection sel) {
  if (best_ && best_->Key() < s.Key()) return;
  if (best_ && best_->Key() == s.Key()) {
    // Ties are common (symmetric machines), so the ids are only listed when needed.
    if (best_cpus_.empty()) best_cpus_ = CpusOf(best_selection_);
    std::vector<int> cpus = CpusOf(sel);
    if (!(cpus < best_cpus_)) return;
    best_cpus_ = std::move(cpus);
  } else {
    best_cpus_.clear();
  }
  best_ = s;
  best_selection_ = std::move(sel);
}

Score Search::ScoreOf(const Selection& sel, int group_capacity, int node_capacity) {
  Score s;
  std::vector<int> nodes = m_.must_nodes;
  std::vector<int> groups = m_.must_groups;
  std::vector<int> packages = m_.must_packages;
  for (const auto& [ui, n] : sel.taken) {
    const Unit& u = m_.units[static_cast<size_t>(ui)];
    touched_[static_cast<size_t>(ui)] = 1;
    nodes.push_back(u.node);
    groups.push_back(u.group);
    packages.push_back(u.package);
    if (n < u.Size()) ++s.splits;
  }
  // A core whose must_include threads are taken but whose other free threads are not is split
  // as surely as one cut by the search.
  for (int ui : m_.forced_units) {
    if (!touched_[static_cast<size_t>(ui)]) ++s.splits;
  }
  for (const auto& [ui, n] : sel.taken) touched_[static_cast<size_t>(ui)] = 0;
  auto distinct = [](std::vector<int>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return static_cast<int>(v.size());
  };
  s.numa = distinct(nodes);
  s.l3 = distinct(groups);
  s.packages = distinct(packages);
  for (size_t a = 0; a < nodes.size(); ++a) {
    for (size_t b = a + 1; b < nodes.size(); ++b) {
      s.distance += m_.distance[static_cast<size_t>(nodes[a])][static_cast<size_t>(nodes[b])];
    }
  }
  s.group_leftover = group_capacity - m_.need;
  s.node_leftover = node_capacity - m_.need;
  return s;
}

void Search::TryNodeSet(const std::vector<int>& node_set) {
  const int numa = static_cast<int>(node_set.size());
  if (best_ && numa > best_->numa) return;
  std::vector<int> touched_groups;
  int node_capacity = 0;
  for (int n : node_set) {
    const NodeInfo& node = m_.nodes[static_cast<size_t>(n)];
    in_set_[static_cast<size_t>(n)] = 1;
    node_capacity += node.capacity;
    for (int ui : node.units) {
      const Unit& u = m_.units[static_cast<size_t>(ui)];
      int& cap = group_capacity_[static_cast<size_t>(u.group)];
      if (cap == 0) touched_groups.push_back(u.group);
      cap += u.Size();
    }
  }
  std::sort(touched_groups.begin(), touched_groups.end());
  int base_capacity = 0;
  for (int g : m_.must_groups) base_capacity += group_capacity_[static_cast<size_t>(g)];
  std::vector<int> others;
  for (int g : touched_groups) {
    if (!m_.group_forced[static_cast<size_t>(g)]) others.push_back(g);
  }
  std::stable_sort(others.begin(), others.end(), [&](int a, int b) {
    return group_capacity_[static_cast<size_t>(a)] > group_capacity_[static_cast<size_t>(b)];
  });

  struct Choice {
    std::vector<int> groups;  // in consumption order: the largest first, the finishing one last
    int capacity = 0;
    std::vector<int> sorted;  // groups, ascending
  };
  std::vector<Choice> choices;
  if (base_capacity >= m_.need) {
    choices.push_back({m_.must_groups, base_capacity});
  } else {
    // Reverse order so that, among equally sized groups, the lowest are the ones taken whole.
    for (auto it = others.rbegin(); it != others.rend(); ++it) {
      const int last = *it;
      const int last_capacity = group_capacity_[static_cast<size_t>(last)];
      Choice c{m_.must_groups, base_capacity};
      for (int g : others) {
        if (c.capacity + last_capacity >= m_.need) break;
        if (g == last) continue;
        c.groups.push_back(g);
        c.capacity += group_capacity_[static_cast<size_t>(g)];
      }
      if (c.capacity + last_capacity < m_.need) continue;
      c.groups.push_back(last);
      c.capacity += last_capacity;
      choices.push_back(std::move(c));
    }
  }
  size_t fewest = SIZE_MAX;
  for (const Choice& c : choices) fewest = std::min(fewest, c.groups.size());
  std::erase_if(choices, [&](const Choice& c) { return c.groups.size() != fewest; });
  // Tightest first; among equally tight ones the lowest groups, so that the cap below cuts
  // deterministically and keeps lowest-id answers in reach.
  for (Choice& c : choices) {
    c.sorted = c.groups;
    std::sort(c.sorted.begin(), c.sorted.end());
  }
  std::sort(choices.begin(), choices.end(), [](const Choice& a, const Choice& b) {
    return std::tie(a.capacity, a.sorted) < std::tie(b.capacity, b.sorted);
  });

  int tried = 0;
  std::optional<int> unsplit_capacity;
  for (const Choice& c : choices) {
    if (tried++ == kMaxGroupChoicesPerNodeSet) break;
    if (unsplit_capacity && c.capacity > *unsplit_capacity) break;
    // Neither the NUMA nor the group count can improve on a better best.
    if (best_ && std::make_pair(numa, static_cast<int>(c.groups.size())) >
                     std::make_pair(best_->numa, best_->l3)) {
      break;
    }
    // Groups in the order chosen (the largest are consumed whole first); inside a group the
    // rest of must_include's cores, then whole cores, then leftovers, each in topology order.
    std::vector<int> pool;
    for (int g : c.groups) {
      const std::vector<int>& units = m_.group_units[static_cast<size_t>(g)];
      for (int pass = 0; pass < 3; ++pass) {
        for (int ui : units) {
          const Unit& u = m_.units[static_cast<size_t>(ui)];
          if (!in_set_[static_cast<size_t>(u.node)]) continue;
          const int rank = u.forced ? 0 : (u.whole ? 1 : 2);
          if (rank == pass) pool.push_back(ui);
        }
      }
    }
    Selection sel = Choose(m_, pool, m_.need);
    const Score s = ScoreOf(sel, c.capacity, node_capacity);
    if (s.splits == 0) unsplit_capacity = c.capacity;
    Offer(s, std::move(sel));
  }

  for (int g : touched_groups) group_capacity_[static_cast<size_t>(g)] = 0;
  for (int n : node_set) in_set_[static_cast<size_t>(n)] = 0;
}

// n choose k, saturating at limit + 1.
int64_t Combinations(int n, int k, int64_t limit) {
  if (k < 0 || k > n) return 0;
  int64_t c = 1;
  for (int i = 1; i <= k; ++i) {
    c = c * (n - k + i) / i;
    if (c > limit) return limit + 1;
  }
  return c;
}

// NUMA node sets of the minimal size (must_include's nodes plus `extras` others) that hold the
// request.
std::vector<std::vector<int>> NodeSetCandidates(const Model& m, int extras) {
  std::vector<int> forced;
  std::vector<int> free_nodes;
  int forced_capacity = 0;
  for (size_t n = 0; n < m.nodes.size(); ++n) {
    if (m.nodes[n].forced) {
      forced.push_back(static_cast<int>(n));
      forced_capacity += m.nodes[n].capacity;
    } else if (m.nodes[n].capacity > 0) {
      free_nodes.push_back(static_cast<int>(n));
    }
  }
  std::set<std::vector<int>> sets;
  auto add = [&](std::vector<int> chosen) {
    int capacity = forced_capacity;
    for (int n : chosen) capacity += m.nodes[static_cast<size_t>(n)].capacity;
    if (capacity < m.need) return;
    chosen.insert(chosen.end(), forced.begin(), forced.end());
    std::sort(chosen.begin(), chosen.end());
    sets.insert(std::move(chosen));
  };

  const int n = static_cast<int>(free_nodes.size());
  if (Combinations(n, extras, kMaxNumaCombinations) <= kMaxNumaCombinations) {
    std::vector<int> idx(static_cast<size_t>(extras));
    for (int i = 0; i < extras; ++i) idx[static_cast<size_t>(i)] = i;
    while (true) {
      std::vector<int> chosen;
      for (int i : idx) chosen.push_back(free_nodes[static_cast<size_t>(i)]);
      add(std::move(chosen));
      int i = extras - 1;
      while (i >= 0 && idx[static_cast<size_t>(i)] == n - extras + i) --i;
      if (i < 0) break;
      ++idx[static_cast<size_t>(i)];
      for (int j = i + 1; j < extras; ++j) {
        idx[static_cast<size_t>(j)] = idx[static_cast<size_t>(j) - 1] + 1;
      }
    }
    return {sets.begin(), sets.end()};
  }

  // Too many to try all: the largest nodes (always feasible, since that is how the minimal size
  // was found), plus, from every node, growth towards its nearest neighbours: same package
  // first, then NUMA distance, then the most free CPUs. The last pick must make the set fit.
  std::vector<int> by_capacity = free_nodes;
  std::stable_sort(by_capacity.begin(), by_capacity.end(), [&](int a, int b) {
    return m.nodes[static_cast<size_t>(a)].capacity > m.nodes[static_cast<size_t>(b)].capacity;
  });
  add(std::vector<int>(by_capacity.begin(), by_capacity.begin() + extras));
  const size_t total = m.nodes.size();
  for (int seed : free_nodes) {
    std::vector<char> chosen_flag(total, 0);
    std::vector<char> shares(total, 0);
    std::vector<uint64_t> dist(total, 0);
    auto join = [&](int b) {
      chosen_flag[static_cast<size_t>(b)] = 1;
      for (size_t v = 0; v < total; ++v) {
        shares[v] = shares[v] || m.shares_package[v][static_cast<size_t>(b)];
        dist[v] += m.distance[v][static_cast<size_t>(b)];
      }
    };
    for (int f : forced) join(f);
    join(seed);
    std::vector<int> chosen = {seed};
    int capacity = forced_capacity + m.nodes[static_cast<size_t>(seed)].capacity;
    while (static_cast<int>(chosen.size()) < extras) {
      const bool last = static_cast<int>(chosen.size()) == extras - 1;
      std::optional<std::tuple<int, uint64_t, int, int>> best_key;
      for (int v : free_nodes) {
        const size_t vi = static_cast<size_t>(v);
        if (chosen_flag[vi]) continue;
        if (last && capacity + m.nodes[vi].capacity < m.need) continue;
        auto key = std::make_tuple(shares[vi] ? 0 : 1, dist[vi], -m.nodes[vi].capacity, v);
        if (!best_key || key < *best_key) best_key = key;
      }
      if (!best_key) break;
      const int pick = std::get<3>(*best_key);
      chosen.push_back(pick);
      capacity += m.nodes[static_cast<size_t>(pick)].capacity;
      join(pick);
    }
    if (static_cast<int>(chosen.size()) == extras) add(std::move(chosen));
  }
  return {sets.begin(), sets.end()};
}

}  // namespace

absl::StatusOr<CpuSet> AllocateCpus(const Topology& topo, const CpuRequest& req) {
  auto describe = [&req] {
    return absl::StrCat("count ", req.count, ", available \"", req.available.ToString(),
                        "\", must_include \"", req.must_include.ToString(), "\"");
  };
  if (req.count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu request: count ", req.count, " must be at least 1 (", describe(), ")"));
  }
  // Only CPUs of known cores can be placed; anything else in available is not on this machine.
  CpuSet usable;
  for (const Core& c : topo.cores) {
    for (int cpu : c.cpus) {
      if (req.available.Contains(cpu)) usable.Add(cpu);
    }
  }
  const CpuSet missing = req.must_include - usable;
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
  if (usable.Size() < req.count) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu request: cannot take ", req.count, " CPUs, only ", usable.Size(),
                     " of the available ones are online (", describe(), ")"));
  }
  if (must_size == req.count) return req.must_include;

  const Model m = BuildModel(topo, usable, req.must_include, req.count - must_size);

  // The fewest NUMA nodes: must_include's nodes, then the largest others until the request fits.
  // No set of that many nodes holds more, so no smaller set can hold the request.
  int extras = 0;
  {
    int capacity = 0;
    std::vector<int> free_capacity;
    for (const NodeInfo& n : m.nodes) {
      if (n.forced) {
        capacity += n.capacity;
      } else if (n.capacity > 0) {
        free_capacity.push_back(n.capacity);
      }
    }
    std::sort(free_capacity.rbegin(), free_capacity.rend());
    for (size_t i = 0; capacity < m.need && i < free_capacity.size(); ++i) {
      capacity += free_capacity[i];
      ++extras;
    }
  }

  Search search(m);
  for (const std::vector<int>& node_set : NodeSetCandidates(m, extras)) {
    search.TryNodeSet(node_set);
  }
  const std::vector<int> cpus = search.Found() ? search.BestCpus() : std::vector<int>();
  if (static_cast<int>(cpus.size()) != req.count) {
    // Unreachable while the capacity checks above hold; kept so that a bug shows as an error
    // rather than as a wrong-sized answer.
    return absl::InternalError(absl::StrCat("cpu request: no placement found for ", describe()));
  }
  CpuSet out;
  for (int cpu : cpus) out.Add(cpu);
  return out;
}

}  // namespace topodra::allocation
