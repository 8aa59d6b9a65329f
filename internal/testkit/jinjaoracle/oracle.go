package jinjaoracle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Now is the clock of every oracle render (strftime_now) in the tests.
var Now = time.Date(2026, 7, 26, 10, 0, 0, 0, time.UTC)

// Case is one render: a template by name, its variables as a JSON object.
type Case struct {
	Template string          `json:"template"`
	Context  json.RawMessage `json:"context"`
	Now      string          `json:"now,omitempty"`
}

// Result is an oracle's answer for one case: the output or the error text.
type Result struct {
	Output *string `json:"output"`
	Error  string  `json:"error"`
}

// Oracle is one engine, ready to run.
type Oracle struct {
	name string
	args []string
	env  []string
}

// Name is the oracle's name for messages ("jinja2", "@huggingface/jinja").
func (o *Oracle) Name() string { return o.name }

func require(t testing.TB, msg string) { t.Helper(); oracle.Unavailable(t, msg) }

// ModuleRoot is the directory holding go.mod above the working directory.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root := oracle.ModuleRoot()
	if root == "" {
		t.Fatal("jinjaoracle: go.mod not found above the working directory")
	}
	return root
}

// CorpusDir is internal/jinja/testdata (templates/ and conversations.json).
func CorpusDir(t testing.TB) string {
	return filepath.Join(ModuleRoot(t), "internal", "jinja", "testdata")
}

// Python returns the jinja2 oracle (jinja2 >= 3.1): the first of python3 on PATH and Debian's /usr/bin/python3
// that imports it (a pyenv or venv python3 on PATH does not see Debian's python3-jinja2).
func Python(t testing.TB) *Oracle {
	t.Helper()
	var cands []string
	if py, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, py)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, py := range cands {
		out, err := exec.Command(py, "-c", "import jinja2; print(jinja2.__version__)").Output()
		var major, minor int
		if _, serr := fmt.Sscanf(strings.TrimSpace(string(out)), "%d.%d", &major, &minor); err == nil && serr == nil && (major > 3 || major == 3 && minor >= 1) {
			return &Oracle{name: "jinja2", args: []string{py, filepath.Join(ModuleRoot(t), "testdata", "py", "jinja2", "render.py")}}
		}
	}
	require(t, "Python's jinja2 >= 3.1 not installed (apt-get install python3-jinja2; scripts/setup.sh does)")
	return nil
}

// HuggingFace returns the @huggingface/jinja oracle at the version
// testdata/js/jinja/package.json pins. PHONELLM_JINJA_MODULES names another
// node_modules folder holding it.
func HuggingFace(t testing.TB) *Oracle {
	t.Helper()
	dir := filepath.Join(ModuleRoot(t), "testdata", "js", "jinja")
	modules := os.Getenv("PHONELLM_JINJA_MODULES")
	if modules == "" {
		modules = filepath.Join(dir, "node_modules")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		require(t, "node not found (run scripts/setup.sh)")
	}
	var want, got struct {
		Dependencies map[string]string `json:"dependencies"`
		Version      string            `json:"version"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil || json.Unmarshal(b, &want) != nil {
		t.Fatalf("jinjaoracle: testdata/js/jinja/package.json: %v", err)
	}
	pin := want.Dependencies["@huggingface/jinja"]
	b, err = os.ReadFile(filepath.Join(modules, "@huggingface", "jinja", "package.json"))
	if err != nil {
		require(t, "@huggingface/jinja not installed: run `npm ci --prefix testdata/js/jinja` (scripts/setup.sh does)")
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Version != pin {
		require(t, fmt.Sprintf("@huggingface/jinja %s installed, package.json pins %s: run `npm ci --prefix testdata/js/jinja`", got.Version, pin))
	}
	return &Oracle{name: "@huggingface/jinja", args: []string{node, filepath.Join(dir, "render.mjs")},
		env: []string{"TZ=UTC", "PHONELLM_JINJA_MODULES=" + modules}}
}

// Run renders every case (one process) and returns one result per case.
func (o *Oracle) Run(t testing.TB, templates map[string]string, cases []Case) []Result {
	t.Helper()
	in, err := json.Marshal(map[string]any{"templates": templates, "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard only
	defer cancel()
	c := exec.CommandContext(ctx, o.args[0], o.args[1:]...)
	c.Env = append(os.Environ(), o.env...)
	var stdout, stderr bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("jinjaoracle: %s: %v\n%s", o.name, err, stderr.String())
	}
	var res []Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || len(res) != len(cases) {
		t.Fatalf("jinjaoracle: %s: bad output (%v, %d results for %d cases)", o.name, err, len(res), len(cases))
	}
	return res
}

// FirstDiff shows where two renders part, for test failures.
func FirstDiff(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	lo := max(0, i-80)
	return fmt.Sprintf("at byte %d:\n  want …%q…\n  got  …%q…", i, want[lo:min(len(want), i+80)], got[lo:min(len(got), i+80)])
}

// Templates reads the corpus's templates by name (file name without .jinja).
func Templates(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(CorpusDir(t), "templates", "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("jinjaoracle: no templates in internal/jinja/testdata/templates (%v)", err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".jinja")] = string(b)
	}
	return out
}

// Conversations is the corpus's conversations.json: OpenAI-shaped messages
// by name, and the tool definitions the tool conversations use.
type Conversations struct {
	Tools         json.RawMessage            `json:"tools"`
	Conversations map[string]json.RawMessage `json:"conversations"`
}

// LoadConversations reads the corpus's conversations.
func LoadConversations(t testing.TB) Conversations {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(CorpusDir(t), "conversations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c Conversations
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// UsesTools reports whether a corpus conversation is rendered with the tool
// definitions.
func UsesTools(conv string) bool {
	return strings.HasPrefix(conv, "tool") || strings.HasPrefix(conv, "parallel")
}

// MarkupDivergence reports a render where @huggingface/jinja departs from
// jinja2 (the reference) because the template adds a plain string to a |safe
// one: markupsafe HTML-escapes the plain operand, @huggingface/jinja does not.
// Functionary v3.1 prints its tool list that way. ours is our render, which
// follows jinja2.
func MarkupDivergence(template, ours string) bool {
	return template == "meetkai-functionary-medium-v3.1" && strings.Contains(ours, "&#34;")
}
