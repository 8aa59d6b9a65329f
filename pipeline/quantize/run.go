package quantize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/imatrix"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/pipeline/quantize/plan"
	"golang.org/x/sync/errgroup"
)

// chunkElems is the size of one unit of work: big enough to amortise scheduling, small enough that
// threads × chunks in flight stay a few MB.
const chunkElems = 1 << 18

// directOptions size the output's direct I/O: 2 MiB writes, 4 buffers, 2 in flight.
var directOptions = fsx.DirectOptions{Chunk: 2 << 20, Chunks: 4, Writers: 2}

// pieceElems is how many values a worker decodes before it encodes them: small enough that the float32 rows
// are still in the core's cache when the kernel reads them, large enough that a read is not mostly syscall.
const pieceElems = 1 << 14

// Options say what to quantize and how.
type Options struct {
	Source    *Source       // the input; required
	FileType  gguf.FileType // target file type, e.g. FileTypeQ4_K_M
	Out       string        // output path; required unless DryRun
	Threads   int           // worker goroutines; 0 = all cores
	Overrides plan.Overrides
	DryRun    bool // plan only
	// Imatrix is the importance matrix (llama-quantize --imatrix), or nil. Each quantized tensor's vector is
	// read when the tensor is reached (for an expert stack, every expert gets its slice) and passed to the
	// weighted kernels; the plan's imatrix rules apply when it has at least one entry. Run does not close it.
	Imatrix *imatrix.Importance
	// ImatrixName is the value of quantize.imatrix.file; default Imatrix.File (llama-quantize records the
	// --imatrix argument as given).
	ImatrixName string
	// Meta is more metadata to append after the keys llama-quantize writes (phonellm's own keys, such as the
	// rules of an automatic mix); an existing key is moved to the end with the new value.
	Meta []gguf.KV
}

// KeyImatrixSHA256 records the sha256 of the importance matrix file (phonellm's key; llama-quantize records
// only the file name).
const KeyImatrixSHA256 = "phonellm.quantize.imatrix.sha256"

// Validate checks the options without touching files.
func (o Options) Validate() error {
	if o.Source == nil {
		return errors.New("quantize: no input model")
	}
	if _, ok := plan.DefaultType(o.FileType); !ok {
		return fmt.Errorf("quantize: unsupported file type %s", o.FileType)
	}
	if o.Out == "" && !o.DryRun {
		return errors.New("quantize: no output path")
	}
	if o.Threads < 0 {
		return fmt.Errorf("quantize: threads must be >= 0, got %d", o.Threads)
	}
	return nil
}

// Result is what a quantization produced.
type Result struct {
	Input         string              `json:"input"`
	Arch          string              `json:"architecture"`
	FileType      string              `json:"file_type"`
	Plan          plan.Plan           `json:"plan"`
	BitsPerWeight float64             `json:"bits_per_weight"`
	Artifacts     []pipeline.Artifact `json:"artifacts,omitempty"`
	Seconds       float64             `json:"seconds"`
	InputMBps     float64             `json:"input_mb_per_s"`
	Threads       int                 `json:"threads"`
	DryRun        bool                `json:"dry_run,omitempty"`
	// Fit is the phone-fit verdict of the output, filled in by callers that check it (the CLI does).
	Fit any `json:"fit,omitempty"`
	// Imatrix describes the importance matrix used, when there was one.
	Imatrix *ImatrixUse `json:"imatrix,omitempty"`
	// NeedsImatrix is set on a dry run of a plan that cannot be written without an importance matrix.
	NeedsImatrix bool `json:"needs_imatrix,omitempty"`
}

// ImatrixUse is what a quantization took from its importance matrix (and recorded in quantize.imatrix.*).
type ImatrixUse struct {
	File    string `json:"file"`
	SHA256  string `json:"sha256,omitempty"`
	Dataset string `json:"dataset,omitempty"`
	Entries int    `json:"entries"`
	Chunks  int    `json:"chunks,omitempty"`
	// Used is the number of quantized tensors that had importance data; Missing lists those that had none
	// (quantized as without an importance matrix, as llama-quantize does).
	Used    int      `json:"used"`
	Missing []string `json:"missing,omitempty"`
}

// Metadata keys llama-quantize adds when it uses an importance matrix (tools/quantize/quantize.cpp).
const (
	KeyImatrixFile    = "quantize.imatrix.file"
	KeyImatrixDataset = "quantize.imatrix.dataset"
	KeyImatrixEntries = "quantize.imatrix.entries_count"
	KeyImatrixChunks  = "quantize.imatrix.chunks_count"
)

