#include "model/variant.h"

namespace cortiq::model {

double Variant::ffn_alive_fraction() const noexcept {
  size_t alive = 0, all = 0;
  for (size_t l = 0; l < ffn_alive.size(); ++l) {
    if (ffn_alive[l].empty()) continue;
    all += ffn_alive[l].size();
    alive += ffn_index[l].size();
  }
  return all ? static_cast<double>(alive) / static_cast<double>(all) : 1.0;
}

}  // namespace cortiq::model
