// `cortiq route <model> -p P` and `cortiq explain <model> -p P [--top 8]` — the skill router's view of
// a prompt (ENGINE-NOTES §3.12; CLI-NOTES route, explain): each routable skill's energy E, the choice
// and why. The prompt is encoded raw (no template), its first 128 tokens routed through the backbone,
// as run does. Unlike the reference, a prompt no skill fits goes to the backbone (novelty).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "runtime/session.h"
#include "specialize/skill_choice.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct RouteArgs {
  std::string model, prompt;
  size_t top = 8;
  runtime::LoadOptions load;
};

/// A bar of `width` cells for a value in [0, 1] (clamped).
std::string bar(double v, int width = 20) {
  const int n = static_cast<int>(std::lround(std::clamp(v, 0.0, 1.0) * width));
  std::string s;
  for (int i = 0; i < width; ++i) s += i < n ? "#" : ".";
  return s;
}

struct Routed {
  runtime::LoadedModel lm;
  std::vector<uint32_t> ids;
  specialize::RouteDecision d;
};

Routed route_of(const RouteArgs& a) {
  runtime::LoadOptions lo = a.load;
  lo.skill = "none";
  Routed r{runtime::load_model(a.model, lo), {}, {}};
  r.ids = r.lm.encode_raw(a.prompt);
  r.d = specialize::route_prompt(r.lm, r.ids);
  return r;
}

std::string verdict(const specialize::RouteDecision& d) {
  if (!d.chosen.empty()) return "winner: " + d.chosen;
  return "winner: none — the backbone runs (novelty: " + d.why +
         "; the reference would take the lowest E regardless)";
}

void route_cmd(const RouteArgs& a) {
  Routed r = route_of(a);
  if (r.d.scores.empty()) {
    std::printf("no routable skills in this container\n");
    return;
  }
  for (const auto& s : r.d.scores) {
    std::printf("  %-20s E = %.4f", s.id.c_str(), s.e);
    if (r.d.calibrated) std::printf("  err = %.4f  p = %.3f", s.raw, s.prob);
    std::printf("\n");
  }
  std::printf("%s\n", verdict(r.d).c_str());
}

void explain_cmd(const RouteArgs& a) {
  Routed r = route_of(a);
  const auto& records = r.lm.reader->skills();
  std::printf("prompt: %zu tokens (routed on the first %zu)\n", r.ids.size(),
              std::min(r.ids.size(), specialize::kRouteTokens));
  if (r.d.scores.empty()) {
    std::printf("no routable skills in this container\n");
  } else {
    std::printf("  %-20s %-8s %-20s %-10s %-10s %s\n", "skill", "E", "1-E", "err_mean", "err_std",
                r.d.calibrated ? "p" : "");
    for (const auto& s : r.d.scores) {
      std::string em = "-", es = "-";
      for (const auto& rec : records)
        if (rec.id == s.id && rec.selection) {
          if (rec.selection->err_mean) em = fmt::format("{:.4f}", *rec.selection->err_mean);
          if (rec.selection->err_std) es = fmt::format("{:.4f}", *rec.selection->err_std);
        }
      std::printf("  %-20s %-8.4f %s %-10s %-10s", s.id.c_str(), s.e, bar(1.0 - s.e).c_str(), em.c_str(),
                  es.c_str());
      if (r.d.calibrated) std::printf(" %.3f", s.prob);
      std::printf("\n");
    }
    std::printf("%s\n", verdict(r.d).c_str());
    std::printf("why: %s (threshold %.4f%s)\n", r.d.why.c_str(), r.d.threshold,
                r.d.calibrated ? ", calibrated novelty" : ", uncalibrated: E_min vs tau");
  }
  // The first token's distribution under the choice.
  runtime::bind_skill(r.lm, r.d.chosen, false);
  model::KvCache kv(r.lm.model->arch(), r.ids.size() + 1, false);
  std::vector<float> logits(r.lm.model->vocab_size());
  r.lm.model->forward(r.ids, kv, logits, model::LogitsMode::Last, r.lm.variant.get());
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  std::vector<uint32_t> idx(logits.size());
  for (uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
  const size_t k = std::min(a.top, idx.size());
  std::partial_sort(
      idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
      [&](uint32_t x, uint32_t y) { return logits[x] > logits[y] || (logits[x] == logits[y] && x < y); });
  std::printf("first token (%s):\n", r.d.chosen.empty() ? "backbone" : ("skill " + r.d.chosen).c_str());
  for (size_t i = 0; i < k; ++i) {
    const double p = std::exp(static_cast<double>(logits[idx[i]] - mx)) / sum;
    std::string tok = r.lm.tokenizer ? r.lm.tokenizer->decode(std::vector<uint32_t>{idx[i]}, false)
                                     : std::to_string(idx[i]);
    std::printf("  %6u %-20s %.4f %s\n", idx[i], ("'" + tok + "'").c_str(), p, bar(p).c_str());
  }
  if (k > 0)
    std::printf("top-1 confidence: %.1f%%\n",
                100.0 * std::exp(static_cast<double>(logits[idx[0]] - mx)) / sum);
}

void setup_route(CLI::App& root) {
  auto a = std::make_shared<RouteArgs>();
  auto* c =
      root.add_subcommand("route", "Which skill of a file the router picks for a prompt, and each skill's E");
  add_examples(c, {"cortiq route models/testbed/testbed-skills.cmf -p \"And the LORD said unto Moses,\""});
  c->add_option("model", a->model, "model .cmf file with skills")->required();
  c->add_option("-p,--prompt", a->prompt, "prompt (encoded raw; the first 128 tokens are routed)")
      ->required();
  add_load_flags(c, a->load, kLoadThreads | kLoadNoMmap);
  c->callback([a] { route_cmd(*a); });
}

void setup_explain(CLI::App& root) {
  auto a = std::make_shared<RouteArgs>();
  auto* c = root.add_subcommand(
      "explain",
      "The routing table for a prompt (E, error statistics, the choice and why) and the first token");
  add_examples(c, {"cortiq explain models/testbed/testbed-skills.cmf -p \"def read_config(path):\""});
  c->add_option("model", a->model, "model .cmf file with skills")->required();
  c->add_option("-p,--prompt", a->prompt, "prompt (encoded raw; the first 128 tokens are routed)")
      ->required();
  c->add_option("--top", a->top, "first-token candidates shown (8)");
  add_load_flags(c, a->load, kLoadThreads | kLoadNoMmap);
  c->callback([a] { explain_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(42, setup_route);
CORTIQ_COMMAND(43, setup_explain);

}  // namespace cortiq::cli
