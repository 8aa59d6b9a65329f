package eval

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadPrompts(t *testing.T) {
	ps, err := ReadPrompts("testdata/prompts.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || !strings.HasPrefix(ps[0].Text, "The bank") || !strings.HasPrefix(ps[1].Text, "Risk review") ||
		len(ps[2].Messages) != 2 || ps[2].Messages[1].Role != "user" {
		t.Errorf("%+v", ps)
	}
	ps, err = ReadPrompts("testdata/prompts.txt")
	if err != nil || len(ps) != 1 || !strings.Contains(ps[0].Text, "lazy dog") {
		t.Errorf("%v %+v", err, ps)
	}
	dir := t.TempDir()
	// Plain text: one prompt per paragraph, as --prompts' help says (issue 13 item 3: the file was one prompt).
	ps, err = ReadPrompts(writeFile(t, dir, "para.txt", "\n  First prompt,\nline two.\n\nSecond prompt.\r\n \t\r\nThird\n\n\n"))
	if err != nil || len(ps) != 3 || ps[0].Text != "First prompt,\nline two." || ps[1].Text != "Second prompt." || ps[2].Text != "Third" {
		t.Errorf("paragraphs: %v %q", err, ps)
	}
	for name, body := range map[string]string{
		"a.txt":    " \n",
		"b.jsonl":  `{"text":""}`,
		"c.jsonl":  `{"text":"x","messages":[{"role":"user","content":"y"}]}`,
		"d.jsonl":  `[1,2]`,
		"e.jsonl":  "",
		"f.jsonl":  `{"messages":[{"role":"x","content":"y"}]}`,
		"g.jsonl":  `{"text":"x"}` + "\n" + strings.Repeat("a", maxJSONLLine+1),
		"h.jsonl":  `{"text":"x"` + "\n",
		"i2.jsonl": `{"prompt": 5}`,
	} {
		_, err := ReadPrompts(writeFile(t, dir, name, body))
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a FormatError", name, err)
		}
	}
}

func FuzzReadPrompts(f *testing.F) {
	f.Add([]byte(`{"text":"hello"}` + "\n" + `{"messages":[{"role":"user","content":"x"}],"label":"3"}`))
	f.Add([]byte(`{"prompt":"x"}`))
	f.Add([]byte("{}\n\n[]"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "f.jsonl")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		ps, err := ReadPrompts(p)
		if err == nil {
			for _, q := range ps {
				if q.Text == "" && len(q.Messages) == 0 {
					t.Fatal("empty prompt accepted")
				}
			}
		}
		txt := filepath.Join(dir, "f.txt") // the same bytes as a text file: one prompt per paragraph
		if err := os.WriteFile(txt, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if ps, err := ReadPrompts(txt); err == nil {
			for _, q := range ps {
				if q.Text == "" || q.Text != strings.TrimSpace(q.Text) || strings.Contains(q.Text, "\n\n") {
					t.Fatalf("text prompt %q: empty, untrimmed or spanning a blank line", q.Text)
				}
			}
		}
		items, err := ReadItems(p)
		if err == nil {
			for _, it := range items {
				if it.Label == "" || len(it.Messages) == 0 {
					t.Fatalf("bad item accepted: %+v", it)
				}
			}
		}
	})
}
