// The KL-divergence base file and statistics of `cortiq ppl` (cli/ppl_kld.h).
#include "cli/ppl_kld.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "util/error.h"

namespace cortiq::cli {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'R', 'T', 'I', 'Q', 'K', 'L'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 32;

uint64_t row_offset(const KldHeader& h, size_t chunk, size_t pos) {
  const uint64_t ids = 4ull * h.n_chunks * h.n_ctx;
  const uint64_t row = static_cast<uint64_t>(chunk) * h.per_chunk() + (pos - h.first);
  return kHeaderBytes + ids + row * 4ull * h.n_vocab;
}

/// log-softmax of `x` in double.
void log_softmax(std::span<const float> x, std::vector<double>& out) {
  double mx = -INFINITY;
  for (float v : x) mx = std::max(mx, static_cast<double>(v));
  double sum = 0.0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - lse;
}

/// Mean and its standard error sqrt(var / (n − 1)).
std::pair<double, double> mean_err(const std::vector<double>& v) {
  if (v.empty()) return {0.0, 0.0};
  double s = 0.0, s2 = 0.0;
  for (double x : v) {
    s += x;
    s2 += x * x;
  }
  const double n = static_cast<double>(v.size()), m = s / n, var = s2 / n - m * m;
  return {m, v.size() > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0.0};
}

}  // namespace

KldBaseWriter::KldBaseWriter(const std::string& path, const KldHeader& h, std::span<const uint32_t> ids)
    : h_(h), file_(path, "base.kld") {
  if (ids.size() != static_cast<size_t>(h.n_chunks) * h.n_ctx)
    fail(ErrorKind::InvalidArgument, "kl-divergence base: {} ids for {} chunks of {}", ids.size(), h.n_chunks,
         h.n_ctx);
  file_.write(kMagic, sizeof kMagic);
  const uint32_t fields[6] = {kVersion, h.n_vocab, h.n_ctx, h.n_chunks, h.first, 0};
  file_.write(fields, sizeof fields);
  file_.write(ids.data(), ids.size_bytes());
  file_.write_zeros(row_offset(h, h.n_chunks, h.first) - file_.size());
}

void KldBaseWriter::put(size_t chunk, size_t pos, std::span<const float> logits) {
  if (logits.size() != h_.n_vocab)
    fail(ErrorKind::InvalidArgument, "kl-divergence base: {} logits, expected {}", logits.size(), h_.n_vocab);
  std::vector<double> lp;
  log_softmax(logits, lp);
  row_.assign(lp.begin(), lp.end());
  file_.pwrite(row_offset(h_, chunk, pos),
               {reinterpret_cast<const uint8_t*>(row_.data()), row_.size() * sizeof(float)});
}

void KldBaseWriter::commit() {
  file_.commit();
}

KldBaseReader::KldBaseReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(ErrorKind::Io, "--kl-divergence-base: cannot read '{}': {}", path, std::strerror(errno));
  struct stat st {};
  ::fstat(fd_, &st);
  if (S_ISDIR(st.st_mode)) fail(ErrorKind::Io, "--kl-divergence-base: '{}' is a folder", path);
  const auto size = static_cast<uint64_t>(st.st_size);
  char head[kHeaderBytes];
  if (size < kHeaderBytes || ::pread(fd_, head, kHeaderBytes, 0) != static_cast<ssize_t>(kHeaderBytes) ||
      std::memcmp(head, kMagic, sizeof kMagic) != 0)
    fail(ErrorKind::Parse,
         "'{}' is not a cortiq KL-divergence base file (magic CORTIQKL; written by `cortiq ppl "
         "--kl-divergence-base F` without --kl-divergence)",
         path);
  uint32_t f[6];
  std::memcpy(f, head + 8, sizeof f);
  if (f[0] != kVersion)
    fail(ErrorKind::Parse, "'{}': version {}, this cortiq reads version {}", path, f[0], kVersion);
  h_ = {f[1], f[2], f[3], f[4]};
  if (h_.n_vocab == 0 || h_.n_ctx < 4 || h_.n_chunks == 0 || h_.first + 1 >= h_.n_ctx)
    fail(ErrorKind::Parse, "'{}': bad header (n_vocab {}, n_ctx {}, n_chunks {}, first {})", path, h_.n_vocab,
         h_.n_ctx, h_.n_chunks, h_.first);
  const uint64_t want = row_offset(h_, h_.n_chunks, h_.first);
  if (size != want) fail(ErrorKind::Parse, "'{}' is {} bytes; its header says {}", path, size, want);
  ids_.resize(static_cast<size_t>(h_.n_chunks) * h_.n_ctx);
  const size_t n = ids_.size() * 4;
  if (::pread(fd_, ids_.data(), n, kHeaderBytes) != static_cast<ssize_t>(n))
    fail(ErrorKind::Io, "'{}': cannot read the token ids", path);
}

