package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// QuantizeOptions configure [Quantize].
type QuantizeOptions struct {
	// Phonellm is the phonellm executable each quantization runs as (a child process, so that its CPU time and
	// peak RSS are its own).
	Phonellm string
	// Env is the environment of phonellm's children.
	Env []string
	// LlamaQuantize is a llama-quantize executable to time in the same run, alternating with phonellm. Empty:
	// phonellm alone, compared with the published anchor ([QuantizeAnchors]).
	LlamaQuantize string
	// Input is the F16 (or BF16/F32) GGUF to quantize.
	Input string
	// Types are file types as both programs spell them ("Q4_K_M", "Q8_0", …); Threads the thread counts.
	Types   []string
	Threads []int
	// Imatrix, when set, is an importance matrix: every type and thread count is then measured twice, without
	// and with it (both programs get it), so the two rows show what the weighted kernels cost.
	Imatrix string
	// Repeats is the number of timed runs of each program per type and thread count; default 3.
	Repeats int
	// WorkDir receives the outputs (one file per program, removed after each measurement).
	WorkDir string
	// Progress, when set, gets one line per run.
	Progress func(string)
}

// QuantizeRun is one timed child process.
type QuantizeRun struct {
	Seconds    float64 `json:"seconds"`     // wall time
	CPUSeconds float64 `json:"cpu_seconds"` // user + system time of the child (getrusage)
	PeakRSS    int64   `json:"peak_rss_bytes"`
	Load1      float64 `json:"load_average_1m"` // 1-minute load average just before the run (0 where unknown)
}

// QuantizeRow is one type and thread count. Ratios are phonellm against llama-quantize: ThroughputRatio above
// 1 means phonellm is faster (llama-quantize's wall time / phonellm's), CPURatio below 1 means phonellm uses
// less CPU time (phonellm's CPU-seconds / llama-quantize's). Measured in the same run, each is the median of
// the per-round ratios (rounds alternate which program goes first); against the anchor, the ratio of
// phonellm's medians to the anchor's figures, scaled to the input's size.
type QuantizeRow struct {
	Type       string `json:"type"`
	Threads    int    `json:"threads"`
	Imatrix    bool   `json:"imatrix,omitempty"`
	InputBytes int64  `json:"input_bytes"`
	// Seconds, InputMBps, PeakRSS and OutBytes describe phonellm (medians over its runs; PeakRSS the largest).
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	InputMBps  float64 `json:"input_mb_per_s"`
	PeakRSS    int64   `json:"peak_rss_bytes"`
	OutBytes   int64   `json:"output_bytes"`
	// Baseline says what the llama-quantize figures are: "same run" or "anchor".
	Baseline         string  `json:"baseline"`
	LlamaSeconds     float64 `json:"llama_quantize_seconds"`
	LlamaCPUSeconds  float64 `json:"llama_quantize_cpu_seconds"`
	LlamaInputMBps   float64 `json:"llama_quantize_input_mb_per_s"`
	LlamaPeakRSS     int64   `json:"llama_quantize_peak_rss_bytes,omitempty"`
	ThroughputRatio  float64 `json:"throughput_ratio"`
	CPURatio         float64 `json:"cpu_ratio"`
	Tensors          int     `json:"tensors,omitempty"`           // same run: tensors in phonellm's output
	IdenticalTensors int     `json:"identical_tensors,omitempty"` // of those, byte-identical in llama-quantize's
	// Runs are every timed run, in order.
	Runs      []QuantizeRun `json:"phonellm_runs"`
	LlamaRuns []QuantizeRun `json:"llama_quantize_runs,omitempty"`
}

// QuantizeResult is what [Quantize] measured.
type QuantizeResult struct {
	Input string        `json:"input"`
	Rows  []QuantizeRow `json:"rows"`
	// Load is the range of the 1-minute load average seen before the runs ("" where unknown).
	Load string `json:"load_average"`
	// Note says where the llama-quantize figures come from.
	Note string `json:"note"`
}

// QuantizeAnchor is llama-quantize's published speed on the reference machine (shared/reference/
// gguf-quant-convert.md §10.4: llama.cpp 34af94cd, 2-core AMD EPYC, Debian 12, a 1,503,414,816-byte
// Qwen3-0.6B-shaped F16 GGUF, best of 3 wall times at 2 threads, CPU the middle of the measured user-time
// range).
type QuantizeAnchor struct {
	Seconds    float64
	CPUSeconds float64
	InputBytes int64
}

// QuantizeAnchors are the anchors by type and thread count.
var QuantizeAnchors = map[string]map[int]QuantizeAnchor{
	"Q4_K_M": {2: {38.4, 72, 1503414816}, 1: {69.1, 67.4, 1503414816}},
	"Q8_0":   {2: {6.3, 6.6, 1503414816}, 1: {8.0, 6.3, 1503414816}},
	"Q4_0":   {2: {7.5, 10.85, 1503414816}, 1: {10.9, 9.4, 1503414816}},
}

