package imatrix

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline"
)

// The fixtures below are written byte by byte from the format descriptions (llama.cpp's gguf.h layout and
// llama-imatrix's save_imatrix / save_imatrix_legacy), not with this package's writers, and this package's
// output is parsed back by the independent readers here: each direction is checked against the description.

// handKV is one metadata entry of a hand-written GGUF.
type handKV struct {
	key string
	typ uint32 // gguf_type
	val any    // string, uint32, []string
}

// handTensor is one F32 tensor of a hand-written GGUF.
type handTensor struct {
	name  string
	shape []uint64
	data  []float32
	typ   uint32 // 0 = F32
}

// handGGUF lays out a GGUF v3 file: magic, version, counts, KVs, tensor infos, padding to 32, data (each
// tensor padded to 32).
func handGGUF(kvs []handKV, ts []handTensor) []byte {
	var b bytes.Buffer
	le := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { le(uint64(len(s))); b.WriteString(s) }
	b.WriteString("GGUF")
	le(uint32(3))
	le(uint64(len(ts)))
	le(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.key)
		le(kv.typ)
		switch v := kv.val.(type) {
		case string:
			str(v)
		case uint32:
			le(v)
		case int32:
			le(v)
		case []string:
			le(uint32(8)) // element type string
			le(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		}
	}
	var off uint64
	for _, t := range ts {
		str(t.name)
		le(uint32(len(t.shape)))
		for _, d := range t.shape {
			le(d)
		}
		le(t.typ)
		le(off)
		off += (uint64(4*len(t.data)) + 31) &^ 31
	}
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	for _, t := range ts {
		for _, x := range t.data {
			le(math.Float32bits(x))
		}
		for b.Len()%32 != 0 {
			b.WriteByte(0)
		}
	}
	return b.Bytes()
}

func metaKVs(datasets []string, chunks, size uint32) []handKV {
	return []handKV{
		{"general.type", 8, "imatrix"},
		{"imatrix.datasets", 9, datasets},
		{"imatrix.chunk_count", 4, chunks},
		{"imatrix.chunk_size", 4, size},
	}
}

// parsedGGUF is what parseHandGGUF reads back.
type parsedGGUF struct {
	kvs     map[string]any
	keys    []string
	tensors []handTensor
}

// parseHandGGUF reads a GGUF v3 file with F32 tensors following the layout description only.
func parseHandGGUF(t *testing.T, raw []byte) parsedGGUF {
	t.Helper()
	r := bytes.NewReader(raw)
	le := func(v any) {
		if err := binary.Read(r, binary.LittleEndian, v); err != nil {
			t.Fatalf("parse: %v", err)
		}
	}
	str := func() string {
		var n uint64
		le(&n)
		s := make([]byte, n)
		le(s)
		return string(s)
	}
	magic := make([]byte, 4)
	le(magic)
	var version uint32
	var nt, nkv uint64
	le(&version)
	le(&nt)
	le(&nkv)
	if string(magic) != "GGUF" || version != 3 {
		t.Fatalf("magic %q version %d", magic, version)
	}
	p := parsedGGUF{kvs: map[string]any{}}
	for range nkv {
		k := str()
		var typ uint32
		le(&typ)
		switch typ {
		case 8:
			p.kvs[k] = str()
		case 4:
			var v uint32
			le(&v)
			p.kvs[k] = v
		case 9:
			var et uint32
			var n uint64
			le(&et)
			le(&n)
			if et != 8 {
				t.Fatalf("array %s of type %d", k, et)
			}
			var ss []string
			for range n {
				ss = append(ss, str())
			}
			p.kvs[k] = ss
		default:
			t.Fatalf("kv %s of type %d", k, typ)
		}
		p.keys = append(p.keys, k)
	}
	offs := make([]uint64, nt)
	for i := range nt {
		name := str()
		var nd uint32
		le(&nd)
		shape := make([]uint64, nd)
		for d := range shape {
			le(&shape[d])
		}
		var typ uint32
		le(&typ)
		le(&offs[i])
		p.tensors = append(p.tensors, handTensor{name: name, shape: shape, typ: typ})
	}
	pos := len(raw) - r.Len()
	data := (pos + 31) &^ 31
	for i := range p.tensors {
		n := uint64(1)
		for _, d := range p.tensors[i].shape {
			n *= d
		}
		start := uint64(data) + offs[i]
		if p.tensors[i].typ != 0 {
			continue // only F32 data is decoded
		}
		for j := range n {
			p.tensors[i].data = append(p.tensors[i].data, math.Float32frombits(binary.LittleEndian.Uint32(raw[start+4*j:])))
		}
	}
	return p
}

