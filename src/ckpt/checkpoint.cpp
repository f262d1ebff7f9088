#include "lft/ckpt/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>
#include <set>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/ckpt/manifest.h"
#include "lft/ckpt/tensor_store.h"
#include "lft/comm/fault_injection.h"
#include "lft/comm/mpi_util.h"
#include "lft/comm/watchdog.h"
#include "lft/optim/optimizer.h"
#include "lft/runtime/check.h"
#include "lft/runtime/log.h"
#include "store_util.h"

namespace lft::ckpt {
namespace {

// The part of `t`'s box this rank writes: all of it, or its holder's share of dim 0.
Slice slice_of(const std::string& store_name, const HeldTensor& t, const at::Tensor& local) {
  Slice s{store_name, t.box.global_shape, t.box.offset, local.contiguous()};
  if (t.box.replicas <= 1 || local.dim() == 0) return s;
  const int64_t rows = local.size(0);
  const int64_t begin = rows * t.box.replica / t.box.replicas, end = rows * (t.box.replica + 1) / t.box.replicas;
  s.local = local.narrow(0, begin, end - begin).contiguous();
  s.offset[0] += begin;
  return s;
}

// The slices of every rank's tensors, in one order on every rank: a rank that holds nothing of a
// tensor (a pipeline stage without that layer) passes an empty slice of it, as the store wants.
std::vector<Slice> with_every_ranks_tensors(MPI_Comm world, std::vector<Slice> mine) {
  std::string text;
  for (const Slice& s : mine) {
    text += s.name + "\t" + std::to_string(static_cast<int>(s.local.scalar_type()));
    for (int64_t d : s.global_shape) text += "\t" + std::to_string(d);
    text += "\n";
  }
  std::string all;
  for (const std::string& theirs : all_gather_bytes(world, text)) all += theirs;
  std::vector<Slice> out;
  std::size_t pos = 0;
  std::set<std::string> seen;
  std::map<std::string, Slice> by_name;
  for (Slice& s : mine) by_name.emplace(s.name, std::move(s));
  while (pos < all.size()) {
    const std::size_t end = all.find('\n', pos);
    std::vector<std::string> fields;
    for (std::size_t a = pos; a <= end;) {
      const std::size_t b = std::min(all.find('\t', a), end);
      fields.push_back(all.substr(a, b - a));
      a = b + 1;
    }
    pos = end + 1;
    if (!seen.insert(fields[0]).second) continue;
    if (by_name.count(fields[0]) != 0) {
      out.push_back(std::move(by_name.at(fields[0])));
      continue;
    }
    Slice empty;
    empty.name = fields[0];
    for (std::size_t i = 2; i < fields.size(); ++i) empty.global_shape.push_back(std::stoll(fields[i]));
    empty.offset.assign(empty.global_shape.size(), 0);
    empty.local = at::empty({0}, at::TensorOptions().dtype(static_cast<at::ScalarType>(std::stoi(fields[1]))));
    out.push_back(std::move(empty));
  }
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Rank 0 decides; every rank gets the same string (an empty one when `decide` returns nothing).
template <class Decide>
std::string decided_by_rank0(MPI_Comm world, Decide&& decide) {
  std::string text;
  std::int64_t status = 0;  // 0 ok, 1 usage error, 2 mismatch
  if (mpi_rank(world) == 0) {
    try {
      text = decide();
    } catch (const CheckpointMismatch& e) {
      text = e.what();
      status = 2;
    } catch (const UsageError& e) {
      text = e.what();
      status = 1;
    }
  }
  LFT_MPI_CHECK(MPI_Bcast(&status, 1, MPI_INT64_T, 0, world));
  broadcast_string(world, 0, text);
  if (status == 2) throw CheckpointMismatch(text);
  if (status == 1) throw UsageError(text);
  return text;
}

}  // namespace

void check_save_targets(MPI_Comm world, const std::string& output_dir,
                        const std::function<bool(std::int64_t)>& will_save) {
  decided_by_rank0(world, [&]() -> std::string {
    for (const std::int64_t step : named_steps(output_dir))
      if (will_save(step)) refuse_to_replace(output_dir, step);
    return "";
  });
}

std::string save_checkpoint(MPI_Comm world, const SaveOptions& options,
                            const RunInfo& run, const Progress& progress,
                            const std::vector<HeldTensor>& params, const optim::Optimizer& optimizer) {
  const std::string name = checkpoint_name(progress.step);
  const std::string folder = options.output_dir + "/" + name;
  // Written aside: an existing checkpoint of this step stays whole until the new one is complete.
  const std::string state = partial_folder(options.output_dir, name) + (options.per_rank ? "/state" : "/state.h5");
  decided_by_rank0(world, [&]() -> std::string {
    refuse_to_replace(options.output_dir, progress.step);
    prepare_partial(options.output_dir, name);
    return "";
  });

  Watchdog::Scope scope("saving " + folder, Watchdog::setup_timeout(), "setup_timeout");
  StoreWriter writer(world, state, options.per_rank ? StoreMode::PerRank : StoreMode::SharedFile);
  std::vector<Slice> slices;
  const std::vector<std::string> states = optimizer.state_names();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const HeldTensor& t = params[i];
    slices.push_back(slice_of("model/" + t.name, t, t.local.detach()));
    for (std::size_t k = 0; k < states.size(); ++k)
      if (optimizer.state(i, k).defined())  // Muon's matrices have no second moment
        slices.push_back(slice_of("optim/" + t.name + "/" + states[k], t, optimizer.state(i, k)));
  }
  writer.write(with_every_ranks_tensors(world, std::move(slices)));
  inject_save_fault_if_requested();
  Manifest manifest;
  manifest.run = run;
  manifest.progress = progress;
  manifest.optimizer_steps = optimizer.steps();
  manifest.optimizer_hyperparameters = optimizer.hyperparameters();
  write_manifest(writer, manifest);
  writer.close();
  inject_publish_freeze_if_requested();

