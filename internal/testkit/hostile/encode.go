package hostile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/phonellm/phonellm/pipeline/gguf"
)

// model is a GGUF file taken apart so that any field can be changed, including into things the gguf package's
// writer refuses to write: wrong type tags, counts that do not match, offsets that overlap, bytes that are not
// UTF-8. encode puts it back together.
type model struct {
	magic    []byte // "GGUF" unless changed
	version  uint32
	kvs      []kv
	tensors  []tensor
	tensorsΔ int64 // added to the tensor count written in the header
	kvsΔ     int64 // added to the metadata count written in the header
}

// kv is one metadata entry: a value, or raw bytes written after the key (type tag included).
type kv struct {
	key string
	val gguf.Value
	raw []byte
}

// tensor is one tensor info with its data.
type tensor struct {
	name    string
	typ     uint32 // ggml type id (may be unknown)
	shape   []uint64
	data    []byte
	offset  *uint64 // written instead of the computed offset
	ndims   *uint32 // written instead of len(shape)
	noFixup bool    // keep data as is even when its length does not match type and shape
}

func (m *model) clone() *model {
	c := *m
	c.magic = slices.Clone(m.magic)
	c.kvs = slices.Clone(m.kvs)
	c.tensors = make([]tensor, len(m.tensors))
	for i, t := range m.tensors {
		t.shape = slices.Clone(t.shape)
		c.tensors[i] = t // data is shared: mutators that change bytes replace the slice
	}
	return &c
}

func (m *model) kvIndex(key string) int {
	for i, e := range m.kvs {
		if e.key == key {
			return i
		}
	}
	return -1
}

func (m *model) get(key string) (gguf.Value, bool) {
	if i := m.kvIndex(key); i >= 0 && m.kvs[i].raw == nil {
		return m.kvs[i].val, true
	}
	return gguf.Value{}, false
}

// set replaces key's value, or appends it.
func (m *model) set(key string, v gguf.Value) {
	if i := m.kvIndex(key); i >= 0 {
		m.kvs[i] = kv{key: key, val: v}
		return
	}
	m.kvs = append(m.kvs, kv{key: key, val: v})
}

func (m *model) setRaw(key string, raw []byte) {
	if i := m.kvIndex(key); i >= 0 {
		m.kvs[i] = kv{key: key, raw: raw}
		return
	}
	m.kvs = append(m.kvs, kv{key: key, raw: raw})
}

func (m *model) del(key string) {
	if i := m.kvIndex(key); i >= 0 {
		m.kvs = slices.Delete(m.kvs, i, i+1)
	}
}

func (m *model) arch() string {
	v, _ := m.get("general.architecture")
	s, _ := v.V.(string)
	return s
}

func (m *model) tensorIndex(name string) int {
	for i, t := range m.tensors {
		if t.name == name {
			return i
		}
	}
	return -1
}

func (m *model) tensor(name string) *tensor {
	if i := m.tensorIndex(name); i >= 0 {
		return &m.tensors[i]
	}
	return nil
}

// maxData bounds the bytes of one tensor a mutant materializes; a tensor whose type and shape say more is
// written without data (the file then ends early, as a truncated download would).
const maxData = 64 << 20

// size is the byte size type and shape imply, and whether it is computable and small enough to materialize.
func size(typ uint32, shape []uint64) (uint64, bool) {
	t := gguf.Type(typ)
	bs, bb := t.BlockSize(), t.BlockBytes()
	if bs == 0 || len(shape) == 0 {
		return 0, false
	}
	n := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	if shape[0]%uint64(bs) != 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(n/uint64(bs), uint64(bb))
	if hi != 0 || lo > maxData {
		return lo, false
	}
	return lo, true
}

// fixup resizes t.data to what its type and shape imply: kept bytes first, then zeros (zero is a finite
// value in every float and block format).
func (t *tensor) fixup() {
	if t.noFixup {
		return
	}
	n, ok := size(t.typ, t.shape)
	if !ok {
		t.data = nil
		return
	}
	if uint64(len(t.data)) == n {
		return
	}
	d := make([]byte, n)
	copy(d, t.data)
	t.data = d
}

