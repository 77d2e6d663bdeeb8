# Resident memory of `perftracker diagnose` at each phase boundary (docs/performance.md):
#   gdb -q -batch -x bench/rss_phases.gdb --args build/src/perftracker/cli/perftracker \
#       diagnose --rank 0 --format json FILE | grep PHASE
# Prints VmRSS and VmHWM (the peak so far) at each phase's start: the summary once the file is
# read (WindowSummarizer::Finish), each malloc_trim (1: the summarizer's events are freed, 2:
# the summarizers are gone, the localizer starts, 3: the localizer's tables are freed), the
# localizer's Finish, the report (RenderJson) and exit. Needs the symbols (a Release build
# has them unless stripped).
set pagination off
set breakpoint pending on
python
import gdb

def print_rss(label):
    values = {}
    with open(f"/proc/{gdb.selected_inferior().pid}/status") as status:
        for line in status:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(line.split()[1]) / 1024
    print(f"PHASE {label}: RSS {values['VmRSS']:.1f} MiB, peak so far {values['VmHWM']:.1f} MiB")

class Phase(gdb.Breakpoint):
    def stop(self):
        print_rss(self.location)
        return False

for location in ("perftracker::WindowSummarizer::Finish", "malloc_trim",
                 "perftracker::Localizer::Finish", "perftracker::RenderJson", "exit"):
    Phase(location)
end
run
