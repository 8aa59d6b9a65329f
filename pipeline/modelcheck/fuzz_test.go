package modelcheck_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/internal/testkit/hostile"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
)

var (
	basesOnce sync.Once
	bases     []*gguf.File
	baseBytes [][]byte
	basesErr  error
)

// fuzzBases are the hostile corpus' valid bases (every architecture, float and quantized types).
func fuzzBases(t testing.TB) []*gguf.File {
	basesOnce.Do(func() {
		dir, err := os.MkdirTemp("", "modelcheck-fuzz-")
		if err != nil {
			basesErr = err
			return
		}
		defer os.RemoveAll(dir)
		bs, err := hostile.Bases(context.Background(), dir)
		if err != nil {
			basesErr = err
			return
		}
		for _, b := range bs {
			data := b.GGUF()
			f, err := gguf.Open(bytes.NewReader(data), int64(len(data)), b.Name)
			if err != nil {
				basesErr = err
				return
			}
			bases, baseBytes = append(bases, f), append(baseBytes, data)
		}
	})
	if basesErr != nil {
		t.Fatal(basesErr)
	}
	return bases
}

var fuzzTypes = []gguf.Type{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ8_K,
	gguf.TypeI32, gguf.TypeTQ1_0, gguf.TypeMXFP4, gguf.TypeIQ4_NL}

// FuzzCheck changes one metadata value and one tensor info of a valid model: Check must never panic, and what
// it accepts must satisfy invariants stated independently of its code (the vocabulary fits the embedding, the
// projections have the embedding as their input width, query heads group evenly over key/value heads).
func FuzzCheck(f *testing.F) {
	fuzzBases(f)
	f.Add(uint8(0), uint16(5), uint32(3), uint16(7), uint64(0), uint64(0), uint8(0))
	f.Add(uint8(3), uint16(9), uint32(0), uint16(30), uint64(64), uint64(128), uint8(3))
	f.Add(uint8(4), uint16(12), uint32(0x7fc00000), uint16(2), uint64(128), uint64(64), uint8(1))
	f.Fuzz(func(t *testing.T, bi uint8, ki uint16, val uint32, ti uint16, d0, d1 uint64, typ uint8) {
		base := bases[int(bi)%len(bases)]
		m := modelcheck.Model{Name: base.Name, KVs: slices.Clone(base.KVs), Tensors: slices.Clone(base.Tensors)}
		kv := &m.KVs[int(ki)%len(m.KVs)]
		switch kv.Value.Type {
		case gguf.ValueUint32:
			kv.Value = gguf.Uint32(val)
		case gguf.ValueFloat32:
			kv.Value = gguf.Float32(math.Float32frombits(val))
		case gguf.ValueString:
			kv.Value = gguf.Uint32(val)
		}
		tn := &m.Tensors[int(ti)%len(m.Tensors)]
		if d0 != 0 {
			tn.Shape = []uint64{d0 % (1 << 20), d1 % (1 << 20)}
		}
		tn.Type = fuzzTypes[int(typ)%len(fuzzTypes)]
		err := modelcheck.Check(m, modelcheck.Options{})
		errServe := modelcheck.Check(m, modelcheck.Options{Serve: true})
		if err != nil && errServe == nil {
			t.Fatalf("serve accepts what the general check refuses: %v", err)
		}
		if err != nil {
			if me, ok := err.(*modelcheck.Error); !ok || len(me.Problems) == 0 || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %T %q", err, err)
			}
			return
		}
		acceptedInvariants(t, m)
	})
}

func acceptedInvariants(t *testing.T, m modelcheck.Model) {
	kv := map[string]gguf.Value{}
	for _, e := range m.KVs {
		kv[e.Key] = e.Value
	}
	arch, _ := kv["general.architecture"].V.(string)
	u32 := func(k string) uint64 { v, _ := kv[arch+"."+k].V.(uint32); return uint64(v) }
	embd := u32("embedding_length")
	var rows uint64
	for _, tn := range m.Tensors {
		if tn.Name == "token_embd.weight" {
			rows = tn.Shape[1]
		}
		if strings.HasSuffix(tn.Name, ".ffn_up.weight") || strings.HasSuffix(tn.Name, ".attn_q.weight") || tn.Name == "output.weight" {
			if tn.Shape[0] != embd {
				t.Fatalf("accepted %s %v with embedding_length %d", tn.Name, tn.Shape, embd)
			}
		}
		if strings.HasSuffix(tn.Name, "norm.weight") && tn.Type != gguf.TypeF32 {
			t.Fatalf("accepted %s of type %s", tn.Name, tn.Type)
		}
	}
	tokens, _ := kv["tokenizer.ggml.tokens"].V.(gguf.Array)
	if uint64(tokens.Len()) > rows || tokens.Len() == 0 {
		t.Fatalf("accepted %d tokens for %d embedding rows", tokens.Len(), rows)
	}
	if h, k := u32("attention.head_count"), u32("attention.head_count_kv"); k != 0 && h%k != 0 {
		t.Fatalf("accepted head_count %d over head_count_kv %d", h, k)
	}
	if base, ok := kv[arch+".rope.freq_base"].V.(float32); !ok || !(base > 1) || math.IsInf(float64(base), 0) {
		t.Fatalf("accepted rope.freq_base %v", kv[arch+".rope.freq_base"])
	}
}

// FuzzCheckFile feeds arbitrary bytes (seeded with valid models) through the reader and CheckFile: never a
// panic, and a one-line error.
func FuzzCheckFile(f *testing.F) {
	fuzzBases(f)
	for _, b := range baseBytes {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Open(bytes.NewReader(data), int64(len(data)), "fuzz.gguf")
		if err != nil {
			return
		}
		if err := modelcheck.CheckFile(g, modelcheck.Options{Serve: true}); err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
	})
}
