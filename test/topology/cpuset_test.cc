#include "topology/cpuset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/hash/hash_testing.h"
#include "absl/status/status.h"

namespace topodra {
namespace {

std::vector<int> Ids(const std::set<int>& s) { return std::vector<int>(s.begin(), s.end()); }

CpuSet FromStdSet(const std::set<int>& s) {
  CpuSet out;
  for (int id : s) out.Add(id);
  return out;
}

// A set of roughly density * (max_id + 1) ids drawn from [0, max_id].
std::set<int> RandomIds(std::mt19937& rng, int max_id, double density) {
  std::set<int> ids;
  std::bernoulli_distribution pick(density);
  for (int id = 0; id <= max_id; ++id) {
    if (pick(rng)) ids.insert(id);
  }
  return ids;
}

struct ValidCase {
  std::string input;
  std::string canonical;
  int size;
};

TEST(CpuSetParseTest, ValidInputs) {
  const ValidCase kCases[] = {
      {"", "", 0},
      {"\n", "", 0},
      {"0", "0", 1},
      {"0\n", "0", 1},
      {"0-3", "0-3", 4},
      {"0-3\n", "0-3", 4},
      {"4-5", "4-5", 2},
      {"4,5", "4-5", 2},
      {"7-7", "7", 1},
      {"0-3,8,10-11", "0-3,8,10-11", 7},
      {"3,1-2,2", "1-3", 3},
      {"10,9,8,1", "1,8-10", 4},
      {"0-5,3-8", "0-8", 9},
      {"1,1,1", "1", 1},
      {"007", "7", 1},
      {"00-0010", "0-10", 11},
      {"0000000000000000000000065535", "65535", 1},
      {"63,64", "63-64", 2},
      {"62,65", "62,65", 2},
      {"0,63,64,127,128", "0,63-64,127-128", 5},
      {"65535", "65535", 1},
      {"0-65535", "0-65535", 65536},
      {"0-65535,0-65535", "0-65535", 65536},
      {"1,3,5,7", "1,3,5,7", 4},
      {"64-127", "64-127", 64},
      {"0-63,128-191", "0-63,128-191", 128},
  };
  for (const ValidCase& c : kCases) {
    SCOPED_TRACE(testing::Message() << "input: \"" << c.input << "\"");
    absl::StatusOr<CpuSet> set = CpuSet::Parse(c.input);
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ(set->ToString(), c.canonical);
    EXPECT_EQ(set->Size(), c.size);
    EXPECT_EQ(set->Empty(), c.size == 0);
  }
}

struct InvalidCase {
  std::string input;
  std::string message;  // Exact, so the token and position are both pinned.
};

TEST(CpuSetParseTest, InvalidInputs) {
  const InvalidCase kCases[] = {
      // Reversed ranges.
      {"5-2", R"(invalid cpuset "5-2": reversed range "5-2" at position 0)"},
      {"0,10-9", R"(invalid cpuset "0,10-9": reversed range "10-9" at position 2)"},
      // Negative ids.
      {"-1", R"(invalid cpuset "-1": range "-1" at position 0 has no first CPU id)"},
      {"1--3", R"(invalid cpuset "1--3": element "1--3" at position 0 has more than one '-')"},
      {"2,-7", R"(invalid cpuset "2,-7": range "-7" at position 2 has no first CPU id)"},
      // Non-numeric ids.
      {"a", R"(invalid cpuset "a": "a" at position 0 is not a CPU id)"},
      {"1,x", R"(invalid cpuset "1,x": "x" at position 2 is not a CPU id)"},
      {"1-b", R"(invalid cpuset "1-b": "b" at position 2 is not a CPU id)"},
      {"0x3", R"(invalid cpuset "0x3": "0x3" at position 0 is not a CPU id)"},
      {"+1", R"(invalid cpuset "+1": "+1" at position 0 is not a CPU id)"},
      {"3,4-5a", R"(invalid cpuset "3,4-5a": "5a" at position 4 is not a CPU id)"},
      {"1;2", R"(invalid cpuset "1;2": "1;2" at position 0 is not a CPU id)"},
      {std::string("1\0", 2), R"(invalid cpuset "1\x00": "1\x00" at position 0 is not a CPU id)"},
      {"\"", R"(invalid cpuset "\"": "\"" at position 0 is not a CPU id)"},
      // Empty elements.
      {",", R"(invalid cpuset ",": empty element at position 0)"},
      {",,", R"(invalid cpuset ",,": empty element at position 0)"},
      {"1,,2", R"(invalid cpuset "1,,2": empty element at position 2)"},
      {"0-3,,5", R"(invalid cpuset "0-3,,5": empty element at position 4)"},
      {"1,", R"(invalid cpuset "1,": empty element at position 2)"},
      {",1", R"(invalid cpuset ",1": empty element at position 0)"},
      {",\n", R"(invalid cpuset ",\n": empty element at position 0)"},
      // Ranges with missing ends.
      {"1-", R"(invalid cpuset "1-": range "1-" at position 0 has no last CPU id)"},
      {"-3", R"(invalid cpuset "-3": range "-3" at position 0 has no first CPU id)"},
      {"-", R"(invalid cpuset "-": range "-" at position 0 has no first CPU id)"},
      {"4,8-\n", R"(invalid cpuset "4,8-\n": range "8-" at position 2 has no last CPU id)"},
      // More than one dash.
      {"1-2-3", R"(invalid cpuset "1-2-3": element "1-2-3" at position 0 has more than one '-')"},
      // Ids above kMaxCpuId, including ones that would overflow int or int64.
      {"70000", R"(invalid cpuset "70000": CPU id 70000 at position 0 exceeds the maximum 65535)"},
      {"65536", R"(invalid cpuset "65536": CPU id 65536 at position 0 exceeds the maximum 65535)"},
      {"0-65536",
       R"(invalid cpuset "0-65536": CPU id 65536 at position 2 exceeds the maximum 65535)"},
      {"1,99999999999999999999999",
       R"(invalid cpuset "1,99999999999999999999999": CPU id 99999999999999999999999 at position 2 exceeds the maximum 65535)"},
      {"4294967296",
       R"(invalid cpuset "4294967296": CPU id 4294967296 at position 0 exceeds the maximum 65535)"},
      {"0000065536",
       R"(invalid cpuset "0000065536": CPU id 0000065536 at position 0 exceeds the maximum 65535)"},
      // Whitespace anywhere but a single trailing newline.
      {" 1", R"(invalid cpuset " 1": unexpected whitespace " " at position 0)"},
      {"1 ,2", R"(invalid cpuset "1 ,2": unexpected whitespace " " at position 1)"},
      {"1\t", R"(invalid cpuset "1\t": unexpected whitespace "\t" at position 1)"},
      {"\n1", R"(invalid cpuset "\n1": unexpected whitespace "\n" at position 0)"},
      {"1\n\n", R"(invalid cpuset "1\n\n": unexpected whitespace "\n" at position 1)"},
      {"1\r\n", R"(invalid cpuset "1\r\n": unexpected whitespace "\r" at position 1)"},
      {"\n\n", R"(invalid cpuset "\n\n": unexpected whitespace "\n" at position 0)"},
      {"0-3 ", R"(invalid cpuset "0-3 ": unexpected whitespace " " at position 3)"},
      {"1\v", R"(invalid cpuset "1\x0b": unexpected whitespace "\x0b" at position 1)"},
      {"1\f", R"(invalid cpuset "1\x0c": unexpected whitespace "\x0c" at position 1)"},
  };
  for (const InvalidCase& c : kCases) {
    SCOPED_TRACE(testing::Message() << "expected: " << c.message);
    absl::StatusOr<CpuSet> set = CpuSet::Parse(c.input);
    ASSERT_FALSE(set.ok()) << "parsed as " << *set;
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(set.status().message()), c.message);
  }
}

TEST(CpuSetTest, ConstructionAndRange) {
  EXPECT_EQ(CpuSet().ToString(), "");
  EXPECT_EQ(CpuSet({3, 1, 2, 2}).ToString(), "1-3");
  EXPECT_EQ(CpuSet::Range(2, 5).ToString(), "2-5");
  EXPECT_EQ(CpuSet::Range(5, 5).ToString(), "5");
  EXPECT_TRUE(CpuSet::Range(5, 4).Empty());
  EXPECT_EQ(CpuSet::Range(60, 70).ToString(), "60-70");
  EXPECT_EQ(CpuSet::Range(0, 63).ToString(), "0-63");
  EXPECT_EQ(CpuSet::Range(64, 64).ToVector(), std::vector<int>({64}));
  EXPECT_EQ(CpuSet::Range(0, CpuSet::kMaxCpuId).Size(), 65536);
  // Out-of-range parts of a range are dropped, not undefined behaviour.
  EXPECT_EQ(CpuSet::Range(-5, 2).ToString(), "0-2");
  EXPECT_EQ(CpuSet::Range(65530, 1 << 30).ToString(), "65530-65535");
  EXPECT_TRUE(CpuSet::Range(-10, -1).Empty());
  EXPECT_TRUE(CpuSet::Range(70000, 80000).Empty());
  EXPECT_EQ(CpuSet({-1, 65536, 4, 1 << 30}).ToString(), "4");
}

TEST(CpuSetTest, AddRemoveContainsAtBoundaries) {
  const int kBoundaries[] = {0, 63, 64, 127, 128, 65535};
  for (int id : kBoundaries) {
    SCOPED_TRACE(id);
    CpuSet set;
    EXPECT_FALSE(set.Contains(id));
    set.Add(id);
    EXPECT_TRUE(set.Contains(id));
    EXPECT_FALSE(set.Contains(id + 1));
    EXPECT_EQ(set.Size(), 1);
    EXPECT_EQ(set.First(), id);
    EXPECT_EQ(set.Last(), id);
    EXPECT_EQ(set.ToString(), std::to_string(id));
    EXPECT_EQ(set, CpuSet::Parse(std::to_string(id)).value());
    set.Remove(id);
    EXPECT_TRUE(set.Empty());
    EXPECT_EQ(set, CpuSet());
  }
  CpuSet set{5};
  set.Add(-1);
  set.Add(65536);
  set.Remove(-1);
  set.Remove(1 << 30);
  EXPECT_EQ(set, CpuSet{5});
  EXPECT_FALSE(set.Contains(-1));
  EXPECT_FALSE(set.Contains(65536));
  EXPECT_FALSE(set.Contains(1 << 30));
  EXPECT_FALSE(CpuSet().First().has_value());
  EXPECT_FALSE(CpuSet().Last().has_value());
}

TEST(CpuSetTest, EqualityIsStructuralAfterTrimming) {
  CpuSet a{1, 200};
  a.Remove(200);
  EXPECT_EQ(a, CpuSet{1});
  EXPECT_EQ(CpuSet({1, 200}) - CpuSet{200}, CpuSet{1});
  EXPECT_EQ(CpuSet({1, 200}) & CpuSet({1, 5}), CpuSet{1});
  EXPECT_EQ(CpuSet({1000}) - CpuSet({1000}), CpuSet());
  CpuSet b = CpuSet::Range(0, 1000);
  b -= CpuSet::Range(0, 1000);
  EXPECT_EQ(b, CpuSet());
  EXPECT_TRUE(b.Empty());
  EXPECT_NE(CpuSet{1}, CpuSet{2});
  EXPECT_NE(CpuSet{1}, CpuSet({1, 1000}));
}

struct AlgebraCase {
  std::string a;
  std::string b;
  std::string union_;
  std::string intersection;
  std::string a_minus_b;
  bool a_subset_b;
  bool intersects;
};

// Checks every binary operation of one case, including that results are canonical (equality
// is structural, so comparing with a freshly parsed set checks the trimmed window too).
void ExpectAlgebra(const AlgebraCase& c) {
  SCOPED_TRACE(testing::Message() << "a=\"" << c.a << "\" b=\"" << c.b << "\"");
  const CpuSet a = CpuSet::Parse(c.a).value();
  const CpuSet b = CpuSet::Parse(c.b).value();
  EXPECT_EQ(a.Union(b).ToString(), c.union_);
  EXPECT_EQ((a | b).ToString(), c.union_);
  EXPECT_EQ(a.Intersection(b).ToString(), c.intersection);
  EXPECT_EQ((a & b).ToString(), c.intersection);
  EXPECT_EQ(a.Difference(b).ToString(), c.a_minus_b);
  EXPECT_EQ((a - b).ToString(), c.a_minus_b);
  EXPECT_EQ(a.IsSubsetOf(b), c.a_subset_b);
  EXPECT_EQ(a.Intersects(b), c.intersects);
  EXPECT_EQ(b.Intersects(a), c.intersects);
  // Compound assignments agree with the binary forms and leave results trimmed.
  CpuSet u = a;
  u |= b;
  EXPECT_EQ(u, a | b);
  CpuSet i = a;
  i &= b;
  EXPECT_EQ(i, a & b);
  CpuSet d = a;
  d -= b;
  EXPECT_EQ(d, a - b);
  EXPECT_EQ(d, CpuSet::Parse(c.a_minus_b).value());
  EXPECT_EQ(a | b, CpuSet::Parse(c.union_).value());
  EXPECT_EQ(a & b, CpuSet::Parse(c.intersection).value());
}

TEST(CpuSetTest, Algebra) {
  const AlgebraCase kCases[] = {
      {"", "", "", "", "", true, false},
      {"", "1-3", "1-3", "", "", true, false},
      {"1-3", "", "1-3", "", "1-3", false, false},
      {"1", "1000", "1,1000", "", "1", false, false},
      {"1000", "1", "1,1000", "", "1000", false, false},
      {"1", "1,1000", "1,1000", "1", "", true, true},
      {"1,1000", "1", "1,1000", "1", "1000", false, true},
      {"0-7", "4-11", "0-11", "4-7", "0-3", false, true},
      {"0-3", "0-3", "0-3", "0-3", "", true, true},
      {"2-3", "0-7", "0-7", "2-3", "", true, true},
      {"0-63", "64-127", "0-127", "", "0-63", false, false},
      {"63", "63-64", "63-64", "63", "", true, true},
      {"0-65535", "1-65534", "0-65535", "1-65534", "0,65535", false, true},
      {"0,2,4,6", "1,3,5,7", "0-7", "", "0,2,4,6", false, false},
      {"65535", "0", "0,65535", "", "65535", false, false},
  };
  for (const AlgebraCase& c : kCases) ExpectAlgebra(c);
}

struct IterationCase {
  std::string input;
  std::vector<int> ids;
};

TEST(CpuSetTest, IterationIsAscending) {
  const IterationCase kCases[] = {
      {"", {}},
      {"0", {0}},
      {"65535", {65535}},
      {"5000,3,64,63,0", {0, 3, 63, 64, 5000}},
      {"1,1000,2000,65535", {1, 1000, 2000, 65535}},
      {"60-68", {60, 61, 62, 63, 64, 65, 66, 67, 68}},
      {"126-129,191-192", {126, 127, 128, 129, 191, 192}},
  };
  for (const IterationCase& c : kCases) {
    SCOPED_TRACE(c.input);
    const CpuSet set = CpuSet::Parse(c.input).value();
    std::vector<int> seen;
    for (int id : set) seen.push_back(id);
    EXPECT_EQ(seen, c.ids);
    EXPECT_EQ(set.ToVector(), c.ids);
    EXPECT_EQ(set.Size(), static_cast<int>(c.ids.size()));
    EXPECT_EQ(std::distance(set.begin(), set.end()), static_cast<std::ptrdiff_t>(c.ids.size()));
    if (!c.ids.empty()) {
      EXPECT_EQ(set.First(), c.ids.front());
      EXPECT_EQ(set.Last(), c.ids.back());
    }
  }
}

TEST(CpuSetTest, DenseIteration) {
  const CpuSet all = CpuSet::Range(0, CpuSet::kMaxCpuId);
  int expected = 0;
  for (int id : all) {
    ASSERT_EQ(id, expected);
    ++expected;
  }
  EXPECT_EQ(expected, 65536);
  EXPECT_EQ(all.Size(), 65536);
  EXPECT_EQ(all.ToString(), "0-65535");

  const CpuSet evens = [] {
    CpuSet s;
    for (int i = 0; i <= 4096; i += 2) s.Add(i);
    return s;
  }();
  EXPECT_EQ(evens.Size(), 2049);
  std::vector<int> ids = evens.ToVector();
  ASSERT_EQ(ids.size(), 2049u);
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<int>(2 * i));
  auto it = evens.begin();
  EXPECT_EQ(*it++, 0);
  EXPECT_EQ(*it, 2);
}

