// Tests of the CMF v2 container: hash64, header, masks, writer/reader round trips, byte layout,
// a hand-assembled file, shard sets and hostile input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "cmf/hash.h"
#include "cmf/header.h"
#include "cmf/masks.h"
#include "cmf/reader.h"
#include "cmf/signature.h"
#include "cmf/writer.h"
#include "support/cmf_header.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::cmf {
namespace {

namespace fs = std::filesystem;
using quant::DType;

/// This process's scratch folder, removed with everything in it when the process exits (ctest runs
/// every test as a process of its own, so one folder per test must not be left behind).
std::string tmp_dir() {
  struct Dir {
    fs::path p = fs::temp_directory_path() / fmt::format("cmf_test_{}", ::getpid());
    Dir() { fs::create_directories(p); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  };
  static const Dir d;
  return d.p.string();
}

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

Header small_header(uint32_t layers = 2, uint32_t inter = 20, uint32_t heads = 3) {
  Header h = test::tiny_header("test", 8, inter, layers, heads, 1, 4, 16, 128);
  h.provenance = {{"tool", "cmf_test"}};
  return h;
}

std::vector<uint8_t> iota_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<TensorData> small_tensors() {
  std::vector<TensorData> t;
  t.push_back({"model.embed_tokens.weight", DType::F32, {16, 8}, iota_bytes(16 * 8 * 4, 1)});
  t.push_back({"model.norm.weight", DType::F16, {8}, iota_bytes(16, 2)});
  t.push_back({"model.layers.0.mlp.down_proj.weight", DType::Q8Row, {8, 20}, iota_bytes(8 * 20 + 16, 3)});
  t.push_back({"big", DType::F32, {64, 80}, iota_bytes(64 * 80 * 4, 4)});  // 20 KiB → 4096-aligned
  return t;
}

MaskCatalog small_masks(const ModelArch& a) {
  MaskCatalog c;
  c.default_task = "general";
  c.masks.push_back(make_full_mask(a, "general", 0));
  c.masks[0].priority = MaskPriority::Fallback;
  TaskMask m = make_full_mask(a, "code", 1);
  m.ffn.set(1, 5, false);
  m.heads.set(0, 2, false);
  m.layer_gates.set(0, 1, false);
  m.description = "code only";
  m.sparsity = 0.25f;
  c.masks.push_back(std::move(m));
  return c;
}

// ---------------------------------------------------------------- hash64

TEST(Hash64, TestVectors) {
  EXPECT_EQ(hash64(std::string_view("")), 0u);
  EXPECT_EQ(hash64(std::string_view("CMF")), 0xb59aa39a074033ecull);
  EXPECT_EQ(hash64(std::string_view("0123456789abcdef")), 0x30d401310062ea9full);
  std::vector<uint8_t> b(256);
  for (int i = 0; i < 256; ++i) b[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(hash64(b), 0x9955bb876c0706bfull);
}

TEST(Hash64, StreamMatchesOneShot) {
  std::mt19937 rng(1);
  std::vector<uint8_t> b(1000);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  for (size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 1000u}) {
    Hash64Stream s;
    size_t i = 0, step = 1;
    while (i < len) {
      size_t n = std::min(step, len - i);
      s.update(std::span(b).subspan(i, n));
      i += n;
      step = step * 3 % 17 + 1;
    }
    EXPECT_EQ(s.finish(), hash64(std::span(b).first(len))) << len;
  }
}

// ---------------------------------------------------------------- header

TEST(Header, RoundTripKeepsUnknownFields) {
  const std::string js = R"({"version":2,"future_key":{"a":[1,2]},"quant_type":"Q8_2F",
    "arch":{"arch_name":"qwen3","hidden_size":64,"intermediate_size":128,"num_layers":2,
      "num_attention_heads":4,"num_kv_heads":2,"head_dim":16,"vocab_size":100,
      "layer_types":["LinearAttention","FullAttention"],"rms_norm_eps":1e-6,
      "max_position_embeddings":4096,"norm_style":"gemma","new_arch_field":7,
      "moe":{"num_experts":8,"top_k":2,"moe_intermediate_size":32,"x":1},
      "yarn":{"factor":4.0,"original_max_position_embeddings":1024},
      "linear_conv_kernel_dim":null},
    "tokenizer_config":{"chat_template":"{{x}}","eos_token_ids":[5,6],"pad_token_id":3},
    "skills":[{"id":"sql","layers":[1],"base_dir_hash":"00000000000000ff"}],
    "shard":{"no":1,"count":2}})";
  Header h = parse_header(std::string_view(js));
  EXPECT_EQ(h.format, "cmf");
  EXPECT_EQ(h.quant_type, QuantType::Q8_2F);
  EXPECT_EQ(h.arch.norm_style, NormStyle::Gemma);
  EXPECT_EQ(h.arch.layer_types[0], LayerType::LinearAttention);
  ASSERT_TRUE(h.arch.moe);
  EXPECT_EQ(h.arch.moe->top_k, 2u);
  EXPECT_DOUBLE_EQ(h.arch.yarn->beta_fast, 32.0);
  EXPECT_FALSE(h.arch.linear_conv_kernel_dim);
  EXPECT_EQ(h.tokenizer_config->eos_token_ids, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(h.skills[0].base_dir_hash, "00000000000000ff");
  EXPECT_EQ(h.shard->count, 2u);
  EXPECT_EQ(h.extra["future_key"]["a"][1], 2);
  // rewrite keeps unknown fields anywhere
  nlohmann::json j = nlohmann::json::parse(serialize_header(h));
  EXPECT_EQ(j["future_key"]["a"][0], 1);
  EXPECT_EQ(j["arch"]["new_arch_field"], 7);
  EXPECT_EQ(j["arch"]["moe"]["x"], 1);
  EXPECT_TRUE(j["arch"]["linear_conv_kernel_dim"].is_null());
  EXPECT_EQ(j["quant_type"], "Q8_2F");
  Header h2 = parse_header(serialize_header(h));
  EXPECT_EQ(serialize_header(h2), serialize_header(h));
}

TEST(Header, StrictErrors) {
  auto err = [](const std::string& js) -> std::string {
    try {
      parse_header(std::string_view(js));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Parse);
      return e.message();
    }
    return "no error";
  };
  std::string base = serialize_header(small_header());
  nlohmann::json j = nlohmann::json::parse(base);
  auto without = [&](const char* k) {
    auto c = j;
    c["arch"].erase(k);
    return c.dump();
  };
  EXPECT_NE(err(without("hidden_size")).find("header.arch.hidden_size"), std::string::npos);
  EXPECT_NE(err(without("layer_types")).find("missing required key"), std::string::npos);
  auto c = j;
  c["quant_type"] = "Q4";
  EXPECT_NE(err(c.dump()).find("\"Q4\""), std::string::npos);
  c = j;
  c["arch"]["layer_types"][1] = "fullattention";
  EXPECT_NE(err(c.dump()).find("layer_types[1]"), std::string::npos);
  c = j;
  c["arch"]["num_layers"] = -1;
  EXPECT_NE(err(c.dump()).find("num_layers"), std::string::npos);
  c = j;
  c["arch"]["num_layers"] = 1ull << 33;
  EXPECT_NE(err(c.dump()).find("u32"), std::string::npos);
  EXPECT_NE(err("{not json").find("not valid JSON"), std::string::npos);
  c = j;
  c.erase("version");
  EXPECT_NE(err(c.dump()).find("header.version"), std::string::npos);
}