// Quantize times phonellm's quantization of o.Input for every type and thread count, alternating with
// llama-quantize when o.LlamaQuantize is set (o.Repeats rounds; even rounds run llama-quantize first), and
// compares the two outputs tensor by tensor after the first round. Without llama-quantize it compares with
// QuantizeAnchors and says so.
func Quantize(ctx context.Context, o QuantizeOptions) (QuantizeResult, error) {
	if o.Repeats <= 0 {
		o.Repeats = 3
	}
	st, err := os.Stat(o.Input)
	if err != nil {
		return QuantizeResult{}, fmt.Errorf("bench quantize: %w", err)
	}
	if o.LlamaQuantize != "" {
		if _, err := os.Stat(o.LlamaQuantize); err != nil {
			return QuantizeResult{}, fmt.Errorf("bench quantize: llama-quantize: %w", err)
		}
	}
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	res := QuantizeResult{Input: o.Input}
	if o.LlamaQuantize != "" {
		res.Note = "llama-quantize " + o.LlamaQuantize + " timed in the same run, alternating with phonellm"
	} else {
		res.Note = "llama-quantize not measured in this run (set LLAMA_QUANTIZE): ratios are against its published " +
			"anchor from another day and machine state (shared/reference/gguf-quant-convert.md §10.4)"
	}
	loadMin, loadMax := -1.0, -1.0
	noteLoad := func(l float64) {
		if l <= 0 {
			return
		}
		if loadMin < 0 || l < loadMin {
			loadMin = l
		}
		loadMax = max(loadMax, l)
	}
	pOut := filepath.Join(o.WorkDir, "phonellm-out.gguf")
	lOut := filepath.Join(o.WorkDir, "llama-quantize-out.gguf")
	defer os.Remove(pOut)
	defer os.Remove(lOut)
	imatrices := []string{""}
	if o.Imatrix != "" {
		imatrices = append(imatrices, o.Imatrix)
	}
	for _, typ := range o.Types {
		for _, th := range o.Threads {
			for _, im := range imatrices {
				row := QuantizeRow{Type: typ, Threads: th, InputBytes: st.Size(), Imatrix: im != ""}
				label := typ
				pArgs := []string{o.Phonellm, "quantize", strings.ToLower(typ), "--in", o.Input,
					"-o", pOut, "--threads", strconv.Itoa(th), "-q", "--json", "--no-imatrix"}
				lArgs := []string{o.LlamaQuantize, o.Input, lOut, typ, strconv.Itoa(th)}
				if im != "" {
					label += " with imatrix"
					pArgs = append(pArgs[:len(pArgs)-1], "--imatrix", im)
					lArgs = append([]string{o.LlamaQuantize, "--imatrix", im}, lArgs[1:]...)
				}
				runP := func() error {
					r, out, err := quantizeChild(ctx, pArgs, o.Env)
					if err != nil {
						return fmt.Errorf("bench quantize: phonellm %s (%d threads): %w%s", typ, th, err, tail(out))
					}
					row.Runs = append(row.Runs, r)
					noteLoad(r.Load1)
					if fi, err := os.Stat(pOut); err == nil {
						row.OutBytes = fi.Size()
					}
					progress(fmt.Sprintf("%s, %d threads: phonellm %.2f s wall, %.2f CPU-s, peak RSS %.1f MB (load %.2f)",
						label, th, r.Seconds, r.CPUSeconds, float64(r.PeakRSS)/1e6, r.Load1))
					return nil
				}
				runL := func() error {
					r, out, err := quantizeChild(ctx, lArgs, os.Environ())
					if err != nil {
						return fmt.Errorf("bench quantize: llama-quantize %s (%d threads): %w%s", typ, th, err, tail(out))
					}
					row.LlamaRuns = append(row.LlamaRuns, r)
					noteLoad(r.Load1)
					progress(fmt.Sprintf("%s, %d threads: llama-quantize %.2f s wall, %.2f CPU-s, peak RSS %.1f MB (load %.2f)",
						label, th, r.Seconds, r.CPUSeconds, float64(r.PeakRSS)/1e6, r.Load1))
					return nil
				}
				for round := 0; round < o.Repeats; round++ {
					first, second := runP, runL
					if round%2 == 0 {
						first, second = runL, runP
					}
					if o.LlamaQuantize == "" {
						first, second = runP, nil
					}
					if err := first(); err != nil {
						return res, err
					}
					if second != nil {
						if err := second(); err != nil {
							return res, err
						}
					}
					if round == 0 && o.LlamaQuantize != "" {
						n, same, err := compareTensors(pOut, lOut)
						if err != nil {
							return res, fmt.Errorf("bench quantize: compare %s outputs: %w", typ, err)
						}
						row.Tensors, row.IdenticalTensors = n, same
						progress(fmt.Sprintf("%s: %d of %d tensors byte-identical", label, same, n))
					}
				}
				summarize(&row, o.LlamaQuantize != "")
				res.Rows = append(res.Rows, row)
				os.Remove(pOut)
				os.Remove(lOut)
			}
		}
	}
	if loadMin >= 0 {
		res.Load = fmt.Sprintf("%.2f–%.2f", loadMin, loadMax)
	}
	return res, nil
}

