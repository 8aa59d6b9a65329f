package reference

import (
	"fmt"
	"path/filepath"

	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// Adapter is a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) applied at run time
// with an extra multiplier on PEFT's own scaling (lora_alpha/r, or lora_alpha/√r with use_rslora).
type Adapter struct {
	Dir   string
	Scale float64 // 0 means 1
}

// Options tunes LoadWith.
type Options struct {
	// Adapters are added to the base weights at run time: every targeted linear computes
	// W x + b + Σ s·B(A x) instead of a merged W' x + b.
	Adapters []Adapter
}

// Load reads dir/config.json and the safetensors weights of dir (single file or sharded).
func Load(dir string) (*Model, error) { return LoadWith(dir, Options{}) }

// LoadWithAdapters is Load with LoRA adapters applied at run time.
func LoadWithAdapters(dir string, adapters []Adapter) (*Model, error) {
	return LoadWith(dir, Options{Adapters: adapters})
}

// LoadWith is Load with options.
func LoadWith(dir string, opt Options) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	defer ck.Close()
	m, err := newModel(cfg, ckptSource{ck}, dir)
	if err != nil {
		return nil, err
	}
	for _, a := range opt.Adapters {
		if err := m.attachAdapter(a); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ckptSource adapts a safetensors checkpoint to source.
type ckptSource struct{ c *safetensors.Checkpoint }

func (s ckptSource) shape(name string) ([]int64, bool) {
	t, ok := s.c.Tensor(name)
	return t.Shape, ok
}

func (s ckptSource) read(name string) ([]float32, error) { return s.c.ReadFloat32(name, nil) }

func (s ckptSource) names() []string {
	ts := s.c.Tensors()
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// fileSource adapts one safetensors file (an adapter's weights) to source.
type fileSource struct{ f *safetensors.File }

func (s fileSource) shape(name string) ([]int64, bool) {
	t, ok := s.f.Tensor(name)
	return t.Shape, ok
}

func (s fileSource) read(name string) ([]float32, error) { return s.f.ReadFloat32(name, nil) }

func (s fileSource) names() []string {
	ts := s.f.Tensors()
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func openAdapterWeights(dir string) (*safetensors.File, error) {
	f, err := safetensors.Open(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("reference: adapter: %w", err)
	}
	return f, nil
}
