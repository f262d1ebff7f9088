// A checkpoint's manifest: what run wrote it and where that run stands, as the root attributes
// of its state (and the /optim group's), versioned by `format_version`. One struct, written by
// save_checkpoint and read by resume, `lfmerge --inspect` and lfmerge's export with the same
// code (docs/checkpoint.md lists the attributes).
//
// Versions: 1; 2 adds use_dora (written only by DoRA runs: format_version_for). A reader takes
// every version up to kFormatVersion and refuses a newer one (CheckpointMismatch: it is the wrong
// lftrain, not a damaged file).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lft/ckpt/checkpoint.h"

namespace lft::ckpt {

class StoreReader;
class StoreWriter;

// The lowest format version that holds what `run` needs: 2 for DoRA, else 1.
std::int64_t format_version_for(const RunInfo& run);

struct Manifest {
  // As read. Written as format_version_for(run) when 0 (a test may write another).
  std::int64_t format_version = 0;
  std::string lftrain_version;
  RunInfo run;
  Progress progress;
  std::int64_t optimizer_steps = 0;  // /optim step: AdamW's bias-correction count
  std::vector<std::pair<std::string, double>> optimizer_hyperparameters;  // /optim, by name
};

// The optimizer hyperparameters a manifest reads back (those lftrain's AdamW writes).
inline const char* const kOptimizerHyperparameters[] = {"beta1", "beta2", "eps", "weight_decay"};

// Collective over the writer's ranks (every rank passes the same manifest).
void write_manifest(StoreWriter& writer, const Manifest& manifest);

// Reads the manifest of `store`, the state of `where` (named in errors). UsageError when it is not
// an lftrain checkpoint or an attribute its version must have is missing or of another kind
// (naming it); CheckpointMismatch when its format version is newer than this build reads.
Manifest read_manifest(const StoreReader& store, const std::string& where);

}  // namespace lft::ckpt
