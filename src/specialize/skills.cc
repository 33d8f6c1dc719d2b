#include "specialize/skills.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cmf/append.h"
#include "cmf/reader.h"
#include "cmf/tensor_names.h"
#include "cmf/writer.h"
#include "convert/convert.h"
#include "convert/plan.h"
#include "model/cmf_source.h"
#include "model/model.h"
#include "quant/codec.h"
#include "runtime/session.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::specialize {
namespace fs = std::filesystem;
namespace {

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

bool is_overlay(std::string_view name) {
  return cmf::parse_skill_name(name).has_value();
}

bool in_set(TensorSet set, const cmf::TensorPlace& p) {
  if (set == TensorSet::All) return true;
  if (!p.layer || p.mtp) return false;
  if (set == TensorSet::Ffn) {
    if (p.in_experts) return true;
    if (!p.module) return false;
    switch (*p.module) {
      case cmf::TensorRole::FfnGate:
      case cmf::TensorRole::FfnUp:
      case cmf::TensorRole::FfnDown:
      case cmf::TensorRole::Router:
      case cmf::TensorRole::SharedGate:
      case cmf::TensorRole::SharedUp:
      case cmf::TensorRole::SharedDown:
      case cmf::TensorRole::SharedExpertGate:
        return true;
      default:
        return false;
    }
  }
  if (!p.module) return false;
  switch (*p.module) {
    case cmf::TensorRole::Q:
    case cmf::TensorRole::K:
    case cmf::TensorRole::V:
    case cmf::TensorRole::O:
    case cmf::TensorRole::QNorm:
    case cmf::TensorRole::KNorm:
    case cmf::TensorRole::AttnGate:
      return true;
    default:
      return false;
  }
}

std::vector<float> decode_all(const cmf::Reader& r, const cmf::TensorInfo& t) {
  std::vector<float> v(t.numel());
  quant::decode(t.dtype, t.shape, r.payload(t), v);
  return v;
}

// A donor opened as a CMF: a .cmf as is, an HF folder converted to a temporary f32 file first
// (removed when this goes away; the mapping stays valid after the unlink).
struct Donor {
  fs::path tmpdir;
  std::unique_ptr<cmf::Reader> reader;
  ~Donor() {
    std::error_code ec;
    if (!tmpdir.empty()) fs::remove_all(tmpdir, ec);
  }
};

std::unique_ptr<Donor> open_donor(const std::string& from) {
  auto d = std::make_unique<Donor>();
  std::string path = from;
  if (fs::is_directory(from)) {
    std::string tmpl = (fs::temp_directory_path() / "cortiq-skill-XXXXXX").string();
    if (!mkdtemp(tmpl.data()))
      fail(ErrorKind::Io, "skill add: cannot create a temporary folder for the donor");
    d->tmpdir = tmpl;
    convert::ConvertOptions co;
    co.model_dir = from;
    co.output = (d->tmpdir / "donor.cmf").string();
    co.plan.base = convert::parse_quant("f32");
    co.progress = false;
    co.no_chat_template = true;
    convert::convert_checkpoint(co);
    path = co.output;
  }
  d->reader = std::make_unique<cmf::Reader>(cmf::Reader::open(path));
  return d;
}

void check_same_model(const cmf::Reader& base, const cmf::Reader& donor, const std::string& donor_name) {
  const cmf::ModelArch &a = base.header().arch, &b = donor.header().arch;
  auto field = [&](const char* f, auto x, auto y) {
    if (x != y)
      fail(ErrorKind::InvalidArgument, "donor {}: {} {} differs from the base's {}", donor_name, f, y, x);
  };
  field("arch_name", a.arch_name, b.arch_name);
  field("num_layers", a.num_layers, b.num_layers);
  field("hidden_size", a.hidden_size, b.hidden_size);
  field("vocab_size", a.vocab_size, b.vocab_size);
  for (const cmf::TensorInfo& t : base.tensors()) {
    if (is_overlay(t.name)) continue;
    const cmf::TensorInfo* d = donor.find(t.name);
    if (!d)
      fail(ErrorKind::InvalidArgument, "donor {}: no tensor '{}' (the first base tensor it lacks)",
           donor_name, t.name);
    if (d->shape != t.shape)
      fail(ErrorKind::InvalidArgument, "donor {}: tensor '{}' has shape [{}], the base [{}]", donor_name,
           t.name, fmt::join(d->shape, ", "), fmt::join(t.shape, ", "));
  }
  if (!base.vocab().empty() && !donor.vocab().empty()) {
    auto vocab_of = [](std::span<const uint8_t> v) {
      auto j = nlohmann::json::parse(v.begin(), v.end(), nullptr, false);
      return j.is_object() && j.contains("model") && j["model"].contains("vocab") ? j["model"]["vocab"]
                                                                                  : nlohmann::json();
    };
    if (vocab_of(base.vocab()) != vocab_of(donor.vocab()))
      fail(ErrorKind::InvalidArgument, "donor {}: its tokenizer vocabulary differs from the base's",
           donor_name);
  }
}

void copy_sections(const cmf::Reader& r, cmf::Writer& w, bool vocab = true, bool masks = true) {
  if (masks && !r.masks_bytes().empty()) w.set_masks_raw({r.masks_bytes().begin(), r.masks_bytes().end()});
  if (vocab && !r.vocab().empty()) w.set_vocab({r.vocab().begin(), r.vocab().end()});
}

void refuse_skill_file(const cmf::Reader& r, const std::string& path, const char* cmd) {
  if (r.is_skill_file())
    fail(ErrorKind::Unsupported,
         "{}: {} is a SKILL_FILE (a partial skill, not a backbone); `cortiq skill apply` it first", cmd,
         path);
  if (r.num_files() > 1)
    fail(ErrorKind::Unsupported, "{}: {} is a shard set; skills need a single-file backbone", cmd, path);
}

uint64_t ntokens_cap(const cmf::ModelArch& a, uint32_t want) {
  uint64_t cap = a.max_position_embeddings ? a.max_position_embeddings : 4096;
  return want ? std::min<uint64_t>(want, cap) : cap;
}

}  // namespace

