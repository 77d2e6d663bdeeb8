// WindowCoordinator: the server's control plane for one job (embedded in `perftracker run`;
// the multi-host server will put a gRPC service in front of the same class).
//
// Windows. Any rank's trigger (slowdown or hang), or the --trigger-at-seconds timer, opens
// ONE window on every worker of the job: the same wall-clock start (now + delay, so that
// the `window` message reaches every agent before it begins) and length on every collector
// (window_ns; longer until every rank completed window_min_iterations in it, when set).
// Triggers that arrive while a window is open join it (recorded in the report); after a
// window's report, triggers are ignored for a cooldown (the agents rearm their detectors,
// and the job needs time to show new evidence); at most max_windows windows per job. A
// refused slowdown trigger is not lost: the rank's detector fires again while the slowdown
// lasts (every window_iterations iterations, detect/iteration_detector.h), and a fault that
// began during a window another trigger opened fires after it (the detector rearms from
// what the window saw). The
// first hang trigger is exempt from both: a hung job makes no progress, and only its stacks
// say why.
// A hang trigger also asks every worker for its Python stacks at once (and so does one that
// arrives during an open window). A window a hang opens starts at once (no delay: nothing
// runs that the window could miss) and lasts at most hang_window.
//
// Hangs are confirmed before they are reported (a detector that cries wolf gets switched
// off): once every rank's first stacks are in, a second sample is taken hang_confirm (or one
// mean iteration, whichever is longer) later. The hang stands only when, by then, no rank
// finished an iteration since the trigger, no silent rank said its training ended or exited
// cleanly, and no rank's main thread moved to other code between the two samples. Otherwise
// the trigger is retracted: logged (and listed at the end of `perftracker run`), a window it
// opened is dropped, a window it joined goes on as what it was. A confirmed hang ends the
// window (EndWindowNow) and the report is written from the second stacks and the summaries
// of that short span: a hung job shows little in a window, its stacks are the evidence, and
// the report must come quickly. Hang triggers of ranks whose training ended are ignored.
// If the job makes progress again after a hang report, the report is retracted: rewritten
// with the PT-HANG finding turned into a note (it was a long pause, not a hang).
// Busy is not progress forever. A hang retracted because a rank's main thread ran (busy in
// the window's summary, or its stacks moved between the samples) while no rank completed an
// iteration is looked at again once every rank's silence reaches the busy limit
// (HangAnalyzer::BusyLimitNs: 10 x the silence that made that trigger): a hang window opens
// as if a trigger came (the detector fires once per silence), its stacks confirm no
// progress (their moving is no progress now: the rank is known to run), and a rank still
// busy is reported as PT-HANG, "busy: no iteration progress". An iteration, the end of a
// rank's training or of the job cancels the look; a recheck schedules no other.
// The HangAnalyzer (localize/) turns the stacks and each rank's last progress (its last
// `iteration`) into the PT-HANG finding that leads the diagnosis; each rank's innermost
// main-thread frames are notes, and the full stacks go to window-<id>-stacks.txt.
//
// Finishing. The window is localized when every expected worker's summary is in (and, for
// a hang, every stack), or wait_summaries after the window's end, whichever comes first.
// Expected workers: ranks 0..world_size-1 (from the hellos) plus every rank that said hello,
// minus the ranks that left cleanly (bye) before the window opened. A missing one is named
// in the report ("rank 3 sent no summary (agent gone?)"). Localizing and writing the report
// happen on the coordinator's own thread, never on a collector's.
//
// Progressive disclosure (docs/server.md, "Fleet scale"). Collectors of a large job send a
// digest per worker (OnDigest) instead of its full summary; a rank counts as in once either
// came. Once every rank is in, the DigestScreen (localize/digest_screen.h) names the full
// summaries the localizer needs (the suspects and a sample of their peers); the coordinator
// asks the collectors for those (CollectorControl::RequestSummaries), waits for them at most
// wait_summaries (not for a rank whose collector answers that it no longer keeps the summary,
// OnSummariesNotKept: it is named in the notes with why), localizes, and widens the findings
// to the groups the sample stands for (GeneralizeToGroups). When the screen cannot decide (too
// many suspects, a small job, a hang window) or the findings name part of a group's sample,
// it asks for every full summary and localizes on all of them. A note in the report says
// which path the window took.
// Digests are screened as they arrive (~1 KB kept per worker, not the digest).
//
// Reports: for every window, <report_dir>/window-<id>-<reason>.json (the schema of
// `perftracker diagnose --format json`) and .html, plus window-<id>-stacks.txt for hangs,
// and window-<id>.perfetto.json when the collectors recorded the window's events
// (options.perfetto; docs/perfetto-export.md).
//
// Threading: the CoordinatorLink calls come from collector threads and only take the state
// mutex briefly; calls into collectors (CollectorControl) are made without holding it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "perftracker/core/status.h"
#include "perftracker/localize/diagnosis.h"
#include "perftracker/localize/digest_screen.h"
#include "perftracker/localize/localizer.h"
#include "perftracker/report/report.h"
#include "perftracker/wire/coordinator_link.h"
#include "perftracker/wire/unknown_values.h"

