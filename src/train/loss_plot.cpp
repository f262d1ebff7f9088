// plot_loss through PLplot's pngcairo device, laid out as matplotlib draws LlamaFactory's figure:
// a 6.4x4.8 in figure at 100 dpi, axes at [0.125, 0.9] x [0.11, 0.88] of it, 5% data margins,
// outward ticks on the bottom and left, nice tick steps (1, 2, 2.5, 5 x 10^k, at most 9 intervals),
// the legend in the emptiest corner, 10 pt text (12 pt title) and 1.5 pt lines.
//
// PLplot facts this file relies on (5.15):
//  - All state is global (the current stream). Each plot makes its own stream (plmkstrm), ends it
//    with plend1 (which frees it and selects stream 0) and reselects the caller's stream. plend()
//    is never called: it would end every stream and unload the drivers.
//  - plexit() calls exit(). It is reached when the output file cannot be opened (after eleven
//    retries printing "Can't open ..."), and plsdev() with an unknown device prompts on stdin.
//    Hence the device is checked with plgDevs and the file is opened here and handed over with
//    plsfile(); PLplot then never opens a file itself and closes this one in plend1.
//  - '#' is PLplot's text escape character; "##" is a literal '#'.
#include "lft/train/loss_plot.h"

#include <plplot.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace lft::train {

std::vector<double> smooth_metric(const std::vector<double>& values) {
  std::vector<double> smoothed;
  if (values.empty()) return smoothed;
  smoothed.reserve(values.size());
  const double n = static_cast<double>(values.size());
  const double weight = 1.8 * (1.0 / (1.0 + std::exp(-0.05 * n)) - 0.5);
  double last = values.front();
  for (double next : values) {
    const double value = last * weight + (1.0 - weight) * next;
    smoothed.push_back(value);
    last = value;
  }
  return smoothed;
}

namespace {

// Figure geometry (pixels) and matplotlib's defaults, converted for PLplot's cairo driver, whose
// lengths are in mm at 72 dpi (1 mm = 72 / 25.4 device pixels) and whose pango text is laid out at
// 96 dpi (a font of chrht mm is chrht * 72 / 25.4 pt, drawn at 4/3 pixel per pt).
constexpr int kWidthPx = 640;
constexpr int kHeightPx = 480;
constexpr double kViewLeft = 0.125, kViewRight = 0.9, kViewBottom = 0.11, kViewTop = 0.88;
constexpr double kPxPerMm = 72.0 / 25.4;
double font_mm(double pixels) { return pixels * 0.75 / kPxPerMm; }  // pixels -> pt at 96 dpi -> mm
constexpr double kLabelPx = 10.0 * 100.0 / 72.0;                    // 10 pt at 100 dpi
constexpr double kTitlePx = 12.0 * 100.0 / 72.0;                    // 12 pt at 100 dpi
constexpr double kLineWidthPx = 1.5 * 100.0 / 72.0;                 // lines.linewidth 1.5 pt
constexpr double kFrameWidthPx = 0.8 * 100.0 / 72.0;                // axes.linewidth 0.8 pt
constexpr double kTickLengthPx = 3.5 * 100.0 / 72.0;                // xtick.major.size 3.5 pt

// cmap0 slots.
constexpr PLINT kBackground = 0, kInk = 1, kRaw = 2, kSmooth = 3, kLegendEdge = 4;

std::mutex& plplot_mutex() {
  static std::mutex m;
  return m;
}

struct Range {
  double lo = 0.0, hi = 1.0;
};

// matplotlib's autoscale: 5% of the data span on each side; a zero span is widened first.
// Non-finite values (a NaN loss) are left out, as matplotlib leaves them out.
Range padded_range(const std::vector<double>& a, const std::vector<double>& b) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto* v : {&a, &b}) {
    for (double x : *v) {
      if (!std::isfinite(x)) continue;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  if (lo > hi) lo = hi = 0.0;  // nothing finite
  if (!(hi > lo)) {
    const double pad = lo != 0.0 ? std::abs(lo) * 0.05 : 0.05;
    lo -= pad;
    hi += pad;
  }
  const double margin = 0.05 * (hi - lo);
  return {lo - margin, hi + margin};
}

// matplotlib's MaxNLocator(nbins=9, steps=[1, 2, 2.5, 5, 10]): the smallest nice step whose
// multiples cover the range in at most 9 intervals.
double tick_step(const Range& r) {
  constexpr int kBins = 9;
  const double raw = (r.hi - r.lo) / kBins;
  const double scale = std::pow(10.0, std::floor(std::log10(raw)));
  for (int attempt = 0; attempt < 3; ++attempt) {
    const double s = scale * std::pow(10.0, attempt);
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
      const double step = m * s;
      if (step < raw * (1.0 - 1e-9)) continue;
      const double first = std::floor(r.lo / step + 1e-9);
      const double last = std::ceil(r.hi / step - 1e-9);
      if (last - first <= kBins) return step;
    }
  }
  return raw;
}

