// The checks every C API entry point runs (include/cortiq.h): the live-handle registry, the
// thread-local last error, and turning exceptions into status codes.
#pragma once

#include <string>
#include <string_view>

#include "cortiq.h"

namespace cortiq::capi {

/// Registers a live handle / forgets a closed one / asks whether `p` is live (thread-safe). Lets
/// every entry point refuse a NULL or closed handle with CORTIQ_ERR_HANDLE instead of crashing.
void register_handle(const void* p);
bool unregister_handle(const void* p);
bool is_live(const void* p);

/// Sets this thread's last error message.
void set_error(std::string msg);

/// Runs `f` (returning cortiq_status), turning every exception into a status and a message.
template <class F>
cortiq_status guarded(F&& f) noexcept;

/// Maps the exception in flight to a status (sets the message). Call only inside a catch block.
cortiq_status status_of_current_exception() noexcept;

template <class F>
cortiq_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (...) {
    return status_of_current_exception();
  }
}

/// A malloc'ed NUL-terminated copy of `s` (freed by cortiq_string_free).
char* dup_string(std::string_view s);

/// Throws Error(InvalidArgument) "<what> is NULL" when p is null.
void need(const void* p, const char* what);

}  // namespace cortiq::capi

/// Returns CORTIQ_ERR_HANDLE (with the message set) from the calling entry point when `h` is NULL or
/// closed.
#define CORTIQ_CHECK_HANDLE(h, name)                               \
  do {                                                             \
    if (!::cortiq::capi::is_live(h)) {                             \
      ::cortiq::capi::set_error(name " handle is NULL or closed"); \
      return CORTIQ_ERR_HANDLE;                                    \
    }                                                              \
  } while (0)