TEST(CpuSetTest, StreamOperator) {
  std::ostringstream os;
  os << CpuSet({0, 1, 2, 3, 8, 10, 11});
  EXPECT_EQ(os.str(), "0-3,8,10-11");
}

TEST(CpuSetPropertyTest, RoundTrip) {
  std::mt19937 rng(20240611);
  const int kMaxima[] = {0, 1, 63, 64, 65, 255, 1023, 4095, 65535};
  const double kDensities[] = {0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0};
  int checked = 0;
  for (int max_id : kMaxima) {
    for (double density : kDensities) {
      for (int rep = 0; rep < 3; ++rep) {
        SCOPED_TRACE(testing::Message() << "max=" << max_id << " density=" << density);
        const std::set<int> ids = RandomIds(rng, max_id, density);
        const CpuSet set = FromStdSet(ids);
        ASSERT_EQ(set.ToVector(), Ids(ids));
        ASSERT_EQ(set.Size(), static_cast<int>(ids.size()));
        const std::string text = set.ToString();
        absl::StatusOr<CpuSet> parsed = CpuSet::Parse(text);
        ASSERT_TRUE(parsed.ok()) << parsed.status();
        ASSERT_EQ(*parsed, set);
        ASSERT_EQ(parsed->ToString(), text);
        absl::StatusOr<CpuSet> with_newline = CpuSet::Parse(text + "\n");
        ASSERT_TRUE(with_newline.ok()) << with_newline.status();
        ASSERT_EQ(*with_newline, set);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 9 * 7 * 3);
}

TEST(CpuSetPropertyTest, CanonicalFormIsFixedPoint) {
  // Non-canonical but valid inputs: shuffled, overlapping and duplicated elements.
  std::mt19937 rng(7);
  for (int rep = 0; rep < 200; ++rep) {
    const int max_id = std::uniform_int_distribution<int>(0, CpuSet::kMaxCpuId)(rng);
    const int elements = std::uniform_int_distribution<int>(1, 40)(rng);
    std::uniform_int_distribution<int> id(0, max_id);
    std::set<int> expected;
    std::string text;
    for (int e = 0; e < elements; ++e) {
      if (!text.empty()) text += ',';
      int lo = id(rng);
      int hi = id(rng);
      if (lo > hi) std::swap(lo, hi);
      if (rng() % 2) {
        text += std::to_string(lo);
        expected.insert(lo);
      } else {
        text += std::to_string(lo) + "-" + std::to_string(std::min(hi, lo + 300));
        for (int i = lo; i <= std::min(hi, lo + 300); ++i) expected.insert(i);
      }
    }
    SCOPED_TRACE(text);
    const CpuSet parsed = CpuSet::Parse(text).value();
    ASSERT_EQ(parsed.ToVector(), Ids(expected));
    const std::string canonical = parsed.ToString();
    const CpuSet reparsed = CpuSet::Parse(canonical).value();
    ASSERT_EQ(reparsed, parsed);
    ASSERT_EQ(reparsed.ToString(), canonical);
  }
}

TEST(CpuSetPropertyTest, AlgebraMatchesStdSet) {
  std::mt19937 rng(42);
  const int kMaxima[] = {10, 63, 64, 200, 1000, 5000, 65535};
  const double kDensities[] = {0.0, 0.02, 0.3, 0.7, 1.0};
  for (int rep = 0; rep < 300; ++rep) {
    // Different maxima for a and b exercise operands of different word lengths.
    const int max_a = kMaxima[rng() % std::size(kMaxima)];
    const int max_b = kMaxima[rng() % std::size(kMaxima)];
    const std::set<int> sa = RandomIds(rng, max_a, kDensities[rng() % std::size(kDensities)]);
    const std::set<int> sb = RandomIds(rng, max_b, kDensities[rng() % std::size(kDensities)]);
    SCOPED_TRACE(testing::Message() << "rep=" << rep << " max_a=" << max_a << " max_b=" << max_b);
    const CpuSet a = FromStdSet(sa);
    const CpuSet b = FromStdSet(sb);

    std::set<int> u, i, d;
    std::set_union(sa.begin(), sa.end(), sb.begin(), sb.end(), std::inserter(u, u.end()));
    std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::inserter(i, i.end()));
    std::set_difference(sa.begin(), sa.end(), sb.begin(), sb.end(), std::inserter(d, d.end()));

    ASSERT_EQ((a | b).ToVector(), Ids(u));
    ASSERT_EQ((a & b).ToVector(), Ids(i));
    ASSERT_EQ((a - b).ToVector(), Ids(d));
    ASSERT_EQ(a | b, FromStdSet(u));
    ASSERT_EQ(a & b, FromStdSet(i));
    ASSERT_EQ(a - b, FromStdSet(d));
    ASSERT_EQ(a.IsSubsetOf(b), std::includes(sb.begin(), sb.end(), sa.begin(), sa.end()));
    ASSERT_EQ(a.Intersects(b), !i.empty());
    ASSERT_TRUE((a & b).IsSubsetOf(a));
    ASSERT_TRUE(a.IsSubsetOf(a | b));
    ASSERT_EQ(a == b, sa == sb);
    ASSERT_EQ(a.First(), sa.empty() ? std::nullopt : std::optional<int>(*sa.begin()));
    ASSERT_EQ(a.Last(), sa.empty() ? std::nullopt : std::optional<int>(*sa.rbegin()));
    for (int probe : {0, 63, 64, max_a, max_b, 65535}) {
      ASSERT_EQ(a.Contains(probe), sa.count(probe) == 1) << probe;
    }
  }
}

TEST(CpuSetPropertyTest, RemoveMatchesStdSet) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> id(0, 3000);
  CpuSet set;
  std::set<int> reference;
  for (int step = 0; step < 20000; ++step) {
    const int cpu = id(rng);
    if (rng() % 3 == 0) {
      set.Remove(cpu);
      reference.erase(cpu);
    } else {
      set.Add(cpu);
      reference.insert(cpu);
    }
  }
  EXPECT_EQ(set.ToVector(), Ids(reference));
  EXPECT_EQ(set, FromStdSet(reference));
  for (int cpu : Ids(reference)) set.Remove(cpu);
  EXPECT_EQ(set, CpuSet());
}

