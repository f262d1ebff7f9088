// The learning-rate schedules against transformers 5.23's get_scheduler: every expected value
// below is the lr transformers itself gives (base lr 1e-3) for the same name, kwargs, total and
// warmup steps; warmup_stable_decay with the phases LlamaFactory fills in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lft/config/schema.h"
#include "lft/optim/lr_schedule.h"
#include "test_util.h"

namespace lft::optim {
namespace {

// 20 steps in all, 4 of them warmup, unless told otherwise.
LrScheduleSpec spec(const std::string& name, std::map<std::string, double> kwargs = {},
                    std::int64_t total = 20, std::int64_t warmup = 4) {
  LrScheduleSpec s;
  s.name = name;
  s.base_lr = 1e-3;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.kwargs = std::move(kwargs);
  return s;
}

// lr(step) is transformers' value to a relative 1e-12 (a 0 exactly).
void expect_lrs(const LrScheduleSpec& spec,
                const std::vector<std::pair<std::int64_t, double>>& want) {
  const LrSchedule schedule(spec);
  for (const auto& [step, lr] : want)
    EXPECT_NEAR(schedule.lr(step), lr, 1e-12 * std::abs(lr)) << spec.name << " at step " << step;
}

// lr(0) .. lr(19).
void expect_first_20(const LrScheduleSpec& spec, const std::vector<double>& want) {
  ASSERT_EQ(want.size(), 20u);
  std::vector<std::pair<std::int64_t, double>> at;
  for (std::size_t step = 0; step < want.size(); ++step) at.emplace_back(step, want[step]);
  expect_lrs(spec, at);
}

std::string error_of(const LrScheduleSpec& spec) {
  return test::message_of<std::invalid_argument>([&] { LrSchedule{spec}; });
}

// Four values a line: steps 0-3, 4-7, ...
// clang-format off
TEST(LrSchedule, Linear) {
  expect_first_20(spec("linear"),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.0009375, 0.000875, 0.0008125000000000001,
                   0.00075, 0.0006875, 0.000625, 0.0005625000000000001,
                   0.0005, 0.0004375, 0.000375, 0.0003125,
                   0.00025, 0.0001875, 0.000125, 6.25e-05});
  expect_lrs(spec("linear", {}, 37, 0),
             {{0, 0.001}, {1, 0.000972972972972973}, {18, 0.0005135135135135135},
              {36, 2.702702702702703e-05}, {37, 0}, {40, 0}});
}

TEST(LrSchedule, Cosine) {
  expect_first_20(spec("cosine"),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.0009903926402016153, 0.0009619397662556434, 0.0009157348061512727,
                   0.0008535533905932737, 0.0007777851165098011, 0.000691341716182545, 0.0005975451610080642,
                   0.0005, 0.00040245483899193594, 0.0003086582838174551, 0.00022221488349019903,
                   0.00014644660940672628, 8.426519384872733e-05, 3.806023374435663e-05, 9.607359798384786e-06});
  expect_lrs(spec("cosine", {{"num_cycles", 1.5}}, 37, 0),
             {{0, 0.001}, {1, 0.0009838664734667494}, {12, 1.8012557287367392e-06},
              {25, 0.0009981987442712632}, {36, 1.6133526533250454e-05}, {37, 0}});
}

TEST(LrSchedule, CosineWithRestarts) {
  expect_first_20(spec("cosine_with_restarts", {{"num_cycles", 2}}),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.0009619397662556434, 0.0008535533905932737, 0.000691341716182545,
                   0.0005, 0.0003086582838174551, 0.00014644660940672628, 3.806023374435663e-05,
                   0.001, 0.0009619397662556434, 0.0008535533905932737, 0.000691341716182545,
                   0.0005, 0.0003086582838174551, 0.00014644660940672628, 3.806023374435663e-05});
  expect_lrs(spec("cosine_with_restarts"),
             {{4, 0.001}, {12, 0.0005}, {19, 9.607359798384786e-06},
              {20, 0}, {25, 0}});
}

TEST(LrSchedule, Polynomial) {
  expect_first_20(spec("polynomial"),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.0009375062499999999, 0.0008750124999999999, 0.00081251875,
                   0.000750025, 0.0006875312499999999, 0.0006250374999999999, 0.0005625437499999999,
                   0.0005000499999999999, 0.00043755625, 0.0003750625, 0.00031256875,
                   0.000250075, 0.00018758125, 0.0001250875, 6.259375e-05});
  expect_first_20(spec("polynomial", {{"power", 2}}),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.0008789183593749999, 0.0007656484374999999, 0.0006601902343749999,
                   0.0005625437499999999, 0.000472708984375, 0.0003906859375, 0.00031647460937499997,
                   0.000250075, 0.000191487109375, 0.0001407109375, 9.7746484375e-05,
                   6.259375e-05, 3.5252734375e-05, 1.57234375e-05, 4.005859375e-06});
  expect_lrs(spec("polynomial", {{"lr_end", 0.0001}, {"power", 0.5}}),
             {{5, 0.0009714212528966689}, {19, 0.000325}, {20, 0.0001},
              {21, 0.0001}, {30, 0.0001}});
}