// ModelInfo reads the hyperparameters the type rules need from a Source's metadata.
func ModelInfo(src *Source) (plan.ModelInfo, error) {
	kv := make(map[string]any, len(src.KVs))
	for _, e := range src.KVs {
		if a, ok := e.Value.V.(gguf.Array); ok {
			kv[e.Key] = a.Values
		} else {
			kv[e.Key] = e.Value.V
		}
	}
	info, err := plan.ModelInfoFromMetadata(src.Arch, kv)
	if err != nil {
		return plan.ModelInfo{}, fmt.Errorf("%s: %w", src.Name, err)
	}
	return info, nil
}

// MakeSourcePlan computes the plan for a Source.
func MakeSourcePlan(src *Source, ftype gguf.FileType, ov plan.Overrides) (plan.Plan, error) {
	info, err := ModelInfo(src)
	if err != nil {
		return plan.Plan{}, err
	}
	descs := make([]plan.TensorDesc, len(src.Tensors))
	for i, t := range src.Tensors {
		descs[i] = plan.TensorDesc{Name: t.Name, Type: t.Type, Shape: t.Shape}
	}
	return plan.Make(src.Arch, info, descs, ftype, ov)
}

// checkInput validates the input model (package modelcheck) before anything is planned: a GGUF that is not a
// loadable model is refused as bad input, naming the key or tensor, rather than failing somewhere in the plan.
func checkInput(src *Source) error {
	m := modelcheck.Model{Name: src.Name, KVs: src.KVs, Tensors: make([]gguf.TensorInfo, len(src.Tensors))}
	for i, t := range src.Tensors {
		m.Tensors[i] = gguf.TensorInfo{Name: t.Name, Type: t.Type, Shape: t.Shape}
	}
	return modelcheck.Check(m, modelcheck.Options{})
}

// checkPlanned validates the file about to be written (package modelcheck): an input that is not a model the
// engines load (a GGUF with inconsistent hyper-parameters, a --tensor-type override to a type ggml cannot
// multiply) must not become a quantized file that ship then sends to phones.
func checkPlanned(src *Source, qp plan.Plan) error {
	m := modelcheck.Model{Name: src.Name, KVs: src.KVs, Tensors: make([]gguf.TensorInfo, len(qp.Entries))}
	for i, e := range qp.Entries {
		m.Tensors[i] = gguf.TensorInfo{Name: e.Name, Type: e.To, Shape: e.Shape}
	}
	return modelcheck.Check(m, modelcheck.Options{})
}

