// Package jinja is a bounded Jinja2 interpreter for chat templates: the Jinja
// programs that GGUF files (tokenizer.chat_template) and Hugging Face
// checkpoints (tokenizer_config.json, chat_template.jinja) carry to turn a
// list of chat messages into a prompt.
//
// The semantics are those of Python's jinja2 in the environment Hugging Face
// transformers renders chat templates with (apply_chat_template): an
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension (break, continue), the {% generation %} tag, a
// tojson filter with json.dumps' options (ensure_ascii=False by default) and
// the globals raise_exception and strftime_now. Values follow Python:
// printing None gives "None" and a list its repr, strings are sequences of
// code points, integers divide with floor semantics, dicts keep insertion
// order, the default Undefined prints as "" but fails when an attribute of it
// is read, filters such as map and select give lazy iterators (always true,
// no length, not JSON), safe and escape give Markup (which + and % honour
// like markupsafe). Lists and dicts are immutable (the sandbox refuses
// append, update, pop); namespace() is the one mutable object. Integers are
// 64-bit: an overflow is an error where Python would grow the number.
//
// Differential tests render real templates (testdata/templates, with their
// sources) on a set of conversations and compare the output byte for byte
// with Python's jinja2 and with @huggingface/jinja (what transformers.js
// uses); see oracle_test.go and internal/testkit/jinjaoracle.
//
// Templates come from strangers and run on every request, so every render is
// bounded (Limits, DefaultLimits): evaluation steps, loop iterations, call
// depth (macros, caller(), recursive loops), nesting of the evaluation,
// output bytes, the bytes of strings, lists and dicts a render creates ('x' *
// 10**9 fails before allocating), and range() sizes. The parser bounds
// nesting too, so the Go stack stays small whatever the source. Render checks
// its context.Context every thousand or so steps. Exceeding a limit returns a
// *LimitError naming it; nothing panics (a bug of this package surfaces as an
// *Error of the render, not as a crash).
//
//	t, err := jinja.Parse(src)                 // *SyntaxError with line:column
//	out, err := t.Render(ctx, vars, nil)       // *LimitError, *Error, *RaiseError, or ctx's error
//	v, err := jinja.FromJSON(raw)              // variables: JSON keeps key order
package jinja
