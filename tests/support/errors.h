// Test support (header-only; for unit and end-to-end tests): the typed error a call throws, for
// tests that assert its kind and message.
#pragma once

#include <optional>
#include <utility>

#include "util/error.h"

namespace cortiq::test {

/// The cortiq::Error that `f()` throws, or nullopt when it returns. Any other exception passes.
template <class F>
std::optional<Error> error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace cortiq::test