namespace perftracker {

struct CoordinatorOptions {
  std::string report_dir = "perftracker-reports";
  int64_t window_ns = 20'000'000'000;
  // A window that is not a hang's lasts window_ns and, when a rank that reports iterations
  // has completed fewer than window_min_iterations in it by then, until every such rank has
  // (ended with EndWindowNow), at most window_max_ns: a length in seconds alone holds no
  // whole iteration of a job whose iterations are longer (a large model; a loaded machine,
  // where the window's tracing stretches them further). 0: window_ns exactly (the default
  // here; perftracker run and server default to 3). A --trigger-at-seconds window also
  // waits for the job's first iteration then (at most window_max_ns).
  int window_min_iterations = 0;
  int64_t window_max_ns = 120'000'000'000;
  int64_t hang_window_ns = 2'000'000'000;  // windows opened by a hang last at most this long
  // The second stack sample that confirms a hang is taken this long (or one mean iteration,
  // whichever is longer) after the first one is in.
  int64_t hang_confirm_ns = 1'000'000'000;
  int64_t delay_ns = 300'000'000;
  int64_t wait_summaries_ns = 10'000'000'000;
  std::optional<int64_t> trigger_at_ns;  // one manual window this long after the first hello
  int64_t cooldown_ns = 30'000'000'000;
  // A trigger that arrives while some of ranks 0..world_size-1 have never said hello (the job
  // is starting, or the server restarted and collectors are reconnecting one by one) waits
  // for them, at most this long after the first hello, so the window covers every rank.
  int64_t join_grace_ns = 10'000'000'000;
  int max_windows = 5;
  // The first window's id (a server restarted on a store continues the job's ids).
  uint64_t first_window_id = 1;
  LocalizerOptions localizer;
  // Progressive disclosure's screen (used only when collectors send digests).
  DigestScreenOptions screen;
  std::string title;                          // what is diagnosed (the command line)
  TextOptions text;                           // for WindowReport::text
  std::function<void(std::string_view)> log;  // default: stderr, "perftracker: " prefix
  // Live Perfetto export: the ranks' window recordings (OnWindowRecording, files on this
  // host) are merged into <report_dir>/window-<id>.perfetto.json, linked from the HTML
  // report; each recording is removed once merged. Off: recordings are left where they are.
  // Collectors on other hosts keep theirs until asked: after the diagnosis the coordinator
  // asks them (CollectorControl::RequestRecordings) and waits at most perfetto_fetch_ns for
  // every expected rank's recording, or word why there is none.
  bool perfetto = false;
  int64_t perfetto_fetch_ns = 30'000'000'000;
  size_t perfetto_max_events = 2'000'000;  // the export's cap (report/PerfettoWriter)
};

// One window's outcome.
struct WindowReport {
  uint64_t id = 0;
  WindowReason reason = WindowReason::kManual;
  std::string json;  // the JSON file's contents ("" when it could not be written)
  std::string json_path;
  std::string html_path;
  std::string stacks_path;    // hangs only
  std::string perfetto_path;  // the window's Perfetto export ("" when none was written)
  std::string text;           // RenderText of the diagnosis
  Diagnosis diagnosis;
  std::vector<int32_t> missing_ranks;
  bool retracted = false;  // a hang report the job's progress proved wrong (rewritten)
  // No rank completed an iteration in the window (the job was starting, or between phases):
  // its figures are for the window as a whole, not per training iteration.
  bool no_iterations = false;
};

// The report that a run's final summary shows: the most important window's, not merely the
// last one's. A hang (a PT-HANG finding) first, then the window whose leading material
// finding (the one its diagnosis puts first) costs the largest share of the iteration, a
// finding that recurs (the same code, culprit ranks and call path material in several
// windows) counting with its shares summed: a persistent cause outranks a one-off stall of a
// larger share. Then the latest that is not a retracted hang report.
// A window without a single iteration ranks as one without a material finding: its
// "iteration" is the whole window (at a job's start: the first batch's wait for DataLoader
// workers to start, 100 % "data loading"), not comparable with a training iteration.
// -1 when `reports` is empty.
int MostImportantReport(const std::vector<WindowReport>& reports);

class WindowCoordinator : public CoordinatorLink {
 public:
  explicit WindowCoordinator(CoordinatorOptions options);
  ~WindowCoordinator() override;
  WindowCoordinator(const WindowCoordinator&) = delete;
  WindowCoordinator& operator=(const WindowCoordinator&) = delete;