// Sets are stored as the window of words from the first to the last non-zero one, so sets that
// hold only high ids (one per core, cache or NUMA node on a large machine) stay small.

// What AbslHashValue feeds a hash state, byte for byte. The tests do not link absl::hash (only
// topodra_topology's dependencies), and the recorded input is what decides hash equality anyway.
absl::hash_internal::SpyHashState HashInput(const CpuSet& set) {
  return absl::hash_internal::SpyHashState::combine(absl::hash_internal::SpyHashState(), set);
}

// Words a canonical set with members between lo and hi (inclusive) must store.
size_t WindowWords(int lo, int hi) {
  return static_cast<size_t>(hi) / 64 - static_cast<size_t>(lo) / 64 + 1;
}

TEST(CpuSetSparseTest, SetsThatStartHigh) {
  const CpuSet pair{12798, 12799};
  EXPECT_EQ(pair.ToString(), "12798-12799");
  EXPECT_EQ(pair.Size(), 2);
  EXPECT_EQ(pair.First(), 12798);
  EXPECT_EQ(pair.Last(), 12799);
  EXPECT_EQ(pair.ToVector(), std::vector<int>({12798, 12799}));
  EXPECT_TRUE(pair.Contains(12798));
  EXPECT_TRUE(pair.Contains(12799));
  EXPECT_FALSE(pair.Contains(0));
  EXPECT_FALSE(pair.Contains(12797));
  EXPECT_FALSE(pair.Contains(12800));
  EXPECT_FALSE(pair.Empty());
  EXPECT_EQ(pair, CpuSet::Parse("12798-12799").value());
  EXPECT_EQ(pair, CpuSet::Range(12798, 12799));
  EXPECT_LE(pair.StoredWords(), 1u);
  EXPECT_EQ(pair.StoredWords(), 1u);

  const CpuSet word = CpuSet::Range(6400, 6463);
  EXPECT_EQ(word.ToString(), "6400-6463");
  EXPECT_EQ(word.Size(), 64);
  EXPECT_EQ(word.First(), 6400);
  EXPECT_EQ(word.Last(), 6463);
  EXPECT_FALSE(word.Contains(6399));
  EXPECT_FALSE(word.Contains(6464));
  EXPECT_EQ(word.StoredWords(), 1u);
  EXPECT_EQ(word, CpuSet::Parse("6400-6463").value());
  std::vector<int> seen;
  for (int id : word) seen.push_back(id);
  ASSERT_EQ(seen.size(), 64u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 6400 + static_cast<int>(i));

  // The const_iterator reports absolute ids, not ids relative to the stored window.
  auto it = pair.begin();
  EXPECT_EQ(*it++, 12798);
  EXPECT_EQ(*it, 12799);
  ++it;
  EXPECT_EQ(it, pair.end());
  EXPECT_EQ(std::distance(pair.begin(), pair.end()), 2);

  EXPECT_EQ(CpuSet{CpuSet::kMaxCpuId}.StoredWords(), 1u);
  EXPECT_EQ(CpuSet::Range(6400, 6464).StoredWords(), 2u);
  EXPECT_EQ(CpuSet::Range(6399, 6400).StoredWords(), 2u);
}

