package quantize

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

func TestReadProvenance(t *testing.T) {
	read := func(kvs ...gguf.KV) Provenance {
		t.Helper()
		w := gguf.NewWriter()
		for _, kv := range kvs {
			if err := w.SetKV(kv.Key, kv.Value); err != nil {
				t.Fatal(err)
			}
		}
		var b bytes.Buffer
		if err := w.WriteHeader(&b); err != nil {
			t.Fatal(err)
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(bytes.NewReader(b.Bytes()), int64(b.Len()), "x.gguf")
		if err != nil {
			t.Fatal(err)
		}
		return ReadProvenance(f)
	}
	if p := read(gguf.KV{Key: "general.file_type", Value: gguf.Uint32(15)}); !reflect.DeepEqual(p, Provenance{FileType: "Q4_K_M"}) {
		t.Errorf("plain: %+v", p)
	}
	p := read(
		gguf.KV{Key: "general.file_type", Value: gguf.Uint32(19)},
		gguf.KV{Key: KeyImatrixFile, Value: gguf.String("m.imatrix.gguf")},
		gguf.KV{Key: KeyImatrixDataset, Value: gguf.String("prompts.jsonl")},
		gguf.KV{Key: KeyImatrixEntries, Value: gguf.Uint32(196)},
		gguf.KV{Key: KeyImatrixChunks, Value: gguf.Uint32(12)},
		gguf.KV{Key: KeyImatrixSHA256, Value: gguf.String("abc")},
		gguf.KV{Key: KeyTensorTypes, Value: gguf.Strings([]string{"^a$=Q6_K", "^b$=Q4_K"})},
		gguf.KV{Key: KeyTarget, Value: gguf.String("size 100")},
		gguf.KV{Key: KeyPredictedKLD, Value: gguf.Float32(0.5)},
	)
	want := Provenance{FileType: "IQ2_XXS",
		Imatrix: &ImatrixInfo{File: "m.imatrix.gguf", SHA256: "abc", Dataset: "prompts.jsonl", Entries: 196, Chunks: 12},
		Mix:     &MixInfo{Target: "size 100", Rules: []string{"^a$=Q6_K", "^b$=Q4_K"}, PredictedKLD: 0.5}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got %+v %+v %+v\nwant %+v %+v %+v", p, p.Imatrix, p.Mix, want, want.Imatrix, want.Mix)
	}
}
