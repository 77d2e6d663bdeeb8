// HangAnalyzer — culprit and victims of a hang, from Python stacks.
//
// In synchronous training a hang is nearly always one rank that stopped (stuck in its own
// code, its data loader, a dead lock, a crashed peer process) while every other rank waits
// for it inside the next collective. So each rank's *main thread* is classified by its
// innermost frames (the training loop runs there; other threads are the agent's, the data
// loader's pin-memory thread, ...):
//   waiting    the innermost frame that is not the standard library (threading, queue,
//              selectors: how any wait looks) is torch.distributed, DDP
//              (torch/nn/parallel/distributed.py), or autograd's backward — DDP waits for
//              its gradient all-reduce at the end of backward, in C++, so a backward that
//              never returns is a communication wait — or the innermost frame itself is a
//              user line calling `.wait(` (an async collective's Work.wait(), C++ has no
//              frame);
//   own code   anything else: the rank is stuck in its own Python code or its data loader;
//   no stacks  the rank sent none (stuck in native code holding the GIL, dead, or
//              unreachable) or they could not be parsed.
// Verdict, in order:
//   1. some ranks in own code, others waiting: the former are the culprits, the latter
//      their victims;
//   2. nobody in own code, some without stacks: those are the culprits (the others wait
//      for them);
//   3. everybody waiting: the ranks whose last progress (last iteration end) is earliest
//      are the culprits; waits in *different* collectives are reported as a likely
//      collective mismatch;
//   4. nobody waiting: every rank is stuck in its own code; all are culprits.
// Evidence: the culprit's innermost user frames (file:line function; user = not the
// standard library, site- or dist-packages), its source line, which collective the victims
// wait in, the silence since each side's last progress, and the ranks without stacks.
//
// Waiting in autograd means waiting in its engine: the innermost frame is backward / grad /
// _engine_run_backward of torch/autograd or torch/_tensor.py (the C++ engine runs below
// it). Other Python code under torch/autograd (the profiler's post-processing in
// profiler.py / profiler_util.py, a custom Function's Python) runs; it waits for nothing.
//
// Busy, not hung. A stack is one instant: a thread that calls the same small function
// again and again (torch.profiler building 70,000 FunctionEvent / Interval objects for
// 30 s) shows the same frames in every sample, yet runs. The window's summary says which:
// the hang window starts at the trigger, so every Python call a rank recorded in it came
// after its last progress. Its main thread's calls are those whose call path starts at one
// of the frames of its main-thread stack (every path is the whole stack from the thread's
// outermost frame; other threads start in threading's _bootstrap). A main thread that
// recorded kBusyCallsPerSecond calls per second of the window, beyond the frames that were
// open all along (the hook closes each at the window's end: one call per frame), is busy.
// When some ranks are busy and every other one waits in a collective (or is busy too), the
// job is not hung: it waits for work outside the training loop (or an endless loop: the
// frames show which). BusyVerdict says so; a rank stuck in its own code without calls, or
// without stacks, keeps the PT-HANG verdict above.
//
// How long busy stands in for progress. An endless Python loop is busy at every look, and
// the detector fires once per silence: without a bound it would never be a hang. Real jobs
// are busy without a marker for long, though (torch.profiler's post-processing 30+ s on an
// H200 host, a checkpoint's pickling, an evaluation pass, torch.compile), and a false hang
// is as bad as a miss. The bound is relative to the silence that made the hang trigger, the
// detector's own limit for this job (max(4 x its mean iteration, 1.5 x its longest, the
// minimum silence, 30 s by default)): kBusyLimitFactor (10) times it. With the default
// minimum that is 5 minutes for any job whose iterations are under 7.5 s, an order of
// magnitude above the pauses seen, and half of NCCL's watchdog (10 minutes), which kills
// the waiting ranks without saying why; a job with 60 s iterations gets 40 minutes. A busy
// rank whose last progress is at least that long ago is hung: PT-HANG of the kind "busy: no
// iteration progress", with the frames it loops in. (The coordinator looks again when the
// bound is reached: server/window_coordinator.h.)
#include "perftracker/localize/hang_analyzer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "perftracker/core/units.h"
#include "perftracker/localize/finding_catalogue.h"