TEST(CpuSetSparseTest, StoredWordsIsTheOccupiedWindow) {
  EXPECT_EQ(CpuSet().StoredWords(), 0u);
  EXPECT_EQ(CpuSet{0}.StoredWords(), 1u);
  EXPECT_EQ(CpuSet({0, 12799}).StoredWords(), 200u);
  EXPECT_EQ(CpuSet({64, 200}).StoredWords(), 3u);
  EXPECT_EQ(CpuSet::Range(0, CpuSet::kMaxCpuId).StoredWords(), 1024u);
  EXPECT_EQ(CpuSet::Parse("100-199,12700").value().StoredWords(), WindowWords(100, 12700));
  // Results of the algebra are trimmed at both ends too.
  EXPECT_EQ((CpuSet({0, 12799}) - CpuSet{0}).StoredWords(), 1u);
  EXPECT_EQ((CpuSet({0, 12799}) & CpuSet::Range(6400, 12799)).StoredWords(), 1u);
  CpuSet d{0, 6400, 12799};
  d -= CpuSet({0, 12799});
  EXPECT_EQ(d.StoredWords(), 1u);
  CpuSet i{0, 6400, 12799};
  i &= CpuSet::Range(6000, 7000);
  EXPECT_EQ(i.StoredWords(), 1u);
  EXPECT_EQ(i, CpuSet{6400});
}

