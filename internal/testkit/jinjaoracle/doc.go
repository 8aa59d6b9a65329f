// Package jinjaoracle renders chat templates with two independent Jinja
// engines, as test oracles for internal/jinja and runtime/engine:
//
//   - Python's jinja2 in the environment transformers renders chat templates
//     with (testdata/py/jinja2/render.py; jinja2 from Debian's
//     python3-jinja2, which scripts/setup.sh installs);
//   - @huggingface/jinja, what transformers.js uses (testdata/js/jinja, an
//     npm package pinned with a lock file; scripts/setup.sh runs npm ci).
//
// Both read one JSON document (templates and cases) and answer one JSON
// array, so a test pays one process start per oracle. A missing oracle skips
// the test on a developer machine and fails it when CI or
// PHONELLM_REQUIRE_ORACLE=1 is set (an oracle that silently skips in CI
// proves nothing), like internal/testkit/oracle.
//
// The shared corpus lives in internal/jinja/testdata: templates/ (real chat
// templates, sources in SOURCES.md) and conversations.json.
package jinjaoracle
