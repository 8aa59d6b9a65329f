package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/phonellm/phonellm/internal/fsx"
)

// Names of the files a Hugging Face model directory keeps its weights in.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
)

// maxIndexSize caps model.safetensors.index.json (the largest public ones,
// with tens of thousands of tensors, are a few MB).
const maxIndexSize = 64 << 20

// maxShards caps the distinct shard files an index may name (each stays
// open; the largest public checkpoints have a few hundred).
const maxShards = 4096

// Checkpoint is the set of safetensors files of one model directory.
type Checkpoint struct {
	dir    string
	files  []*File
	infos  []TensorInfo // sorted by name
	byName map[string]int
	fileOf []*File // parallel to infos
}

// OpenDir opens a Hugging Face model directory: model.safetensors.index.json
// (sharded; every shard it names is opened and checked against weight_map) or
// else model.safetensors.
func OpenDir(dir string) (*Checkpoint, error) {
	idx := filepath.Join(dir, IndexFileName)
	if _, err := os.Stat(idx); err == nil {
		shards, err := readIndex(idx)
		if err != nil {
			return nil, err
		}
		return openShards(dir, idx, shards)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	single := filepath.Join(dir, SingleFileName)
	if _, err := os.Stat(single); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("safetensors: %s: no %s or %s", dir, SingleFileName, IndexFileName)
		}
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return OpenFiles(single)
}

// OpenFiles opens the given safetensors files as one checkpoint (for
// example an adapter_model.safetensors). A tensor name may appear only once.
func OpenFiles(paths ...string) (*Checkpoint, error) {
	c := &Checkpoint{byName: map[string]int{}}
	if len(paths) > 0 {
		c.dir = filepath.Dir(paths[0])
	}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.files = append(c.files, f)
	}
	if err := c.build(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

type indexFile struct {
	WeightMap map[string]string `json:"weight_map"`
}

// readIndex parses an index file and returns weight_map.
func readIndex(path string) (map[string]string, error) {
	f, err := fsx.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxIndexSize+1))
	if err != nil {
		return nil, fmt.Errorf("safetensors: read %s: %w", path, err)
	}
	if len(data) > maxIndexSize {
		return nil, formatErr(path, "", "index is larger than %d bytes", maxIndexSize)
	}
	var idx indexFile
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&idx); err != nil {
		return nil, formatErr(path, "", "index JSON: %v", err)
	}
	if idx.WeightMap == nil {
		return nil, formatErr(path, "", "index has no weight_map object")
	}
	for name, file := range idx.WeightMap {
		if !filepath.IsLocal(file) || filepath.Ext(file) != ".safetensors" {
			return nil, formatErr(path, name, "weight_map names shard %q, want a .safetensors file inside the model directory", file)
		}
	}
	return idx.WeightMap, nil
}

func openShards(dir, idxPath string, weightMap map[string]string) (*Checkpoint, error) {
	var names []string
	seen := map[string]bool{}
	for _, file := range weightMap {
		if !seen[file] {
			seen[file] = true
			names = append(names, file)
		}
	}
	sort.Strings(names)
	if len(names) > maxShards {
		return nil, formatErr(idxPath, "", "weight_map names %d shard files, more than the limit of %d", len(names), maxShards)
	}
	c := &Checkpoint{dir: dir, byName: map[string]int{}}
	for _, n := range names {
		f, err := Open(filepath.Join(dir, n))
		if errors.Is(err, fs.ErrNotExist) {
			err = formatErr(idxPath, "", "weight_map names shard %s, which does not exist", n)
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		c.files = append(c.files, f)
	}
	if err := c.build(); err != nil {
		c.Close()
		return nil, err
	}
	for name, file := range weightMap {
		i, ok := c.byName[name]
		want := filepath.Join(dir, file)
		switch {
		case !ok:
			c.Close()
			return nil, formatErr(idxPath, name, "weight_map puts it in %s, which has no such tensor", file)
		case c.infos[i].File != want:
			c.Close()
			return nil, formatErr(idxPath, name, "weight_map puts it in %s but it is in %s", file, c.infos[i].File)
		}
	}
	return c, nil
}

func (c *Checkpoint) build() error {
	for _, f := range c.files {
		for _, t := range f.infos {
			if _, dup := c.byName[t.Name]; dup {
				return formatErr(t.File, t.Name, "tensor also appears in %s", c.infos[c.byName[t.Name]].File)
			}
			c.byName[t.Name] = len(c.infos)
			c.infos = append(c.infos, t)
			c.fileOf = append(c.fileOf, f)
		}
	}
	perm := make([]int, len(c.infos))
	for i := range perm {
		perm[i] = i
	}
	sort.Slice(perm, func(a, b int) bool { return c.infos[perm[a]].Name < c.infos[perm[b]].Name })
	infos := make([]TensorInfo, len(perm))
	fileOf := make([]*File, len(perm))
	for i, p := range perm {
		infos[i], fileOf[i] = c.infos[p], c.fileOf[p]
		c.byName[infos[i].Name] = i
	}
	c.infos, c.fileOf = infos, fileOf
	return nil
}

// Dir returns the directory the checkpoint was opened from.
func (c *Checkpoint) Dir() string { return c.dir }

// Files returns the opened safetensors files (shards in name order).
func (c *Checkpoint) Files() []*File { return append([]*File(nil), c.files...) }

// Tensors returns every tensor, sorted by name.
func (c *Checkpoint) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(c.infos))
	for i, t := range c.infos {
		out[i] = t.clone()
	}
	return out
}

// Tensor looks a tensor up by name.
func (c *Checkpoint) Tensor(name string) (TensorInfo, bool) {
	i, ok := c.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return c.infos[i].clone(), true
}

// TotalSize returns the sum of all tensor byte sizes.
func (c *Checkpoint) TotalSize() int64 {
	var n int64
	for _, t := range c.infos {
		n += t.Size
	}
	return n
}

func (c *Checkpoint) lookup(name string) (TensorInfo, *File, error) {
	i, ok := c.byName[name]
	if !ok {
		return TensorInfo{}, nil, fmt.Errorf("safetensors: %s: no tensor %q", c.dir, name)
	}
	return c.infos[i], c.fileOf[i], nil
}

// Raw returns the raw little-endian bytes of a tensor.
func (c *Checkpoint) Raw(name string) (*io.SectionReader, error) {
	t, f, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(f.r, t.Offset, t.Size), nil
}

// ReadFloat32 reads a whole F32, F16 or BF16 tensor as float32, reusing dst
// when it is large enough.
func (c *Checkpoint) ReadFloat32(name string, dst []float32) ([]float32, error) {
	t, f, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	return readFloat32(f.r, t, 0, t.NumElements(), dst)
}

// Close closes every file.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ReadElements reads n elements of a tensor starting at element off (in row-major order) as float32, reusing
// dst when it is large enough.
func (c *Checkpoint) ReadElements(name string, off, n int64, dst []float32) ([]float32, error) {
	t, f, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	return readElements(f.r, t, off, n, dst)
}