TEST(LrSchedule, Constant) {
  expect_first_20(spec("constant"),
                  {0.001, 0.001, 0.001, 0.001,
                   0.001, 0.001, 0.001, 0.001,
                   0.001, 0.001, 0.001, 0.001,
                   0.001, 0.001, 0.001, 0.001,
                   0.001, 0.001, 0.001, 0.001});
}

TEST(LrSchedule, ConstantWithWarmup) {
  expect_first_20(spec("constant_with_warmup"),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.001, 0.001, 0.001,
                   0.001, 0.001, 0.001, 0.001,
                   0.001, 0.001, 0.001, 0.001,
                   0.001, 0.001, 0.001, 0.001});
  expect_lrs(spec("constant_with_warmup", {}, 20, 0),
             {{0, 0.001}, {1, 0.001}, {19, 0.001}});
}

TEST(LrSchedule, InverseSqrt) {
  expect_first_20(spec("inverse_sqrt"),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.0008944271909999159, 0.0008164965809277262, 0.0007559289460184544,
                   0.0007071067811865475, 0.0006666666666666666, 0.0006324555320336759, 0.0006030226891555273,
                   0.0005773502691896259, 0.0005547001962252292, 0.0005345224838248488, 0.0005163977794943222,
                   0.0005, 0.0004850712500726659, 0.00047140452079103175, 0.0004588314677411235});
  expect_lrs(spec("inverse_sqrt", {}, 20, 0),
             {{0, 0.001}, {1, 0.0009999500037496877}, {100, 0.0009950371902099893},
              {10000, 0.0007071067811865475}});
  expect_lrs(spec("inverse_sqrt", {{"timescale", 3}}),
             {{3, 0.00075}, {4, 0.001}, {5, 0.0008660254037844387},
              {19, 0.0004082482904638631}, {50, 0.00024743582965269675}});
}

TEST(LrSchedule, CosineWithMinLr) {
  expect_first_20(spec("cosine_with_min_lr", {{"min_lr_rate", 0.1}}),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.0009913533761814538, 0.000965745789630079, 0.0009241613255361454,
                   0.0008681980515339464, 0.000800006604858821, 0.0007222075445642904, 0.0006377906449072578,
                   0.00055, 0.0004622093550927423, 0.0003777924554357096, 0.00029999339514117913,
                   0.00023180194846605365, 0.0001758386744638546, 0.00013425421036992097, 0.00010864662381854631});
  expect_first_20(spec("cosine_with_min_lr", {{"min_lr", 1e-05}}),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.000990488713799599, 0.000962320368593087, 0.00091657745808976,
                   0.000855017856687341, 0.0007800072653447031, 0.0006944282990207195, 0.0006015697093979836,
                   0.000505, 0.00040843029060201656, 0.0003155717009792806, 0.00022999273465529704,
                   0.00015498214331265904, 9.342254191024004e-05, 4.7679631406913064e-05, 1.9511286200400934e-05});
  expect_lrs(spec("cosine_with_min_lr", {{"min_lr", 0.0001}, {"num_cycles", 1}}, 37, 0),
             {{0, 0.001}, {9, 0.0005690985414382668}, {18, 0.00010162113015586308},
              {36, 0.0009935271596564687}, {37, 0.001}});
}

TEST(LrSchedule, CosineWarmupWithMinLr) {
  expect_first_20(spec("cosine_warmup_with_min_lr", {{"min_lr_rate", 0.1}}),
                  {0.00025, 0.0005, 0.00075, 0.001,
                   0.0009913533761814538, 0.000965745789630079, 0.0009241613255361454, 0.0008681980515339464,
                   0.000800006604858821, 0.0007222075445642904, 0.0006377906449072578, 0.00055,
                   0.0004622093550927423, 0.0003777924554357096, 0.00029999339514117913, 0.00023180194846605365,
                   0.0001758386744638546, 0.00013425421036992097, 0.00010864662381854631, 0.0001});
  expect_lrs(spec("cosine_warmup_with_min_lr", {{"min_lr", 1e-05}, {"warmup_lr_rate", 0.2}}),
             {{0, 0.0002}, {1, 0.00046666666666666666}, {2, 0.0007333333333333334},
              {3, 0.0010000000000000002}, {4, 0.000990488713799599}, {19, 1e-05},
              {20, 1.9511286200400934e-05}});
  expect_lrs(spec("cosine_warmup_with_min_lr", {{"min_lr_rate", 0.05}}, 37, 0),
             {{0, 0.0009982888070577001}, {1, 0.0009931675574151614}, {18, 0.0005048404284818297},
              {36, 5e-05}, {37, 5.171119294229991e-05}});
}

