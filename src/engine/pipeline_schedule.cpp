#include "lft/engine/pipeline_schedule.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

namespace lft::engine {

namespace {

using Kind = PipelineAction::Kind;

std::string quoted(PipelineScheduleKind kind) {
  return std::string("pipeline_schedule = \"") + pipeline_schedule_name(kind) + "\"";
}

// pipeline_schedule_problem without the layer count.
std::string shape_problem(PipelineScheduleKind kind, int pp, std::int64_t m, int v) {
  const std::string who = quoted(kind);
  if (pp < 1) return who + " needs pp >= 1 pipeline stages, got " + std::to_string(pp);
  if (m < 1) {
    return who + " needs at least 1 micro-batch per step (gradient_accumulation_steps), got " +
           std::to_string(m);
  }
  if (v < 1) return who + " needs v >= 1 model chunks per stage, got " + std::to_string(v);
  const bool interleaved = kind == PipelineScheduleKind::Interleaved1F1B;
  if (v > 1 && !interleaved) {
    return who + " runs one model chunk per stage, got v = " + std::to_string(v) +
           " (only \"interleaved_1f1b\" interleaves model chunks)";
  }
  if (interleaved && pp < 2) {
    return who + " needs at least pp = 2 pipeline stages, got pp = " + std::to_string(pp);
  }
  if (kind != PipelineScheduleKind::GPipe && m < pp) {
    return who + " needs at least pp = " + std::to_string(pp) +
           " micro-batches per step (gradient_accumulation_steps), got " + std::to_string(m);
  }
  if (interleaved && m % pp != 0) {
    return who +
           " needs the micro-batches per step (gradient_accumulation_steps) to be a multiple" +
           " of pp = " + std::to_string(pp) + ", got " + std::to_string(m);
  }
  return "";
}

// A stage's list in the 1F1B shape: `warmup` forwards, then forward/backward pairs, then the
// remaining backwards; `step(k, forward)` is the k-th forward or backward.
std::vector<PipelineAction> one_f_one_b(
    std::int64_t total, std::int64_t warmup,
    const std::function<PipelineAction(std::int64_t, bool)>& step) {
  std::vector<PipelineAction> actions;
  actions.reserve(static_cast<std::size_t>(2 * total));
  for (std::int64_t k = 0; k < warmup; ++k) actions.push_back(step(k, true));
  for (std::int64_t k = 0; k < total - warmup; ++k) {
    actions.push_back(step(warmup + k, true));
    actions.push_back(step(k, false));
  }
  for (std::int64_t k = total - warmup; k < total; ++k) actions.push_back(step(k, false));
  return actions;
}

// Megatron's interleaved order: micro-steps go in groups of pp * v, each group running pp
// micro-batches through chunk 0, then the same pp through chunk 1, ...; backwards through the
// chunks in reverse.
PipelineAction interleaved_step(std::int64_t k, int pp, int v, bool forward) {
  const int chunk = static_cast<int>((k / pp) % v);
  const std::int64_t micro_batch = (k / (static_cast<std::int64_t>(pp) * v)) * pp + k % pp;
  return {forward ? Kind::Forward : Kind::Backward, micro_batch, forward ? chunk : v - 1 - chunk};
}

std::size_t index(std::int64_t micro_batch, int chunk, int v) {
  return static_cast<std::size_t>(micro_batch * v + chunk);
}

// Checks that every (micro-batch, chunk) of every stage runs forward once, then backward once;
// returns each stage's peak count of forwards awaiting their backward.
std::vector<int> check_complete(const std::vector<std::vector<PipelineAction>>& stages,
                                std::int64_t m, int v) {
  std::vector<int> peak;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::string where = "pipeline schedule, stage " + std::to_string(s) + ": ";
    std::vector<char> forward(static_cast<std::size_t>(m * v), 0), backward(forward);
    int live = 0, most = 0;
    for (const PipelineAction& a : stages[s]) {
      const std::string what = pipeline_action_str(a);
      if (a.micro_batch < 0 || a.micro_batch >= m || a.chunk < 0 || a.chunk >= v) {
        throw std::logic_error(where + what + " is out of range (m = " + std::to_string(m) +
                               ", v = " + std::to_string(v) + ")");
      }
      const std::size_t i = index(a.micro_batch, a.chunk, v);
      if (a.kind == Kind::Forward) {
        if (forward[i]) throw std::logic_error(where + what + " runs twice");
        forward[i] = 1;
        most = std::max(most, ++live);
      } else {
        if (backward[i]) throw std::logic_error(where + what + " runs twice");
        if (!forward[i]) throw std::logic_error(where + what + " runs before its forward");
        backward[i] = 1;
        --live;
      }
    }
    for (std::size_t i = 0; i < forward.size(); ++i) {
      if (!backward[i]) {
        const PipelineAction a{Kind::Backward, static_cast<std::int64_t>(i) / v,
                               static_cast<int>(static_cast<std::int64_t>(i) % v)};
        throw std::logic_error(where + pipeline_action_str(a) + " never runs");
      }
    }
    peak.push_back(most);
  }
  return peak;
}

}  // namespace

