// Discovery cost: in-process Discover() and the whole `topodra topology -o json` process (wall
// time and peak RSS), for the 384-PU fixture and a 1024-PU synthetic machine. The floor is
// `topodra version`: the same binary starting and exiting without discovering anything.
//
// usage: topology_bench [TOPOLOGIES_DIR] [ITERATIONS]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "topology/discoverer.h"

namespace {

using Clock = std::chrono::steady_clock;
using topodra::topology::TopologySource;

struct Stats {
  double min_ms = 0, p50_ms = 0, p90_ms = 0;
};

Stats Summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
  };
  return {ms.front(), at(0.5), at(0.9)};
}

struct ProcessRun {
  double wall_ms = 0;
  long max_rss_kib = 0;
  int status = 0;
};

ProcessRun RunProcess(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);  // or the child inherits and re-prints our buffered lines
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    // Output is discarded: we measure producing it, not a terminal drawing it.
    if (!freopen("/dev/null", "w", stdout)) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ProcessRun r;
  rusage ru{};
  wait4(pid, &r.status, 0, &ru);
  r.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  r.max_rss_kib = ru.ru_maxrss;
  return r;
}

void BenchInProcess(const char* label, const TopologySource& src, int iterations) {
  std::vector<double> ms;
  size_t cpus = 0;
  for (int i = 0; i < iterations; ++i) {
    const auto start = Clock::now();
    absl::StatusOr<topodra::topology::Topology> t = topodra::topology::Discover(src);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    if (!t.ok()) {
      std::printf("%-34s FAILED: %s\n", label, std::string(t.status().message()).c_str());
      return;
    }
    cpus = t->cpus.size();
  }
  const Stats s = Summarize(ms);
  std::printf("%-34s %5zu CPUs  Discover(): min %6.2f ms  p50 %6.2f ms  p90 %6.2f ms\n", label,
              cpus, s.min_ms, s.p50_ms, s.p90_ms);
}

void BenchProcess(const char* label, const std::vector<std::string>& args, int iterations) {
  std::vector<double> ms;
  long rss = 0;
  for (int i = 0; i < iterations; ++i) {
    const ProcessRun r = RunProcess(args);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
      std::printf("%-34s FAILED (status %d)\n", label, r.status);
      return;
    }
    ms.push_back(r.wall_ms);
    rss = std::max(rss, r.max_rss_kib);
  }
  const Stats s = Summarize(ms);
  std::printf("%-34s process wall: min %6.2f ms  p50 %6.2f ms  p90 %6.2f ms  peak RSS %6.1f MB\n",
              label, s.min_ms, s.p50_ms, s.p90_ms, static_cast<double>(rss) / 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures/topologies";
  const int iterations = argc > 2 ? std::max(1, std::atoi(argv[2])) : 30;
  const std::string xml384 = dir + "/192em64t-24n8c2t.xml";
  const std::string synth1024 = "pack:4 numa:2 l3:4 core:16 pu:2";
  const std::string bin = TOPODRA_BINARY;

  std::printf("topology discovery, %d iterations each\n", iterations);
  BenchInProcess("192em64t-24n8c2t.xml (xml)", TopologySource::XmlFile(xml384), iterations);
  BenchInProcess("synthetic 1024 PUs", TopologySource::Synthetic(synth1024), iterations);
  BenchInProcess("live machine", TopologySource::Live(), iterations);
  std::printf("\n");
  BenchProcess("floor: topodra version", {bin, "version"}, iterations);
  BenchProcess("topodra topology 384-PU xml",
               {bin, "topology", "--topology-file", xml384, "-o", "json"}, iterations);
  BenchProcess("topodra topology 1024-PU synthetic",
               {bin, "topology", "--topology-synthetic", synth1024, "-o", "json"}, iterations);
  BenchProcess("topodra topology live", {bin, "topology", "-o", "json"}, iterations);
  std::printf("\ntargets (384-PU xml, whole process): wall < 50 ms, peak RSS < 15 MB\n");
  return 0;
}
