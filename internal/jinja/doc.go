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
// printing None gives "None", a list prints as its repr, strings are
// sequences of code points, integers divide with floor semantics, and the
// default Undefined prints as "" but fails when an attribute of it is read.
// Lists and dicts are immutable (the sandbox refuses append, update, pop).
// Differential tests compare the output byte for byte with Python's jinja2
// and with @huggingface/jinja (what transformers.js uses) on real templates.
//
// Templates come from strangers and run on every request, so every render is
// bounded (see Limits): total evaluation steps, loop iterations, call depth
// (macros and recursive loops), nesting of the evaluation, output size, and
// the bytes of strings and lists a render may create ('x' * 10**9 fails before
// allocating). The parser bounds nesting too, so the Go stack never grows
// with hostile input. Render checks its context.Context in loops and calls.
// Exceeding a limit returns a *LimitError naming it; nothing panics.
//
//	t, err := jinja.Parse(src)              // *SyntaxError with line:column
//	out, err := t.Render(ctx, vars, nil)    // *LimitError, *Error, *RaiseError or ctx's error
package jinja
