// The web UI's files (HTML, CSS, JS, and the uPlot chart library from npm), embedded into
// the binary at build time by embed_ui.cmake, so the server needs no files and no network
// at run time.
#pragma once

#include <cstddef>
#include <string_view>

namespace perftracker {

struct UiAsset {
  std::string_view url_path;      // "/", "/ui/app.js", ...
  std::string_view content_type;  // "text/javascript; charset=utf-8", ...
  const unsigned char* data;
  size_t size;

  std::string_view bytes() const { return {reinterpret_cast<const char*>(data), size}; }
};

// The asset served at `url_path`, or null.
const UiAsset* FindUiAsset(std::string_view url_path);

}  // namespace perftracker
