// The DeepSpeed JSON reader. After parsing: the features this build lacks (FP8, AutoTP, a JSON
// optimizer or scheduler), then every key against the table of known keys (rules()), then the
// values resolved against the TOML, then a note for each key accepted without effect.
#include "lft/config/deepspeed.h"
#include "lft/runtime/json_nesting.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "internal.h"

namespace lft::config {
namespace {

// Ordered, so that the first bad key in the file is the one reported.
using json = nlohmann::ordered_json;

// The bound of "unbounded" integers and numbers: every value below it converts to int64.
constexpr double kHuge = 1e18;
constexpr double kIntMax = 2147483647.0;

enum class Type { Object, Bool, Int, Number, String };

// A known key: its type, an example value for hints, whether "auto" is allowed, its range.
struct Rule {
  std::string path;
  Type type;
  std::string example;
  bool auto_ok;
  double min;
  double max;
  bool positive;  // min itself is excluded
};

Rule object(const char* path) { return {path, Type::Object, "{ ... }", false, 0, 0, false}; }
Rule flag(const char* path, bool auto_ok = false) {
  return {path, Type::Bool, "true", auto_ok, 0, 0, false};
}
Rule text(const char* path, const char* example) {
  return {path, Type::String, example, false, 0, 0, false};
}
Rule integer(const char* path, const char* example, double min, double max, bool auto_ok = false) {
  return {path, Type::Int, example, auto_ok, min, max, false};
}
Rule number(const char* path, const char* example, bool auto_ok = false, bool positive = false) {
  return {path, Type::Number, example, auto_ok, 0, kHuge, positive};
}

// Every key of LlamaFactory's ds_z0/z2/z3 files and their offload variants.
const std::vector<Rule>& rules() {
  static const std::vector<Rule> table = {
      integer("train_batch_size", "\"auto\"", 1, kHuge, true),
      integer("train_micro_batch_size_per_gpu", "\"auto\"", 1, kHuge, true),
      integer("gradient_accumulation_steps", "\"auto\"", 1, kHuge, true),
      number("gradient_clipping", "\"auto\"", true),
      flag("zero_allow_untested_optimizer"),
      object("fp16"),
      flag("fp16.enabled", true),
      number("fp16.loss_scale", "0"),
      integer("fp16.loss_scale_window", "1000", 1, kHuge),
      integer("fp16.initial_scale_power", "16", 0, 64),
      integer("fp16.hysteresis", "2", 1, kIntMax),
      number("fp16.min_loss_scale", "1", false, true),
      object("bf16"),
      flag("bf16.enabled", true),
      object("zero_optimization"),
      integer("zero_optimization.stage", "2", 0, 3),
      flag("zero_optimization.allgather_partitions"),
      integer("zero_optimization.allgather_bucket_size", "5e8", 1, kHuge),
      flag("zero_optimization.overlap_comm"),
      flag("zero_optimization.reduce_scatter"),
      integer("zero_optimization.reduce_bucket_size", "5e8", 1, kHuge, true),
      flag("zero_optimization.contiguous_gradients"),
      flag("zero_optimization.round_robin_gradients"),
      integer("zero_optimization.sub_group_size", "1e9", 1, kHuge),
      integer("zero_optimization.stage3_prefetch_bucket_size", "5e7", 0, kHuge, true),
      integer("zero_optimization.stage3_param_persistence_threshold", "1e5", 0, kHuge, true),
      integer("zero_optimization.stage3_max_live_parameters", "1e9", 0, kHuge),
      integer("zero_optimization.stage3_max_reuse_distance", "1e9", 0, kHuge),
      flag("zero_optimization.stage3_gather_16bit_weights_on_model_save"),
      object("zero_optimization.offload_optimizer"),
      text("zero_optimization.offload_optimizer.device", "\"cpu\""),
      flag("zero_optimization.offload_optimizer.pin_memory"),
      object("zero_optimization.offload_param"),
      text("zero_optimization.offload_param.device", "\"cpu\""),
      flag("zero_optimization.offload_param.pin_memory"),
  };
  return table;
}

// Keys accepted whatever their value, with why they have no effect in lftrain.
const std::map<std::string, std::string>& inert_keys() {
  static const std::map<std::string, std::string> table = {
      {"zero_allow_untested_optimizer",
       "lftrain's optimizer is its own AdamW (set in the TOML), which every ZeRO stage supports"},
      {"zero_optimization.allgather_partitions",
       "lftrain always all-gathers the updated parameter shards (false asks DeepSpeed for "
       "broadcasts)"},
      {"zero_optimization.contiguous_gradients",
       "lftrain always reduces gradients from contiguous flat buckets"},
      {"zero_optimization.round_robin_gradients",
       "it spreads DeepSpeed's per-rank gradient copies to the CPU; lftrain copies each rank's "
       "shard as one piece"},
      {"zero_optimization.sub_group_size",
       "lftrain steps the optimizer over each rank's whole shard at once, not in sub-groups"},
      {"zero_optimization.stage3_param_persistence_threshold",
       "lftrain shards every parameter, however small"},
      {"zero_optimization.stage3_max_live_parameters",
       "lftrain frees each gathered layer right after use, so only the layers in flight are live"},
      {"zero_optimization.stage3_max_reuse_distance",
       "lftrain frees each gathered layer right after use and gathers it again for the backward "
       "pass"},
      {"zero_optimization.allgather_bucket_size",
       "lftrain all-gathers one whole layer (or the root unit) per call, not buckets of a size"},
      {"zero_optimization.reduce_bucket_size",
       "lftrain reduce-scatters one layer's gradients per call, not buckets of a size"},
      {"zero_optimization.stage3_prefetch_bucket_size",
       "lftrain prefetches exactly the next layer while one computes"},
      {"zero_optimization.overlap_comm",
       "lftrain always overlaps: a layer's gradients are reduce-scattered while backward goes on "
       "(stages 2 and 3) and the next layer is gathered while one computes (stage 3)"},
      {"zero_optimization.reduce_scatter",
       "lftrain always reduces gradients with reduce-scatter (false asks DeepSpeed for "
       "all-reduce)"},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
       "lftrain checkpoints are sharded HDF5 that lfmerge exports to a Hugging Face model, "
       "always"},
  };
  return table;
}

struct Context {
  const Config& cfg;
  std::string file;
  json root;
};

[[noreturn]] void fail(const Context& c, const std::string& what, const std::string& hint,
                       const Location* toml = nullptr) {
  detail::fail(c.file, nullptr, what, hint, toml);
}

std::string leaf(const std::string& path) { return path.substr(path.rfind('.') + 1); }

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

bool integral(const json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

// An integer, also when written as an integral float such as 5e8 (the range is checked).
std::int64_t as_int(const json& v) {
  return v.is_number_float() ? static_cast<std::int64_t>(v.get<double>()) : v.get<std::int64_t>();
}

// The value as written, but 1e9 as 1000000000 rather than nlohmann's 1000000000.0.
std::string shown(const json& v) {
  if (v.is_number_float() && integral(v) && std::abs(v.get<double>()) < kHuge) {
    return std::to_string(as_int(v));
  }
  return v.dump();
}

// "string \"3\"", "number 4", "object".
std::string describe(const json& v) {
  if (v.is_object() || v.is_array() || v.is_null()) return v.type_name();
  return std::string(v.type_name()) + " " + shown(v);
}

// The value at a dotted path, or nullptr.
const json* find(const json& root, const std::string& path) {
  const json* node = &root;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    if (!node->is_object()) return nullptr;
    auto it = node->find(path.substr(start, dot - start));
    if (it == node->end()) return nullptr;
    node = &*it;
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

const Rule* find_rule(const std::string& path) {
  for (const Rule& r : rules()) {
    if (r.path == path) return &r;
  }
  return nullptr;
}

// ---- reading and parsing ----

std::string read_text(const Config& cfg, const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in) {
    detail::fail(cfg.source_name(), cfg.location("deepspeed"),
                 "key 'deepspeed': cannot read the DeepSpeed config \"" + file + "\"",
                 "check that the file is readable by every rank");
  }
  return text.str();
}

// The line and column of the 1-based byte offset nlohmann reports (the last character read).
Location position(const std::string& file, const std::string& text, std::size_t byte) {
  const std::size_t pos = std::min(byte == 0 ? 0 : byte - 1, text.size());
  const std::size_t newline = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
  const std::size_t start = newline == std::string::npos ? 0 : newline + 1;
  Location loc;
  loc.file = file;
  loc.line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + pos, '\n'));
  loc.column = static_cast<int>(pos - start) + 1;
  loc.line_text = text.substr(start, text.find('\n', start) - start);
  if (!loc.line_text.empty() && loc.line_text.back() == '\r') loc.line_text.pop_back();
  return loc;
}

