// The end-of-run summary: peak memory per rank, communication per step, exposed communication.
#include <ATen/ATen.h>

#include <cstdio>

#include "lft/comm/stats.h"
#include "lft/runtime/device_memory.h"
#include "lft/runtime/memory.h"
#include "lft/train/metrics.h"
#include "trainer_state.h"

namespace lft::train {
namespace {

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", 1e3 * seconds);
  return text;
}

}  // namespace

std::string Trainer::run_summary() {
  State& s = *s_;
  // Peak memory of every rank, gathered to all (the world is the mesh's dp x pp x tp).
  MpiCommunicator& world = s.world;
  const bool gpu = s.device.cuda;
  at::Tensor mine = at::tensor({static_cast<double>(peak_rss_bytes()), static_cast<double>(cpu_peak_bytes_in_use()),
                                static_cast<double>(gpu ? cuda_peak_bytes_in_use(s.device.index) : 0)},
                               at::kDouble);
  at::Tensor all = at::empty({3 * world.size()}, at::kDouble);
  world.all_gather(mine, all);
  auto per_rank = [&](int column) {
    std::string line;
    for (int r = 0; r < world.size(); ++r)
      line += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " " +
              std::to_string(static_cast<long>(all[3 * r + column].item<double>() / (1024.0 * 1024.0))) + " MiB";
    return line;
  };
  std::string out = "summary:\n  peak RSS   " + per_rank(0);
  if (cpu_memory_counter_installed()) out += "\n  peak CPU tensors " + per_rank(1);
  if (gpu) out += "\n  peak GPU tensors " + per_rank(2);
  const double steps = static_cast<double>(std::max<std::int64_t>(1, s.step));
  double in_flight = 0.0, waited = 0.0;
  for (Communicator* c : s.counted_communicators()) c->settle_stats();
  for (Communicator* c : s.counted_communicators())
    for (int k = 0; k < kCollKindCount; ++k) {
      const auto kind = static_cast<CollKind>(k);
      const CollStats& st = c->stats()[kind];
      if (st.calls == 0) continue;
      in_flight += st.seconds;
      waited += st.waited_seconds;
      out += "\n  comm       '" + c->name() + "' " + coll_kind_name(kind) + ": " +
             std::to_string(static_cast<double>(st.calls) / steps).substr(0, 5) + " calls, " +
             format_bytes(static_cast<double>(st.bytes) / steps) + " per step (bus " +
             format_bytes(bus_bytes(kind, static_cast<double>(st.bytes) / steps, c->size())) + "), " +
             milliseconds(st.waited_seconds / steps) + " of " + milliseconds(st.seconds / steps) +
             " ms waited";
    }
  // Exposed: the time ranks blocked in waits, which no computation hid.
  out += "\n  exposed    " + std::to_string(1e3 * waited / steps).substr(0, 6) +
         " ms of communication per step, of " + std::to_string(1e3 * in_flight / steps).substr(0, 6) +
         " ms in flight";
  out += s.engine->summary(steps, s.step_seconds);
  return out;
}

}  // namespace lft::train
