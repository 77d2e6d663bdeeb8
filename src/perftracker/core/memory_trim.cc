#include "perftracker/core/memory_trim.h"

#include <mutex>  // also <features.h>, which says whether this is glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace perftracker {

void ReturnFreedMemoryToSystem() {
#if defined(__GLIBC__)
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  malloc_trim(0);
#endif
}

}  // namespace perftracker
