// Text, JSON and HTML of a Comparison. Every string from the data goes through
// SanitizeText() (text, JSON) or EscapeHtml() (HTML); numbers through Finite().
#include "perftracker/report/compare_report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "perftracker/report/format.h"

namespace perftracker {
namespace {

using compare::ChangeDirection;
using compare::Comparison;
using compare::FunctionChange;
using compare::RankChange;
using compare::WorkerChange;
using nlohmann::ordered_json;
using report::EscapeHtml;
using report::Finite;
using report::RanksLabel;
using report::SanitizeText;
using report::TruncateEnd;

constexpr int kSchemaVersion = 1;
constexpr size_t kRanksChars = 60;       // a rank list in a sentence or a cell
constexpr size_t kTextChanges = 12;      // changes listed in the text report
constexpr size_t kTextWorkers = 16;      // ranks listed in the text report
constexpr size_t kHtmlWorkers = 1024;    // ranks listed in the HTML per-rank table
constexpr size_t kFunctionColumns = 40;  // display width of a function name in text

std::string Signed(double ns) {
  std::string s = FormatDuration(ns);
  if (ns >= 0) s.insert(s.begin(), '+');
  return s;
}

// "block2 is slower on all 2 workers: +12.3 ms per iteration (8.1 ms -> 20.4 ms)".
std::string ChangeSentence(const Comparison& c, const FunctionChange& f) {
  const int32_t workers = std::min(c.baseline_workers, c.current_workers);
  return fmt::format("{} is {} on {}: {} per iteration ({} -> {})", SanitizeText(f.function),
                     f.direction == ChangeDirection::kSlower ? "slower" : "faster",
                     RanksLabel(f.workers, workers, kRanksChars), Signed(f.delta_ns),
                     FormatDuration(f.baseline_ns), FormatDuration(f.current_ns));
}

std::string SharedSentence(const Comparison& c) {
  return fmt::format(
      "every function is {:.2f}x {}: {} per iteration (iteration {} -> {}), as machine load, "
      "clock speed or a library that slows everything alike would make it",
      c.shared_scale >= 1 ? c.shared_scale : 1 / std::max(c.shared_scale, 1e-9),
      c.shared_scale >= 1 ? "slower" : "faster", Signed(c.shared_delta_ns),
      FormatDuration(c.baseline_iteration_ns), FormatDuration(c.current_iteration_ns));
}

double Ms(double ns) { return std::round(Finite(ns)) / 1e6; }

}  // namespace

std::string ComparisonVerdict(const Comparison& c) {
  if (!c.changes.empty()) {
    std::string s = ChangeSentence(c, c.changes.front());
    if (c.changes.size() > 1) {
      s += fmt::format("; {} more change{}", c.changes.size() - 1, c.changes.size() > 2 ? "s" : "");
    }
    return s;
  }
  if (c.shared_material) return SharedSentence(c);
  if (c.shared_explained_by_load) {
    return fmt::format(
        "no material change of the job: every function is {:.2f}x {} (iteration {} -> {}), as "
        "the machine's load explains (each CPU second took x{:.2f} as long): probably the "
        "machine, not the code",
        c.shared_scale >= 1 ? c.shared_scale : 1 / std::max(c.shared_scale, 1e-9),
        c.shared_scale >= 1 ? "slower" : "faster", FormatDuration(c.baseline_iteration_ns),
        FormatDuration(c.current_iteration_ns), c.machine_scale);
  }
  return fmt::format(
      "no material change: iteration {} -> {}, within the noise (a change counts from {} per "
      "iteration)",
      FormatDuration(c.baseline_iteration_ns), FormatDuration(c.current_iteration_ns),
      FormatDuration(c.median_bar_ns));
}

std::string RenderComparisonText(const Comparison& c, int width) {
  const size_t cols = static_cast<size_t>(std::max(width, 60));
  std::string out;
  for (const std::string& line : report::WrapText(ComparisonVerdict(c), cols)) out += line + "\n";
  out += "\n";
  out += fmt::format("baseline  {} ({} workers, median iteration {})\n",
                     TruncateEnd(SanitizeText(c.baseline_title), cols - 40), c.baseline_workers,
                     FormatDuration(c.baseline_iteration_ns));
  out += fmt::format("current   {} ({} workers, median iteration {})\n",
                     TruncateEnd(SanitizeText(c.current_title), cols - 40), c.current_workers,
                     FormatDuration(c.current_iteration_ns));
  out += fmt::format(
      "bar       a change counts from {} per iteration (median rank: {} of the "
      "iteration, or {:g} standard errors of the mean iteration when it scatters more)\n",
      FormatDuration(c.median_bar_ns), FormatShare(c.material_share), c.noise_sigmas);
  out += fmt::format("shared    every function x{:.3f} ({} per iteration){}\n", c.shared_scale,
                     Signed(c.shared_delta_ns),
                     c.shared_material            ? ", material"
                     : c.shared_explained_by_load ? ", the machine's load"
                                                  : "");
  if (c.machine_scale > 0) {
    out += fmt::format("machine   each CPU second took x{:.3f} as long (run-queue wait)\n",
                       c.machine_scale);
  }
  if (!c.changes.empty()) {
    out += "\nchanges per iteration, largest first (beyond the shared factor):\n";
    size_t shown = 0;
    for (const FunctionChange& f : c.changes) {
      if (shown++ == kTextChanges) {
        out += fmt::format("  … {} more (--format json lists them all)\n",
                           c.changes.size() - kTextChanges);
        break;
      }
      std::string line = fmt::format(
          "  {:<7} {:>10}  {:<{}}  {}  {} -> {}",
          f.direction == ChangeDirection::kSlower ? "slower" : "faster", Signed(f.delta_ns),
          TruncateEnd(SanitizeText(f.function), kFunctionColumns), kFunctionColumns,
          RanksLabel(f.workers, std::min(c.baseline_workers, c.current_workers), 24),
          FormatDuration(f.baseline_ns), FormatDuration(f.current_ns));
      if (!f.time_goes_into.empty()) {
        line += "  (time goes into " + TruncateEnd(SanitizeText(f.time_goes_into), 32) + ")";
      }
      out += line + "\n";
    }
  }
  out += "\nper rank: median iteration baseline -> current (change; bar)\n";
  size_t shown = 0;
  for (const WorkerChange& w : c.workers) {
    if (shown++ == kTextWorkers) {
      out += fmt::format("  … {} more ranks (--format json lists them all)\n",
                         c.workers.size() - kTextWorkers);
      break;
    }
    out +=
        fmt::format("  rank {:<5} {:>10} -> {:<10} ({}; {}){}\n", w.rank,
                    FormatDuration(w.baseline_iteration_ns), FormatDuration(w.current_iteration_ns),
                    Signed(w.current_iteration_ns - w.baseline_iteration_ns),
                    FormatDuration(w.bar_ns), w.material ? "  material" : "");
  }
  if (!c.notes.empty()) {
    out += "\nnotes:\n";
    for (const std::string& n : c.notes) {
      for (const std::string& line : report::WrapText(SanitizeText(n), cols, "  - ", "    ")) {
        out += line + "\n";
      }
    }
  }
  return out;
}

std::string RenderComparisonJson(const Comparison& c) {
  ordered_json root;
  root["schema_version"] = kSchemaVersion;
  root["generator"] = "perftracker";
  root["kind"] = "comparison";
  root["verdict"] = SanitizeText(ComparisonVerdict(c));
  root["has_material_change"] = c.has_material_change();
  root["baseline"] = {{"title", SanitizeText(c.baseline_title)},
                      {"num_workers", c.baseline_workers},
                      {"median_iteration_ms", Ms(c.baseline_iteration_ns)}};
  root["current"] = {{"title", SanitizeText(c.current_title)},
                     {"num_workers", c.current_workers},
                     {"median_iteration_ms", Ms(c.current_iteration_ns)}};
  root["compared_functions"] = c.compared_functions;
  root["shared_scale"] = std::round(Finite(c.shared_scale) * 1e4) / 1e4;
  root["shared_delta_ms_per_iteration"] = Ms(c.shared_delta_ns);
  root["shared_material"] = c.shared_material;
  root["machine_scale"] = c.machine_scale > 0
                              ? ordered_json(std::round(c.machine_scale * 1e4) / 1e4)
                              : ordered_json(nullptr);
  root["shared_explained_by_load"] = c.shared_explained_by_load;
  root["bar_ms_per_iteration"] = Ms(c.median_bar_ns);
  ordered_json changes = ordered_json::array();
  for (const FunctionChange& f : c.changes) {
    ordered_json j;
    j["direction"] = f.direction == ChangeDirection::kSlower ? "slower" : "faster";
    j["function"] = SanitizeText(f.function);
    j["function_key"] = SanitizeText(f.function_key);
    j["kind"] = SanitizeText(f.kind);
    j["time_goes_into"] = SanitizeText(f.time_goes_into);
    j["workers"] = f.workers;
    j["baseline_ms_per_iteration"] = Ms(f.baseline_ns);
    j["current_ms_per_iteration"] = Ms(f.current_ns);
    j["delta_ms_per_iteration"] = Ms(f.delta_ns);
    j["delta_share"] = std::round(Finite(f.delta_share) * 1e6) / 1e6;
    ordered_json ranks = ordered_json::array();
    for (const RankChange& r : f.ranks) {
      ranks.push_back({{"rank", r.rank},
                       {"baseline_ms_per_iteration", Ms(r.baseline_ns)},
                       {"current_ms_per_iteration", Ms(r.current_ns)},
                       {"delta_ms_per_iteration", Ms(r.delta_ns)},
                       {"material", r.material}});
    }
    j["ranks"] = std::move(ranks);
    changes.push_back(std::move(j));
  }
  root["changes"] = std::move(changes);
  ordered_json workers = ordered_json::array();
  for (const WorkerChange& w : c.workers) {
    workers.push_back({{"rank", w.rank},
                       {"host", SanitizeText(w.host)},
                       {"baseline_iteration_ms", Ms(w.baseline_iteration_ns)},
                       {"current_iteration_ms", Ms(w.current_iteration_ns)},
                       {"baseline_spread_ms", Ms(w.baseline_spread_ns)},
                       {"current_spread_ms", Ms(w.current_spread_ns)},
                       {"bar_ms", Ms(w.bar_ns)},
                       {"material", w.material},
                       {"scale", std::round(Finite(w.scale) * 1e4) / 1e4}});
  }
  root["workers"] = std::move(workers);
  ordered_json notes = ordered_json::array();
  for (const std::string& n : c.notes) notes.push_back(SanitizeText(n));
  root["notes"] = std::move(notes);
  return root.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

std::string RenderComparisonHtml(const Comparison& c) {
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  h += "<title>perftracker comparison</title><style>";
  h += R"CSS(
body{margin:0;background:#f5f6f8;color:#1d2330;
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
header{background:#101828;color:#fff;padding:20px 36px 18px}
header h1{margin:8px 0 12px;font-size:21px;font-weight:600;max-width:1200px}
header .brand{font-size:12px;font-weight:700;letter-spacing:.08em;text-transform:uppercase;color:#98a2b3}
.meta span{display:inline-block;background:#1d2939;border:1px solid #344054;border-radius:14px;
padding:2px 12px;margin:0 6px 6px 0;color:#d0d5dd;font-size:13px}
main{max-width:1380px;margin:0 auto;padding:8px 36px 40px}
h2{font-size:17px;margin:26px 0 6px}
table{border-collapse:collapse;background:#fff;border:1px solid #e4e7ec}
th,td{padding:5px 10px;border-bottom:1px solid #e4e7ec;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.slower{color:#d92d20}.faster{color:#079455}
.bar{display:inline-block;height:10px;vertical-align:middle}
.bar.slower{background:#f04438}.bar.faster{background:#12b76a}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
.muted{color:#667085}
)CSS";
  h += "</style></head><body>\n";
  h += fmt::format(
      "<header class=\"{}\"><div class=\"brand\">perftracker comparison</div><h1 "
      "id=\"verdict\">{}</h1><div class=\"meta\"><span>baseline <b>{}</b>: {} workers, {} per "
      "iteration</span><span>current <b>{}</b>: {} workers, {} per iteration</span><span>a "
      "change counts from {} per iteration</span><span>shared factor "
      "x{:.3f}</span></div></header>\n",
      c.has_material_change() ? "bad" : "ok", EscapeHtml(ComparisonVerdict(c)),
      EscapeHtml(c.baseline_title), c.baseline_workers, FormatDuration(c.baseline_iteration_ns),
      EscapeHtml(c.current_title), c.current_workers, FormatDuration(c.current_iteration_ns),
      FormatDuration(c.median_bar_ns), Finite(c.shared_scale));
  h += "<main>\n";
  h += "<h2>Changes per iteration</h2>\n";
  if (c.changes.empty()) {
    h += "<p id=\"no-change\">No function changed by more than the bar.</p>\n";
  } else {
    double largest = 0;
    for (const FunctionChange& f : c.changes) largest = std::max(largest, std::fabs(f.delta_ns));
    h += "<table id=\"changes\"><tr><th>change</th><th>function</th><th>ranks</th><th>baseline"
         "</th><th>current</th><th>share of iteration</th><th>time goes into</th></tr>\n";
    for (const FunctionChange& f : c.changes) {
      const char* cls = f.direction == ChangeDirection::kSlower ? "slower" : "faster";
      const double px = largest > 0 ? 160 * std::fabs(f.delta_ns) / largest : 0;
      h += fmt::format(
          "<tr class=\"change\"><td class=\"num {}\">{} <span class=\"bar {}\" style=\"width:{:.0f}"
          "px\"></span></td><td><b>{}</b><br><code class=\"muted\" title=\"{}\">{}</code></td>"
          "<td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
          "<td>{}</td></tr>\n",
          cls, Signed(f.delta_ns), cls, px, EscapeHtml(f.function), EscapeHtml(f.function_key),
          EscapeHtml(TruncateEnd(f.function_key, 120)),
          EscapeHtml(
              RanksLabel(f.workers, std::min(c.baseline_workers, c.current_workers), kRanksChars)),
          FormatDuration(f.baseline_ns), FormatDuration(f.current_ns), FormatShare(f.delta_share),
          EscapeHtml(f.time_goes_into));
    }
    h += "</table>\n";
  }
  h += "<h2>Iteration time per rank</h2>\n<table id=\"workers\"><tr><th>rank</th><th>host</th>"
       "<th>baseline</th><th>current</th><th>change</th><th>bar</th></tr>\n";
  size_t shown = 0;
  for (const WorkerChange& w : c.workers) {
    if (shown++ == kHtmlWorkers) break;
    const double d = w.current_iteration_ns - w.baseline_iteration_ns;
    h += fmt::format(
        "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}"
        "</td><td class=\"num {}\">{}</td><td class=\"num\">{}</td></tr>\n",
        w.rank, EscapeHtml(w.host), FormatDuration(w.baseline_iteration_ns),
        FormatDuration(w.current_iteration_ns), w.material ? (d > 0 ? "slower" : "faster") : "",
        Signed(d), FormatDuration(w.bar_ns));
  }
  h += "</table>\n";
  if (c.workers.size() > kHtmlWorkers) {
    h += fmt::format("<p class=\"muted\">{} more ranks in the JSON.</p>\n",
                     c.workers.size() - kHtmlWorkers);
  }
  if (!c.notes.empty()) {
    h += "<h2>Notes</h2><ul>\n";
    for (const std::string& n : c.notes) h += "<li>" + EscapeHtml(n) + "</li>\n";
    h += "</ul>\n";
  }
  h += "</main></body></html>\n";
  return h;
}

}  // namespace perftracker
