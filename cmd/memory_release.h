// Memory the daemon needed only to start, handed back once it has started (issue 19, idle
// memory). Start-up runs code it never runs again (static initializers of gRPC, protobuf and
// OpenSSL, parsing the topology, the first publication) and each page fault on a file maps up to
// 16 pages around the page touched (the kernel's fault-around), so after the start most of the
// executable's text is mapped though an idle daemon runs a small part of it.
#pragma once

#include <string>
#include <vector>

namespace topodra::cmd {

struct MemoryRelease {
  long unmapped_kib = 0;  // resident pages of file mappings dropped from the process
  int mappings = 0;       // how many mappings they were in
  bool trimmed = false;   // malloc_trim gave memory back
};

// A mapping's first line in /proc/<pid>/smaps: "start-end perms offset dev inode [path]" (path
// empty for anonymous memory). False for the key lines that follow it ("Rss:    4 kB", ...).
struct SmapsHeader {
  unsigned long start = 0, end = 0;
  std::string perms, path;
};
bool ParseSmapsHeader(const std::string& line, SmapsHeader* out);

// The file mappings that may be dropped, from the text of /proc/self/smaps: not writable,
// private, backed by a file (a path starting with '/'), and holding no page of their own
// (Anonymous: 0 kB and Swap: 0 kB: no page written after a copy-on-write, such as the relocated
// RELRO data, in memory or swapped out).
// Dropping such a mapping's pages loses nothing: the next access maps them again from the page
// cache (a minor fault). Ranges as [start, end) with the resident KiB of each.
struct DroppableRange {
  unsigned long start = 0, end = 0;
  long rss_kib = 0;
};
std::vector<DroppableRange> DroppableFileRanges(const std::string& smaps);

// Drops the resident pages of every droppable file mapping that lies in a loaded object's
// never-writable segment (dl_iterate_phdr; so never RELRO, and never a mapping that is not an
// object's, which another thread could unmap and replace meanwhile; madvise MADV_DONTNEED: the page
// cache keeps the pages, the process no longer maps them, so the kernel may reclaim them like any
// unmapped file page) and returns the free heap to the kernel (malloc_trim).
MemoryRelease ReleaseStartupMemory();

}  // namespace topodra::cmd
