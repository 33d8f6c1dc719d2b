// read_hf_checkpoint (hf_import.h).
#include "train/hf_import.h"

#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "convert/tensor_map.h"

namespace cortiq::train {

HfModel read_hf_checkpoint(const std::string& dir) {
  const convert::HfFiles files = convert::read_hf_files(dir);
  HfModel m{convert::arch_from_hf(files.config), {}};
  const convert::Checkpoint ckpt(dir);
  for (const convert::MappedTensor& t : convert::map_tensors(ckpt, m.arch).tensors)
    m.params.add(t.name, t.shape, convert::to_f32(t.src));
  return m;
}

}  // namespace cortiq::train
