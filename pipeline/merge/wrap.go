package merge

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// Report says what a merge does to each base tensor.
type Report struct {
	Tensors []TensorReport `json:"tensors"` // tensors that change, sorted by name
	Untied  bool           `json:"untied"`  // lm_head was untied from the embedding (tie_word_embeddings=false)
	Notes   []string       `json:"notes,omitempty"`
}

// TensorReport lists the steps applied to one tensor, in order.
type TensorReport struct {
	Name  string         `json:"name"`
	DType pipeline.DType `json:"dtype"`
	Shape []int64        `json:"shape"`
	From  string         `json:"from,omitempty"` // base tensor the initial value comes from, when not Name
	Ops   []OpReport     `json:"ops"`
}

// OpReport is one adapter's step on a tensor.
type OpReport struct {
	Adapter string   `json:"adapter"`
	Module  string   `json:"module"`
	Kind    string   `json:"kind"` // "lora", "dora", "lora-bias", "replace"
	Formula string   `json:"formula"`
	Rank    int      `json:"rank,omitempty"`
	Alpha   float64  `json:"alpha,omitempty"`
	Scale   float64  `json:"scale,omitempty"`
	Tensors []string `json:"tensors"` // adapter tensors used
}

// Source is a base checkpoint with adapters merged in, readable row block by row block. It is safe for
// concurrent use.
type Source struct {
	base     pipeline.TensorSource
	adapters []Adapter
	infos    []pipeline.TensorInfo
	plans    map[string]*plan
	cache    *factorCache
	f32s     freeList[float32]       // row scratch of the float32 path
	outs     freeList[byte]          // encoded row blocks
	raw      *safetensors.Checkpoint // the base's files, when the output stage reads them directly
	maps     *baseMaps               // raw's files mapped, shared with the provenance hash (Run)
	// blockBytes is the float32 size of the row blocks the output stage and the DoRA pass work in
	// (defaultBlockBytes; tests make it small to exercise sub-blocks).
	blockBytes int
}

var _ pipeline.TensorSource = (*Source)(nil)

// Wrap checks adapters against base and returns the merged model as a TensorSource, with a report of what
// changes. baseConfig is the base's config.json (tie_word_embeddings, quantization_config). Every adapter
// tensor is read once here (NaN/Inf and all-zero checks), so a bad adapter fails before any output exists.
// The adapters must stay open while the Source is used.
func Wrap(ctx context.Context, base pipeline.TensorSource, baseConfig map[string]any, adapters []Adapter) (*Source, *Report, error) {
	if len(adapters) == 0 {
		return nil, nil, fmt.Errorf("merge: no adapters to merge")
	}
	if err := checkNotQuantized("base", baseConfig); err != nil {
		return nil, nil, err
	}
	p := &planner{base: map[string]pipeline.TensorInfo{}, plans: map[string]*plan{}, adapters: adapters, zero: map[string]bool{}}
	for _, t := range base.Tensors() {
		p.base[t.Name] = t
	}
	p.embed = findEmbedding(p.base)
	p.tieFlag = tieFlag(baseConfig)
	if _, hasHead := p.base[lmHead]; !hasHead && p.embed != "" && p.tieFlag {
		p.tied = true
		h := p.base[p.embed]
		h.Name = lmHead
		p.base[lmHead] = h
	}
	for i := range adapters {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if adapters[i].st == nil || adapters[i].Config == nil {
			return nil, nil, fmt.Errorf("merge: adapter %d (%q) is not open (use OpenAdapter)", i, adapters[i].Dir)
		}
		if err := p.addAdapter(i); err != nil {
			return nil, nil, err
		}
	}
	untied, err := p.finishTied()
	if err != nil {
		return nil, nil, err
	}
	for name, pl := range p.plans {
		if err := checkFloat(pl, name); err != nil {
			return nil, nil, err
		}
	}
	if err := p.scan(ctx); err != nil {
		return nil, nil, err
	}
	s := &Source{base: base, adapters: adapters, plans: p.plans, cache: newFactorCache(defaultCacheBytes),
		f32s: newFreeList[float32](8), outs: newFreeList[byte](8), blockBytes: defaultBlockBytes}
	s.infos = slices.Clone(base.Tensors())
	if untied && p.tied {
		s.infos = append(s.infos, p.plans[lmHead].info)
		slices.SortFunc(s.infos, func(a, b pipeline.TensorInfo) int { return strings.Compare(a.Name, b.Name) })
	}
	return s, p.report(untied), nil
}

// checkFloat makes sure a tensor that changes is a float tensor the merge can round back to.
func checkFloat(pl *plan, name string) error {
	switch pl.info.DType {
	case pipeline.F32, pipeline.F16, pipeline.BF16:
		return nil
	}
	return unsupported("base", "tensor %q is %s: the adapter changes it, but only F32/F16/BF16 weights can be merged (a quantized base? merge into the 16-bit original)", name, pl.info.DType)
}