TEST(CpuSetSparseTest, SizeofGrowsByAtMostOneWord) {
  EXPECT_LE(sizeof(CpuSet), sizeof(std::vector<uint64_t>) + 8);
}

TEST(CpuSetSparseTest, AddGrowsTheWindowAtEitherEnd) {
  CpuSet set{10000};
  set.Add(5);  // Far below the first stored word.
  EXPECT_EQ(set.ToString(), "5,10000");
  EXPECT_EQ(set.StoredWords(), WindowWords(5, 10000));
  set.Add(0);
  set.Add(65535);
  EXPECT_EQ(set.ToString(), "0,5,10000,65535");
  EXPECT_EQ(set, CpuSet::Parse("65535,10000,5,0").value());
  EXPECT_EQ(set.First(), 0);
  EXPECT_EQ(set.Last(), 65535);

  // A range spanning both ends of the window grows it in both directions.
  CpuSet spanning{6400};
  spanning.AddRange(100, 7000);
  EXPECT_EQ(spanning, CpuSet::Range(100, 7000));
  EXPECT_EQ(spanning.StoredWords(), WindowWords(100, 7000));
  // Ranges entirely below, entirely above and inside the window.
  CpuSet pieces{6400};
  pieces.AddRange(64, 127);
  pieces.AddRange(9000, 9001);
  pieces.AddRange(6401, 6402);
  EXPECT_EQ(pieces.ToString(), "64-127,6400-6402,9000-9001");
  EXPECT_EQ(pieces, CpuSet::Parse("9000-9001,6400-6402,64-127").value());
  // Out-of-range ids leave a high set untouched.
  CpuSet high{12799};
  high.Add(-1);
  high.Add(CpuSet::kMaxCpuId + 1);
  high.AddRange(-10, -1);
  EXPECT_EQ(high, CpuSet{12799});
  EXPECT_EQ(high.StoredWords(), 1u);
}

