#include "cmd/memory_release.h"

#include <link.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace topodra::cmd {

bool ParseSmapsHeader(const std::string& line, SmapsHeader* out) {
  unsigned long a = 0, b = 0;
  char perms[8] = {};
  int consumed = 0;
  // The key lines that follow a header ("Rss:", ...) have their ':' before the first space; a
  // header's first ':' is in its device, after the addresses and perms.
  if (std::sscanf(line.c_str(), "%lx-%lx %7s %*s %*s %*s%n", &a, &b, perms, &consumed) != 3 ||
      !(line.find(':') > line.find(' '))) {
    return false;
  }
  out->start = a;
  out->end = b;
  out->perms = perms;
  out->path = line.substr(static_cast<size_t>(consumed));
  out->path.erase(0, out->path.find_first_not_of(' '));
  return true;
}

std::vector<DroppableRange> DroppableFileRanges(const std::string& smaps) {
  std::vector<DroppableRange> out;
  std::istringstream in(smaps);
  std::string line;
  DroppableRange cur;
  bool candidate = false;  // the mapping being read may be dropped, so far
  long anonymous = -1;     // its Anonymous: line, -1 until read
  long swap = -1;          // its Swap: line (a private copy swapped out is not Anonymous)
  auto finish = [&] {
    if (candidate && anonymous == 0 && swap == 0 && cur.rss_kib > 0) out.push_back(cur);
    candidate = false;
    anonymous = -1;
    swap = -1;
  };
  SmapsHeader h;
  while (std::getline(in, line)) {
    if (ParseSmapsHeader(line, &h)) {
      finish();
      const std::string& p = h.perms;
      candidate =
          p.size() == 4 && p[1] == '-' && p[3] == 'p' && !h.path.empty() && h.path[0] == '/';
      cur = DroppableRange{h.start, h.end, 0};
      continue;
    }
    std::istringstream s(line);
    std::string key;
    long value = 0;
    if (!(s >> key >> value)) continue;
    if (key == "Rss:") cur.rss_kib = value;
    if (key == "Anonymous:") anonymous = value;
    if (key == "Swap:") swap = value;
  }
  finish();
  return out;
}

namespace {

struct Span {
  uintptr_t start = 0, end = 0;
};

// The whole pages of the loaded objects' segments that are never writable (text, read-only
// data). RELRO lies in a writable segment, so it is never among them, whatever smaps says of its
// pages at the moment (swapped out, a relocated page counts as Swap, not Anonymous). Objects
// loaded at start stay mapped: the daemon never calls dlclose.
std::vector<Span> ReadOnlyLoadSegments() {
  std::vector<Span> spans;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* out = static_cast<std::vector<Span>*>(data);
        const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) != 0) continue;
          const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
          const uintptr_t start = (begin + page - 1) / page * page;
          const uintptr_t end = (begin + ph.p_memsz) / page * page;
          if (start < end) out->push_back(Span{start, end});
        }
        return 0;
      },
      &spans);
  return spans;
}

}  // namespace

MemoryRelease ReleaseStartupMemory() {
  MemoryRelease out;
  std::ifstream in("/proc/self/smaps");
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<Span> segments = ReadOnlyLoadSegments();
  for (const DroppableRange& r : DroppableFileRanges(text.str())) {
    // Read-only private file pages with no private copy, inside a segment the loader never made
    // writable: the kernel maps them again from the page cache on the next access.
    bool dropped = false;
    for (const Span& s : segments) {
      const uintptr_t start = std::max<uintptr_t>(s.start, r.start);
      const uintptr_t end = std::min<uintptr_t>(s.end, r.end);
      if (start >= end) continue;
      dropped |= madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED) == 0;
    }
    if (dropped) {
      out.unmapped_kib += r.rss_kib;
      ++out.mappings;
    }
  }
  out.trimmed = malloc_trim(0) != 0;
  return out;
}

}  // namespace topodra::cmd