// Run quantizes the source into Out: the plan decides each tensor's type, tensors are quantized in row blocks
// on a bounded pool of workers and streamed, in plan order, through the two-phase GGUF writer into an atomic
// output file. Peak memory is a few chunks per thread, independent of the model size.
func Run(ctx context.Context, o Options, rep pipeline.Reporter) (Result, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	src := o.Source
	if err := checkInput(src); err != nil {
		return Result{}, err
	}
	im := o.Imatrix
	if im != nil && im.Len() == 0 {
		im = nil // llama-quantize passes no imatrix at all then
	}
	ov := o.Overrides
	ov.HasImatrix = im != nil
	qp, err := MakeSourcePlan(src, o.FileType, ov)
	if err != nil {
		return Result{}, err
	}
	if err := checkPlanned(src, qp); err != nil {
		return Result{}, err
	}
	if e, ok := qp.FirstNeedingImatrix(); ok && im == nil && !o.DryRun {
		return Result{}, &ImatrixRequiredError{FileType: o.FileType, Tensor: e.Name, Type: e.To}
	}
	threads := o.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	res := Result{Input: src.Name, Arch: src.Arch, FileType: o.FileType.String(), Plan: qp,
		BitsPerWeight: qp.BitsPerWeight(), Threads: threads, DryRun: o.DryRun}
	for _, e := range qp.Entries {
		if e.To == gguf.TypeTQ1_0 || e.To == gguf.TypeTQ2_0 {
			rep.Note(pipeline.Warn, fmt.Sprintf("%s (%s): llama.cpp runs ternary weights, phonellm's built-in engine (Ollama's) cannot serve them", e.Name, e.To))
			break
		}
	}
	if im == nil && qp.NeedsImatrix > 0 {
		res.NeedsImatrix = true
		rep.Note(pipeline.Warn, fmt.Sprintf("%s needs an importance matrix for %d tensors; run phonellm imatrix first", o.FileType, qp.NeedsImatrix))
	}
	if im != nil {
		if res.Imatrix, err = checkImatrix(qp, im, o.ImatrixName, rep); err != nil {
			return res, err
		}
	}
	if o.DryRun {
		return res, nil
	}
	if err := checkKernelNeeds(qp, im, o.FileType); err != nil {
		return res, err
	}
	byName := make(map[string]*SourceTensor, len(src.Tensors))
	for i := range src.Tensors {
		byName[src.Tensors[i].Name] = &src.Tensors[i]
	}

	w := gguf.NewWriter()
	for _, kv := range src.KVs {
		if kv.Key == plan.KeyQuantizationVersion || kv.Key == plan.KeyFileType || kv.Key == "general.alignment" {
			continue // re-appended at the end, as llama-quantize does (gguf_set_val = remove + append)
		}
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			return res, fmt.Errorf("%s: %w", src.Name, err)
		}
	}
	for _, kv := range qp.MetadataKVs() {
		w.SetKV(kv.Key, gguf.Uint32(kv.Value))
	}
	if u := res.Imatrix; u != nil {
		for _, k := range []string{KeyImatrixFile, KeyImatrixDataset, KeyImatrixEntries, KeyImatrixChunks} {
			w.DeleteKV(k) // gguf_set_val_* removes an existing key and appends
		}
		w.SetKV(KeyImatrixFile, gguf.String(u.File))
		if u.Dataset != "" {
			w.SetKV(KeyImatrixDataset, gguf.String(u.Dataset))
		}
		w.SetKV(KeyImatrixEntries, gguf.Uint32(uint32(u.Entries)))
		if u.Chunks > 0 {
			w.SetKV(KeyImatrixChunks, gguf.Uint32(uint32(u.Chunks)))
		}
		if u.SHA256 != "" {
			w.DeleteKV(KeyImatrixSHA256)
			w.SetKV(KeyImatrixSHA256, gguf.String(u.SHA256))
		}
	}
	for _, kv := range o.Meta {
		w.DeleteKV(kv.Key)
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			return res, fmt.Errorf("quantize: %w", err)
		}
	}
	for _, e := range qp.Entries {
		if err := w.AddTensor(e.Name, e.To, e.Shape); err != nil {
			return res, err
		}
	}

	out, err := fsx.Create(o.Out)
	if err != nil {
		return res, err
	}
	defer out.Abort()
	// The output goes to the disk with direct I/O where the file system allows it: no page cache, whose
	// copies, reclaim and final fsync cost more CPU than the Q8_0 and Q4_0 kernels (4 × 2 MiB of buffers).
	var sink io.Writer = out
	size, sum := out.Size, out.Sum
	dw := fsx.NewDirectWriter(out, directOptions)
	if dw != nil {
		defer dw.Stop() // no background write may outlive the file on an error path
		sink, size, sum = dw, dw.Size, dw.Sum
	}
	start := time.Now()
	rep.Begin("quantize "+o.FileType.String(), qp.InBytes)
	err = write(ctx, w, sink, qp, byName, threads, im, rep)
	if err == nil && dw != nil {
		err = dw.Flush()
	}
	if err == nil {
		err = out.Commit()
	}
	rep.End("quantize "+o.FileType.String(), err)
	if err != nil {
		return res, err
	}
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.InputMBps = float64(qp.InBytes) / 1e6 / res.Seconds
	}
	res.Artifacts = []pipeline.Artifact{{Path: o.Out, Kind: "gguf", Size: size(), SHA256: sum()}}
	return res, nil
}

// job is one chunk of rows of one tensor.
type job struct {
	seq     int
	entry   *plan.Entry
	src     *SourceTensor
	row0, n int64
	copyRaw bool      // copy the stored bytes unchanged (whole tensor in one job)
	imatrix []float32 // the tensor's importance values (every expert's), or nil
}

type done struct {
	seq   int
	entry *plan.Entry
	data  []byte
	last  bool // last chunk of its tensor
	in    int64
	raw   bool
}