namespace perftracker {
namespace {

constexpr size_t kUserFramesShown = 3;
constexpr size_t kBusyFramesShown = 4;
constexpr size_t kBusyFramesInTitle = 2;
constexpr size_t kStackFramesShown = 12;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// `File "<file>", line <n>, in <function>` (traceback) or `File "<file>", line <n> in
// <function>` (faulthandler).
bool ParseFrameLine(std::string_view line, StackFrame* frame) {
  line = Trim(line);
  if (!line.starts_with("File \"")) return false;
  line.remove_prefix(6);
  const size_t quote = line.find("\", line ");
  if (quote == std::string_view::npos) return false;
  frame->file = std::string(line.substr(0, quote));
  line.remove_prefix(quote + 8);
  int32_t number = 0;
  const auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), number);
  if (ec != std::errc()) return false;
  frame->line = number;
  line.remove_prefix(static_cast<size_t>(ptr - line.data()));
  if (line.starts_with(",")) line.remove_prefix(1);
  line = Trim(line);
  if (line.starts_with("in ")) line.remove_prefix(3);
  frame->function = std::string(Trim(line));
  frame->code.clear();
  return true;
}

bool IsStdlib(const StackFrame& f) {
  if (f.file.starts_with("<")) return true;  // <frozen importlib._bootstrap>, <string>
  if (Contains(f.file, "site-packages/") || Contains(f.file, "dist-packages/")) return false;
  return Contains(f.file, "/lib/python3") || Contains(f.file, "/lib64/python3");
}

bool IsLibrary(const StackFrame& f) {
  return IsStdlib(f) || Contains(f.file, "site-packages/") || Contains(f.file, "dist-packages/");
}

bool IsGenericName(std::string_view name) {
  return name == "wrapper" || name == "inner" || name == "_fn" || name == "wait" ||
         name == "_wait" || name == "__call__" || name == "_call_impl" ||
         name == "_wrapped_call_impl";
}

std::string Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string FrameText(const StackFrame& f) {
  return fmt::format("{}:{} {}", f.file, f.line, f.function);
}

std::string RankList(std::vector<int32_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) {
      out += fmt::format(" ... ({} in all)", ranks.size());
      break;
    }
    out += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  }
  return out;
}

enum class Where : uint8_t { kNoStacks, kWaiting, kOwnCode };

struct Classified {
  int32_t rank = -1;
  int64_t last_progress_ns = 0;
  Where where = Where::kNoStacks;
  std::string why_no_stacks;
  std::string wait_label;               // kWaiting: "all_reduce", "backward (DDP ...)"
  std::vector<StackFrame> frames;       // main thread, outermost first
  std::vector<const StackFrame*> user;  // innermost user frames, innermost first
  bool data_loader = false;             // kOwnCode: stuck in the data loader
  // Python calls its main thread recorded in the window (0 without a window summary), and
  // whether that makes it busy (see "Busy, not hung").
  uint64_t main_calls = 0;
  int64_t window_ns = 0;
  bool busy = false;
};

// "Interval.__init__ (profiler_util.py:538)", a call path's frame, is `frame`: the same file
// name and function (the summary has the qualified name, the stack the bare one).
bool SameFunction(std::string_view name, const StackFrame& frame) {
  const size_t open = name.rfind(" (");
  if (open == std::string_view::npos || !name.ends_with(")")) return false;
  std::string_view where = name.substr(open + 2, name.size() - open - 3);
  where = where.substr(0, where.rfind(':'));
  const std::string_view qualified = name.substr(0, open);
  if (where != Basename(frame.file)) return false;
  return qualified == frame.function ||
         (qualified.size() > frame.function.size() && qualified.ends_with(frame.function) &&
          qualified[qualified.size() - frame.function.size() - 1] == '.');
}