// Decimals every label of a step needs, as matplotlib prints them alike (0.0, 2.5, 5.0).
int tick_decimals(double step) {
  for (int d = 0; d < 12; ++d) {
    const double scaled = step * std::pow(10.0, d);
    if (std::abs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, std::abs(scaled))) return d;
  }
  return 12;
}

struct LabelFormat {
  int x_decimals = 0;
  int y_decimals = 0;
};

std::string tick_label(double value, int decimals) {
  if (std::abs(value) < 0.5 * std::pow(10.0, -decimals)) value = 0.0;  // no "-0.0"
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

void format_tick(PLINT axis, PLFLT value, char* label, PLINT length, PLPointer data) {
  const auto* format = static_cast<const LabelFormat*>(data);
  const int decimals = axis == PL_Y_AXIS ? format->y_decimals : format->x_decimals;
  std::snprintf(label, static_cast<std::size_t>(length), "%s", tick_label(value, decimals).c_str());
}

// Width in pixels of the widest tick label of the range, in DejaVu Sans advances (em fractions).
double widest_tick_label_px(const Range& r, double step, int decimals) {
  double widest = 0.0;
  if (!(step > 0) || !std::isfinite(step)) return 0.0;
  const double first = std::ceil(r.lo / step - 1e-9);
  // A counted loop: with a step tiny against the values, `k += 1` would not move k.
  for (int i = 0; i <= 20 && (first + i) * step <= r.hi + 1e-9 * step; ++i) {
    double em = 0.0;
    for (char c : tick_label((first + i) * step, decimals)) em += c == '.' ? 0.318 : c == '-' ? 0.338 : 0.636;
    widest = std::max(widest, em * kLabelPx);
  }
  return widest;
}

// PLplot reads '#' as its escape character.
std::string escape_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    out += c;
    if (c == '#') out += '#';
  }
  return out;
}

// matplotlib's loc="best", simplified: the first of its candidate places (in its order) whose
// legend box covers the fewest points of the two lines, sampled along each segment.
PLINT legend_position(const std::vector<double>& steps, const std::vector<double>& raw,
                      const std::vector<double>& smooth, const Range& xr, const Range& yr) {
  // The legend's size as a fraction of the axes (two 10 pt rows, "original"/"smoothed").
  constexpr double kW = 0.26, kH = 0.17, kPad = 0.02;
  struct Place {
    PLINT position;
    double x0, y0;  // lower-left corner of the box, axes fraction
  };
  const double cx = 0.5 - kW / 2, cy = 0.5 - kH / 2, r = 1 - kPad - kW, t = 1 - kPad - kH;
  const std::array<Place, 9> places = {{
      {PL_POSITION_TOP | PL_POSITION_RIGHT, r, t},
      {PL_POSITION_TOP | PL_POSITION_LEFT, kPad, t},
      {PL_POSITION_BOTTOM | PL_POSITION_LEFT, kPad, kPad},
      {PL_POSITION_BOTTOM | PL_POSITION_RIGHT, r, kPad},
      {PL_POSITION_RIGHT, r, cy},
      {PL_POSITION_LEFT, kPad, cy},
      {PL_POSITION_BOTTOM, cx, kPad},
      {PL_POSITION_TOP, cx, t},
      {0, cx, cy},
  }};
  std::array<std::size_t, 9> hits{};
  auto visit = [&](double x, double y) {
    const double fx = (x - xr.lo) / (xr.hi - xr.lo), fy = (y - yr.lo) / (yr.hi - yr.lo);
    for (std::size_t i = 0; i < places.size(); ++i) {
      const Place& p = places[i];
      if (fx >= p.x0 && fx <= p.x0 + kW && fy >= p.y0 && fy <= p.y0 + kH) ++hits[i];
    }
  };
  for (const auto* line : {&raw, &smooth}) {
    const auto& ys = *line;
    visit(steps[0], ys[0]);
    for (std::size_t i = 1; i < ys.size(); ++i) {
      constexpr int kSamples = 8;
      for (int s = 1; s <= kSamples; ++s) {
        const double f = static_cast<double>(s) / kSamples;
        visit(steps[i - 1] + f * (steps[i] - steps[i - 1]), ys[i - 1] + f * (ys[i] - ys[i - 1]));
      }
    }
  }
  std::size_t best = 0;
  for (std::size_t i = 1; i < places.size(); ++i) {
    if (hits[i] < hits[best]) best = i;
  }
  return places[best].position | PL_POSITION_INSIDE | PL_POSITION_VIEWPORT;
}

