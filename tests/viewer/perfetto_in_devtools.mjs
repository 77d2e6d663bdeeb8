// Reads perftracker's Perfetto exports (Trace Event Format JSON) with Chrome DevTools' trace
// engine, the parser behind the Performance panel's "Load profile" (published on npm as
// @paulirish/trace_engine for Lighthouse), and checks that it sees what the file holds:
//   - every process under the name the file gives it ("rank N (host)");
//   - every thread / stream / finding track under its name, with as many slices as written;
//   - every flow arrow bound at both ends (DevTools binds a flow event only to a slice of the
//     same pid, tid, cat and ts: an arrow it cannot bind is not drawn);
//   - the trace's time bounds (the first slice's start to the last one's end).
// Usage: node perfetto_in_devtools.mjs FILE...   One line per file; exit 1 on any mismatch.
import fs from 'node:fs';
import * as Trace from '@paulirish/trace_engine';

// Debian 12's Node.js 18 lacks Array.prototype.toSorted, which the engine uses.
if (!Array.prototype.toSorted) {
  Object.defineProperty(Array.prototype, 'toSorted', {
    value(compare) { return [...this].sort(compare); },
  });
}

function expectation(events) {
  const processNames = new Map();
  const threadNames = new Map();
  const slices = new Map();
  const flowStarts = new Map();
  const flowEnds = new Map();
  let min = Infinity;
  let max = -Infinity;
  for (const e of events) {
    const key = `${e.pid}/${e.tid}`;
    if (e.ph === 'M' && e.name === 'process_name') processNames.set(e.pid, e.args.name);
    if (e.ph === 'M' && e.name === 'thread_name') threadNames.set(key, e.args.name);
    if (e.ph === 'X') {
      slices.set(key, (slices.get(key) ?? 0) + 1);
      if (e.ts !== 0) min = Math.min(min, e.ts);  // DevTools takes events at ts 0 for metadata
      max = Math.max(max, e.ts + e.dur);
    }
    if (e.ph === 's') flowStarts.set(`${e.cat}/${e.name}/${e.id}`, e);
    if (e.ph === 'f') flowEnds.set(`${e.cat}/${e.name}/${e.id}`, e);
  }
  return {processNames, threadNames, slices, flowStarts, flowEnds, min, max};
}

async function check(file) {
  const problems = [];
  let doc;
  try {
    doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    return [`cannot read it: ${err.message}`];
  }
  const events = Array.isArray(doc) ? doc : doc.traceEvents;
  if (!Array.isArray(events)) return ['no "traceEvents" array'];
  const want = expectation(events);
  const model = Trace.TraceModel.Model.createWithAllHandlers();
  try {
    // The engine annotates the events it is given: hand it a copy.
    await model.parse(structuredClone(events));
  } catch (err) {
    return [`DevTools' trace engine failed: ${err.stack ?? err}`];
  }
  const data = model.parsedTrace().data;

  const seenNames = data.Meta.processNames;
  for (const [pid, name] of want.processNames) {
    const got = seenNames.get(pid)?.args?.name;
    if (got !== name) problems.push(`process ${pid}: DevTools names it ${JSON.stringify(got)}, the file ${JSON.stringify(name)}`);
  }

  let tracks = 0;
  let slices = 0;
  for (const [key, count] of want.slices) {
    const [pid, tid] = key.split('/').map(Number);
    const thread = data.Renderer.processes.get(pid)?.threads.get(tid);
    if (!thread) {
      problems.push(`track pid ${pid} tid ${tid}: not in DevTools' model (${count} slices written)`);
      continue;
    }
    ++tracks;
    slices += thread.entries.length;
    if (thread.entries.length !== count) {
      problems.push(`track pid ${pid} tid ${tid}: DevTools has ${thread.entries.length} slices, the file ${count}`);
    }
    const name = want.threadNames.get(key);
    if (name !== undefined && thread.name !== name) {
      problems.push(`track pid ${pid} tid ${tid}: DevTools names it ${JSON.stringify(thread.name)}, the file ${JSON.stringify(name)}`);
    }
  }

  // Each bound flow is the list of slices it links (in the order DevTools met them).
  const bound = data.Flows.flows;
  const arrows = want.flowStarts.size;
  if (bound.length !== arrows) {
    problems.push(`DevTools bound ${bound.length} of the ${arrows} flow arrows`);
  }
  const at = e => `${e.pid}/${e.tid}/${e.ts}`;
  const boundAt = new Set(bound.filter(f => f.length === 2).map(f => [at(f[0]), at(f[1])].sort().join('>')));
  let unmatched = 0;
  for (const [id, s] of want.flowStarts) {
    const f = want.flowEnds.get(id);
    if (!f || !boundAt.has([at(s), at(f)].sort().join('>'))) ++unmatched;
  }
  if (unmatched > 0) problems.push(`${unmatched} flow arrows are not bound from their start slice to their end slice`);

  const bounds = data.Meta.traceBounds;
  if (slices > 0 && (Math.abs(bounds.min - want.min) > 1 || Math.abs(bounds.max - want.max) > 1)) {
    problems.push(`DevTools' time bounds [${bounds.min}, ${bounds.max}] µs, the slices' [${want.min}, ${want.max}]`);
  }
  if (problems.length === 0) {
    console.log(`${file}: DevTools read ${want.processNames.size} processes, ${tracks} tracks, ` +
                `${slices} slices and ${bound.length} of ${arrows} flow arrows, as written`);
  }
  return problems;
}

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node perfetto_in_devtools.mjs FILE... (perftracker Perfetto exports)');
  process.exit(2);
}
let failed = false;
for (const file of files) {
  for (const p of await check(file)) {
    console.error(`${file}: ${p}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
