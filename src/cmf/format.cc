// Envelope and directory codecs (FORMAT-NOTES §1.2, §1.6).
#include "cmf/format.h"

#include <limits>

#include "util/error.h"
#include "util/half.h"
#include "util/utf8.h"

namespace cortiq::cmf {

namespace {
uint32_t rd32(const uint8_t* p) noexcept {
  return load_le<uint32_t>(p);
}
uint64_t rd64(const uint8_t* p) noexcept {
  return load_le<uint64_t>(p);
}
}  // namespace

Envelope Envelope::decode(std::span<const uint8_t, kEnvelopeSize> b) noexcept {
  Envelope e;
  for (int i = 0; i < 4; ++i) e.magic[i] = b[i];
  e.version = rd32(&b[4]);
  e.flags = rd32(&b[8]);
  e.features = rd32(&b[12]);
  Section* secs[6] = {&e.header, &e.dir, &e.data, &e.masks, &e.vocab, &e.index};
  for (int i = 0; i < 6; ++i) {
    secs[i]->off = rd64(&b[16 + 16 * i]);
    secs[i]->len = rd64(&b[24 + 16 * i]);
  }
  e.header_hash = rd64(&b[0x70]);
  e.dir_hash = rd64(&b[0x78]);
  return e;
}

std::array<uint8_t, kEnvelopeSize> Envelope::encode() const noexcept {
  std::array<uint8_t, kEnvelopeSize> b{};
  for (int i = 0; i < 4; ++i) b[i] = magic[i];
  store_le<uint32_t>(&b[4], version);
  store_le<uint32_t>(&b[8], flags);
  store_le<uint32_t>(&b[12], features);
  const Section* secs[6] = {&header, &dir, &data, &masks, &vocab, &index};
  for (int i = 0; i < 6; ++i) {
    store_le<uint64_t>(&b[16 + 16 * i], secs[i]->off);
    store_le<uint64_t>(&b[24 + 16 * i], secs[i]->len);
  }
  store_le<uint64_t>(&b[0x70], header_hash);
  store_le<uint64_t>(&b[0x78], dir_hash);
  return b;
}

std::vector<uint8_t> encode_directory(std::span<const DirRecord> recs) {
  const uint64_t count = recs.size();
  const uint64_t pool_off = 16 + count * kDirRecordSize;
  std::vector<uint8_t> out(pool_off, 0);
  store_le<uint64_t>(&out[0], count);
  store_le<uint64_t>(&out[8], pool_off);
  uint64_t name_off = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const DirRecord& r = recs[i];
    if (r.name.size() > 0xFFFF)
      fail(ErrorKind::InvalidArgument, "tensor '{}…': name is {} bytes (max 65535)", r.name.substr(0, 64),
           r.name.size());
    if (name_off > std::numeric_limits<uint32_t>::max())
      fail(ErrorKind::InvalidArgument, "directory: name pool exceeds 4 GiB at tensor '{}'", r.name);
    if (r.shape.size() > kMaxDims)
      fail(ErrorKind::InvalidArgument, "tensor '{}': {} dims (max {})", r.name, r.shape.size(), kMaxDims);
    uint8_t* p = &out[16 + i * kDirRecordSize];
    store_le<uint32_t>(p, static_cast<uint32_t>(name_off));
    store_le<uint16_t>(p + 4, static_cast<uint16_t>(r.name.size()));
    p[6] = static_cast<uint8_t>(r.dtype);
    p[7] = static_cast<uint8_t>(r.shape.size());
    for (size_t d = 0; d < r.shape.size(); ++d) {
      if (r.shape[d] > std::numeric_limits<uint32_t>::max() || r.shape[d] == 0)
        fail(ErrorKind::InvalidArgument, "tensor '{}': dim {} = {} {}", r.name, d, r.shape[d],
             r.shape[d] ? "exceeds u32" : "(readers refuse a zero dimension)");
      store_le<uint32_t>(p + 8 + 4 * d, static_cast<uint32_t>(r.shape[d]));
    }
    store_le<uint64_t>(p + 32, r.off);
    store_le<uint64_t>(p + 40, r.nbytes);
    store_le<uint64_t>(p + 48, r.hash);
    name_off += r.name.size();
  }
  for (const auto& r : recs) out.insert(out.end(), r.name.begin(), r.name.end());
  return out;
}

std::vector<DirRecord> decode_directory(std::span<const uint8_t> dir, uint64_t file_off) {
  if (dir.size() < 16)
    fail(ErrorKind::Parse, "directory at offset {}: {} bytes, need at least 16", file_off, dir.size());
  const uint64_t count = rd64(dir.data()), pool_off = rd64(dir.data() + 8);
  if (count > (dir.size() - 16) / kDirRecordSize)
    fail(ErrorKind::Bounds, "directory at offset {}: count {} records do not fit in {} bytes", file_off,
         count, dir.size());
  const uint64_t rec_end = 16 + count * kDirRecordSize;
  if (pool_off < rec_end || pool_off > dir.size())
    fail(ErrorKind::Bounds, "directory at offset {}: pool_off {} outside [{}, {}]", file_off, pool_off,
         rec_end, dir.size());
  const uint64_t pool_len = dir.size() - pool_off;
  const auto* pool = reinterpret_cast<const char*>(dir.data() + pool_off);
  std::vector<DirRecord> out;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* p = dir.data() + 16 + i * kDirRecordSize;
    const uint64_t rec_at = file_off + 16 + i * kDirRecordSize;
    DirRecord r;
    const uint64_t noff = rd32(p), nlen = load_le<uint16_t>(p + 4);
    if (noff > pool_len || nlen > pool_len - noff)
      fail(ErrorKind::Bounds, "directory record {} (offset {}): name [{}, +{}) outside the {}-byte pool", i,
           rec_at, noff, nlen, pool_len);
    r.name.assign(pool + noff, nlen);
    if (!is_valid_utf8(r.name))
      fail(ErrorKind::Parse, "directory record {} (offset {}): tensor name is not valid UTF-8", i, rec_at);
    auto dt = quant::dtype_from_id(p[6]);
    if (!dt) fail(ErrorKind::Parse, "tensor '{}' (directory record {}): unknown dtype {}", r.name, i, p[6]);
    r.dtype = *dt;
    const unsigned ndim = p[7];
    if (ndim > kMaxDims) fail(ErrorKind::Parse, "tensor '{}': ndim {} > {}", r.name, ndim, kMaxDims);
    for (unsigned d = 0; d < ndim; ++d) {
      const uint32_t x = rd32(p + 8 + 4 * d);
      if (x == 0)  // a zero dim would make every "cols = numel / rows" downstream divide by zero
        fail(ErrorKind::Parse, "tensor '{}' (directory record {}, offset {}): dimension {} is 0", r.name, i,
             rec_at, d);
      r.shape.push_back(x);
    }
    r.off = rd64(p + 32);
    r.nbytes = rd64(p + 40);
    r.hash = rd64(p + 48);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace cortiq::cmf
