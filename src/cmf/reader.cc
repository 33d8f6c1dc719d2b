// CMF v2 reader (spec §1–§10, FORMAT-NOTES §1.4, §1.10, §1.15).
#include "cmf/reader.h"

#include <sys/mman.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <unordered_set>

#include "cmf/append.h"
#include "cmf/hash.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::cmf {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "CMF readers assume a little-endian host");

uint64_t TensorInfo::numel() const noexcept {
  uint64_t n = 1;
  for (auto d : shape) n *= d;  // validated not to overflow at open
  return n;
}

// ---------------------------------------------------------------- sparse index

std::vector<SparseEntry> decode_sparse_index(std::span<const uint8_t> s) {
  if (s.size() < 8) fail(ErrorKind::Parse, "sparse index: {} bytes, need at least 8", s.size());
  const uint32_t n = load_le<uint32_t>(s.data());
  std::vector<SparseEntry> out;
  uint64_t pos = 8;
  for (uint32_t i = 0; i < n; ++i) {
    if (s.size() - pos < 16)
      fail(ErrorKind::Bounds, "sparse index entry {} at section offset {}: header past the end ({} bytes)", i,
           pos, s.size());
    SparseEntry e;
    e.task_id = load_le<uint32_t>(s.data() + pos);
    e.layer = load_le<uint32_t>(s.data() + pos + 4);
    const uint64_t ng = load_le<uint32_t>(s.data() + pos + 8), nh = load_le<uint32_t>(s.data() + pos + 12);
    pos += 16;
    const uint64_t body = 2 * ng + nh;
    if (body > s.size() - pos)
      fail(ErrorKind::Bounds, "sparse index entry {}: {} groups + {} heads run past the section end at {}", i,
           ng, nh, s.size());
    e.groups.resize(ng);
    for (uint64_t k = 0; k < ng; ++k) e.groups[k] = load_le<uint16_t>(s.data() + pos + 2 * k);
    e.heads.assign(s.data() + pos + 2 * ng, s.data() + pos + body);
    pos = align_up(pos + body, 4);
    if (pos > s.size()) pos = s.size();
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<uint8_t> encode_sparse_index(std::span<const SparseEntry> entries) {
  std::vector<uint8_t> out(8, 0);
  store_le<uint32_t>(out.data(), static_cast<uint32_t>(entries.size()));
  for (const auto& e : entries) {
    size_t p = out.size();
    out.resize(p + 16 + 2 * e.groups.size() + e.heads.size(), 0);
    store_le<uint32_t>(&out[p], e.task_id);
    store_le<uint32_t>(&out[p + 4], e.layer);
    store_le<uint32_t>(&out[p + 8], static_cast<uint32_t>(e.groups.size()));
    store_le<uint32_t>(&out[p + 12], static_cast<uint32_t>(e.heads.size()));
    p += 16;
    for (auto g : e.groups) store_le<uint16_t>(&out[p], g), p += 2;
    for (auto h : e.heads) out[p++] = h;
    out.resize(align_up(out.size(), 4), 0);
  }
  return out;
}

// ---------------------------------------------------------------- shard names

std::optional<ShardName> parse_shard_name(std::string_view path) {
  // "-NNNNN-of-NNNNN.cmf" = 19 chars of suffix
  constexpr size_t kSuf = 19;
  if (path.size() < kSuf) return std::nullopt;
  std::string_view suf = path.substr(path.size() - kSuf);
  if (suf[0] != '-' || suf.substr(6, 4) != "-of-" || suf.substr(15) != ".cmf") return std::nullopt;
  auto num = [](std::string_view d) -> std::optional<uint32_t> {
    uint32_t v = 0;
    for (char c : d) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + static_cast<uint32_t>(c - '0');
    }
    return v;
  };
  auto no = num(suf.substr(1, 5)), count = num(suf.substr(10, 5));
  if (!no || !count || *no == 0 || *count == 0 || *no > *count) return std::nullopt;
  return ShardName{std::string(path.substr(0, path.size() - kSuf)), *no, *count};
}

std::string shard_file_name(std::string_view stem, uint32_t no, uint32_t count) {
  return fmt::format("{}-{:05}-of-{:05}.cmf", stem, no, count);
}

// ---------------------------------------------------------------- one file

namespace {

struct File {
  std::string path;
  MappedFile map;                  // empty for open_memory
  std::span<const uint8_t> bytes;  // whole file
  Envelope env;
  Header header;
  std::vector<DirRecord> dir;
  std::optional<MaskCatalog> masks;
  std::vector<SparseEntry> index;

  std::span<const uint8_t> sec(const Section& s) const { return bytes.subspan(s.off, s.len); }
};

const char* kSecNames[6] = {"header", "dir", "data", "masks", "vocab", "index"};

/// For a file that is not CMF: what it looks like, as "; this is a GGUF file; …" to append to the
/// InvalidMagic message, or "" when we do not recognise it. GGUF starts with "GGUF"; a safetensors
/// file with its header length (u64 LE) followed by the JSON header's '{'.
std::string magic_hint(std::span<const uint8_t> b) {
  if (b.size() >= 4 && std::equal(b.begin(), b.begin() + 4, "GGUF"))
    return "; this is a GGUF file; cortiq reads .cmf files: convert it first (`cortiq convert FILE.gguf "
           "-o out.cmf`)";
  if (b.size() >= 9 && b[8] == '{') {
    const uint64_t n = load_le<uint64_t>(b.data());
    if (n >= 2 && n <= 100'000'000)  // safetensors caps its header at 100 MB
      return "; this looks like a .safetensors file; convert its folder (`cortiq convert <folder> -o "
             "out.cmf`)";
  }
  return {};
}

void open_file(File& f, const OpenOptions& opt) {
  const auto b = f.bytes;
  if (b.size() < kEnvelopeSize) {
    if (b.size() < 4 || !std::equal(kMagic.begin(), kMagic.end(), b.begin()))
      fail(ErrorKind::InvalidMagic, "{}: {} bytes, not a CMF file (magic missing){}", f.path, b.size(),
           magic_hint(b));
    fail(ErrorKind::Bounds, "{}: file is {} bytes, shorter than the 128-byte envelope", f.path, b.size());
  }
  f.env = Envelope::decode(b.first<kEnvelopeSize>());
  const Envelope& e = f.env;
  if (e.magic != kMagic)
    fail(ErrorKind::InvalidMagic,
         "{}: bad magic {:02x} {:02x} {:02x} {:02x} at offset 0 (expected 43 4d 46 01){}", f.path, e.magic[0],
         e.magic[1], e.magic[2], e.magic[3], magic_hint(b));
  if (e.version != kVersion)
    fail(ErrorKind::UnsupportedVersion, "{}: version {} at offset 0x04 (only 2 is supported)", f.path,
         e.version);
  if (e.features & ~feature::kSupported)
    fail(ErrorKind::UnsupportedFeature,
         "{}: required_features 0x{:08x} has unsupported bits 0x{:08x} (offset 0x0c)", f.path, e.features,
         e.features & ~feature::kSupported);
  // Sections: inside the file, not overlapping each other or the envelope.
  const Section* secs[6] = {&e.header, &e.dir, &e.data, &e.masks, &e.vocab, &e.index};
  if (!e.header.present()) fail(ErrorKind::Parse, "{}: header section is empty (offset 0x18)", f.path);
  if (!e.dir.present()) fail(ErrorKind::Parse, "{}: directory section is empty (offset 0x28)", f.path);
  for (int i = 0; i < 6; ++i) {
    const Section& s = *secs[i];
    if (!s.present()) continue;
    uint64_t end;
    if (__builtin_add_overflow(s.off, s.len, &end) || end > b.size())
      fail(ErrorKind::Bounds, "{}: {} section [{}, +{}) extends past the end of the {}-byte file", f.path,
           kSecNames[i], s.off, s.len, b.size());
    if (s.off < kEnvelopeSize)
      fail(ErrorKind::Bounds, "{}: {} section at offset {} overlaps the envelope", f.path, kSecNames[i],
           s.off);
    for (int k = 0; k < i; ++k) {
      const Section& o = *secs[k];
      if (o.present() && s.off < o.end() && o.off < s.end())
        fail(ErrorKind::Bounds, "{}: {} section [{}, {}) overlaps {} section [{}, {})", f.path, kSecNames[i],
             s.off, s.end(), kSecNames[k], o.off, o.end());
    }
  }
  if (e.data.present() && e.data.off % kDataAlign != 0)
    fail(ErrorKind::Bounds, "{}: data_off {} is not a multiple of 4096 (offset 0x30)", f.path, e.data.off);

  try {
    f.header = parse_header(f.sec(e.header));
  } catch (const Error& err) {
    fail(err.kind(), "{}: {} (header section at offset {})", f.path, err.message(), e.header.off);
  }
  try {
    f.dir = decode_directory(f.sec(e.dir), e.dir.off);
  } catch (const Error& err) {
    fail(err.kind(), "{}: {}", f.path, err.message());
  }

  std::unordered_set<std::string_view> names;
  names.reserve(f.dir.size() * 2);
  for (const DirRecord& r : f.dir) {
    if (!names.insert(r.name).second)
      fail(ErrorKind::Parse, "{}: duplicate tensor name '{}'", f.path, r.name);
    if (r.off % kTensorAlign != 0)
      fail(ErrorKind::Bounds, "{}: tensor '{}': off {} is not a multiple of 64", f.path, r.name, r.off);
    uint64_t end;
    if (__builtin_add_overflow(r.off, r.nbytes, &end) || end > e.data.len)
      fail(ErrorKind::Bounds, "{}: tensor '{}': [{}, +{}) extends past data_len {}", f.path, r.name, r.off,
           r.nbytes, e.data.len);
    uint64_t n = 1;
    for (auto d : r.shape)
      if (__builtin_mul_overflow(n, d, &n))
        fail(ErrorKind::Bounds, "{}: tensor '{}': shape product overflows u64", f.path, r.name);
    if (opt.validate_payloads && r.dtype != quant::DType::Mix8_4 && r.dtype != quant::DType::Q4Col &&
        r.dtype != quant::DType::U8) {
      try {
        quant::validate_payload(r.dtype, r.shape, b.subspan(e.data.off + r.off, r.nbytes), r.name);
      } catch (const Error& err) {
        fail(err.kind(), "{}: {}", f.path, err.message());
      }
    }
  }
  if (e.masks.present()) {
    try {
      f.masks = decode_masks(f.sec(e.masks), f.header.arch);
    } catch (const Error& err) {
      fail(err.kind(), "{}: {} (masks section at offset {})", f.path, err.message(), e.masks.off);
    }
  }
  if (e.index.present()) {
    try {
      f.index = decode_sparse_index(f.sec(e.index));
    } catch (const Error& err) {
      fail(err.kind(), "{}: {} (index section at offset {})", f.path, err.message(), e.index.off);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- Reader

struct Reader::Impl {
  std::vector<File> files;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string_view, size_t> by_name;

  void build_index() {
    for (size_t s = 0; s < files.size(); ++s)
      for (const DirRecord& r : files[s].dir)
        tensors.push_back(
            TensorInfo{r.name, r.dtype, r.shape, r.off, r.nbytes, r.hash, static_cast<uint32_t>(s)});
    by_name.reserve(tensors.size() * 2);
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!by_name.emplace(tensors[i].name, i).second)
        fail(ErrorKind::Parse, "{}: tensor '{}' appears in more than one shard", files[tensors[i].shard].path,
             tensors[i].name);
  }
};

Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

Reader Reader::open_memory(std::span<const uint8_t> bytes, const OpenOptions& opt) {
  auto impl = std::make_unique<Impl>();
  impl->files.emplace_back();
  impl->files[0].path = "<memory>";
  impl->files[0].bytes = bytes;
  open_file(impl->files[0], opt);
  impl->build_index();
  return Reader(std::move(impl));
}

Reader Reader::open(const std::string& path, const OpenOptions& opt) {
  auto impl = std::make_unique<Impl>();
  auto load = [&](const std::string& p) {
    File f;
    f.path = p;
    f.map = MappedFile(p, opt.map_mode);
    f.bytes = f.map.bytes();
    open_file(f, opt);
    return f;
  };
  auto sn = parse_shard_name(path);
  if (!sn && !std::filesystem::exists(path)) {
    // `convert -o out.cmf --shard-max-gb N` writes out-00001-of-0000K.cmf…: name the set.
    const std::filesystem::path p(path);
    const std::string prefix = p.stem().string() + "-00001-of-";
    // The set opens by the name it was written with (issue 32 item 6); two sets of that stem
    // (different shard counts) are ambiguous and named.
    std::error_code ec;
    const auto dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
    std::vector<std::string> sets;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && parse_shard_name(e.path().string()))
        sets.push_back(e.path().string());
    }
    std::sort(sets.begin(), sets.end());
    if (sets.size() == 1) return open(sets[0], opt);
    if (sets.size() > 1)
      fail(ErrorKind::Io,
           "cannot open '{}': no such file, and the shard sets {} share its name (open one of them)", path,
           fmt::join(sets, ", "));
  }
  File first = load(path);
  const bool set = opt.open_shard_set && sn && first.header.shard;
  if (!set) {
    impl->files.push_back(std::move(first));
  } else {
    const ShardInfo hs = *first.header.shard;
    if (hs.no != sn->no || hs.count != sn->count)
      fail(ErrorKind::Parse, "{}: header.shard {{no: {}, count: {}}} disagrees with the file name ({} of {})",
           path, hs.no, hs.count, sn->no, sn->count);
    for (uint32_t k = 1; k <= sn->count; ++k) {
      if (k == sn->no) {
        impl->files.push_back(std::move(first));
        continue;
      }
      const std::string p = shard_file_name(sn->stem, k, sn->count);
      if (!std::filesystem::exists(p))
        fail(ErrorKind::Io, "shard set {}: shard {} of {} is missing ({})", path, k, sn->count, p);
      File f = load(p);
      if (!f.header.shard || f.header.shard->no != k || f.header.shard->count != sn->count)
        fail(ErrorKind::Parse, "{}: header.shard is {} but the file is shard {} of {}", p,
             f.header.shard ? fmt::format("{{no: {}, count: {}}}", f.header.shard->no, f.header.shard->count)
                            : std::string("absent"),
             k, sn->count);
      impl->files.push_back(std::move(f));
    }
  }
  impl->build_index();
  return Reader(std::move(impl));
}

const Header& Reader::header() const noexcept {
  return impl_->files[0].header;
}
std::span<const uint8_t> Reader::header_bytes() const noexcept {
  const File& f = impl_->files[0];
  return f.sec(f.env.header);
}
const Envelope& Reader::envelope(size_t s) const {
  return impl_->files.at(s).env;
}
size_t Reader::num_files() const noexcept {
  return impl_->files.size();
}
const std::string& Reader::path(size_t s) const {
  return impl_->files.at(s).path;
}
std::span<const uint8_t> Reader::file_bytes(size_t s) const {
  return impl_->files.at(s).bytes;
}
const std::vector<TensorInfo>& Reader::tensors() const noexcept {
  return impl_->tensors;
}

const TensorInfo* Reader::find(std::string_view name) const noexcept {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

const TensorInfo& Reader::tensor(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail(ErrorKind::InvalidArgument, "{}: no tensor '{}'", path(), name);
  return *t;
}

std::span<const uint8_t> Reader::payload(const TensorInfo& t) const {
  const File& f = impl_->files.at(t.shard);
  return f.bytes.subspan(f.env.data.off + t.off, t.nbytes);
}

void Reader::release(std::span<const uint8_t> bytes) const {
  for (const File& f : impl_->files)
    if (!f.bytes.empty() && bytes.data() >= f.bytes.data() && bytes.data() < f.bytes.data() + f.bytes.size())
      return f.map.release(bytes);  // open_memory: an empty map, which ignores every range
}

const MaskCatalog* Reader::masks() const noexcept {
  const auto& m = impl_->files[0].masks;
  return m ? &*m : nullptr;
}
std::span<const uint8_t> Reader::masks_bytes() const noexcept {
  const File& f = impl_->files[0];
  return f.sec(f.env.masks);
}
std::span<const uint8_t> Reader::vocab() const noexcept {
  const File& f = impl_->files[0];
  return f.sec(f.env.vocab);
}
const std::vector<SparseEntry>& Reader::sparse_index() const noexcept {
  return impl_->files[0].index;
}
bool Reader::has_sparse_index() const noexcept {
  return impl_->files[0].env.index.present();
}
bool Reader::is_skill_file() const noexcept {
  return impl_->files[0].env.features & feature::kSkillFile;
}

// ---------------------------------------------------------------- verify

namespace {

/// One integrity problem of the small parts of a file: its error kind and its description.
struct Problem {
  ErrorKind kind;
  std::string what;
};

/// The header and directory hashes of the envelope (when stored, i.e. ≠ 0) and the masks, vocab and
/// index section hashes of header.section_hashes checked against the bytes of `f` (spec §8.1); the
/// tensor payloads are not read. Empty when every stored hash matches.
std::vector<Problem> section_problems(const File& f) {
  std::vector<Problem> out;
  const Envelope& e = f.env;
  auto mismatch = [&](const char* nm, uint64_t stored, uint64_t actual) {
    out.push_back(
        {ErrorKind::HashMismatch,
         fmt::format("section '{}': hash mismatch (stored {:016x}, actual {:016x})", nm, stored, actual)});
  };
  if (e.header_hash != 0)
    if (const uint64_t h = hash64(f.sec(e.header)); h != e.header_hash) mismatch("header", e.header_hash, h);
  if (e.dir_hash != 0)
    if (const uint64_t h = hash64(f.sec(e.dir)); h != e.dir_hash) mismatch("directory", e.dir_hash, h);
  const Section* secs[3] = {&e.masks, &e.vocab, &e.index};
  const std::optional<std::string>* stored[3] = {
      &f.header.section_hashes.masks, &f.header.section_hashes.vocab, &f.header.section_hashes.index};
  for (int i = 0; i < 3; ++i) {
    const char* nm = kSecNames[3 + i];
    if (!stored[i]->has_value()) continue;
    const auto v = parse_hex16(**stored[i]);
    if (!v)
      out.push_back({ErrorKind::Parse, fmt::format("section '{}': malformed hash '{}'", nm, **stored[i])});
    else if (!secs[i]->present())
      out.push_back({ErrorKind::HashMismatch,
                     fmt::format("section '{}': hash {} stored but the section is absent", nm, **stored[i])});
    else if (const uint64_t h = hash64(f.sec(*secs[i])); h != *v)
      mismatch(nm, *v, h);
  }
  return out;
}

}  // namespace

void Reader::check_sections() const {
  for (const File& f : impl_->files) {
    const std::vector<Problem> problems = section_problems(f);
    if (problems.empty()) continue;
    std::string all = problems[0].what;
    for (size_t i = 1; i < problems.size(); ++i) all += "; " + problems[i].what;
    fail(problems[0].kind,
         "{}: {}: the file was changed or damaged after it was written (`cortiq verify {}` lists every "
         "problem)",
         f.path, all, f.path);
  }
}

uint64_t Reader::verify_total_bytes() const noexcept {
  uint64_t n = 0;
  for (const auto& t : impl_->tensors) n += t.nbytes;
  return n;
}

std::vector<std::string> Reader::verify(const ProgressFn& progress) const {
  std::vector<std::string> problems;
  const bool many = impl_->files.size() > 1;
  for (size_t s = 0; s < impl_->files.size(); ++s) {
    const File& f = impl_->files[s];
    const Envelope& e = f.env;
    if (f.map.size() > 0) {  // page-aligned mmap: hint a sequential read-ahead for the hash pass
      ::madvise(const_cast<uint8_t*>(f.map.data()), f.map.size(), MADV_SEQUENTIAL);
      ::madvise(const_cast<uint8_t*>(f.map.data()), f.map.size(), MADV_WILLNEED);
    }
    const std::string pre = many ? fmt::format("{}: ", f.path) : std::string();
    auto add = [&](std::string p) { problems.push_back(pre + std::move(p)); };
    if (e.flags != 0) add(fmt::format("envelope: reserved flags are 0x{:08x} (must be 0)", e.flags));
    // required_features consistent with the content (FORMAT-NOTES §1.3; decision 2 for QUANT_2F).
    bool q2f_need = false, q2f_allow = false;
    for (const auto& r : f.dir) {
      q2f_need |= r.dtype == quant::DType::Q8_2F || r.dtype == quant::DType::VBit;
      q2f_allow |=
          r.dtype == quant::DType::Q8_2F || r.dtype == quant::DType::VBit || r.dtype == quant::DType::VBitRo;
    }
    const bool has_q2f = e.features & feature::kQuant2F;
    if (!(e.features & feature::kTensorDir)) add("envelope: required_features lacks TENSOR_DIR (bit 0)");
    if (bool(e.features & feature::kBinaryMasks) != e.masks.present())
      add(fmt::format("envelope: BINARY_MASKS (bit 1) is {} but the masks section is {}",
                      (e.features & feature::kBinaryMasks) ? "set" : "clear",
                      e.masks.present() ? "present" : "absent"));
    if (q2f_need && !has_q2f) add("envelope: q8_2f/vbit tensors present but QUANT_2F (bit 2) is clear");
    if (!q2f_allow && has_q2f) add("envelope: QUANT_2F (bit 2) set but no q8_2f/vbit/vbit_ro tensor");
    const bool loop_need = e.masks.present() && f.header.arch.num_loops > 1;
    if (bool(e.features & feature::kLoopMasks) != loop_need)
      add(fmt::format("envelope: LOOP_MASKS (bit 5) is {} but masks {} and num_loops = {}",
                      (e.features & feature::kLoopMasks) ? "set" : "clear",
                      e.masks.present() ? "are present" : "are absent", f.header.arch.num_loops));
    bool skill_need = false;
    for (const auto& r : f.header.skills) skill_need |= r.base_dir_hash.has_value();
    if (bool(e.features & feature::kSkillFile) != skill_need)
      add(fmt::format("envelope: SKILL_FILE (bit 6) is {} but {} skill record has base_dir_hash",
                      (e.features & feature::kSkillFile) ? "set" : "clear", skill_need ? "a" : "no"));
    const Section* opt_secs[3] = {&e.masks, &e.vocab, &e.index};
    for (int i = 0; i < 3; ++i)
      if (!opt_secs[i]->present() && opt_secs[i]->off != 0)
        add(fmt::format("section '{}': absent (len 0) but offset is {} (must be 0)", kSecNames[3 + i],
                        opt_secs[i]->off));
    for (const Problem& p : section_problems(f)) add(p.what);
    // unused bytes must be zero: collect covered intervals
    std::vector<std::pair<uint64_t, uint64_t>> cov;
    cov.emplace_back(0, kEnvelopeSize);
    for (const Section* sp : {&e.header, &e.dir, &e.masks, &e.vocab, &e.index})
      if (sp->present()) cov.emplace_back(sp->off, sp->end());
    for (const auto& r : f.dir)
      if (r.nbytes) cov.emplace_back(e.data.off + r.off, e.data.off + r.off + r.nbytes);
    // dead bytes of in-place growth (append.h): listed in the (hashed) header, not checked
    try {
      for (const auto& [off, len] : dead_ranges(f.header)) {
        if (off > f.bytes.size() || len > f.bytes.size() - off)
          add(fmt::format("header.{}: range [{}, +{}) lies outside the {}-byte file", kDeadBytesKey, off, len,
                          f.bytes.size()));
        else
          cov.emplace_back(off, off + len);
      }
    } catch (const Error& err) {
      add(err.message());
    }
    std::sort(cov.begin(), cov.end());
    uint64_t pos = 0;
    auto check_zero = [&](uint64_t a, uint64_t b) {
      for (uint64_t i = a; i < b; ++i)
        if (f.bytes[i] != 0) {
          add(fmt::format("unused byte at offset {} is 0x{:02x} (gaps and padding must be zero)", i,
                          f.bytes[i]));
          return;
        }
    };
    for (const auto& [a, b] : cov) {
      if (a > pos) check_zero(pos, a);
      pos = std::max(pos, b);
    }
    // bytes after the last section: zero, or the stale tail of an interrupted append (append.h)
    if (pos < f.bytes.size() && !is_stale_append_tail(f.bytes, envelope_end(e)))
      check_zero(pos, f.bytes.size());
    // tensor hashes
    for (const auto& r : f.dir) {
      const auto p = f.bytes.subspan(e.data.off + r.off, r.nbytes);
      const uint64_t h = hash64(p);
      if (h != r.hash)
        add(fmt::format("tensor '{}': hash mismatch (stored {:016x}, actual {:016x})", r.name, r.hash, h));
      if (progress) progress(r.nbytes);
    }
  }
  return problems;
}

}  // namespace cortiq::cmf
