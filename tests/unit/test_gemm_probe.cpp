// The start-up warning of a 16-bit run on a CPU whose 16-bit GEMM is slow: said with both rates
// and the way to fp32 where bf16 is under a quarter of fp32's rate, silent otherwise; the probe's
// rates are real measurements.
#include <gtest/gtest.h>

#include "lft/runtime/gemm_probe.h"
#include "test_util.h"

namespace lft {
namespace {

TEST(GemmProbe, WarnsWhereBf16IsUnderAQuarterOfFp32) {
  // An AVX2-only AMD EPYC, measured: bf16 1.4 GFLOP/s, fp32 189.
  const std::string warning = slow_low_precision_warning(at::kBFloat16, {1.4, 189.0});
  EXPECT_CONTAINS(warning, "warning: bf16 matmuls run at 1.4 GFLOP/s on this CPU against 189.0 GFLOP/s in fp32 (135x slower");
  EXPECT_CONTAINS(warning, "bf16 = false");
  EXPECT_CONTAINS(warning, "dist_config.mixed_precision = \"fp32\"");
  EXPECT_CONTAINS(warning, "AVX512-BF16 or AMX");
  EXPECT_EQ(slow_low_precision_warning(at::kBFloat16, {416.6, 180.4}), "");  // AVX512-BF16: faster than fp32
  EXPECT_EQ(slow_low_precision_warning(at::kBFloat16, {50.0, 180.0}), "");  // over a quarter: no warning
  EXPECT_CONTAINS(slow_low_precision_warning(at::kHalf, {2.0, 180.0}), "fp16 = false");
}

TEST(GemmProbe, MeasuresBothRates) {
  const GemmRates rates = cpu_gemm_rates(at::kBFloat16);
  EXPECT_GT(rates.fp32, 0.1);
  EXPECT_GT(rates.low_precision, 0.01);
}

}  // namespace
}  // namespace lft
