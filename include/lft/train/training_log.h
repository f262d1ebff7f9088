// trainer_log.jsonl: one JSON record per logged step and per evaluation, LlamaFactory's fields.
// Written by one rank (the caller decides which). A resumed run keeps the records up to its
// checkpoint's step (rewritten atomically; a damaged line is dropped with a warning) and
// continues the same file. Every record is flushed; a failed write ends the job.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "lft/train/metrics.h"

namespace lft::train {

class TrainingLog {
 public:
  // Opens <output_dir>/trainer_log.jsonl, keeping the records of steps <= `resumed_step` (0: a
  // new run, the file starts empty). Throws UsageError when it cannot be written.
  TrainingLog(const std::string& output_dir, std::int64_t resumed_step);
  void write(const LogRecord& record);
  void write_eval(std::int64_t step, std::int64_t total_steps, double eval_loss);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& line);

  std::string path_;
  std::ofstream out_;
};

}  // namespace lft::train