void check_skill_id(std::string_view id) {
  if (id.empty()) fail(ErrorKind::InvalidArgument, "skill id is empty");
  if (id.size() > 64) fail(ErrorKind::InvalidArgument, "skill id '{}' is longer than 64 characters", id);
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      fail(ErrorKind::InvalidArgument, "skill id '{}' has '{}': only A-Z a-z 0-9 _ - are allowed", id, c);
}

TensorSet parse_tensor_set(std::string_view s) {
  if (s == "all") return TensorSet::All;
  if (s == "ffn") return TensorSet::Ffn;
  if (s == "attn") return TensorSet::Attn;
  fail(ErrorKind::InvalidArgument, "--tensors '{}': expected ffn, attn or all", s);
}

std::vector<uint32_t> parse_layer_list(std::string_view s) {
  std::set<uint32_t> out;
  auto num = [&](std::string_view t) -> uint32_t {
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string_view::npos)
      fail(ErrorKind::InvalidArgument, "--layers '{}': '{}' is not a layer number", s, t);
    return uint32_t(std::stoul(std::string(t)));
  };
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string_view item =
        s.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      out.insert(num(item));
    } else {
      uint32_t a = num(item.substr(0, dash)), b = num(item.substr(dash + 1));
      if (a > b) fail(ErrorKind::InvalidArgument, "--layers '{}': range {} is descending", s, item);
      for (uint32_t l = a; l <= b; ++l) out.insert(l);
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return {out.begin(), out.end()};
}

