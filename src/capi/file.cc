// cortiq_file_*: opening, verifying and describing a .cmf file or shard set (include/cortiq.h).
#include <nlohmann/json.hpp>

#include "capi/errors.h"
#include "cmf/reader.h"
#include "util/error.h"

using namespace cortiq;
using namespace cortiq::capi;

struct cortiq_file {
  cortiq::cmf::Reader reader;
};

extern "C" {

cortiq_status cortiq_file_open(const char* path, cortiq_file** out) {
  return guarded([&] {
    need(path, "path");
    need(out, "out");
    *out = nullptr;
    auto* f = new cortiq_file{cmf::Reader::open(path)};
    register_handle(f);
    *out = f;
    return CORTIQ_OK;
  });
}

void cortiq_file_close(cortiq_file* f) {
  if (unregister_handle(f)) delete f;
}

size_t cortiq_file_num_files(const cortiq_file* f) {
  return is_live(f) ? f->reader.num_files() : 0;
}

cortiq_status cortiq_file_verify(const cortiq_file* f, char** problems) {
  CORTIQ_CHECK_HANDLE(f, "cortiq_file");
  return guarded([&] {
    if (problems) *problems = nullptr;
    const std::vector<std::string> p = f->reader.verify();
    std::string text;
    for (const auto& line : p) text += (text.empty() ? "" : "\n") + line;
    if (problems) *problems = dup_string(text);
    if (p.empty()) return CORTIQ_OK;
    set_error(text);
    return CORTIQ_ERR_INTEGRITY;
  });
}

cortiq_status cortiq_file_info_json(const cortiq_file* f, char** json) {
  CORTIQ_CHECK_HANDLE(f, "cortiq_file");
  return guarded([&] {
    need(json, "json");
    *json = nullptr;
    const cmf::Reader& r = f->reader;
    const cmf::Header& h = r.header();
    uint64_t params = 0;
    for (const auto& t : r.tensors())
      if (t.name.rfind("skill.", 0) != 0) params += t.numel();
    nlohmann::ordered_json j;
    j["arch"] = h.arch.arch_name;
    j["num_layers"] = h.arch.num_layers;
    j["hidden_size"] = h.arch.hidden_size;
    j["vocab_size"] = h.arch.vocab_size;
    j["max_position_embeddings"] = h.arch.max_position_embeddings;
    j["num_tensors"] = r.tensors().size();
    j["num_files"] = r.num_files();
    j["parameters"] = params;
    j["tasks"] = nlohmann::ordered_json::array();
    if (const cmf::MaskCatalog* cat = r.masks())
      for (const auto& m : cat->masks) j["tasks"].push_back(m.name);
    j["skills"] = nlohmann::ordered_json::array();
    for (const auto& s : r.skills()) j["skills"].push_back(s.id);
    j["has_tokenizer"] = !r.vocab().empty();
    j["has_chat_template"] = h.tokenizer_config && h.tokenizer_config->chat_template &&
                             !h.tokenizer_config->chat_template->empty();
    *json = dup_string(j.dump());
    return CORTIQ_OK;
  });
}

}  // extern "C"
