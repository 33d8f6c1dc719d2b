// True append (layout, crash model and dead-byte bookkeeping documented in append.h).
#include "cmf/append.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "cmf/hash.h"
#include "cmf/masks.h"
#include "cmf/reader.h"
#include "util/error.h"
#include "util/half.h"
#include "util/utf8.h"

namespace cortiq::cmf {

namespace {

constexpr uint8_t kIntentMagic[8] = {'C', 'M', 'F', 'A', 'P', 'P', 'N', 'D'};

bool all_zero(std::span<const uint8_t> b) noexcept {
  return std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0; });
}

/// An fd closed on scope exit (closing also drops the flock).
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void pwrite_all(int fd, uint64_t off, std::span<const uint8_t> b, const std::string& path) {
  while (!b.empty()) {
    const ssize_t n = ::pwrite(fd, b.data(), b.size(), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail(ErrorKind::Io, "{}: write of {} bytes at offset {} failed: {}", path, b.size(), off,
           std::strerror(errno));
    b = b.subspan(static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
}

void pwrite_zeros(int fd, uint64_t off, uint64_t n, const std::string& path) {
  static const std::vector<uint8_t> zeros(1 << 16, 0);
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, zeros.size());
    pwrite_all(fd, off, {zeros.data(), k}, path);
    off += k;
    n -= k;
  }
}

void sync_fd(int fd, const std::string& path) {
  if (::fsync(fd) != 0) fail(ErrorKind::Io, "{}: fsync failed: {}", path, std::strerror(errno));
}

/// Sorts and merges overlapping or touching ranges; drops empty ones.
std::vector<std::pair<uint64_t, uint64_t>> merge_ranges(std::vector<std::pair<uint64_t, uint64_t>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const auto& [off, len] : v) {
    if (len == 0) continue;
    if (!out.empty() && off <= out.back().first + out.back().second)
      out.back().second = std::max(out.back().first + out.back().second, off + len) - out.back().first;
    else
      out.emplace_back(off, len);
  }
  return out;
}

void check_new_tensor(const TensorData& t, bool validate, const std::string& path) {
  if (t.name.empty()) fail(ErrorKind::InvalidArgument, "{}: append: empty tensor name", path);
  if (t.name.size() > 0xFFFF)
    fail(ErrorKind::InvalidArgument, "{}: append: tensor name of {} bytes (max 65535)", path, t.name.size());
  if (!is_valid_utf8(t.name))
    fail(ErrorKind::InvalidArgument, "{}: append: a tensor name is not valid UTF-8", path);
  if (t.shape.size() > kMaxDims)
    fail(ErrorKind::InvalidArgument, "{}: append: tensor '{}': {} dims (max {})", path, t.name,
         t.shape.size(), kMaxDims);
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (t.shape[d] == 0 || t.shape[d] > UINT32_MAX)
      fail(ErrorKind::InvalidArgument, "{}: append: tensor '{}': dim {} = {} (must be 1..2^32-1)", path,
           t.name, d, t.shape[d]);
  if (validate && t.dtype != quant::DType::U8) quant::validate_payload(t.dtype, t.shape, t.payload, t.name);
}

/// The fault point to stop at: opt.fault_point, else $CORTIQ_FAULT_APPEND; checked against the list.
std::string fault_point(const AppendOptions& opt) {
  std::string f = opt.fault_point;
  if (f.empty())
    if (const char* e = std::getenv("CORTIQ_FAULT_APPEND")) f = e;
  if (f.empty()) return f;
  for (auto p : kAppendFaultPoints)
    if (p == f) return f;
  fail(ErrorKind::InvalidArgument,
       "CORTIQ_FAULT_APPEND={}: unknown fault point (intent, payloads, header, "
       "dir, synced, torn_envelope, envelope)",
       f);
}

}  // namespace

std::array<uint8_t, kAppendIntentSize> AppendIntent::encode() const noexcept {
  std::array<uint8_t, kAppendIntentSize> b{};
  std::memcpy(b.data(), kIntentMagic, 8);
  store_le<uint64_t>(&b[8], old_envelope_hash);
  store_le<uint64_t>(&b[16], new_file_size);
  store_le<uint64_t>(&b[24], new_header_hash);
  store_le<uint64_t>(&b[32], new_dir_hash);
  store_le<uint64_t>(&b[56], hash64(std::span<const uint8_t>(b.data(), 56)));
  return b;
}

