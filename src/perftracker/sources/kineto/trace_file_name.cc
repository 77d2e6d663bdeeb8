#include "perftracker/sources/kineto/trace_file_name.h"

#include <cctype>
#include <charconv>
#include <string_view>

namespace perftracker {
namespace {

bool IsDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsDigit(c)) return false;
  }
  return true;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

TraceFileName ParseTraceFileName(const std::string& path) {
  TraceFileName name;
  const size_t slash = path.find_last_of('/');
  name.base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string_view stem = name.base;
  for (std::string_view suffix : {".pt.trace.json.gz", ".pt.trace.json"}) {
    if (EndsWith(stem, suffix)) {
      stem.remove_suffix(suffix.size());
      break;
    }
  }
  if (stem.size() == name.base.size()) return name;  // not the handler's name
  // "<worker_name>.<time>": the worker name may itself hold dots (a host's domain).
  const size_t dot = stem.find_last_of('.');
  if (dot == std::string_view::npos || dot == 0 || !AllDigits(stem.substr(dot + 1))) return name;
  name.worker = std::string(stem.substr(0, dot));
  const size_t underscore = name.worker.find_last_of('_');
  if (underscore == std::string::npos || underscore == 0) return name;
  const std::string_view pid = std::string_view(name.worker).substr(underscore + 1);
  if (!AllDigits(pid) || pid.size() > 18) return name;
  int64_t value = -1;
  std::from_chars(pid.data(), pid.data() + pid.size(), value);
  name.pid = value;
  name.host = name.worker.substr(0, underscore);
  return name;
}

bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    if (IsDigit(a[i]) && IsDigit(b[j])) {
      // Compare the two digit runs as numbers: without leading zeros, the longer is larger.
      size_t ie = i;
      size_t je = j;
      while (ie < a.size() && IsDigit(a[ie])) ++ie;
      while (je < b.size() && IsDigit(b[je])) ++je;
      size_t is = i;
      size_t js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.compare(is, ie - is, b, js, je - js);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i;
    ++j;
  }
  if ((i < a.size()) != (j < b.size())) return j < b.size();
  return a < b;
}

}  // namespace perftracker
