// Measure (issue 2): verify throughput on a >= 1 GiB file vs a plain sequential read, and open
// time of a file with 20,000 tensors. Files are written to $CMF_BENCH_DIR (default /tmp).
// Run: ./cmf_bench --benchmark_repetitions=1   (numbers reported, never asserted)
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "cmf/hash.h"
#include "cmf/reader.h"
#include "cmf/writer.h"
#include "support/cmf_header.h"

namespace {
using namespace cortiq::cmf;

std::string bench_dir() {
  const char* d = std::getenv("CMF_BENCH_DIR");
  return d ? d : "/tmp";
}

Header bench_header() {
  return cortiq::test::tiny_header("bench", 1024, 4096, 1, 8, 8, 128, 1000, 4096);
}

const std::string& big_file() {
  static std::string p = [] {
    std::string path = bench_dir() + "/cmf_bench_1g.cmf";
    if (!std::filesystem::exists(path)) {
      Writer w(path);
      std::vector<uint8_t> buf(64u << 20);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
      const std::vector<uint64_t> shape = {buf.size() / 4};
      for (int i = 0; i < 16; ++i)
        w.add_tensor("t" + std::to_string(i), cortiq::quant::DType::F32, shape, buf);
      w.finish(bench_header());
    }
    return path;
  }();
  return p;
}

const std::string& many_file() {
  static std::string p = [] {
    std::string path = bench_dir() + "/cmf_bench_20k.cmf";
    if (!std::filesystem::exists(path)) {
      WriterOptions o;
      o.expected_tensors = 20000;
      Writer w(path, o);
      std::vector<uint8_t> buf(256 * 4, 1);
      const std::vector<uint64_t> shape = {256};
      for (int i = 0; i < 20000; ++i)
        w.add_tensor("model.layers." + std::to_string(i / 20) + ".t" + std::to_string(i % 20) + ".weight",
                     cortiq::quant::DType::F32, shape, buf);
      w.finish(bench_header());
    }
    return path;
  }();
  return p;
}

void BM_SequentialRead(benchmark::State& st) {
  const std::string& p = big_file();
  std::vector<char> buf(8u << 20);
  uint64_t total = 0;
  for (auto _ : st) {
    int fd = ::open(p.c_str(), O_RDONLY);
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) total += static_cast<uint64_t>(n);
    ::close(fd);
  }
  st.SetBytesProcessed(static_cast<int64_t>(total));
}
BENCHMARK(BM_SequentialRead)->Unit(benchmark::kMillisecond);

void BM_Verify(benchmark::State& st) {
  const std::string& p = big_file();
  uint64_t total = 0;
  for (auto _ : st) {
    Reader r = Reader::open(p);
    auto probs = r.verify();
    benchmark::DoNotOptimize(probs);
    total += r.verify_total_bytes();
  }
  st.SetBytesProcessed(static_cast<int64_t>(total));
}
BENCHMARK(BM_Verify)->Unit(benchmark::kMillisecond);

void BM_Hash64InMemory(benchmark::State& st) {
  std::vector<uint8_t> buf(64u << 20, 3);
  for (auto _ : st) benchmark::DoNotOptimize(hash64(buf));
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * buf.size()));
}
BENCHMARK(BM_Hash64InMemory)->Unit(benchmark::kMillisecond);

void BM_Open20kTensors(benchmark::State& st) {
  const std::string& p = many_file();
  for (auto _ : st) {
    Reader r = Reader::open(p);
    benchmark::DoNotOptimize(r.tensors().size());
  }
}
BENCHMARK(BM_Open20kTensors)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
