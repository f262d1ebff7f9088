// Logging. log0 prints on world rank 0 only (the startup log, progress); log_rank prints on the
// calling rank with a "[rank N]" prefix (problems one rank sees).
#pragma once

#include <string>

namespace lft {

void log0(const std::string& line);
void log_rank(const std::string& line);

}  // namespace lft
