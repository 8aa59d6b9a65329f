package tinymodel

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"

	"github.com/phonellm/phonellm/internal/tokenizer/bytelevel"
)

type tokJSON struct {
	AddedTokens []struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		Special    bool   `json:"special"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	Normalizer   map[string]any `json:"normalizer"`
	PreTokenizer struct {
		Type          string `json:"type"`
		Pretokenizers []struct {
			Type     string            `json:"type"`
			Pattern  map[string]string `json:"pattern"`
			Behavior string            `json:"behavior"`
			UseRegex *bool             `json:"use_regex"`
		} `json:"pretokenizers"`
	} `json:"pre_tokenizer"`
	Decoder map[string]any `json:"decoder"`
	Model   struct {
		Type         string          `json:"type"`
		ByteFallback bool            `json:"byte_fallback"`
		Vocab        map[string]int  `json:"vocab"`
		Merges       json.RawMessage `json:"merges"`
	} `json:"model"`
}

func loadTokenizer(t *testing.T, dir string) (tokJSON, [][2]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tj tokJSON
	if err := json.Unmarshal(b, &tj); err != nil {
		t.Fatal(err)
	}
	var merges [][2]string
	var strs []string
	if err := json.Unmarshal(tj.Model.Merges, &strs); err == nil {
		for _, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				t.Fatalf("merge %q has no space", s)
			}
			merges = append(merges, [2]string{a, b})
		}
	} else if err := json.Unmarshal(tj.Model.Merges, &merges); err != nil {
		t.Fatal(err)
	}
	return tj, merges
}

// encode is a minimal reference of tokenizer.json BPE semantics (no added
// token splitting): NFC, regex split, byte-level map, merges by rank.
func bpeEncode(t *testing.T, tj tokJSON, merges [][2]string, text string) []int {
	re := regexp2.MustCompile(tj.PreTokenizer.Pretokenizers[0].Pattern["Regex"], regexp2.None)
	rank := map[[2]string]int{}
	for i, m := range merges {
		if _, ok := rank[m]; !ok {
			rank[m] = i
		}
	}
	pieces, err := pretokenize(re, norm.NFC.String(text))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, p := range pieces {
		var syms []string
		for _, r := range byteLevelString(p) {
			syms = append(syms, string(r))
		}
		for {
			best, at := -1, -1
			for i := 0; i+1 < len(syms); i++ {
				if r, ok := rank[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
					best, at = r, i
				}
			}
			if at < 0 {
				break
			}
			syms = append(syms[:at], append([]string{syms[at] + syms[at+1]}, syms[at+2:]...)...)
		}
		for _, s := range syms {
			id, ok := tj.Model.Vocab[s]
			if !ok {
				t.Fatalf("piece %q: symbol %q not in vocab", p, s)
			}
			ids = append(ids, id)
		}
	}
	return ids
}

func bpeDecode(tj tokJSON, ids []int) string {
	inv := map[int]string{}
	for s, id := range tj.Model.Vocab {
		inv[id] = s
	}
	unb := map[rune]byte{}
	for b, r := range bytelevel.Rune {
		unb[r] = byte(b)
	}
	var out []byte
	for _, id := range ids {
		for _, r := range inv[id] {
			out = append(out, unb[r])
		}
	}
	return string(out)
}

func TestTokenizerFiles(t *testing.T) {
	hashes := map[string]string{
		Qwen2Regex:  "1ff7f41064896984db5d1bb6ff64fa4bc29007d08c1b439e505b7392777a319e",
		Qwen35Regex: "00431aed57e696b747435f734d1e3b9b1bfd931a121fb5cac7129e97c181e9ba",
	}
	for _, name := range []string{"qwen2", "qwen3", "qwen35"} {
		t.Run(name, func(t *testing.T) {
			p, _ := Preset(name)
			dir := t.TempDir()
			if err := Generate(dir, p); err != nil {
				t.Fatal(err)
			}
			tj, merges := loadTokenizer(t, dir)
			if tj.Model.Type != "BPE" || tj.Model.ByteFallback || tj.Normalizer["type"] != "NFC" || tj.Decoder["type"] != "ByteLevel" {
				t.Errorf("model/normalizer/decoder: %+v %v %v", tj.Model.Type, tj.Normalizer, tj.Decoder)
			}
			pts := tj.PreTokenizer.Pretokenizers
			if tj.PreTokenizer.Type != "Sequence" || len(pts) != 2 || pts[0].Type != "Split" || pts[0].Behavior != "Isolated" ||
				pts[1].Type != "ByteLevel" || pts[1].UseRegex == nil || *pts[1].UseRegex {
				t.Fatalf("pre_tokenizer %+v", tj.PreTokenizer)
			}
			regex := pts[0].Pattern["Regex"]
			sum := sha256.Sum256([]byte(regex))
			wantRegex := Qwen2Regex
			if name == "qwen35" {
				wantRegex = Qwen35Regex
			}
			if regex != wantRegex || hex.EncodeToString(sum[:]) != hashes[wantRegex] {
				t.Errorf("regex %q (sha256 %x)", regex, sum)
			}
			if got := len(tj.Model.Vocab) + len(tj.AddedTokens); got != p.TokenizerSize {
				t.Errorf("%d tokens, want %d", got, p.TokenizerSize)
			}
			seen := map[int]bool{}
			for _, id := range tj.Model.Vocab {
				if id < 0 || id >= len(tj.Model.Vocab) || seen[id] {
					t.Fatalf("vocab id %d duplicated or out of range", id)
				}
				seen[id] = true
			}
			for i, a := range tj.AddedTokens {
				if a.ID != len(tj.Model.Vocab)+i || a.Normalized {
					t.Errorf("added token %+v", a)
				}
				wantSpecial := strings.HasPrefix(a.Content, "<|") && !strings.Contains(a.Content, "fim") && a.Content != "<|repo_name|>" && a.Content != "<|file_sep|>"
				if a.Special != wantSpecial {
					t.Errorf("%s special=%v", a.Content, a.Special)
				}
			}
			for _, m := range merges {
				for _, part := range []string{m[0], m[1], m[0] + m[1]} {
					if _, ok := tj.Model.Vocab[part]; !ok {
						t.Fatalf("merge %v: %q not in vocab", m, part)
					}
				}
			}
			if _, ok := tj.Model.Vocab["Ġ"]; !ok || tj.Model.Vocab["!"] != 0 {
				t.Error("byte-level alphabet missing or not in GPT-2 order")
			}
			// Round trip through the merges on text the corpus has and has not seen.
			for _, text := range []string{
				"The quick brown fox, RISK_LEVEL: 5",
				"안녕하세요 세계! 😀🚀 12345   spaces\n\n\ttab",
				"unseen wörds ЖЖЖ 🦀 x=1e9; it's",
				"e\u0301 (decomposed é)",
			} {
				ids := bpeEncode(t, tj, merges, text)
				if got := bpeDecode(tj, ids); got != norm.NFC.String(text) {
					t.Errorf("round trip %q -> %v -> %q", text, ids, got)
				}
				if len(ids) >= len(text) && text[0] == 'T' {
					t.Errorf("merges did not compress %q: %d ids", text, len(ids))
				}
			}

			var cfg map[string]any
			b, _ := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg["eos_token"] != "<|im_end|>" || cfg["pad_token"] != "<|endoftext|>" || cfg["bos_token"] != nil {
				t.Errorf("special tokens in tokenizer_config: %v %v %v", cfg["eos_token"], cfg["pad_token"], cfg["bos_token"])
			}
			tmpl, inConfig := cfg["chat_template"].(string)
			jinja, jerr := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
			if name == "qwen35" {
				if inConfig || jerr != nil {
					t.Errorf("qwen35: chat template in config=%v, jinja err=%v", inConfig, jerr)
				}
				tmpl = string(jinja)
			} else if !inConfig || jerr == nil {
				t.Errorf("chat template in config=%v, jinja file err=%v", inConfig, jerr)
			}
			for _, want := range []string{"<|im_start|>", "<|im_end|>", "add_generation_prompt", "tool_call"} {
				if !strings.Contains(tmpl, want) {
					t.Errorf("chat template lacks %q", want)
				}
			}
		})
	}
}

func TestConfigs(t *testing.T) {
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Generate(dir, p); err != nil {
				t.Fatal(err)
			}
			var root map[string]any
			b, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &root); err != nil {
				t.Fatal(err)
			}
			text := root
			if tc, ok := root["text_config"].(map[string]any); ok {
				text = tc
			}
			num := func(k string) float64 {
				v, ok := text[k].(float64)
				if !ok {
					t.Fatalf("config %s = %v", k, text[k])
				}
				return v
			}
			arch := root["architectures"].([]any)[0].(string)
			wantArch := map[string]string{Qwen2: "Qwen2ForCausalLM", Qwen3: "Qwen3ForCausalLM", Qwen3MoE: "Qwen3MoeForCausalLM",
				Qwen35: "Qwen3_5ForConditionalGeneration", Qwen35MoE: "Qwen3_5MoeForConditionalGeneration"}[p.Arch]
			if arch != wantArch {
				t.Errorf("architecture %s, want %s", arch, wantArch)
			}
			if num("hidden_size") != 256 || num("vocab_size") != 768 || num("num_hidden_layers") != float64(p.NumLayers) ||
				num("rms_norm_eps") != 1e-6 || num("max_position_embeddings") <= 0 || num("num_key_value_heads") != 2 {
				t.Errorf("config %v", text)
			}
			if text["tie_word_embeddings"] != p.TiedEmbeddings || root["tie_word_embeddings"] != p.TiedEmbeddings {
				t.Errorf("tie_word_embeddings %v", text["tie_word_embeddings"])
			}
			switch p.Arch {
			case Qwen2:
				if _, ok := text["head_dim"]; ok {
					t.Error("qwen2 config has head_dim")
				}
				if num("rope_theta") != 1e6 {
					t.Error("rope_theta")
				}
			case Qwen3, Qwen3MoE:
				if num("head_dim") != float64(p.HeadDim) {
					t.Error("head_dim")
				}
			case Qwen35, Qwen35MoE:
				rp := text["rope_parameters"].(map[string]any)
				if rp["partial_rotary_factor"] != 0.25 || rp["rope_theta"] != 1e7 || len(rp["mrope_section"].([]any)) != 3 {
					t.Errorf("rope_parameters %v", rp)
				}
				lt := text["layer_types"].([]any)
				if len(lt) != 4 || lt[0] != "linear_attention" || lt[3] != "full_attention" || text["attn_output_gate"] != true {
					t.Errorf("layer_types %v", lt)
				}
				if num("linear_num_key_heads") == num("linear_num_value_heads") || num("mtp_num_hidden_layers") != 1 {
					t.Error("linear heads / mtp")
				}
				if root["image_token_id"].(float64) < 674 {
					t.Error("image_token_id")
				}
			}
			if p.Arch == Qwen3MoE || p.Arch == Qwen35MoE {
				if num("num_experts") != 4 || num("num_experts_per_tok") != 2 || num("moe_intermediate_size") != 256 {
					t.Error("moe keys")
				}
			}
			var gen map[string]any
			b, _ = os.ReadFile(filepath.Join(dir, "generation_config.json"))
			if err := json.Unmarshal(b, &gen); err != nil || len(gen["eos_token_id"].([]any)) != 2 {
				t.Errorf("generation_config %v %v", gen, err)
			}
		})
	}
}

func TestTokenizerCapacity(t *testing.T) {
	s, _ := Preset("qwen35")
	s.TokenizerSize, s.VocabSize = maxTokenizerSize, maxTokenizerSize
	tok, err := BuildTokenizer(s)
	if err != nil || tok.Size() != maxTokenizerSize {
		t.Fatalf("max tokenizer size: %v", err)
	}
}
