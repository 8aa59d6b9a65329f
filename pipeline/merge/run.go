package merge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/hashcache"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// ProvenanceName is the provenance record a merged checkpoint carries.
const ProvenanceName = "phonellm-merge.json"

// DefaultMaxShardBytes is transformers' save_pretrained default shard size (5 GB).
const DefaultMaxShardBytes = 5_000_000_000

// Options say what to merge where.
type Options struct {
	Base          string       // Hugging Face checkpoint folder (16-bit safetensors); required
	Adapters      []AdapterRef // PEFT adapter folders, applied in order; at least one
	Out           string       // output folder; required. Replaced only if it is empty or an earlier merge
	MaxShardBytes int64        // tensor bytes per shard; 0 = DefaultMaxShardBytes
	Threads       int          // worker goroutines; 0 = all cores
	// HashCache is a folder remembering the sha256 of base files by their file-system identity (package
	// hashcache), so a base merged before is not read again for the provenance hashes; "" = hash every time.
	HashCache string

	hashCache *hashcache.Cache // overrides HashCache (tests use a cache with no racy margin)
}

// Validate checks the options without touching files.
func (o Options) Validate() error {
	switch {
	case o.Base == "":
		return errors.New("merge: no base checkpoint")
	case len(o.Adapters) == 0:
		return errors.New("merge: no adapter (--lora)")
	case o.Out == "":
		return errors.New("merge: no output folder")
	case o.MaxShardBytes < 0:
		return fmt.Errorf("merge: max shard size must be >= 0, got %d", o.MaxShardBytes)
	case o.Threads < 0:
		return fmt.Errorf("merge: threads must be >= 0, got %d", o.Threads)
	}
	for i, a := range o.Adapters {
		if a.Path == "" {
			return fmt.Errorf("merge: adapter %d has no path", i+1)
		}
		if !finite(a.Weight) {
			return fmt.Errorf("merge: adapter %s: weight %v is not a finite number", a.Path, a.Weight)
		}
	}
	if same(o.Out, o.Base) {
		return fmt.Errorf("merge: output folder %s is the base checkpoint", o.Out)
	}
	return nil
}

func same(a, b string) bool {
	x, err1 := filepath.Abs(a)
	y, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && x == y
}

// Result is what a merge produced.
type Result struct {
	Out       string              `json:"out"`
	Base      string              `json:"base"`
	Adapters  []AdapterRef        `json:"adapters"`
	Untied    bool                `json:"untied"`
	Report    *Report             `json:"report"`
	Artifacts []pipeline.Artifact `json:"artifacts"`
	Bytes     int64               `json:"tensor_bytes"`
	Seconds   float64             `json:"seconds"`
}

