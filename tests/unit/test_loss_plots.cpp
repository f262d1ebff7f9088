// plot_loss's wiring: the losses read back from trainer_log.jsonl (eval records apart, a record
// cut short skipped) and one PNG per metric with LlamaFactory's messages.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "lft/train/loss_plots.h"
#include "test_util.h"

namespace lft::train {
namespace {

// Two logged steps, an eval, a third step and a record cut short, as trainer_log.jsonl holds them.
const char* const kLog =
    "{\"current_steps\": 2, \"total_steps\": 6, \"loss\": 2.5, \"lr\": 0.001, \"step\": 2}\n"
    "{\"current_steps\": 4, \"total_steps\": 6, \"loss\": 2.0, \"lr\": 0.001, \"step\": 4}\n"
    "{\"current_steps\": 4, \"total_steps\": 6, \"eval_loss\": 2.25, \"step\": 4}\n"
    "{\"current_steps\": 6, \"total_steps\": 6, \"loss\": 1.5, \"lr\": 0.001, \"step\": 6}\n"
    "{\"current_steps\": 6, \"total_steps\": 6, \"eval_loss\": 1.75, \"step\": 6}\n"
    "{\"current_steps\": 8, \"total_steps\":\n";

off_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST(LossPlots, ReadsEachMetricWithItsSteps) {
  test::TempDir dir;
  const std::string log = dir.write("trainer_log.jsonl", kLog);
  const MetricSeries loss = read_logged_metric(log, "loss");
  EXPECT_EQ(loss.steps, (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(loss.values, (std::vector<double>{2.5, 2.0, 1.5}));
  const MetricSeries eval = read_logged_metric(log, "eval_loss");
  EXPECT_EQ(eval.steps, (std::vector<double>{4, 6}));
  EXPECT_EQ(eval.values, (std::vector<double>{2.25, 1.75}));
  EXPECT_TRUE(read_logged_metric(log, "eval_accuracy").values.empty());
  EXPECT_THROW(read_logged_metric(dir.dir() + "/missing.jsonl", "loss"), std::runtime_error);
}

TEST(LossPlots, DrawsOnePngPerMetricAndSaysWhere) {
  test::TempDir dir;
  const std::string log = dir.write("trainer_log.jsonl", kLog);
  const std::string loss_png = dir.path("training_loss.png");
  const std::string eval_png = dir.path("training_eval_loss.png");
  std::vector<std::string> lines;
  plot_losses(dir.dir(), log, [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(lines, (std::vector<std::string>{"figure saved at: " + loss_png, "figure saved at: " + eval_png}));
  EXPECT_GT(file_size(loss_png), 8000);
  EXPECT_GT(file_size(eval_png), 8000);
}

TEST(LossPlots, AMetricWithoutValuesIsSkippedWithAMessage) {
  test::TempDir dir;
  const std::string log = dir.write("trainer_log.jsonl",
                                    "{\"current_steps\": 1, \"total_steps\": 2, \"loss\": 3.0, \"step\": 1}\n"
                                    "{\"current_steps\": 2, \"total_steps\": 2, \"loss\": 2.0, \"step\": 2}\n");
  const std::string loss_png = dir.path("training_loss.png");
  const std::string eval_png = dir.path("training_eval_loss.png");
  std::vector<std::string> lines;
  plot_losses(dir.dir(), log, [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(lines, (std::vector<std::string>{"figure saved at: " + loss_png, "no metric eval_loss to plot"}));
  EXPECT_EQ(file_size(eval_png), -1);
}

TEST(LossPlots, DpoDrawsTheRewardAccuracyToo) {
  test::TempDir dir;
  const std::string log = dir.write(
      "trainer_log.jsonl",
      "{\"current_steps\": 1, \"loss\": 0.69, \"rewards/accuracies\": 0.0, \"step\": 1}\n"
      "{\"current_steps\": 2, \"loss\": 0.6, \"rewards/accuracies\": 0.75, \"step\": 2}\n");
  std::vector<std::string> lines;
  plot_losses(dir.dir(), log, [&](const std::string& line) { lines.push_back(line); }, "dpo");
  EXPECT_EQ(lines, (std::vector<std::string>{"figure saved at: " + dir.path("training_loss.png"),
                                             "no metric eval_loss to plot",
                                             "figure saved at: " + dir.path("training_rewards_accuracies.png")}));
  EXPECT_GT(file_size(dir.path("training_rewards_accuracies.png")), 8000);
}

TEST(LossPlots, AnUnwritableFolderThrows) {
  test::TempDir dir;
  const std::string log = dir.write("trainer_log.jsonl", kLog);
  EXPECT_THROW(plot_losses(dir.dir() + "/no/such/folder", log, [](const std::string&) {}), std::exception);
}

}  // namespace
}  // namespace lft::train
