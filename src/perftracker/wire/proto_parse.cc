#include "perftracker/wire/proto_parse.h"

#include <utility>

#include <google/protobuf/message_lite.h>

#include "perftracker/wire/summary_codec.h"

namespace perftracker::wire_internal {

Status WireDataLoss(std::string_view what, std::string detail) {
  return Status::DataLoss(std::string(what) + ": " + std::move(detail) +
                          " (the message is corrupt, truncated, or not a perftracker.v1 " +
                          std::string(what) +
                          "; re-send it or check both sides run the same "
                          "perftracker version)");
}

Status ParseWireMessage(google::protobuf::MessageLite& message, std::string_view bytes,
                        std::string_view what) {
  if (bytes.size() > kMaxWireMessageBytes) {
    return WireDataLoss(what, std::to_string(bytes.size()) + " bytes exceeds the limit of " +
                                  std::to_string(kMaxWireMessageBytes) + " bytes");
  }
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return WireDataLoss(what,
                        "protobuf parsing failed on " + std::to_string(bytes.size()) + " bytes");
  }
  return Status::Ok();
}

}  // namespace perftracker::wire_internal
