// Localizer: compares the WorkerSummaries of all workers of one window and names the
// culprits. (Algorithm: see localizer.cc's header comment.)
//
// Scale: Add() copies only a compact per-(worker, function) record (tens of bytes) and a
// job-wide interned function key, so 100,000 workers x 300 functions fit in a few GB and
// callers need not keep the WorkerSummaries around.
#pragma once

#include <cstdint>
#include <memory>

#include "perftracker/localize/diagnosis.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker {

struct LocalizerOptions {
  // A finding is material when it costs at least this share of the median iteration time.
  double material_share = 0.05;
  // Robust outlier threshold: |x - median| / (1.4826 * MAD) above this is anomalous.
  double outlier_z = 3.5;
  // Relative effect also required: the worker must differ from the peer median by this much.
  double min_relative_effect = 0.2;
  // At most this many findings in the diagnosis.
  size_t max_findings = 20;
  // Smaller effects are not reported at all (keeps microsecond noise out of the diagnosis);
  // between this and material_share they are reported as non-material findings.
  double report_share = 0.005;
  // A function belongs to a worker's peer-group signature when it takes at least this
  // share of the worker's iteration.
  double signature_share = 0.01;
  // Signatures this similar (Jaccard) share a peer group.
  double peer_jaccard = 0.8;
};

class Localizer {
 public:
  explicit Localizer(LocalizerOptions options = {});
  ~Localizer();
  Localizer(const Localizer&) = delete;
  Localizer& operator=(const Localizer&) = delete;

  void Add(const WorkerSummary& worker);
  // Adds a note the report shows (a skipped file, a missing worker).
  void AddNote(std::string note);
  // The window was taken for a hang (live mode): a rank stuck in a call that never returns
  // (in its own code, or waiting in C++ in a collective for a rank that is) has its calls
  // still open at the window's end, so its summary may hold no function and no iteration.
  // That is the hang's doing, not lost data: the data-quality rule words it for a hang, and
  // a badly incomplete profile is a note, not a PT-INCOMPLETE-DATA finding (the hang, which
  // the caller adds, leads the report).
  void MarkHangWindow();
  // The diagnosis of everything added. Leaves the localizer as constructed (its tables, one
  // record per (worker, function), are freed: a report rendered next does not hold them).
  Diagnosis Finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perftracker
