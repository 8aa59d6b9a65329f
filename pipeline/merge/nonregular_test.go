package merge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/internal/tinymodel"
)

// TestNonRegularInputsRefused: a FIFO named like one of merge's inputs blocked it forever (issue 14); merge
// now refuses FIFOs and folders in place of the base's and the adapter's files, without blocking.
func TestNonRegularInputsRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs")
	}
	spec := preset(t, "qwen3")
	for _, c := range []struct {
		name    string
		adapter bool // the file is the adapter's (else the base's)
		file    string
		fifo    bool
	}{
		{"base weights FIFO", false, "model.safetensors", true},
		{"base config folder", false, "config.json", false},
		{"adapter weights FIFO", true, AdapterWeightsName, true},
		{"adapter config FIFO", true, "adapter_config.json", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			base := genBase(t, filepath.Join(dir, "base"), spec)
			ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 1, TargetModules: []string{"q_proj"}})
			p := filepath.Join(base, c.file)
			if c.adapter {
				p = filepath.Join(ad, c.file)
			}
			os.Remove(p)
			var err error
			if c.fifo {
				err = syscall.Mkfifo(p, 0o644)
			} else {
				err = os.Mkdir(p, 0o755)
			}
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := Run(context.Background(), Options{Base: base, Adapters: []AdapterRef{{Path: ad}}, Out: filepath.Join(dir, "out")}, nil)
				done <- err
			}()
			select {
			case err := <-done:
				var nr *fsx.NotRegularError
				var fe *FormatError
				if !errors.As(err, &nr) && !(errors.As(err, &fe) && strings.Contains(err.Error(), "not a regular file")) {
					t.Fatalf("err %v, want a refusal of the non-regular file", err)
				}
			case <-time.After(60 * time.Second): // hang guard
				t.Fatal("merge blocked")
			}
		})
	}
}
