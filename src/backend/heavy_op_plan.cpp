#include "backend/heavy_op_plan.hpp"

#include <cstdio>

#include "core/environment.hpp"
#include "core/text.hpp"

namespace flexkit::backend {

void HeavyOpPlan::pass_over(std::string_view kernel, const CanImplement& answer) {
  if (!passed_over.empty()) passed_over += "; ";
  passed_over += kernel;
  passed_over += ": ";
  passed_over += answer.reason ? answer.reason : "not taken";
}

std::string HeavyOpPlan::describe() const {
  std::string s = kernel_name;
  if (!choices.empty()) s += " " + choices;
  if (workspace_bytes > 0)
    s += ", workspace " + detail::human_bytes(static_cast<double>(workspace_bytes));
  if (!passed_over.empty()) s += " (passed over " + passed_over + ")";
  return s;
}

bool log_enabled() {
  static const bool enabled = detail::env_flag("FLEXKIT_LOG");
  return enabled;
}

void log_plan(std::string_view operation, const HeavyOpPlan& plan, std::string_view problem) {
  // One write per line, so that lines from several threads do not interleave.
  const std::string line =
      detail::cat("flexkit: ", operation, " ", plan.describe(), " for ", problem, "\n");
  std::fputs(line.c_str(), stderr);
}

}  // namespace flexkit::backend
