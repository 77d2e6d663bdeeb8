# Resident memory of `perftracker diagnose` at each phase boundary (docs/performance.md):
#   gdb -q -batch -x bench/rss_phases.gdb --args build/src/perftracker/cli/perftracker \
#       diagnose --rank 0 --format json FILE | grep PHASE
# Prints the resident and anonymous memory at each phase's start: the summary once the file is
# read (WindowSummarizer::Finish), each malloc_trim (the summarizer's events are freed; each
# chunk of 1,024 paths' accumulators while the summary is built; the summarizers are gone, the
# localizer starts; the localizer's tables are freed), the localizer's Finish and EndIngest,
# the report (RenderJson for text and HTML, WriteJson for --format json) and exit. Exact: read
# from /proc/PID/smaps_rollup, which walks the page tables (the VmRSS / VmHWM of
# /proc/PID/status are per-CPU counters, approximate by a few hundred KiB). A peak inside a
# phase shows only in the bounds around it; ru_maxrss (bench/diagnose_memory.py) has the peak.
# The inferior runs with address randomization as outside gdb, its stdout to /dev/null. Needs
# the symbols (a Release build has them unless stripped).
set pagination off
set breakpoint pending on
set disable-randomization off
set inferior-tty /dev/null
python
import gdb

def print_rss(label):
    values = {}
    with open(f"/proc/{gdb.selected_inferior().pid}/smaps_rollup") as rollup:
        for line in rollup:
            key = line.split(":")[0]
            if key in ("Rss", "Anonymous"):
                values[key] = int(line.split()[1]) / 1024
    print(f"PHASE {label}: RSS {values['Rss']:.1f} MiB, anonymous {values['Anonymous']:.1f} MiB")

class Phase(gdb.Breakpoint):
    def stop(self):
        print_rss(self.location)
        return False

for location in ("perftracker::WindowSummarizer::Finish", "malloc_trim",
                 "perftracker::Localizer::Finish", "perftracker::localize::JobTable::EndIngest",
                 "perftracker::RenderJson", "perftracker::WriteJson", "exit"):
    Phase(location)
end
run
