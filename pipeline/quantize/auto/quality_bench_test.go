package auto

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/benchdata"
	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/eval"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/gguf/convert"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/imatrix/calibrate"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/runtime/goengine"
)

// qualitySpec is the model of the quality benchmark: Qwen3-0.6B's shape (hidden 1024, 28 layers, 16/8 heads,
// head_dim 128, ffn 3072, vocab 151936, tied embeddings) with eight outlier channels, as trained LLMs have,
// projections initialised at std 0.02 (0.03 for the MLP's gate and up), transformers' init range, and embedding
// values at std 0.04: a random model then spreads its predictions (perplexity near the vocabulary's size) and
// Q4_K_M costs a mean KLD of a few hundredths, the range of real models, instead of turning every small error
// into a different confident prediction.
// PHONELLM_QUALITY_SCALE=small takes a 6-layer, 512-wide model with the same outliers, for a quick look.
func qualitySpec() tinymodel.Spec {
	s := tinymodel.Qwen3BenchSpec()
	s.Name, s.Seed = "qwen3-0.6b-outliers", 606
	s.OutlierChannels, s.OutlierScale = 8, 20
	s.WeightStd, s.MLPStd, s.EmbedStd = 0.02, 0.03, 0.04
	if os.Getenv("PHONELLM_QUALITY_SCALE") == "small" {
		s.Name = "qwen3-small-outliers"
		s.HiddenSize, s.NumLayers, s.NumHeads, s.NumKVHeads, s.IntermediateSize, s.VocabSize = 512, 6, 8, 4, 1536, 4096
	}
	return s
}

// qualityPrompts makes n prompts from the tinymodel corpus lines (seeded): each joins 4-9 random lines, some
// with their numbers changed, so the calibration and the evaluation prompts are different texts of one kind.
func qualityPrompts(seed uint64, n int) []eval.Prompt {
	lines := tinymodel.CorpusLines()
	rng := rand.New(rand.NewPCG(seed, 99))
	out := make([]eval.Prompt, n)
	for i := range out {
		var b strings.Builder
		for range 4 + rng.IntN(6) {
			l := lines[rng.IntN(len(lines))]
			if rng.IntN(3) == 0 {
				l = strings.NewReplacer("5", fmt.Sprint(rng.IntN(10)), "12", fmt.Sprint(rng.IntN(1000))).Replace(l)
			}
			b.WriteString(l)
			b.WriteByte('\n')
		}
		out[i] = eval.Prompt{Text: b.String()}
	}
	return out
}