  // A collector whose workers take part in windows (not owned; call before Start).
  void AddCollector(CollectorControl* collector);
  // Creates the report directory and starts the coordinator thread.
  Status Start();
  // Stops the thread; a window still in progress is abandoned (use Flush first).
  void Stop();
  // The job ended: a window in progress is ended now, and its report is written once the
  // summaries are in or after at most `timeout_ns`. A window not yet begun is dropped.
  void Flush(int64_t timeout_ns);
  // The job's process exited with `exit_code` (perftracker run; call after Flush). A job
  // that exits 0 after every rank said its training ended since the last hang's trigger was
  // not hung (its end was slow: DataLoader workers joining on a loaded machine): that
  // report is retracted. A job stopped by the user (Ctrl-C) exits non-zero: kept.
  void JobExited(int exit_code);

  std::optional<WindowReport> last_report() const;
  std::vector<WindowReport> reports() const;
  // The always-on iteration times a rank reported (end_ns, duration_ns), oldest first.
  std::vector<std::pair<int64_t, int64_t>> IterationHistory(int32_t rank) const;
  // The ranks that joined or reported an iteration, ascending.
  std::vector<int32_t> Ranks() const;
  uint64_t windows_opened() const;
  // One line per hang trigger that was retracted (a pause the job resumed from, or its end).
  std::vector<std::string> retracted_hangs() const;

  // CoordinatorLink
  void OnWorkerJoined(const WorkerInfo& worker) override;
  void OnWorkerLeft(int32_t rank, bool clean) override;
  void OnTrainingEnded(int32_t rank, const std::string& detail) override;
  void OnIteration(int32_t rank, int64_t end_ns, int64_t duration_ns) override;
  void OnTrigger(int32_t rank, WindowReason reason, const std::string& detail) override;
  void OnStacks(uint64_t window, int32_t rank, bool available, const std::string& text) override;
  void OnSummary(uint64_t window, WorkerSummary summary) override;
  void OnWindowRecording(uint64_t window, int32_t rank, const std::string& path) override;
  // Progressive disclosure: a worker's digest of `window` in place of its full summary
  // (the full summary comes later, through OnSummary, if the screen asks for it).
  void OnDigest(uint64_t window, const WorkerDigest& digest);
  // The summary or digest of `rank` for `window` that comes next carried values this server
  // does not know (a newer collector's), left out when decoded: the window's report notes
  // them and the log says so, once per window. A rank's later message replaces its count.
  void OnUnknownValues(uint64_t window, int32_t rank, const UnknownValues& unknown);
  // Progressive disclosure: the collector of `ranks` no longer keeps the full summaries the
  // screen asked for (`why`, one line): they are not waited for, and named in the notes.
  void OnSummariesNotKept(uint64_t window, const std::vector<int32_t>& ranks,
                          const std::string& why);
  // A collector asked for `window`'s recordings has none for `rank`: `why`.
  void OnRecordingMissing(uint64_t window, int32_t rank, const std::string& why);
  // The recordings of `window` are being asked for now (a remote collector's may come in).
  bool FetchingRecordings(uint64_t window) const;