// ---------------------------------------------------------------- masks

TEST(Masks, RoundTripLegacy) {
  Header h = small_header();
  MaskCatalog c = small_masks(h.arch);
  auto bytes = encode_masks(c, h.arch);
  // n_masks, meta_len, blobs 8-aligned
  uint32_t n, ml;
  std::memcpy(&n, bytes.data(), 4);
  std::memcpy(&ml, bytes.data() + 4, 4);
  EXPECT_EQ(n, 2u);
  auto meta = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + ml);
  const uint64_t off0 = meta["masks"][0]["blob_off"], len0 = meta["masks"][0]["blob_len"];
  EXPECT_EQ(off0 % 8, 0u);
  EXPECT_EQ(len0, 2u * 3 + 2u * 1 + 1u);  // ffn 2×ceil(20/8) + heads 2×1 + gates 1
  EXPECT_EQ(bytes[off0 + 2], 0x0F);       // layer 0 ffn byte 2: bits 16..19 only (tail zero)
  MaskCatalog d = decode_masks(bytes, h.arch);
  ASSERT_EQ(d.masks.size(), 2u);
  EXPECT_EQ(d.default_task, "general");
  EXPECT_EQ(d.masks[1].ffn, c.masks[1].ffn);
  EXPECT_FALSE(d.masks[1].ffn.get(1, 5));
  EXPECT_TRUE(d.masks[1].ffn.get(1, 4));
  EXPECT_FALSE(d.masks[1].gate(1));
  EXPECT_EQ(d.masks[1].description, "code only");
  EXPECT_FLOAT_EQ(d.masks[1].sparsity, 0.25f);
  EXPECT_EQ(d.masks[0].priority, MaskPriority::Fallback);
  EXPECT_TRUE(d.masks[0].quality.is_null());
  EXPECT_EQ(d.masks[1].ffn.count_row(1), 19u);
}

TEST(Masks, LoopAndExpertLayouts) {
  Header h = small_header();
  h.arch.num_loops = 2;
  h.arch.moe = Moe{};
  h.arch.moe->num_experts = 10;
  h.arch.moe->top_k = 2;
  MaskCatalog c;
  c.default_task = "a";
  TaskMask m = make_full_mask(h.arch, "a", 0, true);
  m.ffn = BitRows(4, 20, true);  // per-visit rows
  m.ffn.set(3, 0, false);
  m.experts->set(1, 9, false);
  c.masks.push_back(m);
  c.masks.push_back(make_full_mask(h.arch, "legacy", 1));
  auto bytes = encode_masks(c, h.arch);
  auto d = decode_masks(bytes, h.arch);
  EXPECT_EQ(d.masks[0].ffn.rows(), 4u);
  EXPECT_FALSE(d.masks[0].ffn_row(1, 1, 2)[0] & 1);
  ASSERT_TRUE(d.masks[0].experts);
  EXPECT_FALSE(d.masks[0].experts->get(1, 9));
  EXPECT_EQ(d.masks[1].ffn.rows(), 2u);
  EXPECT_FALSE(d.masks[1].experts);
  EXPECT_TRUE(masks_use_loop_layout(d, h.arch));
  // legacy rows are replicated to every pass
  EXPECT_EQ(d.masks[1].ffn_row(1, 0, 2).data(), d.masks[1].ffn_row(0, 0, 2).data());
  // expert fields on a non-MoE arch → Parse
  Header nomoe = h;
  nomoe.arch.moe.reset();
  try {
    decode_masks(bytes, nomoe.arch);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Parse);
  }
}

