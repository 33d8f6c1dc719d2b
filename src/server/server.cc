#include "server/server.h"

#include "util/error.h"

#ifdef CORTIQ_WITH_HTTPLIB

#include <fmt/format.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "cmf/format.h"
#include "model/cmf_source.h"
#include "runtime/engine.h"
#include "runtime/json_schema.h"
#include "server/api.h"
#include "server/connection.h"
#include "server/embeddings.h"
#include "server/metrics.h"
#include "server/page.h"
#include "server/shutdown.h"
#include "specialize/dynamic_route.h"
#include "specialize/skill_choice.h"
#include "specialize/skills.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/value.h"
#include "util/atomic_file.h"
#include "util/utf8.h"

namespace cortiq::server {

using runtime::Engine;
using runtime::EngineOptions;
using runtime::Job;
using runtime::TokenLogprob;

bool server_available() noexcept {
  return true;
}

namespace {

using clock_type = std::chrono::steady_clock;

/// The InFlight number of the request this worker thread is answering (set by the route wrapper),
/// and whether its handler handed that entry to a stream, whose end (the content provider's
/// releaser, on the same thread) closes it.
thread_local uint64_t t_request = 0;
thread_local bool t_streaming = false;

/// `/props`' build_info: the version, the compiler and the build type.
std::string build_info() {
#ifndef CORTIQ_VERSION_STRING
#define CORTIQ_VERSION_STRING "unknown"
#endif
#ifdef NDEBUG
  const char* type = "release";
#else
  const char* type = "debug";
#endif
  return std::string("cortiq ") + CORTIQ_VERSION_STRING + " (" + __VERSION__ + ", " + type + ")";
}

int64_t unix_now() {
  return static_cast<int64_t>(std::time(nullptr));
}

/// Events from the engine thread to an HTTP worker.
struct Channel {
  struct Event {
    std::string text;
    std::vector<TokenLogprob> lps;
    bool done = false;
    std::string finish, error;
    size_t completion_tokens = 0;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> q;

  void push(Event e) {
    {
      std::lock_guard<std::mutex> g(mu);
      q.push_back(std::move(e));
    }
    cv.notify_all();
  }
  /// Waits up to `ms` for the next event.
  std::optional<Event> pop(int ms) {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return !q.empty(); })) return std::nullopt;
    Event e = std::move(q.front());
    q.pop_front();
    return e;
  }
};

/// A SKILL_FILE's tensors as a TensorSource that keeps its reader alive (a hot-loaded skill's
/// overlay: its binding may outlive the skill's removal while requests still run it).
class OwnedCmfSource : public model::TensorSource {
 public:
  explicit OwnedCmfSource(std::shared_ptr<cmf::Reader> r) : r_(std::move(r)), src_(*r_) {}
  std::optional<kernels::WeightView> find(std::string_view name) const override { return src_.find(name); }
  void release(std::span<const uint8_t> bytes) const override { src_.release(bytes); }
  std::vector<std::string> names() const override { return src_.names(); }

 private:
  std::shared_ptr<cmf::Reader> r_;
  model::CmfTensorSource src_;
};

bool consteq(const std::string& a, const std::string& b) {
  unsigned char d = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    d |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return d == 0 && !b.empty();
}

void send_json(httplib::Response& res, int status, const ojson& j) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_body(e));
  if (e.status == 429) res.set_header("Retry-After", "1");  // a slot frees within a generation
}

ojson parse_body(const httplib::Request& req) {
  if (req.body.empty()) throw ApiError(400, "the request body is empty (expected JSON)");
  auto j = ojson::parse(req.body, nullptr, false);
  if (j.is_discarded())
    throw ApiError(400, "the request body is not valid JSON", "invalid_request_error", std::nullopt,
                   "invalid_json");
  return j;
}

class Service {
 public:
  Service(const ServerOptions& opt, InFlight& inflight)
      : opt_(opt), inflight_(inflight), lm_(runtime::load_model(opt.model_path, opt.load)) {
    if (!lm_.tokenizer)
      fail(ErrorKind::Unsupported,
           "'{}' has no tokenizer (vocab section or sidecar tokenizer.json): cannot serve text",
           opt.model_path);
    model_id_ = opt.alias.empty() ? lm_.model->arch().arch_name + "-cortiq" : opt.alias;
    if (!opt.chat_template_file.empty()) lm_.bundle.chat_template = read_file(opt.chat_template_file);
    tmpl_ = runtime::chat_template_of(lm_);  // the one chat-rendering path (run's too)
    if (tmpl_) {
      const OutputProtocol proto = OutputProtocol::of(tmpl_->source());
      tool_format_ = proto.tools;
      mistral_args_ = proto.mistral_args;
      mistral_space_ = proto.mistral_space;
      reasoning_ = opt_.split_reasoning && proto.reasoning;
    }
    keep_special_ = tool_markup_specials(*lm_.tokenizer);
    engine_ = std::make_unique<Engine>(lm_, EngineOptions{opt.parallel, opt.queue});
    // Skills (issue 30): requests route on their prompt when the server was not given one skill and
    // the file has routing descriptors; the router runs its own backbone model (the engine's is
    // the engine thread's alone).
    if (opt.load.blend == "auto")
      fail(ErrorKind::InvalidArgument,
           "serve: --blend auto blends per prompt, which the server does not do; give --blend id:w,… "
           "or --skill auto (per-request routing)");
    if (opt.route_dynamic) dyn_opt_ = specialize::DynamicOptions::from_env();
    std::lock_guard<std::mutex> g(skills_mu_);
    skills_changed();
  }

  /// After the skill set changed (skills_mu_ held): routable_, and the router model when needed.
  void skills_changed() {
    routable_ = !specialize::phi_layers(records_locked()).empty();
    if (routable_ && !router_) {
      model::ModelOptions mo = lm_.model_options;
      mo.threads = 1;
      router_ = model::Model::create(lm_.backbone, mo);
    }
  }

  /// The skills served (skills_mu_ held): the file's, then the hot-loaded ones by id.
  std::vector<cmf::SkillRecord> records_locked() const {
    std::vector<cmf::SkillRecord> out(lm_.reader->skills().begin(), lm_.reader->skills().end());
    for (const auto& [id, h] : hot_) out.push_back(h.record);
    return out;
  }
  std::vector<cmf::SkillRecord> records() {
    std::lock_guard<std::mutex> g(skills_mu_);
    return records_locked();
  }
  /// "a, b, c" — the served skill ids.
  std::string ids_locked() const {
    std::string s;
    for (const auto& r : records_locked()) s += (s.empty() ? "" : ", ") + r.id;
    return s.empty() ? "none" : s;
  }

  /// The routing decision for `prompt` over the served skills (skills_mu_ held): φ of the first ≤ 128
  /// tokens through the backbone; the file's header.routing calibration only while no skill was
  /// hot-loaded (it was fitted over the file's skill set; SPECIALIZATION-NOTES §6.3).
  specialize::RouteDecision route_locked(std::span<const uint32_t> prompt) {
    const auto recs = records_locked();
    const auto layers = specialize::phi_layers(recs);
    if (layers.empty()) return specialize::choose_skill(recs, {});
    const auto toks = prompt.first(std::min(prompt.size(), specialize::kRouteTokens));
    const auto phis = specialize::compute_phis(*router_, toks, layers);
    return specialize::choose_skill(
        recs, phis, hot_.empty() ? lm_.reader->header().routing : std::optional<nlohmann::json>{});
  }

  const runtime::LoadedModel& lm() const { return lm_; }
  Engine& engine() { return *engine_; }

