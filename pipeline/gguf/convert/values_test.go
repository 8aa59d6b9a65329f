package convert

import (
	"encoding/binary"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/gguf"
)

// TestValuesAgainstGenerator converts every preset (and a BF16 qwen35) to F32 and checks every tensor of the
// written file against the generator's own values, transformed here with whole-array operations (not the
// row plans of the package): the end-to-end path reader → plan → writer, for every transform.
func TestValuesAgainstGenerator(t *testing.T) {
	specs := tinymodel.Presets()
	q35, _ := tinymodel.Preset("qwen35")
	q35.Name, q35.DType = "qwen35-bf16", tinymodel.BF16
	specs = append(specs, q35)
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			dir := generate(t, spec)
			out := filepath.Join(t.TempDir(), "o.gguf")
			o := Options{Model: dir, Out: out, OutType: OutF32, KeepMTP: true}
			m, err := Load(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if _, err := Run(t.Context(), o, pipeline.Discard); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.OpenFile(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			lin := linearOf(t, m)
			for _, ti := range f.Tensors {
				mt, _ := m.Tensor(ti.Name)
				want := expectedValues(t, spec, ti.Name, mt.Sources, lin)
				r, err := f.TensorReader(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				raw, err := io.ReadAll(r)
				if err != nil {
					t.Fatal(err)
				}
				if len(raw) != 4*len(want) {
					t.Errorf("%s: %d bytes, want %d floats", ti.Name, len(raw), len(want))
					continue
				}
				for i, w := range want {
					if g := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); g != w {
						t.Errorf("%s[%d] = %v, want %v", ti.Name, i, g, w)
						break
					}
				}
			}
		})
	}
}

type linDims struct{ kh, vh, dk, dv int }

func linearOf(t *testing.T, m *Model) linDims {
	get := func(k string) int {
		v, ok := m.KV(m.Arch + "." + k)
		if !ok {
			return 0
		}
		n, _ := v.AsUint64()
		return int(n)
	}
	d := linDims{kh: get("ssm.group_count"), vh: get("ssm.time_step_rank"), dk: get("ssm.state_size")}
	if d.vh > 0 {
		d.dv = get("ssm.inner_size") / d.vh
	}
	return d
}

// expectedValues computes an output tensor from the generator's values of its sources.
func expectedValues(t *testing.T, spec tinymodel.Spec, name string, sources []string, d linDims) []float32 {
	t.Helper()
	var all [][]float32
	var shape []int64
	for _, s := range sources {
		v, sh, err := spec.TensorValues(s)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, v)
		shape = sh
	}
	var x []float32
	for _, v := range all {
		x = append(x, v...)
	}
	src := sources[0]
	if strings.HasSuffix(src, "gate_up_proj") { // [E, 2ff, d]: gate = first half of every expert
		e, ff, hid := int(shape[0]), int(shape[1])/2, int(shape[2])
		var y []float32
		off := 0
		if strings.Contains(name, "ffn_up_exps") {
			off = ff * hid
		}
		for i := 0; i < e; i++ {
			y = append(y, x[i*2*ff*hid+off:i*2*ff*hid+off+ff*hid]...)
		}
		x = y
	}
	qwen35 := strings.Contains(src, "language_model") || strings.HasPrefix(src, "mtp.")
	if qwen35 && d.kh != d.vh {
		r := d.vh / d.kh
		qk := 2 * d.kh * d.dk
		tile := func(v []float32, block int) []float32 { return tiled(chunks(v, block), d.kh, r) }
		switch {
		case strings.HasSuffix(name, "attn_qkv.weight"):
			x = append(append([]float32(nil), x[:qk*int(shape[1])]...), tile(x[qk*int(shape[1]):], d.dv*int(shape[1]))...)
		case strings.HasSuffix(name, "attn_gate.weight"):
			x = tile(x, d.dv*int(shape[1]))
		case strings.HasSuffix(name, "ssm_beta.weight"), strings.HasSuffix(name, "ssm_alpha.weight"):
			x = tile(x, int(shape[1]))
		case strings.HasSuffix(name, "ssm_a"), strings.HasSuffix(name, "ssm_dt.bias"):
			x = tile(x, 1)
		case strings.HasSuffix(name, "ssm_conv1d.weight"):
			k := int(shape[2])
			x = append(append([]float32(nil), x[:qk*k]...), tile(x[qk*k:], d.dv*k)...)
		case strings.HasSuffix(name, "ssm_out.weight"):
			var y []float32
			for _, row := range chunks(x, d.vh*d.dv) {
				y = append(y, tile(row, d.dv)...)
			}
			x = y
		}
	}
	// Zero-centred norms; mtp.pre_fc_norm_* are renamed to ...enorm/hnorm.weight before the +1 rule applies.
	if qwen35 && (strings.HasSuffix(src, "norm.weight") || strings.HasPrefix(src, "mtp.pre_fc_norm_")) && !strings.HasSuffix(src, "linear_attn.norm.weight") {
		for i := range x {
			x[i]++
		}
	}
	if strings.HasSuffix(src, ".A_log") {
		for i := range x {
			x[i] = float32(-math.Exp(float64(x[i])))
		}
	}
	return x
}