TEST(CpuSetSparseTest, RemoveMovesTheWindow) {
  CpuSet set{64, 200};
  set.Remove(64);
  EXPECT_EQ(set, CpuSet{200});
  EXPECT_EQ(set.StoredWords(), 1u);
  EXPECT_EQ(set.First(), 200);
  EXPECT_EQ(set.ToString(), "200");
  set.Remove(200);
  EXPECT_EQ(set, CpuSet());
  EXPECT_TRUE(set.Empty());
  EXPECT_EQ(set.StoredWords(), 0u);
  // The emptied set is reusable at any offset.
  set.Add(7);
  EXPECT_EQ(set, CpuSet{7});

  CpuSet wide{0, 12799};
  wide.Remove(0);
  EXPECT_EQ(wide, CpuSet{12799});
  EXPECT_EQ(wide.StoredWords(), 1u);
  wide.Add(0);
  wide.Remove(12799);
  EXPECT_EQ(wide, CpuSet{0});
  EXPECT_EQ(wide.StoredWords(), 1u);

  // Removing ids outside the window, or not in the set, changes nothing.
  CpuSet high{6400, 6500};
  high.Remove(0);
  high.Remove(6399);
  high.Remove(6450);
  high.Remove(12799);
  high.Remove(-1);
  high.Remove(CpuSet::kMaxCpuId + 1);
  EXPECT_EQ(high, CpuSet({6400, 6500}));
  EXPECT_EQ(high.StoredWords(), 2u);
}

