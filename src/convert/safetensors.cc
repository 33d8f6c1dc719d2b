#include "convert/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/half.h"

namespace cortiq::convert {

namespace {

struct DTypeInfo {
  StDType t;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {StDType::F64, "F64", 8},   {StDType::F32, "F32", 4},         {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::I64, "I64", 8},         {StDType::I32, "I32", 4},
    {StDType::I16, "I16", 2},   {StDType::I8, "I8", 1},           {StDType::U8, "U8", 1},
    {StDType::BOOL, "BOOL", 1}, {StDType::U16, "U16", 2},         {StDType::U32, "U32", 4},
    {StDType::U64, "U64", 8},   {StDType::F8_E4M3, "F8_E4M3", 1}, {StDType::F8_E5M2, "F8_E5M2", 1},
};

// Largest header the safetensors reference accepts (100 MB).
constexpr uint64_t kMaxHeader = 100'000'000;

uint64_t get_u64(const nlohmann::json& v, const std::string& file, const std::string& tensor,
                 const char* field) {
  if (!v.is_number_unsigned())
    fail(ErrorKind::Parse, "safetensors '{}': tensor '{}': {} must hold non-negative integers, got {}", file,
         tensor, field, v.dump());
  return v.get<uint64_t>();
}

}  // namespace

std::string_view st_dtype_name(StDType t) noexcept {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.name;
  return "?";
}

size_t st_dtype_size(StDType t) noexcept {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.size;
  return 0;
}

std::vector<StTensor> parse_safetensors(std::span<const uint8_t> bytes, const std::string& file) {
  if (bytes.size() < 8)
    fail(ErrorKind::Bounds, "safetensors '{}': file is {} bytes, shorter than the 8-byte header length", file,
         bytes.size());
  const uint64_t hlen = load_le<uint64_t>(bytes.data());
  if (hlen < 2 || hlen > kMaxHeader)
    fail(ErrorKind::Parse, "safetensors '{}': header length {} is not plausible (2..{})", file, hlen,
         kMaxHeader);
  if (hlen > bytes.size() - 8)
    fail(ErrorKind::Bounds, "safetensors '{}': header length {} runs past the end of the file ({} bytes)",
         file, hlen, bytes.size());
  const char* hp = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json j = nlohmann::json::parse(hp, hp + hlen, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(ErrorKind::Parse, "safetensors '{}': header is not valid JSON", file);
  if (!j.is_object()) fail(ErrorKind::Parse, "safetensors '{}': header is not a JSON object", file);
  const std::span<const uint8_t> data = bytes.subspan(8 + hlen);

  struct Entry {
    StTensor t;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const auto& v = it.value();
    if (!v.is_object())
      fail(ErrorKind::Parse, "safetensors '{}': tensor '{}': entry is not an object", file, name);
    auto d = v.find("dtype");
    auto s = v.find("shape");
    auto o = v.find("data_offsets");
    if (d == v.end() || !d->is_string())
      fail(ErrorKind::Parse, "safetensors '{}': tensor '{}': missing string 'dtype'", file, name);
    if (s == v.end() || !s->is_array())
      fail(ErrorKind::Parse, "safetensors '{}': tensor '{}': missing array 'shape'", file, name);
    if (o == v.end() || !o->is_array() || o->size() != 2)
      fail(ErrorKind::Parse, "safetensors '{}': tensor '{}': 'data_offsets' must be [begin, end]", file,
           name);
    Entry e;
    e.t.name = name;
    e.t.file = file;
    const std::string ds = d->get<std::string>();
    const DTypeInfo* info = nullptr;
    for (const auto& di : kDTypes)
      if (di.name == ds) info = &di;
    if (info == nullptr)
      fail(ErrorKind::Parse, "safetensors '{}': tensor '{}': unknown dtype '{}'", file, name, ds);
    e.t.dtype = info->t;
    uint64_t numel = 1;
    for (const auto& dim : *s) {
      const uint64_t x = get_u64(dim, file, name, "shape");
      if (x == 0)  // refused before anything divides by a row count or a row length
        fail(ErrorKind::Parse, "safetensors '{}': tensor '{}': shape {} has a dimension 0", file, name,
             s->dump());
      e.t.shape.push_back(x);
      if (numel > UINT64_MAX / x)
        fail(ErrorKind::Bounds, "safetensors '{}': tensor '{}': shape {} overflows u64", file, name,
             s->dump());
      numel *= x;
    }
    e.t.numel = numel;
    e.begin = get_u64((*o)[0], file, name, "data_offsets");
    e.end = get_u64((*o)[1], file, name, "data_offsets");
    if (e.begin > e.end)
      fail(ErrorKind::Bounds, "safetensors '{}': tensor '{}': data_offsets [{}, {}] are reversed", file, name,
           e.begin, e.end);
    if (numel > UINT64_MAX / info->size)
      fail(ErrorKind::Bounds, "safetensors '{}': tensor '{}': byte size of shape {} overflows u64", file,
           name, s->dump());
    if (e.end - e.begin != numel * info->size)
      fail(ErrorKind::Bounds,
           "safetensors '{}': tensor '{}': data_offsets [{}, {}] hold {} bytes but {} {} × {} needs {}", file,
           name, e.begin, e.end, e.end - e.begin, numel, ds, s->dump(), numel * info->size);
    if (e.end > data.size())
      fail(ErrorKind::Bounds,
           "safetensors '{}': tensor '{}': data_offsets [{}, {}] past the data section ({} bytes)", file,
           name, e.begin, e.end, data.size());
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const auto& e : entries) {
    if (e.begin < cursor)
      fail(ErrorKind::Bounds,
           "safetensors '{}': tensor '{}': data_offsets [{}, {}] overlap the previous tensor", file, e.t.name,
           e.begin, e.end);
    if (e.begin > cursor)
      fail(ErrorKind::Bounds,
           "safetensors '{}': tensor '{}': hole of {} unindexed bytes before data_offsets [{}, {}]", file,
           e.t.name, e.begin - cursor, e.begin, e.end);
    cursor = e.end;
  }
  if (cursor != data.size())
    fail(ErrorKind::Bounds,
         "safetensors '{}': {} bytes after the last tensor are not indexed (data section {} bytes)", file,
         data.size() - cursor, data.size());
  std::vector<StTensor> out;
  out.reserve(entries.size());
  for (auto& e : entries) {
    e.t.data = data.subspan(e.begin, e.end - e.begin);
    out.push_back(std::move(e.t));
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  tensors_ = parse_safetensors(file_.bytes(), path);
}

void SafetensorsFile::release(std::span<const uint8_t> bytes) const noexcept {
  if (bytes.empty() || file_.data() == nullptr) return;
  release_pages(bytes);
}

namespace {
std::string join(const std::string& dir, const std::string& f) {
  return (std::filesystem::path(dir) / f).string();
}
}  // namespace

Checkpoint::Checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(ErrorKind::Io, "checkpoint '{}' is not a directory", dir);
  const std::string index_path = join(dir, "model.safetensors.index.json");
  std::vector<std::string> names;
  nlohmann::json weight_map;
  if (fs::exists(index_path, ec)) {
    MappedFile idx(index_path);
    auto j = nlohmann::json::parse(idx.bytes().begin(), idx.bytes().end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail(ErrorKind::Parse, "'{}' is not a JSON object", index_path);
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object())
      fail(ErrorKind::Parse, "'{}' has no object 'weight_map'", index_path);
    weight_map = *wm;
    std::set<std::string> uniq;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        fail(ErrorKind::Parse, "'{}': weight_map['{}'] is not a file name", index_path, it.key());
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." ||
          f == "..")
        fail(ErrorKind::Parse, "'{}': weight_map['{}'] = '{}' is not a plain file name", index_path, it.key(),
             f);
      uniq.insert(f);
    }
    names.assign(uniq.begin(), uniq.end());
  } else if (fs::exists(join(dir, "model.safetensors"), ec)) {
    names.push_back("model.safetensors");
  } else {
    for (const auto& de : fs::directory_iterator(dir, ec))
      if (de.path().extension() == ".safetensors") names.push_back(de.path().filename().string());
    std::sort(names.begin(), names.end());
  }
  if (names.empty()) fail(ErrorKind::Io, "checkpoint '{}' holds no safetensors file", dir);
  for (size_t fi = 0; fi < names.size(); ++fi) {
    files_.push_back(std::make_unique<SafetensorsFile>(join(dir, names[fi])));
    for (const auto& t : files_.back()->tensors()) {
      if (!weight_map.is_null()) {
        auto w = weight_map.find(t.name);
        if (w == weight_map.end() || w->get<std::string>() != names[fi])
          fail(ErrorKind::Parse, "checkpoint '{}': tensor '{}' found in '{}' but the index maps it to '{}'",
               dir, t.name, names[fi],
               w == weight_map.end() ? std::string("nothing") : w->get<std::string>());
      }
      if (!by_name_.emplace(t.name, std::make_pair(&t, fi)).second)
        fail(ErrorKind::Parse, "checkpoint '{}': tensor '{}' appears twice (again in '{}')", dir, t.name,
             names[fi]);
      order_.push_back(&t);
      total_bytes_ += t.data.size();
    }
  }
  if (!weight_map.is_null())
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it)
      if (by_name_.find(it.key()) == by_name_.end())
        fail(ErrorKind::Parse,
             "checkpoint '{}': index maps tensor '{}' to '{}' but that file does not hold it", dir, it.key(),
             it.value().get<std::string>());
}