func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// sampleMatrix has a dense entry, an expert stack with one idle expert, and a single-column router.
func sampleMatrix() *Matrix {
	return &Matrix{
		Datasets:   []string{"prompts.jsonl"},
		ChunkCount: 3,
		ChunkSize:  512,
		Entries: []Entry{
			{Name: "blk.0.attn_q.weight", Cols: 4, Sums: []float32{1, 2.5, 0, 1e-7}, Counts: []float64{1536}},
			{Name: "blk.0.ffn_down_exps.weight", Cols: 2, Sums: []float32{3, 4, 0, 0, 5, 6}, Counts: []float64{10, 0, 7}},
			{Name: "blk.0.ffn_gate_inp.weight", Cols: 1, Sums: []float32{42}, Counts: []float64{1536}},
		},
	}
}

func TestGGUFRoundTrip(t *testing.T) {
	m := sampleMatrix()
	var a, b bytes.Buffer
	if err := m.WriteGGUF(&a); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteGGUF(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two writes of the same matrix differ")
	}
	got, err := ReadGGUF(bytes.NewReader(a.Bytes()), int64(a.Len()), "x.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, m)
	}
}

// TestGGUFWrittenAsDescribed parses phonellm's output with the independent reader: keys and their order,
// tensor names, shapes (trailing 1 dropped, as ggml_n_dims does) and values.
func TestGGUFWrittenAsDescribed(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleMatrix().WriteGGUF(&buf); err != nil {
		t.Fatal(err)
	}
	p := parseHandGGUF(t, buf.Bytes())
	if want := []string{"general.type", "imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"}; !reflect.DeepEqual(p.keys, want) {
		t.Fatalf("keys %v, want %v", p.keys, want)
	}
	if p.kvs["general.type"] != "imatrix" || p.kvs["imatrix.chunk_count"] != uint32(3) || p.kvs["imatrix.chunk_size"] != uint32(512) ||
		!reflect.DeepEqual(p.kvs["imatrix.datasets"], []string{"prompts.jsonl"}) {
		t.Fatalf("kvs %v", p.kvs)
	}
	want := []handTensor{
		{name: "blk.0.attn_q.weight.in_sum2", shape: []uint64{4}, data: []float32{1, 2.5, 0, 1e-7}},
		{name: "blk.0.attn_q.weight.counts", shape: []uint64{1}, data: []float32{1536}},
		{name: "blk.0.ffn_down_exps.weight.in_sum2", shape: []uint64{2, 3}, data: []float32{3, 4, 0, 0, 5, 6}},
		{name: "blk.0.ffn_down_exps.weight.counts", shape: []uint64{1, 3}, data: []float32{10, 0, 7}},
		{name: "blk.0.ffn_gate_inp.weight.in_sum2", shape: []uint64{1}, data: []float32{42}},
		{name: "blk.0.ffn_gate_inp.weight.counts", shape: []uint64{1}, data: []float32{1536}},
	}
	if !reflect.DeepEqual(p.tensors, want) {
		t.Fatalf("tensors\n%+v\nwant\n%+v", p.tensors, want)
	}
}