TEST(LrSchedule, WarmupStableDecay) {
  expect_first_20(spec("warmup_stable_decay"),
                  {0, 0.00025, 0.0005, 0.00075,
                   0.001, 0.001, 0.001, 0.001,
                   0.001, 0.001, 0.0009797464868072487, 0.0009206267664155906,
                   0.0008274303669726426, 0.0007077075065009433, 0.0005711574191366427, 0.0004288425808633575,
                   0.0002922924934990568, 0.0001725696330273575, 7.937323358440934e-05, 2.025351319275137e-05});
  expect_lrs(spec("warmup_stable_decay", {{"num_stable_steps", 3}, {"min_lr_ratio", 0.1}, {"num_cycles", 0.25}}),
             {{0, 0.0001}, {1, 0.00032500000000000004}, {4, 0.001},
              {6, 0.001}, {7, 0.001}, {8, 0.0009954196488464197},
              {15, 0.0007369367558508489}, {17, 0.0006140416772229784}, {18, 0.0001},
              {19, 0.0001}, {25, 0.0001}});
}
// clang-format on

TEST(LrSchedule, ConstantIgnoresWarmup) {
  const LrSchedule constant(spec("constant"));
  EXPECT_EQ(constant.warmup_steps(), 0);
  EXPECT_EQ(constant.lr(0), 1e-3);
  EXPECT_EQ(LrSchedule(spec("constant_with_warmup")).warmup_steps(), 4);
  EXPECT_EQ(LrSchedule(spec("constant_with_warmup")).lr(0), 0);
}

TEST(LrSchedule, NamesInHfOrder) {
  EXPECT_EQ(lr_scheduler_names(),
            (std::vector<std::string>{"linear", "cosine", "cosine_with_restarts", "polynomial",
                                      "constant", "constant_with_warmup", "inverse_sqrt",
                                      "cosine_with_min_lr", "cosine_warmup_with_min_lr",
                                      "warmup_stable_decay"}));
}

// The config schema accepts exactly the schedules this builds (config does not include optim: the
// schema lists them itself).
TEST(LrSchedule, TheSchemaAllowsEveryScheduleItBuilds) {
  const config::KeySpec* key = config::find_key("lr_scheduler_type");
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key->allowed, lr_scheduler_names());
}

// The lr_scheduler_kwargs table of the config schema holds these.
TEST(LrSchedule, KwargNames) {
  std::vector<std::string> names = lr_scheduler_kwarg_names();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"lr_end", "min_lr", "min_lr_rate", "min_lr_ratio",
                                             "num_cycles", "num_decay_steps", "num_stable_steps",
                                             "power", "timescale", "warmup_lr_rate"}));
}

TEST(LrSchedule, UnknownName) {
  const std::string m = error_of(spec("cosin"));
  EXPECT_CONTAINS(m, "unknown lr_scheduler_type 'cosin'");
  EXPECT_CONTAINS(m, "linear, cosine, cosine_with_restarts");
  EXPECT_CONTAINS(error_of(spec("reduce_lr_on_plateau")), "unknown lr_scheduler_type");
}

TEST(LrSchedule, KwargNotTaken) {
  std::string m = error_of(spec("cosine", {{"power", 2.0}}));
  EXPECT_CONTAINS(m, "lr_scheduler_type 'cosine' does not take lr_scheduler_kwargs.power");
  EXPECT_CONTAINS(m, "it takes num_cycles");
  m = error_of(spec("polynomial", {{"num_cycles", 1.0}}));
  EXPECT_CONTAINS(m, "lr_scheduler_kwargs.num_cycles; it takes lr_end, power");
  EXPECT_CONTAINS(error_of(spec("constant", {{"num_cycles", 1.0}})), "num_cycles; it takes none");
  EXPECT_CONTAINS(error_of(spec("linear", {{"min_lr", 1e-5}})), "min_lr; it takes none");
}

TEST(LrSchedule, MinLrOrMinLrRateExactlyOne) {
  for (const std::string name : {"cosine_with_min_lr", "cosine_warmup_with_min_lr"}) {
    EXPECT_CONTAINS(error_of(spec(name)),
                    "needs exactly one of lr_scheduler_kwargs.min_lr and "
                    "lr_scheduler_kwargs.min_lr_rate");
    EXPECT_CONTAINS(error_of(spec(name, {{"min_lr", 1e-5}, {"min_lr_rate", 0.1}})),
                    "exactly one of");
  }
}

TEST(LrSchedule, PolynomialLrEndBelowBaseLr) {
  EXPECT_CONTAINS(error_of(spec("polynomial", {{"lr_end", 1e-3}})),
                  "lr_scheduler_kwargs.lr_end (0.001) must be smaller than learning_rate (0.001)");
}

TEST(LrSchedule, ResolveWarmupSteps) {
  EXPECT_EQ(resolve_warmup_steps(0, 0.1, 20), 2);
  EXPECT_EQ(resolve_warmup_steps(0, 0.1, 37), 4);
  EXPECT_EQ(resolve_warmup_steps(0, 0.1, 7), 1);
  EXPECT_EQ(resolve_warmup_steps(0, 0.1, 9), 1);
  EXPECT_EQ(resolve_warmup_steps(0, 0.07, 100), 8);  // 7.000000000000001 in double
  EXPECT_EQ(resolve_warmup_steps(0, 0.0, 100), 0);
  EXPECT_EQ(resolve_warmup_steps(3, 0.5, 100), 3);
  EXPECT_EQ(resolve_warmup_steps(1, 0.5, 100), 1);
}

}  // namespace
}  // namespace lft::optim
