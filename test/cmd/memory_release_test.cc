// What the daemon hands back once started: which mappings of /proc/self/smaps it may drop (table
// over a sample), and that dropping them in a running process loses nothing it reads afterwards.
#include "cmd/memory_release.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>

namespace topodra::cmd {
namespace {

std::string Mapping(const std::string& head, long rss, long anonymous, long swap = 0) {
  return head + "\nSize:                100 kB\nRss:                 " + std::to_string(rss) +
         " kB\nPss:                 " + std::to_string(rss) +
         " kB\nAnonymous:           " + std::to_string(anonymous) +
         " kB\nSwap:                " + std::to_string(swap) + " kB\nVmFlags: rd mr mw me\n";
}

TEST(MemoryReleaseTest, DropsOnlyReadOnlyPrivateFilePagesWithoutCopies) {
  struct Case {
    const char* head;
    long rss, anonymous;
    bool dropped;
  };
  const Case cases[] = {
      {"1000-2000 r-xp 00001000 fe:01 42  /usr/bin/topodra-daemon", 8, 0, true},   // text
      {"2000-3000 r--p 00002000 fe:01 42  /usr/bin/topodra-daemon", 4, 0, true},   // rodata
      {"3000-4000 r--p 00003000 fe:01 42  /usr/bin/topodra-daemon", 4, 4, false},  // RELRO
      {"4000-5000 rw-p 00004000 fe:01 42  /usr/bin/topodra-daemon", 4, 4, false},  // data
      {"5000-6000 r--s 00000000 fe:01 43  /var/lib/topodra/state", 4, 0, false},   // shared
      {"6000-7000 r-xp 00000000 00:00 0   [vdso]", 4, 0, false},
      {"7000-8000 r--p 00000000 00:00 0 ", 4, 0, false},                      // anonymous
      {"8000-9000 r-xp 00000000 fe:01 44  /usr/lib/libc.so.6", 0, 0, false},  // nothing resident
      {"9000-a000 r-xp 00000000 fe:01 45  /tmp/a file (deleted)", 4, 0, true},
  };
  for (const Case& c : cases) {
    const std::vector<DroppableRange> got =
        DroppableFileRanges(Mapping(c.head, c.rss, c.anonymous));
    ASSERT_EQ(got.size(), c.dropped ? 1u : 0u) << c.head;
    if (c.dropped) {
      EXPECT_EQ(got[0].rss_kib, c.rss) << c.head;
    }
  }
  // A relocated page swapped out leaves Anonymous at 0: its Swap line keeps the mapping.
  EXPECT_TRUE(
      DroppableFileRanges(Mapping("3000-4000 r--p 00003000 fe:01 42  /usr/lib/libx.so", 4, 0, 8))
          .empty());
  // Without a Swap line nothing is known of swapped copies: kept.
  EXPECT_TRUE(DroppableFileRanges("1000-2000 r-xp 00001000 fe:01 42  /usr/bin/x\nRss: 8 kB\n"
                                  "Anonymous: 0 kB\n")
                  .empty());
  // Several mappings in one text: each is judged on its own lines.
  std::string all;
  for (const Case& c : cases) all += Mapping(c.head, c.rss, c.anonymous);
  const std::vector<DroppableRange> got = DroppableFileRanges(all);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].start, 0x1000u);
  EXPECT_EQ(got[0].end, 0x2000u);
  EXPECT_EQ(got[1].start, 0x2000u);
  EXPECT_EQ(got[2].start, 0x9000u);
}

TEST(MemoryReleaseTest, ReadsAMappingsFirstLineAndNoKeyLine) {
  SmapsHeader h;
  ASSERT_TRUE(ParseSmapsHeader("7f00-7f80 r-xp 00001000 fe:01 42   /usr/lib/a b.so (deleted)", &h));
  EXPECT_EQ(h.start, 0x7f00u);
  EXPECT_EQ(h.end, 0x7f80u);
  EXPECT_EQ(h.perms, "r-xp");
  EXPECT_EQ(h.path, "/usr/lib/a b.so (deleted)");
  ASSERT_TRUE(ParseSmapsHeader("1000-2000 rw-p 00000000 00:00 0 ", &h));
  EXPECT_EQ(h.path, "");  // anonymous
  for (const char* key : {"Rss:                   4 kB", "Anonymous:             0 kB",
                          "AnonHugePages:         0 kB", "VmFlags: rd ex mr mw me", ""}) {
    EXPECT_FALSE(ParseSmapsHeader(key, &h)) << key;
  }
}

// Relocated pointers (RELRO), string constants (rodata), a virtual call (vtable, text): all read
// the same after the process dropped its file pages.
struct Shape {
  virtual ~Shape() = default;
  virtual int Sides() const { return 0; }
};
struct Square : Shape {
  int Sides() const override { return 4; }
};
const char* const kNames[] = {"zero", "one", "two", "three"};
constexpr unsigned char kTable[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};

TEST(MemoryReleaseTest, ProcessKeepsWorkingAfterRelease) {
  const int before = std::accumulate(std::begin(kTable), std::end(kTable), 0);
  const MemoryRelease r = ReleaseStartupMemory();
  EXPECT_GT(r.mappings, 0);
  EXPECT_GT(r.unmapped_kib, 0);
  EXPECT_EQ(std::accumulate(std::begin(kTable), std::end(kTable), 0), before);
  EXPECT_STREQ(kNames[3], "three");
  Square square;
  const Shape& shape = square;
  EXPECT_EQ(shape.Sides(), 4);
  // A second release finds fewer resident pages, and still nothing breaks.
  (void)ReleaseStartupMemory();
  EXPECT_EQ(std::strlen(kNames[2]), 3u);
}

}  // namespace
}  // namespace topodra::cmd