KldBaseReader::~KldBaseReader() {
  if (fd_ >= 0) ::close(fd_);
}

void KldBaseReader::row(size_t chunk, size_t pos, std::vector<float>& out) const {
  out.resize(h_.n_vocab);
  const size_t n = out.size() * sizeof(float);
  if (::pread(fd_, out.data(), n, static_cast<off_t>(row_offset(h_, chunk, pos))) != static_cast<ssize_t>(n))
    fail(ErrorKind::Io, "'{}': cannot read chunk {} position {}", path_, chunk, pos);
}

KldStats::KldStats(size_t tokens) : kld_(tokens), nll_q_(tokens), nll_b_(tokens), same_(tokens) {}

void KldStats::add(size_t index, std::span<const float> base_logp, std::span<const float> logits,
                   uint32_t target) {
  if (base_logp.size() != logits.size())
    fail(ErrorKind::InvalidArgument, "--kl-divergence: the base has {} logits per token, this model {}",
         base_logp.size(), logits.size());
  std::vector<double> lq;
  log_softmax(logits, lq);
  for (double& x : lq) x = static_cast<float>(x);  // the base's precision: a model against itself is 0
  double kl = 0.0;
  size_t top_b = 0, top_q = 0;
  for (size_t v = 0; v < lq.size(); ++v) {
    const double lb = base_logp[v];
    kl += std::exp(lb) * (lb - lq[v]);
    if (base_logp[v] > base_logp[top_b]) top_b = v;
    if (lq[v] > lq[top_q]) top_q = v;
  }
  kld_[index] = kl;
  same_[index] = top_b == top_q;
  nll_q_[index] = -lq[target];
  nll_b_[index] = -static_cast<double>(base_logp[target]);
}

double KldStats::mean_kld() const {
  return mean_err(kld_).first;
}

double KldStats::same_top() const {
  return kld_.empty() ? 0.0
                      : static_cast<double>(std::count(same_.begin(), same_.end(), 1)) /
                            static_cast<double>(same_.size());
}

std::string KldStats::report() const {
  const size_t n = kld_.size();
  std::string s;
  auto ppl = [](const std::vector<double>& nll) {
    const auto [m, e] = mean_err(nll);
    return std::pair{std::exp(m), std::exp(m) * e};  // llama.cpp's ppl stderr: ppl · stderr(nll)
  };
  const auto [pq, pqe] = ppl(nll_q_);
  const auto [pb, pbe] = ppl(nll_b_);
  std::vector<double> diff(n);
  for (size_t i = 0; i < n; ++i) diff[i] = nll_q_[i] - nll_b_[i];
  const auto [dm, de] = mean_err(diff);
  s += "====== Perplexity statistics ======\n";
  s += fmt::format("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", pq, pqe);
  s += fmt::format("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", pb, pbe);
  s += fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", dm, de);
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) { return sorted[static_cast<size_t>(p * static_cast<double>(n - 1) + 0.5)]; };
  const auto [km, ke] = mean_err(kld_);
  s += "\n====== KL divergence statistics ======\n";
  s += fmt::format("Mean    KLD: {:10.6f} ± {:10.6f}\n", km, ke);
  s += fmt::format("Maximum KLD: {:10.6f}\n", sorted.back());
  s += fmt::format("99.9%   KLD: {:10.6f}\n", pct(0.999));
  s += fmt::format("99.0%   KLD: {:10.6f}\n", pct(0.99));
  s += fmt::format("Median  KLD: {:10.6f}\n", pct(0.5));
  s += fmt::format("Minimum KLD: {:10.6f}\n", sorted.front());
  const double p = same_top();
  s += "\n====== Token probability statistics ======\n";
  s += fmt::format("Same top p: {:7.3f} ± {:6.3f} %  ({} tokens)\n", 100.0 * p,
                   n > 1 ? 100.0 * std::sqrt(p * (1 - p) / static_cast<double>(n - 1)) : 0.0, n);
  return s;
}

}  // namespace cortiq::cli