// findEmbedding returns the text model's input embedding tensor.
func findEmbedding(base map[string]pipeline.TensorInfo) string {
	for _, pre := range layoutPrefixes {
		if _, ok := base[pre+"embed_tokens.weight"]; ok {
			return pre + "embed_tokens.weight"
		}
	}
	return ""
}

// tieFlag is tie_word_embeddings of config.json (or its text_config); transformers' default is true.
func tieFlag(cfg map[string]any) bool {
	if v, ok := cfg["tie_word_embeddings"].(bool); ok {
		return v
	}
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		if v, ok := tc["tie_word_embeddings"].(bool); ok {
			return v
		}
	}
	return true
}

// UntiedConfig returns a copy of config.json's map with tie_word_embeddings=false (also in text_config when
// it is set there), for a merge whose Report says Untied.
func UntiedConfig(cfg map[string]any) map[string]any {
	out := make(map[string]any, len(cfg)+1)
	for k, v := range cfg {
		out[k] = v
	}
	out["tie_word_embeddings"] = false
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		c := make(map[string]any, len(tc))
		for k, v := range tc {
			c[k] = v
		}
		if _, set := tc["tie_word_embeddings"]; set {
			c["tie_word_embeddings"] = false
		}
		out["text_config"] = c
	}
	return out
}

// checkNotQuantized refuses a base whose config.json declares a quantization.
func checkNotQuantized(path string, cfg map[string]any) error {
	qc, ok := cfg["quantization_config"].(map[string]any)
	if !ok {
		if tc, ok2 := cfg["text_config"].(map[string]any); ok2 {
			qc, ok = tc["quantization_config"].(map[string]any)
		}
	}
	if !ok {
		return nil
	}
	method, _ := qc["quant_method"].(string)
	what := method
	if b, _ := qc["load_in_4bit"].(bool); b {
		what += " 4-bit"
	} else if b, _ := qc["load_in_8bit"].(bool); b {
		what += " 8-bit"
	}
	return unsupported(path, "the base is quantized (quantization_config: %s). Merging a LoRA into quantized weights bakes the quantization error into the result and degrades quality (peft#2321, unsloth#2374); merge into the 16-bit base the adapter was trained from (adapter_config.json base_model_name_or_path names it) and quantize afterwards", strings.TrimSpace(what))
}

// Tensors lists the merged model's tensors, sorted by name (the base's, plus lm_head.weight when untied).
func (s *Source) Tensors() []pipeline.TensorInfo { return s.infos }

// Changed reports whether a tensor differs from the base's.
func (s *Source) Changed(name string) bool { return s.plans[name] != nil }