std::optional<AppendIntent> AppendIntent::decode(std::span<const uint8_t> b) noexcept {
  if (b.size() < kAppendIntentSize || std::memcmp(b.data(), kIntentMagic, 8) != 0) return std::nullopt;
  if (load_le<uint64_t>(&b[56]) != hash64(b.first(56)) || !all_zero(b.subspan(40, 16))) return std::nullopt;
  AppendIntent r;
  r.old_envelope_hash = load_le<uint64_t>(&b[8]);
  r.new_file_size = load_le<uint64_t>(&b[16]);
  r.new_header_hash = load_le<uint64_t>(&b[24]);
  r.new_dir_hash = load_le<uint64_t>(&b[32]);
  return r;
}

uint64_t envelope_end(const Envelope& e) noexcept {
  uint64_t end = kEnvelopeSize;
  for (const Section* s : {&e.header, &e.dir, &e.data, &e.masks, &e.vocab, &e.index})
    if (s->present()) end = std::max(end, s->end());
  return end;
}

bool is_stale_append_tail(std::span<const uint8_t> file, uint64_t end) noexcept {
  const uint64_t m = align_up(end, 64);
  if (file.size() < kEnvelopeSize || m > file.size() || file.size() - m < kAppendIntentSize) return false;
  if (!all_zero(file.subspan(end, m - end))) return false;
  const auto rec = AppendIntent::decode(file.subspan(m, kAppendIntentSize));
  return rec && rec->old_envelope_hash == hash64(file.first(kEnvelopeSize));
}

std::vector<std::pair<uint64_t, uint64_t>> dead_ranges(const Header& h) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const auto it = h.extra.find(kDeadBytesKey);
  if (it == h.extra.end()) return out;
  if (!it->is_array())
    fail(ErrorKind::Parse, "header.{}: expected an array of [offset, length]", kDeadBytesKey);
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& p = (*it)[i];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_unsigned() || !p[1].is_number_unsigned())
      fail(ErrorKind::Parse, "header.{}[{}]: expected [offset, length] (unsigned integers), got {}",
           kDeadBytesKey, i, p.dump());
    out.emplace_back(p[0].get<uint64_t>(), p[1].get<uint64_t>());
  }
  std::sort(out.begin(), out.end());
  return out;
}