TEST(Masks, TailBitsAndBadLength) {
  Header h = small_header();
  auto bytes = encode_masks(small_masks(h.arch), h.arch);
  uint32_t ml;
  std::memcpy(&ml, bytes.data() + 4, 4);
  auto meta = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + ml);
  const uint64_t off0 = meta["masks"][0]["blob_off"];
  auto bad = bytes;
  bad[off0 + 2] |= 0x10;  // neuron 20 of 20 does not exist
  EXPECT_THROW(decode_masks(bad, h.arch), Error);
  Header h2 = h;
  h2.arch.intermediate_size = 30;  // blob length no longer matches
  try {
    decode_masks(bytes, h2.arch);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Parse);
    EXPECT_NE(e.message().find("blob_len"), std::string::npos);
  }
}

// ---------------------------------------------------------------- writer/reader

TEST(Container, RoundTripAllSections) {
  Header h = small_header();
  h.tokenizer_config = TokenizerBundle{};
  h.tokenizer_config->eos_token_ids = {3};
  auto tensors = small_tensors();
  const std::string vocab = R"({"model":{"type":"BPE"}})";
  const std::string path = tmp_dir() + "/rt.cmf";
  auto out = write_file(path, h, tensors, small_masks(h.arch),
                        std::span(reinterpret_cast<const uint8_t*>(vocab.data()), vocab.size()));
  ASSERT_EQ(out, std::vector<std::string>{path});
  Reader r = Reader::open(path);
  ASSERT_EQ(r.tensors().size(), tensors.size());
  for (const auto& t : tensors) {
    const TensorInfo& ti = r.tensor(t.name);
    EXPECT_EQ(ti.dtype, t.dtype);
    EXPECT_EQ(ti.shape, t.shape);
    auto p = r.payload(ti);
    EXPECT_TRUE(std::equal(p.begin(), p.end(), t.payload.begin(), t.payload.end())) << t.name;
    EXPECT_EQ(ti.hash, hash64(t.payload));
  }
  EXPECT_EQ(r.find("nope"), nullptr);
  EXPECT_THROW(r.tensor("nope"), Error);
  ASSERT_NE(r.masks(), nullptr);
  EXPECT_EQ(r.masks()->masks.size(), 2u);
  EXPECT_EQ(std::string(r.vocab().begin(), r.vocab().end()), vocab);
  EXPECT_EQ(r.header().tokenizer_config->eos_token_ids, std::vector<uint32_t>{3});
  EXPECT_EQ(r.header().provenance["tool"], "cmf_test");
  EXPECT_FALSE(r.has_sparse_index());
  EXPECT_FALSE(r.is_skill_file());
  EXPECT_TRUE(r.verify().empty());
  const Envelope& e = r.envelope();
  EXPECT_EQ(e.features, feature::kTensorDir | feature::kBinaryMasks);
  EXPECT_EQ(*r.header().section_hashes.masks, hex16(hash64(r.masks_bytes())));
  EXPECT_EQ(*r.header().section_hashes.vocab, hex16(hash64(r.vocab())));
  EXPECT_FALSE(r.header().section_hashes.index);
}

TEST(Container, ByteLayout) {
  Header h = small_header();
  auto tensors = small_tensors();
  const std::string path = tmp_dir() + "/layout.cmf";
  WriterOptions o;
  o.reserve_bytes = 5000;  // data_off = 8192
  write_file(path, h, tensors, small_masks(h.arch), {}, o);
  auto b = read_all(path);
  auto u32 = [&](size_t off) { return load_le<uint32_t>(&b[off]); };
  auto u64 = [&](size_t off) { return load_le<uint64_t>(&b[off]); };
  EXPECT_EQ(std::memcmp(b.data(), "CMF\x01", 4), 0);
  EXPECT_EQ(u32(4), 2u);
  EXPECT_EQ(u32(8), 0u);
  EXPECT_EQ(u32(12), 0b11u);
  const uint64_t hoff = u64(0x10), hlen = u64(0x18), doff = u64(0x20), dlen = u64(0x28);
  EXPECT_EQ(hoff, 128u);
  EXPECT_EQ(doff, 128u + hlen);
  EXPECT_EQ(u64(0x30), 8192u);
  // directory: count, pool_off, record 0
  EXPECT_EQ(u64(doff), 4u);
  EXPECT_EQ(u64(doff + 8), 16u + 4 * 56);
  const uint8_t* r0 = &b[doff + 16];
  EXPECT_EQ(load_le<uint32_t>(r0), 0u);
  EXPECT_EQ(load_le<uint16_t>(r0 + 4), tensors[0].name.size());
  EXPECT_EQ(r0[6], 0);  // f32
  EXPECT_EQ(r0[7], 2);
  EXPECT_EQ(load_le<uint32_t>(r0 + 8), 16u);
  EXPECT_EQ(load_le<uint32_t>(r0 + 12), 8u);
  EXPECT_EQ(load_le<uint32_t>(r0 + 16), 0u);  // unused dims zero
  EXPECT_EQ(load_le<uint64_t>(r0 + 32), 0u);
  EXPECT_EQ(load_le<uint64_t>(r0 + 40), 512u);
  EXPECT_EQ(load_le<uint64_t>(r0 + 48), hash64(tensors[0].payload));
  // offsets: 0 (512 B), 512 (16 B), 576 (176 B), 4096 (20480 B ≥ 16 KiB → 4096-aligned)
  const uint64_t expect_off[4] = {0, 512, 576, 4096};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(load_le<uint64_t>(&b[doff + 16 + 56 * i + 32]), expect_off[i]) << i;
  EXPECT_EQ(u64(0x38), 4096u + 20480);
  EXPECT_EQ(u64(0x40), 8192u + 4096 + 20480);  // masks right after the blob
  EXPECT_EQ(u64(0x40) + u64(0x48), b.size());
  EXPECT_EQ(u64(0x50), 0u);
  EXPECT_EQ(u64(0x58), 0u);
  EXPECT_EQ(u64(0x60), 0u);
  EXPECT_EQ(u64(0x70), hash64(std::span(b).subspan(hoff, hlen)));
  EXPECT_EQ(u64(0x78), hash64(std::span(b).subspan(doff, dlen)));
  // name pool
  EXPECT_EQ(
      std::string(b.begin() + doff + 16 + 4 * 56, b.begin() + doff + 16 + 4 * 56 + tensors[0].name.size()),
      tensors[0].name);
}