bool IsAutogradEngineCall(const StackFrame& f) {
  if (!Contains(f.file, "torch/autograd/") && !Contains(f.file, "torch/_tensor.py")) return false;
  return f.function == "backward" || f.function == "grad" || f.function == "_engine_run_backward" ||
         f.function == "run_backward";
}

Classified Classify(int32_t rank, const std::optional<std::string>& stacks,
                    int64_t last_progress_ns, const std::map<std::string, uint64_t>& calls_by_root,
                    int64_t window_ns) {
  Classified c;
  c.rank = rank;
  c.last_progress_ns = last_progress_ns;
  if (!stacks.has_value()) {
    c.why_no_stacks = "no stacks received";
    return c;
  }
  std::vector<ThreadStack> threads = ParsePythonStacks(*stacks);
  const ThreadStack* main = nullptr;
  for (const auto& t : threads) {
    if (t.is_main) main = &t;
  }
  if (main == nullptr && !threads.empty()) main = &threads.front();
  if (main == nullptr || main->frames.empty()) {
    c.why_no_stacks = "stacks unreadable (no thread with frames)";
    return c;
  }
  c.frames = main->frames;
  const auto& fr = c.frames;
  c.window_ns = window_ns;
  for (const auto& [root, calls] : calls_by_root) {
    if (std::any_of(fr.begin(), fr.end(),
                    [&](const StackFrame& f) { return SameFunction(root, f); })) {
      c.main_calls += calls;
    }
  }
  if (window_ns > 0 && c.main_calls > fr.size()) {
    const double ran = static_cast<double>(c.main_calls - fr.size());
    c.busy = ran >= static_cast<double>(HangAnalyzer::kBusyMinCalls) &&
             ran >= HangAnalyzer::kBusyCallsPerSecond * static_cast<double>(window_ns) / 1e9;
  }
  // Innermost user frames.
  for (size_t i = fr.size(); i-- > 0 && c.user.size() < kUserFramesShown;) {
    if (!IsLibrary(fr[i])) c.user.push_back(&fr[i]);
  }
  // The innermost frame that is not the standard library.
  size_t inner = fr.size();
  for (size_t i = fr.size(); i-- > 0;) {
    if (!IsStdlib(fr[i])) {
      inner = i;
      break;
    }
  }
  c.where = Where::kOwnCode;
  if (inner == fr.size() || c.busy) return c;  // a busy thread runs: it waits for nothing
  const StackFrame& f = fr[inner];
  if (Contains(f.file, "torch/distributed/")) {
    c.where = Where::kWaiting;
    c.wait_label = f.function;
    for (size_t i = inner + 1; i-- > 0 && Contains(fr[i].file, "torch/distributed/");) {
      if (!IsGenericName(fr[i].function)) {
        c.wait_label = fr[i].function;
        break;
      }
    }
  } else if (Contains(f.file, "torch/nn/parallel/distributed.py")) {
    c.where = Where::kWaiting;
    c.wait_label = fmt::format("DistributedDataParallel.{}", f.function);
  } else if (IsAutogradEngineCall(f)) {
    c.where = Where::kWaiting;
    c.wait_label = "backward (DDP gradient all-reduce)";
  } else if (inner + 1 == fr.size() && !IsLibrary(f) && Contains(f.code, ".wait(")) {
    c.where = Where::kWaiting;
    c.wait_label = fmt::format("{} (an async collective's wait)", Trim(f.code));
  } else if (Contains(f.file, "torch/utils/data/")) {
    c.data_loader = true;
  }
  return c;
}

