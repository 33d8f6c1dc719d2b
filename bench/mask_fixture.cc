// Writes a copy of a .cmf whose masks section holds random FFN task masks, one per NAME:KEEP
// argument (cmf::make_random_ffn_mask: KEEP of every layer's neurons, seed 1 + the argument's
// index): the fixtures of `cortiq bench --task NAME` (bench/README.md, "Task masks").
// Usage: mask_fixture IN.cmf OUT.cmf NAME:KEEP [NAME:KEEP ...]    e.g. half:0.5 quarter:0.25
#include <cstdio>
#include <exception>
#include <string>

#include "cmf/masks.h"
#include "cmf/reader.h"
#include "convert/convert.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s IN.cmf OUT.cmf NAME:KEEP [NAME:KEEP ...]\n", argv[0]);
    return 2;
  }
  try {
    const auto r = cortiq::cmf::Reader::open(argv[1]);
    cortiq::cmf::MaskCatalog cat;
    for (int i = 3; i < argc; ++i) {
      const std::string a = argv[i];
      const size_t colon = a.find(':');
      if (colon == std::string::npos || colon == 0) {
        std::fprintf(stderr, "mask_fixture: '%s' is not NAME:KEEP\n", argv[i]);
        return 2;
      }
      cat.masks.push_back(
          cortiq::cmf::make_random_ffn_mask(r.header().arch, a.substr(0, colon), static_cast<uint32_t>(i - 3),
                                            std::stod(a.substr(colon + 1)), static_cast<uint64_t>(i - 2)));
    }
    cortiq::convert::write_with_masks(argv[1], argv[2], cat, false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mask_fixture: %s\n", e.what());
    return 1;
  }
  return 0;
}