TEST(Container, HeaderAtTailWhenGapTooSmall) {
  Header h = small_header();
  h.provenance["blob"] = std::string(9000, 'x');  // header larger than the 4096 gap
  const std::string path = tmp_dir() + "/tail.cmf";
  WriterOptions o;
  o.reserve_bytes = 1;
  write_file(path, h, small_tensors(), std::nullopt, {}, o);
  Reader r = Reader::open(path);
  EXPECT_EQ(r.envelope().data.off, 4096u);
  EXPECT_GE(r.envelope().header.off, r.envelope().data.end());
  EXPECT_EQ(r.header().provenance["blob"].get<std::string>().size(), 9000u);
  EXPECT_TRUE(r.verify().empty());
}

TEST(Container, FeatureBits) {
  Header h = small_header(2, 32, 2);
  h.arch.num_loops = 2;
  h.skills.push_back(SkillRecord{});
  h.skills[0].id = "s";
  h.skills[0].base_dir_hash = "0123456789abcdef";
  std::vector<TensorData> t;
  t.push_back({"a", DType::VBitRo, {1, 32}, {}});
  // vbit_ro payload: bits[1]=4, scale f16[1], offs u32[2] = {0,16}, packed 16 bytes
  std::vector<uint8_t> p = {4, 0x00, 0x3C, 0, 0, 0, 0, 16, 0, 0, 0};
  p.resize(p.size() + 16, 0x77);
  t[0].payload = p;
  const std::string path = tmp_dir() + "/feat.cmf";
  write_file(path, h, t, small_masks(h.arch));
  Reader r = Reader::open(path);
  EXPECT_EQ(r.envelope().features, feature::kTensorDir | feature::kBinaryMasks | feature::kQuant2F |
                                       feature::kLoopMasks | feature::kSkillFile);
  EXPECT_TRUE(r.is_skill_file());
  EXPECT_TRUE(r.verify().empty());
}

// A CMF file assembled byte by byte from the spec (independently of Writer/encode_directory).
std::vector<uint8_t> hand_built_file() {
  const std::string header =
      R"({"version":2,"quant_type":"F32","arch":{"arch_name":"hand","hidden_size":4,)"
      R"("intermediate_size":8,"num_layers":1,"num_attention_heads":2,"num_kv_heads":1,"head_dim":2,)"
      R"("vocab_size":4,"layer_types":["FullAttention"],"rms_norm_eps":1e-5,"max_position_embeddings":16}})";
  std::vector<uint8_t> f(4096, 0);
  auto put32 = [&](size_t o, uint32_t v) { std::memcpy(&f[o], &v, 4); };
  auto put64 = [&](size_t o, uint64_t v) { std::memcpy(&f[o], &v, 8); };
  std::memcpy(&f[0], "CMF\x01", 4);
  put32(4, 2);
  put32(12, 1);  // TENSOR_DIR
  std::memcpy(&f[128], header.data(), header.size());
  const uint64_t dir_off = 128 + header.size();
  // directory: 2 records, names "w" (f32 [2,2]) and "nb" (f16 [3])
  put64(dir_off, 2);
  put64(dir_off + 8, 16 + 2 * 56);
  size_t r = dir_off + 16;
  put32(r, 0);
  f[r + 4] = 1;
  f[r + 6] = 0;
  f[r + 7] = 2;
  put32(r + 8, 2);
  put32(r + 12, 2);
  put64(r + 32, 0);
  put64(r + 40, 16);
  r += 56;
  put32(r, 1);
  f[r + 4] = 2;
  f[r + 6] = 1;
  f[r + 7] = 1;
  put32(r + 8, 3);
  put64(r + 32, 64);
  put64(r + 40, 6);
  const size_t pool = dir_off + 16 + 112;
  f[pool] = 'w';
  f[pool + 1] = 'n';
  f[pool + 2] = 'b';
  const uint64_t dir_len = 16 + 112 + 3;
  // blob at 4096: w = [1,2,3,4] f32, nb = [1.0, -2.0, 0.5] f16 at +64
  f.resize(4096 + 70, 0);
  const float w[4] = {1, 2, 3, 4};
  std::memcpy(&f[4096], w, 16);
  const uint16_t nb[3] = {0x3C00, 0xC000, 0x3800};
  std::memcpy(&f[4096 + 64], nb, 6);
  // vocab section right after the blob
  const std::string vocab = "{}";
  f.insert(f.end(), vocab.begin(), vocab.end());
  // hashes of the payloads
  put64(dir_off + 16 + 48, hash64(std::span(f).subspan(4096, 16)));
  put64(dir_off + 16 + 56 + 48, hash64(std::span(f).subspan(4096 + 64, 6)));
  put64(0x10, 128);
  put64(0x18, header.size());
  put64(0x20, dir_off);
  put64(0x28, dir_len);
  put64(0x30, 4096);
  put64(0x38, 70);
  put64(0x50, 4096 + 70);
  put64(0x58, 2);
  // envelope hashes left 0 (= absent) on purpose
  return f;
}

