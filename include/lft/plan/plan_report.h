// What `lftrain --plan` prints: the ranked layouts with the config lines of the best, or one
// layout's prediction with every collective (docs/plan.md shows both).
#pragma once

#include <string>

#include "lft/plan/planner.h"

namespace lft::plan {

// The table of PlanResult::ranked, the config lines of the best few, what the engines refused,
// and, when nothing fits, the smallest layout and how far it is over.
std::string plan_text(const PlanRequest& request, const PlanResult& result);

// --this-layout: the layout, its memory, the step's parts and the collectives one by one.
std::string layout_text(const PlanRequest& request, const PlanResult& context, const Candidate& candidate);

}  // namespace lft::plan
