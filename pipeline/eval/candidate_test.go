package eval

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// writeGGUF writes a GGUF with one [256, 2] tensor of type typ (zero bytes, seed in the name so files differ)
// and general.file_type ft.
func writeGGUF(t *testing.T, path string, ft gguf.FileType, typ gguf.Type, seed string) string {
	t.Helper()
	w := gguf.NewWriter()
	for _, kv := range []struct {
		k string
		v gguf.Value
	}{{"general.architecture", gguf.String("qwen3")}, {"general.name", gguf.String(seed)}, {"general.file_type", gguf.Uint32(uint32(ft))}} {
		if err := w.SetKV(kv.k, kv.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddTensor("blk.0.attn_q.weight", typ, []uint64{256, 2}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := w.WriteHeader(&buf); err != nil {
		t.Fatal(err)
	}
	for {
		ti, ok := w.NextTensor()
		if !ok {
			break
		}
		if err := w.WriteTensor(ti.Name, make([]byte, ti.Size())); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckCandidate: the reference itself — the same path, a hard link, a copy — is refused with a
// *CandidateError that classifies as an input error; another file is accepted.
func TestCheckCandidate(t *testing.T) {
	dir := t.TempDir()
	ref := writeGGUF(t, filepath.Join(dir, "m-F16.gguf"), gguf.FileTypeF16, gguf.TypeF16, "a")
	link := filepath.Join(dir, "link.gguf")
	if err := os.Link(ref, link); err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "copy.gguf")
	b, _ := os.ReadFile(ref)
	os.WriteFile(cp, b, 0o644)
	other := writeGGUF(t, filepath.Join(dir, "other-F16.gguf"), gguf.FileTypeF16, gguf.TypeF16, "b")
	q := writeGGUF(t, filepath.Join(dir, "m-Q8_0.gguf"), gguf.FileTypeQ8_0, gguf.TypeQ8_0, "a")
	for _, c := range []struct {
		cand string
		want string
	}{{ref, "the reference itself"}, {link, "same file"}, {cp, "same bytes"}, {other, ""}, {q, ""}} {
		err := CheckCandidate(ref, c.cand)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.cand, err)
			}
			continue
		}
		var ce *CandidateError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) || !pipeline.IsInputError(err) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line input *CandidateError saying %q", c.cand, err, c.want)
		}
	}
}

// TestPickCandidate is issue 13 item 3: without --candidate the newest workspace GGUF was the F16 that convert
// had just written, compared with itself. The pick skips the reference, copies of it and float models.
func TestPickCandidate(t *testing.T) {
	dir := t.TempDir()
	ref := writeGGUF(t, filepath.Join(dir, "m-F16.gguf"), gguf.FileTypeF16, gguf.TypeF16, "a")
	bf16 := writeGGUF(t, filepath.Join(dir, "m-BF16.gguf"), gguf.FileTypeBF16, gguf.TypeBF16, "a")
	q4 := writeGGUF(t, filepath.Join(dir, "m-Q4_K_M.gguf"), gguf.FileTypeQ4_K_M, gguf.TypeQ4_K, "a")
	q8 := writeGGUF(t, filepath.Join(dir, "m-Q8_0.gguf"), gguf.FileTypeQ8_0, gguf.TypeQ8_0, "a")
	got, skipped, err := PickCandidate(ref, []string{ref, bf16, filepath.Join(dir, "gone.gguf"), q4, q8})
	if err != nil || got != q4 || len(skipped) != 3 {
		t.Fatalf("picked %q (skipped %q, %v), want %s", got, skipped, err, q4)
	}
	_, _, err = PickCandidate(ref, []string{ref, bf16})
	var ce *CandidateError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "no quantized model") || !strings.Contains(err.Error(), "BF16, not quantized") ||
		!strings.Contains(err.Error(), "is the reference") {
		t.Fatalf("nothing to pick: %v", err)
	}
	if ft, q, err := ModelType(q4); err != nil || !q || ft != gguf.FileTypeQ4_K_M {
		t.Errorf("ModelType(Q4_K_M) = %v %v %v", ft, q, err)
	}
}

// TestRunRefusesSelfComparison: the stage refuses a candidate that is the reference before loading anything.
func TestRunRefusesSelfComparison(t *testing.T) {
	dir := t.TempDir()
	ref := writeGGUF(t, filepath.Join(dir, "m-F16.gguf"), gguf.FileTypeF16, gguf.TypeF16, "a")
	loads := 0
	load := func(context.Context, string) (LogitModel, error) {
		loads++
		return &fakeModel{vocab: 300, ctx: 64, chunk: 8, failAt: -1}, nil
	}
	sym := filepath.Join(dir, "sym.gguf")
	if err := os.Symlink(ref, sym); err != nil {
		t.Fatal(err)
	}
	for _, cand := range []string{ref, sym} {
		_, err := Run(context.Background(), Options{Dist: DistOptions{Reference: ref, Candidate: cand, Prompts: "testdata/prompts.txt", Load: load}}, nil)
		var ce *CandidateError
		if !errors.As(err, &ce) {
			t.Errorf("candidate %s: %v, want a *CandidateError", cand, err)
		}
	}
	if loads != 0 {
		t.Errorf("%d models loaded before the refusal", loads)
	}
}

// nanModel returns NaN logits at positions ≥ from (and finite ones before).
type nanModel struct {
	*fakeModel
	from int
}

func (m *nanModel) Logits(ctx context.Context, toks []int32, fn func(int, []float32) error) error {
	return m.fakeModel.Logits(ctx, toks, func(pos int, l []float32) error {
		if pos >= m.from {
			l = append([]float32(nil), l...)
			l[pos%len(l)] = float32(math.NaN())
		}
		return fn(pos, l)
	})
}

// TestNaNCandidateFailsGate: a candidate whose logits are NaN is a failed gate (CheckFailed, exit 4), with or
// without thresholds, not a malfunction (exit 1).
func TestNaNCandidateFailsGate(t *testing.T) {
	ref := &fakeModel{vocab: 300, ctx: 64, chunk: 8, failAt: -1}
	cand := &nanModel{&fakeModel{vocab: 300, ctx: 64, chunk: 8, noise: 0.1, seed: 5, failAt: -1}, 20}
	for _, th := range []Thresholds{{}, {MaxKLD: 10}} {
		o := Options{Dist: DistOptions{Reference: "ref.gguf", Candidate: "cand.gguf", Prompts: "testdata/prompts.txt",
			Load: fakeLoader(map[string]LogitModel{"ref.gguf": ref, "cand.gguf": cand})}, Thresholds: th}
		r, err := Run(context.Background(), o, nil)
		if err != nil {
			t.Fatalf("thresholds %+v: %v, want a failed gate", th, err)
		}
		d := r.Distribution
		if r.Pass || d.NonFinite == 0 || d.Positions == 0 || len(r.Reasons) == 0 || !strings.Contains(r.Reasons[0], "NaN") ||
			!strings.Contains(d.FirstNonFinite, "position 20") {
			t.Fatalf("thresholds %+v: pass %v, %d non-finite of %d, reasons %q, first %q", th, r.Pass, d.NonFinite, d.Positions, r.Reasons, d.FirstNonFinite)
		}
		if gerr := r.Err(); !errors.Is(gerr, ErrGateFailed) {
			t.Errorf("Err() = %v", gerr)
		}
	}
}
