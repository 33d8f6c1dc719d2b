// Shared helper of the end-to-end tests: run a shell command and capture its stdout.
#pragma once

#include <cstdio>
#include <string>

namespace cortiq::test {

/// Runs `cmd` with /bin/sh (popen) and returns everything it wrote to stdout; `rc`, when given,
/// receives pclose's status (0 on success). An empty string when the shell cannot be started.
inline std::string sh(const std::string& cmd, int* rc = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int r = pclose(p);
  if (rc) *rc = r;
  return out;
}

}  // namespace cortiq::test
