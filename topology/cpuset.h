#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace topodra {

// A set of logical CPU ids (Linux OS CPU numbers), in the list format used by cpusets and sysfs
// ("0-3,8,10-11"). Stored as a bitset window: words_[i] holds CPUs (first_word_ + i) * 64 and
// up, and zero words are trimmed at both ends (the empty set has no words and first_word_ 0).
// Only storing the occupied window matters because the daemon keeps one set per core, cache,
// NUMA node and claim, and on large machines most of those sets hold only high ids. Trimming
// makes the representation canonical, so defaulted equality is structural.
class CpuSet {
 public:
  // Bounds the bitset at 8 KiB, so no input (parsed or programmatic) can make a set allocate
  // more than that.
  static constexpr int kMaxCpuId = (1 << 16) - 1;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using iterator_concept = std::forward_iterator_tag;
    using value_type = int;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = int;

    const_iterator() = default;

    int operator*() const {
      return static_cast<int>((base_ + index_) * 64 +
                              static_cast<std::size_t>(std::countr_zero(bits_)));
    }
    const_iterator& operator++() {
      bits_ &= bits_ - 1;
      SkipEmptyWords();
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++*this;
      return old;
    }
    // The words pointer and base are not compared: an exhausted iterator has bits_ == 0 and
    // index_ == size, which is exactly what end() holds.
    bool operator==(const const_iterator& other) const {
      return index_ == other.index_ && bits_ == other.bits_;
    }

   private:
    friend class CpuSet;
    // base is the absolute word index of words[0]; index is relative to words.
    const_iterator(const uint64_t* words, std::size_t size, std::size_t base, std::size_t index)
        : words_(words),
          size_(size),
          base_(base),
          index_(index),
          bits_(index < size ? words[index] : 0) {
      SkipEmptyWords();
    }
    void SkipEmptyWords() {
      while (bits_ == 0 && index_ < size_) {
        if (++index_ < size_) bits_ = words_[index_];
      }
    }

    const uint64_t* words_ = nullptr;
    std::size_t size_ = 0;
    std::size_t base_ = 0;
    std::size_t index_ = 0;
    uint64_t bits_ = 0;
  };

  CpuSet() = default;
  CpuSet(const CpuSet&) = default;
  CpuSet& operator=(const CpuSet&) = default;
  // A moved-from set is the empty set (first_word_ reset too), as it was when the vector was
  // the only member, so it still compares and hashes equal to CpuSet().
  CpuSet(CpuSet&& other) noexcept;
  CpuSet& operator=(CpuSet&& other) noexcept;
  CpuSet(std::initializer_list<int> ids);

  // Inclusive; empty if last < first. Ids outside [0, kMaxCpuId] are dropped.
  static CpuSet Range(int first, int last);

  // Strict parse of the Linux list format. "" is the empty set; exactly one trailing '\n' is
  // accepted because sysfs files end with one. Errors are InvalidArgument and quote the input,
  // the offending token and its 0-based byte offset.
  static absl::StatusOr<CpuSet> Parse(std::string_view text);

  // Canonical form: ascending, ranges merged, "a-b" whenever a run has two or more ids.
  std::string ToString() const;

  bool Contains(int cpu) const;
  // Ids outside [0, kMaxCpuId] are ignored rather than being undefined behaviour, because ids
  // often come from external sources (sysfs, kubelet, user config).
  void Add(int cpu);
  void Remove(int cpu);
  void AddRange(int first, int last);

  int Size() const;
  bool Empty() const { return words_.empty(); }
  std::optional<int> First() const;
  std::optional<int> Last() const;

  CpuSet Union(const CpuSet& other) const;
  CpuSet Intersection(const CpuSet& other) const;
  CpuSet Difference(const CpuSet& other) const;
  CpuSet operator|(const CpuSet& other) const { return Union(other); }
  CpuSet operator&(const CpuSet& other) const { return Intersection(other); }
  CpuSet operator-(const CpuSet& other) const { return Difference(other); }
  CpuSet& operator|=(const CpuSet& other);
  CpuSet& operator&=(const CpuSet& other);
  CpuSet& operator-=(const CpuSet& other);

  bool IsSubsetOf(const CpuSet& other) const;
  bool Intersects(const CpuSet& other) const;

  bool operator==(const CpuSet& other) const = default;

  const_iterator begin() const {
    return const_iterator(words_.data(), words_.size(), static_cast<std::size_t>(first_word_), 0);
  }
  const_iterator end() const {
    return const_iterator(words_.data(), words_.size(), static_cast<std::size_t>(first_word_),
                          words_.size());
  }

  std::vector<int> ToVector() const;

  // Number of 64-bit words the set stores (its heap footprint is 8 bytes per word). For tests
  // and memory accounting only; it is not part of the set's value.
  std::size_t StoredWords() const { return words_.size(); }

  // Lets CpuSet key absl hash containers (e.g. caching per-cpuset allocation results).
  template <typename H>
  friend H AbslHashValue(H h, const CpuSet& set) {
    // Both members, since the representation is canonical: equal sets hash equally.
    return H::combine(std::move(h), set.first_word_, set.words_);
  }

 private:
  static constexpr int kWordBits = 64;

  // Absolute index of the first word past the stored ones.
  std::size_t EndWord() const { return static_cast<std::size_t>(first_word_) + words_.size(); }
  // The stored word at absolute index word, or 0 outside the stored window.
  uint64_t WordAt(std::size_t word) const;
  // Index of the first member >= from, or -1.
  int NextSet(int from) const;
  // Index of the first non-member >= from (may be one past the stored words).
  int NextClear(int from) const;
  // Widens the stored window to cover absolute words [lo, hi] as well as what it covers now,
  // with new words zero and at most one allocation. The caller must set bits so that the
  // result is trimmed again.
  void Cover(std::size_t lo, std::size_t hi);
  // Drops zero words at both ends, restoring the canonical form.
  void Trim();

  // Absolute index of words_[0]; 0 whenever words_ is empty. Declared first so that defaulted
  // equality rejects sets at different offsets before comparing words. At most
  // kMaxCpuId / 64, so 32 bits are plenty.
  int32_t first_word_ = 0;
  std::vector<uint64_t> words_;
};

static_assert(std::forward_iterator<CpuSet::const_iterator>);

std::ostream& operator<<(std::ostream& os, const CpuSet& set);

}  // namespace topodra