// TestLoadHandWrittenGGUF loads a file laid out by hand with two experts of four (one idle), an in_sum tensor
// newer llama-imatrix builds add, and an unrelated tensor, and checks the values llama-quantize computes:
// in_sum2 / count per matrix in float32, 1 for a matrix without tokens.
func TestLoadHandWrittenGGUF(t *testing.T) {
	sums := []float32{2, 4, 6, 8, 1, 1, 1, 1, 9, 3, 0, 0.5, 100, 200, 300, 400}
	raw := handGGUF(metaKVs([]string{"a.txt", "b.txt"}, 7, 256), []handTensor{
		{name: "blk.3.ffn_up_exps.weight.in_sum2", shape: []uint64{4, 4}, data: sums},
		{name: "blk.3.ffn_up_exps.weight.in_sum", shape: []uint64{4, 4}, data: make([]float32, 16)},
		{name: "blk.3.ffn_up_exps.weight.counts", shape: []uint64{1, 4}, data: []float32{2, 0, 3, 1000.4}},
		{name: "blk.3.attn_k.weight.counts", shape: []uint64{1}, data: []float32{3}},
		{name: "blk.3.attn_k.weight.in_sum2", shape: []uint64{2}, data: []float32{1, 2}},
		{name: "something.else", shape: []uint64{2}, data: []float32{1, 2}},
	})
	im, err := Load(writeTemp(t, "hand.gguf", raw))
	if err != nil {
		t.Fatal(err)
	}
	if im.Chunks != 7 || !reflect.DeepEqual(im.Datasets, []string{"a.txt", "b.txt"}) || im.Len() != 2 || im.Legacy {
		t.Fatalf("metadata %+v", im)
	}
	want := []float32{2.0 / 2, 4.0 / 2, 6.0 / 2, 8.0 / 2, 1, 1, 1, 1, 9.0 / 3, 3.0 / 3, 0, float32(0.5) / 3,
		100.0 / 1000, 200.0 / 1000, 300.0 / 1000, 400.0 / 1000}
	if got := vec(t, im, "blk.3.ffn_up_exps.weight"); !reflect.DeepEqual(got, want) {
		t.Fatalf("experts: %v\nwant %v", got, want)
	}
	if got := vec(t, im, "blk.3.attn_k.weight"); !reflect.DeepEqual(got, []float32{float32(1) / 3, float32(2) / 3}) {
		t.Fatalf("dense: %v", got)
	}
}

// handDat lays out a legacy file: entries (name, ncall, values), then the optional trailer.
func handDat(entries []Entry, trailer bool, chunks int32, dataset string) []byte {
	var b bytes.Buffer
	le := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	le(int32(len(entries)))
	for _, e := range entries {
		le(int32(len(e.Name)))
		b.WriteString(e.Name)
		le(int32(e.Counts[0]))
		le(int32(len(e.Sums)))
		for _, x := range e.Sums {
			le(math.Float32bits(x))
		}
	}
	if trailer {
		le(chunks)
		le(int32(len(dataset)))
		b.WriteString(dataset)
	}
	return b.Bytes()
}

func TestLoadHandWrittenDat(t *testing.T) {
	raw := handDat([]Entry{
		{Name: "blk.1.ffn_down_exps.weight", Sums: []float32{10, 20, 30, 40, 50, 60}, Counts: []float64{4}}, // 3 experts × 2
		{Name: "blk.0.attn_v.weight", Sums: []float32{1, 3}, Counts: []float64{0}},                          // ncall 0: as stored
	}, true, 9, "wiki.txt")
	im, err := Load(writeTemp(t, "hand.dat", raw))
	if err != nil {
		t.Fatal(err)
	}
	if !im.Legacy || im.Chunks != 9 || !reflect.DeepEqual(im.Datasets, []string{"wiki.txt"}) {
		t.Fatalf("metadata %+v", im)
	}
	if got := vec(t, im, "blk.1.ffn_down_exps.weight"); !reflect.DeepEqual(got, []float32{2.5, 5, 7.5, 10, 12.5, 15}) {
		t.Fatalf("experts %v", got)
	}
	if got := vec(t, im, "blk.0.attn_v.weight"); !reflect.DeepEqual(got, []float32{1, 3}) {
		t.Fatalf("ncall 0: %v", got)
	}
	// The trailer is optional.
	im, err = Load(writeTemp(t, "short.dat", handDat([]Entry{{Name: "w", Sums: []float32{2}, Counts: []float64{2}}}, false, 0, "")))
	if err != nil || im.Chunks != 0 || im.Datasets != nil || vec(t, im, "w")[0] != 1 {
		t.Fatalf("no trailer: %+v %v", im, err)
	}
}

