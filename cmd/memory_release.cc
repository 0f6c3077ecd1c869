#include "cmd/memory_release.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace topodra::cmd {

std::vector<DroppableRange> DroppableFileRanges(const std::string& smaps) {
  std::vector<DroppableRange> out;
  std::istringstream in(smaps);
  std::string line;
  DroppableRange cur;
  bool candidate = false;  // the mapping being read may be dropped, so far
  long anonymous = -1;     // its Anonymous: line, -1 until read
  auto finish = [&] {
    if (candidate && anonymous == 0 && cur.rss_kib > 0) out.push_back(cur);
    candidate = false;
    anonymous = -1;
  };
  while (std::getline(in, line)) {
    unsigned long a = 0, b = 0;
    char perms[8] = {};
    int consumed = 0;
    // A mapping's first line: "start-end perms offset dev inode [path]"; the keys that follow
    // ("Rss:", ...) have no '-' before their first space.
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %*s %*s %*s%n", &a, &b, perms, &consumed) == 3 &&
        line.find(':') > line.find(' ')) {
      finish();
      std::string path = line.substr(consumed);
      path.erase(0, path.find_first_not_of(' '));
      const std::string p(perms);
      candidate = p.size() == 4 && p[1] == '-' && p[3] == 'p' && !path.empty() && path[0] == '/';
      cur = DroppableRange{a, b, 0};
      continue;
    }
    std::istringstream s(line);
    std::string key;
    long value = 0;
    if (!(s >> key >> value)) continue;
    if (key == "Rss:") cur.rss_kib = value;
    if (key == "Anonymous:") anonymous = value;
  }
  finish();
  return out;
}

MemoryRelease ReleaseStartupMemory() {
  MemoryRelease out;
  std::ifstream in("/proc/self/smaps");
  std::stringstream text;
  text << in.rdbuf();
  for (const DroppableRange& r : DroppableFileRanges(text.str())) {
    // Read-only private file pages with no private copy: the kernel maps them again from the
    // page cache on the next access.
    if (madvise(reinterpret_cast<void*>(r.start), r.end - r.start, MADV_DONTNEED) == 0) {
      out.unmapped_kib += r.rss_kib;
      ++out.mappings;
    }
  }
  out.trimmed = malloc_trim(0) != 0;
  return out;
}

}  // namespace topodra::cmd
