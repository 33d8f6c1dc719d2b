#include "specialize/routing_eval.h"

#include <algorithm>
#include <random>

#include "runtime/session.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::specialize {

std::vector<EvalCell> eval_routing(const std::string& model_path, const std::vector<EvalDomain>& domains,
                                   const EvalOptions& opt) {
  runtime::LoadOptions lo;
  lo.threads = opt.threads;
  runtime::LoadedModel lm = runtime::load_model(model_path, lo);
  if (!lm.tokenizer) fail(ErrorKind::InvalidArgument, "skill eval-routing: {} has no tokenizer", model_path);
  const auto& recs = lm.reader->skills();
  const std::vector<uint32_t> layers = phi_layers(recs);
  if (layers.empty())
    fail(ErrorKind::InvalidArgument, "skill eval-routing: {} has no routable skill", model_path);
  const uint32_t longest = *std::max_element(opt.lengths.begin(), opt.lengths.end());
  std::vector<EvalCell> out;
  for (const auto& d : domains) {
    if (std::none_of(recs.begin(), recs.end(), [&](const cmf::SkillRecord& r) { return r.id == d.id; }))
      fail(ErrorKind::InvalidArgument, "skill eval-routing: {} has no skill '{}'", model_path, d.id);
    std::vector<uint32_t> ids = lm.tokenizer->encode(read_file(d.file), false);
    if (ids.size() < size_t(longest) * 4)
      fail(ErrorKind::InvalidArgument, "skill eval-routing: {} has {} tokens, too few for {}-token windows",
           d.file, ids.size(), longest);
    std::mt19937_64 rng(opt.seed);
    for (uint32_t len : opt.lengths) {
      EvalCell c{d.id, len, 0, 0, 0, 0};
      std::uniform_int_distribution<size_t> pick(0, ids.size() - len);
      for (uint32_t tries = 0; c.samples < opt.samples && tries < opt.samples * 100; ++tries) {
        size_t at = pick(rng);
        std::span<const uint32_t> w(ids.data() + at, len);
        if (std::any_of(w.begin(), w.end(), [&](uint32_t t) { return lm.tokenizer->is_special(t); }))
          continue;
        PhiByLayer phis = compute_phis(*lm.model, w, layers);
        RouteDecision r = choose_skill(recs, phis, lm.reader->header().routing, opt.route);
        c.samples++;
        if (r.best && r.scores[*r.best].id == d.id) c.argmin_right++;
        if (r.chosen == d.id) c.chosen_right++;
        if (r.chosen.empty()) c.fallback++;
      }
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace cortiq::specialize
