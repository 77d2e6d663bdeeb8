#include "perftracker/wire/control_convert.h"

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include <grpc/support/log.h>

namespace perftracker::wire_internal {
namespace {

namespace pb = perftracker::v1;

// Overload set for std::visit.
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

void RankToProto(const WorkerInfo& r, pb::RankInfo* out) {
  out->set_rank(r.rank);
  out->set_world_size(r.world_size);
  out->set_local_rank(r.local_rank);
  out->set_pid(r.pid);
  out->set_host(r.host);
}

StatusOr<WorkerInfo> RankFromProto(const pb::RankInfo& r, const char* what) {
  if (r.rank() < 0) {
    return Status::InvalidArgument(std::string(what) + ": rank " + std::to_string(r.rank()) +
                                   " is negative");
  }
  if (r.world_size() < 0 || r.host().size() > kMaxControlIdBytes) {
    return Status::InvalidArgument(std::string(what) + ": rank " + std::to_string(r.rank()) +
                                   " has a negative world size or a host name over " +
                                   std::to_string(kMaxControlIdBytes) + " bytes");
  }
  WorkerInfo out;
  out.rank = r.rank();
  out.world_size = r.world_size();
  out.local_rank = r.local_rank();
  out.pid = r.pid();
  out.host = r.host();
  return out;
}

Status CheckText(const std::string& text, size_t limit, const char* what) {
  if (text.size() > limit) {
    return Status::InvalidArgument(std::string(what) + " is " + std::to_string(text.size()) +
                                   " bytes, over the limit of " + std::to_string(limit));
  }
  return Status::Ok();
}

void DropGrpcLog(gpr_log_func_args* /*args*/) {}

}  // namespace

void QuietGrpcLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function(&DropGrpcLog);
  });
}

void ToProto(const CollectorMessage& message, pb::CollectorMessage* out) {
  std::visit(Overloaded{
                 [&](const ControlRegistration& m) {
                   pb::Registration* r = out->mutable_registration();
                   r->set_protocol_version(m.protocol_version);
                   r->set_job_id(m.job_id);
                   r->set_host(m.host);
                   r->set_title(m.title);
                   for (const WorkerInfo& rank : m.ranks) RankToProto(rank, r->add_ranks());
                   r->mutable_hardware()->set_description(m.hardware.description);
                   r->mutable_hardware()->set_cpus(m.hardware.cpus);
                   r->mutable_hardware()->set_memory_bytes(m.hardware.memory_bytes);
                 },
                 [&](const ControlHeartbeat& m) {
                   out->mutable_heartbeat()->set_sent_ns(m.sent_ns);
                   out->mutable_heartbeat()->set_dropped_messages(m.dropped_messages);
                 },
                 [&](const WorkerInfo& m) { RankToProto(m, out->mutable_worker_joined()); },
                 [&](const ControlWorkerLeft& m) {
                   out->mutable_worker_left()->set_rank(m.rank);
                   out->mutable_worker_left()->set_clean(m.clean);
                 },
                 [&](const ControlTrainingEnded& m) {
                   out->mutable_training_ended()->set_rank(m.rank);
                   out->mutable_training_ended()->set_detail(m.detail);
                 },
                 [&](const ControlJobExited& m) {
                   pb::JobExited* e = out->mutable_job_exited();
                   e->set_exit_code(m.exit_code);
                 },
                 [&](const ControlIterations& m) {
                   pb::Iterations* it = out->mutable_iterations();
                   for (const ControlIteration& p : m.points) {
                     it->add_ranks(p.rank);
                     it->add_end_ns(p.end_ns);
                     it->add_duration_ns(p.duration_ns);
                   }
                 },
                 [&](const ControlTrigger& m) {
                   out->mutable_trigger()->set_rank(m.rank);
                   out->mutable_trigger()->set_reason(std::string(WindowReasonName(m.reason)));
                   out->mutable_trigger()->set_detail(m.detail);
                 },
                 [&](const ControlStacks& m) {
                   pb::Stacks* s = out->mutable_stacks();
                   s->set_window(m.window);
                   s->set_rank(m.rank);
                   s->set_available(m.available);
                   s->set_text(m.text);
                 },
                 [&](const ControlSummary& m) {
                   pb::Summary* s = out->mutable_summary();
                   s->set_window(m.window);
                   s->set_rank(m.rank);
                   s->set_worker_summary(m.worker_summary);
                 },
                 [&](const ControlDigest& m) {
                   pb::Digest* d = out->mutable_digest();
                   d->set_window(m.window);
                   d->set_rank(m.rank);
                   d->set_worker_digest(m.worker_digest);
                 },
                 [&](const ControlWindowRecording& m) {
                   pb::WindowRecording* r = out->mutable_window_recording();
                   r->set_window(m.window);
                   r->set_rank(m.rank);
                   r->set_offset(m.offset);
                   r->set_data(m.data);
                   r->set_last(m.last);
                   r->set_missing(m.missing);
                 },
                 [&](const ControlSummariesNotKept& m) {
                   pb::SummariesNotKept* n = out->mutable_summaries_not_kept();
                   n->set_window(m.window);
                   for (int32_t rank : m.ranks) n->add_ranks(rank);
                   n->set_reason(m.reason);
                 },
             },
             message);
}

