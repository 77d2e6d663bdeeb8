// API tokens: how clients of the HTTP server (and collectors) prove they may talk to it.
// A token is an opaque secret string; the server compares what a request presents with the
// configured one in constant time, so response timing leaks nothing about how many leading
// characters were right.
#pragma once

#include <string>
#include <string_view>

#include "perftracker/core/status.h"

namespace perftracker {

// True when `presented` equals `expected`. The time taken depends only on expected.size(),
// never on where the strings first differ nor on the presented length.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected);

// A fresh random token: 32 bytes from the kernel's CSPRNG (getrandom), hex-encoded.
StatusOr<std::string> GenerateApiToken();

// Reads a token from a file (first line, surrounding whitespace trimmed). Errors name the
// file: missing, unreadable, empty, or shorter than kMinApiTokenLength characters.
inline constexpr size_t kMinApiTokenLength = 16;
StatusOr<std::string> ReadApiTokenFile(const std::string& path);

}  // namespace perftracker
