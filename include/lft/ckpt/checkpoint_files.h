// The files around a checkpoint's state: folder names, the COMPLETE marker, `latest`, rotation.
// Plain POSIX calls (no std::filesystem: see docs/architecture.md). Rank 0 only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lft::ckpt {

std::string checkpoint_name(std::int64_t step);  // "checkpoint-<step>"
// The state inside a checkpoint folder: "state.h5" (shared file) or "state" (per-rank folder).
std::string state_path(const std::string& folder);
bool is_complete(const std::string& folder);
// Creates `folder` (and parents) and removes a leftover `state` from a save that was cut short.
void prepare_folder(const std::string& folder, const std::string& state);
// Writes folder/COMPLETE and then output_dir/latest, each through a temporary file + rename.
void mark_complete(const std::string& output_dir, const std::string& name, std::int64_t step);
// Deletes the oldest checkpoints so that at most `limit` remain (0: keep all). `newest` is never
// deleted; incomplete ones older than it go first.
void rotate_checkpoints(const std::string& output_dir, std::int64_t limit, const std::string& newest);
// The checkpoint-<step> folders of output_dir, highest step first.
std::vector<std::string> checkpoints_newest_first(const std::string& output_dir);
void make_directories(const std::string& path);
void remove_tree(const std::string& path);

}  // namespace lft::ckpt
