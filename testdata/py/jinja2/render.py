#!/usr/bin/env python3
"""Renders chat templates with Python's jinja2 in the environment Hugging Face transformers uses for
apply_chat_template (transformers/utils/chat_template_utils.py, _compile_jinja_template): an
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension, the
{% generation %} tag of its AssistantTracker (rendered as its body), a tojson filter calling json.dumps
with ensure_ascii=False by default, and the globals raise_exception and strftime_now. It is the
differential oracle for phonellm's internal/jinja and runtime/engine (driven by internal/testkit/jinjaoracle;
the Debian package python3-jinja2 provides jinja2).

Protocol (the same as testdata/js/jinja/render.mjs): one JSON document on stdin,
    {"templates": {"name": "source", ...}, "cases": [{"template": "name", "context": {...}, "now": "..."}]}
and one JSON array on stdout, one entry per case: {"output": "..."} or {"error": "..."}. "now" (ISO 8601,
UTC) fixes strftime_now's clock. Written for phonellm; nothing here is copied from transformers.
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: the body, unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


clock = {"now": None}


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    now = clock["now"] or datetime.datetime.now()
    return now.strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    doc = json.load(sys.stdin)
    compiled = {}
    for name, src in doc.get("templates", {}).items():
        try:
            compiled[name] = env.from_string(src)
        except Exception as e:  # a template this jinja2 refuses
            compiled[name] = "parse: %s: %s" % (type(e).__name__, e)
    out = []
    for case in doc.get("cases", []):
        t = compiled.get(case["template"])
        if t is None:
            out.append({"error": "unknown template " + case["template"]})
            continue
        if isinstance(t, str):
            out.append({"error": t})
            continue
        now = case.get("now")
        clock["now"] = datetime.datetime.fromisoformat(now.replace("Z", "+00:00")).replace(tzinfo=None) if now else None
        try:
            out.append({"output": t.render(**case.get("context", {}))})
        except Exception as e:
            out.append({"error": "%s: %s" % (type(e).__name__, e)})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
