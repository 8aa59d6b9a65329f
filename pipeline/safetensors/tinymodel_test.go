package safetensors

import (
	"reflect"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
)

// The tiny checkpoints are written by tinymodel's own, independent
// safetensors writer; reading them checks this package against a second
// implementation of the format (single file and sharded, F32, BF16 and
// mixed: Qwen3.5's BF16 checkpoints keep two tensor kinds in F32).
func TestReadTinyModels(t *testing.T) {
	for _, p := range tinymodel.Presets() {
		for _, dt := range []string{tinymodel.F32, tinymodel.BF16} {
			p.DType = dt
			t.Run(p.Name+"/"+dt, func(t *testing.T) {
				dir := t.TempDir()
				if err := tinymodel.Generate(dir, p); err != nil {
					t.Fatal(err)
				}
				c, err := OpenDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				names, err := p.TensorNames()
				if err != nil {
					t.Fatal(err)
				}
				infos := c.Tensors()
				if len(infos) != len(names) {
					t.Fatalf("%d tensors, want %d", len(infos), len(names))
				}
				if p.MaxShardBytes > 0 && len(c.Files()) < 2 {
					t.Errorf("sharded preset opened as %d file(s)", len(c.Files()))
				}
				var buf []float32
				for i, ti := range infos {
					wantDT, err := p.TensorDType(ti.Name)
					if err != nil {
						t.Fatal(err)
					}
					if ti.Name != names[i] || string(ti.DType) != wantDT {
						t.Fatalf("tensor %d: %s %s, want %s %s", i, ti.Name, ti.DType, names[i], wantDT)
					}
					want, shape, err := p.TensorValues(ti.Name)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(ti.Shape, shape) {
						t.Fatalf("%s shape %v, want %v", ti.Name, ti.Shape, shape)
					}
					buf, err = c.ReadFloat32(ti.Name, buf)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(buf, want) {
						t.Fatalf("%s values differ from the generator's", ti.Name)
					}
				}
			})
		}
	}
}

// Concurrent readers of one Checkpoint (pread and mmap) see the same data.
func TestConcurrentReads(t *testing.T) {
	p, _ := tinymodel.Preset("qwen3")
	dir := t.TempDir()
	if err := tinymodel.Generate(dir, p); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := OpenMmap(dir + "/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var buf []float32
			for _, ti := range c.Tensors() {
				var err error
				if g%2 == 0 {
					buf, err = c.ReadFloat32(ti.Name, buf)
				} else {
					buf, err = m.ReadFloat32(ti.Name, buf)
				}
				if err != nil {
					errs <- err
					return
				}
				want, _, _ := p.TensorValues(ti.Name)
				if !sameBits(buf, want) {
					errs <- &FormatError{Path: ti.File, Tensor: ti.Name, Msg: "concurrent read differs"}
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
