// The mode of the files perftracker writes that name hosts, paths and code (report files, a
// new SQLite store): 0600, the owner's only, unless the user says otherwise with
// `--report-mode` (e.g. 0640 to share reports with a group); the report directories it
// creates get the same bits plus x wherever r is set (0700, 0750). One process-wide
// setting, like the umask it complements: set once at startup, before other threads write.
// The token file is always 0600 and is not affected.
#pragma once

#include <sys/types.h>

#include <string>

#include "perftracker/core/status.h"

namespace perftracker {

mode_t PrivateFileMode();
mode_t PrivateDirMode();

// `octal` is e.g. "0640" or "640": read/write bits only, the owner's read and write
// included. Errors say what is wrong ("--report-mode 0604: ...").
Status SetPrivateFileMode(const std::string& octal);

}  // namespace perftracker