std::vector<std::string> read_prompts(const std::string& path) {
  std::string text = read_file(path);
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    lines.push_back(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  // A line holding only the separator: documents (the testbed corpus's format).
  if (std::any_of(lines.begin(), lines.end(),
                  [](const std::string& l) { return trim(l) == kPromptSeparator; })) {
    std::vector<std::string> out;
    std::string cur;
    for (const auto& l : lines) {
      if (trim(l) == kPromptSeparator) {
        if (auto t = trim(cur); !t.empty()) out.push_back(t);
        cur.clear();
      } else {
        cur += l;
        cur += '\n';
      }
    }
    if (auto t = trim(cur); !t.empty()) out.push_back(t);
    return out;
  }
  // A blank line between two non-blank ones switches to block mode.
  bool blocks = false;
  bool seen = false, blank_after = false;
  for (const auto& l : lines) {
    bool blank = trim(l).empty();
    if (!blank && blank_after) blocks = true;
    if (!blank) seen = true;
    if (blank && seen) blank_after = true;
  }
  std::vector<std::string> out;
  if (!blocks) {
    for (const auto& l : lines)
      if (auto t = trim(l); !t.empty()) out.push_back(t);
    return out;
  }
  std::string cur;
  for (const auto& l : lines) {
    if (trim(l).empty()) {
      if (auto t = trim(cur); !t.empty()) out.push_back(t);
      cur.clear();
    } else {
      cur += l;
      cur += '\n';
    }
  }
  if (auto t = trim(cur); !t.empty()) out.push_back(t);
  return out;
}

SkillAddResult skill_add(const SkillAddOptions& opt) {
  check_skill_id(opt.id);
  SkillAddResult res;
  res.output = opt.output.empty() ? opt.base : opt.output;
  cmf::Reader base = cmf::Reader::open(opt.base);
  refuse_skill_file(base, opt.base, "skill add");
  const cmf::ModelArch& arch = base.header().arch;
  bool exists = false;
  for (const auto& r : base.skills()) exists |= r.id == opt.id;
  for (const auto& t : base.tensors())
    if (auto p = cmf::parse_skill_name(t.name); p && p->first == opt.id) exists = true;
  if (exists && !opt.replace)
    fail(ErrorKind::InvalidArgument, "skill add: {} already has a skill '{}' (--replace replaces it)",
         opt.base, opt.id);
  for (uint32_t l : opt.layers)
    if (l >= arch.num_layers)
      fail(ErrorKind::InvalidArgument, "--layers: layer {} >= num_layers {}", l, arch.num_layers);

  // Prompts first: a bad prompts file costs no donor conversion.
  std::vector<std::string> prompts;
  if (!opt.prompts.empty()) {
    prompts = read_prompts(opt.prompts);
    const uint32_t need = std::max<uint32_t>(opt.fit.rank, 1) + 1;
    if (prompts.size() < need)
      fail(ErrorKind::InvalidArgument, "--prompts {}: {} prompts, rank {} needs at least {}", opt.prompts,
           prompts.size(), opt.fit.rank, need);
  }
  const uint32_t phi_layer = opt.phi_layer ? *opt.phi_layer : default_phi_layer(arch.num_layers);
  if (phi_layer >= arch.num_layers)
    fail(ErrorKind::InvalidArgument, "--phi-layer {} >= num_layers {}", phi_layer, arch.num_layers);
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::vector<uint32_t>> prompt_ids;
  if (!prompts.empty()) {
    tok = runtime::load_tokenizer(base, opt.base);
    if (!tok) fail(ErrorKind::InvalidArgument, "skill add --prompts: {} has no tokenizer", opt.base);
    const uint64_t cap = ntokens_cap(arch, opt.max_prompt_tokens);
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto ids = tok->encode(prompts[i], false);
      if (ids.size() < opt.min_prompt_tokens)
        fail(ErrorKind::InvalidArgument, "--prompts {}: prompt {} has {} tokens, at least {} needed",
             opt.prompts, i + 1, ids.size(), opt.min_prompt_tokens);
      if (ids.size() > cap) ids.resize(cap);
      prompt_ids.push_back(std::move(ids));
    }
  }

  std::unique_ptr<Donor> donor = open_donor(opt.from);
  check_same_model(base, *donor->reader, opt.from);
  std::optional<convert::QuantPlan> plan;
  if (!opt.skill_quant.empty()) {
    plan.emplace();
    plan->base = convert::parse_quant(opt.skill_quant);
  }
  const std::set<uint32_t> layer_set(opt.layers.begin(), opt.layers.end());
  model::MemoryTensorSource overlay;
  struct Out {
    std::string name;
    quant::DType dtype;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> payload;
  };
  std::vector<Out> outs;
  std::set<uint32_t> touched;
  for (const cmf::TensorInfo& t : base.tensors()) {
    if (is_overlay(t.name)) continue;
    cmf::TensorPlace p = cmf::tensor_place(t.name);
    if (!in_set(opt.tensors, p)) continue;
    if (!layer_set.empty() && (!p.layer || p.mtp || !layer_set.count(*p.layer))) continue;
    const cmf::TensorInfo& d = *donor->reader->find(t.name);
    std::vector<float> bv = decode_all(base, t), dv = decode_all(*donor->reader, d);
    double maxd = 0;
    bool nonfinite = false;
    for (size_t i = 0; i < bv.size(); ++i) {
      double x = std::fabs(double(dv[i]) - double(bv[i]));
      if (std::isnan(x)) nonfinite = true;
      maxd = std::max(maxd, x);
    }
    if (nonfinite) fail(ErrorKind::InvalidArgument, "donor {}: tensor '{}' holds NaN", opt.from, t.name);
    if (!(maxd > opt.min_delta)) continue;
    quant::DType target = t.dtype;
    quant::EncodeOptions eo;
    if (plan) {
      convert::TensorDecision dec = convert::decide(*plan, t.name, t.shape, arch.moe.has_value());
      target = dec.dtype;
      eo = dec.opt;
    }
    Out o{t.name, target, t.shape, {}};
    if (d.dtype == target) {
      auto pl = donor->reader->payload(d);
      o.payload.assign(pl.begin(), pl.end());
    } else {
      o.payload = quant::encode(target, t.shape, dv, eo);
    }
    overlay.add(t.name, target, t.shape, o.payload);
    if (p.layer && !p.mtp) touched.insert(*p.layer);
    res.overlays.push_back(t.name);
    res.overlay_bytes += o.payload.size();
    outs.push_back(std::move(o));
  }
  if (outs.empty())
    fail(ErrorKind::InvalidArgument,
         "skill add: no tensor of {} (in the selected set) differs from the base by more than {}", opt.from,
         opt.min_delta);
  res.layers.assign(touched.begin(), touched.end());

  cmf::SkillRecord rec;
  rec.id = opt.id;
  if (!opt.name.empty()) rec.name = opt.name;
  rec.layers = res.layers;
  if (!prompt_ids.empty()) {
    model::CmfTensorSource src(base);
    auto m = model::Model::bind(arch, src, {.threads = opt.threads});
    std::unique_ptr<model::Model> dm;
    if (opt.phi_from_donor)
      dm = model::Model::create(model::Weights::with_overrides(m->weights(), overlay),
                                {.threads = opt.threads});
    model::Model& run = dm ? *dm : *m;
    std::vector<float> phis;
    std::optional<Progress> bar;
    if (opt.progress) bar.emplace("skill add: φ", prompt_ids.size(), "prompt");
    for (const auto& ids : prompt_ids) {
      auto phi = compute_phi(run, ids, phi_layer);
      phis.insert(phis.end(), phi.begin(), phi.end());
      if (bar) bar->advance(1);
    }
    if (bar) bar->finish();
    FitOptions fo = opt.fit;
    fo.phi_layer = phi_layer;
    fo.min_samples = std::max<uint32_t>(fo.min_samples, 2);
    rec.selection = fit_descriptor(phis, prompt_ids.size(), arch.hidden_size, fo);
    res.selection = rec.selection;
    res.prompts = prompt_ids.size();
  }

  cmf::Header h = base.header();
  bool replaced = false;
  for (auto& r : h.skills)
    if (r.id == opt.id) r = rec, replaced = true;
  if (!replaced) h.skills.push_back(rec);
  if (h.routing) {
    h.routing.reset();
    res.warnings.push_back("header.routing (calibration over the previous skills) dropped: recalibrate");
  }
  if (opt.output.empty()) {  // true append: old bytes stay, the envelope is patched last
    std::vector<cmf::TensorData> add;
    std::vector<std::string> drop;
    for (const cmf::TensorInfo& t : base.tensors())
      if (auto p = cmf::parse_skill_name(t.name); p && p->first == opt.id) drop.push_back(t.name);
    for (Out& o : outs)
      add.push_back(
          {cmf::skill_tensor_name(opt.id, o.name), o.dtype, std::move(o.shape), std::move(o.payload)});
    cmf::append_in_place(opt.base, h, add, drop);
    res.appended = true;
    return res;
  }
  cmf::WriterOptions wo;
  wo.expected_tensors = base.tensors().size() + outs.size();
  cmf::Writer w(res.output, wo);
  copy_sections(base, w);
  for (const cmf::TensorInfo& t : base.tensors()) {
    if (auto p = cmf::parse_skill_name(t.name); p && p->first == opt.id) continue;
    w.add_tensor(t.name, t.dtype, t.shape, base.payload(t));
  }
  for (const Out& o : outs) w.add_tensor(cmf::skill_tensor_name(opt.id, o.name), o.dtype, o.shape, o.payload);
  w.finish(std::move(h));
  return res;
}

