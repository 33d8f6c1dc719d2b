// A `.gguf` model given to run / ppl / bench / serve (issue 32 item 2): converted once into a cached
// CMF, which is then opened as usual (cli/load_flags.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace cortiq::cli {

/// Adds `--quant Q` to `cmd`, stored in `quant` (which must outlive the parse): the codec of the CMF a
/// .gguf model is converted to; "" (the default) keeps each tensor's source precision.
void add_gguf_flag(CLI::App* cmd, std::string& quant);

/// The CMF file to open for model `path`: `path` itself, or for a GGUF file (by its magic) a CMF
/// converted from it once and kept in the cache folder `$XDG_CACHE_HOME/cortiq` (else
/// `~/.cache/cortiq`) as `gguf-<first 16 hex digits of the GGUF's sha256>-<quant or "src">.cmf`;
/// later calls with the same bytes and codec reuse it. `quant` is the codec (add_gguf_flag's
/// `--quant`): "" keeps each tensor's source precision (convert's keep_source_precision).
/// Says on stderr what it did, with the convert warnings (a re-quantization of already quantized
/// tensors and its measured error). A cache folder that cannot be created or written: the CMF goes
/// to a temporary file, removed when the process exits, and stderr says so. Throws what convert
/// throws (a GGUF the importer cannot run is refused naming its architecture or the missing key).
std::string resolve_model_path(const std::string& path, const std::string& quant);

}  // namespace cortiq::cli
