#include "runtime/embeddings.h"

#include <cmath>

#include "kernels/kernels.h"
#include "util/error.h"

namespace cortiq::runtime {

std::string embedding_unusable(const model::Model& m) {
  const model::Weights& w = *m.weights();
  if (w.final_norm.size() != m.arch().hidden_size)
    return "the model has no final norm of its hidden size (" + std::to_string(w.final_norm.size()) +
           " weights for hidden size " + std::to_string(m.arch().hidden_size) + ")";
  return "";
}

std::vector<float> embed_sequence(model::Model& m, std::span<const uint32_t> tokens, Pooling pooling,
                                  bool normalize, const model::Variant* variant) {
  if (tokens.empty()) fail(ErrorKind::InvalidArgument, "an embedding needs at least one token");
  if (const std::string why = embedding_unusable(m); !why.empty())
    fail(ErrorKind::InvalidArgument, "no usable hidden state for embeddings: {}", why);
  const model::Weights& w = *m.weights();
  const size_t Hd = m.arch().hidden_size, T = tokens.size();
  model::KvCache kv(m.arch(), T);
  std::vector<float> h;
  model::Taps taps;
  taps.final_hidden = [&](std::span<const float> x, size_t) { h.assign(x.begin(), x.end()); };
  model::SeqStep step;
  step.tokens = tokens;
  step.kv = &kv;
  step.variant = variant;
  m.forward_batch(std::span<const model::SeqStep>(&step, 1), &taps);
  if (h.size() != T * Hd)
    fail(ErrorKind::InvalidArgument, "the forward pass gave {} hidden floats, {} expected", h.size(), T * Hd);
  // The final norm per row (what the lm_head reads), then the pooling, in double.
  std::vector<float> row(Hd);
  std::vector<double> acc(Hd, 0.0);
  const size_t first = pooling == Pooling::Last ? T - 1 : 0;
  for (size_t t = first; t < T; ++t) {
    kernels::rmsnorm(h.data() + t * Hd, w.final_norm.data(), Hd, m.arch().rms_norm_eps, w.norm_style,
                     row.data());
    for (size_t i = 0; i < Hd; ++i) acc[i] += row[i];
  }
  double norm2 = 0;
  for (double& a : acc) {
    a /= static_cast<double>(T - first);
    norm2 += a * a;
  }
  if (!std::isfinite(norm2))
    fail(ErrorKind::NonFinite, "the model's final hidden state is not finite for this input: no embedding");
  if (normalize && norm2 == 0)
    fail(ErrorKind::NonFinite,
         "the model's final hidden state is zero for this input: it cannot be normalized");
  const double inv = normalize ? 1.0 / std::sqrt(norm2) : 1.0;
  std::vector<float> out(Hd);
  for (size_t i = 0; i < Hd; ++i) out[i] = static_cast<float>(acc[i] * inv);
  return out;
}

}  // namespace cortiq::runtime
