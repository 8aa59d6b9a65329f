package merge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/hashcache"
	"github.com/phonellm/phonellm/pipeline"
)

// tokenizerFiles are the files that describe tokenization and chat formatting. A training run that saved them
// next to its adapter (Unsloth and TRL do) used those, so they take precedence over the base's.
var tokenizerFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
	"vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
}

// skipAux reports whether a base file is not copied as is: weights (rewritten or foreign formats), config.json
// (rewritten), the base's own card and provenance.
func skipAux(name string) bool {
	lower := strings.ToLower(name)
	if strings.HasPrefix(name, ".") || name == "config.json" || name == ProvenanceName || lower == "readme.md" {
		return true
	}
	for _, ext := range []string{".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt", ".onnx"} {
		if strings.HasSuffix(lower, ext) {
			return true
		}
	}
	return name == "model.safetensors.index.json" || name == "pytorch_model.bin.index.json"
}

// writeAux writes config.json and copies the base's other small files (tokenizer, generation config, chat
// template, processor configs), with the adapters' tokenizer files taking precedence.
func writeAux(base, dir string, cfg map[string]any, report *Report, ads []Adapter, rep pipeline.Reporter) ([]pipeline.Artifact, error) {
	var files []pipeline.Artifact
	cfgPath := filepath.Join(dir, "config.json")
	if report.Untied {
		data, err := json.MarshalIndent(UntiedConfig(cfg), "", "  ")
		if err != nil {
			return nil, fmt.Errorf("merge: config.json: %w", err)
		}
		sum, err := fsx.WriteFile(cfgPath, append(data, '\n'))
		if err != nil {
			return nil, err
		}
		files = append(files, pipeline.Artifact{Path: cfgPath, Kind: "config", Size: int64(len(data) + 1), SHA256: sum})
	} else {
		a, err := copyFile(filepath.Join(base, "config.json"), cfgPath, "config")
		if err != nil {
			return nil, err
		}
		files = append(files, a)
	}
	from := map[string]string{}
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() && !skipAux(e.Name()) {
			from[e.Name()] = filepath.Join(base, e.Name())
		}
	}
	for _, a := range ads {
		for _, n := range tokenizerFiles {
			p := filepath.Join(a.Dir, n)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				if _, had := from[n]; had {
					rep.Note(pipeline.Info, fmt.Sprintf("%s: using the training run's %s from the adapter folder", a.Dir, n))
				}
				from[n] = p
			}
		}
	}
	names := make([]string, 0, len(from))
	for n := range from {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		a, err := copyFile(from[n], filepath.Join(dir, n), "config")
		if err != nil {
			return nil, err
		}
		files = append(files, a)
	}
	return files, nil
}

func copyFile(src, dst, kind string) (pipeline.Artifact, error) {
	in, err := fsx.Open(src)
	if err != nil {
		return pipeline.Artifact{}, fmt.Errorf("merge: %w", err)
	}
	defer in.Close()
	out, err := fsx.Create(dst)
	if err != nil {
		return pipeline.Artifact{}, err
	}
	defer out.Abort()
	// fsx.File embeds *os.File, whose ReadFrom would bypass the hashing Write: hide it.
	if _, err := io.Copy(struct{ io.Writer }{out}, in); err != nil {
		return pipeline.Artifact{}, fmt.Errorf("merge: copy %s: %w", src, err)
	}
	a := pipeline.Artifact{Path: dst, Kind: kind, Size: out.Size(), SHA256: out.Sum()}
	return a, out.Commit()
}

// FileHash is one input file in the provenance record.
type FileHash struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// inputHashes hashes the base and adapter files in the background while the merge runs.
type inputHashes struct {
	wg       sync.WaitGroup
	base     []FileHash
	adapters [][]FileHash
	err      error
	mu       sync.Mutex
}

func startHashes(ctx context.Context, base string, ads []Adapter, maps *baseMaps, cache *hashcache.Cache) *inputHashes {
	h := &inputHashes{adapters: make([][]FileHash, len(ads))}
	// Base files whose hash the cache holds are not read; the hasher claims the others' mapped pages.
	known := map[string]FileHash{}
	if ents, err := os.ReadDir(base); err == nil { // the files hashDir will hash (errors: see hashDir)
		for _, e := range ents {
			if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			path := filepath.Join(base, e.Name())
			if n, sum, ok := cache.Get(path); ok {
				known[path] = FileHash{Name: e.Name(), Size: n, SHA256: sum}
				continue
			}
			if bm := maps.file(path); bm != nil {
				bm.claim()
			}
		}
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		fail := func(err error) {
			h.mu.Lock()
			if h.err == nil {
				h.err = err
			}
			h.mu.Unlock()
		}
		hashDir := func(dir string, keep func(string) bool) []FileHash {
			ents, err := os.ReadDir(dir)
			if err != nil {
				fail(fmt.Errorf("merge: %w", err))
				return nil
			}
			var out []FileHash
			for _, e := range ents {
				if ctx.Err() != nil {
					fail(ctx.Err())
					return nil
				}
				if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || !keep(e.Name()) {
					continue
				}
				path := filepath.Join(dir, e.Name())
				if k, ok := known[path]; ok {
					out = append(out, k)
					continue
				}
				id, cacheable, _ := hashcache.Stat(path)
				started := time.Now()
				n, sum, err := hashInput(ctx, path, maps)
				if err != nil {
					fail(fmt.Errorf("merge: %w", err))
					return nil
				}
				if cacheable && dir == base {
					cache.Put(path, id, started, sum) // a failed write only costs hashing again next time
				}
				out = append(out, FileHash{Name: e.Name(), Size: n, SHA256: sum})
			}
			return out
		}
		for i, a := range ads {
			h.adapters[i] = hashDir(a.Dir, func(n string) bool { return n == AdapterConfigName || n == AdapterWeightsName })
		}
		h.base = hashDir(base, func(string) bool { return true })
	}()
	return h
}

