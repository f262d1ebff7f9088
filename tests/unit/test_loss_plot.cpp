// plot_loss's counterpart: LlamaFactory's smoothing (against values its Python computes) and the
// PNG PLplot draws (read back with libpng: size, ink, the line colour, its translucent twin).
#include <gtest/gtest.h>
#include <png.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lft/train/loss_plot.h"
#include "test_util.h"

namespace lft::train {
namespace {

// A noisy, decaying loss curve, rounded to 4 decimals.
const std::vector<double> kLosses = {
    2.8268, 2.5238, 2.3129, 2.4209, 2.3668, 2.0471, 1.969,  2.1047, 1.9536, 1.6721, 1.72,   1.822,
    1.5888, 1.3957, 1.5348, 1.5552, 1.2807, 1.2072, 1.3829, 1.2991, 1.0384, 1.088,  1.2394, 1.0591,
    0.8668, 1.0137, 1.0892, 0.8477, 0.7631, 0.9584, 0.9281, 0.6791, 0.7151, 0.8991, 0.7628, 0.5635,
    0.7033, 0.821,  0.6076, 0.5036, 0.7047, 0.7195, 0.4792, 0.4925, 0.6973, 0.6006, 0.3917, 0.5146,
    0.6656, 0.4788, 0.3522, 0.549,  0.6033, 0.3721, 0.3578, 0.5742, 0.5151, 0.2972, 0.3965, 0.5737};

// smooth(kLosses[:2]) by LlamaFactory's Python, repr()'d.
const std::vector<double> kSmoothed2 = {2.8268, 2.537423648851014};

// smooth(kLosses[:7]) by LlamaFactory's Python, repr()'d.
const std::vector<double> kSmoothed7 = {2.8268,
                                        2.571041227541512,
                                        2.353147222667108,
                                        2.4103365532325003,
                                        2.3735878555037284,
                                        2.098003257661359,
                                        1.989113109731936};

// smooth(kLosses[:60]) by LlamaFactory's Python, repr()'d.
const std::vector<double> kSmoothed60 = {2.8268,
                                         2.770633928768955,
                                         2.685785359633301,
                                         2.636684468619358,
                                         2.586656909911016,
                                         2.4866410952731792,
                                         2.3906877400612006,
                                         2.337675173132214,
                                         2.266480475006076,
                                         2.1563022040571203,
                                         2.075426360257338,
                                         2.028449584673054,
                                         1.9469532484042553,
                                         1.8447693235982543,
                                         1.7873113727445964,
                                         1.7442856833217957,
                                         1.658352394506137,
                                         1.574723821813437,
                                         1.539166097589725,
                                         1.49466586809341,
                                         1.4100894283322583,
                                         1.3503848152151754,
                                         1.3298119405058029,
                                         1.2796309961706764,
                                         1.2031059297109226,
                                         1.1679964018570415,
                                         1.1533901829809603,
                                         1.0967254417534364,
                                         1.0348824373771581,
                                         1.0207051501637938,
                                         1.0035392509543508,
                                         0.9433990592736614,
                                         0.9010800453292884,
                                         0.9007130111147488,
                                         0.875148549048878,
                                         0.8173793259302937,
                                         0.7962328323785101,
                                         0.8008238373317108,
                                         0.765006597031022,
                                         0.7165505523144893,
                                         0.7143538560589684,
                                         0.7153077791188931,
                                         0.6715412895472906,
                                         0.6383530195076496,
                                         0.6492798191947399,
                                         0.64025620799868,
                                         0.5941821958423359,
                                         0.5794303170291226,
                                         0.5954032957476006,
                                         0.573788942563659,
                                         0.5327137599496578,
                                         0.5357326844339925,
                                         0.548257406080761,
                                         0.5156037116325494,
                                         0.48635217860259217,
                                         0.5026362280880672,
                                         0.5049465947580775,
                                         0.46643732070134747,
                                         0.4534732793276831,
                                         0.47575929436780284};

std::vector<double> first(std::size_t n) {
  return std::vector<double>(kLosses.begin(), kLosses.begin() + static_cast<std::ptrdiff_t>(n));
}

std::vector<double> steps_for(std::size_t n, double every) {
  std::vector<double> steps;
  for (std::size_t i = 1; i <= n; ++i) steps.push_back(static_cast<double>(i) * every);
  return steps;
}

void expect_same_series(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-12 * std::abs(want[i])) << "at " << i;
  }
}