 private:
  struct Worker {
    WorkerInfo info;
    bool left = false;
    bool left_clean = false;
    int64_t left_ns = 0;
    int64_t ended_ns = 0;  // when it said its training ended (0: it did not, or trains again)
    std::string ended_detail;
    std::deque<std::pair<int64_t, int64_t>> iterations;
  };
  struct OpenWindow {
    WindowSpec spec;
    // Not before this (start + window_ns); spec's end is then the latest end (window_max_ns)
    // and the window ends once every rank completed window_min_iterations (stretchable).
    int64_t min_end_ns = 0;
    bool stretchable = false;
    bool ended_at_iterations = false;
    bool stacks_requested = false;
    bool ending = false;  // Flush, or a hang whose stacks are all in: ended early
    bool ended_for_hang = false;
    int64_t deadline_ns = 0;  // localize by then, whatever is missing
    std::set<int32_t> expected;
    std::map<int32_t, WorkerSummary> summaries;
    // Progressive disclosure: the ranks whose digest came, screened as they came.
    std::set<int32_t> digested;
    std::unique_ptr<DigestScreen> screen;
    std::map<int32_t, std::string> not_kept;   // rank -> why its collector no longer has it
    std::map<int32_t, UnknownValues> unknown;  // rank -> what its summary had that we do not know
    std::map<int32_t, std::string> stacks;
    std::map<int32_t, std::string> no_stacks;   // rank -> the agent's explanation
    std::map<int32_t, std::string> recordings;  // rank -> its window events' file (this host)
    std::map<int32_t, std::string> recordings_missing;  // rank -> why its collector has none
    std::vector<std::string> triggers;                  // "rank 2: slowdown (detail)"
    // Hang confirmation (see the header comment). opened_for: the reason the window was
    // opened with (a hang may join a slowdown window and be retracted again).
    WindowReason opened_for = WindowReason::kManual;
    enum class HangPhase : uint8_t { kNone, kFirstSample, kWaiting, kSecondSample, kConfirmed };
    HangPhase hang_phase = HangPhase::kNone;
    int64_t hang_trigger_ns = 0;
    std::string hang_trigger;  // "rank 3: hang — no progress for 31.0 s ..."
    int64_t second_sample_ns = 0;
    std::map<int32_t, std::string> first_stacks;
    // A busy recheck's window (see the header comment): its busy limit, and stacks that
    // move between the samples are no progress. 0 / false in any other window.
    int64_t busy_limit_ns = 0;
    bool busy_recheck = false;
  };
  // A hang trigger retracted while a rank ran without progress: the job is looked at again
  // at due_ns unless progress comes first (header comment, "Busy is not progress forever").
  struct BusyRecheck {
    uint64_t window = 0;     // the window whose trigger was retracted
    int64_t trigger_ns = 0;  // its trigger: progress after it cancels the recheck
    int64_t limit_ns = 0;    // HangAnalyzer::BusyLimitNs of that trigger's silence
    int64_t due_ns = 0;      // the latest last progress + limit_ns
  };