// TestWriteDatAsDescribed checks save_imatrix_legacy's layout and arithmetic: entries without data left out,
// ncall = ⌈max count / chunk size⌉, values (sum/count)·ncall with 1 for idle experts, then chunk count and the
// last dataset; and that the GGUF and legacy files of the same statistics load to the same values.
func TestWriteDatAsDescribed(t *testing.T) {
	m := sampleMatrix()
	m.Entries = append(m.Entries, Entry{Name: "blk.9.unused.weight", Cols: 2, Sums: []float32{0, 0}, Counts: []float64{0}})
	m.Datasets = []string{"old.txt", "new.jsonl"}
	var buf bytes.Buffer
	skipped, err := m.WriteDat(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(skipped, []string{"blk.9.unused.weight"}) {
		t.Fatalf("skipped %v", skipped)
	}
	r := bytes.NewReader(buf.Bytes())
	i32 := func() int32 {
		var v int32
		binary.Read(r, binary.LittleEndian, &v)
		return v
	}
	if n := i32(); n != 3 {
		t.Fatalf("%d entries", n)
	}
	type rec struct {
		name  string
		ncall int32
		vals  []float32
	}
	var got []rec
	for range 3 {
		name := make([]byte, i32())
		r.Read(name)
		e := rec{name: string(name), ncall: i32()}
		e.vals = make([]float32, i32())
		binary.Read(r, binary.LittleEndian, e.vals)
		got = append(got, e)
	}
	// ncall: ⌈1536/512⌉ = 3, ⌈10/512⌉ = 1, ⌈1536/512⌉ = 3.
	want := []rec{
		{"blk.0.attn_q.weight", 3, []float32{float32(1) / 1536 * 3, float32(2.5) / 1536 * 3, 0, float32(1e-7) / 1536 * 3}},
		{"blk.0.ffn_down_exps.weight", 1, []float32{float32(3) / 10, float32(4) / 10, 1, 1, float32(5) / 7, float32(6) / 7}},
		{"blk.0.ffn_gate_inp.weight", 3, []float32{float32(42) / 1536 * 3}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries\n%v\nwant\n%v", got, want)
	}
	if c, l := i32(), i32(); c != 3 || l != int32(len("new.jsonl")) {
		t.Fatalf("trailer %d %d", c, l)
	}
	rest := make([]byte, r.Len())
	r.Read(rest)
	if string(rest) != "new.jsonl" {
		t.Fatalf("dataset %q", rest)
	}

	// Same statistics, both formats: llama-quantize's values agree (exactly where the legacy scaling by ncall
	// is exact, within a float32 rounding elsewhere).
	dat, err := Load(writeTemp(t, "m.dat", buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var g bytes.Buffer
	if err := sampleMatrix().WriteGGUF(&g); err != nil {
		t.Fatal(err)
	}
	gg, err := Load(writeTemp(t, "m.gguf", g.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gg.Names(), dat.Names()) {
		t.Fatalf("names %v vs %v", gg.Names(), dat.Names())
	}
	for _, n := range gg.Names() {
		a, b := vec(t, gg, n), vec(t, dat, n)
		for i := range a {
			if d := math.Abs(float64(a[i] - b[i])); d > 1e-6*math.Abs(float64(a[i])) {
				t.Errorf("%s[%d]: gguf %v, dat %v", n, i, a[i], b[i])
			}
		}
	}
}

func TestFormatDetectionAndWriteFile(t *testing.T) {
	dir := t.TempDir()
	m := sampleMatrix()
	for _, f := range []Format{FormatGGUF, FormatDat} {
		p := filepath.Join(dir, "out."+string(f))
		art, _, err := WriteFile(p, m, f)
		if err != nil {
			t.Fatal(err)
		}
		size, sum, err := hashFile(p)
		if err != nil || size != art.Size || sum != art.SHA256 || art.Kind != "imatrix" {
			t.Fatalf("%s: artifact %+v, file %d %s %v", f, art, size, sum, err)
		}
		back, err := Read(p)
		if err != nil {
			t.Fatal(err)
		}
		if back.Legacy != (f == FormatDat) {
			t.Fatalf("%s read back as legacy=%v", f, back.Legacy)
		}
	}
	if FormatOf("x.dat") != FormatDat || FormatOf("x.gguf") != FormatGGUF || FormatOf("imatrix") != FormatGGUF {
		t.Fatal("FormatOf")
	}
	// A failed write leaves nothing under the final name.
	bad := &Matrix{Entries: []Entry{{Name: "x", Cols: 2, Sums: []float32{1}, Counts: []float64{1}}}}
	p := filepath.Join(dir, "bad.gguf")
	if _, _, err := WriteFile(p, bad, FormatGGUF); err == nil {
		t.Fatal("inconsistent matrix written")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("folder holds %d files after a failed write", len(ents))
	}
}

func hashFile(p string) (int64, string, error) {
	return fsxHash(p)
}

// TestBadFiles: every malformed file is a one-line input error that names the file, and the entry where there
// is one.
func TestBadFiles(t *testing.T) {
	okT := []handTensor{{name: "w.in_sum2", shape: []uint64{2}, data: []float32{1, 2}}, {name: "w.counts", shape: []uint64{1}, data: []float32{1}}}
	nan := float32(math.NaN())
	cases := []struct {
		name, file string
		raw        []byte
		want       string // substring of the message
	}{
		{"empty", "e.dat", nil, "entry count"},
		{"no metadata", "m.gguf", handGGUF(nil, okT), "without the imatrix metadata"},
		{"model", "m.gguf", handGGUF([]handKV{{"general.architecture", 8, "qwen3"}}, okT), "a model GGUF, not an importance matrix"},
		{"count type", "m.gguf", handGGUF([]handKV{{"imatrix.datasets", 9, []string{}}, {"imatrix.chunk_count", 5, int32(1)}, {"imatrix.chunk_size", 4, uint32(1)}}, okT), "want uint32"},
		{"orphan sums", "m.gguf", handGGUF(metaKVs(nil, 1, 1), okT[:1]), `entry "w" has no matching`},
		{"orphan counts", "m.gguf", handGGUF(metaKVs(nil, 1, 1), okT[1:]), `entry "w" has no matching`},
		{"not f32", "m.gguf", handGGUF(metaKVs(nil, 1, 1), []handTensor{okT[0], {name: "w.counts", shape: []uint64{2}, data: []float32{1}, typ: 1}}), "want F32"},
		{"ragged", "m.gguf", handGGUF(metaKVs(nil, 1, 1), []handTensor{{name: "w.in_sum2", shape: []uint64{3}, data: []float32{1, 2, 3}},
			{name: "w.counts", shape: []uint64{2}, data: []float32{1, 1}}}), "whole number of columns"},
		{"no entries", "m.gguf", handGGUF(metaKVs(nil, 1, 1), nil), "no importance data"},
		{"truncated gguf", "m.gguf", handGGUF(metaKVs(nil, 1, 1), okT)[:100], "m.gguf"},
		{"nan sum", "m.gguf", handGGUF(metaKVs(nil, 1, 1), []handTensor{{name: "w.in_sum2", shape: []uint64{2}, data: []float32{1, nan}}, okT[1]}), `entry "w" has a non-finite sum at 1`},
		{"negative sum", "m.gguf", handGGUF(metaKVs(nil, 1, 1), []handTensor{{name: "w.in_sum2", shape: []uint64{2}, data: []float32{-1, 2}}, okT[1]}), `entry "w" has a negative sum at 0`},
		{"negative count", "m.gguf", handGGUF(metaKVs(nil, 1, 1), []handTensor{okT[0], {name: "w.counts", shape: []uint64{1}, data: []float32{-3}}}), `entry "w" has a negative count`},
		{"inf count", "m.gguf", handGGUF(metaKVs(nil, 1, 1), []handTensor{okT[0], {name: "w.counts", shape: []uint64{1}, data: []float32{float32(math.Inf(1))}}}), "non-finite count"},
		{"huge entry count", "h.dat", []byte{0xff, 0xff, 0xff, 0x7f}, "entry count"},
		{"negative name", "n.dat", append(le32(1, -5), make([]byte, 16)...), "name length -5"},
		{"huge nval", "v.dat", append(append(append(le32(1, 1), 'w'), le32(1, 1<<30)...), make([]byte, 8)...), `entry "w" declares 1073741824 values`},
		{"zero nval", "z.dat", append(append(le32(1, 1), 'w'), le32(1, 0, 0, 0)...), `declares 0 values`},
		{"truncated dat", "t.dat", handDat([]Entry{{Name: "w", Sums: []float32{1, 2, 3}, Counts: []float64{1}}}, true, 1, "d")[:20], "t.dat"},
		{"duplicate", "d.dat", handDat([]Entry{{Name: "w", Sums: []float32{1}, Counts: []float64{1}}, {Name: "w", Sums: []float32{1}, Counts: []float64{1}}}, false, 0, ""), `entry "w" appears twice`},
		{"nan dat", "n.dat", handDat([]Entry{{Name: "w", Sums: []float32{nan}, Counts: []float64{1}}}, false, 0, ""), `entry "w" has a non-finite sum`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeTemp(t, c.file, c.raw))
			if err == nil {
				t.Fatal("accepted")
			}
			if !pipeline.IsInputError(err) {
				t.Errorf("not an input error: %T %v", err, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, c.file) || strings.Contains(msg, "\n") {
				t.Errorf("message %q: want one line naming %s with %q", msg, c.file, c.want)
			}
		})
	}
}

func le32(v ...int32) []byte {
	var b bytes.Buffer
	for _, x := range v {
		binary.Write(&b, binary.LittleEndian, x)
	}
	return b.Bytes()
}

func TestLegacyCannotBeRewrittenOrContinued(t *testing.T) {
	m, err := Read(writeTemp(t, "a.dat", handDat([]Entry{{Name: "w", Sums: []float32{1}, Counts: []float64{1}}}, false, 0, "")))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteGGUF(&bytes.Buffer{}); err == nil {
		t.Error("legacy matrix written as GGUF")
	}
	if _, err := m.WriteDat(&bytes.Buffer{}); err == nil {
		t.Error("legacy matrix written back")
	}
	var fe *FormatError
	if err := NewCollector().Add(m, "a.dat"); !errors.As(err, &fe) {
		t.Errorf("legacy merged: %v", err)
	}
}

// FuzzRead: any bytes are either refused with an error or give a matrix that writes and reads back the same
// (GGUF) and whose importance values can be computed without a panic.
func FuzzRead(f *testing.F) {
	var g bytes.Buffer
	sampleMatrix().WriteGGUF(&g)
	f.Add(g.Bytes())
	var d bytes.Buffer
	sampleMatrix().WriteDat(&d)
	f.Add(d.Bytes())
	f.Add(handDat([]Entry{{Name: "w", Sums: []float32{1, 2}, Counts: []float64{3}}}, true, 2, "x"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var m *Matrix
		var err error
		if bytes.HasPrefix(raw, []byte("GGUF")) {
			m, err = ReadGGUF(bytes.NewReader(raw), int64(len(raw)), "fuzz")
		} else {
			m, err = ReadDat(bytes.NewReader(raw), int64(len(raw)), "fuzz")
		}
		if err != nil {
			if !pipeline.IsInputError(err) {
				t.Fatalf("error is not an input error: %v", err)
			}
			return
		}
		_, _ = m.Importance("fuzz")
		if m.Legacy {
			return
		}
		var out bytes.Buffer
		if err := m.WriteGGUF(&out); err != nil {
			return // e.g. a name too long for a tensor once suffixed
		}
		back, err := ReadGGUF(bytes.NewReader(out.Bytes()), int64(out.Len()), "again")
		if err != nil {
			t.Fatalf("own output refused: %v", err)
		}
		if !reflect.DeepEqual(stripNaN(back), stripNaN(m)) {
			t.Fatal("round trip differs")
		}
	})
}

// stripNaN makes NaN sums comparable (DeepEqual treats NaN as unequal to itself).
func stripNaN(m *Matrix) *Matrix {
	c := *m
	c.Entries = nil
	for _, e := range m.Entries {
		e.Sums = append([]float32(nil), e.Sums...)
		for i, v := range e.Sums {
			if v != v {
				e.Sums[i] = -12345
			}
		}
		e.Counts = append([]float64(nil), e.Counts...)
		for i, v := range e.Counts {
			if v != v {
				e.Counts[i] = -12345
			}
		}
		c.Entries = append(c.Entries, e)
	}
	return &c
}

func fsxHash(p string) (int64, string, error) { return fsx.HashFile(p) }

// TestExactSumsAndMetaRoundTrip: the float64 sums of partial files and phonellm's string keys survive a write
// and a read, and a file whose exact sums disagree with its F32 sums is refused.
func TestExactSumsAndMetaRoundTrip(t *testing.T) {
	m := sampleMatrix()
	m.Meta = map[string]string{"phonellm.imatrix.resume": "abc", "phonellm.z": "z"}
	for i := range m.Entries {
		e := &m.Entries[i]
		e.Exact = make([]float64, len(e.Sums))
		for j, s := range e.Sums {
			e.Exact[j] = float64(s) * (1 + 1e-12) // rounds to the same float32
		}
	}
	var buf bytes.Buffer
	if err := m.WriteGGUF(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadGGUF(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "p.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, m)
	}
	// llama.cpp's view: the exact sums are an extra tensor it ignores.
	p := parseHandGGUF(t, buf.Bytes())
	if p.kvs["phonellm.imatrix.resume"] != "abc" || p.tensors[2].name != "blk.0.attn_q.weight.in_sum2_f64" || p.tensors[2].typ != 28 {
		t.Fatalf("kvs %v, third tensor %+v", p.kvs, p.tensors[2])
	}
	m.Entries[0].Exact[1] = 7
	if err := m.WriteGGUF(&bytes.Buffer{}); err == nil {
		t.Fatal("inconsistent exact sums written")
	}
}

// vec returns an entry's importance values, failing the test on a read error.
func vec(t *testing.T, im *Importance, name string) []float32 {
	t.Helper()
	v, err := im.Vector(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// FuzzLoad: the GGUF path quantize uses (Load: index the file, read each entry's vector when asked) and the
// whole-file reader agree on any bytes: both refuse them with an input error, or both accept them with the
// same entries, sizes and importance values, bit for bit.
func FuzzLoad(f *testing.F) {
	var g bytes.Buffer
	sampleMatrix().WriteGGUF(&g)
	f.Add(g.Bytes())
	f.Add(g.Bytes()[:g.Len()-3])
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !bytes.HasPrefix(raw, []byte("GGUF")) {
			return
		}
		im, lerr := loadGGUF(bytes.NewReader(raw), int64(len(raw)), "fuzz")
		m, rerr := ReadGGUF(bytes.NewReader(raw), int64(len(raw)), "fuzz")
		var want *Importance
		if rerr == nil {
			want, rerr = m.Importance("fuzz")
		}
		for _, err := range []error{lerr, rerr} {
			if err != nil && !pipeline.IsInputError(err) {
				t.Fatalf("error is not an input error: %v", err)
			}
		}
		if (lerr == nil) != (rerr == nil) {
			t.Fatalf("Load: %v; Read: %v", lerr, rerr)
		}
		if lerr != nil {
			return
		}
		if !reflect.DeepEqual(im.Names(), want.Names()) || im.Chunks != want.Chunks || !reflect.DeepEqual(im.Datasets, want.Datasets) {
			t.Fatalf("Load: %q %d %q; Read: %q %d %q", im.Names(), im.Chunks, im.Datasets, want.Names(), want.Chunks, want.Datasets)
		}
		for _, name := range im.Names() {
			a, err := im.Vector(name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			b, _ := want.Vector(name)
			n, _ := im.Size(name)
			if len(a) != len(b) || len(a) != n {
				t.Fatalf("%s: %d values (size %d), Read gives %d", name, len(a), n, len(b))
			}
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("%s[%d]: %g vs %g", name, i, a[i], b[i])
				}
			}
		}
	})
}

// TestWritersRefuseUnsortedEntries: both writers keep the Matrix invariant (entries sorted by name, names
// unique) instead of writing whatever order they are given; the legacy writer used to write unsorted and
// duplicate entries as they came.
func TestWritersRefuseUnsortedEntries(t *testing.T) {
	for _, c := range []struct {
		name string
		a, b string
	}{{"unsorted", "blk.1.w", "blk.0.w"}, {"duplicate", "blk.0.w", "blk.0.w"}} {
		m := &Matrix{Datasets: []string{"d"}, ChunkCount: 1, ChunkSize: 4, Entries: []Entry{
			{Name: c.a, Cols: 2, Sums: []float32{1, 2}, Counts: []float64{4}},
			{Name: c.b, Cols: 2, Sums: []float32{3, 4}, Counts: []float64{4}},
		}}
		var fe *FormatError
		if err := m.WriteGGUF(io.Discard); !errors.As(err, &fe) || !strings.Contains(err.Error(), c.b) {
			t.Errorf("%s: WriteGGUF: %v", c.name, err)
		}
		if _, err := m.WriteDat(io.Discard); !errors.As(err, &fe) || !strings.Contains(err.Error(), c.b) {
			t.Errorf("%s: WriteDat: %v", c.name, err)
		}
	}
}
