// defrag_file, copy_with_header (defrag.h).
#include "specialize/defrag.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "cmf/tensor_names.h"
#include "cmf/writer.h"
#include "quant/codec.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::specialize {

namespace {

using cmf::TensorRole;

/// Codecs whose encoder needs the inner dimension to be a multiple of 32 (quant/codec.h).
bool needs_in32(quant::DType t) {
  using D = quant::DType;
  return t == D::VBit || t == D::VBitRo || t == D::Q4Tiled || t == D::Q1 || t == D::Q1S || t == D::Q1T ||
         t == D::Q4TP || t == D::Q2TP;
}

enum class Part { Gate, Up, Down };

}  // namespace

DefragResult defrag_file(const cmf::Reader& src, const std::string& out, const DefragPlan& plan,
                         bool progress) {
  const cmf::Header& sh = src.header();
  const auto& arch = sh.arch;
  if (arch.moe)
    fail(ErrorKind::Unsupported, "defrag: '{}' is a mixture-of-experts model (use moe-defrag)", src.path());
  if (plan.keep.size() != arch.num_layers)
    fail(ErrorKind::InvalidArgument, "defrag: keep sets for {} layers, the model has {}", plan.keep.size(),
         arch.num_layers);
  // which (layer, part) each FFN tensor name is
  std::map<std::string, std::pair<uint32_t, Part>> ffn;
  for (uint32_t l = 0; l < arch.num_layers; ++l) {
    ffn[cmf::tensor_name(TensorRole::FfnGate, l)] = {l, Part::Gate};
    ffn[cmf::tensor_name(TensorRole::FfnUp, l)] = {l, Part::Up};
    ffn[cmf::tensor_name(TensorRole::FfnDown, l)] = {l, Part::Down};
  }
  DefragResult res;
  res.path = out;
  res.widths.resize(arch.num_layers);
  for (uint32_t l = 0; l < arch.num_layers; ++l) {
    if (plan.keep[l].empty())
      fail(ErrorKind::InvalidArgument,
           "defrag: the keep set empties the FFN of layer {}: a layer needs a neuron", l);
    res.widths[l] = static_cast<uint32_t>(plan.keep[l].size());
  }
  cmf::Header h = sh;
  h.arch.intermediate_size = *std::max_element(res.widths.begin(), res.widths.end());
  h.skills.clear();
  nlohmann::json prov = sh.provenance.is_object() ? sh.provenance : nlohmann::json::object();
  if (!sh.provenance.is_null() && !sh.provenance.is_object()) prov["previous"] = sh.provenance;
  for (const auto& [k, v] : plan.provenance.items()) prov[k] = v;
  h.provenance = prov;

  cmf::WriterOptions wo;
  wo.expected_tensors = src.tensors().size();
  cmf::Writer w(out, wo);
  if (!src.vocab().empty()) w.set_vocab({src.vocab().begin(), src.vocab().end()});
  uint64_t total = 0;
  for (const auto& t : src.tensors()) total += t.nbytes;
  std::optional<Progress> bar;
  if (progress) bar.emplace("defrag", total);
  std::vector<float> full, kept;
  for (const auto& t : src.tensors()) {
    if (t.name.rfind("skill.", 0) == 0) continue;
    const auto it = ffn.find(t.name);
    const auto payload = src.payload(t);
    if (it == ffn.end()) {
      w.add_tensor(t.name, t.dtype, t.shape, payload);
      if (bar) bar->advance(t.nbytes);
      continue;
    }
    const auto [l, part] = it->second;
    if (t.shape.size() != 2)
      fail(ErrorKind::Parse, "defrag: tensor '{}' has {} dimensions, 2 expected", t.name, t.shape.size());
    const uint64_t rows = t.shape[0], cols = t.shape[1];
    const uint64_t width = part == Part::Down ? cols : rows;
    for (uint32_t j : plan.keep[l])
      if (j >= width)
        fail(ErrorKind::InvalidArgument, "defrag: layer {}: neuron {} is beyond the FFN width {} of '{}'", l,
             j, width, t.name);
    const train::Param* master = nullptr;
    if (plan.trained)
      if (auto p = plan.trained->all().find(t.name); p != plan.trained->all().end()) master = &p->second;
    std::span<const float> values;
    if (master) {
      if (master->shape != t.shape)
        fail(ErrorKind::InvalidArgument, "defrag: the trained '{}' has another shape than the source's",
             t.name);
      values = master->value;
    } else {
      if (!quant::dtype_has_codec(t.dtype))
        fail(ErrorKind::Unsupported, "defrag: tensor '{}' is {}, which has no codec to re-encode", t.name,
             quant::dtype_name(t.dtype));
      full.resize(rows * cols);
      quant::decode(t.dtype, t.shape, payload, full);
      values = full;
    }
    const uint64_t n = plan.keep[l].size();
    std::vector<uint64_t> shape;
    if (part == Part::Down) {  // [hidden, width] → its kept columns
      kept.resize(rows * n);
      for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t c = 0; c < n; ++c) kept[r * n + c] = values[r * cols + plan.keep[l][c]];
      shape = {rows, n};
    } else {  // [width, hidden] → its kept rows
      kept.resize(n * cols);
      for (uint64_t r = 0; r < n; ++r)
        std::copy_n(values.begin() + static_cast<ptrdiff_t>(plan.keep[l][r] * cols), cols,
                    kept.begin() + static_cast<ptrdiff_t>(r * cols));
      shape = {n, cols};
    }
    quant::DType dt = master ? quant::DType::Q8Row : t.dtype;
    if (needs_in32(dt) && shape[1] % quant::kGroup != 0) {
      res.notes.push_back(fmt::format("{}: {} → q8_2f (inner width {} is not a multiple of 32)", t.name,
                                      quant::dtype_name(dt), shape[1]));
      dt = quant::DType::Q8_2F;
    }
    std::vector<uint8_t> enc;
    try {
      enc = quant::encode(dt, shape, kept);
    } catch (const Error& e) {
      throw Error(e.kind(), fmt::format("defrag: tensor '{}': {}", t.name, e.message()));
    }
    w.add_tensor(t.name, dt, shape, enc);
    if (bar) bar->advance(t.nbytes);
  }
  if (bar) bar->finish();
  const auto paths = w.finish(h);
  res.bytes = std::filesystem::file_size(paths.front());
  return res;
}

void copy_with_header(const cmf::Reader& src, const std::string& out, const cmf::Header& header,
                      const std::optional<cmf::MaskCatalog>& masks) {
  cmf::WriterOptions wo;
  wo.expected_tensors = src.tensors().size();
  cmf::Writer w(out, wo);
  if (masks)
    w.set_masks(*masks, header.arch);
  else if (!src.masks_bytes().empty())
    w.set_masks_raw({src.masks_bytes().begin(), src.masks_bytes().end()});
  if (!src.vocab().empty()) w.set_vocab({src.vocab().begin(), src.vocab().end()});
  for (const auto& t : src.tensors()) w.add_tensor(t.name, t.dtype, t.shape, src.payload(t));
  w.finish(header);
}

}  // namespace cortiq::specialize
