#include "convert/gguf.h"

#include <fmt/ranges.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "util/error.h"
#include "util/half.h"

namespace cortiq::convert {

namespace {

// ---------------------------------------------------------------------------------------------
// ggml type table (ggml.c type_traits: blck_size, type_size). Types 4, 5 (removed Q4_2/Q4_3),
// 31..33 and 36..38 (removed repacked variants) are left out.

struct TypeInfo {
  uint32_t id;
  const char* name;
  uint64_t block_elems;
  uint64_t block_bytes;
};

constexpr TypeInfo kTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

const TypeInfo* type_info(uint32_t t) noexcept {
  for (const auto& ti : kTypes)
    if (ti.id == t) return &ti;
  return nullptr;
}

// GGUF metadata value types.
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* value_type_name(uint32_t t) noexcept {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  return t <= kF64 ? kNames[t] : "?";
}

// Smallest number of bytes one value of type `t` can take in the file.
uint64_t min_value_bytes(uint32_t t) noexcept {
  switch (t) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
    case kString:
      return 8;
    case kArray:
      return 12;
    default:
      return 1;
  }
}

constexpr int kMaxArrayDepth = 16;

// Bounds-checked little-endian reader over the mapped file. `what`/`name` only feed messages.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> b, const std::string& path) : b_(b), path_(path) {}

  uint64_t pos() const noexcept { return pos_; }
  uint64_t left() const noexcept { return b_.size() - pos_; }
  uint64_t size() const noexcept { return b_.size(); }

  void need(uint64_t n, std::string_view what, std::string_view name) const {
    if (n > left())
      fail(ErrorKind::Bounds, "gguf '{}': {}{}{}{} at offset {} needs {} bytes but the file ends at {}",
           path_, what, name.empty() ? "" : " '", name, name.empty() ? "" : "'", pos_, n, b_.size());
  }

