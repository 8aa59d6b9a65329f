package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// Checkpoint is an opened Hugging Face model directory.
type Checkpoint struct {
	Dir    string
	Config map[string]any // config.json as parsed
	st     *safetensors.Checkpoint
	infos  []pipeline.TensorInfo
}

var _ pipeline.TensorSource = (*Checkpoint)(nil)

// maxConfigBytes caps config.json (real ones are a few KB).
const maxConfigBytes = 16 << 20

// Open opens dir: config.json must parse, and the safetensors headers are read and checked (no tensor data).
// A path that is not a checkpoint folder (a file, a folder without config.json, a config.json that is not a
// JSON object) is an input error naming what was found instead.
func Open(dir string) (*Checkpoint, error) {
	st0, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, pipeline.InputError(fmt.Errorf("%s: no such checkpoint folder", dir))
	case err != nil:
		return nil, err
	case !st0.IsDir():
		return nil, pipeline.InputError(fmt.Errorf("%s is a file, not a Hugging Face checkpoint folder (config.json + safetensors)", dir))
	}
	cfgPath := filepath.Join(dir, "config.json")
	raw, err := fsx.ReadFile(cfgPath, maxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, pipeline.InputError(fmt.Errorf("%s has no config.json: not a Hugging Face checkpoint folder", dir))
	}
	if err != nil {
		return nil, pipeline.InputError(fmt.Errorf("%s is not a Hugging Face checkpoint: %w", dir, err))
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, pipeline.InputError(fmt.Errorf("%s: invalid JSON: %w", cfgPath, err))
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, Config: cfg, st: st}
	for _, t := range st.Tensors() {
		c.infos = append(c.infos, pipeline.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape})
	}
	return c, nil
}

// Architecture is architectures[0] of config.json, or "".
func (c *Checkpoint) Architecture() string {
	if archs, ok := c.Config["architectures"].([]any); ok && len(archs) > 0 {
		s, _ := archs[0].(string)
		return s
	}
	return ""
}

// Tensors lists the tensors sorted by name.
func (c *Checkpoint) Tensors() []pipeline.TensorInfo { return c.infos }

// Bytes is the size of a tensor's stored data.
func (c *Checkpoint) Bytes(name string) int64 {
	t, _ := c.st.Tensor(name)
	return t.Size
}

// File is the safetensors file (shard) a tensor is stored in, or "".
func (c *Checkpoint) File(name string) string {
	t, _ := c.st.Tensor(name)
	return t.File
}

// TotalBytes is the size of all tensor data.
func (c *Checkpoint) TotalBytes() int64 { return c.st.TotalSize() }

// ReadRows decodes rows [row0, row0+n) of a tensor to float32, a row being the last dimension (see
// pipeline.TensorInfo: a [E, out, in] expert tensor has E·out rows of in values).
func (c *Checkpoint) ReadRows(ctx context.Context, name string, row0, n int64, dst []float32) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, ok := c.st.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", c.Dir, name)
	}
	info := pipeline.TensorInfo{Name: t.Name, Shape: t.Shape}
	rowLen, rows := info.RowLen(), info.Rows()
	if row0 < 0 || n < 0 || row0 > rows || n > rows-row0 {
		return nil, fmt.Errorf("%s: tensor %q: rows [%d, %d) outside its %d rows", c.Dir, name, row0, row0+n, rows)
	}
	return c.st.ReadElements(name, row0*rowLen, n*rowLen, dst)
}

// Close releases the files.
func (c *Checkpoint) Close() error { return c.st.Close() }
