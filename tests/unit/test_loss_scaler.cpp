// LossScaler against DeepSpeed's DynamicLossScaler semantics (hysteresis, window, minimum).
#include <gtest/gtest.h>

#include "lft/runtime/error.h"
#include "lft/train/loss_scaler.h"
#include "test_util.h"

namespace lft::train {
namespace {

LossScaleOptions options(double initial, std::int64_t window, int hysteresis, double min_scale) {
  LossScaleOptions o;
  o.initial_scale = initial;
  o.window = window;
  o.hysteresis = hysteresis;
  o.min_scale = min_scale;
  return o;
}

TEST(LossScaler, HysteresisDelaysTheFirstHalving) {
  LossScaler s(options(1024, 1000, 2, 1));
  EXPECT_FALSE(s.update(false, 1));
  EXPECT_EQ(s.scale(), 1024) << "the first overflow spends the hysteresis";
  EXPECT_FALSE(s.update(false, 2));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_FALSE(s.update(false, 3));
  EXPECT_EQ(s.scale(), 256) << "once spent, every overflow halves";
  EXPECT_EQ(s.skipped_steps(), 3);
  EXPECT_CONTAINS(s.last_event(), "step 3: fp16 gradients overflowed at loss scale 512; step skipped, loss scale now 256");
}

TEST(LossScaler, WindowOfGoodStepsDoublesAndRestoresHysteresis) {
  LossScaler s(options(8, 3, 2, 1));
  EXPECT_TRUE(s.update(true, 1));
  EXPECT_TRUE(s.update(true, 2));
  EXPECT_EQ(s.scale(), 8);
  EXPECT_TRUE(s.update(true, 3));
  EXPECT_EQ(s.scale(), 16);
  EXPECT_FALSE(s.update(false, 4));
  EXPECT_EQ(s.scale(), 16) << "hysteresis was restored with the growth";
  EXPECT_TRUE(s.update(true, 5));
  EXPECT_TRUE(s.update(true, 6));
  EXPECT_EQ(s.scale(), 16) << "the window counts good steps since the last overflow";
  EXPECT_TRUE(s.update(true, 7));
  EXPECT_EQ(s.scale(), 32);
}

TEST(LossScaler, OverflowAtTheMinimumStopsTheRun) {
  LossScaler s(options(2, 1000, 1, 1));
  EXPECT_FALSE(s.update(false, 1));
  EXPECT_EQ(s.scale(), 1);
  try {
    s.update(false, 2);
    FAIL() << "expected a RunFailure";
  } catch (const RunFailure& e) {
    EXPECT_CONTAINS(e.what(), "step 2: fp16 gradients overflowed at loss scale 1, the minimum (min_loss_scale)");
  }
}

TEST(LossScaler, StaticScaleNeverChangesAndAnOverflowStops) {
  LossScaleOptions o;
  o.static_scale = 128;
  LossScaler s(o);
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(s.update(true, i));
  EXPECT_EQ(s.scale(), 128);
  EXPECT_THROW(s.update(false, 6), RunFailure);
}

}  // namespace
}  // namespace lft::train