TEST(CpuSetSparseTest, AlgebraAcrossOffsets) {
  const AlgebraCase kCases[] = {
      {"0", "10000", "0,10000", "", "0", false, false},
      {"10000", "0", "0,10000", "", "10000", false, false},
      // One set entirely below the other.
      {"0-127", "6400-6463", "0-127,6400-6463", "", "0-127", false, false},
      {"6400-6463", "0-127", "0-127,6400-6463", "", "6400-6463", false, false},
      {"", "12798-12799", "12798-12799", "", "", true, false},
      {"12798-12799", "", "12798-12799", "", "12798-12799", false, false},
      // One window inside the other.
      {"6400-6463", "0-65535", "0-65535", "6400-6463", "", true, true},
      {"0-65535", "6400-6463", "0-65535", "6400-6463", "0-6399,6464-65535", false, true},
      {"6410", "6400-6463", "6400-6463", "6410", "", true, true},
      {"6399-6464", "6400-6463", "6399-6464", "6400-6463", "6399,6464", false, true},
      {"128-191", "0-127,192-255", "0-255", "", "128-191", false, false},
      {"0-127,192-255", "128-191", "0-255", "", "0-127,192-255", false, false},
      // Overlapping windows at different offsets.
      {"100,6400", "6400,9000", "100,6400,9000", "6400", "100", false, true},
      {"6400,9000", "100,6400", "100,6400,9000", "6400", "9000", false, true},
      {"1000-1100", "1050-2000", "1000-2000", "1050-1100", "1000-1049", false, true},
      {"12798-12799", "12799", "12798-12799", "12799", "12798", false, true},
      {"12799", "12798-12799", "12798-12799", "12799", "", true, true},
      {"65535", "65472-65535", "65472-65535", "65535", "", true, true},
      {"64,200", "0-63,65-199,201-300", "0-300", "", "64,200", false, false},
      // Results whose low or high words empty out, so the window must move or shrink.
      {"0-63,6400", "0-63", "0-63,6400", "0-63", "6400", false, true},
      {"0,6400-6463", "6400-6463", "0,6400-6463", "6400-6463", "0", false, true},
      {"0,6400,12799", "6400", "0,6400,12799", "6400", "0,12799", false, true},
      {"0,6400,12799", "0,12799", "0,6400,12799", "0,12799", "6400", false, true},
  };
  for (const AlgebraCase& c : kCases) ExpectAlgebra(c);
}

TEST(CpuSetSparseTest, HashMatchesEquality) {
  CpuSet ascending;
  for (int id : {6400, 6401, 9000, 12799}) ascending.Add(id);
  CpuSet descending;
  for (int id : {12799, 9000, 6401, 6400}) descending.Add(id);
  const CpuSet parsed = CpuSet::Parse("12799,6400-6401,9000").value();
  const CpuSet joined = CpuSet({12799}) | CpuSet::Range(6400, 6401) | CpuSet{9000};
  CpuSet shrunk = CpuSet::Range(0, 12799);
  shrunk &= CpuSet({6400, 6401, 9000, 12799, 20000});
  CpuSet removed{0, 64, 6400, 6401, 9000, 12799};
  removed.Remove(0);
  removed.Remove(64);
  const CpuSet* const kEqual[] = {&descending, &parsed, &joined, &shrunk, &removed};
  for (const CpuSet* other : kEqual) {
    EXPECT_EQ(*other, ascending) << *other;
    EXPECT_EQ(other->StoredWords(), ascending.StoredWords()) << *other;
    EXPECT_TRUE(HashInput(*other) == HashInput(ascending)) << *other;
  }
  // {64,200} minus 64 must hash like {200}, and a set emptied at an offset like CpuSet().
  CpuSet low_removed{64, 200};
  low_removed.Remove(64);
  EXPECT_TRUE(HashInput(low_removed) == HashInput(CpuSet{200}));
  CpuSet emptied{12799};
  emptied.Remove(12799);
  EXPECT_TRUE(HashInput(emptied) == HashInput(CpuSet()));
  EXPECT_TRUE(HashInput(CpuSet{6400} - CpuSet{6400}) == HashInput(CpuSet()));
  // Sets with the same words at different offsets must not collide structurally.
  EXPECT_FALSE(HashInput(CpuSet{0}) == HashInput(CpuSet{64}));

  // Abseil's own check that hashing agrees with operator== over a mix of offsets.
  EXPECT_TRUE(absl::VerifyTypeImplementsAbslHashCorrectly({
      CpuSet(),
      emptied,
      CpuSet{0},
      CpuSet{64},
      CpuSet{200},
      low_removed,
      CpuSet{0, 64},
      CpuSet{12798, 12799},
      CpuSet::Range(12798, 12799),
      CpuSet::Range(6400, 6463),
      CpuSet::Range(0, 63),
      CpuSet::Range(64, 127),
      ascending,
      parsed,
      removed,
  }));
}

TEST(CpuSetSparseTest, MovedFromSetIsEmpty) {
  CpuSet source{12798, 12799};
  CpuSet moved(std::move(source));
  EXPECT_EQ(moved, CpuSet({12798, 12799}));
  // NOLINTNEXTLINE(bugprone-use-after-move): pinning the moved-from state on purpose.
  EXPECT_EQ(source, CpuSet());
  source.Add(3);
  EXPECT_EQ(source, CpuSet{3});

  CpuSet target{1};
  CpuSet other{6400};
  target = std::move(other);
  EXPECT_EQ(target, CpuSet{6400});
  // NOLINTNEXTLINE(bugprone-use-after-move)
  EXPECT_EQ(other, CpuSet());
  EXPECT_TRUE(HashInput(other) == HashInput(CpuSet()));

  CpuSet copy = target;
  EXPECT_EQ(copy, target);
  EXPECT_EQ(target, CpuSet{6400});
}