[[noreturn]] void malformed(const std::string& file, const std::string& text,
                            const json::parse_error& e) {
  const Location loc = position(file, text, e.byte);
  std::string reason = e.what();  // "[json...] parse error at line 2, column 8: <reason>"
  const std::size_t colon = reason.find(": ", reason.find("parse error"));
  if (colon != std::string::npos) reason = reason.substr(colon + 2);
  detail::fail(file, &loc, "malformed JSON: " + reason,
               "a DeepSpeed config is strict JSON: no comments, no trailing commas, keys and "
               "strings in double quotes");
}

// Rejects a key given twice in one object, as DeepSpeed does (nlohmann would keep the last).
class DuplicateKeys {
 public:
  explicit DuplicateKeys(std::string file) : file_(std::move(file)) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        frames_.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        break;
      case json::parse_event_t::key:
        add(parsed.get<std::string>());
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  }

 private:
  struct Frame {
    std::set<std::string> keys;
    std::string last;
  };

  void add(const std::string& key) {
    if (!frames_.back().keys.insert(key).second) {
      std::string path;
      for (std::size_t i = 0; i + 1 < frames_.size(); ++i) {
        if (!frames_[i].last.empty()) path += frames_[i].last + ".";
      }
      detail::fail(file_, nullptr, "key '" + path + key + "' is given twice",
                   "keep one of them (DeepSpeed rejects duplicate keys too)");
    }
    frames_.back().last = key;
  }

  std::string file_;
  std::vector<Frame> frames_;
};