// summarize fills the medians and ratios of a row from its runs (or the anchor).
func summarize(row *QuantizeRow, sameRun bool) {
	var wall, cpu []float64
	for _, r := range row.Runs {
		wall = append(wall, r.Seconds)
		cpu = append(cpu, r.CPUSeconds)
		row.PeakRSS = max(row.PeakRSS, r.PeakRSS)
	}
	row.Seconds, row.CPUSeconds = median(wall), median(cpu)
	if row.Seconds > 0 {
		row.InputMBps = float64(row.InputBytes) / 1e6 / row.Seconds
	}
	if sameRun {
		row.Baseline = "same run"
		var lwall, lcpu, tr, cr []float64
		for i, r := range row.LlamaRuns {
			lwall = append(lwall, r.Seconds)
			lcpu = append(lcpu, r.CPUSeconds)
			row.LlamaPeakRSS = max(row.LlamaPeakRSS, r.PeakRSS)
			if i < len(row.Runs) && row.Runs[i].Seconds > 0 && r.CPUSeconds > 0 {
				tr = append(tr, r.Seconds/row.Runs[i].Seconds)
				cr = append(cr, row.Runs[i].CPUSeconds/r.CPUSeconds)
			}
		}
		row.LlamaSeconds, row.LlamaCPUSeconds = median(lwall), median(lcpu)
		if row.LlamaSeconds > 0 {
			row.LlamaInputMBps = float64(row.InputBytes) / 1e6 / row.LlamaSeconds
		}
		row.ThroughputRatio, row.CPURatio = median(tr), median(cr)
		return
	}
	if row.Imatrix {
		row.Baseline = "none" // the published anchor was measured without an importance matrix
		return
	}
	row.Baseline = "anchor"
	a, ok := QuantizeAnchors[strings.ToUpper(row.Type)][row.Threads]
	if !ok {
		return
	}
	// Scale the anchor to this input's size (the anchor's file is 0.2 % smaller than the generated one).
	scale := float64(row.InputBytes) / float64(a.InputBytes)
	row.LlamaSeconds, row.LlamaCPUSeconds = a.Seconds*scale, a.CPUSeconds*scale
	row.LlamaInputMBps = float64(a.InputBytes) / 1e6 / a.Seconds
	if row.Seconds > 0 {
		row.ThroughputRatio = row.LlamaSeconds / row.Seconds
	}
	if row.LlamaCPUSeconds > 0 {
		row.CPURatio = row.CPUSeconds / row.LlamaCPUSeconds
	}
}

// quantizeChild runs one quantization as a child process and returns its measurement and its combined
// output (for error messages).
func quantizeChild(ctx context.Context, argv, env []string) (QuantizeRun, []byte, error) {
	load := loadAverage()[0]
	var out bytes.Buffer
	c, err := RunChild(ctx, argv, env, &out)
	out.Write(c.Stdout)
	r := QuantizeRun{Seconds: c.Seconds, CPUSeconds: c.CPUSeconds, PeakRSS: c.PeakRSS, Load1: load}
	return r, out.Bytes(), err
}

// tail is the end of a child's output, for an error message.
func tail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if s == "" {
		return ""
	}
	if i := strings.LastIndexByte(s, '\n'); i >= 0 && len(s)-i < 400 {
		s = s[i+1:]
	} else if len(s) > 400 {
		s = s[len(s)-400:]
	}
	return ": " + s
}

// compareTensors counts the tensors of GGUF a and how many of them b holds with the same type, shape and bytes.
func compareTensors(a, b string) (n, same int, err error) {
	fa, err := gguf.OpenFile(a)
	if err != nil {
		return 0, 0, err
	}
	defer fa.Close()
	fb, err := gguf.OpenFile(b)
	if err != nil {
		return 0, 0, err
	}
	defer fb.Close()
	bufA, bufB := make([]byte, 1<<20), make([]byte, 1<<20)
	for _, ta := range fa.Tensors {
		n++
		tb, ok := fb.Tensor(ta.Name)
		if !ok || tb.Type != ta.Type || !sameShape(ta.Shape, tb.Shape) {
			continue
		}
		ra, err := fa.TensorReader(ta.Name)
		if err != nil {
			return n, same, err
		}
		rb, err := fb.TensorReader(ta.Name)
		if err != nil {
			return n, same, err
		}
		eq, err := sameBytes(ra, rb, bufA, bufB)
		if err != nil {
			return n, same, err
		}
		if eq {
			same++
		}
	}
	return n, same, nil
}

func sameShape(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// sameBytes compares two readers of equal length block by block.
func sameBytes(a, b io.Reader, bufA, bufB []byte) (bool, error) {
	for {
		na, errA := io.ReadFull(a, bufA)
		nb, errB := io.ReadFull(b, bufB)
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		doneA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		doneB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		if errA != nil && !doneA {
			return false, errA
		}
		if errB != nil && !doneB {
			return false, errB
		}
		if doneA || doneB {
			return doneA == doneB, nil
		}
	}
}