std::vector<SkillInfo> skill_list(const std::string& path) {
  cmf::Reader r = cmf::Reader::open(path);
  std::vector<SkillInfo> out;
  std::map<std::string, size_t> at;
  for (const auto& rec : r.skills()) {
    at[rec.id] = out.size();
    out.push_back({rec, 0, 0});
  }
  for (const auto& t : r.tensors()) {
    auto p = cmf::parse_skill_name(t.name);
    if (!p) continue;
    auto it = at.find(p->first);
    if (it == at.end()) {
      cmf::SkillRecord orphan;
      orphan.id = p->first;
      it = at.emplace(p->first, out.size()).first;
      out.push_back({orphan, 0, 0});
    }
    out[it->second].tensors++;
    out[it->second].bytes += t.nbytes;
  }
  return out;
}

void skill_rm(const std::string& input, const std::string& id, const std::string& output) {
  cmf::Reader r = cmf::Reader::open(input);
  refuse_skill_file(r, input, "skill rm");
  cmf::Header h = r.header();
  size_t before = h.skills.size();
  std::erase_if(h.skills, [&](const cmf::SkillRecord& s) { return s.id == id; });
  bool had_tensors = false;
  for (const auto& t : r.tensors())
    if (auto p = cmf::parse_skill_name(t.name); p && p->first == id) had_tensors = true;
  if (h.skills.size() == before && !had_tensors)
    fail(ErrorKind::InvalidArgument, "skill rm: {} has no skill '{}'", input, id);
  h.routing.reset();
  if (output.empty()) {  // true append: the overlays' bytes become dead (`cortiq compact` reclaims them)
    std::vector<std::string> drop;
    for (const auto& t : r.tensors())
      if (auto p = cmf::parse_skill_name(t.name); p && p->first == id) drop.push_back(t.name);
    cmf::append_in_place(input, h, {}, drop);
    return;
  }
  cmf::Writer w(output);
  copy_sections(r, w);
  for (const auto& t : r.tensors()) {
    if (auto p = cmf::parse_skill_name(t.name); p && p->first == id) continue;
    w.add_tensor(t.name, t.dtype, t.shape, r.payload(t));
  }
  w.finish(std::move(h));
}

