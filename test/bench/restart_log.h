// The daemon's log lines a restart's phases end with, shared by restart_bench and restart_pairs
// so both time the same thing: if the daemon's wording changes, one list changes.
#pragma once

#include <array>
#include <sstream>
#include <string>

#include "test/bench/latency.h"

namespace topodra::bench {

// Ends of: exec -> first log line, state load, inventory (and the file check started), gRPC
// start (sockets served), and the background file check's end.
inline constexpr int kRestartMarks = 5;
inline constexpr char kFilesChecked[] = ": CDI files checked";

// Epoch milliseconds of the first line with each mark, -1 where none is.
inline std::array<double, kRestartMarks> RestartMarkTimes(const std::string& log) {
  static const char* const kEnds[kRestartMarks] = {" starting on node ", " allocations loaded ",
                                                   ": checking CDI files", ": serving DRA ",
                                                   kFilesChecked};
  std::array<double, kRestartMarks> at;
  at.fill(-1);
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    for (int i = 0; i < kRestartMarks; ++i) {
      if (at[i] < 0 && line.find(kEnds[i]) != std::string::npos) at[i] = LogLineTimeMs(line);
    }
  }
  return at;
}

}  // namespace topodra::bench
