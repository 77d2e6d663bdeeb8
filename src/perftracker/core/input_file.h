// Opening a file a user named on the command line: never blocks (a FIFO with no writer),
// refuses what is not a regular file (FIFO, device, socket, directory) and says why in one
// line that names the path ("symlink loop", "no such file or directory", ...).
#pragma once

#include <cstddef>
#include <string>

#include "perftracker/core/status.h"

namespace perftracker {

// Returns a descriptor open for reading (blocking, close-on-exec) on a regular file; the
// caller closes it.
StatusOr<int> OpenInputFile(const std::string& path);

// The whole regular file, or an error when it is not one or holds more than max_bytes.
StatusOr<std::string> ReadInputFile(const std::string& path, size_t max_bytes);

// "path: <why>" for an errno from open() or stat() on a path the user named.
Status InputPathError(const std::string& path, int err);

}  // namespace perftracker
