// Loading a .cmf for inference and running generation (ENGINE-NOTES §3.1, §3.13, §3.14).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cmf/reader.h"
#include "model/cmf_source.h"
#include "model/model.h"
#include "runtime/grammar.h"
#include "runtime/sampler.h"
#include "runtime/skills.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace cortiq::runtime {

/// Load options (`cortiq run/ppl` flags).
struct LoadOptions {
  size_t threads = 1;  ///< kernel threads (0 = all cores)
  /// KV capacity in tokens; 0 = min(max_position_embeddings, 4096); above a known
  /// max_position_embeddings load_model refuses it (Error(InvalidArgument)).
  size_t ctx = 0;
  bool kv_f16 = false;  ///< f16 KV cache (default f32)
  std::string task;     ///< task mask name; "" = the catalog's fallback; "off" = none
  /// `--exact`: f32 activations in every matvec (kernels::MatmulMode::Exact); otherwise int8
  /// activations where a SIMD kernel has them (Fast). The loaded model's own kernel table
  /// (kernels::Ops): the process-wide mode is left alone, so two models in one process may differ.
  bool exact = false;
  /// `--no-mmap`: load the file into anonymous huge-page memory (util/mmap_file.h MapMode::Memory)
  /// instead of mmap'ing it — slower start, file-sized anonymous RSS, faster decode.
  bool no_mmap = false;
  /// `--check-tensors`: before binding, run the integrity checks of `cortiq verify`
  /// (cmf::Reader::verify: every tensor's hash64, header/directory/section hashes) and refuse a
  /// damaged file with Error(HashMismatch) naming the tensor. Reads the whole file once.
  bool check_tensors = false;
  /// `--skill`: "" = automatic (a file with routable skills routes on the prompt; see
  /// specialize/skill_choice.h — load_model itself binds the backbone), "auto" = route, "none" or
  /// "backbone" = the backbone alone, else a skill id of the file (bound by load_model; unknown →
  /// Error(InvalidArgument) listing the known ids). ENGINE-NOTES §3.12.
  std::string skill;
  /// `--blend`: "" = none, "auto" = top 2 by routing energy (specialize/skill_choice.h), else
  /// `id:w,id:w` (runtime::parse_blend; bound by load_model). Exclusive with an explicit `skill`.
  std::string blend;
};

/// A runnable model: the mapped file, its bound model, tokenizer and chat bundle.
struct LoadedModel {
  std::unique_ptr<cmf::Reader> reader;
  std::unique_ptr<model::CmfTensorSource> source;
  /// The active skill's overlay (runtime/skills.h; null = the backbone): the source the model's
  /// touched layers were bound from. Declared before `model`, so it outlives it.
  std::unique_ptr<model::TensorSource> overlay;
  std::unique_ptr<model::Model> model;
  /// The backbone's weights (what a skill is bound on; `model` runs them when no skill is active).
  std::shared_ptr<const model::Weights> backbone;
  model::ModelOptions model_options;  ///< what `model` was created with (a skill's model too)
  /// The active skill: "" = the backbone, an id, or "blend" (then `blend` holds the normalized terms).
  std::string skill;
  std::vector<BlendTerm> blend;
  std::unique_ptr<Tokenizer> tokenizer;  ///< null when the file has no vocab section (ids only)
  cmf::TokenizerBundle bundle;           ///< eos ids, bos, chat template
  std::string active_task = "general";   ///< name shown in the Ready line
  double sparsity = 0.0;                 ///< active mask's sparsity (0..1)
  /// The active task mask (find_task's answer for LoadOptions::task; nullptr = dense) and its
  /// compiled variant: the one lookup and the one compile; an Engine over this model takes both.
  const cmf::TaskMask* mask = nullptr;
  std::shared_ptr<const model::Variant> variant;
  size_t ctx = 0;  ///< KV capacity
  bool kv_f16 = false;
  std::vector<uint32_t> eos_ids;  ///< bundle eos ids (+ tokenizer EOS-like specials)
  std::optional<uint32_t> bos_id;
  bool add_bos = false;  ///< prepend BOS to raw prompts
  /// The tokenizer.json load_model looked for beside a file without a vocab section and did not
  /// find ("" otherwise); encode_raw's error names it.
  std::string missing_tokenizer;

  /// Raw prompt → ids (BOS added when add_bos). Error(Unsupported) when there is no tokenizer.
  std::vector<uint32_t> encode_raw(std::string_view text) const;
};

/// The tokenizer of the CMF file `r` opened from `path`: its vocab section (an HF tokenizer.json),
/// else a tokenizer.json beside the file (the sidecar), else null with `*missing` (when given) set
/// to the sidecar path it looked for. A vocab section that does not parse is Error(Parse) naming
/// the file and the section; a sidecar that does not parse, the sidecar's own error.
std::unique_ptr<Tokenizer> load_tokenizer(const cmf::Reader& r, const std::string& path,
                                          std::string* missing = nullptr);