json parse(const std::string& file, const std::string& text) {
  if (const std::string deep = json_too_deep(text); !deep.empty())
    detail::fail(file, nullptr, "malformed JSON: " + deep, "a DeepSpeed config nests its settings a few levels deep");
  try {
    return json::parse(text, DuplicateKeys(file));
  } catch (const json::parse_error& e) {
    malformed(file, text, e);
  }
}

// ---- keys and types ----

// Keys of DeepSpeed features this build does not implement, with what to do instead.
void reject_unsupported(const Context& c, const std::string& path, const json& v) {
  if (leaf(path).rfind("fp8", 0) == 0) {
    fail(c, "key '" + path + "' asks for FP8 training, which is not implemented in this build",
         "remove the \"" + leaf(path) +
             "\" entry and train in bf16: bf16 = true in the TOML and \"bf16\": {\"enabled\": "
             "\"auto\"} here (the TOML's fp8 keys must stay false too)");
  }
  if (path == "tensor_parallel") {
    const json* tp = find(v, "autotp_size");
    const std::string size = tp != nullptr && integral(*tp) ? shown(*tp) : "2";
    fail(c,
         "key '" + (tp != nullptr ? "tensor_parallel.autotp_size' = " + shown(*tp) : path + "'") +
             ": DeepSpeed AutoTP is not implemented in lftrain",
         "tensor parallelism is the megatron engine's: set distributed = \"megatron\" with "
         "[mesh] tp = " +
             size + " in the TOML, and remove the \"tensor_parallel\" block");
  }
  if (path == "optimizer") {
    fail(c, "key 'optimizer': lftrain's optimizer is its AdamW, set in the TOML",
         "remove the \"optimizer\" block and set learning_rate, weight_decay, adam_beta1, "
         "adam_beta2 and adam_epsilon in the TOML");
  }
  if (path == "scheduler") {
    fail(c, "key 'scheduler': lftrain's learning-rate schedule is set in the TOML",
         "remove the \"scheduler\" block and set lr_scheduler_type and warmup_ratio or "
         "warmup_steps in the TOML");
  }
}

// A sibling with a close name, or the same name elsewhere ("stage" -> "zero_optimization.stage").
std::string suggest(const std::string& path) {
  const std::size_t dot = path.rfind('.');
  const std::string parent = dot == std::string::npos ? "" : path.substr(0, dot + 1);
  std::vector<std::string> siblings;
  for (const Rule& r : rules()) {
    if (r.path.rfind(parent, 0) == 0 && r.path.find('.', parent.size()) == std::string::npos) {
      siblings.push_back(r.path.substr(parent.size()));
    }
  }
  const std::string guess = detail::nearest(leaf(path), siblings);
  if (!guess.empty()) return parent + guess;
  for (const Rule& r : rules()) {
    if (leaf(r.path) == leaf(path)) return r.path;
  }
  return "";
}

