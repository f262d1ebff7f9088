#include "lft/train/training_log.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/runtime/error.h"
#include "lft/runtime/log.h"

namespace lft::train {

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
  ckpt::write_file_atomically(path_, kept);
  out_.open(path_, std::ios::app);
  if (!out_) throw UsageError("cannot write " + path_ + ": check output_dir and its permissions");
}

void TrainingLog::append(const std::string& line) {
  out_ << line << "\n" << std::flush;
  if (!out_)
    fatal_one("cannot write " + path_ + ": " + describe_write_error(errno, path_.substr(0, path_.find_last_of('/') + 1) + ".") +
              "; stopping: the log would lose records");
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