StatusOr<CollectorMessage> FromProto(const pb::CollectorMessage& message) {
  switch (message.body_case()) {
    case pb::CollectorMessage::kRegistration: {
      const pb::Registration& r = message.registration();
      ControlRegistration out;
      out.protocol_version = r.protocol_version();
      if (out.protocol_version != kControlProtocolVersion) {
        return Status::InvalidArgument("registration: protocol version " +
                                       std::to_string(out.protocol_version) +
                                       " is not supported (this server speaks " +
                                       std::to_string(kControlProtocolVersion) + ")");
      }
      if (r.job_id().empty()) return Status::InvalidArgument("registration: the job id is empty");
      PERFTRACKER_RETURN_IF_ERROR(
          CheckText(r.job_id(), kMaxControlIdBytes, "registration: job id"));
      PERFTRACKER_RETURN_IF_ERROR(CheckText(r.host(), kMaxControlIdBytes, "registration: host"));
      PERFTRACKER_RETURN_IF_ERROR(
          CheckText(r.title(), kMaxControlTextBytes, "registration: title"));
      PERFTRACKER_RETURN_IF_ERROR(CheckText(r.hardware().description(), kMaxControlTextBytes,
                                            "registration: hardware description"));
      if (static_cast<size_t>(r.ranks_size()) > kMaxRanksPerCollector) {
        return Status::InvalidArgument("registration: " + std::to_string(r.ranks_size()) +
                                       " ranks, over the limit of " +
                                       std::to_string(kMaxRanksPerCollector));
      }
      out.job_id = r.job_id();
      out.host = r.host();
      out.title = r.title();
      for (const pb::RankInfo& rank : r.ranks()) {
        StatusOr<WorkerInfo> c = RankFromProto(rank, "registration");
        if (!c.ok()) return c.status();
        out.ranks.push_back(std::move(c).value());
      }
      out.hardware.description = r.hardware().description();
      out.hardware.cpus = r.hardware().cpus();
      out.hardware.memory_bytes = r.hardware().memory_bytes();
      return CollectorMessage(std::move(out));
    }
    case pb::CollectorMessage::kHeartbeat:
      return CollectorMessage(
          ControlHeartbeat{message.heartbeat().sent_ns(), message.heartbeat().dropped_messages()});
    case pb::CollectorMessage::kWorkerJoined: {
      StatusOr<WorkerInfo> c = RankFromProto(message.worker_joined(), "worker_joined");
      if (!c.ok()) return c.status();
      return CollectorMessage(std::move(c).value());
    }
    case pb::CollectorMessage::kWorkerLeft:
      if (message.worker_left().rank() < 0) {
        return Status::InvalidArgument("worker_left: rank is negative");
      }
      return CollectorMessage(
          ControlWorkerLeft{message.worker_left().rank(), message.worker_left().clean()});
    case pb::CollectorMessage::kTrainingEnded:
      if (message.training_ended().rank() < 0) {
        return Status::InvalidArgument("training_ended: rank is negative");
      }
      return CollectorMessage(
          ControlTrainingEnded{message.training_ended().rank(), message.training_ended().detail()});
    case pb::CollectorMessage::kJobExited: {
      const int32_t code = message.job_exited().exit_code();
      if (code < 0 || code > 255) {
        return Status::InvalidArgument("job_exited: exit code " + std::to_string(code) +
                                       " is not in [0, 255]");
      }
      return CollectorMessage(ControlJobExited{code});
    }
    case pb::CollectorMessage::kIterations: {
      const pb::Iterations& it = message.iterations();
      const int n = it.ranks_size();
      if (it.end_ns_size() != n || it.duration_ns_size() != n) {
        return Status::InvalidArgument(
            "iterations: ranks, end_ns and duration_ns differ in length (" + std::to_string(n) +
            ", " + std::to_string(it.end_ns_size()) + ", " + std::to_string(it.duration_ns_size()) +
            ")");
      }
      if (static_cast<size_t>(n) > kMaxIterationsPerBatch) {
        return Status::InvalidArgument("iterations: " + std::to_string(n) +
                                       " points in one batch, over the limit of " +
                                       std::to_string(kMaxIterationsPerBatch));
      }
      ControlIterations out;
      out.points.reserve(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        if (it.ranks(i) < 0 || it.duration_ns(i) < 0) {
          return Status::InvalidArgument("iterations: point " + std::to_string(i) +
                                         " has a negative rank or duration");
        }
        out.points.push_back({it.ranks(i), it.end_ns(i), it.duration_ns(i)});
      }
      return CollectorMessage(std::move(out));
    }
    case pb::CollectorMessage::kTrigger: {
      const pb::Trigger& t = message.trigger();
      if (t.rank() < 0) return Status::InvalidArgument("trigger: rank is negative");
      PERFTRACKER_RETURN_IF_ERROR(CheckText(t.detail(), kMaxControlTextBytes, "trigger: detail"));
      PERFTRACKER_RETURN_IF_ERROR(CheckText(t.reason(), kMaxControlIdBytes, "trigger: reason"));
      ControlTrigger trigger{t.rank(), WindowReason::kManual, t.detail()};
      if (!ParseWindowReason(t.reason(), &trigger.reason)) {
        // A reason this server does not know (a newer collector's) opens a window all the
        // same, as a manual one: refused, the slowdown that collector saw would go
        // undiagnosed. The detail keeps what it was.
        trigger.reason = WindowReason::kManual;
        trigger.detail = "reason '" + t.reason().substr(0, 64) +
                         "', which this server does not know (a newer collector?)" +
                         (t.detail().empty() ? "" : ": " + t.detail());
      }
      return CollectorMessage(std::move(trigger));
    }
    case pb::CollectorMessage::kStacks: {
      const pb::Stacks& s = message.stacks();
      if (s.rank() < 0) return Status::InvalidArgument("stacks: rank is negative");
      PERFTRACKER_RETURN_IF_ERROR(CheckText(s.text(), kMaxControlTextBytes, "stacks: text"));
      return CollectorMessage(ControlStacks{s.window(), s.rank(), s.available(), s.text()});
    }
    case pb::CollectorMessage::kSummary: {
      const pb::Summary& s = message.summary();
      if (s.rank() < 0) return Status::InvalidArgument("summary: rank is negative");
      if (s.window() == 0) return Status::InvalidArgument("summary: window id 0 does not exist");
      return CollectorMessage(ControlSummary{s.window(), s.rank(), s.worker_summary()});
    }
    case pb::CollectorMessage::kDigest: {
      const pb::Digest& d = message.digest();
      if (d.rank() < 0) return Status::InvalidArgument("digest: rank is negative");
      if (d.window() == 0) return Status::InvalidArgument("digest: window id 0 does not exist");
      PERFTRACKER_RETURN_IF_ERROR(
          CheckText(d.worker_digest(), kMaxControlDigestBytes, "digest: worker digest"));
      return CollectorMessage(ControlDigest{d.window(), d.rank(), d.worker_digest()});
    }
    case pb::CollectorMessage::kWindowRecording: {
      const pb::WindowRecording& r = message.window_recording();
      if (r.rank() < 0) return Status::InvalidArgument("window_recording: rank is negative");
      if (r.window() == 0) {
        return Status::InvalidArgument("window_recording: window id 0 does not exist");
      }
      PERFTRACKER_RETURN_IF_ERROR(
          CheckText(r.data(), kMaxRecordingChunkBytes, "window_recording: data"));
      PERFTRACKER_RETURN_IF_ERROR(
          CheckText(r.missing(), kMaxControlIdBytes * 4, "window_recording: missing"));
      if (!r.missing().empty() && (!r.data().empty() || !r.last())) {
        return Status::InvalidArgument(
            "window_recording: a missing recording carries data or is not the last chunk");
      }
      return CollectorMessage(ControlWindowRecording{r.window(), r.rank(), r.offset(), r.data(),
                                                     r.last(), r.missing()});
    }
    case pb::CollectorMessage::kSummariesNotKept: {
      const pb::SummariesNotKept& n = message.summaries_not_kept();
      if (n.window() == 0) {
        return Status::InvalidArgument("summaries_not_kept: window id 0 does not exist");
      }
      if (static_cast<size_t>(n.ranks_size()) > kMaxRanksPerCollector) {
        return Status::InvalidArgument("summaries_not_kept: " + std::to_string(n.ranks_size()) +
                                       " ranks, over the limit of " +
                                       std::to_string(kMaxRanksPerCollector));
      }
      PERFTRACKER_RETURN_IF_ERROR(
          CheckText(n.reason(), kMaxControlIdBytes * 4, "summaries_not_kept: reason"));
      ControlSummariesNotKept out;
      out.window = n.window();
      out.reason = n.reason();
      for (int32_t rank : n.ranks()) {
        if (rank < 0) return Status::InvalidArgument("summaries_not_kept: a rank is negative");
        out.ranks.push_back(rank);
      }
      return CollectorMessage(std::move(out));
    }
    case pb::CollectorMessage::BODY_NOT_SET:
      break;
  }
  return Status::InvalidArgument("collector message of an unknown kind (a newer collector?)");
}