[[noreturn]] void unknown_key(const Context& c, const std::string& path, const json& v) {
  reject_unsupported(c, path, v);
  std::string what = "unknown key '" + path + "'";
  const std::string guess = suggest(path);
  if (!guess.empty()) what += "; did you mean '" + guess + "'?";
  fail(c, what,
       "remove it: lftrain reads the keys of LlamaFactory's DeepSpeed files (ds_z0, ds_z2, ds_z3 "
       "and their offload variants) and rejects any other key rather than ignore it");
}

std::string type_text(const Rule& r) {
  static const char* names[] = {"a JSON object", "true or false", "an integer", "a number",
                                "a string"};
  return std::string(names[static_cast<int>(r.type)]) + (r.auto_ok ? " or \"auto\"" : "");
}

std::string range_text(const Rule& r) {
  const std::string lo = detail::format_number(r.min);
  if (r.max < kHuge) return "between " + lo + " and " + detail::format_number(r.max);
  return (r.positive ? "> " : ">= ") + lo;
}

bool has_type(const Rule& r, const json& v) {
  switch (r.type) {
    case Type::Object:
      return v.is_object();
    case Type::Bool:
      return v.is_boolean();
    case Type::Int:
      return integral(v);
    case Type::Number:
      return v.is_number() && std::isfinite(v.get<double>());
    case Type::String:
      return v.is_string();
  }
  return false;
}

void check_value(const Context& c, const Rule& r, const json& v) {
  if (is_auto(v)) {
    if (r.auto_ok) return;
    fail(c, "key '" + r.path + "' does not take \"auto\"",
         "write a value, e.g. \"" + leaf(r.path) + "\": " + r.example +
             " (\"auto\" is filled from the TOML only for the batch sizes, gradient_clipping, "
             "fp16.enabled, bf16.enabled and the bucket sizes)");
  }
  if (!has_type(r, v)) {
    fail(c, "key '" + r.path + "' must be " + type_text(r) + ", got " + describe(v),
         "write e.g. \"" + leaf(r.path) + "\": " + r.example);
  }
  if (r.type != Type::Int && r.type != Type::Number) return;
  const double d = v.get<double>();
  if ((r.positive ? d > r.min : d >= r.min) && d <= r.max) return;
  const std::string hint =
      r.path == "zero_optimization.stage"
          ? "ZeRO stages: 0 (no sharding), 1 (optimizer states sharded), 2 (also gradients), 3 "
            "(also parameters)"
          : "use a value " + range_text(r) + ", e.g. " + r.example;
  fail(c, "key '" + r.path + "' must be " + range_text(r) + ", got " + shown(v), hint);
}

void check_object(const Context& c, const json& object, const std::string& prefix) {
  for (const auto& item : object.items()) {
    const std::string path = prefix + item.key();
    const Rule* rule = find_rule(path);
    if (rule == nullptr) unknown_key(c, path, item.value());
    check_value(c, *rule, item.value());
    if (rule->type == Type::Object) check_object(c, item.value(), path + ".");
  }
}

// ---- values, resolved against the TOML ----

template <class T>
void read_value(const json& root, const std::string& path, T& field) {
  const json* v = find(root, path);
  if (v == nullptr || is_auto(*v)) return;
  if constexpr (std::is_same_v<T, bool>) {
    field = v->get<bool>();
  } else if constexpr (std::is_floating_point_v<T>) {
    field = v->get<double>();
  } else {
    field = static_cast<T>(as_int(*v));
  }
}

[[noreturn]] void contradiction(const Context& c, const std::string& key, const json& v,
                                const std::string& toml_side, const std::string& toml_key) {
  fail(c, "key '" + key + "' = " + shown(v) + " contradicts " + toml_side,
       "write \"auto\" for " + key + " to take the TOML's value, or make the two equal",
       c.cfg.location(toml_key));
}

std::string toml_side(const Config& cfg, const std::string& key, const Value& value) {
  return cfg.where(key) + " = " + format_value(value);
}

void match_int(const Context& c, const std::string& key, const std::string& toml_key) {
  const json* v = find(c.root, key);
  const std::int64_t want = c.cfg.integer(toml_key);
  if (v == nullptr || is_auto(*v) || as_int(*v) == want) return;
  contradiction(c, key, *v, toml_side(c.cfg, toml_key, want), toml_key);
}