// Like AlgebraMatchesStdSet, but each operand occupies a random window anywhere in the id
// space, so the operands almost always sit at different offsets.
TEST(CpuSetPropertyTest, OffsetAlgebraMatchesStdSet) {
  std::mt19937 rng(12800);
  const double kDensities[] = {0.0, 0.01, 0.2, 0.8, 1.0};
  auto random_window = [&rng, &kDensities] {
    std::uniform_int_distribution<int> id(0, CpuSet::kMaxCpuId);
    int lo = id(rng);
    const int width = std::uniform_int_distribution<int>(0, 700)(rng);
    const int hi = std::min(lo + width, CpuSet::kMaxCpuId);
    std::set<int> ids;
    std::bernoulli_distribution pick(kDensities[rng() % std::size(kDensities)]);
    for (int i = lo; i <= hi; ++i) {
      if (pick(rng)) ids.insert(i);
    }
    return ids;
  };
  for (int rep = 0; rep < 400; ++rep) {
    std::set<int> sa = random_window();
    std::set<int> sb = random_window();
    // A quarter of the time make b overlap a, so intersections are not always empty.
    if (rep % 4 == 0 && !sa.empty()) {
      for (int id : sa) {
        if (rng() % 2) sb.insert(id);
      }
    }
    SCOPED_TRACE(testing::Message() << "rep=" << rep);
    const CpuSet a = FromStdSet(sa);
    const CpuSet b = FromStdSet(sb);
    ASSERT_EQ(a.StoredWords(), sa.empty() ? 0u : WindowWords(*sa.begin(), *sa.rbegin()));

    std::set<int> u, i, d;
    std::set_union(sa.begin(), sa.end(), sb.begin(), sb.end(), std::inserter(u, u.end()));
    std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::inserter(i, i.end()));
    std::set_difference(sa.begin(), sa.end(), sb.begin(), sb.end(), std::inserter(d, d.end()));

    ASSERT_EQ((a | b).ToVector(), Ids(u));
    ASSERT_EQ((a & b).ToVector(), Ids(i));
    ASSERT_EQ((a - b).ToVector(), Ids(d));
    ASSERT_EQ(a | b, FromStdSet(u));
    ASSERT_EQ(a & b, FromStdSet(i));
    ASSERT_EQ(a - b, FromStdSet(d));
    CpuSet cu = a, ci = a, cd = a;
    cu |= b;
    ci &= b;
    cd -= b;
    ASSERT_EQ(cu, FromStdSet(u));
    ASSERT_EQ(ci, FromStdSet(i));
    ASSERT_EQ(cd, FromStdSet(d));
    ASSERT_EQ(a.IsSubsetOf(b), std::includes(sb.begin(), sb.end(), sa.begin(), sa.end()));
    ASSERT_EQ(a.Intersects(b), !i.empty());
    ASSERT_EQ(a == b, sa == sb);
    ASSERT_EQ(a.Size(), static_cast<int>(sa.size()));
    ASSERT_EQ(a.First(), sa.empty() ? std::nullopt : std::optional<int>(*sa.begin()));
    ASSERT_EQ(a.Last(), sa.empty() ? std::nullopt : std::optional<int>(*sa.rbegin()));
    ASSERT_EQ(CpuSet::Parse(a.ToString()).value(), a);
    if (!sa.empty()) {
      for (int probe : {*sa.begin() - 1, *sa.begin(), *sa.rbegin(), *sa.rbegin() + 1, 0, 65535}) {
        ASSERT_EQ(a.Contains(probe), sa.count(probe) == 1) << probe;
      }
    }
  }
}

TEST(CpuSetPropertyTest, HighWindowAddRemoveMatchesStdSet) {
  std::mt19937 rng(6400);
  std::uniform_int_distribution<int> id(12000, 12900);
  CpuSet set;
  std::set<int> reference;
  for (int step = 0; step < 20000; ++step) {
    const int cpu = id(rng);
    if (rng() % 2 == 0) {
      set.Remove(cpu);
      reference.erase(cpu);
    } else {
      set.Add(cpu);
      reference.insert(cpu);
    }
    if (step % 997 == 0) {
      ASSERT_EQ(set, FromStdSet(reference)) << step;
      ASSERT_EQ(set.StoredWords(),
                reference.empty() ? 0u : WindowWords(*reference.begin(), *reference.rbegin()));
    }
  }
  EXPECT_EQ(set.ToVector(), Ids(reference));
  EXPECT_EQ(set, FromStdSet(reference));
  // Removing in ascending order moves the window up one word at a time until it is empty.
  for (int cpu : Ids(reference)) {
    set.Remove(cpu);
    reference.erase(cpu);
    ASSERT_EQ(set.StoredWords(),
              reference.empty() ? 0u : WindowWords(*reference.begin(), *reference.rbegin()));
  }
  EXPECT_EQ(set, CpuSet());
}

}  // namespace
}  // namespace topodra