// Every rank classified, in rank order (HangAnalyzer's ranks: its private Rank records).
template <typename Ranks>
std::vector<Classified> ClassifyAll(const Ranks& ranks) {
  std::vector<Classified> all;
  for (const auto& r : ranks) {
    all.push_back(Classify(r.rank, r.stacks, r.last_progress_ns, r.calls_by_root, r.window_ns));
  }
  std::sort(all.begin(), all.end(),
            [](const Classified& a, const Classified& b) { return a.rank < b.rank; });
  return all;
}

// A busy rank whose last progress is at least limit_ns ago (limit 0: never).
bool BusyTooLong(const Classified& c, int64_t now_ns, int64_t limit_ns) {
  return c.busy && limit_ns > 0 && c.last_progress_ns > 0 &&
         now_ns - c.last_progress_ns >= limit_ns;
}

// "ranks 0, 1, 3 wait in all_reduce; rank 2 waits in barrier".
std::string WaitPhrase(const std::map<std::string, std::vector<int32_t>>& by_wait) {
  std::string phrase;
  for (const auto& [label, ranks] : by_wait) {
    if (!phrase.empty()) phrase += "; ";
    phrase += fmt::format("{} wait{} in {}", RankList(ranks), ranks.size() == 1 ? "s" : "", label);
  }
  return phrase;
}

// Where a busy main thread runs: its innermost frames outside the standard library,
// outermost first ("profiler.py:665 _parse_kineto_results > profiler_util.py:649 __init__
// > ..."), and the innermost user frame they were called from when it is not among them.
std::string BusyFrames(const Classified& c, size_t max_frames = kBusyFramesShown) {
  std::vector<const StackFrame*> shown;
  for (size_t i = c.frames.size(); i-- > 0 && shown.size() < max_frames;) {
    if (!IsStdlib(c.frames[i])) shown.push_back(&c.frames[i]);
  }
  if (shown.empty() && !c.frames.empty()) shown.push_back(&c.frames.back());
  std::string out;
  for (size_t i = shown.size(); i-- > 0;) {
    out += fmt::format("{}{}:{} {}", out.empty() ? "" : " > ", Basename(shown[i]->file),
                       shown[i]->line, shown[i]->function);
  }
  if (!c.user.empty() && std::find(shown.begin(), shown.end(), c.user.front()) == shown.end()) {
    const StackFrame& u = *c.user.front();
    out += fmt::format(" (called from {}:{} {})", Basename(u.file), u.line, u.function);
  }
  return out;
}

bool IsThreadIdent(std::string_view s) {
  if (s.starts_with("0x")) s.remove_prefix(2);
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

// A thread header, in any of the accepted shapes:
//   Thread 140371 (MainThread) (most recent call last):       documented agent format
//   Thread MainThread (140371) [main], most recent call last:  name first, main marked
//   Thread 0x00007f3b2c1ff640 (most recent call first):        faulthandler
//   Current thread 0x00007f3b3a6e7740 (most recent call first):
ThreadStack ParseHeader(std::string_view line) {
  ThreadStack t;
  t.is_main = line.starts_with("Current thread ") || Contains(line, "[main]");
  std::string_view rest = line.substr(line.find("hread ") + 6);
  rest = rest.substr(0, rest.find("most recent call"));
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '(' || rest.back() == ',')) {
    rest.remove_suffix(1);
  }
  if (const size_t m = rest.find(" [main]"); m != std::string_view::npos) {
    rest = rest.substr(0, m);
  }
  rest = Trim(rest);
  // rest: "<a>" or "<a> (<b>)", one of them the ident.
  std::string_view a = rest;
  std::string_view b;
  if (rest.ends_with(")")) {
    const size_t open = rest.rfind(" (");
    if (open != std::string_view::npos) {
      a = Trim(rest.substr(0, open));
      b = rest.substr(open + 2, rest.size() - open - 3);
    }
  }
  if (!b.empty() && !IsThreadIdent(a) && IsThreadIdent(b)) std::swap(a, b);
  t.id = std::string(a);
  t.name = std::string(b);
  t.is_main = t.is_main || t.name == "MainThread";
  return t;
}

}  // namespace