// plline through the finite points, broken where a value is not finite (as matplotlib draws).
void draw_line(const std::vector<double>& xs, const std::vector<double>& ys) {
  std::size_t begin = 0;
  while (begin < ys.size()) {
    std::size_t end = begin;
    while (end < ys.size() && std::isfinite(xs[end]) && std::isfinite(ys[end])) ++end;
    if (end - begin > 1) plline(static_cast<PLINT>(end - begin), &xs[begin], &ys[begin]);
    begin = end + 1;
  }
}

bool has_device(const char* name) {
  constexpr int kMaxDevices = 256;
  std::vector<const char*> menu(kMaxDevices, nullptr), names(kMaxDevices, nullptr);
  const char** menu_ptr = menu.data();
  const char** names_ptr = names.data();
  int count = kMaxDevices;
  plgDevs(&menu_ptr, &names_ptr, &count);  // fills the arrays the pointers point to
  for (int i = 0; i < count; ++i) {
    if (names[static_cast<std::size_t>(i)] != nullptr &&
        std::strcmp(names[static_cast<std::size_t>(i)], name) == 0) {
      return true;
    }
  }
  return false;
}

// True when the file starts with the PNG signature and holds more than it.
bool looks_like_png(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  unsigned char head[16] = {0};
  const std::size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  static const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return n == sizeof head && std::memcmp(head, kSignature, sizeof kSignature) == 0;
}

}  // namespace

