// write_safetensors_f32 (safetensors_writer.h).
#include "convert/safetensors_writer.h"

#include <nlohmann/json.hpp>
#include <set>

#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::convert {

void write_safetensors_f32(const std::string& path, const std::vector<StF32>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t off = 0;
  for (const StF32& t : tensors) {
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    if (n != t.values.size())
      fail(ErrorKind::InvalidArgument, "safetensors '{}': tensor '{}' has {} values for shape of {}", path,
           t.name, t.values.size(), n);
    if (!seen.insert(t.name).second)
      fail(ErrorKind::InvalidArgument, "safetensors '{}': tensor '{}' given twice", path, t.name);
    h[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + 4 * n}}};
    off += 4 * n;
  }
  std::string js = h.dump();
  js.append((8 - (8 + js.size()) % 8) % 8, ' ');  // data starts 8-byte aligned
  AtomicFile f(path, "model.safetensors");
  const uint64_t len = js.size();
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(len >> (8 * i));
  f.write(le, 8);
  f.write(js.data(), js.size());
  for (const StF32& t : tensors) f.write(t.values.data(), 4 * t.values.size());  // little-endian host
  f.commit();
}

}  // namespace cortiq::convert