// hashInput returns a file's size and sha256. A file of the Hugging Face cache (a symlink into blobs/) whose
// blob is named by 64 hex digits is an LFS object named by its sha256, verified by the hub client when it was
// downloaded; its name is used instead of re-reading gigabytes. A file the merge has mapped (baseMaps) is
// hashed from the map, so the merge reads the same pages.
func hashInput(ctx context.Context, path string, maps *baseMaps) (int64, string, error) {
	if target, err := filepath.EvalSymlinks(path); err == nil && target != path {
		name := filepath.Base(target)
		if filepath.Base(filepath.Dir(target)) == "blobs" && fsx.IsSHA256Hex(name) {
			if fi, err := os.Stat(target); err == nil {
				return fi.Size(), name, nil
			}
		}
	}
	if bm := maps.file(path); bm != nil {
		return bm.hash(ctx)
	}
	n, sum, err := fsx.HashFileContext(ctx, path)
	if err != nil {
		return 0, "", fmt.Errorf("merge: %w", err)
	}
	return n, sum, nil
}

func (h *inputHashes) wait() (*inputHashes, error) {
	h.wg.Wait()
	return h, h.err
}

// provenance is the content of ProvenanceName.
type provenance struct {
	Tool     string              `json:"tool"`
	Formula  string              `json:"formula"`
	Base     provBase            `json:"base"`
	Adapters []provAdapter       `json:"adapters"`
	Untied   bool                `json:"untied"`
	Tensors  []TensorReport      `json:"tensors"`
	Notes    []string            `json:"notes,omitempty"`
	Outputs  []pipeline.Artifact `json:"outputs"`
}

type provBase struct {
	Path  string     `json:"path"`
	Files []FileHash `json:"files"`
}

type provAdapter struct {
	Path        string     `json:"path"`
	Weight      float64    `json:"weight"`
	BaseModel   string     `json:"base_model_name_or_path,omitempty"`
	R           int        `json:"r"`
	Alpha       float64    `json:"lora_alpha"`
	RSLoRA      bool       `json:"use_rslora"`
	DoRA        bool       `json:"use_dora"`
	FanInFanOut bool       `json:"fan_in_fan_out"`
	Files       []FileHash `json:"files"`
}

const formulaDoc = "W' = W + weight·(alpha/r)·(B·A) (alpha/√r with use_rslora; (B·A)ᵀ for embeddings and fan_in_fan_out; DoRA: W' = m·V/‖V‖, V = W + ΔW); adapters applied in order; BF16/F16 tensors changed by LoRA only are accumulated in float32, everything else in float64; rounded once to the base dtype (round to nearest even)"

func writeProvenance(dir string, o Options, ads []Adapter, in *inputHashes, report *Report, outputs []pipeline.Artifact) (pipeline.Artifact, error) {
	p := provenance{Tool: "phonellm merge", Formula: formulaDoc, Untied: report.Untied, Tensors: report.Tensors, Notes: report.Notes}
	p.Base = provBase{Path: abs(o.Base), Files: in.base}
	for i, a := range ads {
		c := a.Config
		p.Adapters = append(p.Adapters, provAdapter{Path: abs(a.Dir), Weight: a.Weight, BaseModel: c.BaseModel, R: c.R, Alpha: c.Alpha,
			RSLoRA: c.RSLoRA, DoRA: c.DoRA, FanInFanOut: c.FanInFanOut, Files: in.adapters[i]})
	}
	for _, f := range outputs {
		f.Path = filepath.Base(f.Path)
		p.Outputs = append(p.Outputs, f)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return pipeline.Artifact{}, fmt.Errorf("merge: provenance: %w", err)
	}
	path := filepath.Join(dir, ProvenanceName)
	sum, err := fsx.WriteFile(path, buf.Bytes())
	if err != nil {
		return pipeline.Artifact{}, err
	}
	return pipeline.Artifact{Path: path, Kind: "provenance", Size: int64(buf.Len()), SHA256: sum}, nil
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
