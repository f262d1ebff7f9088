#include "lft/engine/megatron_plan.h"

#include "lft/engine/tensor_parallel.h"

namespace lft::engine {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& hint) {
  throw config::ConfigError("config error: " + what + "\n  " + hint);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string n(std::int64_t v) { return std::to_string(v); }

void check_tensor_parallel(const config::Config& cfg, const model::ModelConfig& m, int tp) {
  const std::string where = cfg.is_set("mesh.tp") ? cfg.where("mesh.tp") : "[mesh] tp";
  if (m.num_attention_heads % tp != 0)
    fail(where + " = " + n(tp) + ": the model's " + n(m.num_attention_heads) +
             " attention heads do not divide over " + n(tp) + " tensor-parallel ranks",
         "choose a tp that divides num_attention_heads");
  const std::int64_t kv = m.num_key_value_heads;
  if (kv % tp != 0 && tp % kv != 0)
    fail(where + " = " + n(tp) + ": the model's " + n(kv) + " key/value heads neither divide over " + n(tp) +
             " ranks nor replicate evenly (tp must divide num_key_value_heads or be a multiple of it)",
         "choose tp among the divisors or multiples of " + n(kv));
  if (tp > 1 && (m.attention_out_bias || m.mlp_bias))
    fail(where + " = " + n(tp) + ": the model has " + (m.mlp_bias ? "MLP" : "o_proj") +
             " biases, which a row-parallel layer would add tp times; this build splits only "
             "bias-free o_proj and down_proj",
         "train this model with tp = 1");
  if (cfg.boolean("dist_config.sequence_parallel") && cfg.integer("cutoff_len") % tp != 0)
    fail(cfg.where("dist_config.sequence_parallel") + ": sequence parallel splits each sequence of cutoff_len = " +
             n(cfg.integer("cutoff_len")) + " tokens over tp = " + n(tp) + " ranks, which does not divide it",
         "make cutoff_len a multiple of tp");
}

std::vector<std::pair<std::int64_t, std::int64_t>> split_layers(const config::Config& cfg, std::int64_t layers,
                                                                int stages) {
  const std::string first_key = "dist_config.decoder_first_pipeline_num_layers";
  const std::string last_key = "dist_config.decoder_last_pipeline_num_layers";
  std::vector<std::int64_t> count(static_cast<std::size_t>(stages), 0);
  std::int64_t left = layers;
  int lo = 0, hi = stages;  // the stages still to balance: [lo, hi)
  if (cfg.is_set(first_key)) {
    if (stages < 2) fail(cfg.where(first_key) + ": needs at least 2 pipeline stages", "remove it, or set [mesh] pp");
    count[0] = cfg.integer(first_key);
    left -= count[0];
    lo = 1;
  }
  if (cfg.is_set(last_key)) {
    if (stages < 2) fail(cfg.where(last_key) + ": needs at least 2 pipeline stages", "remove it, or set [mesh] pp");
    count[static_cast<std::size_t>(stages - 1)] = cfg.integer(last_key);
    left -= count[static_cast<std::size_t>(stages - 1)];
    hi = stages - 1;
  }
  const int middle = hi - lo;
  if (left < middle || (middle == 0 && left != 0))
    fail("the " + n(layers) + " decoder layers cannot fill " + n(stages) + " pipeline stages" +
             (lo > 0 || hi < stages ? " after the first/last stage counts given in [dist_config]" : ""),
         "every (virtual) stage needs at least one layer: lower pp or virtual_pipeline_model_parallel_size, "
         "or change decoder_first/last_pipeline_num_layers");
  for (int i = lo; i < hi; ++i) {
    // Balanced: the earlier stages take the remainder, one layer each.
    count[static_cast<std::size_t>(i)] = left / middle + ((i - lo) < left % middle ? 1 : 0);
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::int64_t begin = 0;
  for (std::int64_t c : count) {
    out.emplace_back(begin, begin + c);
    begin += c;
  }
  return out;
}

}  // namespace

MegatronPlan make_megatron_plan(const config::Config& cfg, const model::ModelConfig& model, const MeshShape& mesh) {
  MegatronPlan p;
  p.tp = mesh[MeshDim::TP];
  p.pp = mesh[MeshDim::PP];
  p.virtual_stages = static_cast<int>(cfg.integer("dist_config.virtual_pipeline_model_parallel_size"));
  p.sequence_parallel = cfg.boolean("dist_config.sequence_parallel") && p.tp > 1;
  p.distributed_optimizer = cfg.boolean("dist_config.use_distributed_optimizer");
  p.schedule = pipeline_schedule_kind(cfg.string("dist_config.pipeline_schedule"));
  p.micro_batches = cfg.integer("gradient_accumulation_steps");
  check_tensor_parallel(cfg, model, p.tp);
  if (p.virtual_stages > 1 && p.schedule != PipelineScheduleKind::Interleaved1F1B)
    fail(cfg.where("dist_config.virtual_pipeline_model_parallel_size") + " = " + n(p.virtual_stages) +
             ": virtual stages need pipeline_schedule = \"interleaved_1f1b\"",
         "set dist_config.pipeline_schedule = \"interleaved_1f1b\", or remove the key");
  if (p.pp > 1) {
    const std::string problem =
        pipeline_schedule_problem(p.schedule, p.pp, p.micro_batches, p.virtual_stages, model.num_hidden_layers);
    if (!problem.empty())
      fail(cfg.where("dist_config.pipeline_schedule") + " with [mesh] pp = " + n(p.pp) + ": " + problem,
           "raise gradient_accumulation_steps, or change pp or the schedule");
  }
  if (p.virtual_stages > 1 && model.num_hidden_layers % (p.pp * p.virtual_stages) != 0)
    fail(cfg.where("dist_config.virtual_pipeline_model_parallel_size") + " = " + n(p.virtual_stages) + ": the " +
             n(model.num_hidden_layers) + " decoder layers do not divide into pp x virtual stages = " +
             n(p.pp) + " x " + n(p.virtual_stages) + " = " + n(p.pp * p.virtual_stages) + " equal model chunks",
         "choose virtual_pipeline_model_parallel_size so that pp x it divides num_hidden_layers");
  p.stage_layers = split_layers(cfg, model.num_hidden_layers, p.pp * p.virtual_stages);
  return p;
}

std::int64_t layer_of_parameter(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  return std::stoll(name.substr(prefix.size()));
}

TpSlice tp_slice(const std::string& name, const model::ModelConfig& m, int tp, int r) {
  TpSlice s;
  if (tp == 1) return s;
  const std::int64_t hd = m.head_dim(), heads = m.num_attention_heads / tp, kv = m.num_key_value_heads;
  auto rows = [&](int dim, SplitRange range) {
    s.dim = dim;
    s.begin = range.begin;
    s.count = range.count;
  };
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
    rows(0, split_range(m.vocab_size, tp, r));
  } else if (ends_with(name, "q_proj.weight") || ends_with(name, "q_proj.bias")) {
    rows(0, {r * heads * hd, heads * hd});
  } else if (ends_with(name, "k_proj.weight") || ends_with(name, "k_proj.bias") ||
             ends_with(name, "v_proj.weight") || ends_with(name, "v_proj.bias")) {
    if (kv % tp == 0) {
      rows(0, {r * (kv / tp) * hd, (kv / tp) * hd});
    } else {
      const int share = tp / static_cast<int>(kv);  // ranks serving one kv head
      rows(0, {(r / share) * hd, hd});
      s.holders = share;
      s.holder = r % share;
    }
  } else if (ends_with(name, "o_proj.weight")) {
    rows(1, {r * heads * hd, heads * hd});
  } else if (ends_with(name, "gate_proj.weight") || ends_with(name, "up_proj.weight") ||
             ends_with(name, "gate_proj.bias") || ends_with(name, "up_proj.bias")) {
    rows(0, split_range(m.intermediate_size, tp, r));
  } else if (ends_with(name, "down_proj.weight")) {
    rows(1, split_range(m.intermediate_size, tp, r));
  } else {
    s.holders = tp;
    s.holder = r;
  }
  return s;
}

}  // namespace lft::engine
