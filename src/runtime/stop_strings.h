// The one hold-back rule for text that may still become a stop string (or a tool-call / reasoning
// tag): what the engine, run and serve keep back before sending.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace cortiq::runtime {

/// Length of the longest proper prefix of `tag` that ends `s` (0 when none, and for an empty tag):
/// the bytes of `s` that must wait, since the next text may complete `tag`. Partial matches only —
/// a whole `tag` inside `s` is the caller's find().
inline size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  if (tag.empty()) return 0;
  for (size_t k = std::min(tag.size() - 1, s.size()); k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

}  // namespace cortiq::runtime
