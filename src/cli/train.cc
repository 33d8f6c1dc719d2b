// `cortiq train -o DIR --tokenizer tokenizer.json --data FILE... [--val FILE...] [model shape |
// --init MODEL.cmf|HF_DIR [--trainable GLOBS]] [optimizer] [--resume DIR]`: trains a
// llama-architecture model from scratch (or fine-tunes one, a chosen subset of its tensors) on plain UTF-8
// text (train/trainer.h), with validation every N steps, checkpoints under DIR/checkpoint (Ctrl-C saves one,
// --resume continues it bit-identically), a JSON-lines log, and the result as a Hugging Face folder in DIR
// (config.json, model.safetensors, tokenizer.json, tokenizer_config.json) that `cortiq convert` takes.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cmf/reader.h"
#include "model/cmf_source.h"
#include "tokenizer/tokenizer.h"
#include "train/hf_export.h"
#include "train/hf_import.h"
#include "train/token_file.h"
#include "train/trainer.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::cli {
namespace {

struct TrainArgs {
  std::string output, tokenizer, resume, log, config, init, trainable;
  std::vector<std::string> data, val;
  train::LlamaConfig model;
  train::TrainOptions opt;
  uint64_t init_seed = 1;
  uint64_t eval_every = 100, eval_windows = 16, save_every = 0;
};

std::atomic<bool> g_stop{false};
extern "C" void on_train_sigint(int) {
  g_stop.store(true);
}

/// One split's tokens: a token file (`cortiq tokenize --bin`) mapped, or text files tokenized here.
struct Split {
  std::vector<uint32_t> ids;
  std::optional<train::TokenFile> file;
  train::Tokens tokens() const { return file ? file->tokens() : train::Tokens(ids); }
  size_t size() const { return tokens().size(); }
};

/// --data / --val: exactly one token file, or text files (train::tokenize_files).
void load_split(Split& s, const Tokenizer& tok, const std::vector<std::string>& files, const char* what) {
  for (const std::string& f : files)
    if (train::is_token_file(f)) {
      if (files.size() != 1)
        fail(ErrorKind::InvalidArgument,
             "train: the {} data mixes the token file '{}' with other files: give one token file or text "
             "files",
             what, f);
      s.file.emplace(f, tok.vocab_size());
      return;
    }
  s.ids = train::tokenize_files(tok, files, what);
}

/// "a,b,,c" → {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_patterns(const std::string& list) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= list.size()) {
    const size_t e = std::min(list.find(',', b), list.size());
    if (e > b) out.push_back(list.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

void apply_config_file(const std::string& path, train::LlamaConfig& m) {
  const auto j = nlohmann::json::parse(read_input(path), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    fail(ErrorKind::Parse, "train: --config '{}' is not a JSON object", path);
  const auto take = [&](const char* k, auto& v) {
    if (j.contains(k)) v = j.at(k).get<std::remove_reference_t<decltype(v)>>();
  };
  take("hidden_size", m.hidden_size);
  take("num_hidden_layers", m.num_hidden_layers);
  take("num_attention_heads", m.num_attention_heads);
  take("num_key_value_heads", m.num_key_value_heads);
  take("intermediate_size", m.intermediate_size);
  take("max_position_embeddings", m.max_position_embeddings);
  take("rms_norm_eps", m.rms_norm_eps);
  take("rope_theta", m.rope_theta);
  take("tie_word_embeddings", m.tie_word_embeddings);
}

void train_cmd(TrainArgs& a) {
  const Tokenizer tok = Tokenizer::from_file(a.tokenizer);
  const auto eos = tok.token_to_id("<|endoftext|>");
  Split train_split, val_split;
  load_split(train_split, tok, a.data, "train");
  if (!a.val.empty()) load_split(val_split, tok, a.val, "validation");
  const train::Tokens train_ids = train_split.tokens(), val_ids = val_split.tokens();
  std::optional<train::Trainer> tr;
  if (!a.resume.empty()) {
    tr.emplace(train::Trainer::load(a.resume));
  } else {
    cmf::ModelArch arch;
    train::Params params;
    if (!a.init.empty()) {  // fine-tuning: the weights (decoded to f32) and arch of a .cmf or HF folder
      if (std::filesystem::is_directory(a.init)) {
        auto hf = train::read_hf_checkpoint(a.init);
        arch = std::move(hf.arch);
        params = std::move(hf.params);
      } else {
        const cmf::Reader r = cmf::Reader::open(a.init);
        arch = r.header().arch;
        params = train::Params::from_source(model::CmfTensorSource(r));
      }
      if (arch.vocab_size != tok.vocab_size())
        fail(ErrorKind::InvalidArgument, "train: --init '{}' has a vocabulary of {}, the tokenizer {}",
             a.init, arch.vocab_size, tok.vocab_size());
    } else {
      if (!a.config.empty()) apply_config_file(a.config, a.model);
      a.model.vocab_size = static_cast<uint32_t>(tok.vocab_size());
      arch = train::llama_arch(a.model);
      params = train::init_params(arch, a.init_seed);
    }
    params.set_trainable(split_patterns(a.trainable));
    tr.emplace(std::move(arch), std::move(params), a.opt);
  }
  const auto& o = tr->options();
  if (train_ids.size() < o.seq_len + 1)
    fail(ErrorKind::InvalidArgument, "train: the training data has {} tokens, shorter than a window of {}",
         train_ids.size(), o.seq_len + 1);
  if (!val_ids.empty() && val_ids.size() < o.seq_len + 1)
    fail(ErrorKind::InvalidArgument, "train: the validation data has {} tokens, shorter than a window of {}",
         val_ids.size(), o.seq_len + 1);
  std::filesystem::create_directories(a.output);
  const std::string ckpt = a.output + "/checkpoint";
  std::ofstream log;
  if (!a.log.empty()) log.open(a.log, std::ios::app);
  struct sigaction sa {};
  sa.sa_handler = on_train_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);

  std::printf(
      "train: %s, %.2f M parameters, %zu train / %zu validation tokens, %llu steps of %u × %u tokens\n",
      tr->arch().arch_name.c_str(), static_cast<double>(tr->params().count()) / 1e6, train_ids.size(),
      val_ids.size(), static_cast<unsigned long long>(o.steps), o.batch, o.seq_len);
  if (tr->params().trainable_count() != tr->params().count())
    std::printf("train: %.3f M parameters trainable (%zu tensors frozen), backward from layer %zu\n",
                static_cast<double>(tr->params().trainable_count()) / 1e6, tr->params().frozen_names().size(),
                tr->first_layer());
  std::fflush(stdout);
  Progress bar("training", o.steps - std::min(o.steps, tr->step_count()), "step");
  const auto t0 = std::chrono::steady_clock::now();
  double val = NAN;
  uint64_t tokens = 0;
  while (tr->step_count() < o.steps) {
    if (g_stop.load()) {
      tr->save(ckpt);
      train::write_hf_checkpoint(a.output, tr->arch(), tr->params(), a.tokenizer, eos);
      std::fprintf(
          stderr,
          "\ntrain: interrupted at step %llu; checkpoint saved to %s (--resume it), the weights so far "
          "written as an HF folder to %s\n",
          static_cast<unsigned long long>(tr->step_count()), ckpt.c_str(), a.output.c_str());
      std::exit(130);
    }
    double loss = 0.0;
    try {
      loss = tr->step(train_ids);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NonFinite) throw;
      tr->save(ckpt);  // step() left the parameters as they were: the last good step
      fail(ErrorKind::NonFinite, "{}; the last good step ({}) is saved in {}", e.message(), tr->step_count(),
           ckpt);
    }
    tokens += static_cast<uint64_t>(o.batch) * o.seq_len;
    const uint64_t s = tr->step_count();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool eval_now = !val_ids.empty() && (s % a.eval_every == 0 || s == o.steps);
    if (eval_now) val = tr->evaluate(val_ids, a.eval_windows);
    bar.set_note(fmt::format("loss {:.3f}{}  {:.0f} tok/s", loss,
                             std::isnan(val) ? "" : fmt::format(" · val {:.3f}", val),
                             static_cast<double>(tokens) / secs));
    bar.advance(1);
    if (log) {
      nlohmann::json r = {{"step", s},
                          {"loss", loss},
                          {"grad_norm", tr->last_grad_norm()},
                          {"lr", train::lr_at(s - 1, o.warmup, o.steps, o.lr, o.min_lr)},
                          {"seconds", secs},
                          {"tokens", tokens}};
      if (eval_now) r["val_loss"] = val;
      log << r.dump() << "\n" << std::flush;
    }
    if (a.save_every && s % a.save_every == 0) tr->save(ckpt);
  }
  bar.finish();
  tr->save(ckpt);
  train::write_hf_checkpoint(a.output, tr->arch(), tr->params(), a.tokenizer, eos);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("✓ wrote %s (HF checkpoint; training state in %s) · %.1f s", a.output.c_str(), ckpt.c_str(),
              secs);
  if (!std::isnan(val)) std::printf(" · validation loss %.4f (ppl %.2f)", val, std::exp(val));
  std::printf("\n");
}

void setup(CLI::App& root) {
  auto a = std::make_shared<TrainArgs>();
  auto* c =
      root.add_subcommand("train", "Train a llama-architecture model on text files (HF checkpoint out)");
  add_examples(c,
               {"cortiq train -o run1 --tokenizer tokenizer.json --data train.txt --val val.txt --steps 2000",
                "cortiq train -o run1 --resume run1/checkpoint"});
  c->add_option("-o,--output", a->output,
                "output folder (HF checkpoint; checkpoint/ holds the training state)")
      ->required();
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json (e.g. from train-tokenizer); sets vocab_size")
      ->required();
  c->add_option("--data", a->data, "training text files, or one token file from `tokenize --bin`")
      ->required();
  c->add_option("--val", a->val, "validation text files, or one token file from `tokenize --bin`");
  c->add_option("--init", a->init,
                "start from the weights and architecture of this .cmf or HF folder (fine-tuning)");
  c->add_option("--trainable", a->trainable,
                "comma-separated globs over HF tensor names (e.g. 'model.layers.4.mlp.*,model.norm.weight'); "
                "every other parameter is frozen (default: all trainable)");
  c->add_option("--config", a->config,
                "JSON with HF LlamaConfig fields (hidden_size, num_hidden_layers, ...)");
  c->add_option("--hidden-size", a->model.hidden_size)->capture_default_str();
  c->add_option("--layers", a->model.num_hidden_layers)->capture_default_str();
  c->add_option("--heads", a->model.num_attention_heads)->capture_default_str();
  c->add_option("--kv-heads", a->model.num_key_value_heads)->capture_default_str();
  c->add_option("--intermediate-size", a->model.intermediate_size)->capture_default_str();
  c->add_option("--context", a->model.max_position_embeddings, "max_position_embeddings")
      ->capture_default_str();
  c->add_option("--steps", a->opt.steps, "optimizer steps")->capture_default_str();
  c->add_option("--batch", a->opt.batch, "sequences per step")->capture_default_str();
  c->add_option("--seq-len", a->opt.seq_len, "tokens per sequence")->capture_default_str();
  c->add_option("--lr", a->opt.lr, "peak learning rate")->capture_default_str();
  c->add_option("--min-lr", a->opt.min_lr, "learning rate at the end of the cosine")->capture_default_str();
  c->add_option("--warmup", a->opt.warmup, "linear warmup steps")->capture_default_str();
  c->add_option("--clip", a->opt.clip, "gradient-norm clip (0 = none)")->capture_default_str();
  c->add_option("--weight-decay", a->opt.adamw.weight_decay)->capture_default_str();
  c->add_option("--seed", a->opt.seed, "window sampler seed")->capture_default_str();
  c->add_option("--init-seed", a->init_seed, "weight initialization seed")->capture_default_str();
  c->add_option("-t,--threads", a->opt.threads, "kernel threads")->capture_default_str();
  c->add_option("--eval-every", a->eval_every, "validation every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--eval-windows", a->eval_windows, "validation windows (0 = all)")->capture_default_str();
  c->add_option("--save-every", a->save_every, "checkpoint every N steps (0 = at the end)")
      ->capture_default_str();
  c->add_option("--resume", a->resume, "continue the training state in this folder (its options win)");
  c->add_option("--log", a->log, "append one JSON line per step to this file");
  c->callback([a] { train_cmd(*a); });
}

}  // namespace
CORTIQ_COMMAND(37, setup);
}  // namespace cortiq::cli
