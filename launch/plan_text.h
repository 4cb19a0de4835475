// A launch plan as text a person can read and paste into a shell: what --dry-run prints and
// what the launcher logs before it starts each process.
#pragma once

#include <string>
#include <string_view>

#include "launch/command_plan.h"

namespace k3::launch {

std::string ShellQuote(std::string_view word);  // 'single-quoted' only when it needs to be
// "NAME=value prog args > log 2>&1"
std::string ShellLine(const Command& command);
// Every command in start order, with each app file's contents.
std::string DescribePlan(const LaunchPlan& plan);

}  // namespace k3::launch