/// The task mask called `name` in `r`'s catalog, or nullptr (also for a file without masks); when
/// `available` is given, it is set to the catalog's names joined by ", " ("" without masks). The
/// one task lookup: load_model (--task) and the server (a request's cortiq.task) both use it.
const cmf::TaskMask* find_task(const cmf::Reader& r, std::string_view name, std::string* available = nullptr);

/// Opens, validates and binds. Refuses a SKILL_FILE (Error(Unsupported) naming `cortiq skill
/// apply`); binds opt.skill / opt.blend when they name skills (runtime/skills.h: unknown ids,
/// negative or zero-sum blends → Error(InvalidArgument)), the backbone for "", "auto", "none"; an unknown
/// `task` → Error(InvalidArgument) listing the available tasks, as is a `ctx` above the model's
/// max_position_embeddings; a file without a vocab section but with a sidecar tokenizer.json next to it uses
/// the sidecar.
LoadedModel load_model(const std::string& path, const LoadOptions& opt);

/// Why generation ended: "stop" (EOS id or stop string), "max_tokens", "length" (context full),
/// "cancelled".
struct GenerateResult {
  std::vector<uint32_t> ids;  ///< generated ids (EOS included when it ended the run)
  std::string text;           ///< decoded generated text (special tokens skipped, stop string cut)
  std::string finish;
  size_t prompt_tokens = 0, reused_tokens = 0;
  double ttft_s = 0.0, total_s = 0.0;
};

/// Generation settings.
struct GenerateParams {
  size_t max_tokens = 256;
  SamplerParams sampler;
  std::vector<std::string> stop_strings;
  /// When set, checked before each token is sampled: true ends the run with finish "cancelled"
  /// (the text so far is kept). A signal handler may set it (a lock-free atomic), as `run`'s
  /// interactive chat does on Ctrl-C. The prompt's prefill itself is not interrupted.
  const std::atomic<bool>* cancel = nullptr;
  /// Special tokens whose text is kept in the output (tokenizer/output_protocol.h
  /// tool_markup_specials); other special tokens write no text.
  std::vector<uint32_t> keep_special;
  /// The skill the sequence starts under (Job::skill; nullptr = LoadedModel::model as bound) and
  /// the dynamic router that may switch it between steps (Job::reroute; specialize/dynamic_route.h).
  std::shared_ptr<const SkillBinding> skill;
  std::function<std::shared_ptr<const SkillBinding>(std::span<const uint32_t> seen)> reroute;
  /// Constrains the output (Job::grammar); null = free text.
  std::shared_ptr<const Grammar> grammar;
};

class Engine;

/// One conversation / sequence over a LoadedModel: a client of the generation engine
/// (runtime/engine.h) with one slot, whose prompt cache keeps the KV across calls — a new prompt
/// that extends the previous one (prompt + generated ids) reuses the shared prefix, bit-identical
/// to a full prefill. Not thread-safe: one generate() at a time.
class Session {
 public:
  explicit Session(LoadedModel& lm);
  ~Session();
  /// Runs prompt ids then decodes. `on_text` receives streamed text pieces (never a piece of a
  /// stop string, never special tokens), on the engine's thread while this one waits. Throws
  /// Error(InvalidArgument) for an empty prompt or a prompt that does not fit the context
  /// (prompt_tokens >= ctx), and what ended the generation when it failed (e.g. NonFinite).
  GenerateResult generate(const std::vector<uint32_t>& prompt, const GenerateParams& gp,
                          const std::function<void(std::string_view)>& on_text = {});
  /// The next generate() prefills its whole prompt (nothing is taken from the cache).
  void reset();

 private:
  LoadedModel* lm_;
  std::unique_ptr<Engine> engine_;
  bool fresh_ = false;
};

/// A chat message.
struct ChatMessage {
  std::string role, content;
};

/// The model's chat template (LoadedModel::bundle) with the special-token strings it is rendered
/// with: bos_token (the BOS id's token) and eos_token (the first bundle eos id's); nullopt when
/// the file has none or it is empty. Throws jinja::TemplateError for a template that does not parse.
std::optional<ChatTemplate> chat_template_of(const LoadedModel& lm);

/// Renders `messages` with the file's chat template through ChatTemplate::apply — the one chat
/// rendering path, the server's too (transformers apply_chat_template variables: messages,
/// tools = null, add_generation_prompt = true, bos_token, eos_token, enable_thinking = false when
/// `no_think`). Throws Error(InvalidArgument) when the file has no template.
std::string render_chat(const LoadedModel& lm, const std::vector<ChatMessage>& messages, bool no_think);

}  // namespace cortiq::runtime