// train_batch_size is DeepSpeed's global batch: micro-batch x accumulation x data-parallel ranks.
void match_batch(const Context& c, int dp_size) {
  match_int(c, "train_micro_batch_size_per_gpu", "per_device_train_batch_size");
  match_int(c, "gradient_accumulation_steps", "gradient_accumulation_steps");
  const json* v = find(c.root, "train_batch_size");
  const std::int64_t micro = c.cfg.integer("per_device_train_batch_size");
  const std::int64_t accum = c.cfg.integer("gradient_accumulation_steps");
  const std::int64_t want = micro * accum * dp_size;
  if (v == nullptr || is_auto(*v) || as_int(*v) == want) return;
  contradiction(c, "train_batch_size", *v,
                toml_side(c.cfg, "per_device_train_batch_size", micro) + " times " +
                    toml_side(c.cfg, "gradient_accumulation_steps", accum) + " times " +
                    std::to_string(dp_size) + " data-parallel ranks = " + std::to_string(want),
                c.cfg.is_set("per_device_train_batch_size") ? "per_device_train_batch_size"
                                                            : "gradient_accumulation_steps");
}

bool match_bool(const Context& c, const std::string& key, const std::string& toml_key) {
  const json* v = find(c.root, key);
  const bool want = c.cfg.boolean(toml_key);
  if (v != nullptr && !is_auto(*v) && v->get<bool>() != want) {
    contradiction(c, key, *v, toml_side(c.cfg, toml_key, want), toml_key);
  }
  return want;
}

void resolve_precision(const Context& c, DeepSpeedConfig& out) {
  const json* fp16 = find(c.root, "fp16.enabled");
  const json* bf16 = find(c.root, "bf16.enabled");
  if (fp16 != nullptr && bf16 != nullptr && *fp16 == true && *bf16 == true) {
    fail(c, "keys 'fp16.enabled' and 'bf16.enabled' are both true",
         "choose one mixed-precision mode in the TOML (bf16 = true or fp16 = true) and write "
         "\"auto\" for both here");
  }
  out.fp16 = match_bool(c, "fp16.enabled", "fp16");
  out.bf16 = match_bool(c, "bf16.enabled", "bf16");
  read_value(c.root, "fp16.loss_scale", out.loss_scale);
  read_value(c.root, "fp16.loss_scale_window", out.loss_scale_window);
  read_value(c.root, "fp16.initial_scale_power", out.initial_scale_power);
  read_value(c.root, "fp16.hysteresis", out.hysteresis);
  read_value(c.root, "fp16.min_loss_scale", out.min_loss_scale);
}

void resolve_clipping(const Context& c, DeepSpeedConfig& out) {
  out.gradient_clipping = c.cfg.real("max_grad_norm");
  const json* v = find(c.root, "gradient_clipping");
  if (v == nullptr || is_auto(*v)) return;
  const double d = v->get<double>();
  if (std::abs(d - out.gradient_clipping) > 1e-12 * std::max(1.0, std::abs(d))) {
    contradiction(c, "gradient_clipping", *v,
                  toml_side(c.cfg, "max_grad_norm", out.gradient_clipping), "max_grad_norm");
  }
}

// Whether zero_optimization.<name> offloads to the CPU; other devices and stages are errors.
bool offload(const Context& c, const std::string& name, int stage) {
  const std::string key = "zero_optimization." + name + ".device";
  const json* v = find(c.root, key);
  const std::string device = v == nullptr ? "none" : v->get<std::string>();
  if (device == "none") return false;
  if (device == "nvme") {
    fail(c, "key '" + key + "' = \"nvme\": offload to NVMe is not implemented in this build",
         "offload to \"cpu\" instead, or write \"none\"");
  }
  if (device != "cpu") {
    std::string what =
        "key '" + key + "' = " + v->dump() + " is not allowed; allowed values: \"none\", \"cpu\"";
    const std::string guess = detail::nearest(device, {"none", "cpu"});
    if (!guess.empty()) what += "; did you mean \"" + guess + "\"?";
    fail(c, what,
         "\"cpu\" keeps the " +
             std::string(name == "offload_param" ? "parameters" : "optimizer state") +
             " in host memory; \"none\" keeps it on the device");
  }
  const bool param = name == "offload_param";
  if (param ? stage != 3 : stage == 0) {
    fail(c,
         "key '" + key + "' = \"cpu\" applies to ZeRO stage " + (param ? "3" : "1, 2 or 3") +
             " only; this file has zero_optimization.stage = " + std::to_string(stage),
         param ? "set \"stage\": 3 in zero_optimization, or remove offload_param (stages 1 and 2 "
                 "offload only the optimizer state: offload_optimizer)"
               : "set \"stage\" to 1, 2 or 3 in zero_optimization, or remove offload_optimizer");
  }
  return true;
}

