// Intel AMX (Advanced Matrix Extensions) availability for this process (issue 34 item 1): whether
// the CPU has the tile unit and which tile products, whether the OS saves the tile state, and
// whether Linux granted this process the tile data state. Linux keeps AMX off per process until it
// asks for XTILEDATA with arch_prctl(ARCH_REQ_XCOMP_PERM) (kernel ≥ 5.16,
// Documentation/arch/x86/xstate.rst); a tile instruction without that grant faults (SIGILL). The
// AMX kernels take a tier only when amx_support().state == AmxState::Ready and fall back to the
// AVX-512 tier otherwise. Feature bits: Intel SDM vol. 2, CPUID leaf 07H (sub-leaf 0: EDX bit 22
// AMX-BF16, 24 AMX-TILE, 25 AMX-INT8; sub-leaf 1: EAX bit 21 AMX-FP16); XCR0 bits 17 (XTILECFG) and
// 18 (XTILEDATA).
#pragma once

namespace cortiq::kernels {

/// Where AMX stands for this process.
enum class AmxState {
  Absent,   ///< the CPU has no AMX tile unit (or the OS does not enable its state in XCR0)
  Refused,  ///< the CPU has AMX, but the kernel refused this process the tile data state
  Ready,    ///< tiles usable: the permission was granted (or is not needed on this OS)
};

/// What the CPU reports and what the OS granted.
struct AmxSupport {
  bool tile = false;      ///< AMX-TILE: tile registers and tile loads/stores
  bool int8 = false;      ///< AMX-INT8: TDPBSSD / TDPBUSD / TDPBSUD / TDPBUUD
  bool bf16 = false;      ///< AMX-BF16: TDPBF16PS
  bool fp16 = false;      ///< AMX-FP16: TDPFP16PS
  bool os_state = false;  ///< XCR0 enables XTILECFG and XTILEDATA
  AmxState state = AmxState::Absent;
  int error = 0;  ///< errno of the refused arch_prctl request, else 0
};

/// This process's AMX support. The first call asks Linux for the tile data state (once per
/// process; the grant covers every thread created afterwards and is inherited); later calls return
/// the cached answer. Never throws: on a CPU without AMX, on another OS or architecture the state
/// is Absent, and a refused request gives Refused with its errno.
const AmxSupport& amx_support() noexcept;

/// "absent", "refused" or "ready".
const char* amx_state_name(AmxState s) noexcept;

}  // namespace cortiq::kernels
