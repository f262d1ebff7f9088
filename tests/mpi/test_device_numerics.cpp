// Arithmetic that must give the host's numbers on the GPU, where CUDA's kernels add rules the
// CPU's do not check: the fused AdamW over lists that mix host and GPU tensors (offload beside
// whole experts) and QLoRA's dequantization with its code tables on the GPU. Each rank alone (the
// device check runs them at world 1); they need a GPU and skip elsewhere, saying why.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lft/model/quantize_4bit.h"
#include "lft/optim/adamw.h"
#include "mpi_test_util.h"

namespace lft {
namespace {

at::Device gpu_of(const DeviceChoice& device) {
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device.index));
}

// Steps AdamW 3 times over PARAMS (their gradients fixed) and returns them on the host.
std::vector<at::Tensor> after_three_steps(std::vector<at::Tensor> params) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = at::linspace(-1.0, 1.0, params[i].numel(), params[i].options()).view(params[i].sizes());
    names.push_back("p" + std::to_string(i));
  }
  optim::AdamW adamw(params, names, optim::AdamWOptions{0.9, 0.95, 1e-8, 0.1, false});
  for (int step = 0; step < 3; ++step) adamw.step(1e-2);
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : params) out.push_back(p.cpu());
  return out;
}

// CUDA's fused AdamW refuses lists whose tensors differ in device or dtype ("must have same dtype,
// device, and layout"); one step over a matrix on the GPU, one in (pinned) host memory and a bf16
// vector on the GPU must be one fused call per kind, each equal to the same step on the host.
TEST(DeviceOptim, AdamWOverHostAndGpuTensorsStepsAsOnTheHost) {
  const DeviceChoice device = test::this_ranks_device(/*share_one_gpu=*/true);
  LFT_REQUIRE_GPU(device);
  const at::Tensor a = at::randn({64, 32}), b = at::randn({48, 16}), c = at::randn({40}).to(at::kBFloat16);
  const std::vector<at::Tensor> host = after_three_steps({a.clone(), b.clone(), c.clone()});
  const std::vector<at::Tensor> mixed =
      after_three_steps({a.to(gpu_of(device)), b.clone().pin_memory(), c.to(gpu_of(device))});
  // Both kernels compute in fp32; the GPU's may round its square root or division otherwise by an
  // ulp, so the bounds are a few ulps of each dtype at these magnitudes (~1), not bit equality.
  const float bound[] = {1e-6f, 1e-6f, 1e-2f};
  for (std::size_t i = 0; i < host.size(); ++i)
    EXPECT_LE((mixed[i].to(at::kFloat) - host[i].to(at::kFloat)).abs().max().item<float>(), bound[i]) << "tensor " << i;
}

// QLoRA's dequantization where the packed weight lives on the GPU (its code tables copied there
// once and kept): the same weight as on the host, bit for bit (one product and one sum per element).
TEST(DeviceQuant, Dequantize4bitOnTheGpuEqualsTheHost) {
  const DeviceChoice device = test::this_ranks_device(/*share_one_gpu=*/true);
  LFT_REQUIRE_GPU(device);
  const at::Tensor weight = at::randn({96, 80});
  for (model::Quant4Type type : {model::Quant4Type::NF4, model::Quant4Type::FP4})
    for (bool double_quant : {false, true}) {
      model::Quantized4bit q = model::quantize_4bit(weight, type, double_quant);
      const at::Tensor on_host = model::dequantize_4bit(q, at::kFloat);
      for (at::Tensor* t : {&q.packed, &q.absmax, &q.quantized_absmax, &q.absmax_scale})
        if (t->defined()) *t = t->to(gpu_of(device));
      for (int call = 0; call < 2; ++call) {  // the second call reads the tables kept on the GPU
        const at::Tensor on_gpu = model::dequantize_4bit(q, at::kFloat);
        EXPECT_TRUE(on_gpu.is_cuda());
        EXPECT_TRUE(at::equal(on_gpu.cpu(), on_host)) << model::quant4_name(type) << (double_quant ? " double" : "");
      }
    }
}

}  // namespace
}  // namespace lft
