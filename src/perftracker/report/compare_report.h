// Reports of a Comparison (compare/comparison.h): terminal text, JSON (docs/compare.md) and
// one self-contained HTML page, worded alike from the same numbers.
#pragma once

#include <string>

#include "perftracker/compare/comparison.h"

namespace perftracker {

// One sentence: "block2 is slower on all 2 workers: +12.3 ms per iteration (8.1 ms ->
// 20.4 ms)", "every function is 1.31x slower: ...", or "no material change: ...".
std::string ComparisonVerdict(const compare::Comparison& comparison);

std::string RenderComparisonText(const compare::Comparison& comparison, int width = 100);
// JSON: "kind": "comparison", schema_version 1 (docs/compare.md).
std::string RenderComparisonJson(const compare::Comparison& comparison);
// One self-contained HTML page: inline CSS, no network references.
std::string RenderComparisonHtml(const compare::Comparison& comparison);

}  // namespace perftracker
