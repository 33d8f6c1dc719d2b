// Tests of true append (cmf/append.h): in-place growth, byte layout, refusals, determinism, crash
// safety at every fault point (forked children that _exit(137) mid-append) and truncation of the
// appended region at every 4 KiB boundary.
#include "cmf/append.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cmf/hash.h"
#include "cmf/masks.h"
#include "cmf/reader.h"
#include "cmf/writer.h"
#include "support/cmf_header.h"
#include "util/error.h"

namespace cortiq::cmf {
namespace {

namespace fs = std::filesystem;
using quant::DType;

std::string tmp_dir() {
  struct Dir {
    fs::path p = fs::temp_directory_path() / fmt::format("cmf_append_test_{}", ::getpid());
    Dir() { fs::create_directories(p); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  };
  static const Dir d;
  return d.p.string();
}

std::string tmp(const std::string& name) {
  return tmp_dir() + "/" + name;
}

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_all(const std::string& p, std::span<const uint8_t> b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 8));
  return v;
}

Header base_header() {
  Header h = test::tiny_header("test", 8, 20, 2, 3, 1, 4, 16, 128);
  h.provenance = {{"tool", "append_test"}};
  return h;
}

MaskCatalog base_masks(const ModelArch& a) {
  MaskCatalog c;
  c.default_task = "general";
  c.masks.push_back(make_full_mask(a, "general", 0));
  c.masks[0].priority = MaskPriority::Fallback;
  return c;
}

const std::string kVocab = R"({"model":{"type":"BPE","vocab":{}}})";

/// A streaming-writer file: four tensors (one ≥ 16 KiB), masks and vocab after the blob.
std::string make_base(const std::string& name) {
  const std::string p = tmp(name);
  std::vector<TensorData> t;
  t.push_back({"model.embed_tokens.weight", DType::F32, {16, 8}, pattern(16 * 8 * 4, 1)});
  t.push_back({"model.norm.weight", DType::F16, {8}, pattern(16, 2)});
  t.push_back({"model.layers.1.mlp.down_proj.weight", DType::F32, {8, 20}, pattern(8 * 20 * 4, 3)});
  t.push_back({"big", DType::F32, {64, 80}, pattern(64 * 80 * 4, 4)});
  const Header h = base_header();
  write_file(p, h, t, base_masks(h.arch),
             std::span(reinterpret_cast<const uint8_t*>(kVocab.data()), kVocab.size()));
  return p;
}

/// The skill tensors of one append: an F32 overlay of layer 1's down projection (40 KiB: ten 4 KiB
/// blocks of appended region) and a small F16 one.
std::vector<TensorData> skill_tensors(const std::string& id, uint8_t seed) {
  std::vector<TensorData> t;
  t.push_back({"skill." + id + ".model.layers.1.mlp.down_proj.weight",
               DType::F32,
               {8, 20},
               pattern(8 * 20 * 4, seed)});
  t.push_back({"skill." + id + ".big", DType::F32, {64, 160}, pattern(64 * 160 * 4, seed + 1)});
  return t;
}

Header with_skill(Header h, const std::string& id) {
  SkillRecord s;
  s.id = id;
  s.layers = {1};
  h.skills.push_back(s);
  return h;
}

/// Opens `p` and checks every hash; returns the reader.
Reader open_verified(const std::string& p) {
  Reader r = Reader::open(p);
  r.check_sections();
  const auto problems = r.verify();
  EXPECT_TRUE(problems.empty()) << p << ": " << (problems.empty() ? "" : problems[0]);
  return r;
}

/// (name, payload) of every tensor, and the header bytes: what a file "is" to a reader.
struct Content {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> tensors;
  std::string header;
  std::vector<uint8_t> masks, vocab;
  bool operator==(const Content&) const = default;
};
Content content(const Reader& r) {
  Content c;
  for (const auto& t : r.tensors()) {
    const auto p = r.payload(t);
    c.tensors.emplace_back(t.name, std::vector<uint8_t>(p.begin(), p.end()));
  }
  c.header.assign(r.header_bytes().begin(), r.header_bytes().end());
  c.masks.assign(r.masks_bytes().begin(), r.masks_bytes().end());
  c.vocab.assign(r.vocab().begin(), r.vocab().end());
  return c;
}

// ---------------------------------------------------------------- growth

TEST(Append, AddsTensorsInPlaceAndKeepsOldBytes) {
  const std::string p = make_base("grow.cmf");
  const std::vector<uint8_t> before = read_all(p);
  Content old;
  std::vector<TensorInfo> old_tensors;
  Envelope old_env;
  {
    Reader r = open_verified(p);
    old = content(r);
    old_tensors = r.tensors();
    old_env = r.envelope();
  }
  const auto add = skill_tensors("sql", 40);
  const AppendResult res = append_in_place(p, with_skill(base_header(), "sql"), add);
  const std::vector<uint8_t> after = read_all(p);
  EXPECT_EQ(res.old_size, before.size());
  EXPECT_EQ(res.new_size, after.size());
  // old bytes never move: everything after the envelope is unchanged
  ASSERT_GT(after.size(), before.size());
  EXPECT_TRUE(std::equal(before.begin() + kEnvelopeSize, before.end(), after.begin() + kEnvelopeSize));

  Reader r = open_verified(p);
  const Envelope& e = r.envelope();
  EXPECT_EQ(e.dir_hash, res.dir_hash);
  EXPECT_EQ(e.data.off, old_env.data.off);
  // the intent record at align64(old end), then the payloads
  const uint64_t end = envelope_end(old_env);
  const auto intent = AppendIntent::decode(std::span(after).subspan(align_up(end, 64)));
  ASSERT_TRUE(intent);
  EXPECT_EQ(intent->old_envelope_hash, hash64(std::span(before).first(kEnvelopeSize)));
  EXPECT_EQ(intent->new_file_size, after.size());
  EXPECT_EQ(intent->new_header_hash, e.header_hash);
  ASSERT_EQ(r.tensors().size(), old_tensors.size() + 2);
  for (size_t i = 0; i < old_tensors.size(); ++i) {
    EXPECT_EQ(r.tensors()[i].name, old_tensors[i].name);
    EXPECT_EQ(r.tensors()[i].off, old_tensors[i].off);  // same offsets
    EXPECT_EQ(r.tensors()[i].hash, old_tensors[i].hash);
  }
  for (const auto& t : add) {
    const TensorInfo& ti = r.tensor(t.name);
    const auto pl = r.payload(ti);
    EXPECT_EQ(std::vector<uint8_t>(pl.begin(), pl.end()), t.payload);
    EXPECT_EQ(ti.off % (t.payload.size() >= kBigTensorBytes ? kBigTensorAlign : kTensorAlign), 0u);
    EXPECT_GE(e.data.off + ti.off, align_up(end, 64) + kAppendIntentSize);
  }
  // masks and vocab were covered by the grown blob: copied to the tail, same bytes and hashes
  EXPECT_GT(e.masks.off, old_env.masks.off);
  EXPECT_GT(e.vocab.off, old_env.vocab.off);
  EXPECT_EQ(std::vector<uint8_t>(r.masks_bytes().begin(), r.masks_bytes().end()), old.masks);
  EXPECT_EQ(std::string(r.vocab().begin(), r.vocab().end()), kVocab);
  EXPECT_EQ(e.features, old_env.features);
  // header, then the directory, end the file
  EXPECT_EQ(e.dir.off, e.header.end());
  EXPECT_EQ(e.dir.end(), after.size());
  ASSERT_EQ(r.skills().size(), 1u);
  EXPECT_EQ(r.skills()[0].id, "sql");
  // dead bytes: the old header+directory (front gap), the old masks+vocab, the intent record
  const auto dead = dead_ranges(r.header());
  uint64_t dead_total = 0;
  for (const auto& [o, l] : dead) dead_total += l;
  EXPECT_EQ(dead_total, res.dead_bytes);
  EXPECT_EQ(dead_total,
            old_env.header.len + old_env.dir.len + old_env.masks.len + old_env.vocab.len + kAppendIntentSize);
}

TEST(Append, DropAndReplaceAndGrowAgain) {
  const std::string p = make_base("drop.cmf");
  append_in_place(p, with_skill(base_header(), "a"), skill_tensors("a", 10));
  append_in_place(p, with_skill(with_skill(base_header(), "a"), "b"), skill_tensors("b", 20));
  // replace a's big overlay, drop b entirely (skill rm b)
  const std::string a_big = "skill.a.big", b0 = "skill.b.model.layers.1.mlp.down_proj.weight",
                    b1 = "skill.b.big";
  std::vector<TensorData> repl = {{a_big, DType::F16, {64, 160}, pattern(64 * 160 * 2, 99)}};
  const std::vector<std::string> drop = {a_big, b0, b1};
  const uint64_t size_before = fs::file_size(p);
  const AppendResult res = append_in_place(p, with_skill(base_header(), "a"), repl, drop);
  EXPECT_EQ(res.old_size, size_before);
  Reader r = open_verified(p);
  EXPECT_EQ(r.find(b0), nullptr);
  EXPECT_EQ(r.find(b1), nullptr);
  ASSERT_NE(r.find(a_big), nullptr);
  EXPECT_EQ(r.tensor(a_big).dtype, DType::F16);
  const auto pl = r.payload(r.tensor(a_big));
  EXPECT_EQ(std::vector<uint8_t>(pl.begin(), pl.end()), repl[0].payload);
  EXPECT_EQ(r.tensors().size(), 6u);
  ASSERT_EQ(r.skills().size(), 1u);
  // a pure removal: no new payloads, the blob does not grow, masks and vocab stay put
  const Envelope e1 = r.envelope();
  const std::vector<std::string> drop_a = {"skill.a.model.layers.1.mlp.down_proj.weight", a_big};
  append_in_place(p, base_header(), {}, drop_a);
  Reader r2 = open_verified(p);
  EXPECT_EQ(r2.tensors().size(), 4u);
  EXPECT_EQ(r2.envelope().data, e1.data);
  EXPECT_EQ(r2.envelope().masks, e1.masks);
  EXPECT_EQ(r2.envelope().vocab, e1.vocab);
  EXPECT_TRUE(r2.skills().empty());
}

TEST(Append, ReplacesMasksAndDropsThem) {
  const std::string p = make_base("masks.cmf");
  const Header h = base_header();
  MaskCatalog c = base_masks(h.arch);
  TaskMask m = make_full_mask(h.arch, "code", 1);
  m.ffn.set(1, 5, false);
  c.masks.push_back(std::move(m));
  AppendOptions o;
  o.masks = encode_masks(c, h.arch);
  append_in_place(p, h, {}, {}, o);
  {
    Reader r = open_verified(p);
    ASSERT_NE(r.masks(), nullptr);
    EXPECT_EQ(r.masks()->masks.size(), 2u);
    EXPECT_EQ(*r.header().section_hashes.masks, hex16(hash64(*o.masks)));
  }
  o.masks = std::vector<uint8_t>{};
  append_in_place(p, h, {}, {}, o);
  Reader r = open_verified(p);
  EXPECT_EQ(r.masks(), nullptr);
  EXPECT_FALSE(r.header().section_hashes.masks);
  EXPECT_EQ(r.envelope().features & feature::kBinaryMasks, 0u);
  // masks for another arch are refused before anything is written
  const auto size = fs::file_size(p);
  Header other = test::tiny_header("test", 8, 24, 2, 3, 1, 4, 16, 128);
  o.masks = encode_masks(base_masks(other.arch), other.arch);
  EXPECT_THROW(append_in_place(p, h, {}, {}, o), Error);
  EXPECT_EQ(fs::file_size(p), size);
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return ErrorKind::Io;
}

TEST(Append, Refusals) {
  const std::string p = make_base("refuse.cmf");
  const auto bytes = read_all(p);
  const Header h = base_header();
  const auto add = skill_tensors("x", 5);
  // an existing name that is not dropped, a name twice, a drop of an absent name
  std::vector<TensorData> dup = {{"big", DType::F32, {1}, pattern(4, 1)}};
  EXPECT_EQ(kind_of([&] { append_in_place(p, h, dup); }), ErrorKind::InvalidArgument);
  std::vector<TensorData> twice = {add[0], add[0]};
  EXPECT_EQ(kind_of([&] { append_in_place(p, h, twice); }), ErrorKind::InvalidArgument);
  const std::vector<std::string> nope = {"nope"};
  EXPECT_EQ(kind_of([&] { append_in_place(p, h, {}, nope); }), ErrorKind::InvalidArgument);
  // a payload that does not match its shape
  std::vector<TensorData> bad = {{"skill.x.bad", DType::F32, {3, 3}, pattern(35, 1)}};
  EXPECT_EQ(kind_of([&] { append_in_place(p, h, bad); }), ErrorKind::Parse);
  // a header that would make a SKILL_FILE or a shard
  Header sf = with_skill(h, "x");
  sf.skills[0].base_dir_hash = "00000000000000ff";
  EXPECT_EQ(kind_of([&] { append_in_place(p, sf, add); }), ErrorKind::Unsupported);
  Header sh = h;
  sh.shard = ShardInfo{1, 2};
  EXPECT_EQ(kind_of([&] { append_in_place(p, sh, add); }), ErrorKind::Unsupported);
  EXPECT_EQ(read_all(p), bytes);  // nothing was written

  // foreign bytes after the last section: refused; zeros are fine
  std::vector<uint8_t> foreign = bytes;
  foreign.insert(foreign.end(), {'j', 'u', 'n', 'k'});
  write_all(p, foreign);
  EXPECT_EQ(kind_of([&] { append_in_place(p, h, add); }), ErrorKind::Bounds);
  EXPECT_EQ(read_all(p), foreign);
  std::vector<uint8_t> zeros = bytes;
  zeros.resize(bytes.size() + 5000, 0);
  write_all(p, zeros);
  append_in_place(p, with_skill(h, "x"), add);
  open_verified(p);

  // a signed file: refused unless the caller asks to drop the stale signature
  write_all(p + ".sig", std::span(reinterpret_cast<const uint8_t*>("{}"), 2));
  const auto before_sig = read_all(p);
  EXPECT_EQ(kind_of([&] { append_in_place(p, h, {}); }), ErrorKind::InvalidArgument);
  EXPECT_EQ(read_all(p), before_sig);
  AppendOptions rs;
  rs.remove_signature = true;
  append_in_place(p, h, {}, {}, rs);
  EXPECT_FALSE(fs::exists(p + ".sig"));
  open_verified(p);

  // another appender holds the lock; an unknown fault point name
  {
    const int fd = ::open(p.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    EXPECT_EQ(kind_of([&] { append_in_place(p, h, {}); }), ErrorKind::Io);
    ::close(fd);
  }
  AppendOptions typo;
  typo.fault_point = "payload";
  EXPECT_EQ(kind_of([&] { append_in_place(p, h, {}, {}, typo); }), ErrorKind::InvalidArgument);

  // a SKILL_FILE and a shard set member
  const std::string skf = tmp("skill_file.cmf");
  std::vector<TensorData> one = {{"skill.x.big", DType::F32, {4}, pattern(16, 1)}};
  write_file(skf, sf, one);
  EXPECT_EQ(kind_of([&] { append_in_place(skf, sf, {}); }), ErrorKind::Unsupported);
  const std::string stem = tmp("set.cmf");
  std::vector<TensorData> two = {{"a", DType::F32, {1024}, pattern(4096, 1)},
                                 {"b", DType::F32, {1024}, pattern(4096, 2)}};
  WriterOptions wo;
  wo.reserve_bytes = 4096;
  wo.shard_max_bytes = 9000;
  const auto shards = write_file(stem, h, two, std::nullopt, {}, wo);
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(kind_of([&] { append_in_place(shards[0], h, add); }), ErrorKind::Unsupported);
}

// ---------------------------------------------------------------- determinism

TEST(Append, ByteDeterministic) {
  const std::string a = make_base("det_a.cmf"), b = tmp("det_b.cmf");
  fs::copy_file(a, b);
  for (const std::string& p : {a, b}) {
    append_in_place(p, with_skill(base_header(), "s1"), skill_tensors("s1", 7));
    const std::vector<std::string> drop = {"skill.s1.big"};
    append_in_place(p, with_skill(base_header(), "s1"), {}, drop);
  }
  EXPECT_EQ(read_all(a), read_all(b));
}

// ---------------------------------------------------------------- crash safety

/// Runs the append of skill "k" on `p` in a child that stops at `point`; returns its exit code.
int append_in_child(const std::string& p, const std::string& point) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      AppendOptions o;
      if (point == "header")  // through the environment, as a CLI process would get it
        ::setenv("CORTIQ_FAULT_APPEND", point.c_str(), 1);
      else
        o.fault_point = point;
      append_in_place(p, with_skill(base_header(), "k"), skill_tensors("k", 77), {}, o);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

enum class State { Old, New, Broken };

/// Old or new (opens, every hash checks, and the content is one of the two), or broken.
State classify(const std::string& p, const Content& old_c, const Content& new_c) {
  try {
    Reader r = Reader::open(p);
    r.check_sections();
    if (!r.verify().empty()) return State::Broken;
    const Content c = content(r);
    if (c == old_c) return State::Old;
    if (c == new_c) return State::New;
  } catch (const Error&) {
  }
  return State::Broken;
}

TEST(AppendCrash, EveryFaultPointLeavesOldOrNew) {
  const std::string base = make_base("crash_base.cmf");
  const std::string clean = tmp("crash_clean.cmf");
  fs::copy_file(base, clean);
  append_in_place(clean, with_skill(base_header(), "k"), skill_tensors("k", 77));
  const std::vector<uint8_t> clean_bytes = read_all(clean);
  const Content old_c = content(Reader::open(base)), new_c = content(Reader::open(clean));
  ASSERT_NE(old_c, new_c);
  const std::pair<std::string, State> expect[] = {
      {"intent", State::Old}, {"payloads", State::Old},         {"header", State::Old},  {"dir", State::Old},
      {"synced", State::Old}, {"torn_envelope", State::Broken}, {"envelope", State::New}};
  for (const auto& [point, want] : expect) {
    SCOPED_TRACE(point);
    const std::string p = tmp("crash_" + point + ".cmf");
    fs::copy_file(base, p, fs::copy_options::overwrite_existing);
    ASSERT_EQ(append_in_child(p, point), 137);
    EXPECT_EQ(classify(p, old_c, new_c), want);
    if (want == State::New) {
      EXPECT_EQ(read_all(p), clean_bytes);
    }
    if (want == State::Old) {
      EXPECT_GT(fs::file_size(p), fs::file_size(base));  // a stale tail, accepted by verify
      // the next append reclaims the stale tail and gives exactly the clean result
      append_in_place(p, with_skill(base_header(), "k"), skill_tensors("k", 77));
      EXPECT_EQ(read_all(p), clean_bytes);
    }
  }
}

TEST(AppendCrash, TruncatedTailAtEvery4KiBIsOld) {
  const std::string base = make_base("trunc_base.cmf");
  const std::string clean = tmp("trunc_clean.cmf");
  fs::copy_file(base, clean);
  append_in_place(clean, with_skill(base_header(), "k"), skill_tensors("k", 77));
  const std::vector<uint8_t> clean_bytes = read_all(clean);
  const Content old_c = content(Reader::open(base)), new_c = content(Reader::open(clean));
  // the state a power loss before the envelope write can leave: the old envelope and any prefix of
  // the appended region (here: the whole tail written, then cut at every 4 KiB boundary)
  const std::string crashed = tmp("trunc_crashed.cmf");
  fs::copy_file(base, crashed);
  ASSERT_EQ(append_in_child(crashed, "dir"), 137);
  const std::vector<uint8_t> full = read_all(crashed);
  const uint64_t old_size = fs::file_size(base);
  int cuts = 0;
  for (uint64_t cut = align_up(old_size, 4096); cut < full.size(); cut += 4096, ++cuts) {
    SCOPED_TRACE(cut);
    const std::string p = tmp("trunc_cut.cmf");
    write_all(p, std::span(full).first(cut));
    EXPECT_EQ(classify(p, old_c, new_c), State::Old);
    append_in_place(p, with_skill(base_header(), "k"), skill_tensors("k", 77));
    EXPECT_EQ(read_all(p), clean_bytes);
  }
  EXPECT_GE(cuts, 10);  // 40 KiB of payload + sections: at least ten boundaries
}

TEST(AppendCrash, StaleTailIsAcceptedOnlyForThisEnvelope) {
  const std::string p = make_base("stale.cmf");
  ASSERT_EQ(append_in_child(p, "payloads"), 137);
  EXPECT_TRUE(open_verified(p).verify().empty());
  // the same tail behind a different envelope is foreign: verify flags it, append refuses
  std::vector<uint8_t> b = read_all(p);
  b[8] ^= 1;  // flags (reserved): changes the envelope's hash
  const std::string q = tmp("stale_other.cmf");
  write_all(q, b);
  const auto problems = Reader::open(q).verify();
  bool tail_flagged = false;
  for (const auto& s : problems) tail_flagged |= s.find("unused byte") != std::string::npos;
  EXPECT_TRUE(tail_flagged);
  EXPECT_THROW(append_in_place(q, base_header(), skill_tensors("k", 1)), Error);
}

// Real kills: SIGKILL at moments spread over 1.3× the time a clean append of 1 MiB takes here (the
// named fault points above fix where; this checks that no moment in between is worse). Only
// old-or-new is asserted; how many land on each side depends on the machine.
TEST(AppendCrash, SigkillAtSpreadMomentsIsOldOrNew) {
  const std::string base = make_base("kill_base.cmf");
  std::vector<TensorData> add = {{"skill.k.huge", DType::F32, {512, 512}, pattern(1 << 20, 9)}};
  const Header h = with_skill(base_header(), "k");
  const std::string clean = tmp("kill_clean.cmf");
  fs::copy_file(base, clean);
  const auto t0 = std::chrono::steady_clock::now();
  append_in_place(clean, h, add);
  const double span_us =
      1.3 * std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<uint8_t> clean_bytes = read_all(clean);
  const Content old_c = content(Reader::open(base)), new_c = content(Reader::open(clean));
  int olds = 0, news = 0;
  constexpr int kKills = 16;
  for (int i = 0; i < kKills; ++i) {
    SCOPED_TRACE(i);
    const std::string p = tmp("kill.cmf");
    fs::copy_file(base, p, fs::copy_options::overwrite_existing);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        append_in_place(p, h, add);
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    ::usleep(static_cast<useconds_t>(span_us * i / (kKills - 1)));
    ::kill(pid, SIGKILL);
    int st = 0;
    ::waitpid(pid, &st, 0);
    ASSERT_TRUE(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0));
    const State s = classify(p, old_c, new_c);
    ASSERT_NE(s, State::Broken);
    if (s == State::Old) {
      ++olds;
      append_in_place(p, h, add);
    } else {
      ++news;
    }
    EXPECT_EQ(read_all(p), clean_bytes);
  }
  std::printf("[sigkill] %d kills over %.1f ms: %d old, %d new\n", kKills, span_us / 1000, olds, news);
}

// A torn envelope (any byte prefix of the new envelope over the old one: a torn sector, which a
// kill cannot produce) is never taken for a third file: it reads as the old one (nothing that
// matters written yet), the new one (all of it), or is refused by open or the section hash check.
TEST(AppendCrash, TornEnvelopeIsOldNewOrRefused) {
  const std::string base = make_base("torn_base.cmf");
  const std::string clean = tmp("torn_clean.cmf");
  fs::copy_file(base, clean);
  append_in_place(clean, with_skill(base_header(), "k"), skill_tensors("k", 77));
  const std::vector<uint8_t> new_bytes = read_all(clean);
  const Content old_c = content(Reader::open(base)), new_c = content(Reader::open(clean));
  int olds = 0, refused = 0;
  for (size_t k = 0; k <= kEnvelopeSize; ++k) {
    SCOPED_TRACE(k);
    std::vector<uint8_t> f = new_bytes;  // the tail is complete (fsynced before the envelope write)
    const std::vector<uint8_t> old_bytes = read_all(base);
    std::copy(old_bytes.begin() + k, old_bytes.begin() + kEnvelopeSize, f.begin() + k);
    try {
      Reader r = Reader::open_memory(f);
      r.check_sections();
      const Content c = content(r);
      if (c == old_c) {
        ++olds;
        continue;
      }
      EXPECT_EQ(c, new_c);
      EXPECT_TRUE(r.verify().empty());
      EXPECT_EQ(k, kEnvelopeSize);
    } catch (const Error&) {
      ++refused;
    }
  }
  std::printf("[torn envelope] 129 prefixes: %d old, %d refused, 1 new\n", olds, refused);
  EXPECT_GE(olds, 16);  // magic, version, flags, features unchanged
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace cortiq::cmf