// ReadRows returns rows [row0, row0+n) of a merged tensor as float32. Changed tensors are computed as [Run]
// computes them (see the package documentation) and rounded once to their dtype, so the values are exactly
// what a merged checkpoint stores.
func (s *Source) ReadRows(ctx context.Context, name string, row0, n int64, dst []float32) ([]float32, error) {
	pl := s.plans[name]
	if pl == nil {
		return s.base.ReadRows(ctx, name, row0, n, dst)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, cols := pl.info.Rows(), pl.info.RowLen()
	if row0 < 0 || n < 0 || row0 > rows || n > rows-row0 {
		return nil, fmt.Errorf("merge: tensor %q: rows [%d, %d) outside its %d rows", name, row0, row0+n, rows)
	}
	if int64(cap(dst)) >= n*cols {
		dst = dst[:n*cols]
	} else {
		dst = make([]float32, n*cols)
	}
	// Sub-blocks keep the float64 scratch small whatever n the caller asks for.
	per := max(1, int64(s.blockBytes)/(4*max(cols, 1)))
	for r := row0; r < row0+n; r += per {
		k := min(per, row0+n-r)
		part := dst[(r-row0)*cols : (r-row0+k)*cols]
		if fastPlan(pl) {
			bp := s.outs.get(2 * k * cols)
			b := *bp
			err := s.rows16(ctx, pl, r, k, b)
			if err == nil {
				decode16(pl.info.DType, part, b)
			}
			s.outs.put(bp)
			if err != nil {
				return nil, err
			}
			continue
		}
		err := s.rows(ctx, pl, r, k, func(x []float64) error {
			if j := roundBlock(pl.info.DType, part, x); j >= 0 {
				return notFinite(pl, r, cols, j, x[j])
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func (p *planner) report(untied bool) *Report {
	r := &Report{Untied: untied, Notes: p.notes}
	names := make([]string, 0, len(p.plans))
	for k := range p.plans {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		pl := p.plans[name]
		tr := TensorReport{Name: name, DType: pl.info.DType, Shape: pl.info.Shape}
		if pl.src != name {
			tr.From = pl.src
		}
		for _, o := range pl.ops {
			tr.Ops = append(tr.Ops, p.opReport(o))
		}
		if tr.Ops == nil {
			tr.Ops = []OpReport{}
		}
		r.Tensors = append(r.Tensors, tr)
	}
	return r
}

func (p *planner) opReport(o op) OpReport {
	a := p.adapters[o.ad]
	or := OpReport{Adapter: a.Dir, Module: o.module, Kind: opNames[o.kind], Tensors: []string{o.a}}
	if o.kind == opReplace {
		or.Formula = "W' = saved tensor (modules_to_save / saved base layer or bias)"
		return or
	}
	or.Rank, or.Alpha, or.Scale = o.rank, o.alpha, o.scale
	sc := fmt.Sprintf("%g/%d", o.alpha, o.rank)
	if a.Config.RSLoRA {
		sc = fmt.Sprintf("%g/√%d", o.alpha, o.rank)
	}
	if a.Weight != 1 {
		sc = fmt.Sprintf("%g·%s", a.Weight, sc)
	}
	if o.rankKey != "" || o.alphaKey != "" {
		sc += fmt.Sprintf(" (rank_pattern %q, alpha_pattern %q)", o.rankKey, o.alphaKey)
	}
	prod := "B·A"
	switch {
	case o.embedding:
		prod = "(B·A)ᵀ"
	case o.transposed:
		prod = "(B·A)ᵀ [fan_in_fan_out]"
	}
	switch o.kind {
	case opLoRA:
		or.Tensors = append(or.Tensors, o.b)
		or.Formula = fmt.Sprintf("W' = W + s·%s, s = %s = %g", prod, sc, o.scale)
	case opDoRARow, opDoRACol:
		or.Tensors = append(or.Tensors, o.b, o.mag)
		axis := "per output row"
		if o.kind == opDoRACol {
			axis = "per column"
		}
		or.Formula = fmt.Sprintf("V = W + s·%s, s = %s = %g; W' = m·V/‖V‖ (norm %s)", prod, sc, o.scale, axis)
	case opAddVec:
		or.Formula = fmt.Sprintf("b' = b + s·lora_B.bias, s = %s = %g", sc, o.scale)
	}
	return or
}

// finite reports whether v is neither NaN nor ±Inf.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// factorCache keeps the loaded factors of recently read tensors, bounded in bytes; a tensor read by several
// goroutines is loaded once.
type factorCache struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	tick    int64
	entries map[string]*cacheEntry
}

type cacheEntry struct {
	once sync.Once
	ld   *loaded
	err  error
	last int64
}

// defaultCacheBytes bounds the factors kept between reads (each tensor's are small: (rows+cols)·r·8 bytes).
const defaultCacheBytes = 256 << 20

func newFactorCache(limit int64) *factorCache {
	return &factorCache{limit: limit, entries: map[string]*cacheEntry{}}
}

func (c *factorCache) get(ctx context.Context, s *Source, pl *plan) (*loaded, error) {
	c.mu.Lock()
	e := c.entries[pl.info.Name]
	if e == nil {
		e = &cacheEntry{}
		c.entries[pl.info.Name] = e
	}
	c.tick++
	e.last = c.tick
	c.mu.Unlock()
	e.once.Do(func() {
		ld, err := s.load(ctx, pl)
		c.mu.Lock()
		defer c.mu.Unlock()
		e.ld, e.err = ld, err
		if err != nil {
			if c.entries[pl.info.Name] == e {
				delete(c.entries, pl.info.Name) // a cancelled load can be retried
			}
			return
		}
		if c.entries[pl.info.Name] == e {
			c.used += ld.bytes
			c.evict(pl.info.Name)
		}
	})
	return e.ld, e.err
}

// evict drops the least recently used entries (never keep) until the cache fits. Readers holding an evicted
// entry keep using it; it is freed when they are done.
func (c *factorCache) evict(keep string) {
	for c.used > c.limit {
		var victim string
		var oldest int64 = math.MaxInt64
		for name, e := range c.entries {
			if name != keep && e.ld != nil && e.last < oldest {
				victim, oldest = name, e.last
			}
		}
		if victim == "" {
			return
		}
		c.used -= c.entries[victim].ld.bytes
		delete(c.entries, victim)
	}
}

// Release drops a tensor's cached factors (the output stage calls it once a tensor is written).
func (s *Source) Release(name string) {
	c := s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[name]; e != nil && e.ld != nil {
		c.used -= e.ld.bytes
		delete(c.entries, name)
	}
}