const StTensor* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second.first;
}

void Checkpoint::release(const StTensor& t) const noexcept {
  auto it = by_name_.find(t.name);
  if (it != by_name_.end()) files_[it->second.second]->release(t.data);
}

void to_f32(const StTensor& t, std::span<float> out) {
  if (out.size() != t.numel)
    fail(ErrorKind::InvalidArgument, "to_f32('{}'): output holds {} floats, tensor has {}", t.name,
         out.size(), t.numel);
  const uint8_t* p = t.data.data();
  const size_t n = out.size();
  switch (t.dtype) {
    case StDType::F32:
      if (n) std::memcpy(out.data(), p, n * 4);
      return;
    case StDType::F16:
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_le<uint16_t>(p + 2 * i));
      return;
    case StDType::BF16:
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_le<uint16_t>(p + 2 * i));
      return;
    case StDType::F64:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_le<double>(p + 8 * i));
      return;
    case StDType::I64:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_le<int64_t>(p + 8 * i));
      return;
    case StDType::I32:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_le<int32_t>(p + 4 * i));
      return;
    case StDType::I16:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_le<int16_t>(p + 2 * i));
      return;
    case StDType::I8:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(p[i]));
      return;
    case StDType::U8:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
      return;
    default:
      fail(ErrorKind::Unsupported, "tensor '{}' in '{}': dtype {} cannot be converted to floats", t.name,
           t.file, st_dtype_name(t.dtype));
  }
}

std::vector<float> to_f32(const StTensor& t) {
  std::vector<float> v(t.numel);
  to_f32(t, v);
  return v;
}

}  // namespace cortiq::convert