  template <typename T>
  T get(std::string_view what, std::string_view name) {
    need(sizeof(T), what, name);
    T v = load_le<T>(b_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }

  std::string str(std::string_view what, std::string_view name) {
    const uint64_t len = get<uint64_t>(what, name);
    need(len, what, name);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  // A count of items each taking at least `min_bytes`: more items than the file has bytes is
  // absurd (Parse); fewer but still more than the rest of the file can hold is a truncated or
  // corrupt file (Bounds).
  void check_count(uint64_t count, uint64_t min_bytes, std::string_view what, std::string_view name) const {
    if (count > b_.size())
      fail(ErrorKind::Parse,
           "gguf '{}': {}{}{}{} at offset {} claims {} items, more than the file's {} bytes", path_, what,
           name.empty() ? "" : " '", name, name.empty() ? "" : "'", pos_, count, b_.size());
    if (count > left() / min_bytes)
      fail(ErrorKind::Bounds,
           "gguf '{}': {}{}{}{} at offset {}: {} items need at least {} bytes but the file ends at {}", path_,
           what, name.empty() ? "" : " '", name, name.empty() ? "" : "'", pos_, count, count * min_bytes,
           b_.size());
  }

 private:
  std::span<const uint8_t> b_;
  const std::string& path_;
  uint64_t pos_ = 0;
};

nlohmann::json read_value(Cursor& c, uint32_t type, const std::string& key, const std::string& path,
                          int depth, int* elem_type) {
  switch (type) {
    case kU8:
      return c.get<uint8_t>("value of key", key);
    case kI8:
      return c.get<int8_t>("value of key", key);
    case kU16:
      return c.get<uint16_t>("value of key", key);
    case kI16:
      return c.get<int16_t>("value of key", key);
    case kU32:
      return c.get<uint32_t>("value of key", key);
    case kI32:
      return c.get<int32_t>("value of key", key);
    case kF32:
      return static_cast<double>(c.get<float>("value of key", key));
    case kBool:
      return c.get<uint8_t>("value of key", key) != 0;
    case kString:
      return c.str("string value of key", key);
    case kU64:
      return c.get<uint64_t>("value of key", key);
    case kI64:
      return c.get<int64_t>("value of key", key);
    case kF64:
      return c.get<double>("value of key", key);
    case kArray: {
      if (depth >= kMaxArrayDepth)
        fail(ErrorKind::Parse, "gguf '{}': key '{}': arrays nested deeper than {} at offset {}", path, key,
             kMaxArrayDepth, c.pos());
      const uint64_t at = c.pos();
      const uint32_t et = c.get<uint32_t>("array element type of key", key);
      if (et > kF64)
        fail(ErrorKind::Parse, "gguf '{}': key '{}': unknown array element type {} at offset {}", path, key,
             et, at);
      if (elem_type != nullptr) *elem_type = static_cast<int>(et);
      const uint64_t n = c.get<uint64_t>("array length of key", key);
      c.check_count(n, min_value_bytes(et), fmt::format("{} array of key", value_type_name(et)), key);
      nlohmann::json arr = nlohmann::json::array();
      arr.get_ref<nlohmann::json::array_t&>().reserve(n);
      for (uint64_t i = 0; i < n; ++i) arr.push_back(read_value(c, et, key, path, depth + 1, nullptr));
      return arr;
    }
    default:
      fail(ErrorKind::Parse, "gguf '{}': key '{}': unknown value type {} at offset {}", path, key, type,
           c.pos() - 4);
  }
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
  const TypeInfo* ti = type_info(type);
  return ti != nullptr ? std::string(ti->name) : fmt::format("type {}", type);
}

bool ggml_block_geometry(uint32_t type, uint64_t& block_elems, uint64_t& block_bytes) noexcept {
  const TypeInfo* ti = type_info(type);
  if (ti == nullptr) return false;
  block_elems = ti->block_elems;
  block_bytes = ti->block_bytes;
  return true;
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
  const std::span<const uint8_t> b = file_.bytes();
  Cursor c(b, path);

  // Header.
  static constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
  const size_t nm = std::min<size_t>(4, b.size());
  if (nm > 0 && std::memcmp(b.data(), kMagic, nm) != 0) {
    std::string shown;
    for (size_t i = 0; i < nm; ++i) shown += fmt::format("{}{:02x}", i ? " " : "", b[i]);
    fail(ErrorKind::InvalidMagic, "'{}' is not a GGUF file: it starts with bytes [{}], not \"GGUF\"", path,
         shown);
  }
  c.need(4, "magic", "");
  (void)c.get<uint32_t>("magic", "");
  version_ = c.get<uint32_t>("version", "");
  if (version_ != 2 && version_ != 3)
    fail(ErrorKind::UnsupportedVersion, "gguf '{}': version {} is not supported (2 or 3){}", path, version_,
         version_ == 0x03000000u || version_ == 0x02000000u ? " — a big-endian GGUF file" : "");
  const uint64_t n_tensors = c.get<uint64_t>("tensor count", "");
  const uint64_t n_kv = c.get<uint64_t>("metadata key count", "");
  c.check_count(n_kv, 13, "metadata key count", "");

  // Metadata.
  keys_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    const std::string idx = fmt::format("#{}", i);
    std::string key = c.str("metadata key", idx);
    const uint32_t type = c.get<uint32_t>("value type of key", key);
    if (type > kF64)
      fail(ErrorKind::Parse, "gguf '{}': key '{}' (at offset {}): unknown value type {}", path, key, at,
           type);
    if (types_.count(key) != 0)
      fail(ErrorKind::Parse, "gguf '{}': key '{}' appears twice (again at offset {})", path, key, at);
    int elem_type = -1;
    nlohmann::json v = read_value(c, type, key, path, 0, &elem_type);
    types_.emplace(key, std::make_pair(static_cast<int>(type), elem_type));
    metadata_[key] = std::move(v);
    keys_.push_back(std::move(key));
  }

  // general.alignment.
  if (auto it = metadata_.find("general.alignment"); it != metadata_.end()) {
    const nlohmann::json& a = *it;
    // llama.cpp (gguf.cpp) reads the key only as u32: another type would place the data elsewhere there
    if (const int type = metadata_type("general.alignment"); type != static_cast<int>(kU32))
      fail(ErrorKind::Parse,
           "gguf '{}': general.alignment is stored as {} (type {}); it must be u32 (type 4)", path,
           value_type_name(static_cast<uint32_t>(type)), type);
    const uint64_t v = a.get<uint64_t>();
    if (v == 0 || (v & (v - 1)) != 0)
      fail(ErrorKind::Parse, "gguf '{}': general.alignment = {} is not a power-of-two unsigned integer", path,
           a.dump());
    alignment_ = v;
  }

  // Tensor table.
  c.check_count(n_tensors, 32, "tensor count", "");
  std::vector<uint64_t> raw;  // byte size of each tensor
  tensors_.reserve(n_tensors);
  raw.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string idx = fmt::format("#{}", i);
    GgufTensor t;
    t.name = c.str("tensor name", idx);
    const uint64_t at = c.pos();
    const uint32_t n_dims = c.get<uint32_t>("dimension count of tensor", t.name);
    if (n_dims == 0 || n_dims > 4)
      fail(ErrorKind::Parse, "gguf '{}': tensor '{}' (offset {}): {} dimensions (1..4 allowed)", path, t.name,
           at, n_dims);
    uint64_t numel = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t x = c.get<uint64_t>("dimensions of tensor", t.name);
      if (x >= (uint64_t{1} << 63))
        fail(ErrorKind::Parse, "gguf '{}': tensor '{}': dimension {} = {} is negative as int64", path, t.name,
             d, x);
      if (x == 0)  // refused before anything divides by a row count or a row length
        fail(ErrorKind::Parse, "gguf '{}': tensor '{}' (offset {}): dimension ne[{}] is 0", path, t.name, at,
             d);
      t.ne.push_back(x);
      if (numel > static_cast<uint64_t>(INT64_MAX) / x) overflow = true;
      numel *= x;
    }
    if (overflow)
      fail(ErrorKind::Parse, "gguf '{}': tensor '{}': element count of ne {} overflows int64", path, t.name,
           fmt::join(t.ne, ","));
    t.numel = numel;
    t.shape.assign(t.ne.rbegin(), t.ne.rend());
    t.type = c.get<uint32_t>("type of tensor", t.name);
    uint64_t be = 0, bb = 0;
    if (!ggml_block_geometry(t.type, be, bb))
      fail(ErrorKind::Parse, "gguf '{}': tensor '{}': unknown ggml type {}", path, t.name, t.type);
    if (t.ne[0] % be != 0)
      fail(ErrorKind::Parse,
           "gguf '{}': tensor '{}': row length ne[0] = {} is not a multiple of the {} block size {}", path,
           t.name, t.ne[0], ggml_type_name(t.type), be);
    const uint64_t blocks = numel / be;
    if (blocks > UINT64_MAX / bb)
      fail(ErrorKind::Parse, "gguf '{}': tensor '{}': byte size overflows u64", path, t.name);
    t.offset = c.get<uint64_t>("data offset of tensor", t.name);
    if (by_name_.count(t.name) != 0)
      fail(ErrorKind::Parse, "gguf '{}': tensor name '{}' appears twice (entry #{})", path, t.name, i);
    by_name_.emplace(t.name, tensors_.size());
    raw.push_back(blocks * bb);
    tensors_.push_back(std::move(t));
  }

  // Data section.
  const uint64_t end_of_table = c.pos();
  const uint64_t pad = (alignment_ - end_of_table % alignment_) % alignment_;
  if (pad > UINT64_MAX - end_of_table)
    fail(ErrorKind::Bounds, "gguf '{}': aligning the data start {} to {} overflows", path, end_of_table,
         alignment_);
  data_offset_ = end_of_table + pad;
  if (tensors_.empty()) return;
  if (data_offset_ > b.size())
    fail(ErrorKind::Bounds, "gguf '{}': the data section would start at {} (alignment {}), past the end {}",
         path, data_offset_, alignment_, b.size());
  const uint64_t data_len = b.size() - data_offset_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensor& t = tensors_[i];
    const uint64_t n = raw[i];
    if (t.offset % alignment_ != 0)
      fail(ErrorKind::Bounds, "gguf '{}': tensor '{}': offset {} is not a multiple of the alignment {}", path,
           t.name, t.offset, alignment_);
    if (t.offset > data_len || n > data_len - t.offset)
      fail(ErrorKind::Bounds,
           "gguf '{}': tensor '{}' ({} {}, {} bytes) at data offset {} (file offset {}) runs past the end of "
           "the file ({} bytes)",
           path, t.name, ggml_type_name(t.type), fmt::join(t.ne, "x"), n, t.offset,
           t.offset <= UINT64_MAX - data_offset_ ? t.offset + data_offset_ : UINT64_MAX, b.size());
    t.data = b.subspan(data_offset_ + t.offset, n);
    total_bytes_ += n;
  }
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return tensors_[x].offset < tensors_[y].offset; });
  uint64_t cursor = 0;
  const GgufTensor* prev = nullptr;
  for (size_t i : order) {
    const GgufTensor& t = tensors_[i];
    if (t.data.empty()) continue;
    if (prev != nullptr && t.offset < cursor)
      fail(ErrorKind::Bounds,
           "gguf '{}': tensor '{}' at data offset {} overlaps tensor '{}' (data offsets {}..{})", path,
           t.name, t.offset, prev->name, prev->offset, cursor);
    cursor = t.offset + t.data.size();
    prev = &t;
  }
}

