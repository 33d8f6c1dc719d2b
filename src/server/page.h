// The chat page `cortiq serve` answers at GET / (issue 33 §1): web/index.html, one self-contained
// file (inline CSS and JS, nothing fetched from elsewhere), compiled into the binary by CMake
// (cmake/embed_web.cmake writes it into a generated C++ source at build time).
#pragma once

#include <string_view>

namespace cortiq::server {

/// The page's HTML (UTF-8), static for the life of the process.
std::string_view chat_page_html() noexcept;

}  // namespace cortiq::server
