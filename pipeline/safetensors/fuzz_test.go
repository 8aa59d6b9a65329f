package safetensors

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/golden"
)

// TestSeedFiles writes (with -update) or checks the committed seed corpus.
func TestSeedFiles(t *testing.T) {
	if golden.Update() {
		writeSeed(t, "sample.safetensors", func(p string) { writeSample(t, p, false) })
		writeSeed(t, "empty.safetensors", func(p string) {
			w, err := Create(p, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(); err != nil {
				t.Fatal(err)
			}
		})
		writeSeed(t, "f8.safetensors", func(p string) {
			os.WriteFile(p, rawFile(`{"__metadata__":{"format":"pt"},"e":{"dtype":"F8_E4M3","shape":[2,4],"data_offsets":[0,8]},"w":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]}}`, make([]byte, 16)), 0o644)
		})
	}
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.safetensors"))
	if len(seeds) < 3 {
		t.Fatalf("%d seed files in testdata (run go test -run TestSeedFiles -update)", len(seeds))
	}
	for _, s := range seeds {
		f, err := Open(s)
		if err != nil {
			t.Errorf("seed %s: %v", s, err)
			continue
		}
		f.Close()
	}
}

func writeSeed(t *testing.T, name string, write func(path string)) {
	t.Helper()
	p := filepath.Join("testdata", name)
	os.Remove(p)
	write(p)
}

func FuzzHeader(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.safetensors"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)))
	f.Add(rawFile(`{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"__metadata__":null}`, make([]byte, 8)))
	f.Fuzz(func(t *testing.T, data []byte) {
		sf, err := NewFile(bytes.NewReader(data), int64(len(data)), "fuzz.safetensors")
		if err != nil {
			var fe *FormatError
			var ue *UnsupportedError
			if !errors.As(err, &fe) && !errors.As(err, &ue) {
				t.Fatalf("error %v is %T, want *FormatError or *UnsupportedError", err, err)
			}
			return
		}
		infos := sf.Tensors()
		var end int64 = int64(len(data))
		var plan []WriteInfo
		for i, ti := range infos {
			if ti.Offset < 8 || ti.Size < 0 || ti.Offset+ti.Size > end {
				t.Fatalf("tensor %q [%d, +%d) outside the %d-byte file", ti.Name, ti.Offset, ti.Size, end)
			}
			if i > 0 && ti.Offset != infos[i-1].Offset+infos[i-1].Size {
				t.Fatalf("tensor %q not contiguous with %q", ti.Name, infos[i-1].Name)
			}
			if want, err := byteSize(ti.DType, ti.Shape); err != nil || want != ti.Size {
				t.Fatalf("tensor %q: size %d, shape says %d (%v)", ti.Name, ti.Size, want, err)
			}
			if ti.DType.Float() && ti.NumElements() <= 1<<16 {
				v, err := sf.ReadFloat32(ti.Name, nil)
				if err != nil || int64(len(v)) != ti.NumElements() {
					t.Fatalf("ReadFloat32(%q): %d values, %v", ti.Name, len(v), err)
				}
				if len(ti.Shape) > 0 {
					r, err := sf.ReadElements(ti.Name, 0, ti.NumElements(), nil)
					if err != nil || !sameBits(r, v) {
						t.Fatalf("ReadElements(%q) differs from ReadFloat32: %v", ti.Name, err)
					}
				}
			}
			plan = append(plan, WriteInfo{ti.Name, ti.DType, ti.Shape})
		}
		// The writer's header for the same plan describes the same tensors.
		if len(infos) == 0 || infos[0].Name == "" {
			return
		}
		header, _, err := planHeader("re.safetensors", plan, sf.Metadata())
		if err != nil {
			t.Fatalf("re-plan: %v", err)
		}
		dataStart := infos[0].Offset
		re := append(header, data[dataStart:]...)
		sf2, err := NewFile(bytes.NewReader(re), int64(len(re)), "re.safetensors")
		if err != nil {
			t.Fatalf("re-encoded file does not parse: %v", err)
		}
		infos2 := sf2.Tensors()
		for i := range infos {
			a, b := infos[i], infos2[i]
			if a.Name != b.Name || a.DType != b.DType || !reflect.DeepEqual(a.Shape, b.Shape) || a.Size != b.Size {
				t.Fatalf("re-encoded tensor %d: %+v vs %+v", i, a, b)
			}
		}
		if !reflect.DeepEqual(sf.Metadata(), sf2.Metadata()) && len(sf.Metadata())+len(sf2.Metadata()) > 0 {
			t.Fatalf("metadata %v vs %v", sf.Metadata(), sf2.Metadata())
		}
	})
}

// sameBits compares float32 slices bit for bit (NaN payloads included).
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
