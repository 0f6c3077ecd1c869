// The floor of memory_bench: a trivial C++ program linked as the daemon is (same compiler, same
// link options, the C++ runtime), which touches std::string and stdio and then waits. Its PSS,
// USS and RSS are what any C++ process on this machine costs before doing anything.
#include <unistd.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  const std::string name = argc > 0 ? argv[0] : "memory_floor";
  std::printf("ready %s\n", name.c_str());
  std::fflush(stdout);
  ::pause();
  return 0;
}
