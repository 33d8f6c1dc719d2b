// write_hf_checkpoint (hf_export.h).
#include "train/hf_export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "convert/safetensors_writer.h"
#include "util/atomic_file.h"

namespace cortiq::train {

namespace {
void write_text(const std::string& path, const std::string& s) {
  write_file_atomic(path, {reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}
}  // namespace

void write_hf_checkpoint(const std::string& dir, const cmf::ModelArch& a, const Params& params,
                         const std::optional<std::string>& tokenizer_json,
                         std::optional<uint32_t> eos_token_id, const std::string& eos_token) {
  std::filesystem::create_directories(dir);
  nlohmann::ordered_json c;
  c["architectures"] = {"LlamaForCausalLM"};
  c["model_type"] = "llama";
  c["hidden_size"] = a.hidden_size;
  c["intermediate_size"] = a.intermediate_size;
  c["num_hidden_layers"] = a.num_layers;
  c["num_attention_heads"] = a.num_attention_heads;
  c["num_key_value_heads"] = a.num_kv_heads;
  c["head_dim"] = a.head_dim;
  c["vocab_size"] = a.vocab_size;
  c["max_position_embeddings"] = a.max_position_embeddings;
  c["rms_norm_eps"] = a.rms_norm_eps;
  c["rope_theta"] = a.rope_theta;
  c["tie_word_embeddings"] = a.tie_word_embeddings;
  c["hidden_act"] = "silu";
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  c["torch_dtype"] = "float32";
  if (eos_token_id) c["eos_token_id"] = *eos_token_id;
  std::vector<convert::StF32> ts;
  for (const auto& [name, t] : params.all()) ts.push_back({name, t.shape, t.value});
  convert::write_safetensors_f32(dir + "/model.safetensors", ts, {{"format", "pt"}});
  write_text(dir + "/config.json", c.dump(2) + "\n");
  if (tokenizer_json) {
    write_text(dir + "/tokenizer.json", read_file(*tokenizer_json));
    nlohmann::ordered_json tc;
    tc["tokenizer_class"] = "PreTrainedTokenizerFast";
    tc["eos_token"] = eos_token;
    tc["model_max_length"] = a.max_position_embeddings;
    write_text(dir + "/tokenizer_config.json", tc.dump(2) + "\n");
  }
}

}  // namespace cortiq::train
