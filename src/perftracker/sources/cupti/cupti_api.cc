#include "perftracker/sources/cupti/cupti_api.h"

#include <dlfcn.h>

#include <vector>

namespace perftracker {
namespace {

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* out) {
  void* sym = dlsym(handle, name);
  *out = reinterpret_cast<Fn>(sym);
  return sym != nullptr;
}

}  // namespace

StatusOr<CuptiApi> LoadCuptiApi(const std::string& path, const std::string& hint) {
  std::vector<std::string> candidates;
  if (!path.empty()) {
    candidates.push_back(path);
  } else {
    if (!hint.empty()) candidates.push_back(hint);
    for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) {
      candidates.emplace_back(name);
    }
  }
  void* handle = nullptr;
  std::string error;
  // A copy the process has loaded already (torch's Kineto links libcupti) comes first: two
  // copies of CUPTI in one process would each think they own the activity API.
  if (path.empty()) {
    for (const char* loaded : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
      handle = dlopen(loaded, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
      if (handle != nullptr) break;
    }
    dlerror();
  }
  for (const std::string& c : candidates) {
    if (handle != nullptr) break;
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* e = dlerror();
    if (error.empty() && e != nullptr) error = e;
  }
  if (handle == nullptr) {
    return Status::NotFound("CUPTI: cannot load libcupti (" + error +
                            "): GPU kernel tracing is off; add the CUDA toolkit's CUPTI "
                            "library directory to LD_LIBRARY_PATH to enable it");
  }
  CuptiApi api;
  api.handle = handle;
  const char* missing = nullptr;
  if (!Resolve(handle, "cuptiSubscribe", &api.subscribe)) missing = "cuptiSubscribe";
  if (!Resolve(handle, "cuptiUnsubscribe", &api.unsubscribe)) missing = "cuptiUnsubscribe";
  if (!Resolve(handle, "cuptiActivityRegisterCallbacks", &api.register_callbacks)) {
    missing = "cuptiActivityRegisterCallbacks";
  }
  if (!Resolve(handle, "cuptiActivityEnable", &api.enable)) missing = "cuptiActivityEnable";
  if (!Resolve(handle, "cuptiActivityDisable", &api.disable)) missing = "cuptiActivityDisable";
  if (!Resolve(handle, "cuptiActivityFlushAll", &api.flush_all)) missing = "cuptiActivityFlushAll";
  if (!Resolve(handle, "cuptiActivityGetNextRecord", &api.get_next_record)) {
    missing = "cuptiActivityGetNextRecord";
  }
  if (!Resolve(handle, "cuptiActivityGetNumDroppedRecords", &api.get_num_dropped_records)) {
    missing = "cuptiActivityGetNumDroppedRecords";
  }
  if (!Resolve(handle, "cuptiGetResultString", &api.get_result_string)) {
    missing = "cuptiGetResultString";
  }
  if (!Resolve(handle, "cuptiGetCallbackName", &api.get_callback_name)) {
    missing = "cuptiGetCallbackName";
  }
  if (!Resolve(handle, "cuptiGetTimestamp", &api.get_timestamp)) missing = "cuptiGetTimestamp";
  // Optional.
  Resolve(handle, "cuptiActivityRegisterTimestampCallback", &api.register_timestamp_callback);
  if (missing != nullptr) {
    dlclose(handle);
    return Status::NotFound(std::string("CUPTI: libcupti has no ") + missing +
                            " (a CUPTI older than this build's headers?): GPU kernel tracing "
                            "is off");
  }
  return api;
}

std::string CuptiResultText(const CuptiApi& api, CUptiResult result) {
  const char* text = nullptr;
  if (api.get_result_string != nullptr && api.get_result_string(result, &text) == CUPTI_SUCCESS &&
      text != nullptr) {
    return text;
  }
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

}  // namespace perftracker
