// Trainer (trainer.h).
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cmf/tensor_names.h"
#include "convert/safetensors.h"
#include "convert/safetensors_writer.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::train {

using cmf::TensorRole;

cmf::ModelArch llama_arch(const LlamaConfig& c) {
  if (!c.hidden_size || !c.num_hidden_layers || !c.num_attention_heads || !c.num_key_value_heads ||
      !c.intermediate_size || !c.vocab_size || !c.max_position_embeddings)
    fail(ErrorKind::InvalidArgument, "train config: every size must be > 0");
  if (c.hidden_size % c.num_attention_heads)
    fail(ErrorKind::InvalidArgument, "train config: num_attention_heads {} does not divide hidden_size {}",
         c.num_attention_heads, c.hidden_size);
  if (c.num_attention_heads % c.num_key_value_heads)
    fail(ErrorKind::InvalidArgument,
         "train config: num_key_value_heads {} does not divide num_attention_heads {}", c.num_key_value_heads,
         c.num_attention_heads);
  cmf::ModelArch a;
  a.arch_name = "llama";
  a.hidden_size = c.hidden_size;
  a.intermediate_size = c.intermediate_size;
  a.num_layers = c.num_hidden_layers;
  a.num_attention_heads = c.num_attention_heads;
  a.num_kv_heads = c.num_key_value_heads;
  a.head_dim = c.hidden_size / c.num_attention_heads;
  a.vocab_size = c.vocab_size;
  a.layer_types.assign(c.num_hidden_layers, cmf::LayerType::FullAttention);
  a.rms_norm_eps = c.rms_norm_eps;
  a.max_position_embeddings = c.max_position_embeddings;
  a.rope_theta = c.rope_theta;
  a.tie_word_embeddings = c.tie_word_embeddings;
  return a;
}

Params init_params(const cmf::ModelArch& a, uint64_t seed) {
  const uint64_t H = a.hidden_size, W = a.intermediate_size, V = a.vocab_size, hd = a.head_dim;
  const uint64_t qd = a.num_attention_heads * hd, kd = a.num_kv_heads * hd;
  std::vector<std::pair<std::string, std::vector<uint64_t>>> mats, norms;
  mats.push_back({cmf::tensor_name(TensorRole::Embed), {V, H}});
  if (!a.tie_word_embeddings) mats.push_back({cmf::tensor_name(TensorRole::Head), {V, H}});
  norms.push_back({cmf::tensor_name(TensorRole::FinalNorm), {H}});
  for (uint32_t l = 0; l < a.num_layers; ++l) {
    mats.push_back({cmf::tensor_name(TensorRole::Q, l), {qd, H}});
    mats.push_back({cmf::tensor_name(TensorRole::K, l), {kd, H}});
    mats.push_back({cmf::tensor_name(TensorRole::V, l), {kd, H}});
    mats.push_back({cmf::tensor_name(TensorRole::O, l), {H, qd}});
    mats.push_back({cmf::tensor_name(TensorRole::FfnGate, l), {W, H}});
    mats.push_back({cmf::tensor_name(TensorRole::FfnUp, l), {W, H}});
    mats.push_back({cmf::tensor_name(TensorRole::FfnDown, l), {H, W}});
    norms.push_back({cmf::tensor_name(TensorRole::InputNorm, l), {H}});
    norms.push_back({cmf::tensor_name(TensorRole::PostAttnNorm, l), {H}});
  }
  std::sort(mats.begin(), mats.end());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  Params p;
  for (auto& [name, shape] : mats) {
    std::vector<float> v(shape[0] * shape[1]);
    for (float& x : v) x = d(rng);
    p.add(name, shape, std::move(v));
  }
  for (auto& [name, shape] : norms) p.add(name, shape, std::vector<float>(shape[0], 1.0f));
  return p;
}

