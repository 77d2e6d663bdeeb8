// Private to wire/: conversion between control.proto's generated types and the plain structs
// of control_messages.h. Only wire/*.cc include this header (it pulls in generated code).
//
// Decoding validates what the server relies on: known message kind, registration fields
// present and within kMaxControl* limits, ranks >= 0, iteration arrays of equal length. A
// message that breaks a rule is an InvalidArgument Status with one line naming the field (a
// message of a kind this side does not know is answered so, and the stream goes on). A
// reason that a newer peer may add is not refused: a trigger's reads as manual (the detail
// names it), a window's as manual.
#pragma once

#include "control.pb.h"
#include "perftracker/core/status.h"
#include "perftracker/wire/control_messages.h"

namespace perftracker::wire_internal {

void ToProto(const CollectorMessage& message, perftracker::v1::CollectorMessage* out);
StatusOr<CollectorMessage> FromProto(const perftracker::v1::CollectorMessage& message);

void ToProto(const ServerMessage& message, perftracker::v1::ServerMessage* out);
StatusOr<ServerMessage> FromProto(const perftracker::v1::ServerMessage& message);

// gRPC's own log lines (it prints errors such as failed handshakes to stderr) are dropped
// unless GRPC_VERBOSITY is set: perftracker reports every failure itself, in one line.
// Idempotent; called before the first server or client is made.
void QuietGrpcLogging();

}  // namespace perftracker::wire_internal