void write_metric_plot(const std::string& png_path, const std::string& key,
                       const std::string& output_dir, const std::vector<double>& steps,
                       const std::vector<double>& values) {
  if (values.empty())
    throw std::invalid_argument("cannot plot " + png_path + ": no " + key + " values");
  // PLplot's axis drawing never returned for some one-point ranges (x 10, y 9.03): a line needs
  // two points anyway.
  if (steps.size() < 2)
    throw std::invalid_argument("cannot plot " + png_path + ": one " + key + " value is no line");
  if (steps.size() != values.size()) {
    throw std::invalid_argument("cannot plot " + png_path + ": " + std::to_string(steps.size()) +
                                " steps for " + std::to_string(values.size()) + " values");
  }

  // Everything that can throw happens before PLplot holds any state.
  const std::vector<double> smooth = smooth_metric(values);
  const Range xr = padded_range(steps, steps);
  const Range yr = padded_range(values, smooth);
  const double x_step = tick_step(xr), y_step = tick_step(yr);
  LabelFormat format{tick_decimals(x_step), tick_decimals(y_step)};
  const double y_label_width_px = widest_tick_label_px(yr, y_step, format.y_decimals);
  const PLINT position = legend_position(steps, values, smooth, xr, yr);
  const std::string title = escape_text("training " + key + " of " + output_dir);
  const std::string y_label = escape_text(key);

  std::lock_guard<std::mutex> lock(plplot_mutex());
  if (!has_device("pngcairo")) {
    throw std::runtime_error("cannot write " + png_path +
                             ": PLplot has no pngcairo device (install plplot-driver-cairo)");
  }
  std::FILE* file = std::fopen(png_path.c_str(), "wb");
  if (file == nullptr) {
    throw std::runtime_error("cannot write " + png_path + ": " + std::strerror(errno));
  }

  PLINT caller_stream = 0, stream = -1;
  plgstrm(&caller_stream);
  plmkstrm(&stream);
  if (stream < 0) {
    std::fclose(file);
    plsstrm(caller_stream);
    throw std::runtime_error("cannot write " + png_path + ": no free PLplot stream");
  }
  plsdev("pngcairo");
  plsfile(file);  // PLplot owns it from here and closes it in plend1
  plspage(100.0, 100.0, kWidthPx, kHeightPx, 0, 0);
  plscolbg(255, 255, 255);
  plscol0(kInk, 0, 0, 0);
  plscol0a(kRaw, 0x1f, 0x77, 0xb4, 0.4);
  plscol0a(kSmooth, 0x1f, 0x77, 0xb4, 1.0);
  plscol0(kLegendEdge, 0xcc, 0xcc, 0xcc);  // legend.edgecolor 0.8
  plinit();

  pladv(0);
  plvpor(kViewLeft, kViewRight, kViewBottom, kViewTop);
  plwind(xr.lo, xr.hi, yr.lo, yr.hi);

  // Frame on all four sides, outward ticks and labels on the bottom and left only.
  plcol0(kInk);
  plwidth(kFrameWidthPx);
  plschr(font_mm(kLabelPx), 1.0);
  plsmaj(kTickLengthPx / kPxPerMm, 1.0);
  plslabelfunc(format_tick, &format);
  plbox("bc", 0.0, 0, "bc", 0.0, 0);
  plbox("btino", x_step, 0, "btinov", y_step, 0);
  // Axis labels as matplotlib spaces them: past the tick (3.5 pt), its pad (3.5 pt), the tick
  // labels and the label pad (4 pt); plmtex measures to the text's middle in character heights.
  PLFLT default_height_mm = 0.0, height_mm = 0.0;
  plgchr(&default_height_mm, &height_mm);
  const double unit_px = height_mm * kPxPerMm;
  const double pads_px = 2 * kTickLengthPx + 4.0 * 100.0 / 72.0 + 0.5 * kLabelPx;
  plmtex("b", (pads_px + kLabelPx) / unit_px, 0.5, 0.5, "step");
  plmtex("l", (pads_px + y_label_width_px) / unit_px, 0.5, 0.5, y_label.c_str());
  plschr(font_mm(kTitlePx), 1.0);
  plmtex("t", 0.8, 0.5, 0.5, title.c_str());
  plschr(font_mm(kLabelPx), 1.0);

  plwidth(kLineWidthPx);
  plcol0(kRaw);
  draw_line(steps, values);
  plcol0(kSmooth);
  draw_line(steps, smooth);

  // Legend: a white box with a light grey edge, as matplotlib's (which is 80% opaque).
  const char* texts[2] = {"original", "smoothed"};
  const PLINT opts[2] = {PL_LEGEND_LINE, PL_LEGEND_LINE};
  const PLINT text_colors[2] = {kInk, kInk};
  const PLINT line_colors[2] = {kRaw, kSmooth};
  const PLINT line_styles[2] = {1, 1};
  const PLFLT line_widths[2] = {kLineWidthPx, kLineWidthPx};
  PLFLT legend_width = 0.0, legend_height = 0.0;
  plwidth(kFrameWidthPx);
  pllegend(&legend_width, &legend_height, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, position,
           0.02, 0.03, 0.08, kBackground, kLegendEdge, 1, 0, 0, 2, opts, 0.8, 1.0, 2.0, 0.0,
           text_colors, texts, nullptr, nullptr, nullptr, nullptr, line_colors, line_styles,
           line_widths, nullptr, nullptr, nullptr, nullptr);

  plend1();  // writes the PNG, closes the file, frees the stream and selects stream 0
  plsstrm(caller_stream);

  if (!looks_like_png(png_path)) {
    throw std::runtime_error("cannot write " + png_path + ": the PNG was not written out");
  }
}

}  // namespace lft::train