TEST(SmoothMetric, MatchesLlamaFactoryPython) {
  EXPECT_TRUE(smooth_metric({}).empty());
  expect_same_series(smooth_metric(first(1)), {2.8268});
  expect_same_series(smooth_metric(first(2)), kSmoothed2);
  expect_same_series(smooth_metric(first(7)), kSmoothed7);
  expect_same_series(smooth_metric(kLosses), kSmoothed60);
}

TEST(SmoothMetric, WeightGrowsWithLength) {
  // The same two values, inside a longer series, keep more of the first one.
  const std::vector<double> two = smooth_metric({1.0, 0.0});
  std::vector<double> long_series(100, 0.0);
  long_series[0] = 1.0;
  const std::vector<double> longer = smooth_metric(long_series);
  EXPECT_GT(longer[1], two[1]);
  EXPECT_NEAR(two[1], 1.8 * (1 / (1 + std::exp(-0.1)) - 0.5), 1e-15);
}

struct Image {
  png_uint_32 width = 0, height = 0;
  std::vector<unsigned char> rgb;
};

// Reads a PNG as 8-bit RGB (composited on white), failing the test when libpng cannot.
Image read_png(const std::string& path) {
  Image out;
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    ADD_FAILURE() << "libpng cannot open " << path << ": " << image.message;
    return out;
  }
  image.format = PNG_FORMAT_RGB;
  std::vector<unsigned char> pixels(PNG_IMAGE_SIZE(image));
  png_color white{255, 255, 255};
  if (!png_image_finish_read(&image, &white, pixels.data(), 0, nullptr)) {
    ADD_FAILURE() << "libpng cannot read " << path << ": " << image.message;
    png_image_free(&image);
    return out;
  }
  out.width = image.width;
  out.height = image.height;
  out.rgb = std::move(pixels);
  return out;
}

// Pixels within `tolerance` per channel of (r, g, b).
std::size_t count_near(const Image& image, int r, int g, int b, int tolerance) {
  std::size_t n = 0;
  for (std::size_t i = 0; i + 2 < image.rgb.size(); i += 3) {
    if (std::abs(image.rgb[i] - r) <= tolerance && std::abs(image.rgb[i + 1] - g) <= tolerance &&
        std::abs(image.rgb[i + 2] - b) <= tolerance) {
      ++n;
    }
  }
  return n;
}

// What is drawn besides the frame and text.
enum class Lines {
  kBoth,        // the raw line shows apart from the smoothed one
  kCoincident,  // a flat series: the smoothed line hides the raw one (the legend still has it)
  kPoint,       // a single point: a marker, no line
  kNone,        // nothing finite to draw: only the legend's samples
};

// Checks what LlamaFactory's figure has: 640x480, mostly white, black text and frame, the smoothed
// line in #1f77b4 and the raw one in #1f77b4 at alpha 0.4 over white (#a5c9e1).
void expect_loss_figure(const std::string& path, Lines lines) {
  const Image image = read_png(path);
  ASSERT_EQ(image.width, 640u) << path;
  ASSERT_EQ(image.height, 480u) << path;
  const double total = 640.0 * 480.0;
  const double white = static_cast<double>(count_near(image, 255, 255, 255, 0)) / total;
  EXPECT_GT(white, 0.80) << path << ": a white background";
  EXPECT_LT(white, 0.99) << path << ": something is drawn";
  EXPECT_GT(count_near(image, 0, 0, 0, 40), 500u) << path << ": black frame, ticks and text";
  const std::size_t line = count_near(image, 0x1f, 0x77, 0xb4, 24);
  const std::size_t raw = count_near(image, 0xa5, 0xc9, 0xe1, 12);
  EXPECT_GT(line, lines == Lines::kPoint || lines == Lines::kNone ? 30u : 400u)
      << path << ": the smoothed line's colour";
  // The legend's samples alone are about 50 pixels each.
  EXPECT_GT(raw, lines == Lines::kBoth ? 300u : 30u) << path << ": the raw line, translucent";
  if (lines == Lines::kBoth) {  // an opaque raw line would add to `line`, its edges alone to `raw`
    EXPECT_GT(2 * raw, line) << path << ": the raw line drawn at alpha 0.4";
  }
}

TEST(WriteMetricPlot, DrawsLlamaFactorysFigure) {
  test::TempDir dir;
  const std::string path = dir.path("training_loss.png");
  write_metric_plot(path, "loss", dir.dir(), steps_for(kLosses.size(), 5), kLosses);
  expect_loss_figure(path, Lines::kBoth);
  if (const char* keep = std::getenv("LFT_KEEP_PLOT")) {
    write_metric_plot(keep, "loss", "saves/llama3-8b/lora/sft", steps_for(kLosses.size(), 5),
                      kLosses);
  }
}

