// CMF v2 streaming writer (layout documented in writer.h).
#include "cmf/writer.h"

#include <cstdio>
#include <unordered_set>

#include "cmf/append.h"
#include "cmf/hash.h"
#include "cmf/reader.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/utf8.h"

namespace cortiq::cmf {

namespace {

struct ShardOut {
  std::unique_ptr<AtomicFile> file;
  std::vector<DirRecord> dir;
  uint64_t data_off = 0;
  uint64_t cursor = 0;  // blob bytes written, relative to data_off
};

std::string stem_of(const std::string& path) {
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".cmf") == 0)
    return path.substr(0, path.size() - 4);
  return path;
}

}  // namespace

struct Writer::Impl {
  std::string path;
  WriterOptions opt;
  std::vector<ShardOut> shards;
  std::unordered_set<std::string> names;
  size_t ntensors = 0;
  std::optional<std::vector<uint8_t>> masks_raw;  // the encoded masks section
  std::vector<uint8_t> vocab;
  bool finished = false;

  uint64_t reserve() const {
    uint64_t r = opt.reserve_bytes ? opt.reserve_bytes : (uint64_t{1} << 20) + 192 * opt.expected_tensors;
    return align_up(std::max<uint64_t>(r, kEnvelopeSize + 1), kDataAlign);
  }

  void new_shard() {
    ShardOut s;
    const std::string target =
        opt.shard_max_bytes ? fmt::format("{}.shard{}.partial", stem_of(path), shards.size() + 1) : path;
    s.file = std::make_unique<AtomicFile>(target);
    s.data_off = reserve();
    s.file->write_zeros(s.data_off);
    shards.push_back(std::move(s));
  }
};

Writer::Writer(std::string path, WriterOptions opt) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->opt = opt;
  impl_->new_shard();
}

Writer::~Writer() = default;

size_t Writer::num_tensors() const noexcept {
  return impl_->ntensors;
}

void Writer::add_tensor(std::string_view name, quant::DType dtype, std::span<const uint64_t> shape,
                        std::span<const uint8_t> payload) {
  Impl& m = *impl_;
  if (m.finished) fail(ErrorKind::InvalidArgument, "{}: add_tensor after finish", m.path);
  if (name.empty()) fail(ErrorKind::InvalidArgument, "{}: empty tensor name", m.path);
  if (name.size() > 0xFFFF)
    fail(ErrorKind::InvalidArgument, "tensor name of {} bytes (max 65535)", name.size());
  if (!is_valid_utf8(name)) fail(ErrorKind::InvalidArgument, "tensor name is not valid UTF-8");
  if (shape.size() > kMaxDims)
    fail(ErrorKind::InvalidArgument, "tensor '{}': {} dims (max {})", name, shape.size(), kMaxDims);
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] > UINT32_MAX)
      fail(ErrorKind::InvalidArgument, "tensor '{}': dim {} = {} exceeds u32", name, d, shape[d]);
  if (m.names.count(std::string(name))) fail(ErrorKind::InvalidArgument, "duplicate tensor name '{}'", name);
  if (m.opt.validate_payloads && dtype != quant::DType::U8)
    quant::validate_payload(dtype, shape, payload, name);

  const uint64_t align = payload.size() >= kBigTensorBytes ? kBigTensorAlign : kTensorAlign;
  ShardOut* s = &m.shards.back();
  uint64_t off = align_up(s->cursor, align);
  // The whole file counts against the limit: the reserved gap before the blob, the blob, and in the
  // first shard the vocab and masks sections written after it at finish.
  const uint64_t tail = m.shards.size() == 1 ? m.vocab.size() + (m.masks_raw ? m.masks_raw->size() : 0) : 0;
  if (m.opt.shard_max_bytes && !s->dir.empty() &&
      s->data_off + off + payload.size() + tail > m.opt.shard_max_bytes) {
    m.new_shard();
    s = &m.shards.back();
    off = 0;
  }
  s->file->write_zeros(off - s->cursor);
  s->file->write(payload);
  s->cursor = off + payload.size();
  DirRecord r;
  r.name = std::string(name);
  r.dtype = dtype;
  r.shape.assign(shape.begin(), shape.end());
  r.off = off;
  r.nbytes = payload.size();
  r.hash = hash64(payload);
  s->dir.push_back(std::move(r));
  m.names.insert(std::string(name));
  ++m.ntensors;
}

void Writer::set_masks(const MaskCatalog& masks, const ModelArch& arch) {
  impl_->masks_raw = encode_masks(masks, arch);
}
void Writer::set_masks_raw(std::vector<uint8_t> section) {
  impl_->masks_raw = std::move(section);
}
void Writer::set_vocab(std::vector<uint8_t> v) {
  impl_->vocab = std::move(v);
}

