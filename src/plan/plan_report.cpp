#include "lft/plan/plan_report.h"

#include <algorithm>

#include <cstdarg>
#include <cstdio>

#include "lft/comm/stats.h"

namespace lft::plan {
namespace {

[[gnu::format(printf, 1, 2)]] std::string format(const char* f, ...) {
  char text[1024];
  va_list args;
  va_start(args, f);
  std::vsnprintf(text, sizeof text, f, args);
  va_end(args);
  return text;
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

std::string count_text(double x) {
  if (x >= 1e6) return format("%.2fM", x / 1e6);
  if (x >= 1e3) return format("%.1fk", x / 1e3);
  return format("%.0f", x);
}

std::string header(const char* command, const PlanRequest& r, const PlanResult& p) {
  return format("%s: %s on %s\n", command, r.config_name.c_str(), r.cluster.summary().c_str()) + "model    " +
         p.model_summary + "\n" +
         format("batch    %lld sequences x %lld tokens = %s tokens per step\n", static_cast<long long>(p.global_batch),
                static_cast<long long>(p.seq_len),
                count_text(static_cast<double>(p.global_batch) * static_cast<double>(p.seq_len)).c_str());
}

std::string batch_text(const Layout& l) {
  return format("%lld x %lld", static_cast<long long>(l.micro_batch), static_cast<long long>(l.accumulation));
}

// "fsdp2 1x1x64x1x1, micro 1 x 2, checkpointing"
std::string layout_name(const Layout& l) {
  return l.engine_text() + " " + l.mesh_text() + ", micro " + batch_text(l) +
         (l.checkpointing ? ", checkpointing" : "");
}

std::string table(const std::vector<Candidate>& ranked) {
  std::string out =
      "  (mesh: pp x dp_replicate x dp_shard x cp x tp; micro x accum: per_device_train_batch_size x\n"
      "  gradient_accumulation_steps; tokens/s: the whole cluster's; exposed: communication compute does not hide)\n";
  int width = 6;
  for (const Candidate& c : ranked) width = std::max(width, static_cast<int>(c.layout.engine_text().size()));
  out += format("  %-3s %-*s %-11s %-9s %-5s %8s %8s %9s %6s %9s\n", "#", width, "engine", "mesh", "micro x", "ckpt",
                "GiB/rank", "step s", "tokens/s", "MFU", "exposed s");
  int rank = 0;
  for (const Candidate& c : ranked) {
    const StepPrediction& p = c.prediction;
    out += format("  %-3d %-*s %-11s %-9s %-5s %8.1f %8.3f %9s %5.1f%% %9.3f\n", ++rank, width, c.layout.engine_text().c_str(),
                  c.layout.mesh_text().c_str(), batch_text(c.layout).c_str(), c.layout.checkpointing ? "on" : "off",
                  gib(p.memory_bytes), p.step_s, count_text(p.tokens_per_s).c_str(), 100 * p.mfu, p.exposed_comm_s);
  }
  return out;
}

std::string overrides_line(const std::vector<std::string>& overrides) {
  std::string out;
  for (const std::string& o : overrides) out += (out.empty() ? "" : " ") + o;
  return out;
}

std::string engines_line(const PlanResult& p) {
  std::string predicted, refused;
  for (const EngineVerdict& v : p.engines) {
    predicted += (predicted.empty() ? "" : ", ") + std::string(engine::preset_name(v.engine)) + " " + std::to_string(v.predicted);
    if (v.refused > 0)
      refused +=
          "refused  " + std::string(engine::preset_name(v.engine)) + ": " + std::to_string(v.refused) + " layout(s), e.g. " + v.first_refusal + "\n";
  }
  return "layouts  " + (predicted.empty() ? std::string("none") : predicted) + " predicted; " +
         std::to_string(p.sized) + " sized by their engine's memory estimate\n" + refused;
}

}  // namespace

std::string plan_text(const PlanRequest& r, const PlanResult& p) {
  std::string out = header("lftrain --plan", r, p) + engines_line(p);
  const double usable = r.cluster.usable_memory_bytes();
  out += format("memory   %.1f GiB per rank usable (%g GiB less %g%% headroom)\n\n", gib(usable),
                r.cluster.device_memory_gib, 100 * r.cluster.memory_headroom);
  if (p.ranked.empty()) {
    if (!p.smallest)
      return out + "no layout of this model is valid on " + std::to_string(r.cluster.world_size()) +
             " ranks: every engine refused it (above)\n";
    const Candidate& s = *p.smallest;
    return out +
           format("no layout fits in %.1f GiB per rank: the smallest needs %.1f GiB (%s; %s)\n", gib(usable),
                  gib(s.prediction.memory_bytes), layout_name(s.layout).c_str(), s.memory_report.c_str()) +
           "  hint: more devices or devices with more memory, a shorter cutoff_len, or finetuning_type = \"lora\"\n";
  }
  out += format("%zu fastest layouts that fit, by predicted tokens/s (the whole cluster's):\n", p.ranked.size());
  out += table(p.ranked);
  out += "\nthe best as config lines (they replace the same keys of " + r.config_name + "):\n";
  for (std::size_t i = 0; i < p.ranked.size() && i < 3; ++i) {
    const Candidate& c = p.ranked[i];
    out +=
        format("\n# %zu: %s: %.3f s per step, %s tokens/s, %.1f GiB per rank\n", i + 1, layout_name(c.layout).c_str(),
               c.prediction.step_s, count_text(c.prediction.tokens_per_s).c_str(), gib(c.prediction.memory_bytes));
    out += layout_config_lines(c.layout);
    out += "# on the command line: " + overrides_line(c.overrides) + "\n";
  }
  return out;
}

std::string layout_text(const PlanRequest& r, const PlanResult& context, const Candidate& c) {
  const Layout& l = c.layout;
  const StepPrediction& p = c.prediction;
  std::string out = header("lftrain --plan --this-layout", r, context);
  out += format("layout   %s, mesh pp x dp_replicate x dp_shard x cp x tp = %s, micro-batch x accumulation = %s\n",
                l.engine_text().c_str(), l.mesh_text().c_str(), batch_text(l).c_str());
  out +=
      "memory   " + c.memory_report +
      format("; %s %.1f GiB per rank\n", c.fits ? "fits in" : "DOES NOT FIT in", gib(r.cluster.usable_memory_bytes()));
  std::string groups;
  for (const auto& [group, seconds] : p.comm_s_by_group)
    groups += format("%s%s %.3f s", groups.empty() ? "" : ", ", group.c_str(), seconds);
  out += format("step     %.3f s: compute %.3f s, pipeline bubble %.3f s, exposed communication %.3f s\n", p.step_s,
                p.compute_s, p.bubble_s, p.exposed_comm_s);
  out += format("         communication %.3f s in all%s%s%s\n", p.comm_s, groups.empty() ? "" : " (", groups.c_str(),
                groups.empty() ? "" : ")");
  out += format("speed    %s tokens/s (%s per rank), MFU %.1f%% of %g TFLOP/s per device\n",
                count_text(p.tokens_per_s).c_str(), count_text(p.tokens_per_s / l.mesh.world_size()).c_str(),
                100 * p.mfu, r.cluster.device_tflops);
  if (p.collectives.empty()) return out + "collectives: none\n";
  out += "collectives per step on the busiest rank (payload as the communicators count it):\n";
  out += format("  %-13s %4s %-5s %-14s %8s %12s %12s %9s  %-19s %s\n", "group", "n", "link", "kind", "calls",
                "payload/call", "bus bytes", "seconds", "when", "what");
  for (const Collective& k : p.collectives)
    out +=
        format("  %-13s %4d %-5s %-14s %8.0f %12s %12s %9.4f  %-19s %s\n", k.group.c_str(), k.group_size,
               k.inter_node ? "inter" : "intra", coll_kind_name(k.kind), k.calls, format_bytes(k.payload_bytes).c_str(),
               format_bytes(k.bus_bytes_per_step()).c_str(), k.seconds, when_name(k.when), k.what.c_str());
  return out;
}

}  // namespace lft::plan
