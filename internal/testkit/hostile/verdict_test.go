package hostile

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/runtime/engine"
)

var (
	corpusOnce sync.Once
	corpusDir  string
	corpusAll  []Mutant
	corpusErr  error
)

// corpus generates the corpus once per test binary (bases under a temporary folder removed by TestMain).
func corpus(t testing.TB) []Mutant {
	t.Helper()
	corpusOnce.Do(func() {
		corpusDir, corpusErr = os.MkdirTemp("", "hostile-")
		if corpusErr == nil {
			corpusAll, corpusErr = Corpus(context.Background(), corpusDir)
		}
	})
	if corpusErr != nil {
		t.Fatal(corpusErr)
	}
	return corpusAll
}

func TestMain(m *testing.M) {
	code := m.Run()
	if corpusDir != "" {
		os.RemoveAll(corpusDir)
	}
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// verdict is what the project's checks say about a GGUF mutant, in process: accepted to list and estimate
// (inspect, fit), and accepted to serve (the checks goengine.Load runs before ggml sees the file).
func verdict(data []byte) (list, serve error) {
	f, err := gguf.Open(bytes.NewReader(data), int64(len(data)), "mutant.gguf")
	if err != nil {
		return err, err
	}
	list = modelcheck.CheckFile(f, modelcheck.Options{})
	serve = modelcheck.CheckFile(f, modelcheck.Options{Serve: true})
	if serve == nil {
		if src := f.String("tokenizer.chat_template"); src != "" {
			if _, err := engine.NewChatTemplate(src, "", ""); err != nil {
				serve = err
			}
		}
	}
	return list, serve
}

// TestExpectationsMatchChecks runs every GGUF mutant through the checks in process (fast, the whole corpus):
// a mutant labelled valid must pass them and one labelled refused must fail them. The corpus test then checks
// that the binary does what the checks say, without crashing, for a sample (or, on request, all).
func TestExpectationsMatchChecks(t *testing.T) {
	all := corpus(t)
	n := 0
	for _, m := range all {
		if m.Checkpoint() {
			continue
		}
		n++
		list, serve := verdict(m.Bytes())
		check := func(what string, want Outcome, err error) {
			switch {
			case want == Accept && err != nil:
				t.Errorf("%s: %s refuses it: %v", m.Name, what, err)
			case want == Refuse && err == nil:
				t.Errorf("%s: %s accepts it", m.Name, what)
			}
		}
		check("inspect", m.Expect.Inspect, list)
		check("serve", m.Expect.Serve, serve)
		var fe *gguf.FormatError
		if errors.As(list, &fe) && m.Expect.Inspect != Refuse {
			t.Errorf("%s: unreadable but expected %v", m.Name, m.Expect.Inspect)
		}
	}
	if n < 300 {
		t.Errorf("only %d GGUF mutants", n)
	}
	t.Logf("%d mutants (%d GGUF)", len(all), n)
}

// TestCorpusDeterministic: the same code makes the same bytes.
func TestCorpusDeterministic(t *testing.T) {
	all := corpus(t)
	dir := t.TempDir()
	again, err := Corpus(context.Background(), filepath.Join(dir, "again"))
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(all) {
		t.Fatalf("%d mutants, then %d", len(all), len(again))
	}
	for i := range all {
		if all[i].Name != again[i].Name {
			t.Fatalf("mutant %d: %s, then %s", i, all[i].Name, again[i].Name)
		}
		if !all[i].Checkpoint() && !bytes.Equal(all[i].Bytes(), again[i].Bytes()) {
			t.Errorf("%s differs between two generations", all[i].Name)
		}
	}
}

// TestSampleHasRegressions: the regression files of issue 14 exist and are in every sample, with the label
// "refused everywhere".
func TestSampleHasRegressions(t *testing.T) {
	all := corpus(t)
	s := Sample(all, 20)
	if len(s) != 20 {
		t.Fatalf("sample of %d", len(s))
	}
	for i, name := range Regressions {
		if s[i].Name != name {
			t.Fatalf("sample[%d] = %s, want %s", i, s[i].Name, name)
		}
		want := ggufRefused
		if s[i].Checkpoint() {
			want = ckptInvalid // inspect lists a checkpoint folder; convert and quantize refuse it
		}
		if s[i].Expect != want {
			t.Errorf("%s: %+v, want %+v", name, s[i].Expect, want)
		}
	}
	seen := map[string]bool{}
	for _, m := range s {
		if seen[m.Name] {
			t.Fatalf("%s twice in the sample", m.Name)
		}
		seen[m.Name] = true
	}
}
