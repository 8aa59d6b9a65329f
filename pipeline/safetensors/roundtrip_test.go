package safetensors

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

	"github.com/phonellm/phonellm/internal/half"
)

func ramp(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i)*scale - 3.25
	}
	return v
}

// writeSample writes a file with every interesting kind of entry and
// returns the plan and the float values written.
func writeSample(t *testing.T, path string, big bool) ([]WriteInfo, map[string][]float32) {
	t.Helper()
	plan := []WriteInfo{
		{"model.embed.weight", F32, []int64{5, 7}},
		{"half", F16, []int64{3, 4}},
		{"brain", BF16, []int64{2, 3, 2}},
		{"empty", F32, []int64{0, 4}},
		{"scalar", F32, nil},
		{"ids", I64, []int64{3}},
	}
	if big {
		plan = append(plan, WriteInfo{"big", F32, []int64{3, 100000}}) // larger than one read chunk
	}
	vals := map[string][]float32{
		"model.embed.weight": ramp(35, 0.5),
		"half":               ramp(12, 0.3),
		"brain":              ramp(12, 1.7),
		"empty":              {},
		"scalar":             {42},
	}
	if big {
		vals["big"] = ramp(300000, 1e-3)
	}
	w, err := Create(path, plan, map[string]string{"format": "pt", "note": "<&>"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plan {
		if p.Name == "ids" {
			raw := make([]byte, 24)
			for i := range 3 {
				binary.LittleEndian.PutUint64(raw[8*i:], uint64(i+10))
			}
			if err := w.WriteTensor("ids", raw); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if p.Name == "big" {
			// Stream in uneven pieces.
			s, err := w.StreamTensor("big")
			if err != nil {
				t.Fatal(err)
			}
			v := vals["big"]
			for len(v) > 0 {
				k := min(len(v), 77777)
				if _, err := EncodeFloat32(s, F32, v[:k]); err != nil {
					t.Fatal(err)
				}
				v = v[k:]
			}
			continue
		}
		if err := w.WriteFloat32(p.Name, vals[p.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	return plan, vals
}

func rounded(dt DType, v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		switch dt {
		case F16:
			out[i] = half.F16ToF32(half.F32ToF16(x))
		case BF16:
			out[i] = half.BF16ToF32(half.F32ToBF16(x))
		default:
			out[i] = x
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	plan, vals := writeSample(t, path, true)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if hl := binary.LittleEndian.Uint64(data); hl%8 != 0 {
		t.Errorf("header length %d not padded to 8", hl)
	}
	openers := map[string]func() (*File, error){
		"pread": func() (*File, error) { return Open(path) },
		"mmap":  func() (*File, error) { return OpenMmap(path) },
		"readerat": func() (*File, error) {
			return NewFile(bytes.NewReader(data), int64(len(data)), path)
		},
	}
	for oname, open := range openers {
		t.Run(oname, func(t *testing.T) {
			f, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if m := f.Metadata(); m["format"] != "pt" || m["note"] != "<&>" || len(m) != 2 {
				t.Errorf("metadata %v", m)
			}
			infos := f.Tensors()
			if len(infos) != len(plan) {
				t.Fatalf("%d tensors, want %d", len(infos), len(plan))
			}
			for i, p := range plan { // planned order == offset order
				ti := infos[i]
				if ti.Name != p.Name || ti.DType != p.DType || !reflect.DeepEqual(ti.Shape, append([]int64{}, p.Shape...)) || ti.Size != p.Size() || ti.File != path {
					t.Errorf("tensor %d = %+v, want %+v", i, ti, p)
				}
				if i > 0 && ti.Offset != infos[i-1].Offset+infos[i-1].Size {
					t.Errorf("tensor %s not contiguous", ti.Name)
				}
			}
			for name, v := range vals {
				ti, _ := f.Tensor(name)
				got, err := f.ReadFloat32(name, nil)
				if err != nil {
					t.Fatal(err)
				}
				if want := rounded(ti.DType, v); !reflect.DeepEqual(got, want) && len(want) > 0 {
					t.Errorf("%s: got %v..., want %v...", name, got[:min(4, len(got))], want[:min(4, len(want))])
				}
			}
			r, err := f.Raw("ids")
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(r)
			if binary.LittleEndian.Uint64(raw[16:]) != 12 {
				t.Errorf("ids raw = %v", raw)
			}
		})
	}
}

// TestReadElements reads element ranges (what were row blocks of shape[0] before "row" got its one meaning
// in pipeline.TensorInfo): rows 2..3 of a [5,7] tensor are elements 14..27.
func TestReadElements(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	_, vals := writeSample(t, path, true)
	c, err := OpenFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := make([]float32, 0, 1000)
	got, err := c.ReadElements("model.embed.weight", 14, 14, dst)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, vals["model.embed.weight"][14:28]) {
		t.Errorf("elements 14..27 = %v", got)
	}
	if &got[0] != &dst[:1][0] {
		t.Error("dst with enough capacity was not reused")
	}
	got, err = c.ReadElements("brain", 6, 6, nil)
	if err != nil || !reflect.DeepEqual(got, rounded(BF16, vals["brain"][6:12])) {
		t.Errorf("brain elements 6..11 = %v, %v", got, err)
	}
	got, err = c.ReadElements("big", 100000, 200000, nil)
	if err != nil || !reflect.DeepEqual(got, vals["big"][100000:]) {
		t.Errorf("big elements: %v", err)
	}
	if got, err := c.ReadElements("empty", 0, 0, nil); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
	for _, bad := range [][2]int64{{-1, 1}, {28, 14}, {0, 42}, {42, 0}, {14, math.MaxInt64}} {
		if _, err := c.ReadElements("model.embed.weight", bad[0], bad[1], nil); err == nil || !strings.Contains(err.Error(), "model.embed.weight") {
			t.Errorf("ReadElements(%v): %v, want error naming the tensor", bad, err)
		}
	}
	if _, err := c.ReadElements("scalar", 0, 2, nil); err == nil {
		t.Error("reading two elements of a scalar succeeded")
	}
	if _, err := c.ReadFloat32("nope", nil); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing tensor: %v", err)
	}
}

func TestWriterMisuse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.safetensors")
	plan := []WriteInfo{{"a", F32, []int64{2}}, {"b", BF16, []int64{3}}}
	if _, err := Create(path, []WriteInfo{{"a", F32, nil}, {"a", F32, nil}}, nil); err == nil {
		t.Error("duplicate names accepted")
	}
	if _, err := Create(path, []WriteInfo{{"a", "Q4", nil}}, nil); err == nil {
		t.Error("unknown dtype accepted")
	}
	if _, err := Create(path, []WriteInfo{{"a", F32, []int64{-1}}}, nil); err == nil {
		t.Error("negative dim accepted")
	}
	w, err := Create(path, plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFloat32("b", []float32{1, 2, 3}); err == nil {
		t.Error("out-of-order write accepted")
	}
	if err := w.WriteTensor("a", make([]byte, 7)); err == nil || !strings.Contains(err.Error(), "want 8") {
		t.Errorf("short tensor: %v", err)
	}
	s, err := w.StreamTensor("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(make([]byte, 9)); err == nil {
		t.Error("overlong stream write accepted")
	}
	s.Write(make([]byte, 4))
	if err := w.WriteFloat32("b", []float32{1, 2, 3}); err == nil {
		t.Error("next tensor started before the previous finished")
	}
	if err := w.Commit(); err == nil {
		t.Error("commit of an incomplete file succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed commit left files: %v", ents)
	}
	w, err = Create(path, plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteFloat32("a", []float32{1, 2})
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("abort left files: %v", ents)
	}
	// A successful commit reports size and sha256.
	w, _ = Create(path, plan, nil)
	w.WriteFloat32("a", []float32{1, 2})
	w.WriteFloat32("b", []float32{1, 2, 3})
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if w.Size() != st.Size() || len(w.SHA256()) != 64 {
		t.Errorf("size %d (file %d) sha %q", w.Size(), st.Size(), w.SHA256())
	}
	if err := w.Abort(); err != nil {
		t.Errorf("Abort after Commit: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Abort after Commit removed the file: %v", err)
	}
}

func TestSharded(t *testing.T) {
	dir := t.TempDir()
	var plan []WriteInfo
	for i := range 7 {
		plan = append(plan, WriteInfo{Name: "layers." + string(rune('a'+i)) + ".weight", DType: F32, Shape: []int64{int64(10 + i), 8}})
	}
	plan = append(plan, WriteInfo{Name: "huge", DType: BF16, Shape: []int64{1000}})
	shards := PlanShards(plan, 1000)
	for _, sh := range shards {
		var s int64
		for _, t := range sh {
			s += t.Size()
		}
		if s > 1000 && len(sh) > 1 {
			t.Errorf("shard of %d bytes with %d tensors", s, len(sh))
		}
	}
	if len(shards) < 3 {
		t.Fatalf("%d shards", len(shards))
	}
	names := ShardNames(len(shards))
	var total int64
	for i, sh := range shards {
		w, err := Create(filepath.Join(dir, names[i]), sh, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range sh {
			if err := w.WriteFloat32(p.Name, ramp(int(p.Size()/p.DType.Bits()*8), 1)); err != nil {
				t.Fatal(err)
			}
			total += p.Size()
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteIndex(dir, shards, names, total); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ts := c.Tensors()
	if len(ts) != len(plan) || c.TotalSize() != total || len(c.Files()) != len(shards) {
		t.Fatalf("%d tensors, total %d, %d files", len(ts), c.TotalSize(), len(c.Files()))
	}
	for i := 1; i < len(ts); i++ {
		if ts[i-1].Name >= ts[i].Name {
			t.Errorf("Tensors not sorted by name: %s, %s", ts[i-1].Name, ts[i].Name)
		}
	}
	got, err := c.ReadFloat32("layers.g.weight", nil)
	if err != nil || !reflect.DeepEqual(got, ramp(16*8, 1)) {
		t.Errorf("layers.g.weight: %v", err)
	}
	hi, _ := c.Tensor("huge")
	if filepath.Base(hi.File) != names[len(names)-1] {
		t.Errorf("huge in %s", hi.File)
	}
	c.Close()

	// An index that lies about where a tensor is, or names a shard outside
	// the directory, is a FormatError naming the index and the tensor.
	idxPath := filepath.Join(dir, IndexFileName)
	orig, _ := os.ReadFile(idxPath)
	lie := strings.Replace(string(orig), `"huge": "`+names[len(names)-1]+`"`, `"huge": "`+names[0]+`"`, 1)
	os.WriteFile(idxPath, []byte(lie), 0o644)
	_, err = OpenDir(dir)
	wantFormatErr(t, err, idxPath, "huge", "weight_map puts it in")
	escape := strings.Replace(string(orig), `"huge": "`+names[len(names)-1]+`"`, `"huge": "../evil.safetensors"`, 1)
	os.WriteFile(idxPath, []byte(escape), 0o644)
	_, err = OpenDir(dir)
	wantFormatErr(t, err, idxPath, "huge", "inside the model directory")
	ghost := strings.Replace(string(orig), `"weight_map": {`, `"weight_map": {"ghost": "`+names[0]+`",`, 1)
	os.WriteFile(idxPath, []byte(ghost), 0o644)
	_, err = OpenDir(dir)
	wantFormatErr(t, err, idxPath, "ghost", "no such tensor")
	os.WriteFile(idxPath, []byte(`{"metadata":{}}`), 0o644)
	_, err = OpenDir(dir)
	wantFormatErr(t, err, idxPath, "", "weight_map")
	// A missing shard is an error naming it.
	os.WriteFile(idxPath, orig, 0o644)
	os.Remove(filepath.Join(dir, names[1]))
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), names[1]) {
		t.Errorf("missing shard: %v", err)
	}
}

func TestOpenDirErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("empty dir: %v", err)
	}
	// Duplicate tensors across files.
	a := filepath.Join(dir, "a.safetensors")
	b := filepath.Join(dir, "b.safetensors")
	for _, p := range []string{a, b} {
		w, _ := Create(p, []WriteInfo{{"x", F32, []int64{1}}}, nil)
		w.WriteFloat32("x", []float32{1})
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := OpenFiles(a, b)
	wantFormatErr(t, err, b, "x", "also appears")
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatal(err)
	}
}

func TestPlanShards(t *testing.T) {
	if PlanShards(nil, 10) != nil {
		t.Error("no tensors should give no shards")
	}
	p := []WriteInfo{{"a", U8, []int64{6}}, {"b", U8, []int64{6}}, {"c", U8, []int64{20}}, {"d", U8, []int64{1}}}
	got := PlanShards(p, 10)
	var sizes []int
	for _, s := range got {
		sizes = append(sizes, len(s))
	}
	if !reflect.DeepEqual(sizes, []int{1, 1, 1, 1}) {
		t.Errorf("shard lengths %v", sizes)
	}
	if got := PlanShards(p, 0); len(got) != 1 || len(got[0]) != 4 {
		t.Errorf("unlimited: %v", got)
	}
	if got := PlanShards(p, 13); len(got) != 3 || len(got[0]) != 2 {
		t.Errorf("13: %v", got)
	}
	if !reflect.DeepEqual(ShardNames(2), []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) || ShardNames(1)[0] != "model.safetensors" {
		t.Error("ShardNames")
	}
}