namespace {

std::unique_ptr<model::Model> bind_exact(const cmf::ModelArch& a, const Params& p, size_t threads) {
  model::ModelOptions mo;
  mo.threads = threads;
  mo.kernels = kernels::KernelConfig{kernels::MatmulMode::Exact, kernels::simd_tier()};
  return model::Model::bind(a, p, mo);
}

nlohmann::json options_json(const TrainOptions& o) {
  return {{"steps", o.steps},       {"batch", o.batch},
          {"seq_len", o.seq_len},   {"lr", o.lr},
          {"min_lr", o.min_lr},     {"warmup", o.warmup},
          {"clip", o.clip},         {"seed", o.seed},
          {"beta1", o.adamw.beta1}, {"beta2", o.adamw.beta2},
          {"eps", o.adamw.eps},     {"weight_decay", o.adamw.weight_decay}};
}

}  // namespace

Trainer::Trainer(cmf::ModelArch arch, Params params, TrainOptions opt)
    : arch_(std::move(arch)), params_(std::move(params)), o_(opt), opt_(opt.adamw), rng_(opt.seed) {
  if (o_.batch == 0) fail(ErrorKind::InvalidArgument, "train: batch must be >= 1");
  if (o_.seq_len < 1 || o_.seq_len > arch_.max_position_embeddings)
    fail(ErrorKind::InvalidArgument, "train: seq_len {} exceeds the context of {}", o_.seq_len,
         arch_.max_position_embeddings);
  if (params_.trainable_count() == 0) fail(ErrorKind::InvalidArgument, "train: every parameter is frozen");
  const auto& all = params_.all();
  const auto embed = all.find(cmf::tensor_name(TensorRole::Embed));
  if (embed != all.end() && embed->second.frozen) {
    first_layer_ = arch_.num_layers;
    for (const auto& [name, t] : all)
      if (const auto place = cmf::tensor_place(name); !t.frozen && place.layer && !place.mtp)
        first_layer_ = std::min<size_t>(first_layer_, *place.layer);
  }
}

double Trainer::step(std::span<const uint32_t> train) {
  const size_t win = o_.seq_len + 1;
  if (train.size() < win)
    fail(ErrorKind::InvalidArgument, "train: the data has {} tokens, a window needs {}", train.size(), win);
  auto m = bind_exact(arch_, params_, o_.threads);
  Grads g;
  double loss = 0.0;
  std::uniform_int_distribution<size_t> start(0, train.size() - win);
  BackwardOptions bo;
  bo.first_layer = first_layer_;
  for (uint32_t b = 0; b < o_.batch; ++b) {
    const auto w = train.subspan(start(rng_), win);
    loss += lm_loss_backward(*m, w.first(o_.seq_len), w.subspan(1), g, bo);
  }
  // Frozen tensors above first_layer (or a tied head's embedding) still got a gradient: drop it, so
  // that the clipping norm is the trainable set's (torch clips the optimizer's parameters).
  for (auto it = g.begin(); it != g.end();) {
    const auto p = params_.all().find(it->first);
    it = p != params_.all().end() && p->second.frozen ? g.erase(it) : std::next(it);
  }
  const float inv = 1.0f / static_cast<float>(o_.batch);
  for (auto& [name, v] : g)
    for (float& x : v) {
      x *= inv;
      if (!std::isfinite(x))
        fail(ErrorKind::NonFinite, "train: step {}: the gradient of '{}' is not finite", opt_.steps() + 1,
             name);
    }
  grad_norm_ = clip_grad_norm(g, o_.clip);
  opt_.step(params_, g, lr_at(opt_.steps(), o_.warmup, o_.steps, o_.lr, o_.min_lr));
  return loss / o_.batch;
}

