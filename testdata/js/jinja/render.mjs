// render.mjs — renders chat templates with @huggingface/jinja (the Jinja engine of transformers.js), pinned in
// package.json, as the differential oracle for phonellm's internal/jinja.
//
// Protocol: one JSON document on stdin,
//
//   {"templates": {"name": "template source", ...},
//    "cases": [{"template": "name", "context": {...}, "now": "2026-07-26T10:00:00Z"}, ...]}
//
// and one JSON array on stdout with one entry per case, in order: {"output": "..."} or {"error": "..."}.
// A template that does not parse makes every case that uses it an error entry.
//
// "now" (optional) fixes the clock that strftime_now reads, so date-stamping templates (Llama 3.x, Granite)
// render deterministically; the process runs with TZ=UTC (set by the caller).
//
// Context values are plain JSON, converted by @huggingface/jinja itself: integral numbers become integers, other
// numbers floats, objects keep their key order (JavaScript puts integer-like keys first; the Go tests avoid them).

import {readFileSync} from "node:fs";
import {dirname, join} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = process.env.PHONELLM_JINJA_MODULES || join(here, "node_modules");
const {Template} = await import(pathToFileURL(join(modules, "@huggingface", "jinja", "dist", "index.js")).href);

const RealDate = Date;
let fixedNow = null;
class FixedDate extends RealDate {
    constructor(...args) {
        if (args.length === 0 && fixedNow !== null) {
            super(fixedNow);
        } else {
            super(...args);
        }
    }
    static now() {
        return fixedNow !== null ? fixedNow : RealDate.now();
    }
}
globalThis.Date = FixedDate;

const input = JSON.parse(readFileSync(0, "utf8"));
const compiled = new Map();
for (const [name, src] of Object.entries(input.templates || {})) {
    try {
        compiled.set(name, {template: new Template(src)});
    } catch (e) {
        compiled.set(name, {error: "parse: " + (e && e.message ? e.message : String(e))});
    }
}

const results = [];
for (const c of input.cases || []) {
    const t = compiled.get(c.template);
    if (!t) {
        results.push({error: "unknown template " + c.template});
        continue;
    }
    if (t.error) {
        results.push({error: t.error});
        continue;
    }
    fixedNow = c.now ? new RealDate(c.now).getTime() : null;
    try {
        results.push({output: t.template.render(c.context || {})});
    } catch (e) {
        results.push({error: e && e.message ? e.message : String(e)});
    }
}
fixedNow = null;
process.stdout.write(JSON.stringify(results));