AppendResult append_in_place(const std::string& path, const Header& header, std::span<const TensorData> add,
                             std::span<const std::string> drop, const AppendOptions& opt) {
  const std::string fault = fault_point(opt);
  auto crash_at = [&](std::string_view p) {
    if (fault == p) ::_exit(137);
  };
  if (header.shard)
    fail(ErrorKind::Unsupported,
         "{}: append: the new header has a shard block; shard sets are not grown in place", path);
  for (const auto& s : header.skills)
    if (s.base_dir_hash)
      fail(
          ErrorKind::Unsupported,
          "{}: append: skill '{}' has base_dir_hash, which would make the file a SKILL_FILE; skill files are "
          "written whole (`skill export`)",
          path, s.id);

  Fd fd;
  fd.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd.fd < 0) fail(ErrorKind::Io, "{}: cannot open for appending: {}", path, std::strerror(errno));
  if (::flock(fd.fd, LOCK_EX | LOCK_NB) != 0)
    fail(ErrorKind::Io, "{}: another process is appending to this file (flock: {})", path,
         std::strerror(errno));

  OpenOptions oo;
  oo.open_shard_set = false;
  oo.validate_payloads = false;  // an append costs O(new bytes): payloads were validated when written
  const Reader r = Reader::open(path, oo);
  r.check_sections();  // nothing damaged gets fresh hashes
  if (r.header().shard)
    fail(ErrorKind::Unsupported, "{}: shard {} of {}: shard sets are not grown in place (compact them first)",
         path, r.header().shard->no, r.header().shard->count);
  if (r.is_skill_file())
    fail(ErrorKind::Unsupported, "{}: a SKILL_FILE (required_features bit 6) is not grown in place", path);
  const Envelope old = r.envelope();
  const std::span<const uint8_t> file = r.file_bytes();
  std::array<uint8_t, kEnvelopeSize> old_env{};
  std::copy_n(file.begin(), kEnvelopeSize, old_env.begin());
  const uint64_t end = envelope_end(old);
  if (file.size() > end && !all_zero(file.subspan(end)) && !is_stale_append_tail(file, end))
    fail(ErrorKind::Bounds,
         "{}: {} bytes after the last section (offset {}) are not described by the envelope and are not the "
         "stale tail of an interrupted append — another tool appended to the file; `cortiq compact` it first",
         path, file.size() - end, end);

  // ---- the new directory: kept records in their order, then the added ones
  const std::set<std::string> dropped(drop.begin(), drop.end());
  for (const auto& n : dropped)
    if (!r.find(n))
      fail(ErrorKind::InvalidArgument, "{}: cannot drop tensor '{}': not in the directory", path, n);
  std::vector<std::pair<uint64_t, uint64_t>> dead = dead_ranges(r.header());
  std::vector<DirRecord> dir;
  std::set<std::string> names;
  for (const auto& t : r.tensors()) {
    if (dropped.count(t.name)) {
      dead.emplace_back(old.data.off + t.off, t.nbytes);
      continue;
    }
    dir.push_back(DirRecord{t.name, t.dtype, t.shape, t.off, t.nbytes, t.hash});
    names.insert(t.name);
  }
  for (const auto& t : add) {
    check_new_tensor(t, opt.validate_payloads, path);
    if (!names.insert(t.name).second)
      fail(ErrorKind::InvalidArgument, "{}: append: tensor '{}' already exists{}", path, t.name,
           r.find(t.name) ? " (drop it in the same append to replace it)" : " (named twice)");
  }

  // ---- layout of the tail
  const uint64_t intent_at = align_up(end, 64);
  uint64_t pos = intent_at + kAppendIntentSize;
  Envelope ne = old;
  if (!add.empty() && !old.data.present()) ne.data = Section{align_up(pos, kDataAlign), 0};
  std::vector<uint64_t> add_at(add.size());
  for (size_t i = 0; i < add.size(); ++i) {
    const uint64_t align = add[i].payload.size() >= kBigTensorBytes ? kBigTensorAlign : kTensorAlign;
    const uint64_t rel = align_up(std::max(pos, ne.data.off) - ne.data.off, align);
    add_at[i] = ne.data.off + rel;
    pos = add_at[i] + add[i].payload.size();
    ne.data.len = std::max(ne.data.len, rel + add[i].payload.size());
    dir.push_back(DirRecord{add[i].name, add[i].dtype, add[i].shape, rel, add[i].payload.size(),
                            hash64(add[i].payload)});
  }
  const Section grown = ne.data;
  auto covered = [&](const Section& s) {
    return s.present() && grown.present() && s.off < grown.end() && grown.off < s.end();
  };
  // Sections written at the tail: (new place, bytes). A section stays put unless it is replaced or
  // the grown data section covers it.
  struct Placed {
    Section* sec;
    std::span<const uint8_t> bytes;
  };
  std::vector<Placed> placed;
  auto place = [&](Section& sec, const Section& was, std::span<const uint8_t> bytes) {
    if (was.present()) dead.emplace_back(was.off, was.len);
    sec = bytes.empty() ? Section{} : Section{pos, bytes.size()};
    if (!bytes.empty()) placed.push_back({&sec, bytes}), pos += bytes.size();
  };
  std::span<const uint8_t> masks_bytes = r.masks_bytes(),
                           index_bytes = file.subspan(old.index.off, old.index.len);
  if (opt.masks) {
    masks_bytes = *opt.masks;
    place(ne.masks, old.masks, masks_bytes);
    place(ne.index, old.index, {});
  } else {
    if (covered(old.masks)) place(ne.masks, old.masks, masks_bytes);
    if (covered(old.index)) place(ne.index, old.index, index_bytes);
  }
  if (covered(old.vocab)) place(ne.vocab, old.vocab, r.vocab());
  if (!masks_bytes.empty()) {
    try {
      (void)decode_masks(masks_bytes, header.arch);
    } catch (const Error& e) {
      fail(ErrorKind::InvalidArgument,
           "{}: append: the masks section does not match the new header's arch: {}", path, e.message());
    }
  }
  dead.emplace_back(old.header.off, old.header.len);
  dead.emplace_back(old.dir.off, old.dir.len);
  dead.emplace_back(intent_at, kAppendIntentSize);
  dead = merge_ranges(std::move(dead));

  // ---- header, directory, envelope
  Header h = header;
  h.shard.reset();
  h.section_hashes = SectionHashes{};
  h.section_hashes.extra = header.section_hashes.extra;
  const std::span<const uint8_t> vocab_now =
      ne.vocab.present() ? file.subspan(old.vocab.off, old.vocab.len) : std::span<const uint8_t>{};
  if (ne.masks.present()) h.section_hashes.masks = hex16(hash64(masks_bytes));
  if (ne.vocab.present()) h.section_hashes.vocab = hex16(hash64(vocab_now));
  if (ne.index.present()) h.section_hashes.index = hex16(hash64(index_bytes));
  h.extra.erase(std::string(kDeadBytesKey));
  uint64_t dead_total = 0;
  if (!dead.empty()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& [off, len] : dead) arr.push_back({off, len}), dead_total += len;
    h.extra[std::string(kDeadBytesKey)] = std::move(arr);
  }
  const std::string hjson = serialize_header(h);
  const std::span<const uint8_t> hb(reinterpret_cast<const uint8_t*>(hjson.data()), hjson.size());
  const std::vector<uint8_t> dbytes = encode_directory(dir);
  ne.header = Section{pos, hb.size()};
  pos += hb.size();
  ne.dir = Section{pos, dbytes.size()};
  pos += dbytes.size();
  ne.header_hash = hash64(hb);
  ne.dir_hash = hash64(dbytes);
  ne.flags = 0;
  ne.features = feature::kTensorDir;
  for (const auto& d : dir)
    if (d.dtype == quant::DType::Q8_2F || d.dtype == quant::DType::VBit || d.dtype == quant::DType::VBitRo)
      ne.features |= feature::kQuant2F;
  if (ne.masks.present()) {
    ne.features |= feature::kBinaryMasks;
    if (header.arch.num_loops > 1) ne.features |= feature::kLoopMasks;
  }
  const uint64_t new_size = pos;
  const auto env_bytes = ne.encode();

  const std::string sig = path + ".sig";
  if (std::error_code ec; std::filesystem::exists(sig, ec)) {
    if (!opt.remove_signature)
      fail(ErrorKind::InvalidArgument,
           "{}: the file is signed ({}); appending changes its SHA-256 and would leave a stale signature — "
           "remove {} and sign the grown file again (`cortiq sign`)",
           path, sig, sig);
    if (!std::filesystem::remove(sig, ec) || ec)
      fail(ErrorKind::Io, "{}: cannot remove the stale signature: {}", sig, ec.message());
  }

  // ---- write: intent, payloads, sections, header, directory; truncate; fsync
  AppendIntent intent{hash64(old_env), new_size, ne.header_hash, ne.dir_hash};
  const auto ib = intent.encode();
  pwrite_zeros(fd.fd, end, intent_at - end, path);
  pwrite_all(fd.fd, intent_at, ib, path);
  crash_at("intent");
  uint64_t cur = intent_at + kAppendIntentSize;
  for (size_t i = 0; i < add.size(); ++i) {
    pwrite_zeros(fd.fd, cur, add_at[i] - cur, path);
    pwrite_all(fd.fd, add_at[i], add[i].payload, path);
    cur = add_at[i] + add[i].payload.size();
  }
  crash_at("payloads");
  for (const Placed& p : placed) {
    pwrite_zeros(fd.fd, cur, p.sec->off - cur, path);
    pwrite_all(fd.fd, p.sec->off, p.bytes, path);
    cur = p.sec->end();
  }
  pwrite_zeros(fd.fd, cur, ne.header.off - cur, path);
  pwrite_all(fd.fd, ne.header.off, hb, path);
  crash_at("header");
  pwrite_all(fd.fd, ne.dir.off, dbytes, path);
  crash_at("dir");
  if (::ftruncate(fd.fd, static_cast<off_t>(new_size)) != 0)
    fail(ErrorKind::Io, "{}: truncate to {} bytes failed: {}", path, new_size, std::strerror(errno));
  sync_fd(fd.fd, path);
  crash_at("synced");

  // ---- commit: the envelope, one write inside the first sector
  std::array<uint8_t, kEnvelopeSize> now{};
  if (::pread(fd.fd, now.data(), now.size(), 0) != static_cast<ssize_t>(now.size()) || now != old_env)
    fail(ErrorKind::Bounds,
         "{}: the envelope changed while appending (another writer); the append was not "
         "committed",
         path);
  if (fault == "torn_envelope") {
    pwrite_all(fd.fd, 0, std::span<const uint8_t>(env_bytes.data(), kEnvelopeSize / 2), path);
    ::_exit(137);
  }
  pwrite_all(fd.fd, 0, env_bytes, path);
  crash_at("envelope");
  sync_fd(fd.fd, path);
  return AppendResult{file.size(), new_size, dead_total, ne.dir_hash};
}

}  // namespace cortiq::cmf
