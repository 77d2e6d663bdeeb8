// The HTML report: one self-contained file (inline CSS, SVG and a few lines of JS; no
// network reference of any kind) that a person opens in a browser:
//   1. a header with the verdict,
//   2. the material findings as cards (code, category, workers, function, lost time as a
//      bar, evidence table), minor findings as a table,
//   3. iteration time per worker: an inline SVG bar chart stacked by the iteration
//      breakdown, culprits outlined and marked,
//   4. a worker x function heat map: each cell is the worker's time per iteration in the
//      function relative to the median across workers, on a diverging scale (blue faster,
//      red slower); exact values in the cells' title tooltips,
//   5. notes and input-quality counters.
// Every string from the data goes through EscapeHtml(): function names are C++ templates,
// lambdas and Python paths full of < > & and quotes. Rows and bars are capped
// (HtmlOptions) so that a 10,000-worker job still gives a small, fast page.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "perftracker/report/format.h"
#include "perftracker/report/report.h"
#include "perftracker/report/report_model.h"
#include "perftracker/summary/data_quality_counters.h"

namespace perftracker {
namespace {

using report::EscapeHtml;
using report::Finite;
using report::RanksLabel;
using report::ReportModel;
using report::TruncateEnd;
using report::WorkerRole;
using report::WorkerRow;

constexpr size_t kMaxRanksShown = 120;       // characters of a rank list on a card
constexpr size_t kColumnLabelChars = 28;     // heat map column header
constexpr size_t kColumnSample = 512;        // workers sampled to pick and scale columns
constexpr size_t kMaxQualityRows = 20;       // workers listed with input problems
constexpr double kSaturateRatio = 2.0;       // heat map colour saturates at 2x / 0.5x
constexpr double kShowRatioAbove = 1.15;     // cells show "1.3×" beyond this deviation
constexpr double kChartWidth = 1280;
constexpr double kChartHeight = 300;
constexpr double kPadLeft = 70, kPadRight = 16, kPadTop = 34, kPadBottom = 30;
constexpr size_t kMaxXLabels = 32;
constexpr double kLabelClearance = 30;  // px between a culprit's rank label and another

constexpr const char* kCss = R"CSS(
:root{--bg:#f5f6f8;--card:#fff;--ink:#1d2330;--muted:#667085;--line:#e4e7ec;--bad:#d92d20;
--warn:#dc6803;--ok:#079455;--compute:#4e79a7;--comm:#f28e2b;--wait:#b07aa1;--data:#59a14f;
--other:#d0d5dd;--culprit:#d92d20}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;
font-size:12.5px}
header{background:#101828;color:#fff;padding:20px 36px 18px}
header .brand{font-size:12px;font-weight:700;letter-spacing:.08em;text-transform:uppercase;
color:#98a2b3}
header .brand span{font-weight:400;letter-spacing:0;text-transform:none;margin-left:10px;
color:#d0d5dd}
header h1{margin:8px 0 12px;font-size:22px;line-height:1.35;font-weight:600;max-width:1200px}
header h1 .dot{display:inline-block;width:11px;height:11px;border-radius:50%;margin-right:10px;
vertical-align:2px;background:var(--ok)}
header.bad h1 .dot{background:#f04438}
.meta{display:flex;flex-wrap:wrap;gap:8px}
.meta span{background:#1d2939;border:1px solid #344054;border-radius:14px;padding:2px 12px;
color:#d0d5dd;font-size:13px}
.meta b{color:#fff}
main{max-width:1380px;margin:0 auto;padding:8px 36px 40px}
section{margin-top:26px}
h2{font-size:17px;margin:0 0 4px;color:#101828}
.sub{color:var(--muted);margin:0 0 12px;font-size:13px}
.cards{display:grid;grid-template-columns:1fr;gap:16px}
.card .body{display:grid;grid-template-columns:minmax(0,5fr) minmax(0,6fr);gap:8px 32px}
@media (max-width:900px){.card .body{grid-template-columns:1fr}}
.card{background:var(--card);border:1px solid var(--line);border-left:5px solid var(--bad);
border-radius:8px;padding:14px 18px 12px;box-shadow:0 1px 2px rgba(16,24,40,.05)}
.card.healthy{border-left-color:var(--ok)}
.card .top{display:flex;gap:10px;align-items:center;flex-wrap:wrap;font-size:12.5px}
.card .num{color:var(--muted);font-weight:700}
.card .code{font-weight:700;color:#344054}
.card .who{margin-left:auto;font-weight:700;color:var(--bad)}
.card h3{margin:8px 0 10px;font-size:16px;line-height:1.35}
.badge{padding:1px 9px;border-radius:10px;font-size:11.5px;font-weight:600;
background:#f2f4f7;color:#344054;white-space:nowrap}
.cat-compute{background:#e0eaff;color:#3538cd}.cat-data_loading{background:#dcfae6;color:#067647}
.cat-communication{background:#fef0c7;color:#b54708}
.cat-synchronization{background:#f4ebff;color:#6941c6}
.cat-host_overhead{background:#fce7f6;color:#c11574}.cat-gc{background:#f2f4f7;color:#344054}
.cat-cpu_contention{background:#ffe4e8;color:#c01048}
.cat-gpu_hardware,.cat-hang{background:#fee4e2;color:#b42318}
.cat-memory{background:#e0f2fe;color:#026aa2}.cat-data_quality{background:#f2f4f7;color:#475467}
.lost{display:flex;align-items:center;gap:12px;margin:0 0 10px;font-size:13.5px}
.bar{flex:0 0 200px;height:10px;background:#f2f4f7;border-radius:5px;overflow:hidden}
.bar i{display:block;height:100%;background:var(--bad);border-radius:5px}
.bar.small{flex-basis:90px;height:8px}.bar.small i{background:var(--warn)}
dl.facts{display:grid;grid-template-columns:96px 1fr;gap:3px 12px;margin:0 0 10px}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;overflow-wrap:anywhere}
details summary{cursor:pointer;color:var(--muted);font-size:12px}
details code{display:block;margin-top:4px;color:#475467;overflow-wrap:anywhere}
table.ev{border-collapse:collapse;width:100%;font-size:13px}
table.ev td{border-top:1px solid var(--line);padding:4px 6px 4px 0}
table.ev th{text-align:left;color:var(--muted);font-weight:400;padding:0 0 4px}
table.ev td:first-child{width:42%}
table.ev td.v{text-align:right;font-weight:700;font-variant-numeric:tabular-nums;
padding-left:16px;overflow-wrap:anywhere}
table.list{border-collapse:collapse;width:100%;background:var(--card);font-size:13px;
border:1px solid var(--line);border-radius:8px}
table.list th{text-align:left;font-weight:600;color:var(--muted);font-size:12px;
padding:7px 10px;border-bottom:1px solid var(--line)}
table.list td{padding:6px 10px;border-top:1px solid var(--line);vertical-align:top;
overflow-wrap:anywhere}
table.list td.n{white-space:nowrap;font-variant-numeric:tabular-nums}
.panel{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 16px}
svg.chart{width:100%;height:auto;display:block}
svg.chart text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:#475467}
svg.chart .grid{stroke:#eaecf0}svg.chart .axis{stroke:#98a2b3}
svg.chart .med{stroke:#101828;stroke-dasharray:5 4;stroke-width:1.2}
svg.chart text.medl{fill:#101828;font-weight:600}
svg.chart .c{fill:var(--compute)}svg.chart .m{fill:var(--comm)}svg.chart .w{fill:var(--wait)}
svg.chart .d{fill:var(--data)}svg.chart .o{fill:var(--other)}svg.chart .t{fill:#7f9cc0}
svg.chart .hl{fill:none;stroke:var(--culprit);stroke-width:2}
svg.chart .mk{fill:var(--culprit)}svg.chart text.cl{fill:var(--culprit);font-weight:700}
svg.chart g.b:hover rect{opacity:.75}
.legend{display:flex;flex-wrap:wrap;gap:16px;font-size:12.5px;color:#475467;margin-top:8px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;
vertical-align:-2px}
.legend i.cul{background:none;border:2px solid var(--culprit)}
.scroll{overflow-x:auto}
table.hm{border-collapse:separate;border-spacing:0;font-size:11px;
font-variant-numeric:tabular-nums}
table.hm th,table.hm td{padding:0}
table.hm thead th{background:var(--card)}
table.hm th.fn{height:170px;width:34px;min-width:34px;vertical-align:bottom;cursor:pointer;
border-bottom:1px solid var(--line)}
table.hm th.fn span{display:block;writing-mode:vertical-rl;transform:rotate(180deg);
white-space:nowrap;max-height:166px;overflow:hidden;text-overflow:ellipsis;margin:0 auto 4px;
font-weight:500;color:#344054;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table.hm th.fn.hit span{color:var(--bad);font-weight:700}
table.hm th.corner{text-align:left;vertical-align:bottom;padding:0 10px 6px 0;color:var(--muted);
font-weight:600;cursor:pointer;border-bottom:1px solid var(--line)}
table.hm tr.med th,table.hm tr.med td{font-size:9.5px;white-space:nowrap;color:var(--muted);text-align:center;
height:20px;border-bottom:2px solid #d0d5dd;background:var(--card)}
table.hm tr.med th{text-align:left;font-weight:600}
table.hm tbody th{text-align:left;white-space:nowrap;padding:0 12px 0 0;font-weight:600;
font-size:12px}
table.hm tbody th em{font-style:normal;font-size:10px;font-weight:700;border-radius:8px;
padding:0 6px;margin-left:6px}
table.hm tbody tr.culprit th em{background:#fee4e2;color:#b42318}
table.hm tbody tr.victim th em{color:#98a2b3;font-weight:600}
table.hm tbody tr.culprit th{color:#b42318}
table.hm td{height:24px;min-width:34px;text-align:center;border:1px solid #fff}
table.hm td.it{min-width:56px;padding:0 4px}
table.hm td.na{background:repeating-linear-gradient(45deg,#f2f4f7 0 4px,#fff 4px 8px);
color:#98a2b3}
table.hm tbody tr:hover td{outline:1px solid #98a2b3}
.scale{display:flex;align-items:center;gap:8px;font-size:12px;color:#475467;margin-top:10px}
.scale .grad{width:240px;height:12px;border-radius:3px;
background:linear-gradient(90deg,#2166ac,#92c5de,#f4f5f7,#f4a582,#b2182b)}
ul.notes{margin:0;padding-left:20px}ul.notes li{margin:3px 0;overflow-wrap:anywhere}
footer{color:#98a2b3;font-size:12px;text-align:center;padding:10px 0 30px}
)CSS";

// Sorts the heat map by a column when its header is clicked (again: the other way); the
// first header restores the original order.
constexpr const char* kScript = R"JS(
(function(){var t=document.getElementById('hm');if(!t)return;
var hs=t.tHead.rows[0].cells;
Array.prototype.forEach.call(hs,function(h,i){h.addEventListener('click',function(){
var b=t.tBodies[0],rs=Array.prototype.slice.call(b.rows),up=h.getAttribute('data-dir')==='d';
h.setAttribute('data-dir',up?'a':'d');
rs.sort(function(x,y){if(i===0)return (+x.getAttribute('data-o'))-(+y.getAttribute('data-o'));
var a=+(x.cells[i].getAttribute('data-v')||-1),c=+(y.cells[i].getAttribute('data-v')||-1);
return up?a-c:c-a;});
rs.forEach(function(r){b.appendChild(r);});});});})();
)JS";

// "12.8 ms" -> "12.8ms", for narrow cells.
std::string Compact(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  return s;
}

// An axis tick: "0", "20 ms", "2.5 ms" (no trailing zeros: ticks are round numbers).
std::string TickLabel(double ns) {
  if (ns <= 0) return "0";
  std::string s = FormatDuration(ns);
  for (const std::string_view zeros : {".00 ", ".0 "}) {
    const size_t at = s.find(zeros);
    if (at != std::string::npos) s.erase(at, zeros.size() - 1);
  }
  return s;
}

std::string Num(double v) { return fmt::format("{:.1f}", Finite(v)); }

// Diverging colour for a ratio to the column median: blue (faster) .. neutral .. red.
struct Rgb {
  double r, g, b;
};
Rgb Mix(Rgb a, Rgb b, double t) {
  return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t};
}
// Returns the background, and whether text on it should be white.
std::pair<std::string, bool> RatioColor(double ratio) {
  static constexpr Rgb kNeutral{244, 245, 247};
  static constexpr Rgb kRedMid{244, 165, 130}, kRed{178, 24, 43};
  static constexpr Rgb kBlueMid{146, 197, 222}, kBlue{33, 102, 172};
  double t = std::log2(std::max(ratio, 1e-9)) / std::log2(kSaturateRatio);
  t = std::clamp(Finite(t), -1.0, 1.0);
  const double a = std::abs(t);
  const Rgb mid = t >= 0 ? kRedMid : kBlueMid;
  const Rgb end = t >= 0 ? kRed : kBlue;
  const Rgb c = a <= 0.5 ? Mix(kNeutral, mid, a * 2) : Mix(mid, end, (a - 0.5) * 2);
  const auto byte = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 255.0))); };
  return {fmt::format("#{:02x}{:02x}{:02x}", byte(c.r), byte(c.g), byte(c.b)), a > 0.6};
}

std::string RatioText(double ratio) {
  if (!std::isfinite(ratio)) return "";
  if (ratio >= 9.95) return fmt::format("{:.0f}×", ratio);
  return fmt::format("{:.1f}×", ratio);
}

// "Nice" axis step (1, 2 or 5 times a power of ten) giving about `ticks` intervals.
double NiceStep(double max, int ticks) {
  const double raw = max / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

class HtmlWriter {
 public:
  HtmlWriter(const ReportModel& model, const HtmlOptions& options, std::string perfetto_file)
      : model_(model), options_(options), perfetto_file_(std::move(perfetto_file)) {}

  std::string Render() {
    const std::string title = model_.title().empty() ? "diagnosis" : model_.title();
    out_ += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">";
    out_ += "<title>perftracker · " + EscapeHtml(title) + "</title><style>";
    out_ += kCss;
    out_ += "</style></head><body>\n";
    Header();
    out_ += "<main>\n";
    Findings();
    if (!model_.workers().empty()) {
      Chart();
      HeatMap();
    }
    Notes();
    out_ += "</main><footer>perftracker report · self-contained file: no network access needed"
            " · the JSON report (--format json) holds every number</footer>\n<script>";
    out_ += kScript;
    out_ += "</script></body></html>\n";
    return std::move(out_);
  }

 private:
  void Header() {
    const bool bad = model_.top() != nullptr;
    const Diagnosis& d = model_.diagnosis();
    out_ += fmt::format("<header class=\"{}\"><div class=\"brand\">perftracker<span>{}</span>"
                        "</div><h1><span class=\"dot\"></span>{}</h1><div class=\"meta\">",
                        bad ? "bad" : "ok", EscapeHtml(model_.title()),
                        EscapeHtml(model_.Verdict()));
    out_ += fmt::format("<span><b>{}</b> workers</span>", model_.num_workers());
    if (model_.median_iteration_ns() > 0) {
      out_ += fmt::format("<span>median iteration <b>{}</b></span>",
                          EscapeHtml(FormatDuration(model_.median_iteration_ns())));
    }
    out_ += fmt::format("<span><b>{}</b> material finding{} · {} minor</span>",
                        model_.material_count(), model_.material_count() == 1 ? "" : "s",
                        d.findings.size() - model_.material_count());
    if (!d.notes.empty()) {
      out_ += fmt::format("<span><b>{}</b> note{}</span>", d.notes.size(),
                          d.notes.size() == 1 ? "" : "s");
    }
    if (!perfetto_file_.empty()) {
      // Next to this file: a relative link works wherever the report directory is opened.
      out_ += fmt::format(
          "<span class=\"timeline\"><a href=\"{0}\" download>timeline: {0}</a> (open it in "
          "ui.perfetto.dev or chrome://tracing)</span>",
          EscapeHtml(perfetto_file_));
    }
    out_ += "</div></header>\n";
  }

  std::string Workers(const std::vector<int32_t>& ranks) const {
    return EscapeHtml(RanksLabel(ranks, model_.num_workers(), kMaxRanksShown));
  }

  void Card(const Finding& f, size_t index) {
    const std::string cat(FindingCategoryName(f.category));
    const double share = std::clamp(Finite(f.lost_share), 0.0, 1.0);
    out_ += fmt::format(
        "<article class=\"card\"><div class=\"top\"><span class=\"num\">#{}</span>"
        "<code class=\"code\">{}</code><span class=\"badge cat-{}\">{}</span>"
        "<span class=\"who\">{}</span></div><h3>{}</h3>",
        index + 1, EscapeHtml(f.code), cat, cat, Workers(f.workers), EscapeHtml(f.title));
    // A hang's time is its silence; a window without a completed iteration has no
    // per-iteration time (ReportModel::LostPhrase says what is known).
    const bool per_iteration = !model_.window_only() && f.category != FindingCategory::kHang;
    out_ += fmt::format(
        "<div class=\"lost\"><div class=\"bar\" title=\"{} of {}\">"
        "<i style=\"width:{:.1f}%\"></i></div><span>{}</span></div>",
        FormatShare(share),
        model_.window_only() ? "the window's wall time" : "the median iteration",
        std::max(share * 100, 0.5),
        per_iteration ? fmt::format("<b>{}</b> lost per iteration · <b>{}</b> of iteration time",
                                    EscapeHtml(FormatDuration(Finite(f.lost_ns_per_iteration))),
                                    FormatShare(share))
                      : "<b>" + EscapeHtml(model_.LostPhrase(f)) + "</b>");
    out_ += "<div class=\"body\"><div>";
    out_ += "<dl class=\"facts\">";
    out_ += "<dt>Workers</dt><dd>" + Workers(f.workers) + "</dd>";
    if (!f.victims.empty()) {
      std::string v = Workers(f.victims) + (f.victims.size() == 1 ? " waits" : " wait") +
                      " for it";
      const std::string where = model_.VictimWait(f);
      if (!where.empty()) v += " in <code>" + EscapeHtml(where) + "</code>";
      out_ += "<dt>Victims</dt><dd>" + v + "</dd>";
    }
    if (!f.function.empty() || !f.function_key.empty()) {
      out_ += "<dt>Function</dt><dd><code>" + EscapeHtml(f.function) + "</code>";
      if (!f.function_key.empty() && f.function_key != f.function) {
        out_ += "<details><summary>call path</summary><code>" + EscapeHtml(f.function_key) +
                "</code></details>";
      }
      out_ += "</dd>";
    }
    if (!f.resource.empty()) out_ += "<dt>Resource</dt><dd>" + EscapeHtml(f.resource) + "</dd>";
    out_ += "</dl></div><div>";
    if (!f.evidence.empty()) {
      out_ += "<table class=\"ev\"><tr><th colspan=\"2\">Evidence</th></tr>";
      for (const Evidence& e : f.evidence) {
        out_ += "<tr><td>" + EscapeHtml(e.label) + "</td><td class=\"v\">" +
                EscapeHtml(e.value) + "</td></tr>";
      }
      out_ += "</table>";
    }
    out_ += "</div></div></article>\n";
  }

  void Findings() {
    const Diagnosis& d = model_.diagnosis();
    out_ += "<section><h2>Findings</h2>";
    if (model_.top()) {
      out_ += model_.window_only()
                  ? "<p class=\"sub\">Ranked by the time they cost in the window (no iteration "
                    "completed).</p><div class=\"cards\">"
                  : "<p class=\"sub\">Ranked by the time they cost each iteration.</p>"
                    "<div class=\"cards\">";
      for (size_t i = 0; i < d.findings.size(); ++i) {
        if (d.findings[i].material) Card(d.findings[i], i);
      }
      out_ += "</div>";
    } else {
      // A minor straggler costs the job little, but the workers do not behave alike.
      std::string alike;
      if (model_.minor_straggler()) {
        alike = " (see the minor findings below)";
      } else if (model_.num_workers() > 1) {
        alike = fmt::format(": the {} workers behave alike", model_.num_workers());
      }
      out_ += fmt::format(
          "<div class=\"cards\" style=\"margin-top:12px\"><article class=\"card healthy\">"
          "<h3>No material finding</h3><p style=\"margin:0\">No worker and no function costs a"
          " material share of the iteration time{}. {}</p></article></div>",
          alike,
          model_.workers().empty() ? "Pass the workers' summaries to see per-worker charts."
                                   : "The chart and the heat map below show how alike they are.");
    }
    std::vector<size_t> minor;
    for (size_t i = 0; i < d.findings.size(); ++i) {
      if (!d.findings[i].material) minor.push_back(i);
    }
    if (!minor.empty()) {
      out_ += fmt::format(
          "<h2 style=\"margin-top:22px\">Minor findings</h2><p class=\"sub\">{} below the "
          "materiality threshold: real, but each costs little.</p><table class=\"list\">"
          "<tr><th>#</th><th>code</th><th>what</th><th>workers</th><th>function</th>"
          "<th>lost / iteration</th></tr>",
          minor.size());
      for (size_t i : minor) {
        const Finding& f = d.findings[i];
        const std::string cat(FindingCategoryName(f.category));
        const double share = std::clamp(Finite(f.lost_share), 0.0, 1.0);
        out_ += fmt::format(
            "<tr><td class=\"n\">{}</td><td class=\"n\"><code>{}</code> <span class=\"badge "
            "cat-{}\">{}</span></td><td>{}</td><td>{}</td><td><code>{}</code></td>"
            "<td class=\"n\"><div class=\"bar small\" style=\"display:inline-block;"
            "vertical-align:middle;width:90px\"><i style=\"width:{:.1f}%\"></i></div> {} "
            "({})</td></tr>",
            i + 1, EscapeHtml(f.code), cat, cat, EscapeHtml(f.title), Workers(f.workers),
            EscapeHtml(f.function), std::max(share * 100, 1.0),
            EscapeHtml(FormatDuration(Finite(f.lost_ns_per_iteration))), FormatShare(share));
      }
      out_ += "</table>";
    }
    out_ += "</section>\n";
  }

  // Bars sorted by rank; beyond max_chart_bars, a selection (SelectWorkers) of them.
  void Chart() {
    const auto& rows = model_.workers();
    std::vector<size_t> shown = model_.SelectWorkers(options_.max_chart_bars);
    std::sort(shown.begin(), shown.end());
    if (shown.empty()) return;
    bool breakdown = false;
    double max_ns = 0;
    for (size_t i : shown) {
      breakdown |= rows[i].has_breakdown();
      max_ns = std::max(max_ns, Finite(rows[i].median_iteration_ns));
    }
    out_ += "<section><h2>Iteration time per worker</h2><p class=\"sub\">Median iteration of "
            "each worker";
    if (breakdown) out_ += ", split by where the time went";
    if (shown.size() < rows.size()) {
      out_ += fmt::format(". Showing {} of {} workers: culprits, victims, the slowest and an "
                          "even sample of the rest",
                          shown.size(), rows.size());
    }
    out_ += ". Hover a bar for its numbers.</p><div class=\"panel\">";
    if (max_ns <= 0) max_ns = 1;
    const double step = NiceStep(max_ns, 5);
    const double top = std::ceil(max_ns / step) * step;
    const double plot_w = kChartWidth - kPadLeft - kPadRight;
    const double plot_h = kChartHeight - kPadTop - kPadBottom;
    const double base = kPadTop + plot_h;
    const auto y_of = [&](double ns) { return base - ns / top * plot_h; };
    out_ += fmt::format("<svg class=\"chart\" viewBox=\"0 0 {} {}\" role=\"img\" "
                        "aria-label=\"iteration time per worker\">",
                        kChartWidth, kChartHeight);
    for (double t = 0; t <= top * 1.0001; t += step) {
      out_ += fmt::format("<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>"
                          "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                          Num(kPadLeft), Num(kChartWidth - kPadRight), Num(y_of(t)),
                          Num(y_of(t)), Num(kPadLeft - 8), Num(y_of(t) + 4),
                          EscapeHtml(TickLabel(t)));
    }
    const double slot = plot_w / static_cast<double>(shown.size());
    const double gap = slot >= 4 ? std::min(slot * 0.2, 8.0) : 0;
    const double bar_w = std::max(slot - gap, 0.6);
    const size_t label_every =
        std::max<size_t>(1, (shown.size() + kMaxXLabels - 1) / kMaxXLabels);
    // Rank labels under the axis: every label_every-th bar, and every culprit; regular
    // labels that would collide with a culprit's are left out.
    std::vector<double> culprit_x;
    for (size_t j = 0; j < shown.size(); ++j) {
      if (rows[shown[j]].role == WorkerRole::kCulprit) {
        culprit_x.push_back(kPadLeft + (static_cast<double>(j) + 0.5) * slot);
      }
    }
    const auto near_culprit = [&](double x) {
      return std::any_of(culprit_x.begin(), culprit_x.end(),
                         [&](double c) { return std::abs(c - x) < kLabelClearance; });
    };
    for (size_t j = 0; j < shown.size(); ++j) {
      const WorkerRow& w = rows[shown[j]];
      const double x = kPadLeft + static_cast<double>(j) * slot + gap / 2;
      const double total = Finite(w.median_iteration_ns);
      std::string tip = fmt::format("rank {}: median iteration {}", w.rank, FormatDuration(total));
      if (model_.median_iteration_ns() > 0) {
        tip += fmt::format(" ({:.2f}x the median)", total / model_.median_iteration_ns());
      }
      if (w.has_breakdown()) {
        tip += fmt::format(" · compute {} · communication {} · wait {} · data {}",
                           FormatShare(w.compute_share), FormatShare(w.communication_share),
                           FormatShare(w.wait_share), FormatShare(w.data_share));
      }
      if (w.role != WorkerRole::kPeer) tip += fmt::format(" · {}", report::WorkerRoleName(w.role));
      out_ += "<g class=\"b\"><title>" + EscapeHtml(tip) + "</title>";
      if (breakdown && w.has_breakdown()) {
        struct Seg {
          const char* cls;
          double share;
        };
        Seg segs[] = {{"c", w.compute_share},
                      {"m", w.communication_share},
                      {"w", w.wait_share},
                      {"d", w.data_share},
                      {"o", 0}};
        double sum = 0;
        for (const Seg& s : segs) sum += Finite(s.share);
        // Overlapping parts (compute and communication on different streams) are scaled
        // down so that the bar still totals the iteration time.
        const double scale = sum > 1 ? 1 / sum : 1;
        segs[4].share = sum < 1 ? 1 - sum : 0;
        double y = base;
        for (const Seg& s : segs) {
          const double h = Finite(s.share) * (s.cls[0] == 'o' ? 1 : scale) * total / top * plot_h;
          if (h <= 0.05) continue;
          y -= h;
          out_ += fmt::format("<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
                              s.cls, Num(x), Num(y), Num(bar_w), Num(h));
        }
      } else {
        out_ += fmt::format("<rect class=\"t\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
                            Num(x), Num(y_of(total)), Num(bar_w), Num(base - y_of(total)));
      }
      const bool culprit = w.role == WorkerRole::kCulprit;
      if (culprit) {
        const double cx = x + bar_w / 2;
        const double ty = y_of(total);
        out_ += fmt::format(
            "<rect class=\"hl\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>"
            "<path class=\"mk\" d=\"M{} {}l-6 -9h12z\"/>"
            "<text class=\"cl\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            Num(x - 1), Num(ty - 1), Num(bar_w + 2), Num(base - ty + 1), Num(cx), Num(ty - 3),
            Num(cx), Num(ty - 15), w.rank);
      }
      out_ += "</g>";
      if (culprit || (j % label_every == 0 && !near_culprit(x + bar_w / 2))) {
        out_ += fmt::format("<text class=\"{}\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                            culprit ? "cl" : "", Num(x + bar_w / 2), Num(base + 16), w.rank);
      }
    }
    if (model_.median_iteration_ns() > 0 && model_.median_iteration_ns() <= top) {
      const double my = y_of(model_.median_iteration_ns());
      out_ += fmt::format("<line class=\"med\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>"
                          "<text class=\"medl\" x=\"{}\" y=\"{}\" text-anchor=\"end\">median "
                          "{}</text>",
                          Num(kPadLeft), Num(kChartWidth - kPadRight), Num(my), Num(my),
                          Num(kChartWidth - kPadRight), Num(my - 5),
                          EscapeHtml(FormatDuration(model_.median_iteration_ns())));
    }
    out_ += fmt::format("<line class=\"axis\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>"
                        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">rank</text></svg>",
                        Num(kPadLeft), Num(kChartWidth - kPadRight), Num(base), Num(base),
                        Num(kPadLeft - 8), Num(base + 16));
    out_ += "<div class=\"legend\">";
    if (breakdown) {
      out_ += "<span><i style=\"background:var(--compute)\"></i>compute</span>"
              "<span><i style=\"background:var(--comm)\"></i>communication</span>"
              "<span><i style=\"background:var(--wait)\"></i>waiting</span>"
              "<span><i style=\"background:var(--data)\"></i>data loading</span>"
              "<span><i style=\"background:var(--other)\"></i>other</span>";
    } else {
      out_ += "<span><i style=\"background:#7f9cc0\"></i>median iteration</span>";
    }
    if (!culprit_x.empty()) {
      out_ += "<span><i class=\"cul\"></i>culprit of a material finding</span>";
    }
    out_ += "<span style=\"margin-left:auto\">dashed line: median over workers";
    if (breakdown) out_ += "; overlapping parts are scaled to fit the bar";
    out_ += "</span></div></div></section>\n";
  }

  struct Column {
    std::string key;
    std::string name;
    double median = 0;     // per-iteration ns across the sampled workers (absent = 0)
    double deviation = 0;  // largest |worker - median| among them
    bool hit = false;      // the function of a finding
    std::string label;     // the header, when the name alone is ambiguous
  };

  // The display name of the caller frame in a call path "kind:a > kind:b > kind:leaf".
  static std::string CallerName(const std::string& key) {
    constexpr std::string_view kSep = " > ";
    const size_t last = key.rfind(kSep);
    if (last == std::string::npos) return "top level";
    const size_t prev = key.rfind(kSep, last == 0 ? 0 : last - 1);
    const size_t begin = prev == std::string::npos || prev >= last ? 0 : prev + kSep.size();
    std::string frame = key.substr(begin, last - begin);
    // Drop the "kind:" prefix ("op:aten::mm" -> "aten::mm"), not a C++ "ns::" qualifier.
    const size_t colon = frame.find(':');
    if (colon != std::string::npos && colon + 1 < frame.size() && frame[colon + 1] != ':') {
      frame.erase(0, colon + 1);
    }
    return frame;
  }

  std::vector<Column> PickColumns() const {
    const auto& rows = model_.workers();
    const std::vector<size_t> sample = model_.SelectWorkers(kColumnSample);
    std::unordered_map<std::string, size_t> index;
    std::vector<Column> all;
    std::vector<std::vector<double>> values;
    for (size_t s = 0; s < sample.size(); ++s) {
      const WorkerSummary& w = *rows[sample[s]].summary;
      const double iters = static_cast<double>(w.iteration_count());
      for (size_t i = 0; i < w.functions.size(); ++i) {
        const FunctionSummary& f = w.functions[i];
        if (f.kind == EventKind::kIteration) continue;
        std::string key = w.Key(i);
        auto [it, inserted] = index.emplace(key, all.size());
        if (inserted) {
          all.push_back({key, f.name.empty() ? key : f.name.str(), 0, 0, false, ""});
          values.emplace_back(sample.size(), 0.0);
        }
        values[it->second][s] += static_cast<double>(f.total_ns) / iters;
      }
    }
    for (size_t c = 0; c < all.size(); ++c) {
      all[c].median = Median(values[c]);
      for (double v : values[c]) {
        all[c].deviation = std::max(all[c].deviation, std::abs(v - all[c].median));
      }
    }
    // Functions named by findings first, in finding order (material ones lead).
    std::vector<Column> picked;
    std::unordered_set<std::string> used;
    for (const Finding& f : model_.diagnosis().findings) {
      if (picked.size() >= options_.max_heatmap_columns) break;
      for (Column& c : all) {
        const bool match = !f.function_key.empty() ? c.key == f.function_key
                                                   : (!f.function.empty() && c.name == f.function);
        if (match && used.insert(c.key).second) {
          c.hit = true;
          picked.push_back(c);
          break;
        }
      }
    }
    // Then alternately the most time and the largest deviation across workers.
    std::vector<size_t> by_time(all.size()), by_dev(all.size());
    for (size_t i = 0; i < all.size(); ++i) by_time[i] = by_dev[i] = i;
    std::sort(by_time.begin(), by_time.end(), [&](size_t a, size_t b) {
      return all[a].median != all[b].median ? all[a].median > all[b].median
                                            : all[a].key < all[b].key;
    });
    std::sort(by_dev.begin(), by_dev.end(), [&](size_t a, size_t b) {
      return all[a].deviation != all[b].deviation ? all[a].deviation > all[b].deviation
                                                  : all[a].key < all[b].key;
    });
    size_t ti = 0, di = 0;
    const size_t first_rest = picked.size();
    for (bool time_turn = true; picked.size() < options_.max_heatmap_columns &&
                                (ti < by_time.size() || di < by_dev.size());
         time_turn = !time_turn) {
      auto& order = time_turn ? by_time : by_dev;
      size_t& pos = time_turn ? ti : di;
      while (pos < order.size() && used.count(all[order[pos]].key)) ++pos;
      if (pos < order.size()) {
        used.insert(all[order[pos]].key);
        picked.push_back(all[order[pos]]);
      }
    }
    std::sort(picked.begin() + static_cast<std::ptrdiff_t>(first_rest), picked.end(),
              [](const Column& a, const Column& b) { return a.median > b.median; });
    // The same name at two call sites: name the caller too ("aten::t ‹ aten::linear").
    std::unordered_map<std::string, size_t> name_count;
    for (const Column& c : picked) ++name_count[c.name];
    for (Column& c : picked) {
      if (name_count[c.name] > 1) c.label = c.name + " ‹ " + CallerName(c.key);
    }
    return picked;
  }

  void HeatMap() {
    const auto& rows = model_.workers();
    const std::vector<Column> cols = PickColumns();
    if (cols.empty()) return;
    std::vector<size_t> shown = model_.SelectWorkers(options_.max_heatmap_rows);
    // Culprits first, then victims, then the rest; by rank within each group.
    std::stable_sort(shown.begin(), shown.end(), [&](size_t a, size_t b) {
      const auto order = [&](size_t i) {
        switch (rows[i].role) {
          case WorkerRole::kCulprit: return 0;
          case WorkerRole::kVictim: return 1;
          default: return 2;
        }
      };
      return order(a) != order(b) ? order(a) < order(b) : rows[a].rank < rows[b].rank;
    });
    out_ += "<section><h2>Where the time goes: workers × functions</h2><p class=\"sub\">Each "
            "cell is a worker's time per iteration in a function, relative to the median across"
            " workers: <b style=\"color:#b2182b\">red</b> slower, <b style=\"color:#2166ac\">"
            "blue</b> faster. Hover a cell for exact values; click a column to sort.";
    if (shown.size() < rows.size()) {
      out_ += fmt::format(" Showing {} of {} workers: culprits first, then victims, the slowest "
                          "and an even sample of the rest; the JSON report lists every worker.",
                          shown.size(), rows.size());
    }
    out_ += "</p><div class=\"panel scroll\"><table class=\"hm\" id=\"hm\"><thead><tr>"
            "<th class=\"corner\" title=\"click to restore the order\">worker</th>"
            "<th class=\"corner\" title=\"median iteration time\">iteration</th>";
    for (const Column& c : cols) {
      out_ += fmt::format("<th class=\"fn{}\" title=\"{}\"><span>{}</span></th>",
                          c.hit ? " hit" : "", EscapeHtml(c.key),
                          EscapeHtml(TruncateEnd(report::SanitizeText(c.label.empty() ? c.name : c.label),
                                                 kColumnLabelChars)));
    }
    out_ += "</tr><tr class=\"med\"><th>median</th><td>" +
            EscapeHtml(FormatDuration(model_.median_iteration_ns())) + "</td>";
    for (const Column& c : cols) out_ += "<td>" + EscapeHtml(Compact(FormatDuration(c.median))) + "</td>";
    out_ += "</tr></thead><tbody>\n";
    for (size_t o = 0; o < shown.size(); ++o) {
      const WorkerRow& w = rows[shown[o]];
      const char* cls = w.role == WorkerRole::kCulprit  ? "culprit"
                        : w.role == WorkerRole::kVictim ? "victim"
                                                        : "peer";
      out_ += fmt::format("<tr class=\"{}\" data-o=\"{}\"><th title=\"{}\">rank {}{}</th>", cls,
                          o, EscapeHtml(w.summary->source), w.rank,
                          w.role == WorkerRole::kPeer
                              ? ""
                              : fmt::format("<em>{}</em>", report::WorkerRoleName(w.role)));
      Cell(w, "iteration", model_.median_iteration_ns(), w.median_iteration_ns, true);
      for (const Column& c : cols) {
        Cell(w, c.name, c.median, ReportModel::PerIterationNs(*w.summary, c.key), false);
      }
      out_ += "</tr>\n";
    }
    out_ += "</tbody></table><div class=\"scale\"><span>0.5× median</span><span class=\"grad\">"
            "</span><span>2× median</span><span style=\"margin-left:16px\"><i style=\"display:"
            "inline-block;width:14px;height:12px;vertical-align:-2px;background:repeating-linear-"
            "gradient(45deg,#f2f4f7 0 4px,#fff 4px 8px);border:1px solid #e4e7ec\"></i> did not "
            "run</span></div></div></section>\n";
  }

  // One heat map cell: value ns per iteration against the column median.
  void Cell(const WorkerRow& w, const std::string& what, double median, double value,
            bool iteration) {
    const std::string cls = iteration ? " class=\"it\"" : "";
    if (value < 0) {
      out_ += fmt::format("<td class=\"na\" title=\"rank {} · {}: did not run\">–</td>", w.rank,
                          EscapeHtml(what));
      return;
    }
    const double ratio = median > 0 ? value / median : (value > 0 ? kSaturateRatio : 1);
    const auto [bg, white] = RatioColor(ratio);
    std::string tip = fmt::format("rank {} · {}: {} per iteration", w.rank, what,
                                  FormatDuration(value));
    if (median > 0) {
      tip += fmt::format(" = {:.2f}x the median {}", ratio, FormatDuration(median));
    } else {
      tip += " (median across workers: 0)";
    }
    std::string text;
    if (iteration) {
      text = FormatDuration(value);
    } else if (ratio >= kShowRatioAbove || ratio <= 1 / kShowRatioAbove) {
      text = median > 0 ? RatioText(ratio) : "new";
    }
    out_ += fmt::format("<td{} style=\"background:{}{}\" data-v=\"{:.0f}\" title=\"{}\">{}</td>",
                        cls, bg, white ? ";color:#fff" : "", Finite(value), EscapeHtml(tip),
                        EscapeHtml(text));
  }

  void Notes() {
    const Diagnosis& d = model_.diagnosis();
    std::vector<const WorkerRow*> problems;
    for (const WorkerRow& w : model_.workers()) {
      if (HasDataQualityProblem(w.summary->stats)) problems.push_back(&w);
    }
    if (d.notes.empty() && problems.empty()) return;
    out_ += "<section><h2>Notes</h2><div class=\"panel\">";
    if (!d.notes.empty()) {
      out_ += "<ul class=\"notes\">";
      for (const std::string& n : d.notes) out_ += "<li>" + EscapeHtml(n) + "</li>";
      out_ += "</ul>";
    }
    if (!problems.empty()) {
      // The counters of the table (summary/data_quality_counters.h) read together, and every
      // other one a listed worker counted.
      std::vector<const DataQualityCounter*> columns;
      for (const DataQualityCounter& c : kDataQualityCounters) {
        bool counted = c.noted_at_zero;
        for (size_t i = 0; i < problems.size() && i < kMaxQualityRows && !counted; ++i) {
          counted = problems[i]->summary->stats.*c.count > 0;
        }
        if (counted) columns.push_back(&c);
      }
      out_ += fmt::format(
          "<p class=\"sub\" style=\"margin-top:10px\">Input problems on {} "
          "worker{} (counted, not fatal):</p><table class=\"list\"><tr><th>rank"
          "</th><th>events</th>",
          problems.size(), problems.size() == 1 ? "" : "s");
      for (const DataQualityCounter* c : columns) out_ += fmt::format("<th>{}</th>", c->column);
      out_ += "<th>first problem</th><th>source</th></tr>";
      for (size_t i = 0; i < problems.size() && i < kMaxQualityRows; ++i) {
        const WorkerRow& w = *problems[i];
        const SummaryStats& s = w.summary->stats;
        out_ += fmt::format("<tr><td class=\"n\">{}</td><td class=\"n\">{}</td>", w.rank, s.events);
        for (const DataQualityCounter* c : columns) {
          out_ += fmt::format("<td class=\"n\">{}</td>", s.*c->count);
        }
        out_ += fmt::format("<td>{}</td><td><code>{}</code></td></tr>", EscapeHtml(s.first_problem),
                            EscapeHtml(w.summary->source));
      }
      out_ += "</table>";
      if (problems.size() > kMaxQualityRows) {
        out_ += fmt::format("<p class=\"sub\">… and {} more workers (see the JSON report).</p>",
                            problems.size() - kMaxQualityRows);
      }
    }
    out_ += "</div></section>\n";
  }

  const ReportModel& model_;
  const HtmlOptions& options_;
  std::string perfetto_file_;
  std::string out_;
};

}  // namespace

std::string RenderHtml(const ReportInput& input, const HtmlOptions& options) {
  const ReportModel model(input);
  return HtmlWriter(model, options, input.perfetto_file).Render();
}

}  // namespace perftracker