// encode writes the model as GGUF bytes. Offsets are the running sum of the padded data sizes (what every
// reader expects) unless a tensor forces its own.
func (m *model) encode() []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	w32 := func(v uint32) { binary.Write(&b, le, v) }
	w64 := func(v uint64) { binary.Write(&b, le, v) }
	str := func(s string) { w64(uint64(len(s))); b.WriteString(s) }

	b.Write(m.magic)
	w32(m.version)
	w64(uint64(int64(len(m.tensors)) + m.tensorsΔ))
	w64(uint64(int64(len(m.kvs)) + m.kvsΔ))
	align := uint64(gguf.DefaultAlignment)
	for _, e := range m.kvs {
		str(e.key)
		if e.raw != nil {
			b.Write(e.raw)
			continue
		}
		w32(uint32(e.val.Type))
		encodeValue(&b, e.val.Type, e.val.V)
		if a, ok := e.val.V.(uint32); ok && e.key == "general.alignment" && a != 0 && a&(a-1) == 0 {
			align = uint64(a)
		}
	}
	for i := range m.tensors {
		m.tensors[i].fixup()
	}
	var off uint64
	offsets := make([]uint64, len(m.tensors))
	for i, t := range m.tensors {
		offsets[i] = off
		n, ok := size(t.typ, t.shape)
		if !ok && n == 0 {
			n = uint64(len(t.data))
		}
		if t.noFixup {
			n = uint64(len(t.data))
		}
		off += pad(n, align)
	}
	for i, t := range m.tensors {
		str(t.name)
		nd := uint32(len(t.shape))
		if t.ndims != nil {
			nd = *t.ndims
		}
		w32(nd)
		for _, d := range t.shape {
			w64(d)
		}
		w32(t.typ)
		if t.offset != nil {
			w64(*t.offset)
		} else {
			w64(offsets[i])
		}
	}
	for b.Len()%int(align) != 0 && len(m.tensors) > 0 {
		b.WriteByte(0)
	}
	for _, t := range m.tensors {
		b.Write(t.data)
		for b.Len()%int(align) != 0 {
			b.WriteByte(0)
		}
	}
	return b.Bytes()
}

func pad(x, n uint64) uint64 { return (x + n - 1) / n * n }

// encodeValue writes one value (not its type tag) in GGUF's little-endian layout.
func encodeValue(b *bytes.Buffer, t gguf.ValueType, x any) {
	le := binary.LittleEndian
	switch t {
	case gguf.ValueString:
		s := x.(string)
		binary.Write(b, le, uint64(len(s)))
		b.WriteString(s)
	case gguf.ValueArray:
		a := x.(gguf.Array)
		binary.Write(b, le, uint32(a.Elem))
		binary.Write(b, le, uint64(a.Len()))
		switch v := a.Values.(type) {
		case []string:
			for _, s := range v {
				binary.Write(b, le, uint64(len(s)))
				b.WriteString(s)
			}
		case []gguf.Array:
			for _, inner := range v {
				encodeValue(b, gguf.ValueArray, inner)
			}
		case []bool:
			for _, x := range v {
				if x {
					b.WriteByte(1)
				} else {
					b.WriteByte(0)
				}
			}
		default:
			binary.Write(b, le, v) // typed numeric slices
		}
	case gguf.ValueBool:
		if x.(bool) {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	default:
		binary.Write(b, le, x)
	}
}

// rawValue is the bytes of a value with an explicit type tag, for entries the typed encoder cannot express.
func rawValue(tag uint32, payload ...[]byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, tag)
	for _, p := range payload {
		b.Write(p)
	}
	return b.Bytes()
}

func u32le(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// decode takes a GGUF produced by phonellm apart (it must be well formed).
func decode(data []byte) (*model, error) {
	f, err := gguf.Open(bytes.NewReader(data), int64(len(data)), "base")
	if err != nil {
		return nil, err
	}
	m := &model{magic: []byte(gguf.Magic), version: f.Version}
	for _, e := range f.KVs {
		m.kvs = append(m.kvs, kv{key: e.Key, val: e.Value})
	}
	for _, t := range f.Tensors {
		start := f.DataOffset + int64(t.Offset)
		end := start + int64(t.Size())
		if end > int64(len(data)) {
			return nil, fmt.Errorf("hostile: base tensor %s beyond the data", t.Name)
		}
		m.tensors = append(m.tensors, tensor{name: t.Name, typ: uint32(t.Type), shape: slices.Clone(t.Shape), data: data[start:end:end]})
	}
	return m, nil
}

// f32s returns n little-endian float32 values v as bytes.
func f32bytes(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}
