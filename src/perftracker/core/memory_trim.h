// Handing freed heap pages back to the system between the phases of offline work (a file's
// events freed before its summary is built; the summaries freed before the localizer's tables).
//
// glibc's malloc_trim() is not safe as the *first* call into glibc's allocator from several
// threads at once: it initializes the main arena (ptmalloc_init) without a lock, and a second
// thread can walk the arena's bins before they are set up (SEGV in mtrim). That first call is
// the normal case whenever malloc itself is not glibc's: under AddressSanitizer, and in users'
// processes with tcmalloc or jemalloc preloaded, glibc's arena is never touched before. So
// every trim goes through one lock; trims are rare (a few per file) and take each arena's lock
// anyway, so serializing them costs nothing measurable.
#pragma once

namespace perftracker {

// Returns the free pages of glibc's heap to the system (malloc_trim(0)); a no-op without
// glibc. Safe to call from any thread, concurrently.
void ReturnFreedMemoryToSystem();

}  // namespace perftracker
