// write_safetensors_f32: what it writes, the reader (SafetensorsFile, with its full header
// validation) reads back exactly; bad input leaves nothing behind.
#include "convert/safetensors_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "convert/safetensors.h"
#include "util/error.h"

namespace cortiq::convert {
namespace {

namespace fs = std::filesystem;

TEST(SafetensorsWriter, RoundTripsThroughTheReader) {
  const fs::path dir = fs::temp_directory_path() / ("cortiq_stw_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.125f}, b = {42.0f};
  const std::string p = (dir / "m.safetensors").string();
  write_safetensors_f32(p, {{"x.weight", {2, 3}, a}, {"y", {1}, b}}, {{"format", "pt"}});
  SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 2u);
  const StTensor& x = f.tensors()[0];
  EXPECT_EQ(x.name, "x.weight");
  EXPECT_EQ(x.shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(to_f32(x), a);
  EXPECT_EQ(to_f32(f.tensors()[1]), b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data.data()) % 8, 0u);

  EXPECT_THROW(write_safetensors_f32((dir / "bad.safetensors").string(), {{"x", {4}, a}}), Error);
  EXPECT_THROW(write_safetensors_f32((dir / "bad.safetensors").string(), {{"x", {1}, b}, {"x", {1}, b}}),
               Error);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u) << "a refused write leaves no file behind";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cortiq::convert
