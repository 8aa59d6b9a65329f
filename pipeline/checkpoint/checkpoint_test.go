package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// TestReadRowsLastDim checks the TensorSource row convention on a 3-D tensor: rows are the last dimension.
func TestReadRowsLastDim(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["Qwen3ForCausalLM"]}`), 0o644)
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"),
		[]safetensors.WriteInfo{{Name: "experts", DType: safetensors.F32, Shape: []int64{2, 3, 4}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, 24)
	for i := range vals {
		vals[i] = float32(i)
	}
	if err := w.WriteFloat32("experts", vals); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if got := ck.Tensors()[0].Rows(); got != 6 {
		t.Fatalf("rows = %d, want 6", got)
	}
	rows, err := ck.ReadRows(context.Background(), "experts", 4, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range rows {
		if v != float32(16+i) {
			t.Fatalf("row values %v, want 16..23", rows)
		}
	}
	if _, err := ck.ReadRows(context.Background(), "experts", 5, 2, nil); err == nil {
		t.Fatal("read past the last row succeeded")
	}
	if ck.Architecture() != "Qwen3ForCausalLM" {
		t.Fatalf("architecture %q", ck.Architecture())
	}
}