  ojson model_object() const {
    return {{"id", model_id_}, {"object", "model"}, {"created", created_}, {"owned_by", "cortiq"}};
  }
  /// `<base>:<skill>` entries: one per skill of the file (issue 30).
  ojson skill_object(const cmf::SkillRecord& sk) const {
    ojson o = model_object();
    o["id"] = model_id_ + ":" + sk.id;
    o["parent"] = model_id_;
    return o;
  }
  void models(httplib::Response& res) {
    ojson data = ojson::array({model_object()});
    for (const auto& sk : records()) data.push_back(skill_object(sk));
    send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}});
  }
  /// GET /v1/models/{id}: the model object (the backbone or `<base>:<skill>`), or 404
  /// model_not_found for another id.
  void model(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
    for (const auto& sk : records())
      if (id == model_id_ + ":" + sk.id) return send_json(res, 200, skill_object(sk));
    if (id != model_id_)
      throw ApiError(404, "the model '" + id + "' does not exist; this server serves '" + model_id_ + "'",
                     "invalid_request_error", "model", "model_not_found");
    send_json(res, 200, model_object());
  }
  /// GET /v1/cortiq/skills: the file's skills (id, name, layers, overlay tensors, routable, mask).
  void skills(httplib::Response& res) {
    ojson arr = ojson::array();
    std::lock_guard<std::mutex> g(skills_mu_);
    for (const auto& sk : records_locked()) arr.push_back(skill_info(sk));
    send_json(res, 200,
              {{"default", lm_.skill.empty() ? (routable_ ? "auto" : "none") : lm_.skill},
               {"fallback", "backbone when the router is not confident (novelty)"},
               {"skills", std::move(arr)}});
  }

  /// One entry of GET /v1/cortiq/skills (skills_mu_ held).
  ojson skill_info(const cmf::SkillRecord& sk) const {
    const auto hot = hot_.find(sk.id);
    const size_t tensors = hot != hot_.end() ? hot->second.reader->tensors().size()
                                             : runtime::SkillOverlay(*lm_.reader, sk.id).names().size();
    ojson o = {{"id", sk.id},
               {"model", model_id_ + ":" + sk.id},
               {"layers", sk.layers},
               {"tensors", tensors},
               {"routable", sk.selection.has_value()},
               {"source", hot != hot_.end() ? "hot-loaded" : "file"}};
    if (hot != hot_.end()) o["path"] = hot->second.path;
    if (sk.name) o["name"] = *sk.name;
    if (sk.input_mask_task) o["input_mask_task"] = *sk.input_mask_task;
    return o;
  }

  /// Throws ApiError 401 unless the request carries the admin key (ServerOptions::admin_key, else
  /// api_key) — `Authorization: Bearer KEY` or `X-Api-Key: KEY`; open when neither key is set.
  void require_admin(const httplib::Request& req) const {
    const std::string& key = opt_.admin_key.empty() ? opt_.api_key : opt_.admin_key;
    if (key.empty()) return;
    const std::string h = req.get_header_value("Authorization");
    std::string given;
    if (h.size() > 7 && strncasecmp(h.c_str(), "bearer ", 7) == 0) given = h.substr(7);
    if (given.empty()) given = req.get_header_value("X-Api-Key");
    if (given.empty() || !consteq(given, key))
      throw ApiError(401, "this route needs the admin key (--admin-key, else --api-key)",
                     "authentication_error", std::nullopt, "invalid_admin_key");
  }

  /// POST /v1/cortiq/skills {"path": "/srv/skill.cmf", "id"?: "x", "replace"?: false, "force"?: false}:
  /// adds a SKILL_FILE (`cortiq skill export`) to the running server. Its record's base_dir_hash
  /// must be this file's directory hash (`force`: load anyway, with a warning in the answer); its
  /// tensors must have the backbone's shapes. 201 with the skill's /v1/cortiq/skills entry. Errors
  /// (the server goes on): 400 invalid_skill_file (param path: unreadable, not a SKILL_FILE, shapes),
  /// 409 skill_base_mismatch (param path), 409 skill_exists (param id; `replace` swaps a hot-loaded
  /// one), 400 for a bad field (named), 401 without the admin key.
  void add_skill(const httplib::Request& req, httplib::Response& res) {
    require_admin(req);
    const ojson b = parse_body(req);
    if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
    auto str = [&](const char* k, bool required) -> std::optional<std::string> {
      auto it = b.find(k);
      if (it == b.end() || it->is_null()) {
        if (required) throw ApiError(400, std::string("'") + k + "' is required", "invalid_request_error", k);
        return std::nullopt;
      }
      if (!it->is_string() || it->get<std::string>().empty())
        throw ApiError(400, std::string("'") + k + "' must be a non-empty string", "invalid_request_error",
                       k);
      return it->get<std::string>();
    };
    auto flag = [&](const char* k) {
      auto it = b.find(k);
      if (it == b.end() || it->is_null()) return false;
      if (!it->is_boolean())
        throw ApiError(400, std::string("'") + k + "' must be a boolean", "invalid_request_error", k);
      return it->get<bool>();
    };
    const std::string path = *str("path", true);
    const std::optional<std::string> want_id = str("id", false);
    const bool replace = flag("replace"), force = flag("force");
    for (const auto& [k, v] : b.items())
      if (k != "path" && k != "id" && k != "replace" && k != "force")
        throw ApiError(400, "unknown field '" + k + "' (path, id, replace, force)", "invalid_request_error",
                       k);
    std::shared_ptr<cmf::Reader> reader;
    try {
      reader = std::make_shared<cmf::Reader>(cmf::Reader::open(path));
    } catch (const Error& e) {
      throw ApiError(400, "cannot open the skill file: " + e.message(), "invalid_request_error", "path",
                     "invalid_skill_file");
    }
    if (!reader->is_skill_file() || reader->skills().size() != 1)
      throw ApiError(400,
                     "'" + path +
                         "' is not a skill file (a SKILL_FILE with one skill record, as `cortiq skill "
                         "export` writes)",
                     "invalid_request_error", "path", "invalid_skill_file");
    cmf::SkillRecord rec = reader->skills()[0];
    const std::string have = cmf::hex16(lm_.reader->dir_hash());
    std::string warning;
    if (!rec.base_dir_hash || *rec.base_dir_hash != have) {
      const std::string msg = "the skill file '" + path + "' was cut for another base (base_dir_hash " +
                              rec.base_dir_hash.value_or("none") + ", this model's " + have + ")";
      if (!force)
        throw ApiError(409, msg + "; send \"force\": true to load it anyway", "invalid_request_error", "path",
                       "skill_base_mismatch");
      warning = msg + ": loaded because of force";
    }
    if (want_id) rec.id = *want_id;
    try {
      specialize::check_skill_id(rec.id);
    } catch (const Error& e) {
      throw ApiError(400, e.message(), "invalid_request_error", "id");
    }
    rec.base_dir_hash.reset();
    // the overlay over the backbone: built (and its shapes checked) before anything is published
    auto bnd = std::make_shared<runtime::SkillBinding>();
    bnd->id = rec.id;
    try {
      auto ov = std::make_unique<OwnedCmfSource>(reader);
      bnd->weights = model::Weights::with_overrides(lm_.backbone, *ov);
      bnd->overlay = std::move(ov);
      model::ModelOptions mo = lm_.model_options;
      mo.threads = 1;
      bnd->model = model::Model::create(bnd->weights, mo);
    } catch (const Error& e) {
      throw ApiError(400, "the skill's tensors do not fit this model: " + e.message(),
                     "invalid_request_error", "path", "invalid_skill_file");
    }
    if (rec.input_mask_task) {
      const cmf::MaskCatalog* cat = lm_.reader->masks();
      bnd->mask = cat ? cat->find(*rec.input_mask_task) : nullptr;
      if (!bnd->mask)
        throw ApiError(400,
                       "the skill activates task mask '" + *rec.input_mask_task + "', which this model lacks",
                       "invalid_request_error", "path", "invalid_skill_file");
    }
    std::lock_guard<std::mutex> g(skills_mu_);
    const bool in_file = runtime::find_skill(*lm_.reader, rec.id) != nullptr;
    if (in_file || (hot_.count(rec.id) && !replace))
      throw ApiError(409,
                     "skill '" + rec.id + "' exists" +
                         (in_file ? " in the model file" : "; send \"replace\": true to swap it") +
                         " (send \"id\" to load it under another name)",
                     "invalid_request_error", "id", "skill_exists");
    hot_[rec.id] = {reader, rec, path};
    bindings_[rec.id] = std::move(bnd);
    skills_changed();
    ojson o = skill_info(rec);
    if (!warning.empty()) o["warning"] = warning;
    send_json(res, 201, o);
  }

  /// DELETE /v1/cortiq/skills/{id}: drops a hot-loaded skill (requests running it finish with it).
  /// 404 skill_not_found, 409 for a skill stored in the model file, 401 without the admin key.
  void remove_skill(const httplib::Request& req, httplib::Response& res) {
    require_admin(req);
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
    std::lock_guard<std::mutex> g(skills_mu_);
    if (!hot_.count(id)) {
      if (runtime::find_skill(*lm_.reader, id))
        throw ApiError(
            409, "skill '" + id + "' is stored in the model file; only hot-loaded skills can be removed",
            "invalid_request_error", "id", "skill_in_file");
      throw ApiError(404, "no skill '" + id + "' (skills: " + ids_locked() + ")", "not_found_error", "id",
                     "skill_not_found");
    }
    hot_.erase(id);
    bindings_.erase(id);
    skills_changed();
    send_json(res, 200, {{"id", id}, {"deleted", true}});
  }

  void health(httplib::Response& res) {
    const auto st = engine_->stats();
    send_json(res, 200,
              {{"status", "ok"},
               {"model", model_id_},
               {"slots", opt_.parallel},
               {"active", st.active},
               {"waiting", st.waiting},
               {"completed", st.completed},
               {"cancelled", st.cancelled},
               {"prompt_tokens", st.prompt_tokens},
               {"prompt_tokens_cached", st.reused_tokens},
               {"capabilities", {{"tools", tmpl_ && template_supports_tools(tmpl_->source())}}}});
  }

  void masks(httplib::Response& res) {
    ojson arr = ojson::array();
    const auto* cat = lm_.reader->masks();
    const auto& arch = lm_.model->arch();
    if (cat)
      for (const auto& m : cat->masks) {
        ojson q_score = nullptr, q_metric = nullptr;
        if (m.quality.is_object()) {
          if (m.quality.contains("score")) q_score = m.quality["score"];
          if (m.quality.contains("metric")) q_metric = m.quality["metric"];
        } else if (m.quality.is_number()) {
          q_score = m.quality;
        }
        size_t layers = 0;
        for (uint32_t l = 0; l < arch.num_layers; ++l) layers += m.gate(l) ? 1 : 0;
        double neurons = 0;
        if (m.ffn.rows()) neurons = static_cast<double>(m.ffn.count()) / m.ffn.rows();
        arr.push_back({{"task_id", m.task_id},
                       {"name", m.name},
                       {"sparsity", m.sparsity},
                       {"quality_score", q_score},
                       {"quality_metric", q_metric},
                       {"active_layers", layers},
                       {"active_neurons_avg", neurons},
                       {"has_hot_pack", m.has_hot_pack},
                       {"active", m.name == lm_.active_task}});
      }
    send_json(res, 200, {{"default_task", lm_.active_task}, {"masks", arr}});
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const ojson b = parse_body(req);
    if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
    std::vector<uint32_t> ids;
    if (b.contains("messages")) {
      ojson cb = b;
      auto r = parse_chat_request(cb);
      ids = lm_.tokenizer->encode(render(r, client_fd(req)), false);
    } else {
      const char* key = b.contains("content") ? "content" : b.contains("prompt") ? "prompt" : "text";
      auto it = b.find(key);
      if (it == b.end() || !it->is_string())
        throw ApiError(400, "'content' must be a string", "invalid_request_error", "content");
      bool add_special = false;  // llama.cpp server's default: the text's own tokens, no BOS
      if (auto a = b.find("add_special"); a != b.end() && !a->is_null()) {
        if (!a->is_boolean())
          throw ApiError(400, "'add_special' must be a boolean", "invalid_request_error", "add_special");
        add_special = a->get<bool>();
      }
      const std::string s = it->get<std::string>();
      ids = add_special ? lm_.encode_raw(s) : lm_.tokenizer->encode(s, false);
    }
    bool with_pieces = false;
    if (auto w = b.find("with_pieces"); w != b.end() && !w->is_null()) {
      if (!w->is_boolean())
        throw ApiError(400, "'with_pieces' must be a boolean", "invalid_request_error", "with_pieces");
      with_pieces = w->get<bool>();
    }
    if (!with_pieces) {
      send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}});
      return;
    }
    // llama.cpp's shape: {id, piece}, the piece a string, or its bytes when it is part of a
    // UTF-8 character (Tokenizer::token_bytes)
    ojson toks = ojson::array();
    for (uint32_t id : ids) {
      const std::string raw = lm_.tokenizer->token_bytes(id);
      toks.push_back({{"id", id}, {"piece", is_valid_utf8(raw) ? ojson(raw) : byte_list(raw)}});
    }
    send_json(res, 200, {{"tokens", std::move(toks)}, {"count", ids.size()}});
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const ojson b = parse_body(req);
    if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array())
      throw ApiError(400, "'tokens' must be an array of token ids", "invalid_request_error", "tokens");
    std::vector<uint32_t> ids;
    for (const auto& x : b["tokens"]) {
      if (!x.is_number_integer() && !x.is_number_unsigned())
        throw ApiError(400, "'tokens' must be an array of token ids", "invalid_request_error", "tokens");
      const int64_t v = x.get<int64_t>();
      if (v < 0 || static_cast<uint64_t>(v) >= lm_.tokenizer->vocab_size())
        throw ApiError(400, "token id " + std::to_string(v) + " is out of the vocabulary",
                       "invalid_request_error", "tokens");
      ids.push_back(static_cast<uint32_t>(v));
    }
    bool skip = true;  // text round trips by default; false shows <|im_start|>, <s>, …
    if (auto it = b.find("skip_special_tokens"); it != b.end() && !it->is_null()) {
      if (!it->is_boolean())
        throw ApiError(400, "'skip_special_tokens' must be a boolean", "invalid_request_error",
                       "skip_special_tokens");
      skip = it->get<bool>();
    }
    send_json(res, 200, {{"content", lm_.tokenizer->decode(ids, skip)}});
  }

  // ---- embeddings, metrics, props, the chat page (issue 33) ------------------------------

  Metrics& metrics() { return metrics_; }

  /// POST /v1/embeddings (server/embeddings.h). Runs on the calling worker with its own Model over
  /// the engine's weights (one request at a time), not in the engine's slots.
  void embeddings(const httplib::Request& req, httplib::Response& res) {
    const EmbeddingRequest r = parse_embedding_request(parse_body(req));
    if (const std::string why = runtime::embedding_unusable(*lm_.model); !why.empty())
      throw ApiError(400, "this model has no usable hidden state for embeddings: " + why,
                     "invalid_request_error", "model", "embeddings_unsupported");
    const size_t hd = lm_.model->arch().hidden_size;
    if (r.dimensions && *r.dimensions != hd)
      throw ApiError(400,
                     "'dimensions' " + std::to_string(*r.dimensions) + " is not this model's hidden size " +
                         std::to_string(hd) + " (vectors are not truncated)",
                     "invalid_request_error", "dimensions");
    std::vector<std::vector<uint32_t>> toks;
    for (const auto& in : r.inputs) {
      std::vector<uint32_t> ids = in.is_text ? lm_.encode_raw(in.text) : in.ids;
      for (uint32_t v : ids)
        if (v >= lm_.model->vocab_size())
          throw ApiError(400, "token id " + std::to_string(v) + " is out of the vocabulary",
                         "invalid_request_error", "input");
      if (ids.empty()) throw ApiError(400, "an input has no tokens", "invalid_request_error", "input");
      if (ids.size() > lm_.ctx)
        throw ApiError(400,
                       "an input is " + std::to_string(ids.size()) + " tokens; the context holds " +
                           std::to_string(lm_.ctx),
                       "invalid_request_error", "input", "context_length_exceeded");
      toks.push_back(std::move(ids));
    }
    ojson data = ojson::array();
    size_t n = 0;
    {
      std::lock_guard<std::mutex> g(embed_mu_);
      if (!embedder_) embedder_ = model::Model::create(lm_.model->weights(), lm_.model_options);
      for (size_t i = 0; i < toks.size(); ++i) {
        std::vector<float> v;
        try {
          v = runtime::embed_sequence(*embedder_, toks[i], r.pooling, true, lm_.variant.get());
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::NonFinite) throw;
          throw ApiError(400, e.what(), "invalid_request_error", "input");
        }
        n += toks[i].size();
        data.push_back({{"object", "embedding"},
                        {"index", i},
                        {"embedding", r.base64 ? ojson(floats_base64(v)) : ojson(v)}});
      }
    }
    metrics_.embedded(n);
    send_json(res, 200,
              {{"object", "list"},
               {"data", std::move(data)},
               {"model", r.model.empty() ? model_id_ : r.model},
               {"usage", {{"prompt_tokens", n}, {"total_tokens", n}}}});
  }

  /// GET /metrics: Prometheus text (server/metrics.h).
  void metrics_page(httplib::Response& res) {
    const auto st = engine_->stats();
    res.status = 200;
    res.set_content(metrics_.render({st.waiting, st.active, opt_.parallel, inflight_.size()}),
                    "text/plain; version=0.0.4; charset=utf-8");
  }

  /// GET /props: llama-server's shape where it has one (default_generation_settings, total_slots,
  /// model_path, chat_template, build_info) and Cortiq's own (model id, tasks, skills).
  void props(httplib::Response& res) {
    const SamplingOptions d;                                             // a request's defaults
    auto num = [](float f) { return std::stod(fmt::format("{}", f)); };  // 0.7, not 0.699999988
    const auto& a = lm_.model->arch();
    ojson tasks = ojson::array();
    if (const auto* cat = lm_.reader->masks())
      for (const auto& m : cat->masks) tasks.push_back(m.name);
    ojson skills = ojson::array();
    for (const auto& sk : lm_.reader->skills()) skills.push_back(sk.id);
    send_json(res, 200,
              {{"model", model_id_},
               {"model_path", opt_.model_path},
               {"arch", a.arch_name},
               {"n_ctx", lm_.ctx},
               {"n_vocab", lm_.model->vocab_size()},
               {"n_embd", a.hidden_size},
               {"n_layer", a.num_layers},
               {"total_slots", opt_.parallel},
               {"queue", opt_.queue},
               {"default_generation_settings",
                {{"n_ctx", lm_.ctx},
                 {"params",
                  {{"temperature", num(d.sampler.temperature)},
                   {"top_k", d.sampler.top_k},
                   {"top_p", num(d.sampler.top_p)},
                   {"min_p", num(d.sampler.min_p)},
                   {"repeat_penalty", num(d.repeat_penalty)}}}}},
               {"chat_template", tmpl_ ? ojson(tmpl_->source()) : ojson(nullptr)},
               {"has_chat_template", static_cast<bool>(tmpl_)},
               {"default_task", lm_.active_task},
               {"tasks", std::move(tasks)},
               {"skills", std::move(skills)},
               {"api_key_required", !opt_.api_key.empty()},
               {"embeddings", runtime::embedding_unusable(*lm_.model).empty()},
               {"build_info", build_info()},
               {"modalities", {{"vision", false}, {"audio", false}}}});
  }

  // ---- generation -------------------------------------------------------------------------

  void chat(const httplib::Request& req, httplib::Response& res) {
    const ojson b = parse_body(req);
    auto r = parse_chat_request(b);
    const bool tools = !r.tools.is_null();
    ToolContext tctx{tool_format_, {}};
    if (tools)
      for (const auto& t : r.tools) tctx.names.push_back(t["function"]["name"].get<std::string>());
    // tool_choice required / a name: the answer starts with the call's opening (forced_tool_prefix),
    // and the generated text is parsed with it in front.
    const std::string forced =
        forced_tool_prefix(r.tool_choice, tools, tool_format_, mistral_args_, mistral_space_);
    if (!forced.empty()) {  // the call is constrained to the function's parameters schema
      if (r.sampling.grammar)
        throw ApiError(400,
                       "tool_choice 'required' or a function excludes 'grammar' and a JSON response_format",
                       "invalid_request_error", "tool_choice");
      try {
        r.sampling.grammar = runtime::Grammar::parse(
            runtime::tool_call_gbnf(r.tools, r.tool_choice, static_cast<int>(tool_format_), mistral_args_));
      } catch (const Error& e) {
        throw ApiError(400, "tools: " + e.message(), "invalid_request_error", "tools");
      }
    }
    const int fd = client_fd(req);
    const std::string prompt = render(r, fd) + forced;
    // a generation prompt ending in <think> (DeepSeek-R1, QwQ) starts the answer inside the block
    const bool think_inside = reasoning_ && forced.empty() && prompt_opens_reasoning(prompt);
    auto job = make_job(lm_.tokenizer->encode(prompt, false), r.sampling, r.task, "messages");
    std::string fp = pick_skill(*job, r.model, r.skill, r.task.has_value());
    const bool want_lp = r.sampling.logprobs;
    Generation g = start(req, std::move(job), r.model, "chatcmpl-", fd, std::move(fp));
    if (!r.stream) {
      std::string out;
      ojson lps = ojson::array();
      const Channel::Event done = collect(g, [&](const Channel::Event& e) {
        out += e.text;
        for (const auto& t : e.lps) lps.push_back(chat_logprob(t));
      });
      ojson msg = {{"role", "assistant"}};
      std::string finish = done.finish;
      out = forced + out;
      std::optional<std::string> reasoning;
      if (reasoning_)
        if (ReasoningSplit sp = split_reasoning(out, think_inside); sp.found) {
          reasoning = std::move(sp.reasoning);
          out = std::move(sp.content);
        }
      ToolParse tp{out, {}};
      if (tools) tp = parse_tool_calls(out, true, tctx);
      msg["content"] =
          tp.calls.empty() ? ojson(out) : (tp.content.empty() ? ojson(nullptr) : ojson(tp.content));
      if (reasoning) msg["reasoning_content"] = *reasoning;
      if (!tp.calls.empty()) {
        msg["tool_calls"] = tool_calls_json(tp.calls, false);
        finish = "tool_calls";
      }
      msg["refusal"] = nullptr;
      ojson choice = {{"index", 0}, {"message", msg}};
      choice["logprobs"] = want_lp ? chat_logprobs(std::move(lps)) : ojson(nullptr);
      choice["finish_reason"] = finish;
      send_json(res, 200, completion_body(g, "chat.completion", std::move(choice), done.completion_tokens));
      return;
    }
    // Streaming: a reasoning model's <think> block goes out as reasoning_content deltas
    // (ReasoningStream holds back partial tags); content is held back from where tool-call markup
    // may begin (sent as tool_calls at the end when it parses, as content otherwise).
    struct Held {
      ReasoningStream rs;
      std::string full;  // the content so far (after any reasoning block)
      size_t sent = 0;   // bytes of `full` sent as content
    };
    auto st = std::make_shared<Held>(Held{ReasoningStream(reasoning_, think_inside), {}, 0});
    st->full = st->rs.feed(forced).content;  // tool-call markup: never reasoning
    ChunkSource src;
    src.opening = [] {
      return std::vector<ojson>{delta_choice({{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}})};
    };
    src.text = [this, st, tools, want_lp, fmt = tool_format_](const Channel::Event& e) {
      const ReasoningStream::Delta d = st->rs.feed(e.text);
      st->full += d.content;
      size_t upto = st->full.size();
      if (tools) upto = std::min(upto, tool_markup_start(st->full, true, fmt));
      ojson lp = nullptr;
      if (want_lp && !e.lps.empty()) {
        ojson arr = ojson::array();
        for (const auto& t : e.lps) arr.push_back(chat_logprob(t));
        lp = chat_logprobs(std::move(arr));
      }
      std::vector<ojson> out;
      if (!d.reasoning.empty())
        out.push_back(delta_choice({{"reasoning_content", d.reasoning}}, std::move(lp)));
      if (upto > st->sent || (out.empty() && !lp.is_null())) {
        const std::string piece =
            upto > st->sent ? st->full.substr(st->sent, upto - st->sent) : std::string();
        st->sent = std::max(st->sent, upto);
        out.push_back(delta_choice({{"content", piece}}, out.empty() ? std::move(lp) : ojson(nullptr)));
      }
      return out;
    };
    src.closing = [st, tools, tctx](const Channel::Event& e) {
      std::vector<ojson> out;
      std::string finish = e.finish;
      const ReasoningStream::Delta d = st->rs.finish();
      if (!d.reasoning.empty()) out.push_back(delta_choice({{"reasoning_content", d.reasoning}}));
      st->full += d.content;
      ToolParse tp;
      if (tools) tp = parse_tool_calls(std::string_view(st->full), true, tctx);
      if (!tp.calls.empty()) {
        finish = "tool_calls";
        out.push_back(delta_choice({{"tool_calls", tool_calls_json(tp.calls, true)}}));
      } else if (st->full.size() > st->sent) {
        out.push_back(delta_choice({{"content", st->full.substr(st->sent)}}));
      }
      out.push_back(delta_choice(ojson::object(), nullptr, finish));
      return out;
    };
    stream(res, std::move(g), "chat.completion.chunk", r.include_usage, std::move(src));
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    const ojson b = parse_body(req);
    auto r = parse_completion_request(b);
    std::vector<uint32_t> ids;
    if (r.prompt_text) {
      ids = lm_.encode_raw(*r.prompt_text);
    } else {
      ids = *r.prompt_ids;
      for (uint32_t v : ids)
        if (v >= lm_.model->vocab_size())
          throw ApiError(400,
                         "token id " + std::to_string(v) + " is out of the vocabulary (" +
                             std::to_string(lm_.model->vocab_size()) + ")",
                         "invalid_request_error", "prompt");
    }
    auto job = make_job(std::move(ids), r.sampling, r.task, "prompt");
    const std::string echo =
        r.echo ? (r.prompt_text ? *r.prompt_text : lm_.tokenizer->decode(job->prompt, true)) : "";
    const bool want_lp = r.sampling.logprobs;
    // echo + logprobs scores the prompt too (lm-evaluation-harness's loglikelihood requests): its
    // tokens lead the logprobs, the first with null; text_offset is each token's place in the text.
    const bool scored = r.echo && want_lp;
    job->prompt_logprobs = scored;
    std::string fp = pick_skill(*job, r.model, r.skill, r.task.has_value());
    Generation g = start(req, std::move(job), r.model, "cmpl-", client_fd(req), std::move(fp));
    if (!r.stream) {
      std::string out = echo;
      std::vector<TokenLogprob> gen;
      const Channel::Event done = collect(g, [&](const Channel::Event& e) {
        out += e.text;
        gen.insert(gen.end(), e.lps.begin(), e.lps.end());
      });
      ojson lp = empty_completion_logprobs();
      size_t offset = jinja::utf8_length(echo);
      if (scored) add_prompt_logprobs(lp, *g.job);
      for (const auto& t : gen) add_completion_logprob(lp, t, offset);
      send_json(res, 200,
                completion_body(g, "text_completion",
                                text_choice(out, want_lp ? std::move(lp) : ojson(nullptr), done.finish),
                                done.completion_tokens));
      return;
    }
    auto offset = std::make_shared<size_t>(jinja::utf8_length(echo));
    // A scored prompt's echo chunk waits for the scores: it goes out with the first event.
    auto echo_due = std::make_shared<bool>(scored);
    auto scored_echo = [this, echo, echo_due, job = g.job](std::vector<ojson>& out) {
      if (!*echo_due) return;
      *echo_due = false;
      ojson lp = empty_completion_logprobs();
      add_prompt_logprobs(lp, *job);
      out.push_back(text_choice(echo, std::move(lp)));
    };
    ChunkSource src;
    src.opening = [echo, scored] {
      return echo.empty() || scored ? std::vector<ojson>{} : std::vector<ojson>{text_choice(echo)};
    };
    src.text = [this, offset, want_lp, scored_echo](const Channel::Event& e) {
      std::vector<ojson> out;
      scored_echo(out);
      ojson lp = nullptr;
      if (want_lp) {
        lp = empty_completion_logprobs();
        for (const auto& t : e.lps) add_completion_logprob(lp, t, *offset);
      }
      out.push_back(text_choice(e.text, std::move(lp)));
      return out;
    };
    src.closing = [scored_echo](const Channel::Event& e) {
      std::vector<ojson> out;
      scored_echo(out);
      out.push_back(text_choice("", nullptr, e.finish));
      return out;
    };
    stream(res, std::move(g), "text_completion", r.include_usage, std::move(src));
  }

 private:
  /// A generation request once queued: the identity its response carries, the job, the channel its
  /// events arrive on, and the client's connection (for disconnect detection).
  struct Generation {
    std::string id, model;
    int64_t created = 0;
    size_t prompt_tokens = 0;
    std::shared_ptr<Job> job;
    std::shared_ptr<Channel> ch;
    int fd = -1;                          ///< the client's socket; -1 = not found (no disconnect detection)
    std::string route;                    ///< "POST /v1/…", for --log-requests
    clock_type::time_point started = {};  ///< when the request was queued
    /// system_fingerprint: which skill ran ("skill:<id>", "backbone", "blend:…"); "" = null (a file
    /// without skills).
    std::string fingerprint;
  };

  /// The route-specific part of an SSE response: the `choices[0]` object of each chunk to send
  /// before the first event, for a text event, and for the final (non-error) event.
  struct ChunkSource {
    std::function<std::vector<ojson>()> opening;
    std::function<std::vector<ojson>(const Channel::Event&)> text;
    std::function<std::vector<ojson>(const Channel::Event&)> closing;
  };

  /// The client's socket of `req` (find_connection_fd; -1 when not found), noted in the request's
  /// InFlight entry so a shutdown can cut it.
  int client_fd(const httplib::Request& req) {
    const int fd = find_connection_fd(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    inflight_.set_fd(t_request, fd);
    return fd;
  }

  /// Queues `job` (429 when the wait queue is full) and names its response: id = `id_prefix` + 24
  /// random alphanumerics, model = the request's `model` or ours. `fd`: the client's socket.
  Generation start(const httplib::Request& req, std::shared_ptr<Job> job, const std::string& model,
                   std::string_view id_prefix, int fd, std::string fingerprint = {}) {
    Generation g;
    g.fingerprint = std::move(fingerprint);
    g.model = model.empty() ? model_id_ : model;
    g.id = random_id(id_prefix);
    g.created = unix_now();
    g.prompt_tokens = job->prompt.size();
    g.ch = attach(job);
    watch(*job);
    g.fd = fd;
    g.route = req.method + " " + req.path;
    g.started = clock_type::now();
    inflight_.attach(t_request, g.id, job, fd);  // a shutdown names it and can cancel it from here on
    if (!engine_->submit(job)) throw busy();
    g.job = std::move(job);
    return g;
  }

  /// Waits for the end of a non-stream generation, handing every text event to `on_text`. Cancels
  /// the job when the client hangs up (checked before every wait, so at least once per decoded token
  /// and every 100 ms while queued). Returns the final event; throws ApiError(500) for a failed
  /// generation, ApiError(503) for one the shutdown cancelled and ApiError(499, nginx's "client
  /// closed request") for one the client cancelled.
  Channel::Event collect(const Generation& g, const std::function<void(const Channel::Event&)>& on_text) {
    for (;;) {
      if (!g.job->cancel.load() && peer_gone(g.fd)) g.job->cancel = true;
      auto e = g.ch->pop(100);
      if (!e) continue;
      if (!e->done) {
        on_text(*e);
        continue;
      }
      if (e->finish == "error") throw ApiError(500, "generation failed: " + e->error, "server_error");
      if (e->finish == "cancelled" && inflight_.cancelling()) throw shutting_down("generation");
      if (e->finish == "cancelled")
        throw ApiError(499, "the client closed the connection; generation cancelled", "server_error");
      return std::move(*e);
    }
  }

  /// A non-stream response (OpenAI `chat.completion` / `text_completion` object) with one choice.
  static ojson completion_body(const Generation& g, const char* object, ojson choice,
                               size_t completion_tokens) {
    return {{"id", g.id},
            {"object", object},
            {"created", g.created},
            {"model", g.model},
            {"choices", ojson::array({std::move(choice)})},
            {"usage", usage(g.prompt_tokens, completion_tokens, g.job->cached_tokens)},
            {"system_fingerprint", g.fingerprint.empty() ? ojson(nullptr) : ojson(g.fingerprint)}};
  }

  /// Answers with Server-Sent Events: every chunk is an `object` (`chat.completion.chunk` /
  /// `text_completion`) carrying one choice from `src`, with `"usage": null` when `include_usage`;
  /// then, with `include_usage`, a chunk with no choices and the usage; then `data: [DONE]`. A failed
  /// generation sends an error event and [DONE], as does one the shutdown cancelled and any
  /// exception while writing (cpp-httplib calls the provider outside its handler's try, so one
  /// escaping would end the process). A client that hangs up (failed write, or the socket found
  /// closed while no event came for 100 ms) cancels the job. The stream's end closes the request's
  /// InFlight entry.
  void stream(httplib::Response& res, Generation g, const char* object, bool include_usage, ChunkSource src) {
    auto envelope = [g, object, include_usage](ojson choices) {
      ojson c = {{"id", g.id},
                 {"object", object},
                 {"created", g.created},
                 {"model", g.model},
                 {"system_fingerprint", g.fingerprint.empty() ? ojson(nullptr) : ojson(g.fingerprint)},
                 {"choices", std::move(choices)}};
      if (include_usage) c["usage"] = nullptr;
      return c;
    };
    auto opened = std::make_shared<bool>(false);
    auto job = g.job;
    InFlight* inflight = &inflight_;
    t_streaming = true;  // the releaser below ends the entry
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [g, src, envelope, include_usage, opened, inflight](size_t, httplib::DataSink& sink) -> bool {
          auto write = [&](const std::string& s) {
            if (!sink.write(s.data(), s.size())) {
              g.job->cancel = true;
              return false;
            }
            return true;
          };
          auto write_choices = [&](const std::vector<ojson>& choices) {
            for (const auto& c : choices)
              if (!write(sse_event(envelope(ojson::array({c}))))) return false;
            return true;
          };
          try {
            if (!*opened) {
              *opened = true;
              if (!write_choices(src.opening())) return false;
            }
            auto e = g.ch->pop(100);
            if (!e) {
              if ((sink.is_writable && !sink.is_writable()) || peer_gone(g.fd)) {
                g.job->cancel = true;
                return false;
              }
              return true;
            }
            if (!e->done) return write_choices(src.text(*e));
            if (e->finish == "error") {
              write(sse_event(error_body(ApiError(500, "generation failed: " + e->error, "server_error"))));
            } else if (e->finish == "cancelled" && inflight->cancelling()) {
              write(sse_event(error_body(shutting_down("generation"))));
            } else {
              if (!write_choices(src.closing(*e))) return false;
              if (include_usage) {
                ojson u = envelope(ojson::array());
                u["usage"] = usage(g.prompt_tokens, e->completion_tokens, g.job->cached_tokens);
                if (!write(sse_event(u))) return false;
              }
            }
            write("data: [DONE]\n\n");
            sink.done();
            return true;
          } catch (...) {
            g.job->cancel = true;
            try {
              write(sse_event(error_body(api_error_of(std::current_exception()))));
              write("data: [DONE]\n\n");
              sink.done();
              return true;
            } catch (...) {
              return false;  // cpp-httplib closes the connection
            }
          }
        },
        [job, log = opt_.log_requests, route = g.route, started = g.started, inflight,
         rid = t_request](bool success) {
          job->cancel = true;
          try {
            inflight->end(rid, 200);
          } catch (...) {  // a releaser runs in a destructor: nothing may escape it
          }
          // a streamed answer is logged when it ends (the route's handler returned at its start)
          if (log)
            std::fprintf(stderr, "%s -> 200 stream %s (%.1f ms)\n", route.c_str(),
                         success ? "done" : "cut off",
                         std::chrono::duration<double, std::milli>(clock_type::now() - started).count());
        });
  }

  /// A `chat.completion.chunk` choice: {index, delta, logprobs, finish_reason}.
  static ojson delta_choice(ojson delta, ojson logprobs = nullptr, ojson finish = nullptr) {
    return {{"index", 0},
            {"delta", std::move(delta)},
            {"logprobs", std::move(logprobs)},
            {"finish_reason", std::move(finish)}};
  }

  /// A `text_completion` choice (non-stream and stream alike): {text, index, logprobs, finish_reason}.
  static ojson text_choice(const std::string& text, ojson logprobs = nullptr, ojson finish = nullptr) {
    return {{"text", text},
            {"index", 0},
            {"logprobs", std::move(logprobs)},
            {"finish_reason", std::move(finish)}};
  }

  /// A chat choice's `logprobs`: {content: [per-token entries], refusal: null}.
  static ojson chat_logprobs(ojson content) {
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }

  /// A completion choice's `logprobs` before any token: {tokens, token_logprobs, top_logprobs, text_offset}.
  static ojson empty_completion_logprobs() {
    return {{"tokens", ojson::array()},
            {"token_logprobs", ojson::array()},
            {"top_logprobs", ojson::array()},
            {"text_offset", ojson::array()}};
  }
  /// The answer to a request the shutdown cancelled while `what` ("generation") was running.
  static ApiError shutting_down(const std::string& what) {
    return ApiError(503, "the server is shutting down: the " + what + " was cancelled", "server_error",
                    std::nullopt, "server_shutting_down");
  }
  static ApiError busy() {
    return ApiError(429, "the server is busy: every slot is in use and the wait queue is full; retry later",
                    "rate_limit_error", std::nullopt, "queue_full");
  }

  /// OpenAI's usage object; `cached`: prompt tokens served from the prompt cache.
  static ojson usage(size_t p, size_t c, size_t cached) {
    return {{"prompt_tokens", p},
            {"completion_tokens", c},
            {"total_tokens", p + c},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  /// The request's prompt from the chat template. The render stops (TemplateError(Cancelled)) when
  /// the client on `fd` hangs up or a shutdown cancels the requests in flight.
  std::string render(const ChatCompletionRequest& r, int fd) {
    if (!tmpl_) throw ApiError(400, "this model has no chat template: use /v1/completions with a raw prompt");
    if (!r.tools.is_null() && !template_supports_tools(tmpl_->source()))
      throw ApiError(400,
                     "this model's chat template does not support tools (it never reads 'tools'), so the "
                     "model would not see them: send the request without tools, or serve with "
                     "--chat-template-file naming a template that has them",
                     "invalid_request_error", "tools");
    ChatRequest cr;
    cr.messages = r.messages;
    if (tool_format_ == ToolFormat::Mistral) mistral_call_ids(cr.messages);  // its templates want 9 alnum ids
    cr.tools = r.tools;
    cr.enable_thinking = r.enable_thinking;
    cr.jinja.cancelled = [this, fd] { return inflight_.cancelling() || peer_gone(fd); };
    try {
      return tmpl_->apply(cr);
    } catch (const jinja::TemplateError& e) {
      if (e.tpl_kind() != jinja::TplErrorKind::Cancelled)
        throw ApiError(400, "the chat template rejected the messages: " + e.message());
      if (inflight_.cancelling()) throw shutting_down("chat template render");
      throw ApiError(499, "the client closed the connection; the chat template render was cancelled",
                     "server_error");
    } catch (const Error& e) {
      throw ApiError(400, "the chat template rejected the messages: " + e.message());
    }
  }

  /// The binding of skill `id` ("" = the backbone), made once and shared by the jobs that run it.
  /// Unknown id → ApiError 404 skill_not_found listing the known ones. skills_mu_ held.
  std::shared_ptr<const runtime::SkillBinding> binding(const std::string& id) {
    auto it = bindings_.find(id);
    if (it != bindings_.end()) return it->second;
    if (!id.empty() && !runtime::find_skill(*lm_.reader, id))  // hot-loaded ones are in bindings_
      throw ApiError(404,
                     "unknown skill '" + id + "'; skills of this model: " + ids_locked() + " (or auto, none)",
                     "not_found_error", "cortiq.skill", "skill_not_found");
    return bindings_[id] = runtime::make_skill_binding(lm_, id);
  }

  /// Chooses the skill `job` runs (issue 30): `cortiq.skill` (an id, "auto", "none"), else a
  /// `model` of the form `<base>:<skill>`, else the server's --skill/--blend, else routing on the
  /// prompt when the file's skills carry descriptors (the backbone when the router is not
  /// confident — the reference never routes in its server). A skill's input_mask_task becomes the
  /// job's mask unless the request named a task. Returns the system_fingerprint ("" for a file
  /// without skills).
  std::string pick_skill(Job& job, const std::string& model, const std::optional<std::string>& skill,
                         bool task_given) {
    if (records().empty()) {
      if (skill && *skill != "none" && *skill != "backbone")
        throw ApiError(404, "this model has no skills (cortiq.skill '" + *skill + "')", "not_found_error",
                       "cortiq.skill", "skill_not_found");
      return "";
    }
    std::string want;
    if (skill) {
      want = *skill;
    } else if (model.size() > model_id_.size() + 1 &&
               model.compare(0, model_id_.size() + 1, model_id_ + ":") == 0) {
      want = model.substr(model_id_.size() + 1);
    } else if (!lm_.skill.empty()) {  // the server's own --skill / --blend: the engine's model
      return lm_.skill == "blend" ? "blend:" + runtime::describe_blend(lm_.blend) : "skill:" + lm_.skill;
    } else {
      const std::string& d = opt_.load.skill;  // "" (route when possible), "auto" or "none"
      want = d == "none" || d == "backbone" || !routable_ ? "none" : "auto";
    }
    std::lock_guard<std::mutex> g(skills_mu_);
    std::string fp;
    if (want == "auto") {
      if (!routable_)
        throw ApiError(400, "cortiq.skill 'auto': no skill of this model has a routing descriptor",
                       "invalid_request_error", "cortiq.skill");
      const specialize::RouteDecision d = route_locked(job.prompt);
      want = d.chosen;
      fp = d.chosen.empty() ? "backbone (routed: novelty)" : "skill:" + d.chosen + " (routed)";
      if (opt_.route_dynamic) {  // the sequence carries its skill and may switch between steps
        auto router = std::make_shared<specialize::DynamicRouter>(*router_, records_locked(), want, dyn_opt_);
        auto route = specialize::make_dynamic_route(lm_, router, {},
                                                    [this](const std::string& id) { return binding(id); });
        job.skill = route.initial;
        job.reroute = [this, inner = std::move(route.reroute)](std::span<const uint32_t> seen) {
          std::lock_guard<std::mutex> lk(skills_mu_);  // the router model and bindings_ are shared
          return inner(seen);
        };
        if (job.skill->mask && !task_given) job.mask = job.skill->mask;
        return fp + " (dynamic)";
      }
    } else if (want == "none" || want == "backbone") {
      want.clear();
    }
    if (fp.empty()) fp = want.empty() ? "backbone" : "skill:" + want;
    if (want.empty() && lm_.skill.empty()) return fp;  // the engine's model is the backbone
    job.skill = binding(want);
    if (job.skill->mask && !task_given) job.mask = job.skill->mask;
    return fp;
  }

  const cmf::TaskMask* resolve_task(const std::optional<std::string>& task) {
    if (!task || *task == lm_.active_task) return engine_->default_mask();
    if (*task == "off") return nullptr;
    std::string names;
    const cmf::TaskMask* m = runtime::find_task(*lm_.reader, *task, &names);
    if (!m) {
      throw ApiError(
          404,
          "unknown task '" + *task + "'; available: " + (names.empty() ? lm_.active_task : names) + ", off",
          "not_found_error", "cortiq.task", "task_not_found");
    }
    return m;
  }

  /// `param`: the request field the prompt came from ("messages" or "prompt"), named in errors.
  std::shared_ptr<Job> make_job(std::vector<uint32_t> prompt, const SamplingOptions& s,
                                const std::optional<std::string>& task, const char* param) {
    if (prompt.empty()) throw ApiError(400, "the prompt is empty (0 tokens)", "invalid_request_error", param);
    const size_t ctx = lm_.ctx;
    if (prompt.size() >= ctx)
      throw ApiError(400,
                     "the prompt is " + std::to_string(prompt.size()) + " tokens; the context holds " +
                         std::to_string(ctx) + " tokens, so a prompt may have at most " +
                         std::to_string(ctx - 1) + " (one position is left to generate)",
                     "invalid_request_error", param, "context_length_exceeded");
    auto job = std::make_shared<Job>();
    job->mask = resolve_task(task);
    job->prompt = std::move(prompt);
    job->sampler = s.sampler;
    job->repeat_penalty = s.repeat_penalty;
    job->frequency_penalty = s.frequency_penalty;
    job->presence_penalty = s.presence_penalty;
    for (const auto& [id, bias] : s.logit_bias)
      if (id >= lm_.model->vocab_size())
        throw ApiError(400,
                       "logit_bias token id " + std::to_string(id) + " is out of the vocabulary (" +
                           std::to_string(lm_.model->vocab_size()) + ")",
                       "invalid_request_error", "logit_bias");
    job->logit_bias = s.logit_bias;
    const size_t room = ctx - job->prompt.size();
    job->max_tokens = std::min(room, s.max_tokens.value_or(room));
    job->stop = s.stop;
    job->top_logprobs = s.logprobs ? s.top_logprobs : -1;
    job->keep_special = keep_special_;
    job->grammar = s.grammar ? s.grammar : opt_.grammar;
    return job;
  }

  /// Feeds `job`'s time to first token, tokens and finish into metrics_ (chains its on_token and
  /// on_done). Called before the job is submitted.
  void watch(Job& job) {
    struct Times {
      clock_type::time_point queued = clock_type::now(), first{};
      bool got_first = false;
    };
    auto t = std::make_shared<Times>();
    job.on_token = [this, t, prev = std::move(job.on_token)](uint32_t id) {
      if (!t->got_first) {
        t->got_first = true;
        t->first = clock_type::now();
        metrics_.first_token(std::chrono::duration<double>(t->first - t->queued).count());
      }
      if (prev) prev(id);
    };
    Job* jp = &job;  // the callback lives in the job
    job.on_done = [this, t, jp, prev = std::move(job.on_done)](const std::string& finish, size_t n,
                                                               const std::string& err) {
      metrics_.prompt(jp->prompt.size(), jp->cached_tokens);
      const double decode =
          t->got_first ? std::chrono::duration<double>(clock_type::now() - t->first).count() : 0.0;
      metrics_.generation(finish, n, decode);
      if (prev) prev(finish, n, err);
    };
  }

  static std::shared_ptr<Channel> attach(const std::shared_ptr<Job>& job) {
    auto ch = std::make_shared<Channel>();
    job->on_text = [ch](std::string_view t, std::vector<TokenLogprob>&& lps) {
      Channel::Event e;
      e.text = std::string(t);
      e.lps = std::move(lps);
      ch->push(std::move(e));
    };
    job->on_done = [ch](const std::string& finish, size_t n, const std::string& err) {
      Channel::Event e;
      e.done = true;
      e.finish = finish;
      e.error = err;
      e.completion_tokens = n;
      ch->push(std::move(e));
    };
    return ch;
  }

  /// A logprobs entry's text: what the token adds inside a text (Tokenizer::token_bytes), so the
  /// entries join up to the generated text; a part of a UTF-8 character is spelled as OpenAI does
  /// (logprob_token).
  std::string piece(uint32_t id) const { return logprob_token(lm_.tokenizer->token_bytes(id)); }

  /// The bytes of `s` as a JSON list of integers 0–255 (logprobs' `bytes`, /tokenize's pieces).
  static ojson byte_list(std::string_view s) {
    ojson out = ojson::array();
    for (unsigned char c : s) out.push_back(static_cast<int>(c));
    return out;
  }

  ojson chat_logprob(const TokenLogprob& t) const {
    auto entry = [&](uint32_t id, float lp) {
      const std::string raw = lm_.tokenizer->token_bytes(id);
      return ojson{{"token", logprob_token(raw)}, {"logprob", lp}, {"bytes", byte_list(raw)}};
    };
    ojson e = entry(t.id, t.logprob);
    ojson top = ojson::array();
    for (const auto& [id, lp] : t.top) top.push_back(entry(id, lp));
    e["top_logprobs"] = top;
    return e;
  }

  /// Appends generated token `t` to a completion choice's logprobs at text position `offset` and
  /// moves `offset` past the token. Positions count characters (code points), as OpenAI's
  /// text_offset does (Python string indices); a token holding part of a character counts its
  /// lead byte only, so the pieces of one character add up to one.
  void add_completion_logprob(ojson& lp, const TokenLogprob& t, size_t& offset) const {
    offset += push_completion_logprob(lp, t, offset);
  }
  /// Appends token `t` with text_offset `at`; returns the token's length in characters.
  size_t push_completion_logprob(ojson& lp, const TokenLogprob& t, size_t at) const {
    const std::string raw = lm_.tokenizer->token_bytes(t.id);
    lp["tokens"].push_back(logprob_token(raw));
    lp["token_logprobs"].push_back(t.logprob);
    ojson top = ojson::object();
    for (const auto& [id, v] : t.top) top[piece(id)] = v;
    lp["top_logprobs"].push_back(top);
    lp["text_offset"].push_back(at);
    return jinja::utf8_length(raw);
  }

  /// The prompt's share of a scored completion's logprobs (Job::prompt_lps): its first token with
  /// null logprob and alternatives, as OpenAI answers echo + logprobs, then one entry per token.
  /// text_offset is where each token starts in the prompt's text (decoded without special tokens,
  /// so a BOS and SentencePiece's leading space count nothing; a token inside a UTF-8 character
  /// points at the character's start).
  void add_prompt_logprobs(ojson& lp, const Job& job) const {
    IncrementalDecoder dec(*lm_.tokenizer, true);
    size_t at = 0;
    lp["tokens"].push_back(logprob_token(lm_.tokenizer->token_bytes(job.prompt.front())));
    lp["token_logprobs"].push_back(nullptr);
    lp["top_logprobs"].push_back(nullptr);
    lp["text_offset"].push_back(at);
    at += jinja::utf8_length(dec.push(job.prompt.front()));
    for (size_t i = 0; i < job.prompt_lps.size(); ++i) {
      // The decoder sends a held byte run together with the text piece that closes it: that
      // piece starts where its own text ends the output; a held byte piece at the run's start.
      const uint32_t id = job.prompt[i + 1];
      const std::string out = dec.push(id);
      const std::string_view before(out.data(), dec.own_text_start(out, id));
      (void)push_completion_logprob(lp, job.prompt_lps[i], at + jinja::utf8_length(before));
      at += jinja::utf8_length(out);
    }
  }

  static ojson tool_calls_json(const std::vector<ToolCall>& calls, bool indexed) {
    ojson arr = ojson::array();
    for (size_t i = 0; i < calls.size(); ++i) {
      ojson c = {{"id", calls[i].id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
      if (indexed) c["index"] = i;
      arr.push_back(c);
    }
    return arr;
  }

  ServerOptions opt_;
  Metrics metrics_;     ///< outlives engine_ (its callbacks write here)
  InFlight& inflight_;  ///< the requests being answered (for the shutdown)
  runtime::LoadedModel lm_;
  std::string model_id_;
  int64_t created_ = unix_now();
  std::optional<ChatTemplate> tmpl_;
  ToolFormat tool_format_ = ToolFormat::Any;  ///< the template's tool-call syntax (tool_format_of)
  bool mistral_args_ = false;                 ///< Mistral v11+ template: `[TOOL_CALLS]name[ARGS]{…}`
  /// The template writes `[TOOL_CALLS] [` (Mistral 7B v0.3), not `[TOOL_CALLS][` (Nemo).
  bool mistral_space_ = true;
  /// Split `<think>` blocks into reasoning_content (ServerOptions::split_reasoning).
  bool reasoning_ = false;
  std::vector<uint32_t> keep_special_;
  std::unique_ptr<Engine> engine_;
  bool routable_ = false;  ///< some skill carries a routing descriptor
  std::mutex skills_mu_;   ///< guards bindings_, hot_, routable_ and router_
  /// Skills added by POST /v1/cortiq/skills: the SKILL_FILE's reader, its record (id as served), path.
  struct HotSkill {
    std::shared_ptr<cmf::Reader> reader;
    cmf::SkillRecord record;
    std::string path;
  };
  std::map<std::string, HotSkill> hot_;
  specialize::DynamicOptions dyn_opt_;    ///< --route-dynamic thresholds
  std::unique_ptr<model::Model> router_;  ///< the backbone, for routing requests (one thread)
  std::map<std::string, std::shared_ptr<const runtime::SkillBinding>> bindings_;
  std::mutex embed_mu_;                     ///< guards embedder_
  std::unique_ptr<model::Model> embedder_;  ///< /v1/embeddings' model over the engine's weights (lazy)
};

}  // namespace

int run_server(const ServerOptions& opt) {
  // Block the stop signals in every thread; a watcher thread waits for them (no async handler).
  sigset_t stopset;
  sigemptyset(&stopset);
  sigaddset(&stopset, SIGINT);
  sigaddset(&stopset, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stopset, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  InFlight inflight(
      [](const std::string& line) { std::fprintf(stderr, "cortiq serve: %s\n", line.c_str()); });
  Service svc(opt, inflight);
  httplib::Server http;
  const size_t workers = opt.parallel + opt.queue + 8;
  http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  http.set_payload_max_length(opt.max_body_bytes);
  http.set_keep_alive_max_count(1000);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  // SO_REUSEADDR only (a restart may bind while old connections sit in TIME_WAIT). cpp-httplib's
  // default also sets SO_REUSEPORT, with which a second server on a busy port binds too and the
  // kernel splits the connections between the two.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  // Whether `wrap` logged the request this thread is answering (--log-requests).
  static thread_local bool t_request_logged = false;
  // Every route runs inside `wrap`: the request is an InFlight entry from here to the end of its
  // response (a stream's releaser ends it), and any exception becomes its OpenAI error
  // (api_error_of); should even that fail, cpp-httplib's exception handler below answers.
  auto wrap = [&opt, &inflight](auto fn) {
    return [fn, &opt, &inflight](const httplib::Request& req, httplib::Response& res) {
      const auto t0 = clock_type::now();
      t_request = inflight.begin(req.method + " " + req.path);
      t_streaming = false;
      struct End {
        InFlight& f;
        httplib::Response& res;
        ~End() {
          if (t_streaming) return;
          try {
            f.end(t_request, res.status);
          } catch (...) {
          }
        }
      } end{inflight, res};
      try {
        fn(req, res);
      } catch (...) {
        t_streaming = false;  // a handler that threw after setting up a stream answers the error
        send_error(res, api_error_of(std::current_exception()));
      }
      if (opt.log_requests) {
        // status -1: a stream was set up; its line comes when it ends (stream())
        if (res.status != -1)
          std::fprintf(stderr, "%s %s -> %d (%.1f ms)\n", req.method.c_str(), req.path.c_str(), res.status,
                       std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
        t_request_logged = true;
      }
    };
  };
  // Requests answered before or outside a route (401 from the key check, 404/405, 413, malformed
  // HTTP) are logged when their response is written; routed ones were logged by `wrap` on the same
  // thread, with their handler time.
  // (The logger and the error handler run outside cpp-httplib's try around handlers: nothing may
  // escape them.)
  // Every answer is also counted in /metrics, by its route's pattern (route_label, set below).
  std::function<std::string(const std::string&)> route_label;
  http.set_logger([&opt, &svc, &route_label](const httplib::Request& req, const httplib::Response& res) {
    if (opt.log_requests && !t_request_logged)
      std::fprintf(stderr, "%s %s -> %d\n", req.method.c_str(), req.path.c_str(), res.status);
    t_request_logged = false;
    try {
      svc.metrics().request(req.method, route_label ? route_label(req.path) : "other", res.status);
    } catch (...) {
    }
  });

  const std::string key = opt.api_key;
  const std::string admin_key = opt.admin_key;
  const std::vector<std::string> cors = opt.cors_origins;
  const size_t max_body = opt.max_body_bytes;
  http.set_pre_routing_handler([key, admin_key, cors, max_body, &inflight](const httplib::Request& req,
                                                                           httplib::Response& res) {
    // During a shutdown's grace period the listener still accepts (cpp-httplib's stop() would also
    // end every stream in flight at once), but new requests are refused here.
    if (inflight.stopping()) {
      send_error(res, ApiError(503, "the server is shutting down", "server_error", std::nullopt,
                               "server_shutting_down"));
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    // CORS (Fetch standard): an allowed Origin gets Access-Control-Allow-Origin on every answer; a
    // preflight (OPTIONS) is answered here, before the key check, since browsers send it without
    // credentials.
    const std::string origin = req.get_header_value("Origin");
    const bool any = std::find(cors.begin(), cors.end(), "*") != cors.end();
    const bool allowed =
        !origin.empty() && (any || std::find(cors.begin(), cors.end(), origin) != cors.end());
    if (allowed) {
      res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
      if (!any) res.set_header("Vary", "Origin");
      res.set_header("Access-Control-Expose-Headers", "Retry-After");  // 429's hint, readable by the page
    }
    if (req.method == "OPTIONS") {
      res.status = 204;
      res.set_header("Allow", "GET, POST, OPTIONS");
      if (allowed) {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        // the headers the page asks for (the openai SDK sends X-Stainless-* ones), else the usual two
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        res.set_header("Access-Control-Max-Age", "600");
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    // cpp-httplib 0.11 applies the body limit (--max-body) to a Content-Length only and would read a
    // chunked body of any size into memory: such bodies are refused (411, RFC 9110 §15.5.12) before
    // a byte of them is read. This runs before the body is read.
    std::string te = req.get_header_value("Transfer-Encoding");
    std::transform(te.begin(), te.end(), te.begin(), [](unsigned char c) { return std::tolower(c); });
    if (te.find("chunked") != std::string::npos) {
      send_error(res, ApiError(411,
                               "chunked request bodies are not accepted: send the body with a Content-Length "
                               "header (limit " +
                                   std::to_string(max_body) + " bytes)",
                               "invalid_request_error", std::nullopt, "length_required"));
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    // A POST with neither a Content-Length nor chunked encoding (`curl -X POST URL` without -d)
    // has, by RFC 9112 §6.3, an empty body, but cpp-httplib 0.11 would read until the client closes
    // the connection or the 30 s read timeout passes, and then answer a bare 400: refused at once
    // with 411 (RFC 9110 §15.5.12) instead, before any read.
    if (req.method == "POST" && !req.has_header("Content-Length")) {
      send_error(res, ApiError(411, "a POST needs a Content-Length header (and a JSON body)",
                               "invalid_request_error", std::nullopt, "length_required"));
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Every route reads its body as JSON whatever the Content-Type says, as OpenAI's API and
    // llama.cpp's server do. `curl -d` sends application/x-www-form-urlencoded, and cpp-httplib
    // 0.11 refuses such a body over 8192 bytes (its compiled-in form limit, not --max-body) after
    // reading it: the header is dropped here, before the body is read, so the --max-body limit
    // alone applies. (The Request routing() passes here is not const; the handler type is.)
    if (auto ct = req.headers.find("Content-Type");
        ct != req.headers.end() && ct->second.rfind("application/x-www-form-urlencoded", 0) == 0)
      const_cast<httplib::Request&>(req).headers.erase(ct);
    // The chat page itself is public (it asks for the key and sends it with every call it makes).
    if (key.empty() || req.path == "/health" || req.path == "/healthz" ||
        (req.path == "/" && req.method == "GET"))
      return httplib::Server::HandlerResponse::Unhandled;
    // `Authorization: Bearer KEY` (the scheme is case-insensitive, RFC 9110 §11.1) or, as llama.cpp's
    // server also takes it, `X-Api-Key: KEY`.
    const std::string h = req.get_header_value("Authorization");
    std::string given;
    if (h.size() > 7 && strncasecmp(h.c_str(), "bearer ", 7) == 0) given = h.substr(7);
    if (given.empty()) given = req.get_header_value("X-Api-Key");
    if (!given.empty() && (consteq(given, key) || (!admin_key.empty() && consteq(given, admin_key))))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401,
                             h.empty() && !req.has_header("X-Api-Key")
                                 ? "missing API key: send 'Authorization: Bearer <key>'"
                                 : "invalid API key",
                             "authentication_error", std::nullopt, "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Every route, registered below. A known path asked with another method is a 405 with an Allow
  // header, not a 404.
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  struct Route {
    const char* method;
    const char* path;
    Handler fn;
  };
  const std::vector<Route> routes = {
      {"GET", "/health", [&](const httplib::Request&, httplib::Response& res) { svc.health(res); }},
      {"GET", "/healthz", [&](const httplib::Request&, httplib::Response& res) { svc.health(res); }},
      {"GET", "/v1/models", [&](const httplib::Request&, httplib::Response& res) { svc.models(res); }},
      {"GET", R"(/v1/models/(.+))",  // Hugging Face ids have a slash: "org/name"
       [&](const httplib::Request& q, httplib::Response& res) { svc.model(q, res); }},
      {"GET", "/v1/cortiq/masks", [&](const httplib::Request&, httplib::Response& res) { svc.masks(res); }},
      {"GET", "/v1/cortiq/skills", [&](const httplib::Request&, httplib::Response& res) { svc.skills(res); }},
      {"POST", "/v1/cortiq/skills",
       [&](const httplib::Request& q, httplib::Response& res) { svc.add_skill(q, res); }},
      {"DELETE", R"(/v1/cortiq/skills/([A-Za-z0-9_-]+))",
       [&](const httplib::Request& q, httplib::Response& res) { svc.remove_skill(q, res); }},
      {"POST", "/tokenize", [&](const httplib::Request& q, httplib::Response& res) { svc.tokenize(q, res); }},
      {"POST", "/detokenize",
       [&](const httplib::Request& q, httplib::Response& res) { svc.detokenize(q, res); }},
      {"POST", "/v1/chat/completions",
       [&](const httplib::Request& q, httplib::Response& res) { svc.chat(q, res); }},
      {"POST", "/v1/completions",
       [&](const httplib::Request& q, httplib::Response& res) { svc.completions(q, res); }},
      {"POST", "/v1/embeddings",
       [&](const httplib::Request& q, httplib::Response& res) { svc.embeddings(q, res); }},
      {"GET", "/metrics", [&](const httplib::Request&, httplib::Response& res) { svc.metrics_page(res); }},
      {"GET", "/props", [&](const httplib::Request&, httplib::Response& res) { svc.props(res); }},
      {"GET", "/",
       [&](const httplib::Request&, httplib::Response& res) {
         res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8");
         res.set_header("Cache-Control", "no-cache");
         // the page loads nothing from elsewhere: no script or style outside itself, calls to this origin
         // only
         res.set_header("Content-Security-Policy",
                        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                        "connect-src 'self'; img-src data:");
       }},
  };
  std::map<std::string, std::string, std::less<>> route_method;
  for (const Route& r : routes) {  // "GET, POST" for a path two routes share
    std::string& m = route_method[r.path];
    m += (m.empty() ? "" : ", ") + std::string(r.method);
  }
  route_label = [&route_method](const std::string& path) -> std::string {
    if (route_method.count(path)) return path;
    if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
    if (path.rfind("/v1/cortiq/skills/", 0) == 0) return "/v1/cortiq/skills/{id}";
    return "other";
  };
  http.set_error_handler([&route_method](const httplib::Request& req, httplib::Response& res) noexcept {
    if (!res.body.empty()) return;
    try {
      const auto route = route_method.find(req.path);
      if (res.status == 404 && route != route_method.end() &&
          route->second.find(req.method) == std::string::npos) {
        res.status = 405;
        res.set_header("Allow", route->second);
      }
      std::string msg;
      switch (res.status) {
        case 404:
          msg = "no such route";
          break;
        case 405:
          msg = req.method + " is not allowed on " + req.path + " (use " +
                (route != route_method.end() ? route->second : std::string("another method")) + ")";
          break;
        case 413:
          msg = "request body too large";
          break;
        case 400:
          msg = "malformed HTTP request";
          break;
        default:
          msg = "HTTP error " + std::to_string(res.status);
      }
      res.set_content(dump_json(error_body(res.status, msg)), "application/json");
    } catch (...) {
      res.set_content(
          R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})",
          "application/json");
    }
  });
  // What escaped a route wrapper (or the pre-routing handler): the request's OpenAI error naming the
  // cause; the server goes on with the next request. Called inside cpp-httplib's catch: must not throw.
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) noexcept {
        try {
          send_error(res, api_error_of(ep));
        } catch (...) {
          res.status = 500;
          res.set_content(
              R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})",
              "application/json");
        }
      });

  for (const Route& r : routes) {
    if (std::string_view(r.method) == "GET")
      http.Get(r.path, wrap(r.fn));
    else if (std::string_view(r.method) == "DELETE")
      http.Delete(r.path, wrap(r.fn));
    else
      http.Post(r.path, wrap(r.fn));
  }

  int port = opt.port;
  if (port == 0) {
    port = http.bind_to_any_port(opt.host);
    if (port < 0) fail(ErrorKind::Io, "cannot bind {} on any port", opt.host);
  } else if (!http.bind_to_port(opt.host, port)) {
    fail(ErrorKind::Io, "cannot bind {}:{} (in use, or not an address of this machine)", opt.host, port);
  }
  std::fprintf(stderr, "Ready: %s | Task: %s | Slots: %zu | Context: %zu tokens%s\n",
               svc.lm().model->arch().arch_name.c_str(), svc.lm().active_task.c_str(), opt.parallel,
               svc.lm().ctx, opt.api_key.empty() ? "" : " | API key required");
  std::printf("Listening on http://%s:%d\n", opt.host.c_str(), port);
  std::fflush(stdout);

  // The watcher waits for a stop signal, drains the requests in flight (shutdown.h; new ones get
  // 503 meanwhile), then stops the listener. The main thread returns from listen once every worker
  // is done;
  // if that has not happened kExitWaitS after the drain (idle keep-alive connections hold a worker
  // up to cpp-httplib's 5 s keep-alive timeout, or a request was abandoned), the watcher ends the
  // process itself: the stop is bounded by shutdown_grace_s + kShutdownSlackS.
  constexpr double kExitWaitS = kShutdownSlackS - kCancelWindowS - kCutWindowS;
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool listen_done = false;
  std::thread watcher([&] {
    const timespec tick{0, 100 * 1000 * 1000};
    int sig = -1;
    for (;;) {
      sig = sigtimedwait(&stopset, nullptr, &tick);
      if (sig > 0) break;
      std::lock_guard<std::mutex> g(done_mu);
      if (listen_done) return;  // listen failed: nothing to drain
    }
    const auto hurry = [&] {  // a second signal cancels at once
      const timespec zero{0, 0};
      if (sigtimedwait(&stopset, nullptr, &zero) <= 0) return false;
      std::fprintf(stderr, "cortiq serve: second signal: cancelling now\n");
      return true;
    };
    drain(inflight, sig == SIGINT ? "SIGINT" : "SIGTERM", std::max(0.0, opt.shutdown_grace_s), hurry);
    http.stop();  // (after the drain: stop() ends the chunked responses still being written)
    std::unique_lock<std::mutex> lk(done_mu);
    if (done_cv.wait_for(lk, std::chrono::duration<double>(kExitWaitS), [&] { return listen_done; })) return;
    std::fprintf(stderr, "cortiq serve: exiting without waiting for idle connections\n");
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(0);
  });
  http.listen_after_bind();
  {
    std::lock_guard<std::mutex> g(done_mu);
    listen_done = true;
  }
  done_cv.notify_all();
  watcher.join();
  return 0;
}

}  // namespace cortiq::server

#else  // built without cpp-httplib

namespace cortiq::server {
bool server_available() noexcept {
  return false;
}
int run_server(const ServerOptions&) {
  fail(ErrorKind::Unsupported,
       "this build has no HTTP server: configure with cpp-httplib (pkg-config cpp-httplib) and "
       "CORTIQ_WITH_HTTPLIB");
}
}  // namespace cortiq::server

#endif