std::vector<ThreadStack> ParsePythonStacks(std::string_view text) {
  std::vector<ThreadStack> threads;
  bool innermost_first = false;
  auto finish = [&] {
    if (!threads.empty() && innermost_first) {
      std::reverse(threads.back().frames.begin(), threads.back().frames.end());
    }
  };
  bool last_was_frame = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view raw = text.substr(pos, eol - pos);
    pos = eol + 1;
    const std::string_view line = Trim(raw);
    const bool header = (line.starts_with("Thread ") || line.starts_with("Current thread ")) &&
                        Contains(line, "most recent call");
    if (header) {
      finish();
      threads.push_back(ParseHeader(line));
      innermost_first = Contains(line, "most recent call first");
      last_was_frame = false;
      continue;
    }
    StackFrame frame;
    if (ParseFrameLine(line, &frame)) {
      if (threads.empty()) threads.emplace_back();  // frames without a header: one thread
      threads.back().frames.push_back(std::move(frame));
      last_was_frame = true;
      continue;
    }
    // The source line under a frame (indented deeper than "File").
    if (last_was_frame && !line.empty() && !threads.empty() && !threads.back().frames.empty() &&
        threads.back().frames.back().code.empty()) {
      threads.back().frames.back().code = std::string(line);
    }
    last_was_frame = false;
  }
  finish();
  return threads;
}

void HangAnalyzer::AddRank(int32_t rank, std::optional<std::string> stacks,
                           int64_t last_progress_ns, const WorkerSummary* window) {
  Rank r{rank, std::move(stacks), last_progress_ns, {}, 0};
  if (window != nullptr && window->window_ns() > 0) {
    // Each Python function's root: the outermost frame of its call path (memoized along
    // the chain; a parent index out of range or a cycle ends the walk).
    const auto& fns = window->functions;
    constexpr uint32_t kUnknown = FunctionSummary::kNoParent;
    std::vector<uint32_t> root(fns.size(), kUnknown);
    std::vector<uint32_t> chain;
    for (uint32_t i = 0; i < fns.size(); ++i) {
      chain.clear();
      uint32_t at = i;
      while (root[at] == kUnknown && chain.size() <= fns.size()) {
        chain.push_back(at);
        const uint32_t parent = fns[at].parent;
        if (parent == FunctionSummary::kNoParent || parent >= fns.size()) break;
        at = parent;
      }
      const uint32_t top = root[at] != kUnknown ? root[at] : at;
      for (uint32_t j : chain) root[j] = top;
    }
    for (uint32_t i = 0; i < fns.size(); ++i) {
      const FunctionSummary& f = fns[i];
      if (f.kind != EventKind::kPythonCall || f.count == 0) continue;
      const FunctionSummary& top = fns[root[i]];
      if (top.kind != EventKind::kPythonCall) continue;
      r.calls_by_root[std::string(top.name.view())] += f.count;
    }
    r.window_ns = window->window_ns();
  }
  ranks_.push_back(std::move(r));
}

int64_t HangAnalyzer::BusyLimitNs(int64_t trigger_silence_ns) {
  return trigger_silence_ns > 0 ? kBusyLimitFactor * trigger_silence_ns : 0;
}

