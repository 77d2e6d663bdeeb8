// The NCCL profiler-plugin interface, versions 4 and 5 (NCCL 2.28 looks for ncclProfiler_v5
// first, then v4 ... v1), declared from NCCL's documentation (ext-profiler/README.md and the
// profiler_v4.h / profiler_v5.h plugin headers) since NCCL's packaged nccl.h does not carry
// them. Layouts must match NCCL's byte for byte: only the fields' names are ours to choose.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int ncclResult_t;  // an enum in nccl.h
inline constexpr ncclResult_t kNcclSuccess = 0;
inline constexpr ncclResult_t kNcclInternalError = 3;
inline constexpr ncclResult_t kNcclInvalidUsage = 5;

// ncclDebugLogLevel
inline constexpr int kNcclLogWarn = 2;
inline constexpr int kNcclLogInfo = 3;
typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

// Event types (the activation mask is a bit set of these).
inline constexpr uint64_t kNcclProfileGroup = 1u << 0;
inline constexpr uint64_t kNcclProfileColl = 1u << 1;
inline constexpr uint64_t kNcclProfileP2p = 1u << 2;
inline constexpr uint64_t kNcclProfileProxyOp = 1u << 3;
inline constexpr uint64_t kNcclProfileProxyStep = 1u << 4;
inline constexpr uint64_t kNcclProfileProxyCtrl = 1u << 5;
inline constexpr uint64_t kNcclProfileKernelCh = 1u << 6;
inline constexpr uint64_t kNcclProfileNetPlugin = 1u << 7;
inline constexpr uint64_t kNcclProfileGroupApi = 1u << 8;
inline constexpr uint64_t kNcclProfileCollApi = 1u << 9;
inline constexpr uint64_t kNcclProfileP2pApi = 1u << 10;
inline constexpr uint64_t kNcclProfileKernelLaunch = 1u << 11;

// ncclProfilerEventState_t (shared by v1..v5).
typedef int ncclProfilerEventState_t;
inline constexpr int kNcclProxyStepSendGpuWait = 8;
inline constexpr int kNcclProxyStepSendWait = 9;
inline constexpr int kNcclProxyStepRecvWait = 10;
inline constexpr int kNcclProxyStepRecvFlushWait = 11;
inline constexpr int kNcclProxyStepRecvGpuWait = 12;
inline constexpr int kNcclProxyOpInProgressV4 = 19;
inline constexpr int kNcclProxyStepSendPeerWaitV4 = 20;
inline constexpr int kNcclKernelChStop = 22;

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void* stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v5_t;

typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v4_t;

// v4 and v5 share this layout.
typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} ncclProfilerEventStateArgs_v5_t;
typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                       int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_v5_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName,
                       uint64_t commHash, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_v4_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

}  // extern "C"
