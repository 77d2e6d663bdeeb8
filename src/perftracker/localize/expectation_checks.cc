#include "perftracker/localize/expectation_checks.h"

#include <fmt/format.h>

#include <algorithm>

#include "perftracker/core/units.h"
#include "perftracker/localize/finding_catalogue.h"
#include "perftracker/localize/robust_stats.h"

namespace perftracker::localize {
namespace {

namespace fc = finding_codes;

// One expectation: the job median of a per-worker quantity should be ~0.
struct Expectation {
  std::string_view code;
  FindingCategory category;
  std::string_view resource;
  float WorkerRecord::*per_worker;  // per iteration; its job median is the time lost
  bool (*cites)(const FunctionInfo& fn);
  bool by_critical;  // rank the cited functions by critical time (else by time)
  size_t cited;      // at most this many
  // Title; arguments {function} (" (name)" of the top cited function, or empty), {lost},
  // {share}. Every text also takes {per} ("/iter"), {per_word} (" per iteration") and {of}
  // ("of the iteration"): RuleContext's phrases, which say "in the window" and "of the
  // window's wall time" where no worker completed an iteration.
  std::string_view title;
  // The evidence line with the job median; argument {lost}, {median_of}.
  std::string_view median_label;
  // One evidence line per cited function; arguments {name}, {time}, {critical}, {calls},
  // {bytes}, {rate} (per worker, per iteration) and {caller} (", called from X" or empty).
  std::string_view cite_label;
  std::string_view cite;
};

const Expectation kExpectations[] = {
    {fc::kSyncCritical, FindingCategory::kSynchronization, "GPU", &WorkerRecord::sync_critical_ns,
     [](const FunctionInfo& fn) { return fn.kind == EventKind::kSync && fn.outermost_kind; }, true,
     3,
     "host-device synchronizations{function} sit on the critical path: {lost}{per} ({share} {of}, "
     "all workers)",
     "sync on the critical path", "synchronizing function",
     "{name}: {critical}{per} on the critical path, {calls} calls{per} (mean of workers){caller}"},
    {fc::kDataCritical, FindingCategory::kDataLoading, "data loader",
     &WorkerRecord::data_critical_ns,
     [](const FunctionInfo& fn) { return fn.kind == EventKind::kDataLoad && fn.outermost_kind; },
     true, 3,
     "training waits for data: data loading{function} takes {lost}{per} on the critical path "
     "({share} {of}, all workers)",
     "data loading on the critical path", "data-loading function",
     "{name}: {critical}{per} on the critical path, {calls} calls{per} (mean of workers)"},
    {fc::kGc, FindingCategory::kGc, "CPU (Python GC)", &WorkerRecord::gc_ns,
     [](const FunctionInfo& fn) { return fn.kind == EventKind::kGc && fn.outermost_kind; }, false,
     1, "garbage-collector pauses cost {lost}{per} ({share} {of}, all workers)",
     "GC pauses{per_word}", "GC pauses{per_word} (count)", "{calls}"},
    {fc::kPageableMemcpy, FindingCategory::kMemory, "PCIe", &WorkerRecord::pageable_ns,
     [](const FunctionInfo& fn) { return fn.pageable; }, false, 3,
     "copies from pageable host memory{function} take {lost}{per} ({share} {of}, all workers)",
     "pageable copies{per_word}", "pageable copy",
     "{name}: {time}{per}, {bytes}{per_word}, {rate}/s achieved (mean of workers){caller}"},
    // Host-device copies from pinned memory that no kernel overlaps: the GPU waits for them.
    // Pageable copies are the row above; their time is not counted again here. Copies between
    // device memories (DtoD, PtoP) are GPU work, not host-device traffic: never here.
    {fc::kSerializedMemcpy, FindingCategory::kMemory, "PCIe", &WorkerRecord::exposed_copy_ns,
     [](const FunctionInfo& fn) {
       return fn.kind == EventKind::kMemcpy && !fn.pageable && !fn.device_to_device;
     },
     true, 3,
     "host-device copies{function} run while the GPU computes nothing: {lost}{per} ({share} {of}, "
     "all workers)",
     "copy time with no kernel running,{per_word}", "copy",
     "{name}: {critical}{per} with no kernel running, of {time}{per}; {bytes}{per_word}, "
     "{rate}/s achieved (mean of workers){caller}"},
};

}  // namespace

Finding JobFinding(const RuleContext& ctx, std::string_view code, FindingCategory category,
                   std::string resource, double lost_ns, uint32_t fid) {
  Finding f;
  f.code = code;
  f.category = category;
  f.resource = std::move(resource);
  f.lost_ns_per_iteration = lost_ns;
  // Where no worker completed an iteration, lost_ns is the window's and iteration_ns its
  // wall time: the share is of the wall time, and material means the cause took
  // material_share of it (GC pauses stop the thread whether it trains or not).
  f.lost_share = ctx.iteration_ns > 0 ? lost_ns / ctx.iteration_ns : 0;
  f.material = lost_ns >= ctx.material_ns;
  if (fid != kNone) {
    f.function = ctx.job->Name(fid);
    f.function_key = ctx.job->Key(fid);
  }
  return f;
}

std::vector<uint32_t> TopFunctions(const JobTable& job, bool (*pred)(const FunctionInfo&),
                                   bool by_critical, size_t k) {
  const std::vector<FunctionInfo>& functions = job.functions();
  // Reserved exactly: with Python stacks tens of thousands of paths match, and a doubling
  // vector would briefly hold the old and the new array at the localizer's peak.
  size_t matching = 0;
  for (const FunctionInfo& fn : functions) matching += pred(fn);
  std::vector<uint32_t> fids;
  fids.reserve(matching);
  for (uint32_t fid = 0; fid < functions.size(); ++fid) {
    if (pred(functions[fid])) fids.push_back(fid);
  }
  auto weight = [&](uint32_t fid) {
    return by_critical ? job.Totals(fid).sum_critical_ns : job.Totals(fid).sum_time_ns;
  };
  std::sort(fids.begin(), fids.end(),
            [&](uint32_t a, uint32_t b) { return weight(a) > weight(b); });
  std::erase_if(fids, [&](uint32_t fid) { return weight(fid) <= 0; });
  if (fids.size() > k) fids.resize(k);
  return fids;
}

void RunExpectationChecks(const RuleContext& ctx, std::vector<RenderedFinding>& out) {
  const JobTable& job = *ctx.job;
  const std::vector<FunctionInfo>& functions = job.functions();
  const auto num_workers = static_cast<double>(job.workers().size());
  const std::string median_of = fmt::format("median of {} workers", job.workers().size());
  std::vector<float> values;
  std::vector<double> calls, bytes;  // of the cited functions
  for (const Expectation& e : kExpectations) {
    values.clear();
    for (const WorkerRecord& wr : job.workers()) values.push_back(wr.*e.per_worker);
    const double lost = MedianInPlace(values);
    if (lost < ctx.report_ns || lost <= 0) continue;
    const std::vector<uint32_t> top = TopFunctions(job, e.cites, e.by_critical, e.cited);
    Finding f = JobFinding(ctx, e.code, e.category, std::string(e.resource), lost,
                           top.empty() ? kNone : top[0]);
    const char* const per_text = ctx.per();
    const char* const per_word_text = ctx.per_word();
    const char* const of_text = ctx.of();
    const auto per = fmt::arg("per", per_text);
    const auto per_word = fmt::arg("per_word", per_word_text);
    const auto of = fmt::arg("of", of_text);
    f.title = fmt::format(fmt::runtime(e.title),
                          fmt::arg("function", f.function.empty() ? "" : " (" + f.function + ")"),
                          fmt::arg("lost", FormatDuration(lost)),
                          fmt::arg("share", FormatShare(f.lost_share)), per, per_word, of);
    f.evidence.push_back({fmt::format(fmt::runtime(e.median_label), per, per_word, of),
                          fmt::format("{} ({})", FormatDuration(lost), median_of)});
    job.SumCallsAndBytes(top, calls, bytes);
    for (size_t i = 0; i < top.size(); ++i) {
      const uint32_t fid = top[i];
      const FunctionTotals& fn = job.Totals(fid);
      const double rate = fn.sum_time_ns > 0 ? bytes[i] * 1e9 / fn.sum_time_ns : 0;
      const uint32_t p = functions[fid].parent;
      f.evidence.push_back(
          {fmt::format(fmt::runtime(e.cite_label), per, per_word, of),
           fmt::format(
               fmt::runtime(e.cite), per, per_word, of, fmt::arg("name", job.Name(fid)),
               fmt::arg("time", FormatDuration(fn.sum_time_ns / num_workers)),
               fmt::arg("critical", FormatDuration(fn.sum_critical_ns / num_workers)),
               fmt::arg("calls", FormatCount(calls[i] / num_workers)),
               fmt::arg("bytes", FormatBytes(bytes[i] / num_workers)),
               fmt::arg("rate", FormatBytes(rate)),
               fmt::arg("caller", p == kNone ? std::string()
                                             : fmt::format(", called from {}", job.Name(p))))});
    }
    f.evidence.push_back(
        ctx.window_only ? Evidence{"window's wall time (median; no iteration completed)",
                                   FormatDuration(ctx.iteration_ns)}
                        : Evidence{"median iteration (job)", FormatDuration(ctx.iteration_ns)});
    RenderedFinding r;
    r.finding = std::move(f);
    out.push_back(std::move(r));
  }
}

}  // namespace perftracker::localize