int GgufFile::metadata_type(std::string_view key) const noexcept {
  auto it = types_.find(key);
  return it == types_.end() ? -1 : it->second.first;
}

int GgufFile::metadata_array_type(std::string_view key) const noexcept {
  auto it = types_.find(key);
  return it == types_.end() ? -1 : it->second.second;
}

const GgufTensor* GgufFile::find(std::string_view name) const noexcept {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::release(const GgufTensor& t) const noexcept {
  const uint8_t* lo = file_.data();
  if (lo == nullptr || t.data.empty()) return;
  if (t.data.data() < lo || t.data.data() + t.data.size() > lo + file_.size()) return;  // not ours
  release_pages(t.data);
}

// ---------------------------------------------------------------------------------------------
// Dequantization: one block at a time, ggml-quants.c dequantize_row_* formulas.

namespace {

inline float h2f(const uint8_t* p) noexcept {
  return f16_to_f32(load_le<uint16_t>(p));
}

// block_q4_0 {f16 d; u8 qs[16]}: y[j] = (lo4 - 8)·d, y[j+16] = (hi4 - 8)·d.
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// block_q4_1 {f16 d; f16 m; u8 qs[16]}: y = q·d + m.
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// block_q5_0 {f16 d; u8 qh[4]; u8 qs[16]}: 5th bit of value j is bit j of qh (u32 LE).
void deq_q5_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  const uint32_t qh = load_le<uint32_t>(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    y[j] = static_cast<float>(((qs[j] & 0x0F) | h0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | h1) - 16) * d;
  }
}

// block_q5_1 {f16 d; f16 m; u8 qh[4]; u8 qs[16]}: y = q·d + m.
void deq_q5_1(const uint8_t* b, float* y) {
  const float d = h2f(b), m = h2f(b + 2);
  const uint32_t qh = load_le<uint32_t>(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    y[j] = static_cast<float>((qs[j] & 0x0F) | h0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | h1) * d + m;
  }
}

// block_q8_0 {f16 d; i8 qs[32]}: y = q·d.
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = h2f(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// block_q2_K {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}: 16 groups of 16; group scale byte = low
// nibble scale, high nibble min; y = d·sc·q − dmin·mn, q = 2 bits.
void deq_q2_K(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* q = b + 16;
  const float d = h2f(b + 80), dmin = h2f(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t s = sc[is++];
        const float dl = d * static_cast<float>(s & 0x0F);
        const float ml = dmin * static_cast<float>(s >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

// block_q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: 16 six-bit signed scales (low 4 bits
// in nibbles of scales[0..7], high 2 bits in scales[8..11]), minus 32; q = 2 low bits − (hmask bit ?
// 0 : 4).
void deq_q3_K(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* s = b + 96;
  const float d_all = h2f(b + 108);
  int sc[16];
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = (lo | (hi << 4)) - 32;
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * static_cast<float>(sc[is++]);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

// ggml-quants.c get_scale_min_k4: 8 six-bit scales and mins packed in 12 bytes (Q4_K, Q5_K).
inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& mn) noexcept {
  if (j < 4) {
    sc = q[j] & 63;
    mn = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// block_q4_K {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}: 8 groups of 32; y = d·sc·q − dmin·mn.
void deq_q4_K(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* q = b + 16;
  for (int is = 0; is < 8; is += 2) {
    int sc, mn;
    scale_min_k4(is, s, sc, mn);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
    scale_min_k4(is + 1, s, sc, mn);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
  }
}

// block_q5_K {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: as Q4_K plus a 5th bit.
void deq_q5_K(const uint8_t* b, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int is = 0; is < 8; is += 2) {
    int sc, mn;
    scale_min_k4(is, s, sc, mn);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
    scale_min_k4(is + 1, s, sc, mn);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
    for (int l = 0; l < 32; ++l)
      *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

// block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 6-bit q − 32, 16 groups of 16.
void deq_q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = h2f(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// block_q8_K {f32 d; i8 qs[256]; i16 bsums[16]}: y = d·q.
void deq_q8_K(const uint8_t* b, float* y) {
  const float d = load_le<float>(b);
  for (int j = 0; j < 256; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(uint32_t type) noexcept {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0:
      return deq_q4_0;
    case GgmlType::Q4_1:
      return deq_q4_1;
    case GgmlType::Q5_0:
      return deq_q5_0;
    case GgmlType::Q5_1:
      return deq_q5_1;
    case GgmlType::Q8_0:
      return deq_q8_0;
    case GgmlType::Q2_K:
      return deq_q2_K;
    case GgmlType::Q3_K:
      return deq_q3_K;
    case GgmlType::Q4_K:
      return deq_q4_K;
    case GgmlType::Q5_K:
      return deq_q5_K;
    case GgmlType::Q6_K:
      return deq_q6_K;
    case GgmlType::Q8_K:
      return deq_q8_K;
    default:
      return nullptr;
  }
}

}  // namespace

void gguf_to_f32(const GgufTensor& t, std::span<float> out) {
  if (out.size() != t.numel)
    fail(ErrorKind::InvalidArgument, "gguf_to_f32('{}'): output holds {} floats, tensor has {}", t.name,
         out.size(), t.numel);
  const auto type = static_cast<GgmlType>(t.type);
  const bool plain = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
  const BlockFn fn = plain ? nullptr : block_fn(t.type);
  if (!plain && fn == nullptr)
    fail(ErrorKind::Unsupported, "tensor '{}': ggml type {} cannot be dequantized by cortiq", t.name,
         ggml_type_name(t.type));
  uint64_t be = 0, bb = 0;
  ggml_block_geometry(t.type, be, bb);
  if (t.numel % be != 0 || t.data.size() != t.numel / be * bb)
    fail(ErrorKind::Bounds, "tensor '{}': {} values of type {} take {} bytes, the tensor has {}", t.name,
         t.numel, ggml_type_name(t.type), t.numel % be == 0 ? t.numel / be * bb : 0, t.data.size());
  const uint8_t* p = t.data.data();
  const size_t n = out.size();
  switch (type) {
    case GgmlType::F32:
      if (n) std::memcpy(out.data(), p, n * 4);
      return;
    case GgmlType::F16:
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_le<uint16_t>(p + 2 * i));
      return;
    case GgmlType::BF16:
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_le<uint16_t>(p + 2 * i));
      return;
    default:
      break;
  }
  const uint64_t blocks = t.numel / be;
  for (uint64_t i = 0; i < blocks; ++i) fn(p + i * bb, out.data() + i * be);
}

std::vector<float> gguf_to_f32(const GgufTensor& t) {
  std::vector<float> v(t.numel);
  gguf_to_f32(t, v);
  return v;
}

}  // namespace cortiq::convert
