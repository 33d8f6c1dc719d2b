#include "convert/gguf_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "cmf/reader.h"
#include "cmf/tensor_names.h"
#include "convert/gguf_codec.h"
#include "convert/gguf_tokenizer.h"
#include "convert/gguf_writer.h"
#include "quant/codec.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::convert {

namespace {

using json = nlohmann::json;
using quant::DType;

/// HF module suffix (after `model.layers.N.`) → GGUF (after `blk.N.`): gguf-py constants.py.
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"input_layernorm", "attn_norm"},    {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},      {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},       {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"},
};

/// gemma2's sandwich norms (gguf-py constants.py: ATTN_POST_NORM, FFN_PRE_NORM, FFN_POST_NORM): there
/// post_attention_layernorm follows the attention, and pre_feedforward_layernorm is the FFN's input norm.
constexpr std::pair<std::string_view, std::string_view> kGemma2Norms[] = {
    {"post_attention_layernorm", "post_attention_norm"},
    {"pre_feedforward_layernorm", "ffn_norm"},
    {"post_feedforward_layernorm", "post_ffw_norm"},
};

/// The GGUF name of a CMF tensor of GGUF architecture `arch`, "" for one GGUF has no place for.
std::string gguf_name(const std::string& n, const std::string& arch) {
  if (n == "model.embed_tokens.weight") return "token_embd.weight";
  if (n == "model.norm.weight") return "output_norm.weight";
  if (n == "lm_head.weight") return "output.weight";
  constexpr std::string_view pre = "model.layers.";
  if (!n.starts_with(pre)) return "";
  const size_t dot = n.find('.', pre.size());
  if (dot == std::string::npos) return "";
  const std::string layer = n.substr(pre.size(), dot - pre.size());
  const std::string tail = n.substr(dot + 1);
  if (arch == "gemma2")
    for (auto [hf, g] : kGemma2Norms)
      if (tail == std::string(hf) + ".weight") return "blk." + layer + "." + std::string(g) + ".weight";
  for (auto [hf, g] : kLayerNames)
    for (std::string_view suffix : {".weight", ".bias"})
      if (tail.size() == hf.size() + suffix.size() && tail.starts_with(hf) && tail.ends_with(suffix))
        return "blk." + layer + "." + std::string(g) + std::string(suffix);
  return "";
}

std::optional<GgmlType> parse_type(const std::string& t) {
  if (t == "f32") return GgmlType::F32;
  if (t == "f16") return GgmlType::F16;
  if (t == "bf16") return GgmlType::BF16;
  if (t == "q8_0") return GgmlType::Q8_0;
  if (t == "q4_0") return GgmlType::Q4_0;
  return std::nullopt;
}

/// One GGUF tensor: the CMF tensors whose rows it concatenates (phi3's fusions), and the rows to
/// permute (llama Q/K).
struct Out {
  std::string name;
  std::vector<const cmf::TensorInfo*> parts;
  std::vector<uint64_t> shape;
  GgmlType type = GgmlType::F32;
  uint32_t permute_heads = 0;
  bool plus_one = false;      ///< a gemma norm: written as 1 + w (GemmaModel.modify_tensors)
  std::vector<float> values;  ///< a tensor made here (rope_freqs), no parts
};

uint64_t ggml_bytes(GgmlType t, uint64_t numel) {
  uint64_t be = 1, bb = 4;
  ggml_block_geometry(static_cast<uint32_t>(t), be, bb);
  return numel / be * bb;
}

}  // namespace

