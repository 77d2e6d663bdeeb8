// The symbols NCCL looks up in libperftracker_nccl_profiler.so: ncclProfiler_v5 (NCCL 2.27+,
// including the 2.28 of the CUDA 13 toolkit) and ncclProfiler_v4 (NCCL 2.25 / 2.26). Each
// entry point copies its version's descriptor into NcclEventDescr and calls NcclProfiler.
// No exception crosses this C ABI.
#include "perftracker/sources/nccl/nccl_profiler.h"

#include <cstdint>

namespace {

using perftracker::NcclEventDescr;
using perftracker::NcclProfiler;

template <typename Descr>
void CopyCommon(const Descr& in, NcclEventDescr* out) {
  out->type = in.type;
  out->parent = in.parentObj;
  out->rank = in.rank;
  switch (in.type) {
    case kNcclProfileColl:
      out->func = in.coll.func;
      out->datatype = in.coll.datatype;
      out->algo = in.coll.algo;
      out->proto = in.coll.proto;
      out->count = in.coll.count;
      out->seq = in.coll.seqNumber;
      out->channels = in.coll.nChannels;
      break;
    case kNcclProfileP2p:
      out->func = in.p2p.func;
      out->datatype = in.p2p.datatype;
      out->count = in.p2p.count;
      out->peer = in.p2p.peer;
      out->channels = in.p2p.nChannels;
      break;
    case kNcclProfileProxyOp:
      out->pid = in.proxyOp.pid;
      out->peer = in.proxyOp.peer;
      out->is_send = in.proxyOp.isSend;
      out->channels = in.proxyOp.channelId;
      break;
    case kNcclProfileProxyStep:
      out->step = in.proxyStep.step;
      break;
    case kNcclProfileKernelCh:
      out->channels = in.kernelCh.channelId;
      out->gpu_timer = in.kernelCh.pTimer;
      break;
    default:
      break;
  }
}

template <typename Descr>
ncclResult_t Start(void* context, void** handle, Descr* descr) {
  try {
    if (descr == nullptr) {
      if (handle != nullptr) *handle = nullptr;
      return kNcclSuccess;
    }
    NcclEventDescr d;
    CopyCommon(*descr, &d);
    return NcclProfiler::Get().StartEvent(context, handle, d);
  } catch (...) {
    if (handle != nullptr) *handle = nullptr;
    return kNcclSuccess;
  }
}

ncclResult_t Stop(void* handle) {
  try {
    return NcclProfiler::Get().StopEvent(handle);
  } catch (...) {
    return kNcclSuccess;
  }
}

ncclResult_t Record(void* handle, ncclProfilerEventState_t state,
                    ncclProfilerEventStateArgs_v5_t* args) {
  try {
    uint64_t value = 0;
    if (args != nullptr) {
      switch (state) {
        case kNcclProxyStepSendGpuWait:
        case kNcclProxyStepSendPeerWaitV4:
        case kNcclProxyStepSendWait:
        case kNcclProxyStepRecvWait:
        case kNcclProxyStepRecvFlushWait:
        case kNcclProxyStepRecvGpuWait:
          value = args->proxyStep.transSize;
          break;
        case kNcclKernelChStop:
          value = args->kernelCh.pTimer;
          break;
        default:
          break;
      }
    }
    return NcclProfiler::Get().RecordEventState(handle, state, value);
  } catch (...) {
    return kNcclSuccess;
  }
}

ncclResult_t Finalize(void* context) {
  try {
    return NcclProfiler::Get().Finalize(context);
  } catch (...) {
    return kNcclSuccess;
  }
}

ncclResult_t InitV5(void** context, uint64_t comm_id, int* mask, const char* name, int nodes,
                    int nranks, int rank, ncclDebugLogger_t log) {
  try {
    return NcclProfiler::Get().Init(context, comm_id, mask, name, nodes, nranks, rank, log);
  } catch (...) {
    return kNcclInternalError;
  }
}

ncclResult_t InitV4(void** context, int* mask, const char* name, uint64_t comm_hash, int nodes,
                    int nranks, int rank, ncclDebugLogger_t log) {
  return InitV5(context, comm_hash, mask, name, nodes, nranks, rank, log);
}

ncclResult_t StartV5(void* context, void** handle, ncclProfilerEventDescr_v5_t* d) {
  return Start(context, handle, d);
}
ncclResult_t StartV4(void* context, void** handle, ncclProfilerEventDescr_v4_t* d) {
  return Start(context, handle, d);
}

}  // namespace

extern "C" {

__attribute__((visibility("default")))
ncclProfiler_v5_t ncclProfiler_v5 = {"perftracker", InitV5, StartV5, Stop, Record, Finalize};

__attribute__((visibility("default")))
ncclProfiler_v4_t ncclProfiler_v4 = {"perftracker", InitV4, StartV4, Stop, Record, Finalize};

}  // extern "C"