  void Loop();
  // Opens a window (state mutex held); false when cooldown or --max-windows refuse it.
  bool OpenLocked(WindowReason reason, std::string trigger, int64_t now_ns);
  bool ReadyLocked(int64_t now_ns) const;
  // A stretchable window's ranks that report iterations have each completed
  // window_min_iterations in it (a rank that left, ended its training or never reported an
  // iteration is not waited for).
  bool IterationsInLocked() const;
  // Some joined rank has reported an iteration (its detector learned the loop).
  bool AnyIterationLocked() const;
  // A hang window whose every expected rank has answered dump_stacks (or is gone).
  bool StacksInLocked() const;
  // Hang confirmation steps (state mutex held). Each returns the collectors to call (with
  // the mutex released) and what to ask of them.
  struct HangStep {
    std::vector<CollectorControl*> collectors;
    uint64_t window = 0;
    bool dump_stacks = false;  // else EndWindowNow
  };
  std::optional<HangStep> ConfirmHangLocked(int64_t now_ns);
  // Why the open hang window's trigger was wrong ("" = no sign of progress yet).
  std::string ProgressSinceTriggerLocked() const;
  std::string StacksMovedLocked() const;
  int64_t ConfirmDelayLocked() const;
  // Retracts the open window's hang; returns the collectors to end a dropped window on.
  // ran_without_progress: a rank ran (its stacks moved) but none completed an iteration: a
  // busy recheck is scheduled.
  std::optional<HangStep> RetractHangLocked(const std::string& why,
                                            bool ran_without_progress = false);
  // The busy limit for `w`'s hang trigger (0: no rank's last progress is known), and the
  // recheck that goes with it (nullopt when the limit is 0). workers: workers_ or a copy.
  static int64_t BusyLimitOf(const OpenWindow& w, const std::map<int32_t, Worker>& workers);
  static std::optional<BusyRecheck> BusyRecheckOf(const OpenWindow& w,
                                                  const std::map<int32_t, Worker>& workers);
  // Rewrites the last hang report without its PT-HANG finding (coordinator thread).
  void RetractHangReport(const std::string& why);
  void Finalize(OpenWindow window);
  // Progressive disclosure (coordinator thread): asks the collectors for the full summaries
  // of `ranks` of window `w` and waits until they are in (or their rank is gone), at most
  // wait_summaries; adds them to w's summaries.
  void FetchSummaries(OpenWindow* w, const std::vector<int32_t>& ranks);
  // The screen's verdict on `w`'s digests (and on the digests of its full summaries).
  ScreenResult Screen(OpenWindow* w);
  // Asks the collectors that keep their recordings (other hosts) for those of w's expected
  // ranks not in yet, and waits for them (at most perfetto_fetch_ns; coordinator thread).
  void FetchRecordings(OpenWindow* w);
  // Merges the window's recordings into window-<id>.perfetto.json (coordinator thread);
  // returns its path, or "" with a note in *notes saying why there is none.
  std::string WritePerfetto(const OpenWindow& w, const Diagnosis& diagnosis,
                            std::vector<std::string>* notes) const;
  static std::map<int32_t, std::string> StacksFile(const OpenWindow& w);
  void Log(const std::string& line) const;

  CoordinatorOptions options_;
  std::vector<CollectorControl*> collectors_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  std::thread thread_;
  std::map<int32_t, Worker> workers_;
  size_t gone_workers_ = 0;  // workers_ that left without bye (left && !left_clean)
  int32_t world_size_ = 0;
  int64_t first_hello_ns_ = 0;
  bool manual_done_ = false;
  std::optional<OpenWindow> window_;
  // Progressive disclosure: the window whose full summaries FetchSummaries waits for (it is
  // out of window_ then), the ranks still awaited and those that came.
  uint64_t fetch_window_ = 0;
  std::set<int32_t> fetch_waiting_;
  std::map<int32_t, WorkerSummary> fetched_;
  std::map<int32_t, std::string> fetch_not_kept_;  // rank -> why its collector has none
  std::map<int32_t, UnknownValues> fetched_unknown_;
  // The recordings asked for after a diagnosis (FetchRecordings), as they come in.
  struct Fetch {
    uint64_t window = 0;
    std::map<int32_t, std::string> paths;
    std::map<int32_t, std::string> missing;
  };
  std::optional<Fetch> fetch_;
  uint64_t windows_opened_ = 0;
  uint64_t windows_dropped_ = 0;  // retracted hang windows: not counted by --max-windows
  int64_t cooldown_until_ns_ = 0;
  bool logged_cooldown_ = false;
  bool logged_max_ = false;
  bool finalizing_ = false;
  bool hang_window_taken_ = false;
  // A trigger deferred until every rank has joined (see join_grace_ns).
  std::optional<std::pair<WindowReason, std::string>> pending_trigger_;
  bool JoiningLocked(int64_t now_ns) const;
  // The last hang report: when progress resumes after it, the hang was a pause: the report
  // is rewritten (what it needs for that is kept here).
  uint64_t hang_report_window_ = 0;
  int64_t hang_report_ns_ = 0;
  int64_t hang_report_trigger_ns_ = 0;
  std::string hang_report_title_;
  std::vector<WorkerSummary> hang_report_summaries_;
  std::map<int32_t, std::string> hang_report_stacks_;
  std::optional<std::string> pending_report_retraction_;
  uint64_t retract_report_window_ = 0;
  std::vector<std::string> retracted_;
  std::vector<WindowReport> reports_;
  std::optional<BusyRecheck> busy_recheck_;
};

}  // namespace perftracker
