// KinetoProcessGroup: the process group of a collective, from the args torch writes on its
// record_param_comms op and its NCCL kernel ("Process Group Name" or, in older traces,
// "Process Group ID"; "Process Group Ranks", "Group size", "Global rank start" / "stride").
//
// "Process Group Ranks" is a string "[0, 1, 2]" of global ranks; torch cuts lists longer than
// 30 after the 30th rank ("[0, 1, ..., 29, ...]"), and then `size` ("Group size") says how many
// there are. A list that is cut, or absent, is rebuilt from the start and stride when the
// trace gives them (a group of evenly spaced ranks, as torch's own subgroups are). A wait
// ("Process Group Ranks": "[]", "Group size": 1) or an event without these args has no group.
#pragma once

#include <optional>

#include "perftracker/core/event_sink.h"
#include "perftracker/sources/kineto/kineto_event_parser.h"

namespace perftracker {

// The group, with id 0 (the importer numbers them); nullopt when the event names none.
std::optional<ProcessGroupInfo> KinetoProcessGroupOf(const KinetoRawEvent& ev);

}  // namespace perftracker
