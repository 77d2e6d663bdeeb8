// RankTraceFile: one rank's raw window events on the local disk, for the live Perfetto
// export (docs/perfetto-export.md "Live mode"). The node collector records a rank's window
// events (bounded: RankTraceRecorder's cap) and writes them here on its own host; the export
// reads them back into a RankTrace and merges the ranks into one timeline.
//
// Format (little-endian, this machine's layout; read by the same build that wrote it):
//   "PTRANK1\n"                      magic and version
//   i32 rank, str host, str source   (str = u32 length + bytes)
//   u32 n, n x (u8 kind, u32 parent, str name)         the FunctionTable in id order
//   u32 n, n x (u32 id, u8 kind, i32 device, str name) the tracks
//   u32 n, n x (u32 track, u64 count, i64 ns)          events not recorded (over the cap)
//   u64 n, n x Event (40 B, core/event.h)              the events
// A file that does not parse is refused with one message naming it and what is wrong; the
// reader checks every count against the bytes left, so a truncated or hostile file cannot
// make it allocate more than the file holds.
#pragma once

#include <memory>
#include <string>

#include "perftracker/core/status.h"
#include "perftracker/report/rank_trace.h"

namespace perftracker {

// Writes `trace` to `path` (to a temporary name, then renamed) with `mode`. `functions` is the
// table the events' function ids refer to (the trace's own when null: a recorder that shares
// its owner's table passes that one).
Status WriteRankTraceFile(const std::string& path, const RankTrace& trace,
                          const FunctionTable* functions = nullptr, unsigned mode = 0600);

StatusOr<std::unique_ptr<RankTrace>> ReadRankTraceFile(const std::string& path);

}  // namespace perftracker
