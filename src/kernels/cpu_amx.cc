// AMX detection and the Linux tile-data permission request (cpu_amx.h).
#include "kernels/cpu_amx.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#endif

namespace cortiq::kernels {

namespace {

#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl code (arch/x86/include/uapi/asm/prctl.h)
constexpr long kXfeatureXtiledata = 18;     // XSAVE feature number of the tile data state

AmxSupport detect() noexcept {
  AmxSupport s;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return s;
  s.bf16 = (edx >> 22) & 1u;
  s.tile = (edx >> 24) & 1u;
  s.int8 = (edx >> 25) & 1u;
  const unsigned max_sub = eax;
  if (max_sub >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) s.fp16 = (eax >> 21) & 1u;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  const bool osxsave = __get_cpuid(1, &a1, &b1, &c1, &d1) != 0 && (c1 & bit_OSXSAVE) != 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    s.os_state = ((lo >> 17) & 3u) == 3u;
  }
  if (!s.tile || !s.os_state) return s;  // Absent: no tile unit, or an OS that does not save its state
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) {
    s.state = AmxState::Ready;
  } else {
    s.state = AmxState::Refused;
    s.error = errno;
  }
  return s;
}
#else
AmxSupport detect() noexcept {
  return {};
}
#endif

}  // namespace

const AmxSupport& amx_support() noexcept {
  static const AmxSupport s = detect();
  return s;
}

const char* amx_state_name(AmxState s) noexcept {
  return s == AmxState::Ready ? "ready" : s == AmxState::Refused ? "refused" : "absent";
}

}  // namespace cortiq::kernels