void skill_materialize(const std::string& input, const std::string& id, const std::string& output) {
  cmf::Reader r = cmf::Reader::open(input);
  refuse_skill_file(r, input, "skill materialize");
  std::map<std::string, const cmf::TensorInfo*> ov;
  for (const auto& t : r.tensors())
    if (auto p = cmf::parse_skill_name(t.name); p && p->first == id) ov[p->second] = &t;
  if (ov.empty())
    fail(ErrorKind::InvalidArgument, "skill materialize: {} has no overlays for skill '{}'", input, id);
  cmf::Header h = r.header();
  std::erase_if(h.skills, [&](const cmf::SkillRecord& s) { return s.id != id; });
  h.routing.reset();
  cmf::Writer w(output);
  copy_sections(r, w);
  for (const auto& t : r.tensors()) {
    if (is_overlay(t.name)) continue;
    auto it = ov.find(t.name);
    const cmf::TensorInfo& src = it == ov.end() ? t : *it->second;
    if (src.shape != t.shape)
      fail(ErrorKind::Parse, "skill materialize: overlay '{}' has shape [{}], the backbone [{}]", src.name,
           fmt::join(src.shape, ", "), fmt::join(t.shape, ", "));
    w.add_tensor(t.name, src.dtype, src.shape, r.payload(src));
  }
  w.finish(std::move(h));
}

