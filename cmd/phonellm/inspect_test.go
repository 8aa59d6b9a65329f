package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// writeTemplateGGUF writes a metadata-only GGUF carrying a chat template.
func writeTemplateGGUF(t *testing.T, tmpl string) string {
	t.Helper()
	w := gguf.NewWriter()
	for k, v := range map[string]gguf.Value{"general.architecture": gguf.String("qwen3"), "tokenizer.chat_template": gguf.String(tmpl)} {
		if err := w.SetKV(k, v); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := w.WriteHeader(f); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
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