TEST(Container, ReadsHandBuiltFile) {
  auto f = hand_built_file();
  Reader r = Reader::open_memory(f);
  ASSERT_EQ(r.tensors().size(), 2u);
  const TensorInfo& w = r.tensor("w");
  EXPECT_EQ(w.shape, (std::vector<uint64_t>{2, 2}));
  float v[4];
  std::memcpy(v, r.payload(w).data(), 16);
  EXPECT_EQ(v[3], 4.0f);
  const TensorInfo& nb = r.tensor("nb");
  EXPECT_EQ(nb.dtype, DType::F16);
  EXPECT_EQ(f16_to_f32(load_le<uint16_t>(r.payload(nb).data() + 2)), -2.0f);
  EXPECT_EQ(r.header().arch.arch_name, "hand");
  EXPECT_EQ(std::string(r.vocab().begin(), r.vocab().end()), "{}");
  EXPECT_TRUE(r.verify().empty());
  // corrupt one payload byte → verify names the tensor
  f[4096 + 65] ^= 1;
  Reader r2 = Reader::open_memory(f);
  auto p = r2.verify();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("tensor 'nb': hash mismatch"), std::string::npos);
}

TEST(Container, SparseIndexRead) {
  std::vector<SparseEntry> e(2);
  e[0] = {0, 1, {0, 3}, {1}};
  e[1] = {1, 0, {}, {0, 2, 5}};
  auto b = encode_sparse_index(e);
  // entry 0: 16 + 4 + 1 = 21 → padded to 24
  EXPECT_EQ(b.size(), 8u + 24 + 20);
  auto d = decode_sparse_index(b);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].groups, (std::vector<uint16_t>{0, 3}));
  EXPECT_EQ(d[1].heads, (std::vector<uint8_t>{0, 2, 5}));
  auto bad = b;
  bad[8 + 8] = 200;  // n_groups of entry 0 → past the end
  EXPECT_THROW(decode_sparse_index(bad), Error);
}

// ---------------------------------------------------------------- shards

TEST(Container, ShardSet) {
  Header h = small_header();
  h.tokenizer_config = TokenizerBundle{};
  const std::string path = tmp_dir() + "/sh.cmf";
  WriterOptions o;
  o.reserve_bytes = 1;  // a 4096-byte gap (the data alignment)
  // the whole file counts: the gap, embed (512) + norm + down, and shard 1's masks and 2-byte vocab
  // fit; "big" gets its own shard
  o.shard_max_bytes = 4096 + 1024 + 2 + encode_masks(small_masks(h.arch), h.arch).size();
  auto tensors = small_tensors();
  tensors.push_back({"tail", DType::F32, {4}, iota_bytes(16, 9)});
  const std::string vocab = "{}";
  auto out = write_file(path, h, tensors, small_masks(h.arch),
                        std::span(reinterpret_cast<const uint8_t*>(vocab.data()), 2), o);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1], tmp_dir() + "/sh-00002-of-00003.cmf");
  for (const auto& p : out) {
    Reader r = Reader::open(p);  // any shard name opens the whole set
    EXPECT_EQ(r.num_files(), 3u);
    EXPECT_EQ(r.tensors().size(), 5u);
    EXPECT_EQ(r.tensor("big").shard, 1u);
    EXPECT_EQ(r.tensor("tail").shard, 2u);
    auto pl = r.payload(r.tensor("tail"));
    EXPECT_TRUE(std::equal(pl.begin(), pl.end(), tensors[4].payload.begin()));
    EXPECT_NE(r.masks(), nullptr);
    EXPECT_TRUE(r.header().tokenizer_config);
    EXPECT_TRUE(r.verify().empty());
  }
  Reader single = Reader::open(out[2], {.open_shard_set = false});
  EXPECT_EQ(single.num_files(), 1u);
  EXPECT_EQ(single.header().shard->no, 3u);
  EXPECT_FALSE(single.header().tokenizer_config);
  EXPECT_TRUE(single.header().skills.empty());
  // missing sibling
  fs::rename(out[1], out[1] + ".bak");
  try {
    Reader::open(out[0]);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(e.message().find("shard 2 of 3 is missing"), std::string::npos);
  }
  fs::rename(out[1] + ".bak", out[1]);
  // the name given to the writer opens the whole set (issue 32 item 6) ...
  {
    Reader by_name = Reader::open(path);
    EXPECT_EQ(by_name.num_files(), 3u);
    EXPECT_EQ(by_name.path(0), out[0]);
    EXPECT_EQ(by_name.tensors().size(), Reader::open(out[0]).tensors().size());
  }
  // ... unless two sets share it: the error names both
  const std::string other = path.substr(0, path.size() - 4) + "-00001-of-00009.cmf";
  fs::copy_file(out[0], other);
  try {
    Reader::open(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(e.message().find(out[0]), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(other), std::string::npos) << e.what();
  }
  fs::remove(other);
  // count mismatch: a 2-shard file under a 3-shard name
  Header h2 = small_header();
  const std::string p2 = tmp_dir() + "/two.cmf";
  auto out2 = write_file(p2, h2, small_tensors(), std::nullopt, {}, o);
  ASSERT_EQ(out2.size(), 2u);
  fs::copy_file(out2[1], tmp_dir() + "/mix-00002-of-00002.cmf");
  fs::copy_file(out2[0], tmp_dir() + "/mix-00001-of-00003.cmf");
  EXPECT_THROW(Reader::open(tmp_dir() + "/mix-00001-of-00003.cmf"), Error);
}