ExportResult export_gguf(const ExportOptions& opt) {
  ExportResult res;
  std::optional<GgmlType> forced;
  if (!opt.type.empty()) {
    forced = parse_type(opt.type);
    if (!forced)
      fail(ErrorKind::InvalidArgument, "--type '{}': export-gguf writes f32, f16, bf16, q8_0 or q4_0",
           opt.type);
  }
  if (!opt.task.empty())
    fail(
        ErrorKind::InvalidArgument,
        "--task '{}': a task mask is not a model llama.cpp can run; make it one first with `cortiq defrag {} "
        "--mask {} -o task.cmf`, then export task.cmf",
        opt.task, opt.input, opt.task);
  cmf::Reader r = cmf::Reader::open(opt.input);
  const cmf::Header& h = r.header();
  const cmf::ModelArch& a = h.arch;
  if (r.is_skill_file())
    fail(ErrorKind::Unsupported,
         "'{}' is a skill file (the tensors a skill changes, not a model); export its base file with --skill "
         "ID",
         opt.input);
  std::string arch = a.arch_name;
  if (arch == "mistral") arch = "llama";  // llama.cpp writes Mistral as llama
  if (arch == "gemma3" || arch == "gemma3_text")
    fail(ErrorKind::Unsupported,
         "architecture '{}': llama.cpp b4748 (the version this export is checked against) has no gemma3; "
         "export-gguf writes llama, mistral, qwen2, qwen3, phi3, gemma and gemma2",
         a.arch_name);
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "phi3" && arch != "gemma" &&
      arch != "gemma2")
    fail(ErrorKind::Unsupported,
         "architecture '{}': export-gguf writes llama, mistral, qwen2, qwen3, phi3, gemma and gemma2 (the "
         "llama.cpp names this exporter writes and `cortiq convert model.gguf` reads back)",
         a.arch_name);
  const bool gemma = arch == "gemma" || arch == "gemma2";
  const auto refuse = [&](bool has, const char* what) {
    if (has)
      fail(ErrorKind::Unsupported, "'{}': {} cannot be written to a GGUF '{}' model", opt.input, what, arch);
  };
  refuse(a.moe.has_value(), "a mixture of experts");
  refuse(a.mla.has_value(), "multi-head latent attention");
  refuse(a.linear_core.has_value(), "linear attention layers");
  refuse(a.attention_heads_per_layer.has_value(), "per-layer attention head counts");
  refuse(a.num_loops != 1, "looped layers");
  refuse(a.logit_multiplier.has_value(), "a logit multiplier");
  refuse(a.attn_v_norm, "a V norm");
  // llama.cpp's gemma/gemma2 graphs: x·sqrt(hidden) embeddings, GELU (tanh), tied output, (1 + w) norms
  const double sqrt_hidden = std::sqrt(static_cast<double>(a.hidden_size));
  if (gemma) {
    refuse(std::fabs(a.embed_multiplier - sqrt_hidden) > 1e-6 * sqrt_hidden,
           "an embedding multiplier other than sqrt(hidden_size)");
    refuse(a.hidden_act != cmf::HiddenAct::GeluTanh, "an activation other than GELU (tanh)");
    refuse(!a.tie_word_embeddings,
           "an lm_head of its own (llama.cpp's gemma uses token_embd as the output, its converter drops "
           "lm_head.weight)");
  } else {
    refuse(a.embed_multiplier != 1.0, "an embedding multiplier");
    refuse(a.hidden_act != cmf::HiddenAct::Silu, "an activation other than SiLU");
    refuse(a.norm_style == cmf::NormStyle::Gemma, "(1 + w) norms");
  }
  if (arch == "gemma2") {
    // Gemma2Model.set_gguf_parameters writes both caps; llama.cpp applies both unconditionally
    refuse(!a.attn_logit_softcapping || !a.final_logit_softcapping,
           "no attention or final logit softcapping (llama.cpp's gemma2 always applies both)");
    // llama.cpp's gemma2: layer il uses the sliding window when il % 2 == 0
    for (uint32_t l = 0; l < a.num_layers; ++l)
      refuse((a.layer_types[l] == cmf::LayerType::SlidingAttention) != (l % 2 == 0),
             "a sliding-window schedule other than gemma2's (even layers sliding)");
    refuse(!a.sliding_window, "sliding layers without a window");
    // llama.cpp's gemma2 scales Q by 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for its 46-layer 27B
    const double scalar = a.num_layers == 46 ? double(a.hidden_size) / a.num_attention_heads : a.head_dim;
    refuse(a.query_pre_attn_scalar.value_or(a.head_dim) != scalar,
           "a query_pre_attn_scalar other than llama.cpp's (head_dim; hidden/heads for 46 layers)");
    if (a.num_layers != 26 && a.num_layers != 42 && a.num_layers != 46)
      res.notes.push_back(
          fmt::format("llama.cpp b4748 loads gemma2 only with 26, 42 or 46 layers (its model "
                      "types 2B/9B/27B); this one has {}",
                      a.num_layers));
  } else {
    refuse(a.final_logit_softcapping.has_value() || a.attn_logit_softcapping.has_value(),
           "logit softcapping");
    refuse(a.query_pre_attn_scalar.has_value() && *a.query_pre_attn_scalar != a.head_dim,
           "a query_pre_attn_scalar other than head_dim");
    if (arch != "phi3" && a.sliding_window &&
        std::any_of(a.layer_types.begin(), a.layer_types.end(),
                    [](auto t) { return t == cmf::LayerType::SlidingAttention; }))
      refuse(true, "sliding-window attention");
  }

  // the skill applied: its tensors replace the backbone's
  std::string skill = opt.skill == "none" ? "" : opt.skill;
  if (!skill.empty()) {
    const cmf::SkillRecord* rec = nullptr;
    std::string known;
    for (const auto& s : r.skills()) {
      known += (known.empty() ? "" : ", ") + s.id;
      if (s.id == skill) rec = &s;
    }
    if (!rec)
      fail(ErrorKind::InvalidArgument, "--skill '{}': no such skill in '{}' (skills: {})", skill, opt.input,
           known.empty() ? "none" : known);
    if (rec->input_mask_task)
      fail(ErrorKind::InvalidArgument,
           "--skill '{}' runs under task mask '{}', which GGUF cannot carry; run `cortiq defrag {} --mask {} "
           "-o task.cmf` "
           "first and export that file",
           skill, *rec->input_mask_task, opt.input, *rec->input_mask_task);
  }
  if (r.masks() && !r.masks()->masks.empty())
    res.notes.push_back(
        fmt::format("the file's {} task mask(s) are not exported (GGUF has none): the GGUF is the full "
                    "backbone; for a task, "
                    "`cortiq defrag FILE --mask NAME -o task.cmf` first",
                    r.masks()->masks.size()));
  auto source = [&](const std::string& name) -> const cmf::TensorInfo* {
    if (!skill.empty())
      if (const auto* t = r.find("skill." + skill + "." + name)) return t;
    return r.find(name);
  };

  // tensors, in the CMF's order
  std::vector<Out> outs;
  std::map<std::string, size_t> by_name;
  const bool permute = arch == "llama";
  std::vector<uint32_t> widths(a.num_layers, a.intermediate_size);
  for (const auto& t : r.tensors()) {
    if (t.name.starts_with("skill.")) continue;
    const auto place = cmf::parse_tensor_name(t.name);
    std::string g = gguf_name(t.name, arch);
    if (g.empty()) {
      res.notes.push_back(fmt::format("tensor '{}' has no GGUF name and is not exported", t.name));
      continue;
    }
    const cmf::TensorInfo* src = source(t.name);
    if (src->shape != t.shape)
      fail(ErrorKind::Parse, "skill '{}': tensor '{}' has shape [{}], the backbone's is [{}]", skill, t.name,
           fmt::join(src->shape, ", "), fmt::join(t.shape, ", "));
    if (place && place->role == cmf::TensorRole::FfnGate && place->layer < widths.size() &&
        t.shape.size() == 2)
      widths[place->layer] = static_cast<uint32_t>(t.shape[0]);
    // phi3: q|k|v → attn_qkv, gate|up → ffn_up (Phi3MiniModel writes HF's fused tensors)
    if (arch == "phi3" && place) {
      const bool qkv = place->role == cmf::TensorRole::Q || place->role == cmf::TensorRole::K ||
                       place->role == cmf::TensorRole::V;
      const bool gu = place->role == cmf::TensorRole::FfnGate || place->role == cmf::TensorRole::FfnUp;
      if (qkv || gu) {
        const std::string suffix = t.name.ends_with(".bias") ? ".bias" : ".weight";
        g = fmt::format("blk.{}.{}{}", place->layer, qkv ? "attn_qkv" : "ffn_up", suffix);
        auto it = by_name.find(g);
        if (it == by_name.end()) {
          by_name[g] = outs.size();
          outs.push_back({g, {}, {0}, GgmlType::F32, 0, false, {}});
          if (t.shape.size() == 2) outs.back().shape.push_back(t.shape[1]);
          it = by_name.find(g);
        }
        Out& o = outs[it->second];
        // order inside the fusion: q, k, v / gate, up
        const int rank = place->role == cmf::TensorRole::Q || place->role == cmf::TensorRole::FfnGate ? 0
                         : place->role == cmf::TensorRole::K || place->role == cmf::TensorRole::FfnUp ? 1
                                                                                                      : 2;
        o.parts.resize(std::max<size_t>(o.parts.size(), rank + 1), nullptr);
        o.parts[rank] = src;
        o.shape[0] += t.shape[0];
        continue;
      }
    }
    Out o{g, {src}, t.shape, GgmlType::F32, 0, false, {}};
    // GemmaModel.modify_tensors: every `*norm.weight` + 1, as HF's Gemma norm computes x̂·(1 + w)
    o.plus_one = a.norm_style == cmf::NormStyle::Gemma && t.name.ends_with("norm.weight");
    if (permute && place && (place->role == cmf::TensorRole::Q || place->role == cmf::TensorRole::K))
      o.permute_heads = place->role == cmf::TensorRole::Q ? a.num_attention_heads : a.num_kv_heads;
    by_name[g] = outs.size();
    outs.push_back(std::move(o));
  }
  for (const Out& o : outs)
    for (const auto* p : o.parts)
      if (!p)
        fail(ErrorKind::Parse, "'{}': GGUF tensor '{}' misses one of its fused parts", opt.input, o.name);
  if (!by_name.count("token_embd.weight"))
    fail(ErrorKind::Parse, "'{}' has no model.embed_tokens.weight", opt.input);
  res.ffn_widths = widths;
  // per-layer FFN widths (a defragged specialist): llama.cpp b4748's llama arch builds every layer
  // with one width (hparams.n_ff()); its deci arch (DeciLM / Nemotron-NAS) reads n_ff(il) per layer
  // and is llama otherwise (same tensors, Q/K permutation, RoPE). The other families have none.
  const bool per_layer =
      std::any_of(widths.begin(), widths.end(), [&](uint32_t x) { return x != widths[0]; });
  if (per_layer && arch != "llama")
    fail(ErrorKind::Unsupported,
         "'{}': its FFN widths differ per layer (a defragged specialist) and llama.cpp b4748 has no "
         "per-layer-width architecture for '{}' (only llama's, as 'deci'); export the file before defrag",
         opt.input, arch);
  const std::string gguf_arch = per_layer ? "deci" : arch;

  // RoPE scaling: yarn / equal factors (linear) as keys, other factors (llama3) as rope_freqs
  std::optional<double> linear;
  if (a.rope_freq_factors && !a.rope_freq_factors->empty()) {
    const auto& f = *a.rope_freq_factors;
    if (std::all_of(f.begin(), f.end(), [&](double x) { return x == f[0]; })) {
      linear = f[0];
    } else if (arch == "llama") {
      Out rf{"rope_freqs.weight", {}, {f.size()}, GgmlType::F32, 0, false, {}};
      rf.values.assign(f.begin(), f.end());
      outs.insert(outs.begin(), std::move(rf));
    } else {
      fail(ErrorKind::Unsupported, "'{}': per-pair RoPE factors cannot be written for GGUF '{}'", opt.input,
           arch);
    }
  }

  // types
  std::map<GgmlType, uint64_t> type_bytes;
  for (Out& o : outs) {
    if (o.parts.empty() || o.shape.size() != 2) {
      o.type = GgmlType::F32;
      continue;
    }
    GgmlType t = GgmlType::Q8_0;
    if (forced) {
      t = *forced;
    } else {
      switch (o.parts[0]->dtype) {
        case DType::F32:
          t = GgmlType::F32;
          break;
        case DType::F16:
          t = GgmlType::F16;
          break;
        case DType::BF16:
          t = GgmlType::BF16;
          break;
        case DType::Q4Block:
        case DType::Q4Tiled:
          t = GgmlType::Q4_0;
          break;
        default:
          t = GgmlType::Q8_0;
          break;
      }
    }
    if ((t == GgmlType::Q8_0 || t == GgmlType::Q4_0) && o.shape[1] % 32 != 0) {
      res.notes.push_back(fmt::format("'{}': rows of {} values are not whole 32-blocks: F16 instead of {}",
                                      o.name, o.shape[1], ggml_type_name(static_cast<uint32_t>(t))));
      t = GgmlType::F16;
    }
    o.type = t;
    type_bytes[t] += o.shape[0] * o.shape[1];
  }
  GgmlType main_type = GgmlType::F32;
  uint64_t most = 0;
  for (auto [t, n] : type_bytes)
    if (n > most) most = n, main_type = t;

  // metadata
  GgufWriter w;
  res.arch = gguf_arch;
  std::string name = std::filesystem::path(opt.input).stem().string();
  if (h.provenance.is_object() && h.provenance.contains("source_model") &&
      h.provenance["source_model"].is_string())
    name = h.provenance["source_model"].get<std::string>();
  using V = GgufValueType;
  w.add("general.architecture", V::String, gguf_arch);
  w.add("general.name", V::String, name);
  const uint32_t file_type = main_type == GgmlType::F32    ? 0
                             : main_type == GgmlType::F16  ? 1
                             : main_type == GgmlType::Q4_0 ? 2
                             : main_type == GgmlType::Q8_0 ? 7
                                                           : 32;  // LlamaFileType MOSTLY_BF16
  w.add("general.file_type", V::U32, file_type);
  w.add("general.quantization_version", V::U32, 2);  // as gguf-py writes it, quantized or not
  const std::string k = gguf_arch + ".";
  w.add(k + "context_length", V::U32, a.max_position_embeddings);
  w.add(k + "embedding_length", V::U32, a.hidden_size);
  w.add(k + "block_count", V::U32, a.num_layers);
  if (!per_layer)
    w.add(k + "feed_forward_length", V::U32, widths.empty() ? a.intermediate_size : widths[0]);
  else  // DeciModel: a list of ints, written by gguf-py as an INT32 array
    w.add_array(k + "feed_forward_length", V::I32, json(widths));
  w.add(k + "attention.head_count", V::U32, a.num_attention_heads);
  w.add(k + "attention.head_count_kv", V::U32, a.num_kv_heads);
  w.add(k + "rope.freq_base", V::F32, a.rope_theta);
  w.add(k + "attention.layer_norm_rms_epsilon", V::F32, a.rms_norm_eps);
  const auto rotary = static_cast<uint32_t>(a.head_dim * a.partial_rotary_factor);
  if (arch != "phi3") {
    w.add(k + "attention.key_length", V::U32, a.head_dim);
    w.add(k + "attention.value_length", V::U32, a.head_dim);
  } else {
    w.add(k + "rope.dimension_count", V::U32, rotary);
    w.add(k + "rope.scaling.original_context_length", V::U32,
          a.yarn ? a.yarn->original_max_position_embeddings : a.max_position_embeddings);
    w.add(k + "attention.sliding_window", V::U32, a.sliding_window.value_or(0));
  }
  if (arch == "gemma2") {  // Gemma2Model.set_gguf_parameters
    w.add(k + "attn_logit_softcapping", V::F32, *a.attn_logit_softcapping);
    w.add(k + "final_logit_softcapping", V::F32, *a.final_logit_softcapping);
    w.add(k + "attention.sliding_window", V::U32, *a.sliding_window);
  }
  if (arch == "llama") {
    w.add(k + "vocab_size", V::U32, a.vocab_size);
    w.add(k + "rope.dimension_count", V::U32, rotary);
  }
  if (a.yarn) {
    w.add(k + "rope.scaling.type", V::String, "yarn");
    w.add(k + "rope.scaling.factor", V::F32, a.yarn->factor);
    if (arch != "phi3")
      w.add(k + "rope.scaling.original_context_length", V::U32, a.yarn->original_max_position_embeddings);
  } else if (linear) {
    w.add(k + "rope.scaling.type", V::String, "linear");
    w.add(k + "rope.scaling.factor", V::F32, *linear);
  }
  const cmf::TokenizerBundle* bundle = h.tokenizer_config ? &*h.tokenizer_config : nullptr;
  if (!r.vocab().empty()) {
    const std::string tj(r.vocab().begin(), r.vocab().end());
    // the embedding's rows, which llama.cpp requires the token list to match
    const cmf::TensorInfo* embed = r.find("model.embed_tokens.weight");
    const auto rows = static_cast<uint32_t>(embed && !embed->shape.empty() ? embed->shape[0] : a.vocab_size);
    uint32_t dropped = 0;
    for (GgufKv& kv : tokenizer_to_gguf(tj, bundle, rows, &dropped)) w.add(kv);
    if (dropped)
      res.notes.push_back(
          fmt::format("the tokenizer has {} token id(s) past the embedding's {} rows: dropped "
                      "from the GGUF vocabulary (llama.cpp needs one token per row)",
                      dropped, rows));
  } else {
    res.notes.push_back("the file has no tokenizer (vocab section): the GGUF carries none");
    if (bundle && bundle->bos_token_id) w.add("tokenizer.ggml.bos_token_id", V::U32, *bundle->bos_token_id);
    if (bundle && !bundle->eos_token_ids.empty())
      w.add("tokenizer.ggml.eos_token_id", V::U32, bundle->eos_token_ids[0]);
  }

  for (const Out& o : outs) {
    uint64_t n = 1;
    for (uint64_t d : o.shape) n *= d;
    w.add_tensor(o.name, o.shape, static_cast<uint32_t>(o.type), ggml_bytes(o.type, n));
  }

  uint64_t total = 0;
  for (const Out& o : outs)
    for (const auto* p : o.parts) total += r.payload(*p).size();
  std::optional<Progress> bar;
  if (opt.progress) bar.emplace("exporting", total);
  res.bytes = w.write(opt.output, [&](size_t i) {
    const Out& o = outs[i];
    if (o.parts.empty()) {
      ++res.exact;
      return ggml_encode(GgmlType::F32, o.values, o.values.size());
    }
    std::vector<uint8_t> bytes;
    bool exact = true;
    if (o.plus_one) {  // a gemma norm (1-D, F32): 1 + w in f32, as the runtime's Gemma norm computes it
      const cmf::TensorInfo* p = o.parts[0];
      const auto payload = r.payload(*p);
      std::vector<float> v(p->numel());
      quant::decode(p->dtype, p->shape, payload, v);
      for (float& x : v) x = 1.0f + x;
      r.release(payload);
      if (bar) bar->advance(payload.size());
      ++res.exact;
      return ggml_encode(GgmlType::F32, v, v.size());
    }
    for (const cmf::TensorInfo* p : o.parts) {
      const auto payload = r.payload(*p);
      std::optional<std::vector<uint8_t>> b = ggml_exact_from_cmf(o.type, p->dtype, p->shape, payload);
      if (!b) {
        std::vector<float> v(p->numel());
        quant::decode(p->dtype, p->shape, payload, v);
        const uint64_t cols = p->shape.size() == 2 ? p->shape[1] : v.size();
        b = ggml_encode(o.type, v, cols);
        // measure: decode what was written and compare with the CMF values
        GgufTensor gt;
        gt.name = o.name;
        gt.type = static_cast<uint32_t>(o.type);
        gt.numel = v.size();
        gt.shape = p->shape;
        gt.ne.assign(p->shape.rbegin(), p->shape.rend());
        gt.data = *b;
        const std::vector<float> back = gguf_to_f32(gt);
        double se = 0, ss = 0, mx = 0;
        for (size_t j = 0; j < v.size(); ++j) {
          const double d = double(back[j]) - v[j];
          se += d * d;
          ss += double(v[j]) * v[j];
          mx = std::max(mx, std::fabs(d));
        }
        if (mx > 0) {
          exact = false;
          res.max_abs_err = std::max(res.max_abs_err, mx);
          const double rel = std::sqrt(se / std::max(ss, 1e-30));
          if (rel >= res.worst_rel_rms) res.worst_rel_rms = rel, res.worst_tensor = o.name;
        }
      }
      bytes.insert(bytes.end(), b->begin(), b->end());
      r.release(payload);
      if (bar) bar->advance(payload.size());
    }
    if (o.permute_heads) bytes = permute_rows(bytes, llama_qk_permutation(o.shape[0], o.permute_heads));
    ++(exact ? res.exact : res.requantized);
    return bytes;
  });
  res.output = opt.output;
  res.tensors = outs.size();
  return res;
}

}  // namespace cortiq::convert