PipelineScheduleKind pipeline_schedule_kind(const std::string& name) {
  for (auto kind : {PipelineScheduleKind::GPipe, PipelineScheduleKind::OneFOneB,
                    PipelineScheduleKind::Interleaved1F1B}) {
    if (name == pipeline_schedule_name(kind)) return kind;
  }
  throw std::invalid_argument("unknown pipeline_schedule \"" + name +
                              "\"; expected \"gpipe\", \"1f1b\" or \"interleaved_1f1b\"");
}

const char* pipeline_schedule_name(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::GPipe:
      return "gpipe";
    case PipelineScheduleKind::OneFOneB:
      return "1f1b";
    case PipelineScheduleKind::Interleaved1F1B:
      return "interleaved_1f1b";
  }
  return "?";
}

bool PipelineAction::operator==(const PipelineAction& other) const {
  return kind == other.kind && micro_batch == other.micro_batch && chunk == other.chunk;
}

std::string pipeline_action_str(const PipelineAction& action) {
  std::string s = (action.kind == Kind::Forward ? "F" : "B") + std::to_string(action.micro_batch);
  if (action.chunk != 0) s += "c" + std::to_string(action.chunk);
  return s;
}

std::string pipeline_actions_str(const std::vector<PipelineAction>& actions) {
  std::string s;
  for (const PipelineAction& a : actions) s += (s.empty() ? "" : " ") + pipeline_action_str(a);
  return s;
}

std::string pipeline_schedule_problem(PipelineScheduleKind kind, int pp, std::int64_t m, int v,
                                      std::int64_t layers) {
  std::string problem = shape_problem(kind, pp, m, v);
  if (problem.empty() && layers < static_cast<std::int64_t>(pp) * v) {
    problem = quoted(kind) + " with pp = " + std::to_string(pp) +
              " stages of v = " + std::to_string(v) + " model chunks needs at least " +
              std::to_string(pp * v) + " layers (one per chunk), got " + std::to_string(layers);
  }
  return problem;
}

std::vector<PipelineAction> pipeline_actions(PipelineScheduleKind kind, int pp, int stage,
                                             std::int64_t m, int v) {
  if (const std::string problem = shape_problem(kind, pp, m, v); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  if (stage < 0 || stage >= pp) {
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + " is not in [0, " +
                                std::to_string(pp) + ")");
  }
  auto plain = [](std::int64_t k, bool forward) {
    return PipelineAction{forward ? Kind::Forward : Kind::Backward, k, 0};
  };
  switch (kind) {
    case PipelineScheduleKind::GPipe:
      return one_f_one_b(m, m, plain);
    case PipelineScheduleKind::OneFOneB:
      return one_f_one_b(m, std::min<std::int64_t>(pp - stage - 1, m), plain);
    case PipelineScheduleKind::Interleaved1F1B: {
      const std::int64_t total = m * v;
      // With m == pp no micro-batch's backward can start before the last forward, so Megatron
      // runs every forward first.
      const std::int64_t warmup =
          m == pp ? total
                  : std::min<std::int64_t>(
                        2 * (pp - stage - 1) + static_cast<std::int64_t>(v - 1) * pp, total);
      return one_f_one_b(total, warmup, [&](std::int64_t k, bool forward) {
        return interleaved_step(k, pp, v, forward);
      });
    }
  }
  return {};
}

ScheduleTiming simulate_pipeline(PipelineScheduleKind kind, int pp, std::int64_t m, int v,
                                 double forward_time, double backward_time) {
  std::vector<std::vector<PipelineAction>> stages;
  for (int s = 0; s < pp; ++s) stages.push_back(pipeline_actions(kind, pp, s, m, v));
  return simulate_pipeline_actions(stages, m, v, forward_time, backward_time);
}