void ToProto(const ServerMessage& message, pb::ServerMessage* out) {
  std::visit(Overloaded{
                 [&](const ControlRegistered& m) {
                   pb::Registered* r = out->mutable_registered();
                   r->set_collector_id(m.collector_id);
                   r->set_server_time_ns(m.server_time_ns);
                   r->set_send_digests(m.send_digests);
                   r->set_takes_summaries_not_kept(m.takes_summaries_not_kept);
                 },
                 [&](const WindowSpec& m) {
                   pb::Window* w = out->mutable_start_window();
                   w->set_id(m.id);
                   w->set_start_ns(m.start_ns);
                   w->set_duration_ns(m.duration_ns);
                   w->set_reason(std::string(WindowReasonName(m.reason)));
                 },
                 [&](const ControlDumpStacks& m) { out->set_dump_stacks(m.window); },
                 [&](const ControlEndWindow& m) { out->set_end_window_now(m.window); },
                 [&](const ControlRejected& m) { out->mutable_rejected()->set_error(m.error); },
                 [&](const ControlRequestSummaries& m) {
                   pb::RequestSummaries* r = out->mutable_request_summaries();
                   r->set_window(m.window);
                   for (int32_t rank : m.ranks) r->add_ranks(rank);
                 },
                 [&](const ControlWindowDiagnosed& m) { out->set_window_diagnosed(m.window); },
                 [&](const ControlSendRecordings& m) { out->set_send_recordings(m.window); },
             },
             message);
}

