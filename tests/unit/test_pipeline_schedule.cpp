// Pipeline schedules: the exact per-stage orders (written out by hand from Megatron-LM's
// formulas), completeness over a sweep, the simulated bubble against theory, peak live
// activations, the configuration rules and the simulation's own checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/engine/pipeline_schedule.h"
#include "test_util.h"

namespace lft::engine {
namespace {

using Schedule = PipelineScheduleKind;
constexpr Schedule kAll[] = {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved1F1B};

std::string order(Schedule kind, int pp, int stage, std::int64_t m, int v = 1) {
  return pipeline_actions_str(pipeline_actions(kind, pp, stage, m, v));
}

PipelineAction F(std::int64_t mb, int chunk = 0) {
  return {PipelineAction::Kind::Forward, mb, chunk};
}
PipelineAction B(std::int64_t mb, int chunk = 0) {
  return {PipelineAction::Kind::Backward, mb, chunk};
}

TEST(PipelineSchedule, OneFOneBOrder) {
  // pp = 4, m = 8: stage s warms up with pp - s - 1 forwards.
  EXPECT_EQ(order(Schedule::OneFOneB, 4, 0, 8), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(order(Schedule::OneFOneB, 4, 1, 8), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(order(Schedule::OneFOneB, 4, 3, 8), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  const std::vector<PipelineAction> last = pipeline_actions(Schedule::OneFOneB, 4, 3, 8, 1);
  ASSERT_EQ(last.size(), 16u);
  EXPECT_EQ(last[0], F(0));
  EXPECT_EQ(last[1], B(0));
  EXPECT_NE(last[1], F(0));
  EXPECT_NE(last[1], B(0, 1));
  // A single stage is plain gradient accumulation.
  EXPECT_EQ(order(Schedule::OneFOneB, 1, 0, 3), "F0 B0 F1 B1 F2 B2");
}

TEST(PipelineSchedule, GPipeOrder) {
  // Every forward, then every backward, both in micro-batch order, on every stage.
  EXPECT_EQ(order(Schedule::GPipe, 2, 0, 3), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(order(Schedule::GPipe, 2, 1, 3), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(order(Schedule::GPipe, 4, 2, 1), "F0 B0");  // gpipe takes m < pp
}

TEST(PipelineSchedule, InterleavedOrder) {
  // pp = 2, v = 2, m = 4, "F<micro-batch>c<chunk>" (no suffix: chunk 0). Micro-step k runs chunk
  // (k / 2) % 2 forward, 1 - (k / 2) % 2 backward, of micro-batch (k / 4) * 2 + k % 2:
  //   k    0     1     2     3     4     5     6     7
  //   F    F0    F1    F0c1  F1c1  F2    F3    F2c1  F3c1
  //   B    B0c1  B1c1  B0    B1    B2c1  B3c1  B2    B3
  // Warm-up: (pp - s - 1) * 2 + (v - 1) * pp = 4 on stage 0, 2 on stage 1.
  EXPECT_EQ(order(Schedule::Interleaved1F1B, 2, 0, 4, 2),
            "F0 F1 F0c1 F1c1 F2 B0c1 F3 B1c1 F2c1 B0 F3c1 B1 B2c1 B3c1 B2 B3");
  EXPECT_EQ(order(Schedule::Interleaved1F1B, 2, 1, 4, 2),
            "F0 F1 F0c1 B0c1 F1c1 B1c1 F2 B0 F3 B1 F2c1 B2c1 F3c1 B3c1 B2 B3");
  const std::vector<PipelineAction> stage0 =
      pipeline_actions(Schedule::Interleaved1F1B, 2, 0, 4, 2);
  EXPECT_EQ(stage0[2], F(0, 1));
  EXPECT_EQ(stage0[5], B(0, 1));
  // m == pp: Megatron runs every forward first.
  EXPECT_EQ(order(Schedule::Interleaved1F1B, 2, 1, 2, 2), "F0 F1 F0c1 F1c1 B0c1 B1c1 B0 B1");
  EXPECT_EQ(order(Schedule::Interleaved1F1B, 2, 0, 2, 2), "F0 F1 F0c1 F1c1 B0c1 B1c1 B0 B1");
}

// Every valid (kind, pp, m, v) with pp 1..4, m 1..12, v 1..3.
struct Case {
  Schedule kind;
  int pp;
  std::int64_t m;
  int v;
};
std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (Schedule kind : kAll) {
    for (int pp = 1; pp <= 4; ++pp) {
      for (std::int64_t m = 1; m <= 12; ++m) {
        for (int v = 1; v <= 3; ++v) {
          if (pipeline_schedule_problem(kind, pp, m, v, pp * v).empty())
            cases.push_back({kind, pp, m, v});
        }
      }
    }
  }
  return cases;
}

TEST(PipelineSchedule, SweepRunsEveryForwardAndBackwardOnce) {
  int counted[3] = {0, 0, 0};
  for (const Case& c : sweep()) {
    SCOPED_TRACE(std::string(pipeline_schedule_name(c.kind)) + " pp=" + std::to_string(c.pp) +
                 " m=" + std::to_string(c.m) + " v=" + std::to_string(c.v));
    ++counted[static_cast<int>(c.kind)];
    for (int s = 0; s < c.pp; ++s) {
      const std::vector<PipelineAction> actions = pipeline_actions(c.kind, c.pp, s, c.m, c.v);
      ASSERT_EQ(actions.size(), static_cast<std::size_t>(2 * c.m * c.v));
      for (std::int64_t mb = 0; mb < c.m; ++mb) {
        for (int chunk = 0; chunk < c.v; ++chunk) {
          const auto f = std::find(actions.begin(), actions.end(), F(mb, chunk));
          const auto b = std::find(actions.begin(), actions.end(), B(mb, chunk));
          ASSERT_EQ(std::count(actions.begin(), actions.end(), F(mb, chunk)), 1);
          ASSERT_EQ(std::count(actions.begin(), actions.end(), B(mb, chunk)), 1);
          EXPECT_LT(f, b) << pipeline_actions_str(actions);
        }
      }
    }
    EXPECT_NO_THROW(simulate_pipeline(c.kind, c.pp, c.m, c.v, 1.0, 2.0));
  }
  // The sweep really covers each schedule, the interleaved one with v > 1.
  EXPECT_EQ(counted[0], 4 * 12);
  EXPECT_EQ(counted[1], 12 + 11 + 10 + 9);
  EXPECT_EQ(counted[2], 3 * (6 + 4 + 3));  // pp 2, 3, 4: m multiples of pp, any v
}

TEST(PipelineSchedule, OneFOneBAndGPipeIdleFractionIsTheBubble) {
  for (Schedule kind : {Schedule::GPipe, Schedule::OneFOneB}) {
    for (int pp : {1, 2, 3, 4, 8}) {
      for (std::int64_t m : {pp, pp + 1, 2 * pp, 3 * pp + 2}) {
        for (double backward : {1.0, 2.0}) {
          SCOPED_TRACE(std::string(pipeline_schedule_name(kind)) + " pp=" + std::to_string(pp) +
                       " m=" + std::to_string(m) + " backward=" + std::to_string(backward));
          const ScheduleTiming t = simulate_pipeline(kind, pp, m, 1, 1.0, backward);
          EXPECT_NEAR(t.idle_fraction, double(pp - 1) / double(m + pp - 1), 1e-12);
          EXPECT_NEAR(t.makespan, double(m + pp - 1) * (1.0 + backward), 1e-9);
        }
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedShrinksTheBubbleVFold) {
  // Chunk times are a stage's times divided by v, so every schedule does the same work per stage.
  // Found: the simulated idle fraction equals (pp - 1) / (v * m + pp - 1) exactly for every case
  // tried (pp 2..8, v 1..4, m = pp..4 pp, forward:backward 1:1, 1:2, 1:3), m == pp included.
  for (int pp : {2, 3, 4, 8}) {
    for (int v : {2, 3, 4}) {
      for (std::int64_t m : {pp, 2 * pp, 3 * pp}) {
        for (double backward : {1.0, 2.0}) {
          SCOPED_TRACE("pp=" + std::to_string(pp) + " v=" + std::to_string(v) +
                       " m=" + std::to_string(m) + " backward=" + std::to_string(backward));
          const ScheduleTiming one = simulate_pipeline(Schedule::OneFOneB, pp, m, 1, 1.0, backward);
          const ScheduleTiming inter =
              simulate_pipeline(Schedule::Interleaved1F1B, pp, m, v, 1.0 / v, backward / v);
          EXPECT_LT(inter.idle_fraction, one.idle_fraction);
          EXPECT_LT(inter.makespan, one.makespan);
          EXPECT_NEAR(inter.idle_fraction, double(pp - 1) / double(v * m + pp - 1), 1e-12);
        }
      }
    }
  }
}

TEST(PipelineSchedule, PeakLiveActivations) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (std::int64_t m : {pp, pp + 1, 2 * pp, 3 * pp + 2}) {
      SCOPED_TRACE("pp=" + std::to_string(pp) + " m=" + std::to_string(m));
      const ScheduleTiming one = simulate_pipeline(Schedule::OneFOneB, pp, m, 1, 1.0, 2.0);
      const ScheduleTiming gpipe = simulate_pipeline(Schedule::GPipe, pp, m, 1, 1.0, 2.0);
      ASSERT_EQ(one.peak_live.size(), static_cast<std::size_t>(pp));
      ASSERT_EQ(gpipe.peak_live.size(), static_cast<std::size_t>(pp));
      for (int s = 0; s < pp; ++s) {
        EXPECT_LE(one.peak_live[s], pp);
        EXPECT_EQ(one.peak_live[s], std::min<std::int64_t>(pp - s, m)) << "stage " << s;
        EXPECT_EQ(gpipe.peak_live[s], m) << "stage " << s;
      }
    }
  }
  // Interleaved: one more than the warm-up, far below m * v once m > pp; all of it when m == pp.
  const int pp = 4, v = 2;
  const ScheduleTiming inter = simulate_pipeline(Schedule::Interleaved1F1B, pp, 16, v, 0.5, 1.0);
  for (int s = 0; s < pp; ++s) EXPECT_EQ(inter.peak_live[s], 2 * (pp - s - 1) + (v - 1) * pp + 1);
  EXPECT_LT(inter.peak_live[0], 16 * v / 2);
  const ScheduleTiming all = simulate_pipeline(Schedule::Interleaved1F1B, pp, pp, v, 0.5, 1.0);
  for (int s = 0; s < pp; ++s) EXPECT_EQ(all.peak_live[s], pp * v);
}

TEST(PipelineSchedule, ProblemsNameTheNumbers) {
  const Schedule G = Schedule::GPipe, O = Schedule::OneFOneB, I = Schedule::Interleaved1F1B;
  EXPECT_EQ(pipeline_schedule_problem(G, 4, 1, 1, 4), "");
  EXPECT_EQ(pipeline_schedule_problem(O, 4, 4, 1, 5), "");  // uneven stages are fine
  EXPECT_EQ(pipeline_schedule_problem(O, 1, 1, 1, 1), "");
  EXPECT_EQ(pipeline_schedule_problem(I, 4, 8, 2, 8), "");
  EXPECT_EQ(pipeline_schedule_problem(I, 2, 2, 3, 7), "");

  EXPECT_CONTAINS(pipeline_schedule_problem(G, 0, 4, 1, 4), "pp >= 1");
  EXPECT_CONTAINS(pipeline_schedule_problem(G, 0, 4, 1, 4), "got 0");
  EXPECT_CONTAINS(pipeline_schedule_problem(O, 2, 0, 1, 4), "at least 1 micro-batch");
  EXPECT_CONTAINS(pipeline_schedule_problem(O, 2, 0, 1, 4), "got 0");
  EXPECT_CONTAINS(pipeline_schedule_problem(I, 2, 4, 0, 4), "v >= 1 model chunks per stage, got 0");
  EXPECT_CONTAINS(pipeline_schedule_problem(O, 2, 4, 2, 8), "got v = 2");
  EXPECT_CONTAINS(pipeline_schedule_problem(G, 2, 4, 3, 8), "pipeline_schedule = \"gpipe\"");
  EXPECT_EQ(pipeline_schedule_problem(O, 4, 2, 1, 8),
            "pipeline_schedule = \"1f1b\" needs at least pp = 4 micro-batches per step "
            "(gradient_accumulation_steps), got 2");
  EXPECT_CONTAINS(pipeline_schedule_problem(I, 4, 3, 2, 8), "at least pp = 4 micro-batches");
  EXPECT_CONTAINS(pipeline_schedule_problem(I, 4, 3, 2, 8), "got 3");
  EXPECT_CONTAINS(pipeline_schedule_problem(I, 1, 4, 2, 8), "at least pp = 2 pipeline stages");
  EXPECT_CONTAINS(pipeline_schedule_problem(I, 1, 4, 2, 8), "got pp = 1");
  EXPECT_CONTAINS(pipeline_schedule_problem(I, 4, 6, 2, 8), "multiple of pp = 4, got 6");
  EXPECT_CONTAINS(pipeline_schedule_problem(I, 4, 8, 2, 7), "at least 8 layers");
  EXPECT_CONTAINS(pipeline_schedule_problem(I, 4, 8, 2, 7), "got 7");
  EXPECT_CONTAINS(pipeline_schedule_problem(O, 3, 3, 1, 2), "at least 3 layers");

  // pipeline_actions refuses the same shapes, and stages out of range.
  EXPECT_CONTAINS(test::message_of<std::invalid_argument>([] { pipeline_actions(O, 4, 0, 2, 1); }),
                  "got 2");
  EXPECT_CONTAINS(test::message_of<std::invalid_argument>([] { pipeline_actions(O, 4, 4, 8, 1); }),
                  "stage 4");
  EXPECT_THROW(pipeline_actions(G, 2, -1, 2, 1), std::invalid_argument);
}

TEST(PipelineSchedule, KindNames) {
  for (Schedule kind : kAll) EXPECT_EQ(pipeline_schedule_kind(pipeline_schedule_name(kind)), kind);
  EXPECT_STREQ(pipeline_schedule_name(Schedule::Interleaved1F1B), "interleaved_1f1b");
  const std::string message =
      test::message_of<std::invalid_argument>([] { pipeline_schedule_kind("foo"); });
  EXPECT_CONTAINS(message, "\"foo\"");
  EXPECT_CONTAINS(message, "\"gpipe\", \"1f1b\" or \"interleaved_1f1b\"");
}

TEST(PipelineSchedule, SimulationRejectsBrokenSchedules) {
  auto error = [](const std::vector<std::vector<PipelineAction>>& stages) {
    return test::message_of<std::logic_error>(
        [&] { simulate_pipeline_actions(stages, 2, 1, 1.0, 1.0); });
  };
  // Stage 1 wants micro-batch 1 first; stage 0 sends it only after B0, which needs stage 1's B0.
  EXPECT_CONTAINS(error({{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}}), "deadlocks");
  EXPECT_CONTAINS(error({{F(0), B(0), F(1), B(1)}, {F(1), B(1), F(0), B(0)}}), "stage 1 at F1");
  EXPECT_CONTAINS(error({{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1)}}), "stage 1: B1 never runs");
  EXPECT_CONTAINS(error({{F(0), F(1), B(0), B(1)}, {F(0), B(1), F(1), B(0)}}),
                  "B1 runs before its forward");
  EXPECT_CONTAINS(error({{F(0), F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1), B(1)}}),
                  "F0 runs twice");
  EXPECT_CONTAINS(error({{F(0), F(2), B(0), B(2)}, {F(0), B(0), F(1), B(1)}}), "out of range");
  // A valid hand-written list runs: the 1f1b orders of pp = 2, m = 2.
  const ScheduleTiming t = simulate_pipeline_actions(
      {{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1), B(1)}}, 2, 1, 1.0, 1.0);
  EXPECT_DOUBLE_EQ(t.makespan, 6.0);
  EXPECT_EQ(t.peak_live, (std::vector<int>{2, 1}));
}

// NCCL pairs a rank's sends to a peer with the peer's receives in posting order (the tags are
// MPI's alone): over every schedule and shape the planner can pick (pp up to 8, m up to 4 pp, v up
// to 4), a training step and a forward-only pass post each direction's messages in the order the
// other side receives them. A stage that swaps two of its backwards is caught, naming the pair.
TEST(PipelineSchedule, EveryDirectionPostsItsMessagesInTheReceiversOrder) {
  int checked = 0;
  for (Schedule kind : kAll) {
    for (int pp = 2; pp <= 8; ++pp) {
      for (std::int64_t m = 1; m <= 4 * pp; ++m) {
        for (int v = 1; v <= 4; ++v) {
          if (!pipeline_schedule_problem(kind, pp, m, v, pp * v).empty()) continue;
          EXPECT_EQ(pipeline_message_order_problem(kind, pp, m, v), "")
              << pipeline_schedule_name(kind) << " pp=" << pp << " m=" << m << " v=" << v;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
  // Stage 1 runs its backwards in another order than stage 0 expects their gradients.
  const std::string problem = pipeline_message_order_problem({{F(0), F(1), B(0), B(1)}, {F(0), F(1), B(1), B(0)}}, 1);
  EXPECT_CONTAINS(problem, "message 1 from stage 1 to stage 0");
  EXPECT_CONTAINS(problem, "sends the gradient of virtual stage 0, micro-batch 1 where stage 0 receives the gradient of virtual stage 0, micro-batch 0");
  // pp = 2 and interleaved: activations and gradients share a direction; swapping two forwards
  // of the second stage (chunk 1 before chunk 0 of micro-batch 0) is caught too.
  EXPECT_NE(pipeline_message_order_problem({{F(0), F(0, 1), B(0, 1), B(0)}, {F(0, 1), F(0), B(0, 1), B(0)}}, 2), "");
}

}  // namespace
}  // namespace lft::engine