// Run merges the adapters into the base and writes a Hugging Face checkpoint folder at Out: sharded safetensors
// (with index) in the base's dtypes, config.json (tie_word_embeddings=false when untied), tokenizer files,
// generation config, chat template and ProvenanceName. Everything is written into a temporary folder next to
// Out and renamed into place at the end; on error nothing is left behind. Unchanged tensors are copied byte
// for byte; changed ones are computed in row blocks on a bounded pool of workers.
func Run(ctx context.Context, o Options, rep pipeline.Reporter) (Result, error) {
	if rep == nil {
		rep = pipeline.Discard
	}
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	res := Result{Out: o.Out, Base: o.Base, Adapters: o.Adapters}
	if err := checkBasePath(o.Base); err != nil {
		return res, err
	}
	replace, err := checkOut(o.Out)
	if err != nil {
		return res, err
	}
	ck, err := checkpoint.Open(o.Base)
	if err != nil {
		return res, fmt.Errorf("merge: %w", err)
	}
	defer ck.Close()
	if err := checkNotQuantized(o.Base, ck.Config); err != nil {
		return res, err
	}
	raw, err := safetensors.OpenDir(o.Base)
	if err != nil {
		return res, fmt.Errorf("merge: %w", err)
	}
	defer raw.Close()
	var ads []Adapter
	defer func() {
		for _, a := range ads {
			a.Close()
		}
	}()
	for _, r := range o.Adapters {
		a, err := OpenAdapter(r.Path, r.Weight)
		if err != nil {
			return res, err
		}
		ads = append(ads, a)
	}
	rep.Begin("check adapters", -1)
	src, report, err := Wrap(ctx, ck, ck.Config, ads)
	rep.End("check adapters", err)
	if err != nil {
		return res, err
	}
	src.raw = raw // read and decode the base's bytes directly (same values as ck.ReadRows, one copy less)
	report.Notes = append(report.Notes, baseNotes(o.Base, ck.Config, ads)...)
	res.Report, res.Untied = report, report.Untied
	for _, n := range report.Notes {
		rep.Note(pipeline.Info, n)
	}

	src.maps = mapBase(raw) // nil where mapping is impossible: then pread
	hctx, hcancel := context.WithCancel(ctx)
	cache := o.hashCache
	if cache == nil {
		cache = hashcache.Open(o.HashCache)
	}
	hashes := startHashes(hctx, o.Base, ads, src.maps, cache)
	defer func() { // the hasher reads the maps: stop it before they go
		hcancel()
		hashes.wait()
		src.maps.close()
	}()
	defer src.maps.finish() // (runs first) whatever happens, the hasher must not wait for the merge

	parent, name := filepath.Split(filepath.Clean(o.Out))
	if parent == "" {
		parent = "."
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return res, fmt.Errorf("merge: %w", err)
	}
	// The folder is built next to the output (.<name>.tmp-<pid>-*; temporaries of killed runs are removed
	// first) and swapped in whole at the end.
	tmp, release, err := fsx.MkdirTemp(filepath.Join(parent, name))
	if err != nil {
		return res, fmt.Errorf("merge: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			os.RemoveAll(tmp)
		}
		release()
	}()

	threads := o.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	maxShard := o.MaxShardBytes
	if maxShard == 0 {
		maxShard = DefaultMaxShardBytes
	}
	files, bytes, err := writeShards(ctx, src, raw, tmp, maxShard, threads, rep)
	src.maps.finish()
	if err != nil {
		hcancel()
		hashes.wait()
		return res, err
	}
	res.Bytes = bytes
	aux, err := writeAux(o.Base, tmp, ck.Config, report, ads, rep)
	if err != nil {
		hcancel()
		hashes.wait()
		return res, err
	}
	files = append(files, aux...)
	in, err := hashes.wait()
	if err != nil {
		return res, err
	}
	prov, err := writeProvenance(tmp, o, ads, in, report, files)
	if err != nil {
		return res, err
	}
	files = append(files, prov)
	if err := fsx.SyncDir(tmp); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if err := install(tmp, o.Out, replace); err != nil {
		return res, err
	}
	committed = true
	for _, f := range files {
		f.Path = filepath.Join(o.Out, filepath.Base(f.Path))
		res.Artifacts = append(res.Artifacts, f)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// baseNotes compares each adapter's base_model_name_or_path with the base being merged into: a different name,
// or a training base that was quantized (QLoRA), is worth telling people about, though not an error (training
// configs often hold a local path, and merging a QLoRA adapter into the 16-bit base is the right thing).
func baseNotes(base string, cfg map[string]any, ads []Adapter) []string {
	var notes []string
	abs := strings.ToLower(filepath.ToSlash(abs(base)))
	nameOrPath, _ := cfg["_name_or_path"].(string)
	for _, a := range ads {
		bm := a.Config.BaseModel
		if bm == "" {
			continue
		}
		short := strings.ToLower(filepath.Base(filepath.ToSlash(bm)))
		for changed := true; changed; {
			changed = false
			for _, q := range []string{"-bnb-4bit", "-bnb-8bit", "-4bit", "-8bit", "-awq", "-gptq", "-unsloth"} {
				if t := strings.TrimSuffix(short, q); t != short {
					short, changed = t, true
				}
			}
		}
		lowerBM := strings.ToLower(bm)
		if strings.Contains(lowerBM, "bnb") || strings.Contains(lowerBM, "4bit") || strings.Contains(lowerBM, "gptq") || strings.Contains(lowerBM, "awq") {
			notes = append(notes, fmt.Sprintf("%s was trained on a quantized base (%s); it is merged into the 16-bit weights of %s, as it should be, so the merged model can differ slightly from the QLoRA training-time model", a.Dir, bm, base))
		}
		if short != "" && !strings.Contains(abs, short) && !strings.Contains(strings.ReplaceAll(abs, "--", "/"), short) &&
			!strings.Contains(strings.ToLower(nameOrPath), short) {
			notes = append(notes, fmt.Sprintf("%s was trained on %q, and the base here is %s: check that it is the same model", a.Dir, bm, base))
		}
	}
	return notes
}

// checkBasePath refuses a GGUF (already converted, usually quantized) in place of an HF folder.
func checkBasePath(base string) error {
	fi, err := os.Stat(base)
	if err != nil {
		return fmt.Errorf("merge: base: %w", err)
	}
	if fi.IsDir() {
		if _, err := os.Stat(filepath.Join(base, "config.json")); err != nil {
			if ggufs, _ := filepath.Glob(filepath.Join(base, "*.gguf")); len(ggufs) > 0 {
				return unsupported(base, "the folder holds GGUF files (%s) but no Hugging Face checkpoint: merging into converted (usually quantized) weights bakes their rounding into the result; merge into the 16-bit Hugging Face checkpoint the adapter was trained from", filepath.Base(ggufs[0]))
			}
		}
		return nil
	}
	f, err := fsx.Open(base)
	if err == nil {
		var magic [4]byte
		_, rerr := io.ReadFull(f, magic[:])
		f.Close()
		if rerr == nil && string(magic[:]) == "GGUF" || strings.HasSuffix(strings.ToLower(base), ".gguf") {
			return unsupported(base, "the base is a GGUF file. Merging into converted (and usually quantized) weights bakes their rounding into the result; merge into the 16-bit Hugging Face checkpoint the adapter was trained from, then convert/quantize (or use `phonellm quantize --lora`)")
		}
	}
	return formatErr(base, "the base must be a Hugging Face checkpoint folder (config.json + safetensors)")
}

// checkOut decides whether Out may be written: absent, an empty folder, or an earlier merge output (replaced).
func checkOut(out string) (replace bool, err error) {
	fi, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("merge: output: %w", err)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("merge: output %s exists and is not a folder", out)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return false, fmt.Errorf("merge: output: %w", err)
	}
	if len(ents) == 0 {
		return true, nil
	}
	if _, err := os.Stat(filepath.Join(out, ProvenanceName)); err == nil {
		return true, nil
	}
	return false, fmt.Errorf("merge: output folder %s exists and is not an earlier phonellm merge (no %s); choose another folder or remove it", out, ProvenanceName)
}

// install puts the finished temporary folder at out. An earlier output is replaced without a moment in which
// nothing is at out (fsx.ReplaceDir: an atomic exchange where the system has one).
func install(tmp, out string, replace bool) error {
	if !replace {
		if _, err := os.Lstat(out); err == nil {
			return fmt.Errorf("merge: install %s: it appeared while merging", out)
		}
	}
	if err := fsx.ReplaceDir(tmp, out); err != nil {
		return fmt.Errorf("merge: install %s: %w", out, err)
	}
	return nil
}