func write(ctx context.Context, w *gguf.Writer, out io.Writer, qp plan.Plan, byName map[string]*SourceTensor,
	threads int, im *imatrix.Importance, rep pipeline.Reporter) error {
	if err := w.WriteHeader(out); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	jobs := make(chan job, threads)
	results := make(chan done, 2*threads)
	inflight := make(chan struct{}, 3*threads) // bounds memory: chunks produced but not yet written
	bufPool := sync.Pool{}

	// Producer: walk the plan and cut tensors into chunks.
	g.Go(func() error {
		defer close(jobs)
		seq := 0
		for i := range qp.Entries {
			e := &qp.Entries[i]
			st := byName[e.Name]
			if st == nil {
				return fmt.Errorf("quantize: plan names tensor %q the source does not have", e.Name)
			}
			if e.From == e.To && st.Raw != nil {
				select {
				case inflight <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
				if err := send(ctx, jobs, job{seq: seq, entry: e, src: st, copyRaw: true}); err != nil {
					return err
				}
				seq++
				continue
			}
			var vec []float32
			if im != nil && e.To.Quantized() {
				if n, ok := im.Size(e.Name); ok && int64(n) == imatrixLen(e) {
					var err error
					if vec, err = im.Vector(e.Name); err != nil {
						return fmt.Errorf("quantize: tensor %q: %w", e.Name, err)
					}
				}
			}
			rows := st.Rows()
			per := max(int64(1), chunkElems/int64(e.Shape[0]))
			for r := int64(0); r < rows; r += per {
				select {
				case inflight <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
				if err := send(ctx, jobs, job{seq: seq, entry: e, src: st, row0: r, n: min(per, rows-r), imatrix: vec}); err != nil {
					return err
				}
				seq++
			}
		}
		return nil
	})

	// Workers: decode rows, encode to the target type.
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		g.Go(func() error {
			defer wg.Done()
			var rows []float32
			for j := range jobs {
				if j.copyRaw {
					if err := send(ctx, results, done{seq: j.seq, entry: j.entry, last: true, raw: true}); err != nil {
						return err
					}
					continue
				}
				rb, err := j.entry.To.RowBytes(int64(j.entry.Shape[0]))
				if err != nil {
					return fmt.Errorf("quantize: tensor %q: %w", j.entry.Name, err)
				}
				var buf []byte
				if b, ok := bufPool.Get().(*[]byte); ok {
					buf = *b
				}
				buf = grow(buf, int(rb*j.n))
				// Decode and encode piece by piece: one pass over the rows through memory instead of two.
				per := max(1, pieceElems/int64(j.entry.Shape[0]))
				for r := int64(0); r < j.n; r += per {
					m := min(per, j.n-r)
					rows, err = j.src.ReadRows(ctx, j.row0+r, m, rows)
					if err != nil {
						return fmt.Errorf("quantize: tensor %q: %w", j.entry.Name, err)
					}
					if err := checkFinite(j.entry.Name, (j.row0+r)*int64(j.entry.Shape[0]), rows); err != nil {
						return err
					}
					piece := j
					piece.row0, piece.n = j.row0+r, m
					if err := encodeRows(buf[r*rb:(r+m)*rb], rows, piece, rb); err != nil {
						return fmt.Errorf("quantize: tensor %q: %w", j.entry.Name, err)
					}
				}
				inRows := j.entry.InBytes / max(j.src.Rows(), 1)
				d := done{seq: j.seq, entry: j.entry, data: buf, last: j.row0+j.n == j.src.Rows(), in: inRows * j.n}
				if err := send(ctx, results, d); err != nil {
					return err
				}
			}
			return nil
		})
	}
	g.Go(func() error { wg.Wait(); close(results); return nil })

	// Writer: put chunks in sequence order into the file.
	g.Go(func() error {
		pending := map[int]done{}
		next := 0
		for d := range results {
			pending[d.seq] = d
			for {
				p, ok := pending[next]
				if !ok {
					break
				}
				delete(pending, next)
				next++
				if err := emit(w, p, byName, &bufPool, rep); err != nil {
					return err
				}
				<-inflight
			}
		}
		if len(pending) > 0 && ctx.Err() == nil {
			return errors.New("quantize: internal error: chunks left unwritten")
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	return w.Finish()
}

// send sends v unless ctx is done first.
func send[T any](ctx context.Context, ch chan<- T, v T) error {
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func emit(w *gguf.Writer, d done, byName map[string]*SourceTensor, pool *sync.Pool, rep pipeline.Reporter) error {
	if d.raw {
		r, err := byName[d.entry.Name].Raw()
		if err != nil {
			return err
		}
		r = checkedRaw(r, d.entry.Name, d.entry.From)
		if err := w.WriteTensorFrom(d.entry.Name, r); err != nil {
			return err
		}
		rep.Add(d.entry.InBytes)
		return nil
	}
	if err := w.WriteTensorPart(d.entry.Name, d.data, d.last); err != nil {
		return err
	}
	rep.Add(d.in)
	b := d.data[:0]
	pool.Put(&b)
	return nil
}