std::string HangAnalyzer::BusyVerdict(int64_t now_ns) const {
  const std::vector<Classified> all = ClassifyAll(ranks_);
  std::vector<const Classified*> busy;
  std::map<std::string, std::vector<int32_t>> by_wait;
  for (const auto& c : all) {
    if (c.busy && BusyTooLong(c, now_ns, busy_limit_ns_)) {
      return "";  // busy past the bound without an iteration: a hang (Analyze says so)
    }
    if (c.busy) {
      busy.push_back(&c);
    } else if (c.where == Where::kWaiting) {
      by_wait[c.wait_label].push_back(c.rank);
    } else {
      return "";  // stuck in its own code without running, or no stacks: a hang
    }
  }
  std::string out;
  for (const Classified* c : busy) {
    const std::string silence =
        c->last_progress_ns > 0 && now_ns > c->last_progress_ns
            ? fmt::format(" for {}",
                          FormatDuration(static_cast<double>(now_ns - c->last_progress_ns)))
            : "";
    out += fmt::format(
        "{}rank {} made no iteration progress{} while its main thread was busy running Python "
        "code, not waiting in a collective ({} calls in the {} window): {}",
        out.empty() ? "" : "; ", c->rank, silence, c->main_calls,
        FormatDuration(static_cast<double>(c->window_ns)), BusyFrames(*c));
  }
  if (!out.empty() && !by_wait.empty()) out += "; " + WaitPhrase(by_wait);
  return out;
}

