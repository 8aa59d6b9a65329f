package safetensors

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestMalformed(t *testing.T) {
	f32x2 := make([]byte, 8)
	cases := []struct {
		name   string
		data   []byte
		tensor string // tensor the error must name ("" = none required)
		substr string
	}{
		{"too short", []byte{1, 2, 3}, "", "too short"},
		{"header past end", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, f32x2)[:20], "", "runs past the end"},
		{"header too large", append([]byte{0, 0, 0, 0, 1, 0, 0, 0}, make([]byte, 64)...), "", "exceeds"},
		{"truncated data", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 10)), "b", "run past"},
		{"offsets lie past end", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, f32x2), "w", "run past"},
		{"offsets reversed", rawFile(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, f32x2), "w", "begin <= end"},
		{"negative offset", rawFile(`{"w":{"dtype":"U8","shape":[2],"data_offsets":[-2,0]}}`, f32x2), "w", "begin <= end"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32x2), "b", "overlap"},
		{"hole", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32x2), "a", "hole"},
		{"trailing data", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, f32x2), "", "trailing"},
		{"shape size mismatch", rawFile(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, f32x2), "w", "needs 12 bytes"},
		{"dtype size mismatch", rawFile(`{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}}`, f32x2), "w", "needs 4 bytes"},
		{"negative dim", rawFile(`{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, f32x2), "w", "negative"},
		{"shape overflow", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, f32x2), "w", "2^63"},
		{"byte overflow", rawFile(`{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}}`, f32x2), "w", "overflows"},
		{"sub-byte", rawFile(`{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,8]}}`, f32x2), "w", "whole number"},
		{"dtype not a string", rawFile(`{"w":{"dtype":5,"shape":[2],"data_offsets":[0,8]}}`, f32x2), "w", "dtype"},
		{"missing dtype", rawFile(`{"w":{"shape":[2],"data_offsets":[0,8]}}`, f32x2), "w", "no dtype"},
		{"missing shape", rawFile(`{"w":{"dtype":"F32","data_offsets":[0,8]}}`, f32x2), "w", "no shape"},
		{"missing offsets", rawFile(`{"w":{"dtype":"F32","shape":[2]}}`, f32x2), "w", "no data_offsets"},
		{"three offsets", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}}`, f32x2), "w", "3 values"},
		{"unknown field", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, f32x2), "w", "unknown field"},
		{"key case", rawFile(`{"w":{"DType":"F32","shape":[2],"data_offsets":[0,8]}}`, f32x2), "w", "no dtype"},
		{"entry not object", rawFile(`{"w":[1,2]}`, f32x2), "w", "not a JSON object"},
		{"null offsets", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":null}}`, f32x2), "w", "0 values"},
		{"float shape", rawFile(`{"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}`, f32x2), "w", "shape"},
		{"duplicate", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32x2), "w", "twice"},
		{"not an object", rawFile(`[1,2]   `, nil), "", "'{'"},
		{"bad json", rawFile(`{"w":{"dtype":"F32",`, f32x2), "", "JSON"},
		{"garbage after json", rawFile(`{}xyz`, nil), "", "trailing data after the JSON"},
		{"metadata not strings", rawFile(`{"__metadata__":{"a":1}}`, nil), "", "__metadata__"},
		{"invalid utf8", rawFile("{\"\xff\":{}}", nil), "", "UTF-8"},
		{"rank too high", rawFile(`{"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}`, []byte{0}), "w", "rank"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeTemp(t, "bad.safetensors", c.data)
			f, err := Open(path)
			if err == nil {
				f.Close()
				t.Fatal("Open succeeded on a malformed file")
			}
			wantFormatErr(t, err, path, c.tensor, c.substr)
			// The same file through io.ReaderAt gives the same verdict.
			_, err2 := NewFile(bytes.NewReader(c.data), int64(len(c.data)), "mem.safetensors")
			if err2 == nil || strings.Replace(err.Error(), path, "mem.safetensors", 1) != err2.Error() {
				t.Errorf("NewFile: %v, Open: %v", err2, err)
			}
		})
	}
}

func TestUnknownDType(t *testing.T) {
	path := writeTemp(t, "q.safetensors", rawFile(`{"w":{"dtype":"Q9_X","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	_, err := Open(path)
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Tensor != "w" || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "Q9_X") {
		t.Fatalf("got %v, want *UnsupportedError naming %s, tensor w and the dtype", err, path)
	}
}

func TestUnsupportedRead(t *testing.T) {
	data := rawFile(`{"__metadata__":{"format":"pt"},"e":{"dtype":"F8_E4M3","shape":[2,4],"data_offsets":[0,8]},"i":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}}`, make([]byte, 16))
	path := writeTemp(t, "f8.safetensors", data)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Metadata()["format"]; got != "pt" {
		t.Errorf("metadata format = %q", got)
	}
	for _, name := range []string{"e", "i"} {
		_, err := f.ReadFloat32(name, nil)
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Tensor != name || !strings.Contains(err.Error(), path) {
			t.Errorf("ReadFloat32(%s): %v, want *UnsupportedError naming file and tensor", name, err)
		}
		if _, err := f.ReadElements(name, 0, 1, nil); !errors.As(err, &ue) {
			t.Errorf("ReadElements(%s): %v, want *UnsupportedError", name, err)
		}
	}
	// Raw access still works for any dtype.
	r, err := f.Raw("e")
	if err != nil || r.Size() != 8 {
		t.Fatalf("Raw(e): %v size %d", err, r.Size())
	}
}

// A file truncated after Open (shrunk on disk) gives a read error, not a
// panic or silent zeros.
func TestShrunkAfterOpen(t *testing.T) {
	data := rawFile(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 16))
	path := writeTemp(t, "s.safetensors", data)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(path, int64(len(data)-4)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFloat32("w", nil); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("read of shrunk file: %v", err)
	}
}
