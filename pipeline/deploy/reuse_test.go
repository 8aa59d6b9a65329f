package deploy_test

// Prompt reuse in a deployment: the phones' prompt cache sized by the fit check, the KV cache type, the
// warm-up prefixes (files, the workspace's warm: list, the gateway primed with them).

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

func knownQ4KM(t *testing.T, name string) fit.Shape {
	t.Helper()
	cands, err := fit.Known()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cands {
		if c.Name == name {
			q, _, err := c.Shape.Quantize(gguf.FileTypeQ4_K_M)
			if err != nil {
				t.Fatal(err)
			}
			return q
		}
	}
	t.Fatalf("no known shape %s", name)
	return fit.Shape{}
}

func argValue(args []string, flag string) (string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return "", false
	}
	return args[i+1], true
}

// TestPhoneArgs9B16GB is issue 17's acceptance case: a Qwen3.5-9B Q4_K_M on a 16 GB phone profile gets a
// host-memory prompt cache sized by the fit check (whole saved prompts: a slot's KV cells, its recurrent state
// and the checkpoints kept with it, within the headroom less the margin that keeps the verdict "fits"), the
// fit verdict counts it and still fits, and the bundle's llama-server arguments carry it with the checkpoints
// and the KV cache type. An 8,192-token slot (a 7,000-token review) leaves room for a saved prompt with a
// q8_0 KV cache, and a 4,096-token one with f16; 8,192 tokens in f16 leave 346 MiB beyond the margin, less
// than one saved prompt (457 MiB), so that plan has no prompt cache and says why, as has 16,384.
func TestPhoneArgs9B16GB(t *testing.T) {
	nine := knownQ4KM(t, "Qwen/Qwen3.5-9B")
	prof, err := fit.Builtin().Lookup("16gb")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ctx int
		kv  string
	}{{8192, "q8_0"}, {4096, ""}} {
		ctx, kv := c.ctx, c.kv
		b, err := fit.EstimateShape(nine, fit.Options{Ctx: ctx, Parallel: 1, Engine: fit.LlamaCpp, KVType: kv,
			Checkpoints: deploy.DefaultCtxCheckpoints})
		if err != nil {
			t.Fatal(err)
		}
		pc := fit.PlanPromptCache(b, prof, 3, deploy.DefaultCtxCheckpoints)
		withCache, v := fit.WithPromptCache(b, pc, prof)
		t.Logf("ctx %d, kv %q: model %.2f GB, prompt cache %d MiB (%s), verdict %s with %.2f GB headroom", ctx, kv, float64(b.Total)/1e9,
			pc.Bytes>>20, pc.Basis, v.Status, float64(v.Headroom)/1e9)
		wantPrompt := int64(ctx)*b.KVBytesPerCell + b.StateBytes*(1+deploy.DefaultCtxCheckpoints)
		switch {
		case pc.PromptBytes != wantPrompt || pc.Prompts < 1 || pc.Bytes < int64(pc.Prompts)*pc.PromptBytes || pc.Bytes%(1<<20) != 0:
			t.Fatalf("prompt cache %+v (one saved prompt should be %d bytes)", pc, wantPrompt)
		case !v.Fits || v.Tight || v.Needed != b.Total+pc.Bytes || withCache.Total != v.Needed:
			t.Fatalf("verdict with the cache: %+v", v)
		}
		spec := deploy.Spec{Name: "nine", Replicas: 2, Ctx: ctx, Slots: 1, KVType: kv, CacheRAM: pc.Bytes,
			CtxCheckpoints: deploy.DefaultCtxCheckpoints,
			Model:          deploy.ModelRef{ID: "nine", URL: "https://huggingface.co/x/y/resolve/main/m.gguf", Size: 5 << 30, SHA256: strings.Repeat("cd", 32)}}
		cfg := deploy.NewPhoneConfig(spec, "test")
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if got, _ := argValue(cfg.ExtraArgs, "--cache-ram"); got != strconv.FormatInt(pc.Bytes>>20, 10) || got == "0" {
			t.Errorf("--cache-ram %q, want %d MiB: %v", got, pc.Bytes>>20, cfg.ExtraArgs)
		}
		if got, _ := argValue(cfg.ExtraArgs, "--ctx-checkpoints"); got != "3" {
			t.Errorf("--ctx-checkpoints %q: %v", got, cfg.ExtraArgs)
		}
		k, hasK := argValue(cfg.ExtraArgs, "--cache-type-k")
		vv, hasV := argValue(cfg.ExtraArgs, "--cache-type-v")
		if (kv == "") == (hasK || hasV) || k != kv || vv != kv {
			t.Errorf("kv %q: cache type args %v", kv, cfg.ExtraArgs)
		}
	}
	// A budget without room for one saved prompt gets no cache, and says so.
	for _, ctx := range []int{8192, 16384} {
		tight, err := fit.EstimateShape(nine, fit.Options{Ctx: ctx, Parallel: 1, Engine: fit.LlamaCpp, Checkpoints: 3})
		if err != nil {
			t.Fatal(err)
		}
		if pc := fit.PlanPromptCache(tight, prof, 3, 3); pc.Bytes != 0 || !strings.Contains(pc.Basis, "no room") {
			t.Errorf("%d-token f16 context on 16gb: %+v", ctx, pc)
		}
	}
}

