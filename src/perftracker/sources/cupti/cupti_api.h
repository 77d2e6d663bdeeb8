// CuptiApi: the CUPTI entry points the activity tracer uses, as function pointers with the
// exact signatures of the toolkit's headers. LoadCuptiApi() fills them from libcupti with
// dlopen/dlsym, so nothing links libcupti: a process without it (or without a GPU driver)
// only loses CUPTI tracing. Tests fill the table with scripted fakes.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <memory>
#include <string>

#include "perftracker/core/status.h"

namespace perftracker {

struct CuptiApi {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  // Optional (CUPTI >= 11.6): nullptr when absent.
  CUptiResult (*register_timestamp_callback)(CUpti_TimestampCallbackFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*get_next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*get_num_dropped_records)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*get_result_string)(CUptiResult, const char**) = nullptr;
  CUptiResult (*get_callback_name)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;
  CUptiResult (*get_timestamp)(uint64_t*) = nullptr;

  // The library handle when loaded with LoadCuptiApi (closed by the deleter: never while
  // CUPTI may still call back into this process).
  void* handle = nullptr;
};

// Loads libcupti and resolves every required symbol: from `path` when given (only there);
// else the copy the process has already loaded (torch's Kineto links one), else `hint` (e.g.
// the copy torch's wheel ships outside the loader's path), else "libcupti.so",
// "libcupti.so.13", "libcupti.so.12" on the loader's path. Fails with one line naming the
// library or the missing symbol.
StatusOr<CuptiApi> LoadCuptiApi(const std::string& path = "", const std::string& hint = "");

// "CUPTI_ERROR_..." text for a result (the library's own, or the number).
std::string CuptiResultText(const CuptiApi& api, CUptiResult result);

}  // namespace perftracker
