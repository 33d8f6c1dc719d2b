#include "convert/gguf_writer.h"

#include <cstring>

#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::convert {

namespace {

constexpr uint64_t kAlign = 32;

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  const size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));  // little-endian host (util/half.h)
}

void put_string(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  const size_t at = b.size();
  b.resize(at + s.size());
  if (!s.empty()) std::memcpy(b.data() + at, s.data(), s.size());
}

void put_value(std::vector<uint8_t>& b, GgufValueType t, const nlohmann::json& v, const std::string& key) {
  const auto need_int = [&] {
    if (!v.is_number_integer())
      fail(ErrorKind::InvalidArgument, "GGUF key '{}': {} is not an integer", key, v.dump());
  };
  switch (t) {
    case GgufValueType::U8:
      need_int();
      return put<uint8_t>(b, v.get<uint8_t>());
    case GgufValueType::I8:
      need_int();
      return put<int8_t>(b, v.get<int8_t>());
    case GgufValueType::U16:
      need_int();
      return put<uint16_t>(b, v.get<uint16_t>());
    case GgufValueType::I16:
      need_int();
      return put<int16_t>(b, v.get<int16_t>());
    case GgufValueType::U32:
      need_int();
      return put<uint32_t>(b, v.get<uint32_t>());
    case GgufValueType::I32:
      need_int();
      return put<int32_t>(b, v.get<int32_t>());
    case GgufValueType::U64:
      need_int();
      return put<uint64_t>(b, v.get<uint64_t>());
    case GgufValueType::I64:
      need_int();
      return put<int64_t>(b, v.get<int64_t>());
    case GgufValueType::F32:
      if (!v.is_number())
        fail(ErrorKind::InvalidArgument, "GGUF key '{}': {} is not a number", key, v.dump());
      return put<float>(b, static_cast<float>(v.get<double>()));
    case GgufValueType::F64:
      if (!v.is_number())
        fail(ErrorKind::InvalidArgument, "GGUF key '{}': {} is not a number", key, v.dump());
      return put<double>(b, v.get<double>());
    case GgufValueType::Bool:
      if (!v.is_boolean()) fail(ErrorKind::InvalidArgument, "GGUF key '{}': {} is not a bool", key, v.dump());
      return put<uint8_t>(b, v.get<bool>() ? 1 : 0);
    case GgufValueType::String:
      if (!v.is_string())
        fail(ErrorKind::InvalidArgument, "GGUF key '{}': {} is not a string", key, v.dump());
      return put_string(b, v.get_ref<const std::string&>());
    case GgufValueType::Array:
      break;
  }
  fail(ErrorKind::InvalidArgument, "GGUF key '{}': nested arrays are not written", key);
}

}  // namespace

bool GgufWriter::has(const std::string& key) const {
  for (const auto& k : kvs_)
    if (k.key == key) return true;
  return false;
}

void GgufWriter::add(const GgufKv& kv) {
  if (kv.type == GgufValueType::Array)
    add_array(kv.key, kv.elem, kv.value);
  else
    add(kv.key, kv.type, kv.value);
}

void GgufWriter::add(const std::string& key, GgufValueType type, const nlohmann::json& value) {
  if (has(key)) fail(ErrorKind::InvalidArgument, "GGUF key '{}' added twice", key);
  std::vector<uint8_t> probe;
  put_value(probe, type, value, key);  // type check now, not at write time
  kvs_.push_back({key, type, type, value});
}

void GgufWriter::add_array(const std::string& key, GgufValueType elem, const nlohmann::json& values) {
  if (has(key)) fail(ErrorKind::InvalidArgument, "GGUF key '{}' added twice", key);
  if (!values.is_array()) fail(ErrorKind::InvalidArgument, "GGUF key '{}': not an array", key);
  kvs_.push_back({key, GgufValueType::Array, elem, values});
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<uint64_t>& shape, uint32_t type,
                            uint64_t bytes) {
  for (const auto& t : tensors_)
    if (t.name == name) fail(ErrorKind::InvalidArgument, "GGUF tensor '{}' added twice", name);
  tensors_.push_back({name, shape, type, bytes});
}

uint64_t GgufWriter::write(const std::string& path,
                           const std::function<std::vector<uint8_t>(size_t)>& produce) const {
  std::vector<uint8_t> head;
  put<uint32_t>(head, 0x46554747u);  // "GGUF"
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kvs_.size());
  for (const auto& k : kvs_) {
    put_string(head, k.key);
    put<uint32_t>(head, static_cast<uint32_t>(k.type));
    if (k.type == GgufValueType::Array) {
      put<uint32_t>(head, static_cast<uint32_t>(k.elem));
      put<uint64_t>(head, k.value.size());
      for (const auto& e : k.value) put_value(head, k.elem, e, k.key);
    } else {
      put_value(head, k.type, k.value, k.key);
    }
  }
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(head, *it);
    put<uint32_t>(head, t.type);
    put<uint64_t>(head, off);
    off += (t.bytes + kAlign - 1) / kAlign * kAlign;
  }
  head.resize((head.size() + kAlign - 1) / kAlign * kAlign, 0);
  AtomicFile f(path, "model.gguf");
  f.write(head);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const std::vector<uint8_t> data = produce(i);
    if (data.size() != tensors_[i].bytes)
      fail(ErrorKind::InvalidArgument, "GGUF tensor '{}': {} bytes produced, {} declared", tensors_[i].name,
           data.size(), tensors_[i].bytes);
    f.write(data);
    f.write_zeros((kAlign - data.size() % kAlign) % kAlign);
  }
  const uint64_t size = f.size();
  f.commit();
  return size;
}

}  // namespace cortiq::convert