func TestReadWarm(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	good := write("rubric.txt", []byte("Rubric: weigh the evidence."))
	texts, err := deploy.ReadWarm([]string{good})
	if err != nil || len(texts) != 1 || texts[0] != "Rubric: weigh the evidence." {
		t.Fatalf("%v %v", texts, err)
	}
	for _, c := range []struct {
		path, want string
	}{
		{write("empty.txt", nil), "want a non-empty text"},
		{write("bin.txt", []byte{0xff, 0xfe, 'x'}), "not UTF-8"},
		{filepath.Join(dir, "absent.txt"), "no such file"},
		{dir, "not a regular file"},
	} {
		_, err := deploy.ReadWarm([]string{c.path})
		if err == nil || !pipeline.IsInputError(err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line input error naming it (%q)", c.path, err, c.want)
		}
	}
	big := write("big.txt", []byte(strings.Repeat("x", deploy.MaxWarmBytes/2+1)))
	if _, err := deploy.ReadWarm([]string{big, big}); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("two halves of the bound and a byte: %v", err)
	}
}

// TestRunWarmAndKVType: ship takes the workspace's warm: list and kv_cache, puts them in the spec (absolute
// paths), counts the quantized cache in the fit check, and sends each prefix once through its own gateway
// after the first answer.
func TestRunWarmAndKVType(t *testing.T) {
	model := tinyGGUF(t)
	ws, err := workspace.Init(t.TempDir(), workspace.Project{Name: "tiny", Warm: []string{"rubrics/a.txt"}, KVCache: "q8_0"}, false)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(ws.Root, "rubrics"), 0o755)
	rubric := "Rubric A: weigh the evidence and answer RISK_LEVEL."
	os.WriteFile(filepath.Join(ws.Root, "rubrics", "a.txt"), []byte(rubric), 0o644)
	var mu sync.Mutex
	var systems []string
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(deploy.GatewayIdentityHeader, "mine")
		var req struct {
			Messages []struct{ Role, Content string }
		}
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
			systems = append(systems, req.Messages[0].Content)
		}
		mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"message": map[string]string{"content": "ok"}}},
			"usage": map[string]any{"prompt_tokens": 40, "prompt_tokens_details": map[string]int{"cached_tokens": 33}}})
	}))
	defer gw.Close()
	tg := localLike(deploy.Gateway{URL: gw.URL, Identity: "mine"})
	res, err := deploy.Run(context.Background(), deploy.Options{Target: tg, Model: model, Workspace: ws}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := tg.reqs[0].Spec
	if spec.KVType != "q8_0" || len(spec.Warm) != 1 || spec.Warm[0] != filepath.Join(ws.Root, "rubrics", "a.txt") || spec.CacheRAM != 0 {
		t.Fatalf("spec %+v", spec)
	}
	if len(systems) != 1 || systems[0] != rubric || len(res.Warm) != 1 || res.Warm[0].CachedTokens != 33 {
		t.Fatalf("warm-up through the gateway: %q, result %+v", systems, res.Warm)
	}
	// A missing warm-up file fails before anything ships; a bad KV type is a spec error.
	tg = localLike(deploy.Gateway{URL: gw.URL, Identity: "mine"})
	if _, err := deploy.Run(context.Background(), deploy.Options{Target: tg, Model: model, Warm: []string{"/nonexistent/rubric.txt"}}, nil); err == nil ||
		!pipeline.IsInputError(err) || len(tg.reqs) != 0 {
		t.Fatalf("missing warm file: %v, %d ships", err, len(tg.reqs))
	}
	if _, err := deploy.Run(context.Background(), deploy.Options{Target: tg, Model: model, KVType: "q3_k"}, nil); err == nil || !pipeline.IsInputError(err) {
		t.Fatalf("bad kv type: %v", err)
	}
}
