// `cortiq info <file> [--tensors PREFIX] [--sections] [--json]` — summary of a CMF file or shard
// set (CLI-NOTES §2.1); --sections lists each file's envelope sections (spec §1, FORMAT-NOTES §1.2).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "cmf/reader.h"
#include "cmf/tensor_names.h"
#include "quant/dtype.h"
#include "runtime/bench.h"
#include "specialize/compile.h"

namespace cortiq::cli {
namespace {

struct InfoOpts {
  std::string file;
  std::string prefix;
  bool tensors = false;
  bool sections = false;
  bool json = false;
};

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// `--sections`: per file, the six envelope sections with offset and length in bytes, and the hash
/// the file stores for it (envelope header_hash / dir_hash, header.section_hashes of file 1 for
/// masks, vocab and index; the data section has per-tensor hashes instead). Absent = (0, 0).
void print_sections(const cmf::Reader& r, bool json) {
  nlohmann::json arr = nlohmann::json::array();
  uint64_t total = 0;
  for (size_t f = 0; f < r.num_files(); ++f) {
    const cmf::Envelope& e = r.envelope(f);
    const auto& sh = r.header().section_hashes;
    auto stored = [&](const std::optional<std::string>& v) { return f == 0 && v ? *v : std::string(); };
    const struct {
      const char* name;
      cmf::Section s;
      std::string hash;
    } rows[] = {
        {"header", e.header, e.header_hash ? cmf::hex16(e.header_hash) : ""},
        {"dir", e.dir, e.dir_hash ? cmf::hex16(e.dir_hash) : ""},
        {"data", e.data, ""},
        {"masks", e.masks, stored(sh.masks)},
        {"vocab", e.vocab, stored(sh.vocab)},
        {"index", e.index, stored(sh.index)},
    };
    total += r.file_bytes(f).size();
    for (const auto& x : rows) {
      if (json) {
        nlohmann::json j = {{"file", f + 1}, {"section", x.name}, {"present", x.s.present()}};
        if (x.s.present()) j.update({{"offset", x.s.off}, {"length", x.s.len}});
        j["stored_hash"] = x.hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(x.hash);
        arr.push_back(std::move(j));
      } else if (x.s.present()) {
        std::printf("%zu\t%s\t%llu\t%llu\t%s\n", f + 1, x.name, static_cast<unsigned long long>(x.s.off),
                    static_cast<unsigned long long>(x.s.len), x.hash.empty() ? "-" : x.hash.c_str());
      } else {
        std::printf("%zu\t%s\tabsent\n", f + 1, x.name);
      }
    }
  }
  if (json)
    std::printf("%s\n", arr.dump(2).c_str());
  else
    std::printf("# %zu file(s), %llu bytes (columns: file, section, offset, length, stored hash)\n",
                r.num_files(), static_cast<unsigned long long>(total));
}

/// `info --json`'s "dtypes": {dtype: {"params", "bytes", "share"}}, share = of the parameters (the
/// text line's percentages).
nlohmann::json dtypes_json(const runtime::bench::WeightAccounting& w) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, n] : w.params_by_dtype) {
    const auto b = w.bytes_by_dtype.find(name);
    j[name] = {{"params", n},
               {"bytes", b == w.bytes_by_dtype.end() ? 0 : b->second},
               {"share", w.params ? static_cast<double>(n) / static_cast<double>(w.params) : 0.0}};
  }
  return j;
}