func writePrompts(path string, ps []eval.Prompt) error {
	var b strings.Builder
	for _, p := range ps {
		raw, err := json.Marshal(map[string]string{"text": p.Text})
		if err != nil {
			return err
		}
		b.Write(raw)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

type engineModel struct{ e *goengine.Engine }

func (m engineModel) Observe(ctx context.Context, toks []int32, want func(string, bool) bool, fn func(imatrix.Matmul) error) error {
	return m.e.Observe(ctx, toks, goengine.ObserveOptions{Want: want, Matmul: func(p goengine.Matmul) error { return fn(imatrix.Matmul(p)) }})
}
func (m engineModel) Close() error { return m.e.Close() }

// BenchmarkQuality is issue 16's quality acceptance (docs/benchmarks.md): on the outlier model, an importance
// matrix from 100 generated prompts, and the KL divergence of each file against the BF16 model on 50 other
// prompts:
//
//	go test ./pipeline/quantize/auto -run '^$' -bench Quality -benchtime 1x -timeout 0
//
// PHONELLM_THREADS sets the engine's threads (default all cores; 1 is faster on a machine other jobs load).
// Inputs, measurements and results are kept under $PHONELLM_HOME/bench/quality/<model> (delete it to start
// over); the results table is printed at the end and written to results.md there.
func BenchmarkQuality(b *testing.B) {
	ctx := context.Background()
	spec := qualitySpec()
	dir := filepath.Join(benchdata.Dir(), "quality", spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	threads, _ := strconv.Atoi(os.Getenv("PHONELLM_THREADS")) // 0: all cores
	load := func(ctx context.Context, path string) (eval.LogitModel, error) {
		return goengine.Load(ctx, goengine.Options{Path: path, Threads: threads, ContextLength: 1024, BatchSize: 512})
	}
	step := func(what string) func() {
		start := time.Now()
		b.Logf("%s …", what)
		return func() { b.Logf("%s: %.0f s (load %s)", what, time.Since(start).Seconds(), loadAvg()) }
	}

	ref := filepath.Join(dir, "ref-BF16.gguf")
	if _, err := os.Stat(ref); err != nil {
		done := step("generate and convert the model")
		ck := filepath.Join(dir, "hf")
		if err := tinymodel.Generate(ck, spec); err != nil {
			b.Fatal(err)
		}
		if _, err := convert.Run(ctx, convert.Options{Model: ck, Out: ref, OutType: convert.OutBF16, Name: spec.Name}, pipeline.Discard); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(ck)
		done()
	}
	calib, held := filepath.Join(dir, "calib.jsonl"), filepath.Join(dir, "eval.jsonl")
	calibPrompts, evalPrompts := qualityPrompts(1, 100), qualityPrompts(2, 50)
	if err := writePrompts(calib, calibPrompts); err != nil {
		b.Fatal(err)
	}
	if err := writePrompts(held, evalPrompts); err != nil {
		b.Fatal(err)
	}
	imPath := filepath.Join(dir, "calib.imatrix.gguf")
	if _, err := os.Stat(imPath); err != nil {
		done := step("imatrix from 100 prompts")
		r, err := calibrate.Run(ctx, calibrate.Options{Model: ref, Data: calib, Out: imPath, ChunkSize: 512,
			Load: func(ctx context.Context, p string, n, batch int) (calibrate.Model, error) {
				e, err := goengine.Load(ctx, goengine.Options{Path: p, ContextLength: n, BatchSize: batch, Threads: threads})
				if err != nil {
					return nil, err
				}
				return engineModel{e}, nil
			}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("imatrix: %d chunks of 512 tokens from %d tokens", r.Chunks, r.Tokens)
		done()
	}
	im, err := imatrix.Load(imPath)
	if err != nil {
		b.Fatal(err)
	}
	defer im.Close()

	refModel, err := load(ctx, ref)
	if err != nil {
		b.Fatal(err)
	}
	cache, err := eval.NewLogitCache(refModel, dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cache.Close()
	type row struct {
		name  string
		size  int64
		bpw   float64
		kld   eval.DistResult
		extra string
	}
	var rows []row
	// Measured KLDs are kept by file (name, size, modification time) in kld.json, so a rerun after an
	// interruption or with a new file measures only what changed.
	kldPath := filepath.Join(dir, "kld.json")
	known := map[string]eval.DistResult{}
	if raw, err := os.ReadFile(kldPath); err == nil {
		json.Unmarshal(raw, &known)
	}
	measure := func(name, path, extra string) row {
		st, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("%s %d %d", filepath.Base(path), st.Size(), st.ModTime().UnixNano())
		d, ok := known[key]
		if !ok {
			done := step("KLD of " + name)
			cand, err := load(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			d, err = eval.CompareDistributions(ctx, cache, cand, evalPrompts, eval.DistOptions{Window: 1024}, nil)
			cand.Close()
			if err != nil {
				b.Fatal(err)
			}
			done()
			known[key] = d
			if raw, err := json.MarshalIndent(known, "", " "); err == nil {
				os.WriteFile(kldPath, raw, 0o644)
			}
		}
		f, _ := gguf.OpenFile(path)
		var elems uint64
		for _, t := range f.Tensors {
			elems += t.NumElements()
		}
		f.Close()
		r := row{name: name, size: st.Size(), bpw: float64(st.Size()*8) / float64(elems), kld: d, extra: extra}
		rows = append(rows, r)
		return r
	}
	quant := func(name string, ft gguf.FileType, withIm bool) string {
		out := filepath.Join(dir, name+".gguf")
		if _, err := os.Stat(out); err == nil {
			return out
		}
		done := step("quantize " + name)
		src, err := quantize.OpenGGUF(ref)
		if err != nil {
			b.Fatal(err)
		}
		o := quantize.Options{Source: src, FileType: ft, Out: out}
		if withIm {
			o.Imatrix, o.ImatrixName = im, "calib.imatrix.gguf"
		}
		_, err = quantize.Run(ctx, o, nil)
		src.Close()
		if err != nil {
			b.Fatal(err)
		}
		done()
		return out
	}
	plain := measure("Q4_K_M", quant("Q4_K_M", gguf.FileTypeQ4_K_M, false), "")
	withIm := measure("Q4_K_M imatrix", quant("Q4_K_M-imatrix", gguf.FileTypeQ4_K_M, true), "")
	iq4 := measure("IQ4_XS imatrix", quant("IQ4_XS-imatrix", gguf.FileTypeIQ4_XS, true), "")
	measure("IQ4_XS", quant("IQ4_XS", gguf.FileTypeIQ4_XS, false), "")

	autoOut := filepath.Join(dir, "auto.gguf")
	done := step("quantize auto --size Q4_K_M's")
	ar, err := Run(ctx, Options{
		Measure: MeasureOptions{Reference: ref, Prompts: calibPrompts, Load: load, Imatrix: im, Tokens: 512, Window: 1024,
			Ladder: []gguf.Type{gguf.TypeQ3_K, gguf.TypeIQ4_XS, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ8_0}, WorkDir: dir},
		Target: Target{Size: plain.size}, Out: autoOut, ImatrixName: "calib.imatrix.gguf", Cache: filepath.Join(dir, "sensitivity.json"),
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	done()
	au := measure("auto --size Q4_K_M", autoOut, fmt.Sprintf("predicted %.5f", ar.PredictedKLD))

	var t strings.Builder
	fmt.Fprintf(&t, "model %s, %d calibration prompts (%d chunks), %d evaluation prompts (%d positions); load %s\n\n",
		spec.Name, len(calibPrompts), im.Chunks, len(evalPrompts), plain.kld.Positions, loadAvg())
	fmt.Fprintf(&t, "| file | size | bpw | mean KLD | p99 KLD | top-1 | vs Q4_K_M | note |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&t, "| %s | %d | %.3f | %.5f | %.5f | %.2f %% | %+.1f %% | %s |\n", r.name, r.size, r.bpw, r.kld.MeanKLD, r.kld.P99KLD,
			100*r.kld.Top1, 100*(r.kld.MeanKLD/plain.kld.MeanKLD-1), r.extra)
	}
	for _, r := range ar.Rows {
		fmt.Fprintf(&t, "\nmix: %-24s %-6s %10d B  predicted ΔKLD %.5f", r.Group, r.Type, r.Bytes, r.DeltaKLD)
	}
	fmt.Println(t.String())
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(t.String()+"\n"), 0o644); err != nil {
		b.Error(err)
	}
	if withIm.kld.MeanKLD > 0.8*plain.kld.MeanKLD {
		b.Errorf("Q4_K_M with the imatrix: KLD %.5f, not 20 %% below %.5f", withIm.kld.MeanKLD, plain.kld.MeanKLD)
	}
	if iq4.kld.MeanKLD >= plain.kld.MeanKLD || iq4.size >= plain.size {
		b.Errorf("IQ4_XS with the imatrix (%d B, KLD %.5f) does not beat Q4_K_M (%d B, %.5f)", iq4.size, iq4.kld.MeanKLD, plain.size, plain.kld.MeanKLD)
	}
	if au.kld.MeanKLD >= plain.kld.MeanKLD || au.size > plain.size {
		b.Errorf("auto (%d B, KLD %.5f) does not beat Q4_K_M (%d B, %.5f)", au.size, au.kld.MeanKLD, plain.size, plain.kld.MeanKLD)
	}
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
