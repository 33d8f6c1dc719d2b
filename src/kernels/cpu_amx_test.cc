// AMX detection against the kernel's own view (/proc/cpuinfo flags), and, where the tiles are
// granted, one real tile instruction sequence.
#include "kernels/cpu_amx.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace cortiq::kernels {
namespace {

/// The "flags" words of the first processor in /proc/cpuinfo; empty when unreadable.
std::set<std::string> cpuinfo_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> out;
      for (std::string w; words >> w;) out.insert(w);
      return out;
    }
  return {};
}

TEST(CpuAmx, AgreesWithTheKernelsCpuFlags) {
  const auto flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags on this system";
  const AmxSupport& s = amx_support();
  // Linux lists amx_tile only when the CPU has it and the kernel manages its state.
  EXPECT_EQ(flags.count("amx_tile") == 1, s.state != AmxState::Absent) << amx_state_name(s.state);
  if (flags.count("amx_int8")) {
    EXPECT_TRUE(s.int8);
  }
  if (flags.count("amx_bf16")) {
    EXPECT_TRUE(s.bf16);
  }
  if (s.state == AmxState::Absent) {
    EXPECT_EQ(s.error, 0);
  }
  EXPECT_EQ(&amx_support(), &s) << "the answer is cached";
}

TEST(CpuAmx, StateNames) {
  EXPECT_STREQ(amx_state_name(AmxState::Absent), "absent");
  EXPECT_STREQ(amx_state_name(AmxState::Refused), "refused");
  EXPECT_STREQ(amx_state_name(AmxState::Ready), "ready");
}

#if defined(__x86_64__) && defined(__GNUC__)
/// Loads a tile configuration with tile 0 = 16 rows × 64 bytes, zeroes it, and stores it over
/// `out` (1 KiB); then releases the tiles. Written in assembly, so no compiler flag is needed.
void zero_tile_into(uint8_t* out) {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;    // palette 1
  cfg[16] = 64;  // tile 0: 64 bytes per row (colsb, little endian)
  cfg[48] = 16;  // tile 0: 16 rows
  __asm__ volatile("ldtilecfg (%0)" ::"r"(cfg) : "memory");
  __asm__ volatile("tilezero %%tmm0" ::: "memory");
  __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(out), "r"(static_cast<uint64_t>(64)) : "memory");
  __asm__ volatile("tilerelease" ::: "memory");
}

TEST(CpuAmx, GrantedTilesRunATileInstruction) {
  const AmxSupport& s = amx_support();
  if (s.state != AmxState::Ready)
    GTEST_SKIP() << "AMX " << amx_state_name(s.state) << " on this CPU (error " << s.error << ")";
  alignas(64) uint8_t buf[1024];
  std::memset(buf, 0xA5, sizeof buf);
  zero_tile_into(buf);
  for (size_t i = 0; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0) << "byte " << i;
}
#endif

}  // namespace
}  // namespace cortiq::kernels