Finding HangAnalyzer::Analyze(int64_t now_ns, int64_t mean_iteration_ns) const {
  Finding f;
  f.code = std::string(finding_codes::kHang);
  f.category = FindingCategory::kHang;
  f.material = true;
  f.lost_share = 1.0;
  const std::vector<Classified> all = ClassifyAll(ranks_);
  std::vector<const Classified*> waiting, own, missing;
  for (const auto& c : all) {
    (c.where == Where::kWaiting   ? waiting
     : c.where == Where::kOwnCode ? own
                                  : missing)
        .push_back(&c);
  }
  auto ranks_of = [](const std::vector<const Classified*>& cs) {
    std::vector<int32_t> out;
    for (const auto* c : cs) out.push_back(c->rank);
    return out;
  };
  // Waiting ranks by what they wait in: "ranks 0, 1, 3 wait in all_reduce".
  std::map<std::string, std::vector<int32_t>> by_wait;
  for (const auto* c : waiting) by_wait[c->wait_label].push_back(c->rank);
  const std::string wait_phrase = WaitPhrase(by_wait);
  auto earliest = [](const std::vector<const Classified*>& cs) {
    std::vector<const Classified*> out;
    int64_t best = INT64_MAX;
    for (const auto* c : cs) {
      if (c->last_progress_ns > 0) best = std::min(best, c->last_progress_ns);
    }
    for (const auto* c : cs) {
      if (c->last_progress_ns > 0 && c->last_progress_ns == best) out.push_back(c);
    }
    return out;
  };

  // A rank stuck without running is what the others wait for before a busy one: it leads.
  std::stable_partition(own.begin(), own.end(), [](const Classified* c) { return !c->busy; });
  std::vector<const Classified*> culprits, victims;
  std::string verdict;
  if (!own.empty() && !waiting.empty()) {
    culprits = own;
    victims = waiting;
  } else if (own.empty() && !missing.empty() && !waiting.empty()) {
    culprits = missing;
    victims = waiting;
  } else if (own.empty()) {
    // Everybody waits (or nobody sent stacks): who stopped first.
    std::vector<const Classified*> pool = waiting.empty() ? missing : waiting;
    culprits = earliest(pool);
    for (const auto* c : pool) {
      if (std::find(culprits.begin(), culprits.end(), c) == culprits.end()) victims.push_back(c);
    }
    verdict = culprits.empty() ? "no rank's last progress is known" : "earliest last progress";
  } else {
    culprits = own;  // nobody waits: every rank is stuck in its own code
  }

  const Classified* worst = culprits.empty() ? nullptr : culprits.front();
  for (const auto* c : culprits) f.workers.push_back(c->rank);
  for (const auto* c : victims) {
    if (c->where == Where::kWaiting) f.victims.push_back(c->rank);
  }
  // Silence: the earliest last progress of the culprits (or of anyone).
  int64_t stopped = 0;
  for (const auto* c : culprits.empty() ? std::vector<const Classified*>{} : culprits) {
    if (c->last_progress_ns > 0)
      stopped = stopped == 0 ? c->last_progress_ns : std::min(stopped, c->last_progress_ns);
  }
  if (stopped == 0) {
    for (const auto& c : all) {
      if (c.last_progress_ns > 0) {
        stopped = stopped == 0 ? c.last_progress_ns : std::min(stopped, c.last_progress_ns);
      }
    }
  }
  f.lost_ns_per_iteration =
      stopped > 0 && now_ns > stopped ? static_cast<double>(now_ns - stopped) : 0;
  const std::string who = culprits.empty() ? "no rank" : RankList(ranks_of(culprits));
  const std::string silence =
      f.lost_ns_per_iteration > 0
          ? fmt::format(", no progress for {}", FormatDuration(f.lost_ns_per_iteration))
          : "";

  if (worst != nullptr && worst->where == Where::kOwnCode) {
    const StackFrame* top = worst->user.empty() ? &worst->frames.back() : worst->user.front();
    f.function = top->function;
    f.function_key = FrameText(*top);
    f.resource = worst->data_loader ? "data loader" : "the rank's own code";
    const std::string at = fmt::format("{}:{} {}", Basename(top->file), top->line, top->function);
    if (worst->busy) {
      // Busy past the bound (every own-code culprit is busy: a stuck one would lead). The
      // kind of hang first, then where it loops and how much it ran.
      f.resource = "the rank's own code (busy: no iteration progress)";
      const std::string ran = fmt::format("{} calls in the {} window", worst->main_calls,
                                          FormatDuration(static_cast<double>(worst->window_ns)));
      f.title = fmt::format(
          "{} hang{} busy: no iteration progress{} while {} main thread{} {} Python code in {}, "
          "{}{}{}",  // in: its two innermost frames outside the standard library
          who, culprits.size() == 1 ? "s" : "",
          f.lost_ns_per_iteration > 0
              ? fmt::format(" for {}", FormatDuration(f.lost_ns_per_iteration))
              : "",
          culprits.size() == 1 ? "its" : "their", culprits.size() == 1 ? "" : "s",
          culprits.size() == 1 ? "runs" : "run", BusyFrames(*worst, kBusyFramesInTitle), ran,
          culprits.size() == 1 ? "" : fmt::format(" on rank {}", worst->rank),
          waiting.empty() ? "" : "; " + wait_phrase);
      std::string bound = "busy work stands in for progress";
      if (busy_limit_ns_ > 0) {
        bound = fmt::format(
            "busy work stands in for progress for at most {} ({}x the silence that made the "
            "hang trigger)",
            FormatDuration(static_cast<double>(busy_limit_ns_)), kBusyLimitFactor);
      }
      f.evidence.push_back(
          {"busy: no iteration progress", fmt::format("rank {}: {}; {}", worst->rank, ran, bound)});
      f.evidence.push_back({fmt::format("where rank {} loops", worst->rank), BusyFrames(*worst)});
    } else if (waiting.empty()) {
      f.title = fmt::format("the job hangs: {} {} stuck in {} own code (e.g. {}){}", who,
                            culprits.size() == 1 ? "is" : "are",
                            culprits.size() == 1 ? "its" : "their", at, silence);
    } else {
      f.title = fmt::format("{} hang{} in {} while {}{}", who, culprits.size() == 1 ? "s" : "", at,
                            wait_phrase, silence);
    }
    std::string frames;
    for (const StackFrame* u : worst->user) {
      frames += (frames.empty() ? "" : " <- ") + FrameText(*u);
    }
    f.evidence.push_back({fmt::format("innermost user frames on rank {}", worst->rank),
                          frames.empty() ? "none (only library frames)" : frames});
    if (!top->code.empty()) {
      f.evidence.push_back({"source line", fmt::format("{}: {}", FrameText(*top), top->code)});
    }
    const StackFrame& innermost = worst->frames.back();
    if (&innermost != top) {
      f.evidence.push_back({"innermost frame", FrameText(innermost)});
    }
  } else if (waiting.empty()) {
    f.resource = "process (no Python stacks)";
    f.title = culprits.empty() ? std::string(
                                     "the job hangs: no rank sent usable Python stacks and no "
                                     "rank's last progress is known")
                               : fmt::format(
                                     "the job hangs: no rank sent usable Python stacks; {} stopped "
                                     "first ({}){}",
                                     who, verdict, silence);
  } else if (worst != nullptr && worst->where == Where::kNoStacks) {
    f.resource = "process (no Python stacks)";
    f.title = fmt::format(
        "{} sent no Python stacks while {}{}: stuck in native code holding "
        "the GIL, dead, or unreachable",
        who, wait_phrase.empty() ? "the others wait" : wait_phrase, silence);
  } else {
    f.resource = "communication (a collective never completed)";
    if (worst != nullptr && worst->where == Where::kWaiting) {
      f.function = worst->wait_label;
    }
    f.title = fmt::format("every rank waits in a collective{}; {} stopped first ({})",
                          by_wait.size() > 1 ? " (different ones: a collective mismatch?)" : "",
                          who, verdict);
  }
  if (!wait_phrase.empty()) f.evidence.push_back({"waiting in a collective", wait_phrase});
  if (by_wait.size() > 1) {
    f.evidence.push_back({"collective mismatch",
                          "ranks wait in different collectives: check that every rank calls "
                          "the same collectives in the same order"});
  }
  // Last progress: the culprits' vs the others'.
  if (now_ns > 0) {
    auto ago = [&](const std::vector<const Classified*>& cs) -> std::string {
      std::vector<int64_t> v;
      for (const auto* c : cs) {
        if (c->last_progress_ns > 0 && now_ns >= c->last_progress_ns) {
          v.push_back(now_ns - c->last_progress_ns);
        }
      }
      if (v.empty()) return "";
      std::sort(v.begin(), v.end());
      return FormatDuration(static_cast<double>(v[v.size() / 2])) + " ago";
    };
    std::vector<const Classified*> others;
    for (const auto& c : all) {
      if (std::find(culprits.begin(), culprits.end(), &c) == culprits.end()) {
        others.push_back(&c);
      }
    }
    const std::string culprit_ago = ago(culprits);
    const std::string others_ago = ago(others);
    if (!culprit_ago.empty() || !others_ago.empty()) {
      f.evidence.push_back(
          {"last progress (iteration end)",
           fmt::format(
               "{}: {}{}", who, culprit_ago.empty() ? "unknown" : culprit_ago,
               others_ago.empty() ? "" : fmt::format("; the others: {} (median)", others_ago))});
    }
  }
  if (mean_iteration_ns > 0 && f.lost_ns_per_iteration > 0) {
    f.evidence.push_back(
        {"silence", fmt::format("{:.1f}x the mean iteration ({})",
                                f.lost_ns_per_iteration / static_cast<double>(mean_iteration_ns),
                                FormatDuration(static_cast<double>(mean_iteration_ns)))});
  }
  for (const auto* c : missing) {
    f.evidence.push_back({fmt::format("rank {}", c->rank), c->why_no_stacks});
  }
  if (worst != nullptr && !worst->frames.empty()) {
    std::string stack;
    const size_t n = worst->frames.size();
    for (size_t i = n; i-- > 0 && n - i <= kStackFramesShown;) {
      stack += (stack.empty() ? "" : "\n") + FrameText(worst->frames[i]);
    }
    if (n > kStackFramesShown)
      stack += fmt::format("\n... ({} outer frames)", n - kStackFramesShown);
    f.evidence.push_back(
        {fmt::format("main-thread stack on rank {} (innermost first)", worst->rank), stack});
  }
  return f;
}

}  // namespace perftracker