// The shard limit caps whole files: the 4096-byte gap, the tensors, and shard 1's vocab. With a
// 300-byte vocab only one 512-byte tensor fits beside it in shard 1 (a blob-only limit would take
// two), then two per shard; no file passes the limit.
TEST(Container, ShardLimitCountsTheWholeFile) {
  Header h = small_header();
  WriterOptions o;
  o.reserve_bytes = 1;
  o.shard_max_bytes = 4096 + 1100;
  const std::string path = tmp_dir() + "/whole.cmf";
  std::vector<TensorData> ts;
  for (int i = 0; i < 5; ++i)
    ts.push_back({"t" + std::to_string(i), DType::F32, {128}, iota_bytes(512, static_cast<uint8_t>(i))});
  const std::vector<uint8_t> vocab(300, '{');
  const auto out = write_file(path, h, ts, std::nullopt, vocab, o);
  ASSERT_EQ(out.size(), 3u);
  std::vector<size_t> per_file;
  for (const auto& p : out) {
    EXPECT_LE(fs::file_size(p), o.shard_max_bytes) << p;
    per_file.push_back(Reader::open(p, {.open_shard_set = false}).tensors().size());
  }
  EXPECT_EQ(per_file, (std::vector<size_t>{1, 2, 2}));
}

TEST(Container, ShardLimitCountsTheMasks) {
  // The masks section sits in shard 1 beside the vocab: a catalog given as a MaskCatalog is
  // encoded when it is set, so shard 1's limit counts it as it counts raw masks.
  Header h = small_header();
  MaskCatalog cat;
  cat.default_task = "all";
  for (uint32_t i = 0; i < 4; ++i) cat.masks.push_back(make_full_mask(h.arch, "m" + std::to_string(i), i));
  const uint64_t masks_bytes = encode_masks(cat, h.arch).size();
  WriterOptions o;
  o.reserve_bytes = 1;
  o.shard_max_bytes = 4096 + 1100 + masks_bytes;
  std::vector<TensorData> ts;
  for (int i = 0; i < 5; ++i)
    ts.push_back({"t" + std::to_string(i), DType::F32, {128}, iota_bytes(512, static_cast<uint8_t>(i))});
  const std::vector<uint8_t> vocab(300, '{');
  const auto out = write_file(tmp_dir() + "/masks.cmf", h, ts, cat, vocab, o);
  std::vector<size_t> per_file;
  for (const auto& p : out) {
    EXPECT_LE(fs::file_size(p), o.shard_max_bytes) << p;
    per_file.push_back(Reader::open(p, {.open_shard_set = false}).tensors().size());
  }
  EXPECT_EQ(per_file, (std::vector<size_t>{1, 3, 1}));  // shard 1 also holds masks and vocab
  const Reader r = Reader::open(out[0]);
  ASSERT_NE(r.masks(), nullptr);
  EXPECT_EQ(r.masks()->masks.size(), 4u);
}

TEST(Container, DuplicateNamesAcrossShards) {
  // Two single-tensor shards both named "x": build each as a 1-shard-per-tensor set with the same name.
  Header h = small_header();
  WriterOptions o;
  o.shard_max_bytes = 64;
  const std::string a = tmp_dir() + "/da.cmf", b = tmp_dir() + "/db.cmf";
  std::vector<TensorData> ta = {{"x", DType::F32, {16}, iota_bytes(64, 1)},
                                {"y", DType::F32, {16}, iota_bytes(64, 2)}};
  std::vector<TensorData> tb = {{"z", DType::F32, {16}, iota_bytes(64, 3)},
                                {"x", DType::F32, {16}, iota_bytes(64, 4)}};
  auto oa = write_file(a, h, ta, std::nullopt, {}, o);
  auto ob = write_file(b, h, tb, std::nullopt, {}, o);
  // set "da": shard 1 holds x; swap in db's shard 2 (which also holds x)
  fs::remove(oa[1]);
  fs::copy_file(ob[1], oa[1]);
  try {
    Reader::open(oa[0]);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Parse);
    EXPECT_NE(e.message().find("more than one shard"), std::string::npos);
  }
}

// ---------------------------------------------------------------- hostile input

std::vector<uint8_t> small_valid_file() {
  Header h = small_header();
  const std::string path = tmp_dir() + "/flip.cmf";
  std::vector<TensorData> t;
  t.push_back({"a", DType::F32, {4, 4}, iota_bytes(64, 5)});
  t.push_back({"b", DType::Q8Row, {2, 8}, iota_bytes(20, 6)});
  const std::string vocab = R"({"v":1})";
  WriterOptions o;
  o.reserve_bytes = 1;
  write_file(path, h, t, small_masks(h.arch),
             std::span(reinterpret_cast<const uint8_t*>(vocab.data()), vocab.size()), o);
  return read_all(path);
}

