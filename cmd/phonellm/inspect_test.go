package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/tinygguf"
)

// writeTemplateGGUF writes a tiny model carrying a chat template (a whole model: inspect exits 3 for a file
// that would not load).
func writeTemplateGGUF(t *testing.T, tmpl string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := tinygguf.Write(p, tinygguf.Spec{Arch: "qwen3", Template: tmpl}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestInspectWarnsOnChatTemplate: inspect checks the chat template and warns
// on stderr when requests would fail; it still prints the file and exits 0.
func TestInspectWarnsOnChatTemplate(t *testing.T) {
	for _, c := range []struct {
		tmpl, warn string
	}{
		{`{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, "limit on call depth"},
		{`{% for m in messages %}{{ m.content }`, "does not parse"},
		{`{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}`, ""},
	} {
		code, out, errOut := runCLI(t, context.Background(), "inspect", writeTemplateGGUF(t, c.tmpl))
		if code != 0 || !strings.Contains(out, "architecture: qwen3") {
			t.Errorf("%q: code %d, stdout %q", c.tmpl, code, out)
		}
		if c.warn == "" && errOut != "" || c.warn != "" && !strings.Contains(errOut, "warning: ") || !strings.Contains(errOut, c.warn) {
			t.Errorf("%q: stderr %q, want a warning with %q", c.tmpl, errOut, c.warn)
		}
	}
}
