// Errors, handle registry and strings of the C API (include/cortiq.h).
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

#include "capi/errors.h"
#include "util/error.h"

namespace cortiq::capi {
namespace {
thread_local std::string t_error;
std::mutex g_reg_mu;
std::unordered_set<const void*>& registry() {
  static auto* r = new std::unordered_set<const void*>();  // never destroyed: safe at exit
  return *r;
}

cortiq_status status_of(ErrorKind k) {
  switch (k) {
    case ErrorKind::InvalidMagic:
    case ErrorKind::UnsupportedVersion:
    case ErrorKind::UnsupportedFeature:
    case ErrorKind::Bounds:
    case ErrorKind::Parse:
      return CORTIQ_ERR_FORMAT;
    case ErrorKind::HashMismatch:
    case ErrorKind::Signature:
      return CORTIQ_ERR_INTEGRITY;
    case ErrorKind::Io:
      return CORTIQ_ERR_IO;
    case ErrorKind::Unsupported:
      return CORTIQ_ERR_UNSUPPORTED;
    case ErrorKind::InvalidArgument:
      return CORTIQ_ERR_ARGUMENT;
    case ErrorKind::NonFinite:
      return CORTIQ_ERR_NUMERIC;
  }
  return CORTIQ_ERR_INTERNAL;
}
}  // namespace

void register_handle(const void* p) {
  std::lock_guard<std::mutex> g(g_reg_mu);
  registry().insert(p);
}

bool unregister_handle(const void* p) {
  std::lock_guard<std::mutex> g(g_reg_mu);
  return p && registry().erase(p) == 1;
}

bool is_live(const void* p) {
  if (!p) return false;
  std::lock_guard<std::mutex> g(g_reg_mu);
  return registry().count(p) == 1;
}

void set_error(std::string msg) {
  t_error = std::move(msg);
}

char* dup_string(std::string_view s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = 0;
  return p;
}

void need(const void* p, const char* what) {
  if (!p) fail(ErrorKind::InvalidArgument, "{} is NULL", what);
}

cortiq_status status_of_current_exception() noexcept {
  try {
    throw;
  } catch (const Error& e) {
    set_error(e.what());
    return status_of(e.kind());
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
    return CORTIQ_ERR_INTERNAL;
  } catch (const std::exception& e) {
    set_error(e.what());
    return CORTIQ_ERR_INTERNAL;
  } catch (...) {
    set_error("unknown exception");
    return CORTIQ_ERR_INTERNAL;
  }
}

}  // namespace cortiq::capi

extern "C" {

const char* cortiq_last_error(void) {
  return cortiq::capi::t_error.c_str();
}

const char* cortiq_version(void) {
  return "0.1.0";
}

void cortiq_string_free(char* s) {
  std::free(s);
}

}  // extern "C"
