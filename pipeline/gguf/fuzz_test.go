package gguf

import (
	"bytes"
	"testing"
)

// FuzzOpen feeds arbitrary bytes to the reader: it must never panic, and whatever it accepts must re-encode
// to a file it accepts again with the same metadata and tensor infos.
func FuzzOpen(f *testing.F) {
	f.Add(writeSample(f))
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Open(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			return
		}
		w := NewWriter()
		for _, kv := range g.KVs {
			if err := w.SetKV(kv.Key, kv.Value); err != nil {
				t.Fatalf("accepted KV %q rejected by writer: %v", kv.Key, err)
			}
		}
		for _, ti := range g.Tensors {
			if err := w.AddTensor(ti.Name, ti.Type, ti.Shape); err != nil {
				t.Fatalf("accepted tensor %q rejected by writer: %v", ti.Name, err)
			}
		}
		var buf bytes.Buffer
		if err := w.WriteHeader(&buf); err != nil {
			t.Fatal(err)
		}
		for _, ti := range g.Tensors {
			r, _ := g.TensorReader(ti.Name)
			if err := w.WriteTensorFrom(ti.Name, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		h, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "fuzz2")
		if err != nil {
			t.Fatalf("re-encoded file rejected: %v", err)
		}
		if len(h.KVs) != len(g.KVs) || len(h.Tensors) != len(g.Tensors) {
			t.Fatal("round trip changed counts")
		}
	})
}