  // The writing is done: what is left are waits for the other ranks, under comm_timeout (not the
  // whole save's deadline), so a rank frozen here ends the job with a report within it.
  {
    Watchdog::Scope wait("waiting for every rank to finish writing " + folder, Watchdog::collective_timeout(),
                         "comm_timeout");
    LFT_MPI_CHECK(MPI_Barrier(world));  // every rank's bytes are on disk before COMPLETE
  }
  if (mpi_rank(world) == 0) {
    if (publish_checkpoint(options.output_dir, name, progress.step))
      log_rank("replaced " + folder + " (saved earlier) with this run's checkpoint of the same step");
    rotate_checkpoints(options.output_dir, options.total_limit, name);
  }
  Watchdog::Scope wait("waiting for rank 0 to publish " + folder, Watchdog::collective_timeout(), "comm_timeout");
  LFT_MPI_CHECK(MPI_Barrier(world));
  return folder;
}

std::string verify_checkpoint(MPI_Comm world, const std::string& folder) {
  Watchdog::Scope scope("verifying the checksums of " + folder, Watchdog::setup_timeout(), "setup_timeout");
  try {
    StoreReader store(world, state_path(folder));
    const std::vector<TensorInfo> tensors = store.tensors();
    const int rank = mpi_rank(world), size = mpi_size(world);
    std::string damage;
    for (std::size_t i = static_cast<std::size_t>(rank); i < tensors.size() && damage.empty();
         i += static_cast<std::size_t>(size)) {
      try {
        store.verify(tensors[i].name);
      } catch (const UsageError& e) {
        damage = e.what();
      }
    }
    return agree_on_error(world, damage);
  } catch (const UsageError& e) {  // the store cannot be opened (agreed on by every rank)
    return e.what();
  }
}

std::optional<std::string> find_checkpoint(MPI_Comm world, const std::string& output_dir,
                                           const std::string& spec) {
  std::set<std::string> damaged;  // the same on every rank
  for (;;) {
    const std::string found = decided_by_rank0(world, [&]() -> std::string {
      if (spec != "auto") {
        if (!is_complete(spec))
          throw UsageError("checkpoint error: resume_from_checkpoint = \"" + spec +
                           "\" is not a complete checkpoint (no COMPLETE file in it)");
        read_manifest(StoreReader(MPI_COMM_SELF, state_path(spec)), spec);
        return spec;
      }
      for (const std::string& folder : checkpoints_newest_first(output_dir)) {
        if (damaged.count(folder) != 0) continue;
        if (!is_complete(folder)) {
          log_rank("warning: skipping " + folder + ": incomplete (no COMPLETE file; a save was cut short)");
          continue;
        }
        try {
          read_manifest(StoreReader(MPI_COMM_SELF, state_path(folder)), folder);
          return folder;
        } catch (const CheckpointMismatch&) {
          throw;
        } catch (const UsageError& e) {
          log_rank(std::string("warning: skipping broken checkpoint ") + folder + ": " + e.what());
        }
      }
      return "";
    });
    if (found.empty()) return std::nullopt;
    const std::string damage = verify_checkpoint(world, found);
    if (damage.empty()) return found;
    if (spec != "auto")
      throw UsageError("checkpoint error: resume_from_checkpoint = \"" + spec + "\" is damaged: " + damage +
                       ". Resume from an earlier checkpoint, or use \"auto\" to take the newest intact one");
    if (mpi_rank(world) == 0)
      log_rank("warning: skipping damaged checkpoint " + found + ": " + damage);
    damaged.insert(found);
  }
}

Progress load_checkpoint(MPI_Comm world, const std::string& folder, const RunInfo& run,
                         const std::vector<HeldTensor>& params, optim::Optimizer& optimizer) {
  Watchdog::Scope scope("loading " + folder, Watchdog::setup_timeout(), "setup_timeout");
  StoreReader store(world, state_path(folder));
  const Manifest manifest = read_manifest(store, folder);
  const RunInfo& saved = manifest.run;
  if (saved.global_batch != run.global_batch)
    throw CheckpointMismatch(
        "checkpoint error: " + folder + " was trained with a global batch of " +
        std::to_string(saved.global_batch) + " sequences, this run has " + std::to_string(run.global_batch) +
        " (per_device_train_batch_size x gradient_accumulation_steps x data-parallel ranks): "
        "resume with the same global batch");
  const std::string& type = saved.finetuning_type;
  if (type != run.finetuning_type)
    throw CheckpointMismatch("checkpoint error: " + folder + " was trained with finetuning_type = \"" + type +
                             "\", this run has \"" + run.finetuning_type + "\": resume with the same finetuning_type");
  const auto base_name = [](const std::string& folder) { return folder.empty() ? "the inline [model]" : folder; };
  const auto base_text = [](const std::string& hash) { return hash.rfind("seed ", 0) == 0 ? hash : "hash " + hash; };
  if (type != "full" && saved.base_model_hash != run.base_model_hash)
    throw CheckpointMismatch("checkpoint error: " + folder + " was trained on base model " +
                             base_name(saved.base_model) + " (" + base_text(saved.base_model_hash) + "); this run's base " +
                             base_name(run.base_model) + " is " + base_text(run.base_model_hash) +
                             ": its frozen weights differ, so resume on the base the checkpoint was trained on");
  // A full-parameter DPO run computes its reference from the starting weights again: they must
  // be the ones it started from (a checkpoint of a run that records none, SFT or older, is not held
  // to it).
  if (type == "full" && !saved.base_model_hash.empty() && !run.base_model_hash.empty() &&
      saved.base_model_hash != run.base_model_hash)
    throw CheckpointMismatch("checkpoint error: " + folder + " started from " + base_name(saved.base_model) + " (" +
                             base_text(saved.base_model_hash) + "); this run starts from " + base_name(run.base_model) +
                             " (" + base_text(run.base_model_hash) + "): stage dpo's reference log-probabilities would "
                             "come from other weights than the run's first steps used, so resume with the model folder "
                             "the run started from (or give that folder as ref_model)");
  const auto stored = store.tensors("model");
  std::vector<Slice> held;  // every rank's tensor names, to count the model's tensors
  for (const HeldTensor& t : params) held.push_back({"model/" + t.name, t.box.global_shape, t.box.offset, t.local});
  const std::size_t model_tensors = with_every_ranks_tensors(world, std::move(held)).size();
  if (stored.size() != model_tensors)
    throw CheckpointMismatch("checkpoint error: " + folder + " holds " + std::to_string(stored.size()) +
                             " model tensors, this model has " + std::to_string(model_tensors) +
                             ": it is another model");
  c10::NoGradGuard no_grad;
  const std::vector<std::string> states = optimizer.state_names();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const HeldTensor& t = params[i];
    const std::string key = "model/" + t.name;
    if (!store.has_tensor(key) || store.info(key).shape != t.box.global_shape)
      throw CheckpointMismatch("checkpoint error: " + folder + ": " + t.name + " is " +
                               (store.has_tensor(key) ? shape_text(store.info(key).shape) : "missing") +
                               " there, " + shape_text(t.box.global_shape) + " in this model");
    const std::vector<int64_t> box(t.local.sizes().begin(), t.local.sizes().end());
    t.local.copy_(store.read(key, t.box.offset, box));
    for (std::size_t k = 0; k < states.size(); ++k) {
      if (!optimizer.state(i, k).defined()) continue;
      const std::string state = "optim/" + t.name + "/" + states[k];
      if (!store.has_tensor(state))
        throw CheckpointMismatch("checkpoint error: " + folder + " holds no " + states[k] + " for " + t.name +
                                 ": it was saved by another optimizer (use_muon differs)");
      optimizer.load_state(i, k, store.read(state, t.box.offset, box));
    }
  }
  optimizer.set_steps(manifest.optimizer_steps);
  return manifest.progress;
}

}  // namespace lft::ckpt