void resolve_zero(const Context& c, DeepSpeedConfig& out) {
  const std::string z = "zero_optimization.";
  read_value(c.root, z + "stage", out.zero_stage);
  read_value(c.root, z + "reduce_bucket_size", out.reduce_bucket_size);
  read_value(c.root, z + "allgather_bucket_size", out.allgather_bucket_size);
  read_value(c.root, z + "stage3_prefetch_bucket_size", out.stage3_prefetch_bucket_size);
  read_value(c.root, z + "overlap_comm", out.overlap_comm);
  read_value(c.root, z + "reduce_scatter", out.reduce_scatter);
  read_value(c.root, z + "contiguous_gradients", out.contiguous_gradients);
  out.offload_optimizer = offload(c, "offload_optimizer", out.zero_stage);
  out.offload_param = offload(c, "offload_param", out.zero_stage);
  bool pin_optimizer = false;
  bool pin_param = false;
  read_value(c.root, z + "offload_optimizer.pin_memory", pin_optimizer);
  read_value(c.root, z + "offload_param.pin_memory", pin_param);
  out.pin_memory = (out.offload_optimizer && pin_optimizer) || (out.offload_param && pin_param);
}

// ---- notes ----

// Why the key at `path` has no effect in this run, or "" when it has one.
std::string no_effect(const DeepSpeedConfig& out, const std::string& path) {
  auto it = inert_keys().find(path);
  if (it != inert_keys().end()) return it->second;
  if (path.rfind("fp16.", 0) == 0 && path != "fp16.enabled") {
    if (!out.fp16) return "this run does not train in fp16 (the TOML's fp16 is false)";
    if (out.loss_scale != 0 && path != "fp16.loss_scale") {
      return "fp16.loss_scale = " + detail::format_number(out.loss_scale) +
             " is a static scale; the dynamic-scaling keys apply only with loss_scale 0";
    }
  }
  if (path == "zero_optimization.stage3_prefetch_bucket_size" && out.zero_stage != 3) {
    return "it applies to ZeRO stage 3 only (zero_optimization.stage = " +
           std::to_string(out.zero_stage) + ")";
  }
  if (path == "zero_optimization.offload_optimizer.pin_memory" && !out.offload_optimizer) {
    return "the optimizer state is not offloaded (offload_optimizer.device is not \"cpu\")";
  }
  if (path == "zero_optimization.offload_param.pin_memory" && !out.offload_param) {
    return "the parameters are not offloaded (offload_param.device is not \"cpu\")";
  }
  return "";
}

void collect_notes(const json& object, const std::string& prefix, DeepSpeedConfig& out) {
  for (const auto& item : object.items()) {
    const std::string path = prefix + item.key();
    if (path == "fp16" && !out.fp16 && item.value().is_object() && item.value().size() > 1) {
      out.notes.push_back("deepspeed " + out.path +
                          ": the fp16 loss-scaling keys have no effect in lftrain: this run does "
                          "not train in fp16 (the TOML's fp16 is false)");
      continue;
    }
    if (item.value().is_object()) {
      collect_notes(item.value(), path + ".", out);
      continue;
    }
    // "auto" bucket sizes ask lftrain to choose, which it does (one layer per call).
    if (item.value() == "auto" && path.find("bucket_size") != std::string::npos) continue;
    const std::string why = no_effect(out, path);
    if (why.empty()) continue;
    out.notes.push_back("deepspeed " + out.path + ": " + path + " = " + shown(item.value()) +
                        " has no effect in lftrain: " + why);
  }
}

}  // namespace

DeepSpeedConfig read_deepspeed_config(const Config& cfg, int dp_size) {
  if (dp_size < 1) throw std::invalid_argument("read_deepspeed_config: dp_size must be >= 1");
  DeepSpeedConfig out;
  out.path = cfg.string("deepspeed");
  Context c{cfg, out.path, parse(out.path, read_text(cfg, out.path))};
  if (!c.root.is_object()) {
    fail(c, "the DeepSpeed config must be a JSON object, got " + describe(c.root),
         "write it as DeepSpeed does: { \"zero_optimization\": { \"stage\": 2 }, ... }");
  }
  for (const auto& item : c.root.items()) reject_unsupported(c, item.key(), item.value());
  check_object(c, c.root, "");
  match_batch(c, dp_size);
  resolve_precision(c, out);
  resolve_clipping(c, out);
  resolve_zero(c, out);
  collect_notes(c.root, "", out);
  return out;
}

}  // namespace lft::config