std::vector<std::string> Writer::finish(Header header) {
  Impl& m = *impl_;
  if (m.finished) fail(ErrorKind::InvalidArgument, "{}: finish called twice", m.path);
  m.finished = true;
  std::vector<uint8_t> masks_bytes;
  if (m.masks_raw) {
    masks_bytes = std::move(*m.masks_raw);
    try {
      (void)decode_masks(masks_bytes, header.arch);
    } catch (const Error& e) {
      fail(ErrorKind::InvalidArgument, "{}: masks section does not match the header's arch: {}", m.path,
           e.message());
    }
  }
  const bool with_loops = header.arch.num_loops > 1;
  bool skill_file = false;
  for (const auto& r : header.skills) skill_file |= r.base_dir_hash.has_value();

  const uint32_t n = static_cast<uint32_t>(m.shards.size());
  std::vector<std::string> finals;
  for (uint32_t k = 0; k < n; ++k) {
    ShardOut& s = m.shards[k];
    AtomicFile& f = *s.file;
    Header h = header;
    h.section_hashes = SectionHashes{};
    h.section_hashes.extra = header.section_hashes.extra;
    h.extra.erase(std::string(kDeadBytesKey));  // a written file is tight: no dead bytes (append.h)
    const bool first = k == 0;
    if (n > 1) {
      h.shard = ShardInfo{k + 1, n};
      if (!first) {
        h.tokenizer_config.reset();
        h.skills.clear();
      }
    } else {
      h.shard.reset();
    }
    Envelope e;
    e.features = feature::kTensorDir;
    e.data = Section{s.data_off, s.cursor};
    for (const auto& r : s.dir)
      if (r.dtype == quant::DType::Q8_2F || r.dtype == quant::DType::VBit || r.dtype == quant::DType::VBitRo)
        e.features |= feature::kQuant2F;
    if (first && !masks_bytes.empty()) {
      e.masks = Section{f.size(), masks_bytes.size()};
      f.write(masks_bytes);
      h.section_hashes.masks = hex16(hash64(masks_bytes));
      e.features |= feature::kBinaryMasks;
      if (with_loops) e.features |= feature::kLoopMasks;
    }
    if (first && !m.vocab.empty()) {
      e.vocab = Section{f.size(), m.vocab.size()};
      f.write(m.vocab);
      h.section_hashes.vocab = hex16(hash64(m.vocab));
    }
    if (first && skill_file) e.features |= feature::kSkillFile;
    const std::string hjson = serialize_header(h);
    const std::vector<uint8_t> dir = encode_directory(s.dir);
    const std::span<const uint8_t> hb(reinterpret_cast<const uint8_t*>(hjson.data()), hjson.size());
    if (kEnvelopeSize + hb.size() + dir.size() <= s.data_off) {
      e.header = Section{kEnvelopeSize, hb.size()};
      e.dir = Section{kEnvelopeSize + hb.size(), dir.size()};
      f.pwrite(e.header.off, hb);
      f.pwrite(e.dir.off, dir);
    } else {
      e.header = Section{f.size(), hb.size()};
      f.write(hb);
      e.dir = Section{f.size(), dir.size()};
      f.write(dir);
    }
    e.header_hash = hash64(hb);
    e.dir_hash = hash64(dir);
    const auto env = e.encode();
    f.pwrite(0, env);
    f.commit();
    if (m.opt.shard_max_bytes) {
      const std::string target = n > 1 ? shard_file_name(stem_of(m.path), k + 1, n) : m.path;
      if (std::rename(f.final_path().c_str(), target.c_str()) != 0)
        fail(ErrorKind::Io, "rename {} -> {} failed", f.final_path(), target);
      finals.push_back(target);
    } else {
      finals.push_back(f.final_path());
    }
  }
  return finals;
}

std::vector<std::string> write_file(const std::string& path, const Header& header,
                                    std::span<const TensorData> tensors,
                                    const std::optional<MaskCatalog>& masks, std::span<const uint8_t> vocab,
                                    WriterOptions opt) {
  if (!opt.expected_tensors) opt.expected_tensors = tensors.size();
  Writer w(path, opt);
  // masks and vocab first: shard 1's size limit counts them (add_tensor)
  if (masks) w.set_masks(*masks, header.arch);
  if (!vocab.empty()) w.set_vocab(std::vector<uint8_t>(vocab.begin(), vocab.end()));
  for (const auto& t : tensors) w.add_tensor(t.name, t.dtype, t.shape, t.payload);
  return w.finish(header);
}

}  // namespace cortiq::cmf
