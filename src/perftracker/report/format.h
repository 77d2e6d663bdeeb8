// Formatting helpers shared by the text, JSON and HTML reports: rank labels, UTF-8
// sanitizing, HTML escaping and word wrapping by display columns.
//
// Strings that come from the data (function names, evidence, notes, file paths) may hold
// anything a trace held: invalid UTF-8, control characters (a raw ESC would let a trace
// repaint the user's terminal), or markup. Every report passes them through
// SanitizeText() (text, JSON) or EscapeHtml() (HTML) before output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/rank_list.h"  // FormatRanks
#include "perftracker/core/units.h"      // durations and shares: FormatDuration, FormatShare

namespace perftracker::report {

// "rank 2", "ranks 0-3,5", or "all N workers" when ranks is empty or covers every worker.
std::string RanksLabel(const std::vector<int32_t>& ranks, int32_t num_workers,
                       size_t max_chars = SIZE_MAX);

// Valid UTF-8 with no control characters: invalid bytes become U+FFFD, tabs and newlines
// a space, other control characters (C0, DEL, C1) are dropped.
std::string SanitizeText(std::string_view text);

// SanitizeText(), then & < > " ' escaped: safe in HTML text and in quoted attributes.
std::string EscapeHtml(std::string_view text);

// Number of terminal columns of sanitized UTF-8 text: code points, ANSI CSI sequences
// ("\x1b[...m") excluded.
size_t DisplayWidth(std::string_view text);

// Shortens text to at most width columns, "…" marking what was cut (at the end, or at the
// start for call paths whose leaf matters most).
std::string TruncateEnd(std::string_view text, size_t width);
std::string TruncateStart(std::string_view text, size_t width);

// Greedy word wrap of sanitized text into lines of at most width columns. The first line
// starts with first_prefix, the following ones with next_prefix (both counted in the
// width). Words longer than a line are split.
std::vector<std::string> WrapText(std::string_view text, size_t width,
                                  std::string_view first_prefix = "",
                                  std::string_view next_prefix = "");

// A finite double, 0 otherwise (JSON and HTML must never see NaN or inf).
double Finite(double value);

}  // namespace perftracker::report