ErrorKind open_error(std::span<const uint8_t> b) {
  try {
    Reader::open_memory(b);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Unsupported;  // "no error"
}

TEST(Hostile, EveryByteFlipIsDetected) {
  const auto base = small_valid_file();
  {
    Reader r = Reader::open_memory(base);
    ASSERT_TRUE(r.verify().empty());
  }
  const Envelope e = Reader::open_memory(base).envelope();
  std::vector<size_t> positions;
  for (size_t i = 0; i < e.data.off; ++i) positions.push_back(i);                // envelope, header, dir, gap
  for (size_t i = e.data.off; i < e.data.end(); i += 3) positions.push_back(i);  // blob sample
  for (size_t i = e.data.end(); i < base.size(); ++i) positions.push_back(i);    // masks, vocab
  size_t opened = 0;
  for (size_t pos : positions) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      auto b = base;
      b[pos] ^= mask;
      bool detected = false;
      try {
        Reader r = Reader::open_memory(b);
        ++opened;
        detected = !r.verify().empty();
      } catch (const Error&) {
        detected = true;
      }
      ASSERT_TRUE(detected) << "flip 0x" << std::hex << int(mask) << " at offset " << std::dec << pos
                            << " undetected";
    }
  }
  EXPECT_GT(opened, 0u);
}

TEST(Hostile, TypedErrors) {
  const auto base = small_valid_file();
  const Envelope e = Reader::open_memory(base).envelope();
  // truncated
  EXPECT_EQ(open_error(std::span(base).first(100)), ErrorKind::Bounds);
  EXPECT_EQ(open_error(std::span(base).first(base.size() - 1)), ErrorKind::Bounds);
  EXPECT_EQ(open_error(std::span(base).first(2)), ErrorKind::InvalidMagic);
  // magic / version / features
  auto b = base;
  b[0] = 'X';
  EXPECT_EQ(open_error(b), ErrorKind::InvalidMagic);
  b = base;
  store_le<uint32_t>(&b[4], 1);
  EXPECT_EQ(open_error(b), ErrorKind::UnsupportedVersion);
  b = base;
  store_le<uint32_t>(&b[12], load_le<uint32_t>(&b[12]) | feature::kDeltaMasks);
  EXPECT_EQ(open_error(b), ErrorKind::UnsupportedFeature);
  b = base;
  store_le<uint32_t>(&b[12], load_le<uint32_t>(&b[12]) | (1u << 9));
  EXPECT_EQ(open_error(b), ErrorKind::UnsupportedFeature);
  // 100 GB header_len
  b = base;
  store_le<uint64_t>(&b[0x18], 100ull << 30);
  EXPECT_EQ(open_error(b), ErrorKind::Bounds);
  // header that is not JSON
  b = base;
  b[e.header.off] = '[';
  b[e.header.off + 1] = '!';
  EXPECT_EQ(open_error(b), ErrorKind::Parse);
  // dir entry pointing past the blob: tensor 1 off = data_len
  b = base;
  store_le<uint64_t>(&b[e.dir.off + 16 + 56 + 32], align_up(e.data.len, 64));
  EXPECT_EQ(open_error(b), ErrorKind::Bounds);
  // misaligned tensor
  b = base;
  store_le<uint64_t>(&b[e.dir.off + 16 + 32], 8);
  EXPECT_EQ(open_error(b), ErrorKind::Bounds);
  // unknown dtype
  b = base;
  b[e.dir.off + 16 + 6] = 17;
  try {
    Reader::open_memory(b);
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::Parse);
    EXPECT_NE(err.message().find("unknown dtype 17"), std::string::npos);
  }
  // ndim > 6
  b = base;
  b[e.dir.off + 16 + 7] = 7;
  EXPECT_EQ(open_error(b), ErrorKind::Parse);
  // wrong payload size for a fixed-size dtype (q8_row [2,8] needs 20 bytes)
  b = base;
  store_le<uint64_t>(&b[e.dir.off + 16 + 56 + 40], 19);
  EXPECT_EQ(open_error(b), ErrorKind::Parse);
  // data_off not multiple of 4096
  b = base;
  store_le<uint64_t>(&b[0x30], e.data.off + 64);
  EXPECT_EQ(open_error(b), ErrorKind::Bounds);
  // count overflow in directory
  b = base;
  store_le<uint64_t>(&b[e.dir.off], ~0ull);
  EXPECT_EQ(open_error(b), ErrorKind::Bounds);
  // invalid UTF-8 tensor name
  b = base;
  const uint64_t pool = e.dir.off + load_le<uint64_t>(&b[e.dir.off + 8]);
  b[pool] = 0xC0;
  EXPECT_EQ(open_error(b), ErrorKind::Parse);
  // empty file / nonexistent file
  EXPECT_EQ(open_error({}), ErrorKind::InvalidMagic);
  try {
    Reader::open(tmp_dir() + "/does-not-exist.cmf");
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::Io);
  }
}

/// The message of the Error that opening `b` throws ("" when it opens).
std::string open_message(std::span<const uint8_t> b) {
  try {
    Reader::open_memory(b);
  } catch (const Error& e) {
    return e.message();
  }
  return {};
}

TEST(Hostile, ForeignMagicNamesTheFormat) {
  // GGUF: 4-byte magic, version 3; long enough to pass the envelope-size check, and a short one.
  std::vector<uint8_t> gguf(256, 0);
  std::memcpy(gguf.data(), "GGUF", 4);
  gguf[4] = 3;
  for (size_t n : {gguf.size(), size_t{16}}) {
    const std::string m = open_message(std::span(gguf).first(n));
    EXPECT_NE(
        m.find(n == 16 ? "16 bytes, not a CMF file (magic missing)" : "bad magic 47 47 55 46 at offset 0"),
        std::string::npos)
        << m;
    EXPECT_NE(m.find("; this is a GGUF file; cortiq reads .cmf files: convert it first (`cortiq convert "
                     "FILE.gguf -o out.cmf`)"),
              std::string::npos)
        << m;
    EXPECT_EQ(open_error(std::span(gguf).first(n)), ErrorKind::InvalidMagic);
  }
  // safetensors: u64 LE header length, then the JSON header.
  const std::string json = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::vector<uint8_t> st(8 + json.size() + 4 + 100, 0);
  store_le<uint64_t>(st.data(), json.size());
  std::memcpy(st.data() + 8, json.data(), json.size());
  const std::string m = open_message(st);
  EXPECT_NE(m.find("this looks like a .safetensors file; convert its folder"), std::string::npos) << m;
  // A zip (PK\x03\x04) or random bytes: no hint.
  std::vector<uint8_t> zip(256, 0);
  std::memcpy(zip.data(), "PK\x03\x04", 4);
  const std::string z = open_message(zip);
  EXPECT_NE(z.find("bad magic 50 4b 03 04 at offset 0 (expected 43 4d 46 01)"), std::string::npos) << z;
  EXPECT_EQ(z.find("this "), std::string::npos) << z;
}

