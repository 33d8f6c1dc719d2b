// Model: shared Weights + a thread pool + activations.
#include "model/model.h"

#include "model/model_impl.h"

namespace cortiq::model {

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::bind(const cmf::ModelArch& arch, const TensorSource& source,
                                   const ModelOptions& opt) {
  return create(Weights::bind(arch, source), opt);
}

std::unique_ptr<Model> Model::create(std::shared_ptr<const Weights> weights, const ModelOptions& opt) {
  return std::unique_ptr<Model>(new Model(std::make_unique<Impl>(
      std::move(weights), kernels::Ops(opt.kernels.value_or(kernels::KernelConfig::current())),
      opt.threads)));
}

const cmf::ModelArch& Model::arch() const noexcept {
  return impl_->w->arch;
}
uint32_t Model::vocab_size() const noexcept {
  return static_cast<uint32_t>(impl_->w->lm_head.rows());
}
const std::shared_ptr<const Weights>& Model::weights() const noexcept {
  return impl_->w;
}
const kernels::Ops& Model::ops() const noexcept {
  return impl_->ops;
}
kernels::ThreadPool& Model::pool() noexcept {
  return impl_->pool;
}

}  // namespace cortiq::model