std::vector<std::string> skill_export(const std::string& specialist, const std::string& base_path,
                                      const std::string& id, const std::string& output) {
  check_skill_id(id);
  cmf::Reader s = cmf::Reader::open(specialist);
  cmf::Reader b = cmf::Reader::open(base_path);
  refuse_skill_file(b, base_path, "skill export");
  refuse_skill_file(s, specialist, "skill export");
  const cmf::ModelArch &sa = s.header().arch, &ba = b.header().arch;
  auto field = [&](const char* f, auto x, auto y) {
    if (x != y)
      fail(ErrorKind::InvalidArgument, "skill export: {} {} of {} differs from the base's {}", f, x,
           specialist, y);
  };
  field("arch_name", sa.arch_name, ba.arch_name);
  field("num_layers", sa.num_layers, ba.num_layers);
  field("hidden_size", sa.hidden_size, ba.hidden_size);
  std::vector<const cmf::TensorInfo*> keep;
  std::set<uint32_t> layers;
  for (const auto& t : s.tensors()) {
    const cmf::TensorInfo* bt = b.find(t.name);
    if (bt && bt->hash == t.hash) continue;
    keep.push_back(&t);
    cmf::TensorPlace p = cmf::tensor_place(t.name);
    if (p.layer && !p.mtp) layers.insert(*p.layer);
  }
  if (keep.empty())
    fail(ErrorKind::InvalidArgument, "skill export: every tensor of {} is in {} unchanged", specialist,
         base_path);
  cmf::SkillRecord rec;
  rec.id = id;
  rec.name = id;
  rec.layers.assign(layers.begin(), layers.end());
  rec.base_dir_hash = cmf::hex16(b.dir_hash());
  rec.base_arch = nlohmann::json{
      {"arch_name", ba.arch_name}, {"num_layers", ba.num_layers}, {"hidden_size", ba.hidden_size}};
  if (s.masks() && !s.masks()->default_task.empty()) rec.task = s.masks()->default_task;
  rec.provenance =
      nlohmann::json{{"cut_from", fs::path(specialist).filename().string()}, {"tensors", keep.size()}};
  cmf::Header h = s.header();
  h.skills = {rec};
  h.routing.reset();
  cmf::Writer w(output);
  copy_sections(s, w, /*vocab=*/false, /*masks=*/true);
  std::vector<std::string> names;
  for (const auto* t : keep) {
    w.add_tensor(t->name, t->dtype, t->shape, s.payload(*t));
    names.push_back(t->name);
  }
  w.finish(std::move(h));
  return names;
}

std::vector<std::string> skill_apply(const std::string& base_path, const std::string& skill_path,
                                     const std::string& output, bool force) {
  std::vector<std::string> warnings;
  cmf::Reader b = cmf::Reader::open(base_path);
  cmf::Reader k = cmf::Reader::open(skill_path);
  refuse_skill_file(b, base_path, "skill apply");
  if (!k.is_skill_file() || k.skills().size() != 1 || !k.skills()[0].base_dir_hash)
    fail(ErrorKind::InvalidArgument,
         "skill apply: {} is not a skill file (SKILL_FILE with one record carrying base_dir_hash)",
         skill_path);
  cmf::SkillRecord rec = k.skills()[0];
  const std::string have = cmf::hex16(b.dir_hash());
  if (*rec.base_dir_hash != have) {
    if (!force)
      fail(
          ErrorKind::InvalidArgument,
          "skill apply: {} was cut from a base with directory hash {}, {} has {} (--force applies it anyway)",
          skill_path, *rec.base_dir_hash, base_path, have);
    warnings.push_back(fmt::format("--force: {} was cut from base {}, applying to {} ({})", skill_path,
                                   *rec.base_dir_hash, base_path, have));
  }
  for (const auto& t : k.tensors())
    if (const cmf::TensorInfo* bt = b.find(t.name); bt && bt->shape != t.shape)
      fail(ErrorKind::InvalidArgument,
           "skill apply: tensor '{}' has shape [{}] in the skill, [{}] in the base", t.name,
           fmt::join(t.shape, ", "), fmt::join(bt->shape, ", "));
  rec.base_dir_hash.reset();
  cmf::Header h = b.header();
  h.skills = {rec};
  h.routing.reset();
  cmf::Writer w(output);
  if (!k.masks_bytes().empty()) w.set_masks_raw({k.masks_bytes().begin(), k.masks_bytes().end()});
  if (!b.vocab().empty()) w.set_vocab({b.vocab().begin(), b.vocab().end()});
  for (const auto& t : b.tensors()) {
    const cmf::TensorInfo* kt = k.find(t.name);
    if (kt)
      w.add_tensor(kt->name, kt->dtype, kt->shape, k.payload(*kt));
    else
      w.add_tensor(t.name, t.dtype, t.shape, b.payload(t));
  }
  w.finish(std::move(h));
  return warnings;
}

}  // namespace cortiq::specialize
