#include "lft/train/training_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/runtime/error.h"
#include "lft/runtime/log.h"

namespace lft::train {
namespace {

// Replaces `path` with `text` durably: a temporary file, fsync, rename.
void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    throw UsageError("cannot write " + path + ": " + std::strerror(error ? error : errno));
}

}  // namespace

TrainingLog::TrainingLog(const std::string& output_dir, std::int64_t resumed_step)
    : path_(output_dir + "/trainer_log.jsonl") {
  ckpt::make_directories(output_dir);
  std::string kept;
  if (resumed_step > 0) {
    std::ifstream old(path_);
    std::int64_t line_number = 0;
    for (std::string line; std::getline(old, line);) {
      ++line_number;
      const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) {
        log_rank("warning: " + path_ + ":" + std::to_string(line_number) +
                 ": dropped a damaged record (not a JSON object with a step; a write cut short)");
        continue;
      }
      if (record["step"].get<std::int64_t>() <= resumed_step) kept += line + "\n";
    }
  }
  // The records kept for a resumed run replace the file in one step: a crash leaves the old or
  // the new file, never an empty one.
  replace_file(path_, kept);
  out_.open(path_, std::ios::app);
  if (!out_) throw UsageError("cannot write " + path_ + ": check output_dir and its permissions");
}

void TrainingLog::append(const std::string& line) {
  out_ << line << "\n" << std::flush;
  if (!out_)
    fatal_one("cannot write " + path_ + ": " + std::strerror(errno) + " (is the disk full?); stopping: the log would lose records");
}

void TrainingLog::write(const LogRecord& record) { append(to_json_line(record)); }

void TrainingLog::write_eval(std::int64_t step, std::int64_t total_steps, double eval_loss) {
  char line[160];
  std::snprintf(line, sizeof line, "{\"current_steps\": %lld, \"total_steps\": %lld, \"eval_loss\": %.9g, \"step\": %lld}",
                static_cast<long long>(step), static_cast<long long>(total_steps), eval_loss,
                static_cast<long long>(step));
  append(line);
}

}  // namespace lft::train
