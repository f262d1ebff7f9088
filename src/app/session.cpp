#include "lft/app/session.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "lft/app/agreement.h"
#include "lft/app/init_model.h"
#include "lft/app/placement.h"
#include "lft/app/startup.h"
#include "lft/comm/mpi_communicator.h"
#include "lft/comm/mpi_progress.h"
#include "lft/comm/watchdog.h"
#include "lft/config/config.h"
#include "lft/engine/mesh_plan.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/registry.h"
#include "lft/model/fused.h"
#include "lft/engine/run_plan.h"
#include "lft/train/example_print.h"
#include "lft/train/trainer.h"
#include "lft/train/training_data.h"
#include "lft/runtime/device.h"
#include "lft/runtime/gemm_probe.h"
#include "lft/runtime/log.h"
#include "lft/runtime/memory.h"

namespace lft::app {
namespace {

// --print-example N: training sequence N as the start-up log shows the first, read and tokenized
// as for training (every rank takes its share; rank 0 prints); nothing else is built.
int print_example(const config::Config& cfg, std::int64_t index) {
  std::optional<train::TrainingData> data;
  run_agreed([&] { data.emplace(train::data_options(cfg), MPI_COMM_WORLD); });
  log0("data       " + data->describe());
  const std::int64_t count = data->num_sequences();
  if (index < 0 || index >= count)
    throw UsageError("--print-example " + std::to_string(index) + ": the training data has " + std::to_string(count) +
                     " examples (sequences), numbered 0 to " + std::to_string(count - 1));
  log0(train::format_training_example(*data, index, "training example " + std::to_string(index) + ":",
                                      cfg.string("stage") == "pt"));
  return 0;
}

// The fused CPU kernels the config asks for; the default "all" on a CPU without AVX2 means none.
void choose_fused_kernels(const config::Config& cfg) {
  unsigned mask = engine::fused_kernels_of(cfg);
  if (mask != 0 && !model::fused_kernels_supported()) {
    if (cfg.is_set("fused_kernels"))
      throw config::ConfigError("config error: " + cfg.where("fused_kernels") + ": fused_kernels = \"" +
                                cfg.string("fused_kernels") +
                                "\" needs a CPU with AVX2 and FMA, which this one lacks\n  hint: set "
                                "fused_kernels = \"none\"");
    mask = 0;
  }
  model::set_fused_kernels(mask);
  // LFT_KERNEL_ISA=avx2 runs the AVX2 build on an AVX-512 CPU (with ONEDNN_MAX_CPU_ISA=AVX2 and
  // MKL_ENABLE_INSTRUCTIONS=AVX2, an AVX2-only machine's kernels; docs/testing.md).
  if (const char* isa = std::getenv("LFT_KERNEL_ISA"); isa != nullptr && *isa != '\0') {
    try {
      model::set_kernel_isa(isa);
    } catch (const std::invalid_argument& e) {
      throw config::ConfigError(std::string("environment LFT_KERNEL_ISA: ") + e.what());
    }
  }
}

}  // namespace

int run_session(Runtime& rt, const CliOptions& opts) {
  std::string command_line = opts.config_path + "\n" + std::to_string(static_cast<int>(opts.mode)) + "\n" +
                             opts.init_model_dir + "\n" + opts.tokenizer_dir;
  command_line += "\n" + std::to_string(opts.example_index);
  for (const std::string& o : opts.overrides) command_line += "\n" + o;
  agree_on_launch(command_line);
  const std::string text = read_config_text(opts.config_path);
  std::optional<config::Config> parsed;
  run_agreed([&] { parsed = config::parse_config(text, opts.config_path, opts.overrides); });
  const config::Config& cfg = *parsed;
  Watchdog::set_timeouts(cfg.real("comm_timeout"), cfg.real("setup_timeout"));
  run_agreed([&] { choose_fused_kernels(cfg); });

  const engine::EngineInfo* engine = nullptr;
  MeshShape shape;
  run_agreed([&] {
    engine = &engine::engine_for(cfg);
    shape = engine::plan_mesh(cfg, *engine, rt.world_size());
    parsed = parsed->with_global_batch(shape.dp_size());
    if (cfg.is_set("ray_num_workers") && cfg.integer("ray_num_workers") != rt.world_size())
      throw config::ConfigError("config error: " + cfg.where("ray_num_workers") + ": ray_num_workers = " +
                                std::to_string(cfg.integer("ray_num_workers")) + " but the job has " +
                                std::to_string(rt.world_size()) + " MPI ranks (one worker = one rank)\n  hint: start it "
                                "with mpirun -np " + std::to_string(cfg.integer("ray_num_workers")) + " (or srun -n), or change ray_num_workers");
  });

  const int threads = threads_per_rank(static_cast<int>(cfg.integer("intra_op_threads")),
                                      rt.local_size());
  at::set_num_threads(threads);
  if (opts.mode == Mode::PrintExample) return print_example(cfg, opts.example_index);
  const int ranks_per_gpu = static_cast<int>(cfg.integer("ranks_per_gpu"));
  const DeviceChoice device = select_device(rt.local_rank(), rt.local_size(), cfg.boolean("use_cpu"), ranks_per_gpu);
  // Every rank's GPU in one collective: "UUID\nname" ("\ncpu" on the CPU).
  std::vector<std::string> gpu_uuids, device_names;
  for (const std::string& both : all_gather_strings(device.uuid + "\n" + device.name)) {
    const std::size_t cut = both.find('\n');
    gpu_uuids.push_back(both.substr(0, cut));
    device_names.push_back(both.substr(cut + 1));
  }
  run_agreed([&] {
    if (ranks_per_gpu > 1 && !device.cuda)
      throw config::ConfigError("config error: " + cfg.where("ranks_per_gpu") + ": ranks_per_gpu = " +
                                std::to_string(ranks_per_gpu) + " shares a GPU between ranks, but this rank computes on the CPU (" +
                                device.cpu_reason + "); remove ranks_per_gpu");
    const std::string conflict = shared_gpu_conflict(gpu_uuids, ranks_per_gpu);
    if (!conflict.empty()) throw config::ConfigError("config error: " + conflict + ", or use_cpu = true");
  });
  log0(startup_report(rt, cfg, *engine, shape, threads, device));
  if (device.cuda) log0(gpu_binding_report(device_names));
  for (const std::string& note : cfg.notes()) log0("note: " + note);
  if (rt.node_count() > 1 || opts.mode == Mode::Check) log0(placement_report(shape, rt.hosts()));
  for (const std::string& w : placement_warnings(shape, rt.hosts())) log0("warning: " + w);

  const MpiProgressThread progress(
      std::chrono::microseconds(std::llround(cfg.real("comm_progress_us"))));
  MpiCommunicator world(MPI_COMM_WORLD, "world", false);
  DeviceMesh mesh(world, shape, device.torch_device(),
                  !device.cuda ? DeviceComms::Host : device.shared ? DeviceComms::MpiStaged : DeviceComms::Nccl);
  log0(check_communication(world, mesh));
  std::optional<engine::RunPlan> plan;
  run_agreed([&] {
    plan = engine::resolve_run_plan(cfg, shape, device.cuda && !device.shared, !device.cuda);
    if (!device.cuda) plan->memory.process = static_cast<double>(current_rss_bytes() - cpu_bytes_in_use());
    if (!device.cuda)
      engine::check_fits_in_memory(*plan, rt.local_size(), usable_node_memory_bytes(rt.local_size()));
  });
  log0(engine::plan_report(*plan));
  if (rt.rank() == 0 && !device.cuda && plan->compute != at::kFloat) {  // rank 0 logs it
    const std::string warning = slow_low_precision_warning(plan->compute, cpu_gemm_rates(plan->compute));
    if (!warning.empty()) log0(warning);
  }

  if (!opts.init_model_dir.empty()) {
    run_agreed([&] {
      if (rt.rank() == 0) write_initial_model(cfg, plan->model, opts.init_model_dir, opts.tokenizer_dir);
    });
    log0("init-model: wrote " + opts.init_model_dir + " (nothing was trained)");
    return 0;
  }
  if (opts.mode == Mode::Check) {
    // The engine validates its layout against the model (megatron: heads, stages, micro-batches).
    run_agreed([&] { engine->create(engine::EngineContext{mesh, *plan}); });
    std::string data_summary;
    run_agreed([&] { data_summary = train::check_training_data(train::data_options(cfg)); });
    log0("check: data: " + data_summary);
    log0("check: ok (nothing was trained: --check)");
    return 0;
  }
  std::unique_ptr<train::Trainer> trainer;
  run_agreed([&] { trainer = std::make_unique<train::Trainer>(cfg, *plan, mesh, device); });
  return trainer->run();
}

}  // namespace lft::app