TEST(WriteMetricPlot, SeveralPlotsInOneProcess) {
  test::TempDir dir;
  const std::string loss = dir.path("training_loss.png");
  const std::string eval = dir.path("training_eval_loss.png");
  const std::string again = dir.path("training_loss_again.png");
  write_metric_plot(loss, "loss", dir.dir(), steps_for(kLosses.size(), 1), kLosses);
  write_metric_plot(eval, "eval_loss", dir.dir(), steps_for(7, 100), first(7));
  write_metric_plot(again, "loss", dir.dir(), steps_for(kLosses.size(), 1), kLosses);
  expect_loss_figure(loss, Lines::kBoth);
  expect_loss_figure(eval, Lines::kBoth);
  expect_loss_figure(again, Lines::kBoth);
}

// One value is no line, and PLplot's axes never returned on some one-point ranges (a short
// pre-training run logging once: step 10, loss 9.03): refused at once, the caller logs it.
TEST(WriteMetricPlot, OnePointIsRefused) {
  test::TempDir dir;
  for (double loss : {1.25, 9.031219780707547}) {
    EXPECT_THROW(write_metric_plot(dir.path("training_loss.png"), "loss", dir.dir(), {10}, {loss}),
                 std::invalid_argument);
  }
}

TEST(WriteMetricPlot, FlatAndNegativeSeriesDraw) {
  test::TempDir dir;
  const std::string flat = dir.path("flat.png");
  const std::string negative = dir.path("negative.png");
  write_metric_plot(flat, "loss", dir.dir(), steps_for(20, 1), std::vector<double>(20, 0.0));
  std::vector<double> rising;
  for (double v : kLosses) rising.push_back(-v * 1000);
  write_metric_plot(negative, "reward#1", "out#dir", steps_for(rising.size(), 250), rising);
  expect_loss_figure(flat, Lines::kCoincident);
  expect_loss_figure(negative, Lines::kBoth);
}

TEST(WriteMetricPlot, NonFiniteValuesAreLeftOut) {
  test::TempDir dir;
  const std::string path = dir.path("training_loss.png");
  std::vector<double> values = kLosses;
  values[30] = std::nan("");  // the smoothed line is NaN from here on, as in Python
  values[31] = INFINITY;
  write_metric_plot(path, "loss", dir.dir(), steps_for(values.size(), 1), values);
  expect_loss_figure(path, Lines::kBoth);
  const std::string none = dir.path("training_eval_loss.png");
  write_metric_plot(none, "eval_loss", dir.dir(), {1, 2}, {std::nan(""), std::nan("")});
  expect_loss_figure(none, Lines::kNone);
}

TEST(WriteMetricPlot, PrintsNothing) {
  test::TempDir dir;
  const std::string path = dir.path("training_loss.png");
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  write_metric_plot(path, "loss", dir.dir(), steps_for(kLosses.size(), 1), kLosses);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
}

TEST(WriteMetricPlot, UnwritablePathThrowsNamingIt) {
  test::TempDir dir;
  const std::string path = dir.dir() + "/no/such/folder/training_loss.png";
  const std::string message = test::message_of<std::runtime_error>(
      [&] { write_metric_plot(path, "loss", dir.dir(), steps_for(7, 1), first(7)); });
  EXPECT_CONTAINS(message, path);
  // PLplot is left usable.
  const std::string ok = dir.path("training_loss.png");
  write_metric_plot(ok, "loss", dir.dir(), steps_for(7, 1), first(7));
  expect_loss_figure(ok, Lines::kBoth);
}

TEST(WriteMetricPlot, RejectsNoPointsAndMismatchedSeries) {
  test::TempDir dir;
  const std::string path = dir.path("training_loss.png");
  EXPECT_THROW(write_metric_plot(path, "loss", dir.dir(), {}, {}), std::invalid_argument);
  EXPECT_THROW(write_metric_plot(path, "loss", dir.dir(), {1, 2}, {1.0}), std::invalid_argument);
}

TEST(WriteMetricPlot, ConcurrentCallersAreSerialized) {
  test::TempDir dir;
  const std::string a = dir.path("a.png");
  const std::string b = dir.path("b.png");
  std::thread t1(
      [&] { write_metric_plot(a, "loss", dir.dir(), steps_for(kLosses.size(), 1), kLosses); });
  std::thread t2([&] { write_metric_plot(b, "eval_loss", dir.dir(), steps_for(7, 1), first(7)); });
  t1.join();
  t2.join();
  expect_loss_figure(a, Lines::kBoth);
  expect_loss_figure(b, Lines::kBoth);
}

}  // namespace
}  // namespace lft::train
