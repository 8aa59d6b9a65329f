package quantize

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/internal/half"
	"github.com/phonellm/phonellm/internal/testkit/oracle"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/quantize/kquant"
)

// dequantizedTwin writes an F32 GGUF holding exactly the values the quantized file at path encodes (every
// quantized tensor through its kquant Dequantize), with the same metadata.
func dequantizedTwin(t *testing.T, path, out string) {
	t.Helper()
	f, err := gguf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, kv := range f.KVs {
		if kv.Key == "general.file_type" {
			continue
		}
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors {
		typ := ti.Type
		if typ.Quantized() || typ == gguf.TypeF16 {
			typ = gguf.TypeF32
		}
		if err := w.AddTensor(ti.Name, typ, ti.Shape); err != nil {
			t.Fatal(err)
		}
	}
	o, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := w.WriteHeader(o); err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors {
		r, _ := f.TensorReader(ti.Name)
		raw, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		var vals []float32
		switch {
		case ti.Type == gguf.TypeF32:
			if err := w.WriteTensor(ti.Name, raw); err != nil {
				t.Fatal(err)
			}
			continue
		case ti.Type == gguf.TypeF16:
			vals = make([]float32, ti.NumElements())
			half.DecodeF16LE(vals, raw)
		default:
			k, ok := kquant.ForType(uint32(ti.Type))
			if !ok {
				t.Fatalf("%s: no kernel for %s", ti.Name, ti.Type)
			}
			vals = make([]float32, ti.NumElements())
			k.Dequantize(vals, raw)
		}
		buf := make([]byte, 4*len(vals))
		half.EncodeF32LE(buf, vals)
		if err := w.WriteTensor(ti.Name, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestUpstreamLowBitTypes is issue 16's upstream acceptance for the new types: IQ2_XXS, IQ3_S, IQ1_M and TQ2_0
// files quantized with an importance matrix load in upstream llama.cpp and compute what they encode — their
// logits match those of an F32 file holding the dequantized values (llama.cpp quantizes the activations for
// these types' dot products, hence the tolerance) — and greedy decoding runs.
func TestUpstreamLowBitTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp")
	}
	o := oracle.Shared(t)
	spec, _ := tinymodel.Preset("qwen3")
	spec = decisive(spec)
	dir := filepath.Join(t.TempDir(), "hf")
	if err := tinymodel.Generate(dir, spec); err != nil {
		t.Fatal(err)
	}
	f16 := filepath.Join(t.TempDir(), "f16.gguf")
	if _, err := convert.Run(context.Background(), convert.Options{Model: dir, Out: f16, OutType: convert.OutF16}, pipeline.Discard); err != nil {
		t.Fatal(err)
	}
	im, err := imatrix.Load(imatrixFor(t, f16, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	prompt := []int{5, 77, 301, 12, 450, 9, 133, 600, 42, 7, 250, 18}
	for _, ft := range []gguf.FileType{gguf.FileTypeIQ2_XXS, gguf.FileTypeIQ3_S, gguf.FileTypeIQ1_M, gguf.FileTypeTQ2_0} {
		t.Run(ft.String(), func(t *testing.T) {
			tmp := t.TempDir()
			q := filepath.Join(tmp, ft.String()+".gguf")
			res, err := runQ(t, f16, Options{FileType: ft, Out: q, Imatrix: im})
			if err != nil {
				t.Fatal(err)
			}
			byType := map[gguf.Type]int{}
			for _, e := range res.Plan.Entries {
				byType[e.To]++
			}
			twin := filepath.Join(tmp, "twin-f32.gguf")
			dequantizedTwin(t, q, twin)
			if _, err := o.Load(q); err != nil {
				t.Fatalf("llama.cpp rejects our %s file: %v", ft, err)
			}
			got, err := o.LogitsAll(q, prompt)
			if err != nil {
				t.Fatal(err)
			}
			want, err := o.LogitsAll(twin, prompt)
			if err != nil {
				t.Fatal(err)
			}
			var d2, w2 float64
			same := 0
			for p := range want {
				for i, v := range want[p] {
					d := float64(got[p][i] - v)
					d2 += d * d
					w2 += float64(v) * float64(v)
				}
				if argmax(got[p]) == argmax(want[p]) {
					same++
				}
			}
			rel := math.Sqrt(d2 / w2)
			t.Logf("%s (%v): logits vs the dequantized twin: rms %.4f relative, top-1 agrees at %d of %d positions", ft, byType, rel, same, len(want))
			if rel > 0.05 || same < len(want)*3/4 {
				t.Errorf("%s: llama.cpp computes something else than the file encodes (rms %.4f, top-1 %d/%d)", ft, rel, same, len(want))
			}
			if toks, err := o.Greedy(q, prompt, 4); err != nil || len(toks) != 4 {
				t.Errorf("greedy: %v %v", toks, err)
			}
			o.Unload(q)
			o.Unload(twin)
		})
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
