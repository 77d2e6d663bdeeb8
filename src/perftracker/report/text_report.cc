// The terminal report: the verdict first, then the material findings, minor ones as a
// count, notes, and where to look next. It fits one screen for a normal diagnosis: the top
// finding is always shown in full, further material findings in full while the whole
// report stays within kLineBudget lines, one line each otherwise. Every line is at most
// options.width columns (ANSI colour codes do not count).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "perftracker/report/format.h"
#include "perftracker/report/report.h"
#include "perftracker/report/report_model.h"

namespace perftracker {
namespace {

using report::DisplayWidth;
using report::Finite;
using report::RanksLabel;
using report::SanitizeText;
using report::TruncateEnd;
using report::TruncateStart;
using report::WrapText;

constexpr size_t kLineBudget = 40;
constexpr size_t kMinWidth = 40;
constexpr size_t kMaxWidth = 1000;
constexpr size_t kFirstEvidence = 4;   // evidence lines of the top finding
constexpr size_t kOtherEvidence = 3;   // ... of the other findings shown in full
constexpr size_t kMinorShown = 3;
constexpr size_t kOtherMaterialShown = 5;  // one-liners of material findings not in full
constexpr size_t kNotesShown = 4;
constexpr size_t kNoteLinesFew = 2;    // wrapped lines per note when there are few notes
constexpr size_t kFewNotes = 2;
constexpr size_t kLabelWidth = 11;     // "call path  "
constexpr size_t kMaxEvidenceLabel = 36;
const std::string kIndent = "   ";

// ANSI SGR styles.
constexpr const char* kBold = "\x1b[1m";
constexpr const char* kRed = "\x1b[1;31m";
constexpr const char* kGreen = "\x1b[1;32m";
constexpr const char* kYellow = "\x1b[33m";
constexpr const char* kCyan = "\x1b[36m";
constexpr const char* kDim = "\x1b[2m";
constexpr const char* kReset = "\x1b[0m";

struct Piece {
  std::string text;
  const char* style = nullptr;
};

// Lays pieces out on one line of at most width columns, cutting the piece that overflows.
class LineWriter {
 public:
  LineWriter(size_t width, bool color) : width_(width), color_(color) {}