void run_info(const InfoOpts& o) {
  using namespace cmf;
  Reader r = Reader::open(o.file);
  const Header& h = r.header();
  const ModelArch& a = h.arch;
  if (o.sections) {
    print_sections(r, o.json);
    return;
  }
  if (o.tensors) {
    uint64_t n = 0, bytes = 0;
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& t : r.tensors()) {
      if (t.name.compare(0, o.prefix.size(), o.prefix) != 0) continue;
      ++n;
      bytes += t.nbytes;
      if (o.json)
        arr.push_back({{"name", t.name},
                       {"dtype", std::string(quant::dtype_name(t.dtype))},
                       {"shape", t.shape},
                       {"nbytes", t.nbytes},
                       {"hash", hex16(t.hash)},
                       {"shard", t.shard + 1}});
      else
        std::printf("%s\t%s\t%s\t%llu\n", t.name.c_str(), std::string(quant::dtype_name(t.dtype)).c_str(),
                    shape_str(t.shape).c_str(), static_cast<unsigned long long>(t.nbytes));
    }
    if (o.json)
      std::printf("%s\n", arr.dump(2).c_str());
    else
      std::printf("# %llu tensors, %llu bytes (%.2f GiB)\n", static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(bytes),
                  static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
    return;
  }
  uint32_t full = 0, sliding = 0, conv = 0, linear = 0, kda = 0;
  for (auto t : a.layer_types) {
    switch (t) {
      case LayerType::FullAttention:
        ++full;
        break;
      case LayerType::SlidingAttention:
        ++sliding;
        break;
      case LayerType::ShortConv:
        ++conv;
        break;
      case LayerType::LinearAttention:
        ++linear;
        break;
      case LayerType::Kda:
        ++kda;
        break;
    }
  }
  std::string layers = fmt::format("{} ({} full", a.num_layers, full);
  if (sliding) layers += fmt::format(" / {} sliding", sliding);
  if (conv) layers += fmt::format(" / {} conv", conv);
  if (linear) layers += fmt::format(" / {} linear", linear);
  if (kda) layers += fmt::format(" / {} kda", kda);
  layers += ")";
  const TensorInfo* head = r.find(cmf::tensor_name(cmf::TensorRole::Head));
  if (!head) head = r.find(cmf::tensor_name(cmf::TensorRole::Embed));
  // every tensor's elements, as transformers' num_parameters() and `cortiq bench` count them
  uint64_t params = 0;
  for (const auto& t : r.tensors()) params += t.numel();
  // the stored dtypes (the header's quant_type is informational: q4tp, q4t and q2tp files read
  // Q4Block there), as `cortiq bench` accounts them
  const auto stats = runtime::bench::tensor_stats(r);
  const runtime::bench::WeightAccounting w = runtime::bench::account_weights(a, stats);
  const size_t n_masks = r.masks() ? r.masks()->masks.size() : 0;
  const std::string tok = r.vocab().empty() ? "sidecar required" : "embedded";
  // The chat bundle: template present (and its size), BOS and end-of-sequence ids.
  const auto& tb = h.tokenizer_config;
  const bool has_template = tb && tb->chat_template && !tb->chat_template->empty();
  std::string chat =
      has_template ? fmt::format("template ({} chars)", tb->chat_template->size()) : "no template";
  if (tb && tb->bos_token_id) chat += fmt::format(", BOS {}", *tb->bos_token_id);
  if (tb && !tb->eos_token_ids.empty()) chat += fmt::format(", EOS {}", fmt::join(tb->eos_token_ids, " "));
  const std::string mtp =
      a.mtp ? fmt::format("{} block(s){}", a.mtp->num_layers,
                          a.mtp->share_embed && a.mtp->share_lm_head ? ", shared embed+lm_head" : "")
            : std::string("—");
  if (o.json) {
    nlohmann::json j = {
        {"path", o.file},
        {"format", "CMF v2"},
        {"files", r.num_files()},
        {"arch", cmf::arch_to_json(a)},
        {"quant_type", std::string(quant_type_name(h.quant_type))},
        {"tensors", r.tensors().size()},
        {"params", params},
        {"dtypes", dtypes_json(w)},
        {"masks", n_masks},
        {"tokenizer", tok},
        {"chat_template", has_template},
        {"bos_token_id", tb && tb->bos_token_id ? nlohmann::json(*tb->bos_token_id) : nullptr},
        {"eos_token_ids", tb ? nlohmann::json(tb->eos_token_ids) : nlohmann::json::array()},
        {"sparse_index_entries", r.sparse_index().size()},
        {"skills", r.skills().size()},
        {"skill_file", r.is_skill_file()},
        {"required_features", r.envelope().features},
        {"provenance", h.provenance}};
    if (head)
      j["head"] = {{"name", head->name},
                   {"dtype", std::string(quant::dtype_name(head->dtype))},
                   {"shape", head->shape}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("Model: %s\n", o.file.c_str());
  std::printf("  Format:      CMF v2%s\n",
              r.num_files() > 1 ? fmt::format(" ({} shards)", r.num_files()).c_str() : "");
  std::printf("  Arch:        %s\n", a.arch_name.c_str());
  std::printf("  Layers:      %s\n", layers.c_str());
  std::printf("  Hidden:      %u\n", a.hidden_size);
  std::printf("  FFN:         %u\n", a.intermediate_size);
  std::printf("  Heads:       %u (KV: %u)\n", a.num_attention_heads, a.num_kv_heads);
  std::printf("  Vocab:       %u\n", a.vocab_size);
  std::printf("  Quant:       %s (default; per-tensor in directory)\n",
              std::string(quant_type_debug_name(h.quant_type)).c_str());
  std::printf("  Dtypes:      %s\n", runtime::bench::dtype_mix(w.params_by_dtype).c_str());
  if (head)
    std::printf("  Head:        %s %s\n", std::string(quant::dtype_name(head->dtype)).c_str(),
                shape_str(head->shape).c_str());
  std::printf("  Tensors:     %zu\n", r.tensors().size());
  // Billions as the reference prints them; small models in millions/thousands so they don't read 0.00B.
  const double p = static_cast<double>(params);
  if (p >= 1e9)
    std::printf("  Params:      %.2fB\n", p / 1e9);
  else if (p >= 1e6)
    std::printf("  Params:      %.2fM\n", p / 1e6);
  else
    std::printf("  Params:      %.2fK\n", p / 1e3);
  std::printf("  Masks:       %zu\n", n_masks);
  std::printf("  Tokenizer:   %s\n", tok.c_str());
  std::printf("  Chat:        %s\n", chat.c_str());
  std::printf("  MTP:         %s\n", mtp.c_str());
  std::printf("  Sparse idx:  %zu entries\n", r.sparse_index().size());
  if (!r.skills().empty())
    std::printf("  Skills:      %zu%s\n", r.skills().size(), r.is_skill_file() ? " (skill file)" : "");
  if (h.provenance.is_object() && h.provenance.contains("specialize")) {
    const auto lines = specialize::contract_lines(h.provenance["specialize"]);
    for (size_t i = 0; i < lines.size(); ++i)
      std::printf("  %s %s\n", i == 0 ? "Specialist: " : "            ", lines[i].c_str());
  }
}

void setup_info(CLI::App& root) {
  auto o = std::make_shared<InfoOpts>();
  auto* c = root.add_subcommand("info", "Show a CMF file's architecture, sections and tensors");
  add_examples(c, {"cortiq info models/testbed/testbed-skills.cmf",
                   "cortiq info build/stories260K.cmf --tensors model.layers.0."});
  c->add_option("file", o->file, "model .cmf (any shard name opens the set)")->required();
  c->add_option("--tensors", o->prefix, "list tensors whose name starts with PREFIX ('' = all)")
      ->expected(0, 1)
      ->each([o](const std::string&) { o->tensors = true; });
  c->add_flag(
      "--sections", o->sections,
      "list each file's sections (header, dir, data, masks, vocab, index): offset, length, stored hash");
  c->add_flag("--json", o->json, "machine-readable JSON output");
  c->callback([c, o] {
    if (c->count("--tensors")) o->tensors = true;
    if (o->tensors && o->sections)
      throw CLI::ValidationError("--sections", "give --tensors or --sections, not both");
    run_info(*o);
  });
}

}  // namespace
CORTIQ_COMMAND(20, setup_info);
}  // namespace cortiq::cli
