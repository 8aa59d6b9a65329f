package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
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

// TestOpenNotACheckpoint: a file, a folder without config.json and a missing folder are input errors that say
// what was found (not "open …/config.json: not a directory").
func TestOpenNotACheckpoint(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "model.gguf")
	os.WriteFile(file, []byte("GGUF"), 0o644)
	for path, want := range map[string]string{
		file:                          "is a file, not a Hugging Face checkpoint folder",
		dir:                           "has no config.json",
		filepath.Join(dir, "missing"): "no such checkpoint folder",
	} {
		_, err := Open(path)
		if err == nil || !strings.Contains(err.Error(), want) || !pipeline.IsInputError(err) {
			t.Errorf("Open(%s): %v, want an input error saying %q", path, err, want)
		}
	}
}