  std::string Compose(const std::vector<Piece>& pieces) const {
    std::string out;
    size_t used = 0;
    for (const Piece& p : pieces) {
      if (used >= width_ || p.text.empty()) continue;
      const std::string t = TruncateEnd(p.text, width_ - used);
      used += DisplayWidth(t);
      out += Paint(t, p.style);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  }

  std::string Paint(const std::string& text, const char* style) const {
    if (!color_ || !style || text.empty()) return text;
    return std::string(style) + text + kReset;
  }

  // "   label      value", the value cut to fit.
  std::string Field(std::string_view label, const std::string& value,
                    const char* value_style = nullptr) const {
    std::string padded(label);
    padded.resize(std::max(kLabelWidth, label.size()), ' ');
    return Compose({{kIndent, nullptr}, {padded, kDim}, {value, value_style}});
  }

  size_t width() const { return width_; }

 private:
  size_t width_;
  bool color_;
};

// The innermost frames of a call path ("a > b > leaf") that fit in width, cut at a frame
// boundary: "… > b > leaf".
std::string ShortCallPath(const std::string& key, size_t width) {
  if (DisplayWidth(key) <= width) return key;
  constexpr std::string_view kSep = " > ";
  const std::string kCut = "… > ";
  std::string kept;
  size_t end = key.size();
  while (end != std::string::npos && end > 0) {
    const size_t sep = key.rfind(kSep, end - 1);
    const size_t begin = sep == std::string::npos ? 0 : sep + kSep.size();
    const std::string candidate = key.substr(begin, end - begin) + (kept.empty() ? "" : std::string(kSep) + kept);
    if (DisplayWidth(kCut) + DisplayWidth(candidate) > width) break;
    kept = candidate;
    if (sep == std::string::npos) break;
    end = sep;
  }
  if (kept.empty()) return TruncateStart(key, width);
  return kCut + kept;
}

std::string WorkersOf(const Finding& f, int32_t num_workers, size_t max_chars) {
  return RanksLabel(f.workers, num_workers, max_chars);
}

// "#4 PT-CODE rank 5 · fn · 1.2 ms/iter (3.0%)"
std::string OneLiner(const report::ReportModel& model, const Finding& f, size_t index,
                     int32_t num_workers, size_t width) {
  std::string s = fmt::format("#{} {} {}", index + 1, SanitizeText(f.code),
                              WorkersOf(f, num_workers, width / 3));
  if (!f.function.empty()) s += " · " + SanitizeText(f.function);
  s += " · " + model.ShortLostPhrase(f);
  return s;
}

std::vector<std::string> DetailedFinding(const report::ReportModel& model, const Finding& f,
                                         size_t index, size_t max_evidence,
                                         const LineWriter& w) {
  const size_t width = w.width();
  const int32_t n = model.num_workers();
  std::vector<std::string> lines;
  const char* code_style = f.material ? kRed : kYellow;
  lines.push_back(w.Compose({{fmt::format("#{} ", index + 1), kBold},
                             {SanitizeText(f.code), code_style},
                             {"  ", nullptr},
                             {std::string(FindingCategoryName(f.category)), kCyan},
                             {"  ", nullptr},
                             {WorkersOf(f, n, width / 2), kBold}}));
  for (const std::string& l : WrapText(SanitizeText(f.title), width, kIndent, kIndent)) {
    lines.push_back(w.Paint(l, kBold));
  }
  const size_t value_width = width > kIndent.size() + kLabelWidth
                                 ? width - kIndent.size() - kLabelWidth
                                 : 1;
  if (!f.function.empty()) lines.push_back(w.Field("function", SanitizeText(f.function)));
  if (!f.function_key.empty() && f.function_key != f.function) {
    lines.push_back(w.Field("call path", ShortCallPath(SanitizeText(f.function_key), value_width)));
  }
  if (!f.resource.empty()) lines.push_back(w.Field("resource", SanitizeText(f.resource)));
  lines.push_back(w.Field("lost", model.LostPhrase(f), f.material ? kBold : nullptr));
  if (!f.victims.empty()) {
    std::string victims = RanksLabel(f.victims, n, value_width / 2);
    const bool one = f.victims.size() == 1;
    victims += one ? " waits for it" : " wait for it";
    const std::string where = model.VictimWait(f);
    if (!where.empty()) victims += " in " + where;
    lines.push_back(w.Field("victims", victims));
  }
  const size_t shown = std::min(max_evidence, f.evidence.size());
  size_t label_width = 0;
  for (size_t i = 0; i < shown; ++i) {
    label_width = std::max(label_width, DisplayWidth(SanitizeText(f.evidence[i].label)));
  }
  label_width = std::min(label_width, kMaxEvidenceLabel);
  for (size_t i = 0; i < shown; ++i) {
    std::string label = TruncateEnd(SanitizeText(f.evidence[i].label), label_width);
    label.append(label_width - DisplayWidth(label), ' ');
    const std::string line_label = i == 0 ? "evidence" : "";
    std::string padded(line_label);
    padded.resize(kLabelWidth, ' ');
    lines.push_back(w.Compose({{kIndent, nullptr},
                               {padded, kDim},
                               {label + "  ", nullptr},
                               {SanitizeText(f.evidence[i].value), kBold}}));
  }
  if (f.evidence.size() > shown) {
    const size_t more = f.evidence.size() - shown;
    lines.push_back(w.Field("", fmt::format("… {} more evidence line{} (--format json, --html)", more,
                                            more == 1 ? "" : "s"),
                            kDim));
  }
  return lines;
}

}  // namespace

std::string RenderText(const ReportInput& input, const TextOptions& options) {
  const report::ReportModel model(input);
  const Diagnosis& d = model.diagnosis();
  const size_t width = std::clamp<size_t>(
      static_cast<size_t>(std::max(options.width, 0)), kMinWidth, kMaxWidth);
  const LineWriter w(width, options.color);
  const int32_t n = model.num_workers();

  // Header: the verdict and one line of context.
  std::vector<std::string> head;
  const char* verdict_style = model.top() ? kRed : kGreen;
  for (const std::string& l : WrapText("perftracker: " + model.Verdict(), width, "", "  ")) {
    head.push_back(w.Paint(l, verdict_style));
  }
  std::vector<std::string> context;
  if (n > 0) context.push_back(fmt::format("{} worker{}", n, n == 1 ? "" : "s"));
  if (model.median_iteration_ns() > 0) {
    context.push_back(model.window_only()
                          ? "no iteration completed in the " +
                                FormatDuration(model.median_iteration_ns()) + " window"
                          : "median iteration " + FormatDuration(model.median_iteration_ns()));
  }
  const size_t minor_count = d.findings.size() - model.material_count();
  context.push_back(fmt::format("{} finding{} ({} material)", d.findings.size(),
                                d.findings.size() == 1 ? "" : "s", model.material_count()));
  if (!model.title().empty()) context.push_back(model.title());
  std::string context_line;
  for (const std::string& c : context) context_line += (context_line.empty() ? "" : " · ") + c;
  head.push_back(w.Compose({{context_line, kDim}}));
  // Tail: minor findings, notes, where to look next.
  std::vector<std::string> tail;
  std::vector<size_t> minor;
  std::vector<size_t> material;
  for (size_t i = 0; i < d.findings.size(); ++i) {
    (d.findings[i].material ? material : minor).push_back(i);
  }
  if (!minor.empty()) {
    tail.push_back("");
    tail.push_back(w.Compose({{fmt::format("{} minor finding{} (below the materiality threshold):",
                                           minor_count, minor_count == 1 ? "" : "s"),
                               kBold}}));
    for (size_t j = 0; j < minor.size() && j < kMinorShown; ++j) {
      tail.push_back(w.Compose(
          {{kIndent + OneLiner(model, d.findings[minor[j]], minor[j], n, width), nullptr}}));
    }
    if (minor.size() > kMinorShown) {
      tail.push_back(w.Compose(
          {{fmt::format("{}… and {} more (--format json lists all)", kIndent, minor.size() - kMinorShown),
            kDim}}));
    }
  }
  if (!d.notes.empty()) {
    tail.push_back("");
    tail.push_back(w.Compose({{"notes:", kBold}}));
    for (size_t j = 0; j < d.notes.size() && j < kNotesShown; ++j) {
      std::vector<std::string> wrapped =
          WrapText(SanitizeText(d.notes[j]), width, kIndent + "- ", kIndent + "  ");
      const size_t max_lines = d.notes.size() <= kFewNotes ? kNoteLinesFew : 1;
      if (wrapped.size() > max_lines) {
        wrapped.resize(max_lines);
        wrapped.back() = TruncateEnd(wrapped.back() + " …", width);
      }
      tail.insert(tail.end(), wrapped.begin(), wrapped.end());
    }
    if (d.notes.size() > kNotesShown) {
      tail.push_back(w.Compose(
          {{fmt::format("{}… and {} more notes (--format json lists all)", kIndent,
                        d.notes.size() - kNotesShown),
            kDim}}));
    }
  }
  tail.push_back("");
  for (const std::string& l :
       WrapText("more: --html FILE for the heat map and per-worker chart, --format json for "
                "every number",
                width, "", "  ")) {
    tail.push_back(w.Paint(l, kDim));
  }

  // Body: material findings, in full while the screen budget allows.
  std::vector<std::string> body;
  const size_t fixed = head.size() + tail.size();
  for (size_t j = 0; j < material.size(); ++j) {
    const Finding& f = d.findings[material[j]];
    std::vector<std::string> full =
        DetailedFinding(model, f, material[j], j == 0 ? kFirstEvidence : kOtherEvidence, w);
    const size_t remaining_one_liners = std::min(material.size() - j - 1, kOtherMaterialShown + 1);
    const bool fits = fixed + body.size() + 1 + full.size() + remaining_one_liners +
                          (remaining_one_liners > 0 ? 2 : 0) <=
                      kLineBudget;
    if (j == 0 || fits) {
      body.push_back("");
      body.insert(body.end(), full.begin(), full.end());
      continue;
    }
    body.push_back("");
    body.push_back(w.Compose({{"other material findings:", kBold}}));
    const size_t end = std::min(material.size(), j + kOtherMaterialShown);
    for (size_t k = j; k < end; ++k) {
      body.push_back(w.Compose(
          {{kIndent + OneLiner(model, d.findings[material[k]], material[k], n, width), nullptr}}));
    }
    if (material.size() > end) {
      body.push_back(w.Compose({{fmt::format("{}… and {} more (--format json lists all)", kIndent,
                                             material.size() - end),
                                 kDim}}));
    }
    break;
  }

  std::string out;
  for (const auto* part : {&head, &body, &tail}) {
    for (const std::string& l : *part) {
      out += l;
      out += '\n';
    }
  }
  return out;
}

}  // namespace perftracker