StatusOr<ServerMessage> FromProto(const pb::ServerMessage& message) {
  switch (message.body_case()) {
    case pb::ServerMessage::kRegistered:
      return ServerMessage(ControlRegistered{
          message.registered().collector_id(), message.registered().server_time_ns(),
          message.registered().send_digests(), message.registered().takes_summaries_not_kept()});
    case pb::ServerMessage::kStartWindow: {
      const pb::Window& w = message.start_window();
      if (w.id() == 0 || w.duration_ns() <= 0) {
        return Status::InvalidArgument("start_window: window id 0 or a duration <= 0");
      }
      WindowSpec window{w.id(), w.start_ns(), w.duration_ns(), WindowReason::kManual};
      // A reason this collector does not know (another version's) opens the window all the
      // same: the reason only names it.
      if (!ParseWindowReason(w.reason(), &window.reason)) window.reason = WindowReason::kManual;
      return ServerMessage(window);
    }
    case pb::ServerMessage::kDumpStacks:
      return ServerMessage(ControlDumpStacks{message.dump_stacks()});
    case pb::ServerMessage::kEndWindowNow:
      return ServerMessage(ControlEndWindow{message.end_window_now()});
    case pb::ServerMessage::kRejected:
      return ServerMessage(ControlRejected{message.rejected().error()});
    case pb::ServerMessage::kRequestSummaries: {
      const pb::RequestSummaries& r = message.request_summaries();
      if (r.window() == 0) {
        return Status::InvalidArgument("request_summaries: window id 0 does not exist");
      }
      ControlRequestSummaries out;
      out.window = r.window();
      out.ranks.assign(r.ranks().begin(), r.ranks().end());
      return ServerMessage(std::move(out));
    }
    case pb::ServerMessage::kWindowDiagnosed:
      return ServerMessage(ControlWindowDiagnosed{message.window_diagnosed()});
    case pb::ServerMessage::kSendRecordings:
      if (message.send_recordings() == 0) {
        return Status::InvalidArgument("send_recordings: window id 0 does not exist");
      }
      return ServerMessage(ControlSendRecordings{message.send_recordings()});
    case pb::ServerMessage::BODY_NOT_SET:
      break;
  }
  return Status::InvalidArgument("server message of an unknown kind (a newer server?)");
}

}  // namespace perftracker::wire_internal
