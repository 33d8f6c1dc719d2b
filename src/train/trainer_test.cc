// Trainer (trainer.h): a tiny llama learns a periodic token stream (the loss falls from ~ln V
// to a fraction of it), a run saved and resumed equals the uninterrupted run bit for bit, and bad
// configs and data are refused by name.
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "util/error.h"

namespace cortiq::train {
namespace {

LlamaConfig tiny() {
  LlamaConfig c;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.intermediate_size = 64;
  c.vocab_size = 16;
  c.max_position_embeddings = 64;
  return c;
}

TrainOptions opts() {
  TrainOptions o;
  o.steps = 40;
  o.batch = 2;
  o.seq_len = 16;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.warmup = 5;
  o.seed = 3;
  return o;
}

std::vector<uint32_t> stream(size_t n) {  // period 12 over 16 ids
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>((i % 12) * 5 % 16);
  return v;
}

TEST(Trainer, LossFallsOnAPeriodicStream) {
  const auto a = llama_arch(tiny());
  Trainer t(a, init_params(a, 1), opts());
  const auto data = stream(600);
  const double before = t.evaluate(data, 4);
  EXPECT_NEAR(before, std::log(16.0), 0.3) << "fresh weights predict about uniformly";
  double last = 0;
  for (int s = 0; s < 40; ++s) last = t.step(data);
  const double after = t.evaluate(data, 4);
  EXPECT_LT(after, 0.3 * before) << "last train loss " << last;
  EXPECT_EQ(t.step_count(), 40u);
}

TEST(Trainer, ResumeIsBitIdentical) {
  const auto a = llama_arch(tiny());
  const auto data = stream(600);
  Trainer straight(a, init_params(a, 2), opts());
  std::vector<double> want;
  for (int s = 0; s < 12; ++s) want.push_back(straight.step(data));

  Trainer first(a, init_params(a, 2), opts());
  std::vector<double> got;
  for (int s = 0; s < 6; ++s) got.push_back(first.step(data));
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("cortiq_train_ckpt_" + std::to_string(::getpid()))).string();
  first.save(dir);
  Trainer resumed = Trainer::load(dir);
  EXPECT_EQ(resumed.step_count(), 6u);
  for (int s = 0; s < 6; ++s) got.push_back(resumed.step(data));
  EXPECT_EQ(got, want);
  for (const auto& [name, p] : straight.params().all())
    EXPECT_EQ(resumed.params().all().at(name).value, p.value) << name;
  std::filesystem::remove_all(dir);
}

// --trainable: frozen tensors stay bit-identical, the trainable ones move, the backward stops at the
// lowest trainable layer, the frozen set survives a checkpoint, and a pattern matching nothing is named.
TEST(Trainer, TrainableSubsetFreezesTheRest) {
  LlamaConfig c = tiny();
  c.num_hidden_layers = 3;
  const auto a = llama_arch(c);
  const Params init = init_params(a, 4);
  Params p = init;
  p.set_trainable({"model.layers.2.mlp.*", "model.layers.1.post_attention_layernorm.weight"});
  EXPECT_EQ(p.frozen_names().size(), p.all().size() - 4);
  Trainer t(a, std::move(p), opts());
  EXPECT_EQ(t.first_layer(), 1u);
  const auto data = stream(600);
  for (int s = 0; s < 3; ++s) t.step(data);
  size_t moved = 0;
  for (const auto& [name, q] : t.params().all()) {
    if (q.frozen) {
      EXPECT_EQ(q.value, init.all().at(name).value) << name;
    } else {
      EXPECT_NE(q.value, init.all().at(name).value) << name;
      ++moved;
    }
  }
  EXPECT_EQ(moved, 4u);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("cortiq_train_frozen_" + std::to_string(::getpid())))
          .string();
  t.save(dir);
  const Trainer back = Trainer::load(dir);
  EXPECT_EQ(back.params().frozen_names(), t.params().frozen_names());
  EXPECT_EQ(back.first_layer(), 1u);
  std::filesystem::remove_all(dir);

  Params q = init;
  try {
    q.set_trainable({"model.layers.*.mlp.*", "model.layers.9.*"});
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.9.*' matches no parameter"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(q.frozen_names().empty()) << "nothing changed by a refused list";
  q.set_trainable({"model.embed_tokens.weight"});  // the embedding trains: the backward goes all the way
  EXPECT_EQ(Trainer(a, q, opts()).first_layer(), 0u);
  q.set_trainable({"model.norm.weight"});  // no layer tensor: the backward stops above the layers
  EXPECT_EQ(Trainer(a, q, opts()).first_layer(), 3u);
}

TEST(Trainer, BadConfigAndDataAreNamed) {
  LlamaConfig c = tiny();
  c.num_attention_heads = 5;
  try {
    llama_arch(c);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide hidden_size"), std::string::npos) << e.what();
  }
  const auto a = llama_arch(tiny());
  TrainOptions o = opts();
  o.seq_len = 65;  // > the context of 64
  EXPECT_THROW(Trainer(a, init_params(a, 1), o), Error);
  Trainer t(a, init_params(a, 1), opts());
  const auto few = stream(10);
  EXPECT_THROW(t.step(few), Error);
  EXPECT_THROW(Trainer::load("/nonexistent/ckpt"), Error);
}

}  // namespace
}  // namespace cortiq::train
