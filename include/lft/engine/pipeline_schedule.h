// Pipeline-parallel schedules: the order in which each pipeline stage runs the forwards and
// backwards of one optimizer step, as Megatron-LM runs them.
//
// `pp` stages (ranks along the pipeline), `m` micro-batches per optimizer step (the gradient
// accumulation steps), `v` model chunks per stage (v > 1 only for the interleaved schedule). Chunk
// c of stage s is global virtual stage g = c * pp + s, so stage s holds layer blocks s, s + pp,
// s + 2 pp, ...; global virtual stage 0 holds the embedding, the last one (c = v-1, s = pp-1) the
// loss. A forward of (micro-batch, g) needs the forward of (micro-batch, g-1); a backward of
// (micro-batch, g) needs the backward of (micro-batch, g+1) and its own forward.
//   gpipe             every forward (micro-batch order), then every backward (micro-batch order):
//                     a stage holds the activations of all m micro-batches.
//   1f1b              PipeDream-flush, Megatron's forward_backward_pipelining_without_interleaving:
//                     pp - s - 1 warm-up forwards, then forward/backward pairs, then the cool-down
//                     backwards; stage s holds at most min(pp - s, m) micro-batches. Same bubble
//                     as gpipe: idle fraction (pp - 1) / (m + pp - 1).
//   interleaved_1f1b  Megatron's forward_backward_pipelining_with_interleaving: each stage walks
//                     its chunks in groups of pp micro-batches (forward chunk 0 for micro-batches
//                     0..pp-1, then chunk 1 for the same ones, ..., then the next pp
//                     micro-batches), backwards in the mirrored chunk order; the warm-up is
//                     2 (pp - s - 1) + (v - 1) pp micro-steps (all m v of them when m == pp).
//                     The bubble shrinks v-fold: idle fraction (pp - 1) / (v m + pp - 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lft::engine {

enum class PipelineScheduleKind { GPipe, OneFOneB, Interleaved1F1B };

// "gpipe", "1f1b", "interleaved_1f1b"; throws std::invalid_argument naming the accepted values.
PipelineScheduleKind pipeline_schedule_kind(const std::string& name);
const char* pipeline_schedule_name(PipelineScheduleKind kind);

struct PipelineAction {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  std::int64_t micro_batch = 0;  // 0..m-1
  int chunk = 0;                 // local model chunk 0..v-1
  bool operator==(const PipelineAction& other) const;
  bool operator!=(const PipelineAction& other) const { return !(*this == other); }
};

// "F3" / "B3" for chunk 0, "F3c1" / "B3c1" for chunk 1 (logs and test failures).
std::string pipeline_action_str(const PipelineAction& action);
// The actions' strings joined by spaces.
std::string pipeline_actions_str(const std::vector<PipelineAction>& actions);

// Why (kind, pp, m, v, layers) cannot run, or "" when it can. Rules: pp, m, v >= 1; v > 1 only
// with interleaved_1f1b; 1f1b and interleaved_1f1b need m >= pp; interleaved_1f1b needs pp >= 2
// and m % pp == 0 (Megatron's requirement); every chunk needs a layer (layers >= pp * v; uneven
// stages are fine). The messages name the numbers.
std::string pipeline_schedule_problem(PipelineScheduleKind kind, int pp, std::int64_t m, int v,
                                      std::int64_t layers);

// The ordered actions of `stage` (0..pp-1) for one optimizer step. Throws std::invalid_argument
// for a stage out of range or a combination pipeline_schedule_problem rejects (layers aside).
std::vector<PipelineAction> pipeline_actions(PipelineScheduleKind kind, int pp, int stage,
                                             std::int64_t m, int v);

struct ScheduleTiming {
  double makespan = 0;       // time until every stage is done
  double idle_fraction = 0;  // idle stage-time / (pp * makespan)
  // Per stage: the most (micro-batch, chunk) forwards at once whose backward has not run yet.
  std::vector<int> peak_live;
};

// Runs pipeline_actions of every stage with free communication: an action starts when its stage
// is done with the previous one and its dependencies (see above) are done. `forward_time` and
// `backward_time` are per chunk per micro-batch: to compare the interleaved schedule with the
// others at equal work per stage, pass a whole stage's times divided by v. Throws std::logic_error
// if the schedule deadlocks or is incomplete.
ScheduleTiming simulate_pipeline(PipelineScheduleKind kind, int pp, std::int64_t m, int v,
                                 double forward_time, double backward_time);

// The same for any per-stage action lists (`stages[s]` for stage s, so pp = stages.size()). Throws
// std::logic_error unless every (micro-batch, chunk) of every stage runs forward exactly once and
// backward exactly once, the backward after the forward, and the stages can run to the end.
ScheduleTiming simulate_pipeline_actions(const std::vector<std::vector<PipelineAction>>& stages,
                                         std::int64_t m, int v, double forward_time,
                                         double backward_time);

// Why the stages' point-to-point messages of one step would be matched wrongly where messages are
// matched by posting order instead of by tag (NCCL: a pair's sends and receives pair off in the
// order each side posts them), or "" when for every ordered pair of stages the sender posts its
// messages in the order the receiver posts their receives. Each action posts as the megatron
// engine does (megatron_run.cpp): a forward of virtual stage g receives g's activation from the
// previous stage (g > 0) and sends g + 1's to the next (g < last); a backward receives g's output
// gradient from the next stage (g < last) and sends g - 1's to the previous (g > 0). With pp = 2
// the previous and the next stage are the same rank, so activations and gradients of the same
// shape share one direction. `stages[s]`: stage s's actions (pp = stages.size()).
std::string pipeline_message_order_problem(const std::vector<std::vector<PipelineAction>>& stages, int v);
// The same for a schedule's step with backward (pipeline_actions) and for a forward-only pass
// (evaluation: every micro-batch through every chunk, in that order).
std::string pipeline_message_order_problem(PipelineScheduleKind kind, int pp, std::int64_t m, int v);

}  // namespace lft::engine
