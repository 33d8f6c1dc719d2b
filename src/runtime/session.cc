#include "runtime/session.h"

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "runtime/engine.h"
#include "util/error.h"

namespace cortiq::runtime {

std::vector<uint32_t> LoadedModel::encode_raw(std::string_view text) const {
  if (!tokenizer)
    fail(
        ErrorKind::Unsupported,
        "this model file has no tokenizer: no vocab section, and no tokenizer.json beside it ({} is missing)",
        missing_tokenizer.empty() ? std::string("tokenizer.json") : missing_tokenizer);
  std::vector<uint32_t> ids = tokenizer->encode(text, false);
  if (add_bos && bos_id && (ids.empty() || ids.front() != *bos_id)) ids.insert(ids.begin(), *bos_id);
  return ids;
}

const cmf::TaskMask* find_task(const cmf::Reader& r, std::string_view name, std::string* available) {
  const cmf::MaskCatalog* cat = r.masks();
  if (available) {
    available->clear();
    if (cat)
      for (const auto& x : cat->masks) *available += (available->empty() ? "" : ", ") + x.name;
  }
  return cat ? cat->find(name) : nullptr;
}

namespace {
/// For a task name that is a number: a thread count given to `--task` by mistake (threads are
/// `-t/--threads`, as in llama.cpp).
std::string threads_hint(const std::string& task) {
  const bool integer = !task.empty() && task.find_first_not_of("0123456789") == std::string::npos;
  return integer ? " (--task selects a task mask; the thread count is -t/--threads)" : "";
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const cmf::Reader& r, const std::string& path,
                                          std::string* missing) {
  const auto vocab = r.vocab();
  if (!vocab.empty()) {
    try {
      return std::make_unique<Tokenizer>(
          Tokenizer::from_json(std::string_view(reinterpret_cast<const char*>(vocab.data()), vocab.size())));
    } catch (const Error& e) {  // name the file and the section, not a tokenizer.json the user never had
      throw Error(e.kind(), fmt::format("{}: the vocab section: {} (`cortiq verify` checks its hash)", path,
                                        e.message()));
    }
  }
  const auto side = std::filesystem::path(path).parent_path() / "tokenizer.json";
  if (std::filesystem::exists(side)) return std::make_unique<Tokenizer>(Tokenizer::from_file(side.string()));
  if (missing) *missing = side.string();
  return nullptr;
}

LoadedModel load_model(const std::string& path, const LoadOptions& opt) {
  LoadedModel lm;
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    fail(ErrorKind::Io, "'{}' is a folder; cortiq runs .cmf files{}", path,
         std::filesystem::exists(std::filesystem::path(path) / "config.json", ec)
             ? fmt::format(" (convert this checkpoint first: cortiq convert {} -o model.cmf)", path)
             : std::string());
  cmf::OpenOptions oo;
  oo.map_mode = opt.no_mmap ? MapMode::Memory : MapMode::Mmap;
  lm.reader = std::make_unique<cmf::Reader>(cmf::Reader::open(path, oo));
  const cmf::Reader& r = *lm.reader;
  r.check_sections();  // header, directory, masks, vocab, index hashes: HashMismatch naming the section
  if (opt.check_tensors) {
    const std::vector<std::string> problems = r.verify();
    if (!problems.empty()) {
      std::string all = problems[0];
      for (size_t i = 1; i < problems.size(); ++i) all += "; " + problems[i];
      fail(ErrorKind::HashMismatch,
           "{}: --check-tensors: {} (the file is damaged; `cortiq verify {}` lists it)", path, all, path);
    }
  }
  if (r.is_skill_file())
    fail(ErrorKind::Unsupported,
         "'{}' is a skill file (SKILL_FILE): it holds only a skill's tensors and cannot run on its own; "
         "attach it to its base model with `cortiq skill apply`",
         path);
  const auto& arch = r.header().arch;
  lm.source = std::make_unique<model::CmfTensorSource>(r);
  lm.model_options = model::ModelOptions{
      .threads = opt.threads,
      .kernels = kernels::KernelConfig{opt.exact ? kernels::MatmulMode::Exact : kernels::MatmulMode::Fast,
                                       kernels::simd_tier()}};
  lm.model = model::Model::bind(arch, *lm.source, lm.model_options);
  lm.backbone = lm.model->weights();

  lm.tokenizer = load_tokenizer(r, path, &lm.missing_tokenizer);
  if (r.header().tokenizer_config) lm.bundle = *r.header().tokenizer_config;
  lm.eos_ids = lm.bundle.eos_token_ids;
  if (lm.tokenizer) {
    // Chat-end specials the reference also treats as EOS (FORMAT-NOTES decision 13 note).
    for (const char* s : {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>"})
      if (auto id = lm.tokenizer->token_to_id(s); id && lm.tokenizer->is_special(*id))
        lm.eos_ids.push_back(*id);
    if (lm.eos_ids.empty())
      for (const char* s : {"</s>", "<|endoftext|>", "[EOS]"})
        if (auto id = lm.tokenizer->token_to_id(s)) lm.eos_ids.push_back(*id);
  }
  lm.bos_id = lm.bundle.bos_token_id;
  if (lm.tokenizer && !lm.tokenizer->prefix_special_ids().empty()) {
    lm.add_bos = true;
    if (!lm.bos_id) lm.bos_id = lm.tokenizer->prefix_special_ids().front();
  }
  if (arch.arch_name.find("gemma") != std::string::npos && lm.bos_id) lm.add_bos = true;

  const uint64_t maxpos = arch.max_position_embeddings ? arch.max_position_embeddings : 4096;
  if (arch.max_position_embeddings && opt.ctx > arch.max_position_embeddings)
    fail(ErrorKind::InvalidArgument, "--ctx {} exceeds this model's max_position_embeddings ({})", opt.ctx,
         arch.max_position_embeddings);
  lm.ctx =
      static_cast<size_t>(opt.ctx ? std::min<uint64_t>(opt.ctx, maxpos) : std::min<uint64_t>(maxpos, 4096));
  lm.kv_f16 = opt.kv_f16;

  // Task mask (spec §5, CLI-NOTES run): default = the catalog's fallback mask; "off" = none.
  const cmf::MaskCatalog* cat = r.masks();
  if (opt.task == "off") {
    lm.active_task = "off";
  } else if (cat && !cat->masks.empty()) {
    const cmf::TaskMask* m = nullptr;
    if (opt.task.empty()) {
      for (const auto& x : cat->masks)
        if (x.priority == cmf::MaskPriority::Fallback) {
          m = &x;
          break;
        }
      if (!m) m = &cat->masks.front();
    } else {
      std::string names;
      m = find_task(r, opt.task, &names);
      if (!m)
        fail(ErrorKind::InvalidArgument, "unknown task '{}'; available tasks: {} (or 'off'){}", opt.task,
             names, threads_hint(opt.task));
    }
    lm.mask = m;
    lm.variant = lm.model->compile_variant(m);
    lm.active_task = m->name;
    lm.sparsity = m->sparsity;
  } else if (!opt.task.empty() && opt.task != "general") {
    fail(ErrorKind::InvalidArgument,
         "unknown task '{}': this file has no task masks (available: general, off){}", opt.task,
         threads_hint(opt.task));
  }

  // Skills (ENGINE-NOTES §3.12): an explicit id or blend binds here; "", "auto" and "--blend auto"
  // route on the prompt (specialize/skill_choice.h), "none" keeps the backbone.
  const bool explicit_skill =
      !opt.skill.empty() && opt.skill != "auto" && opt.skill != "none" && opt.skill != "backbone";
  if (!opt.blend.empty() && !opt.skill.empty())
    fail(ErrorKind::InvalidArgument, "--skill {} and --blend {}: choose one", opt.skill, opt.blend);
  if ((opt.skill == "auto" || opt.blend == "auto") && r.skills().empty())
    fail(ErrorKind::InvalidArgument, "--{} auto: '{}' has no skills (a flat backbone)",
         opt.skill == "auto" ? "skill" : "blend", path);
  const bool explicit_task = !opt.task.empty() && opt.task != "general";
  if (explicit_skill) bind_skill(lm, opt.skill, explicit_task);
  if (!opt.blend.empty() && opt.blend != "auto") bind_blend(lm, parse_blend(opt.blend), explicit_task);
  return lm;
}

// ---------------------------------------------------------------------------------------------

Session::Session(LoadedModel& lm) : lm_(&lm), engine_(std::make_unique<Engine>(lm, EngineOptions{1, 0})) {}
Session::~Session() = default;

void Session::reset() {
  fresh_ = true;
}

namespace {
/// What a Session's job reports back, from the engine thread.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string finish, error, text;
  std::vector<uint32_t> ids;
  std::chrono::steady_clock::time_point first;
};
}  // namespace

GenerateResult Session::generate(const std::vector<uint32_t>& prompt, const GenerateParams& gp,
                                 const std::function<void(std::string_view)>& on_text) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  if (prompt.empty()) fail(ErrorKind::InvalidArgument, "empty prompt");
  if (prompt.size() >= lm_->ctx) {
    const uint64_t maxpos = lm_->model->arch().max_position_embeddings;
    if (maxpos && lm_->ctx >= maxpos)  // --ctx cannot go higher: say so instead of suggesting it
      fail(ErrorKind::InvalidArgument,
           "the prompt is {} tokens but the context is {}, this model's max_position_embeddings: shorten it",
           prompt.size(), lm_->ctx);
    fail(ErrorKind::InvalidArgument,
         "the prompt is {} tokens but the context is {} (raise --ctx{} or shorten it)", prompt.size(),
         lm_->ctx, maxpos ? fmt::format(", up to {},", maxpos) : std::string());
  }
  auto job = std::make_shared<Job>();
  job->prompt = prompt;
  job->sampler = gp.sampler;  // its own repeat/presence penalties; the engine's stay neutral
  job->max_tokens = gp.max_tokens;
  for (const auto& st : gp.stop_strings)
    if (!st.empty()) job->stop.push_back(st);
  job->mask = engine_->default_mask();
  job->keep_special = gp.keep_special;
  job->skill = gp.skill;
  job->reroute = gp.reroute;
  job->grammar = gp.grammar;
  job->use_cache = !fresh_;
  fresh_ = false;
  auto out = std::make_shared<Outcome>();
  // gp.cancel is looked at after every token and every piece of text, on the engine thread (the
  // engine honours Job::cancel at its next step), and by the wait below.
  Job* const j = job.get();
  const std::atomic<bool>* cancel = gp.cancel;
  auto check_cancel = [j, cancel] {
    if (cancel && cancel->load(std::memory_order_relaxed)) j->cancel = true;
  };
  job->on_token = [out, check_cancel](uint32_t id) {
    {
      std::lock_guard<std::mutex> g(out->mu);
      if (out->ids.empty()) out->first = clock::now();
      out->ids.push_back(id);
    }
    check_cancel();
  };
  job->on_text = [out, &on_text, check_cancel](std::string_view t, std::vector<TokenLogprob>&&) {
    {
      std::lock_guard<std::mutex> g(out->mu);
      out->text += t;
    }
    if (on_text && !t.empty()) on_text(t);
    check_cancel();
  };
  job->on_done = [out](const std::string& finish, size_t, const std::string& error) {
    std::lock_guard<std::mutex> g(out->mu);
    out->finish = finish;
    out->error = error;
    out->done = true;
    out->cv.notify_all();
  };
  check_cancel();  // already set: the job ends at once, "cancelled"
  if (!engine_->submit(job)) fail(ErrorKind::InvalidArgument, "the session is already generating");
  {
    // A signal handler may set gp.cancel (Ctrl-C): polled here, honoured at the engine's next step.
    std::unique_lock<std::mutex> lk(out->mu);
    while (!out->cv.wait_for(lk, std::chrono::milliseconds(10), [&] { return out->done; }))
      if (gp.cancel && gp.cancel->load(std::memory_order_relaxed)) job->cancel = true;
  }
  if (out->finish == "error") {
    if (job->failure) std::rethrow_exception(job->failure);
    fail(ErrorKind::InvalidArgument, "{}", out->error);
  }
  GenerateResult res;
  res.prompt_tokens = prompt.size();
  res.reused_tokens = job->cached_tokens;
  res.ids = std::move(out->ids);
  res.text = std::move(out->text);
  // The engine says "length" for both limits; run names the one the caller set apart.
  res.finish = out->finish == "length" && res.ids.size() >= gp.max_tokens ? "max_tokens" : out->finish;
  if (!res.ids.empty()) res.ttft_s = std::chrono::duration<double>(out->first - t0).count();
  res.total_s = std::chrono::duration<double>(clock::now() - t0).count();
  return res;
}

std::optional<ChatTemplate> chat_template_of(const LoadedModel& lm) {
  if (!lm.bundle.chat_template || lm.bundle.chat_template->empty()) return std::nullopt;
  std::optional<std::string> bos, eos;
  if (lm.tokenizer) {
    if (lm.bos_id) bos = lm.tokenizer->id_to_token(*lm.bos_id);
    if (!lm.bundle.eos_token_ids.empty()) eos = lm.tokenizer->id_to_token(lm.bundle.eos_token_ids[0]);
  }
  return ChatTemplate(*lm.bundle.chat_template, bos, eos);
}

std::string render_chat(const LoadedModel& lm, const std::vector<ChatMessage>& messages, bool no_think) {
  const std::optional<ChatTemplate> tpl = chat_template_of(lm);
  if (!tpl) fail(ErrorKind::InvalidArgument, "this model has no chat template (use --raw)");
  ChatRequest req;
  for (const auto& m : messages) req.messages.push_back({{"role", m.role}, {"content", m.content}});
  if (no_think) req.enable_thinking = false;
  return tpl->apply(req);
}

}  // namespace cortiq::runtime
