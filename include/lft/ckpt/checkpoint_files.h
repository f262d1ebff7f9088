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
// The bytes of a checkpoint's state (its HDF5 file, or the per-rank files and their sidecars).
std::int64_t state_bytes(const std::string& folder);
// What `path` is when it exists and is not a complete lftrain checkpoint ("a file", "a link",
// "a folder without COMPLETE"); "" when it is one or does not exist.
std::string not_lftrains(const std::string& path);
// The steps of every entry of output_dir named checkpoint-<step> (folders, files, links), ascending.
std::vector<std::int64_t> named_steps(const std::string& output_dir);
// UsageError when output_dir/checkpoint-<step> exists and is not lftrain's: a save never
// replaces what it did not write.
void refuse_to_replace(const std::string& output_dir, std::int64_t step);
// A save is written aside, in output_dir/.<name>.partial (no "checkpoint-" prefix: never taken
// for a checkpoint), and published only when every rank has written it.
std::string partial_folder(const std::string& output_dir, const std::string& name);
// Creates the partial folder afresh (a leftover of a save that was cut short is removed first).
void prepare_partial(const std::string& output_dir, const std::string& name);
// Publishes the partial folder as output_dir/<name>: writes its COMPLETE, then puts it in place
// (an existing <name> is exchanged atomically where the file system can, and removed after), then
// writes output_dir/latest. Until the exchange the previous <name> stays whole; `latest` only
// ever names a complete folder. Returns true when it replaced an existing folder.
bool publish_checkpoint(const std::string& output_dir, const std::string& name, std::int64_t step);
// Deletes the oldest complete checkpoints so that at most `limit` remain (0: keep all). `newest`
// is never deleted; a checkpoint-* folder without COMPLETE (not lftrain's: its saves are written
// aside) and links are never touched.
void rotate_checkpoints(const std::string& output_dir, std::int64_t limit, const std::string& newest);
// The checkpoint-<step> folders of output_dir (real folders, not links), highest step first.
std::vector<std::string> checkpoints_newest_first(const std::string& output_dir);
void make_directories(const std::string& path);
// Replaces `path` with `text` durably: a temporary file, fsync, rename; a failure ends the job
// from this rank (fatal_one).
void write_file_atomically(const std::string& path, const std::string& text);
void remove_tree(const std::string& path);

}  // namespace lft::ckpt