double Trainer::evaluate(std::span<const uint32_t> tokens, size_t max_windows) {
  const size_t win = o_.seq_len + 1;
  if (tokens.size() < win)
    fail(ErrorKind::InvalidArgument, "train: {} validation tokens, a window needs {}", tokens.size(), win);
  auto m = bind_exact(arch_, params_, o_.threads);
  double sum = 0.0;
  size_t n = 0;
  for (size_t s = 0; s + win <= tokens.size() && (!max_windows || n < max_windows); s += o_.seq_len, ++n) {
    const auto w = tokens.subspan(s, win);
    sum += lm_loss(*m, w.first(o_.seq_len), w.subspan(1));
  }
  return sum / static_cast<double>(n);
}

void Trainer::save(const std::string& dir) const {
  std::filesystem::create_directories(dir);
  std::vector<convert::StF32> ps, os;
  for (const auto& [name, t] : params_.all()) ps.push_back({name, t.shape, t.value});
  auto& self = const_cast<AdamW&>(opt_);
  for (auto& [name, v] : self.m()) os.push_back({"m." + name, params_.all().at(name).shape, v});
  for (auto& [name, v] : self.v()) os.push_back({"v." + name, params_.all().at(name).shape, v});
  convert::write_safetensors_f32(dir + "/params.safetensors", ps);
  convert::write_safetensors_f32(dir + "/optimizer.safetensors", os);
  std::ostringstream rng;
  rng << rng_;
  const nlohmann::json j = {
      {"format", "cortiq-train-checkpoint-1"}, {"step", opt_.steps()},  {"arch", cmf::arch_to_json(arch_)},
      {"options", options_json(o_)},           {"threads", o_.threads}, {"sampler", rng.str()},
      {"frozen", params_.frozen_names()}};
  const std::string s = j.dump(2) + "\n";
  AtomicFile f(dir + "/trainer.json", "trainer.json");
  f.write(s.data(), s.size());
  f.commit();
}

Trainer Trainer::load(const std::string& dir) {
  std::ifstream in(dir + "/trainer.json");
  if (!in) fail(ErrorKind::Io, "train: cannot read '{}/trainer.json'", dir);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail(ErrorKind::Parse, "train: '{}/trainer.json': {}", dir, e.what());
  }
  if (j.value("format", "") != "cortiq-train-checkpoint-1")
    fail(ErrorKind::Parse, "train: '{}/trainer.json' is not a cortiq training checkpoint", dir);
  const auto& oj = j.at("options");
  TrainOptions o;
  o.steps = oj.at("steps");
  o.batch = oj.at("batch");
  o.seq_len = oj.at("seq_len");
  o.lr = oj.at("lr");
  o.min_lr = oj.at("min_lr");
  o.warmup = oj.at("warmup");
  o.clip = oj.at("clip");
  o.seed = oj.at("seed");
  o.adamw.beta1 = oj.at("beta1");
  o.adamw.beta2 = oj.at("beta2");
  o.adamw.eps = oj.at("eps");
  o.adamw.weight_decay = oj.at("weight_decay");
  o.threads = j.value("threads", size_t{1});
  Params p;
  convert::SafetensorsFile pf(dir + "/params.safetensors");
  for (const auto& t : pf.tensors()) p.add(t.name, t.shape, convert::to_f32(t));
  for (const std::string& name : j.value("frozen", std::vector<std::string>{})) {
    const auto it = p.all().find(name);
    if (it == p.all().end())
      fail(ErrorKind::Parse, "train: '{}/trainer.json' freezes '{}', which params.safetensors lacks", dir,
           name);
    it->second.frozen = true;
  }
  Trainer tr(cmf::arch_from_json(j.at("arch")), std::move(p), o);
  convert::SafetensorsFile of(dir + "/optimizer.safetensors");
  for (const auto& t : of.tensors()) {
    const bool first = t.name.rfind("m.", 0) == 0;
    (first ? tr.opt_.m() : tr.opt_.v())[t.name.substr(2)] = convert::to_f32(t);
  }
  tr.opt_.set_steps(j.at("step"));
  std::istringstream rng(j.at("sampler").get<std::string>());
  rng >> tr.rng_;
  return tr;
}

}  // namespace cortiq::train
