// The trace files a command was pointed at: files as given, directories searched.
#pragma once

#include <string>
#include <vector>

#include "perftracker/core/status.h"

namespace perftracker {

// Expands files and directories (recursively: *.json, *.json.gz) into a sorted list of
// trace files per directory, in the order given. A missing path, an unreadable directory or
// one without trace files is an error naming it.
StatusOr<std::vector<std::string>> ExpandTraceInputs(const std::vector<std::string>& paths);

}  // namespace perftracker
