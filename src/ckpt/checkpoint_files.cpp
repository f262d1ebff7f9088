#include "lft/ckpt/checkpoint_files.h"

#include <dirent.h>
#include <stdio.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "lft/runtime/error.h"
#include "store_util.h"

namespace lft::ckpt {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A folder itself, not a link to one (links are never followed into).
bool is_real_directory(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The step of a "checkpoint-<step>" name, or -1.
std::int64_t step_of(const std::string& name) {
  const std::string prefix = "checkpoint-";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

// Makes the renames inside `dir` durable.
void sync_directory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fatal_one("cannot write " + tmp + ": " + std::strerror(errno));
  const ssize_t n = write(fd, text.data(), text.size());
  if (n != static_cast<ssize_t>(text.size()) || fsync(fd) != 0)
    fatal_one("cannot write " + tmp + ": " + describe_write_error(n >= 0 && n < static_cast<ssize_t>(text.size()) ? ENOSPC : errno, detail::parent_dir(path)));
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0)
    fatal_one("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
}

std::string checkpoint_name(std::int64_t step) { return "checkpoint-" + std::to_string(step); }

std::string state_path(const std::string& folder) {
  return is_directory(folder + "/state") ? folder + "/state" : folder + "/state.h5";
}

bool is_complete(const std::string& folder) { return exists(folder + "/COMPLETE"); }

std::int64_t state_bytes(const std::string& folder) {
  const std::string state = state_path(folder);
  struct stat st {};
  if (!is_directory(state)) return stat(state.c_str(), &st) == 0 ? st.st_size : 0;
  std::int64_t total = 0;
  DIR* dir = opendir(state.c_str());
  if (dir == nullptr) return 0;
  while (const dirent* e = readdir(dir))
    if (stat((state + "/" + e->d_name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
  closedir(dir);
  return total;
}

std::string not_lftrains(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return "";
  if (S_ISLNK(st.st_mode)) return "a link";
  if (!S_ISDIR(st.st_mode)) return "a file";
  return is_complete(path) ? "" : "a folder without COMPLETE";
}

std::vector<std::int64_t> named_steps(const std::string& output_dir) {
  std::vector<std::int64_t> steps;
  if (DIR* dir = opendir(output_dir.c_str())) {
    while (const dirent* e = readdir(dir)) {
      const std::int64_t step = step_of(e->d_name);
      if (step >= 0) steps.push_back(step);
    }
    closedir(dir);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void refuse_to_replace(const std::string& output_dir, std::int64_t step) {
  const std::string path = output_dir + "/" + checkpoint_name(step);
  const std::string what = not_lftrains(path);
  if (what.empty()) return;
  throw UsageError("checkpoint error: " + path + " is " + what + " that lftrain did not write, and saving step " +
                   std::to_string(step) + " would replace it; it was left as it is and nothing was saved\n"
                   "  hint: move it out of output_dir, or choose another output_dir");
}

void make_directories(const std::string& path) {
  std::string partial;
  for (std::size_t i = 0; i <= path.size(); ++i) {
    if ((i == path.size() || path[i] == '/') && !partial.empty() && !is_directory(partial) &&
        mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      throw UsageError("cannot create folder " + partial + ": " + std::strerror(errno));
    if (i < path.size()) partial += path[i];
  }
}

void remove_tree(const std::string& path) {
  if (exists(path)) nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

std::string partial_folder(const std::string& output_dir, const std::string& name) {
  return output_dir + "/." + name + ".partial";
}

void prepare_partial(const std::string& output_dir, const std::string& name) {
  const std::string partial = partial_folder(output_dir, name);
  remove_tree(partial);
  make_directories(partial);
}

bool publish_checkpoint(const std::string& output_dir, const std::string& name, std::int64_t step) {
  const std::string partial = partial_folder(output_dir, name), folder = output_dir + "/" + name;
  write_file_atomically(partial + "/COMPLETE", "step " + std::to_string(step) + "\n");
  sync_directory(partial);
  bool replaced = false;
  if (exists(folder)) {
    // Swap the new folder in, in one step; the old one is then under the partial name.
    if (renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, folder.c_str(), RENAME_EXCHANGE) == 0) {
      replaced = true;
    } else {
      // A file system without the exchange: the old folder steps aside first. A crash between the
      // two renames leaves it whole as .<name>.old, which the next save of <name> removes.
      const std::string old = output_dir + "/." + name + ".old";
      remove_tree(old);
      if (rename(folder.c_str(), old.c_str()) != 0)
        fatal_one("cannot move " + folder + " aside: " + std::strerror(errno));
      if (rename(partial.c_str(), folder.c_str()) != 0)
        fatal_one("cannot rename " + partial + " to " + folder + ": " + std::strerror(errno));
      remove_tree(old);
      replaced = true;
    }
  } else if (rename(partial.c_str(), folder.c_str()) != 0) {
    fatal_one("cannot rename " + partial + " to " + folder + ": " + std::strerror(errno));
  }
  sync_directory(output_dir);
  write_file_atomically(output_dir + "/latest", name + "\n");
  remove_tree(partial);  // after an exchange: the replaced folder
  return replaced;
}

std::vector<std::string> checkpoints_newest_first(const std::string& output_dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  if (DIR* dir = opendir(output_dir.c_str())) {
    while (const dirent* e = readdir(dir)) {
      const std::int64_t step = step_of(e->d_name);
      if (step >= 0 && is_real_directory(output_dir + "/" + e->d_name))
        found.emplace_back(step, output_dir + "/" + e->d_name);
    }
    closedir(dir);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

void rotate_checkpoints(const std::string& output_dir, std::int64_t limit, const std::string& newest) {
  if (limit <= 0) return;
  const std::string keep = output_dir + "/" + newest;
  std::int64_t kept = 0;
  for (const std::string& folder : checkpoints_newest_first(output_dir)) {
    // Only complete checkpoints are lftrain's own (it writes aside and publishes with COMPLETE):
    // a checkpoint-* folder without one is someone else's and is left alone, as are links.
    if (!is_complete(folder)) continue;
    if (folder == keep || step_of(folder.substr(folder.rfind('/') + 1)) > step_of(newest)) {
      ++kept;  // the newest, and any later one (a resumed run that re-saved earlier steps)
      continue;
    }
    if (kept < limit) {
      ++kept;
      continue;
    }
    remove_tree(folder);
  }
}

}  // namespace lft::ckpt