TEST(Hostile, RandomGarbageNeverCrashes) {
  std::mt19937 rng(7);
  const auto base = small_valid_file();
  for (int it = 0; it < 300; ++it) {
    auto b = base;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    try {
      Reader r = Reader::open_memory(b);
      (void)r.verify();
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace cortiq::cmf

namespace cortiq::cmf {
namespace {
TEST(Signature, SignVerifyTamper) {
  const std::string path = tmp_dir() + "/sig.cmf";
  write_file(path, small_header(), small_tensors());
  const std::string key = tmp_dir() + "/sig.key";
  std::filesystem::remove(key);
  const auto seed = load_or_create_signing_key(key);
  EXPECT_EQ(seed, load_or_create_signing_key(key));  // reloaded from the hex file
  EXPECT_EQ(read_all(key).size(), 65u);
  EXPECT_FALSE(check_signature(path).present);
  const std::string pub = sign_file(path, seed);
  auto c = check_signature(path);
  EXPECT_TRUE(c.present);
  EXPECT_TRUE(c.valid) << c.problem;
  EXPECT_EQ(c.pubkey, pub);
  EXPECT_FALSE(check_signature(path, std::string(64, '0')).valid);  // pinned other key
  auto b = read_all(path);
  b[b.size() - 1] ^= 1;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  auto t = check_signature(path);
  EXPECT_FALSE(t.valid);
  EXPECT_NE(t.problem.find("SHA-256"), std::string::npos);
}
}  // namespace
}  // namespace cortiq::cmf

namespace cortiq::cmf {
namespace {
// Issue 27: the public half of a key file (RFC 8032 §7.1 test 1's seed and public key), and the
// forms `verify --pubkey` accepts: hex in any case, a .pub file (bare or as `sign` prints it,
// "pubkey: <hex>"), a signing key file; anything else is an error naming it.
TEST(Signature, PublicKeyOfASeedAndThePubkeyArgumentForms) {
  const std::string seed_hex = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
  const std::string pub = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
  const std::string key = tmp_dir() + "/rfc8032.key";
  std::ofstream(key) << "  " << seed_hex.substr(0, 32) << "\n" << seed_hex.substr(32) << "\n";
  EXPECT_EQ(public_key_hex(load_signing_key(key)), pub);
  EXPECT_EQ(resolve_public_key(key), pub);
  std::string upper = pub;
  for (auto& ch : upper)
    if (ch >= 'a' && ch <= 'f') ch = static_cast<char>(ch - 'a' + 'A');
  EXPECT_EQ(resolve_public_key(upper), pub);
  const std::string p1 = tmp_dir() + "/a.pub", p2 = tmp_dir() + "/b.pub", bad = tmp_dir() + "/bad.pub";
  std::ofstream(p1) << upper << "\n";
  std::ofstream(p2) << "pubkey: " << pub << "\n";
  std::ofstream(bad) << seed_hex.substr(2) << "\n";  // 62 hex chars
  EXPECT_EQ(resolve_public_key(p1), pub);
  EXPECT_EQ(resolve_public_key(p2), pub);
  const auto kind_and_message = [](const std::string& arg) -> std::pair<ErrorKind, std::string> {
    try {
      (void)resolve_public_key(arg);
    } catch (const Error& e) {
      return {e.kind(), e.message()};
    }
    return {ErrorKind::InvalidMagic, "no error"};  // no call above may return this
  };
  auto [k1, m1] = kind_and_message(bad);
  EXPECT_EQ(k1, ErrorKind::Parse);
  EXPECT_EQ(m1, bad + ": a .pub file must hold 64 hex characters (an Ed25519 public key)");
  auto [k2, m2] = kind_and_message(tmp_dir() + "/none");
  EXPECT_EQ(k2, ErrorKind::Io);
  EXPECT_NE(m2.find("is neither 64 hex characters"), std::string::npos) << m2;
  auto [k3, m3] = kind_and_message(pub.substr(1));  // 63 hex chars, no such file
  EXPECT_EQ(k3, ErrorKind::Io);
  // a key file that is not a key
  const std::string notkey = tmp_dir() + "/not.key";
  std::ofstream(notkey) << "hello\n";
  auto [k4, m4] = kind_and_message(notkey);
  EXPECT_EQ(k4, ErrorKind::Parse);
  EXPECT_EQ(m4, notkey + ": signing key must be 64 hex characters (32-byte Ed25519 seed)");
  // sign_file's public key (its own derivation) is the same
  const std::string path = tmp_dir() + "/rfc.cmf";
  write_file(path, small_header(), small_tensors());
  EXPECT_EQ(sign_file(path, load_signing_key(key)), pub);
  EXPECT_TRUE(check_signature(path, resolve_public_key(p2)).valid);
}
}  // namespace
}  // namespace cortiq::cmf
