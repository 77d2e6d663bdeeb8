// What every decoder in wire/ does first: parse a bounded protobuf message, and say in one
// line that a message is corrupt. Internal to wire/ (its .cc files include it); callers of
// the codecs only see their Status.
#pragma once

#include <string>
#include <string_view>

#include "perftracker/core/status.h"

namespace google::protobuf {
class MessageLite;
}  // namespace google::protobuf

namespace perftracker::wire_internal {

// A DataLoss Status: "<what>: <detail> (the message is corrupt, ...; re-send it or ...)".
Status WireDataLoss(std::string_view what, std::string detail);

// Parses `bytes` into `message`; DataLoss naming `what` when the bytes exceed
// kMaxWireMessageBytes or are not a valid message.
Status ParseWireMessage(google::protobuf::MessageLite& message, std::string_view bytes,
                        std::string_view what);

}  // namespace perftracker::wire_internal