ScheduleTiming simulate_pipeline_actions(const std::vector<std::vector<PipelineAction>>& stages,
                                         std::int64_t m, int v, double forward_time,
                                         double backward_time) {
  if (stages.empty() || m < 1 || v < 1) {
    throw std::invalid_argument(
        "simulate_pipeline_actions needs at least one stage, m >= 1 and v >= 1");
  }
  ScheduleTiming timing;
  timing.peak_live = check_complete(stages, m, v);
  const int pp = static_cast<int>(stages.size());
  const int last = pp * v - 1;  // global virtual stage of the loss
  // End times per [global virtual stage][micro-batch], negative until done.
  std::vector<std::vector<double>> forward_end(
      static_cast<std::size_t>(pp * v), std::vector<double>(static_cast<std::size_t>(m), -1));
  std::vector<std::vector<double>> backward_end(forward_end);
  std::vector<double> clock(static_cast<std::size_t>(pp), 0);
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  double busy = 0;
  // Any order that respects the dependencies gives the same times: run every stage as far as
  // its inputs allow, until nothing moves.
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < pp; ++s) {
      const auto& actions = stages[static_cast<std::size_t>(s)];
      std::size_t& i = next[static_cast<std::size_t>(s)];
      double& now = clock[static_cast<std::size_t>(s)];
      for (; i < actions.size(); ++i) {
        const PipelineAction& a = actions[i];
        const int g = a.chunk * pp + s;
        const auto mb = static_cast<std::size_t>(a.micro_batch);
        const bool forward = a.kind == Kind::Forward;
        double ready = 0;  // the input's end time; its own forward is earlier in this list
        if (forward && g > 0) ready = forward_end[static_cast<std::size_t>(g - 1)][mb];
        if (!forward && g < last) ready = backward_end[static_cast<std::size_t>(g + 1)][mb];
        if (ready < 0) break;
        const double length = forward ? forward_time : backward_time;
        now = std::max(now, ready) + length;
        busy += length;
        (forward ? forward_end : backward_end)[static_cast<std::size_t>(g)][mb] = now;
        moved = true;
      }
    }
  }
  std::string stuck;
  for (int s = 0; s < pp; ++s) {
    const auto& actions = stages[static_cast<std::size_t>(s)];
    const std::size_t i = next[static_cast<std::size_t>(s)];
    if (i < actions.size()) {
      stuck += " stage " + std::to_string(s) + " at " + pipeline_action_str(actions[i]) + ";";
    }
  }
  if (!stuck.empty()) throw std::logic_error("pipeline schedule deadlocks:" + stuck);
  timing.makespan = *std::max_element(clock.begin(), clock.end());
  if (timing.makespan > 0) timing.idle_fraction = 1 - busy / (pp * timing.makespan);
  return timing;
}

namespace {

// One point-to-point message of a step: what it carries, for which virtual stage (the receiver's),
// for which micro-batch; the megatron engine's tag says the same.
struct PipelineMessage {
  bool gradient = false;
  int virtual_stage = 0;
  std::int64_t micro_batch = 0;
  bool operator==(const PipelineMessage& o) const {
    return gradient == o.gradient && virtual_stage == o.virtual_stage && micro_batch == o.micro_batch;
  }
};

std::string message_str(const PipelineMessage& msg) {
  return std::string(msg.gradient ? "gradient" : "activation") + " of virtual stage " +
         std::to_string(msg.virtual_stage) + ", micro-batch " + std::to_string(msg.micro_batch);
}

}  // namespace

std::string pipeline_message_order_problem(const std::vector<std::vector<PipelineAction>>& stages, int v) {
  const int pp = static_cast<int>(stages.size());
  if (pp < 2) return "";
  const int last = pp * v - 1;
  // sent[s][t]: what stage s sends to stage t, in posting order; received[t][s]: what t receives from s.
  using Queues = std::vector<std::vector<std::vector<PipelineMessage>>>;
  Queues sent(pp, std::vector<std::vector<PipelineMessage>>(pp)), received = sent;
  for (int s = 0; s < pp; ++s) {
    const int prev = (s + pp - 1) % pp, next = (s + 1) % pp;
    for (const PipelineAction& a : stages[static_cast<std::size_t>(s)]) {
      const int g = a.chunk * pp + s;
      if (a.kind == Kind::Forward) {
        if (g > 0) received[s][prev].push_back({false, g, a.micro_batch});
        if (g < last) sent[s][next].push_back({false, g + 1, a.micro_batch});
      } else {
        if (g < last) received[s][next].push_back({true, g, a.micro_batch});
        if (g > 0) sent[s][prev].push_back({true, g - 1, a.micro_batch});
      }
    }
  }
  for (int s = 0; s < pp; ++s) {
    for (int t = 0; t < pp; ++t) {
      const auto& out = sent[s][t];
      const auto& in = received[t][s];
      for (std::size_t i = 0; i < std::max(out.size(), in.size()); ++i) {
        if (i < out.size() && i < in.size() && out[i] == in[i]) continue;
        const std::string what = "message " + std::to_string(i + 1) + " from stage " + std::to_string(s) +
                                 " to stage " + std::to_string(t) + ": ";
        if (i >= out.size()) return what + "stage " + std::to_string(t) + " receives the " + message_str(in[i]) + ", never sent";
        if (i >= in.size()) return what + "stage " + std::to_string(s) + " sends the " + message_str(out[i]) + ", never received";
        return what + "stage " + std::to_string(s) + " sends the " + message_str(out[i]) + " where stage " +
               std::to_string(t) + " receives the " + message_str(in[i]);
      }
    }
  }
  return "";
}

std::string pipeline_message_order_problem(PipelineScheduleKind kind, int pp, std::int64_t m, int v) {
  std::vector<std::vector<PipelineAction>> train, forward_only;
  for (int s = 0; s < pp; ++s) {
    train.push_back(pipeline_actions(kind, pp, s, m, v));
    forward_only.emplace_back();
    for (std::int64_t mb = 0; mb < m; ++mb)
      for (int c = 0; c < v; ++c) forward_only.back().push_back({Kind::Forward, mb, c});
  }
  const std::string problem = pipeline_message_order_problem(train, v);
  if (!problem.empty()) return "a training step's " + problem;
  const std::string eval = pipeline_message_order_problem(forward_only, v);
  return eval.empty() ? "" : "a forward-only pass's " + eval;
}

}  // namespace lft::engine
