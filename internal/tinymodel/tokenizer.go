package tinymodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// addedToken is one of Qwen's added tokens, in id order after the BPE
// vocabulary (Qwen2.5/Qwen3 ids 151643-151668, Qwen3.5 248044-248069).
type addedToken struct {
	content string
	special bool // tokenizer.json "special"; <think>, <tool_call>, fim tokens etc. are not
}

var specialTokens = []addedToken{
	{"<|endoftext|>", true},
	{"<|im_start|>", true},
	{"<|im_end|>", true},
	{"<|object_ref_start|>", true},
	{"<|object_ref_end|>", true},
	{"<|box_start|>", true},
	{"<|box_end|>", true},
	{"<|quad_start|>", true},
	{"<|quad_end|>", true},
	{"<|vision_start|>", true},
	{"<|vision_end|>", true},
	{"<|vision_pad|>", true},
	{"<|image_pad|>", true},
	{"<|video_pad|>", true},
	{"<tool_call>", false},
	{"</tool_call>", false},
	{"<|fim_prefix|>", false},
	{"<|fim_middle|>", false},
	{"<|fim_suffix|>", false},
	{"<|fim_pad|>", false},
	{"<|repo_name|>", false},
	{"<|file_sep|>", false},
	{"<tool_response>", false},
	{"</tool_response>", false},
	{"<think>", false},
	{"</think>", false},
}

// Tokenizer is what Generate learned for a spec: the BPE token strings in
// id order (byte-level form), the merges by rank, and the added tokens.
type Tokenizer struct {
	Tokens  []string    // ids 0..len-1 of the BPE model's vocab
	Merges  [][2]string // by rank
	Added   []string    // added tokens, ids len(Tokens)...
	Special []bool      // parallel to Added
	Regex   string      // the Split pre-tokenizer's regex
}

// TokenID returns the id of an added token (or BPE token), or -1.
func (t *Tokenizer) TokenID(s string) int {
	for i, a := range t.Added {
		if a == s {
			return len(t.Tokens) + i
		}
	}
	for i, tok := range t.Tokens {
		if tok == s {
			return i
		}
	}
	return -1
}

// Size is the number of tokens the tokenizer defines.
func (t *Tokenizer) Size() int { return len(t.Tokens) + len(t.Added) }

// BuildTokenizer trains (or fetches from cache) the tokenizer of a
// normalized spec.
func BuildTokenizer(s Spec) (*Tokenizer, error) {
	regex := Qwen2Regex
	if s.isQwen35() {
		regex = Qwen35Regex
	}
	// Merges may produce a token that already exists, so train until the
	// vocabulary (not the merge list) reaches the wanted size.
	want := s.TokenizerSize - len(specialTokens)
	m, err := trainBPEVocab(regex, want)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{Tokens: m.tokens, Merges: m.merges, Regex: regex}
	for _, a := range specialTokens {
		t.Added = append(t.Added, a.content)
		t.Special = append(t.Special, a.special)
	}
	return t, nil
}

// trainBPEVocab trains until the vocabulary holds exactly size tokens.
func trainBPEVocab(regex string, size int) (*bpeModel, error) {
	n := size - 256
	for {
		m, err := trainBPE(regex, n)
		if err != nil {
			return nil, err
		}
		if len(m.tokens) >= size {
			return m, nil
		}
		n += size - len(m.tokens)
	}
}

// orderedObject marshals as a JSON object with keys in insertion order.
type orderedObject []kv

type kv struct {
	k string
	v any
}

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshal(e.k)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := marshal(e.v)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping (as Python's json writes).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// indentJSON marshals v with 2-space indentation and a final newline.
func indentJSON(v any) ([]byte, error) {
	raw, err := marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func byteLevelOpts(trimOffsets bool) orderedObject {
	return orderedObject{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", trimOffsets}, {"use_regex", false}}
}

// tokenizerJSON renders tokenizer.json in the layout of the real Qwen files:
// added_tokens, NFC normalizer, Sequence[Split(regex, Isolated),
// ByteLevel(use_regex=false)] pre-tokenizer, ByteLevel post-processor and
// decoder, and a BPE model with the vocab in id order. Merges are written as
// "a b" strings (Qwen2/Qwen3 files) or, for Qwen3.5, as [a, b] pairs (the
// format tokenizers >= 0.20 writes).
func tokenizerJSON(s Spec, t *Tokenizer) ([]byte, error) {
	var added []any
	for i, a := range t.Added {
		added = append(added, orderedObject{
			{"id", len(t.Tokens) + i}, {"content", a}, {"single_word", false}, {"lstrip", false},
			{"rstrip", false}, {"normalized", false}, {"special", t.Special[i]},
		})
	}
	vocab := make(orderedObject, len(t.Tokens))
	for i, tok := range t.Tokens {
		vocab[i] = kv{tok, i}
	}
	var merges any
	if s.isQwen35() {
		pairs := make([][2]string, len(t.Merges))
		copy(pairs, t.Merges)
		merges = pairs
	} else {
		strs := make([]string, len(t.Merges))
		for i, m := range t.Merges {
			strs[i] = m[0] + " " + m[1]
		}
		merges = strs
	}
	doc := orderedObject{
		{"version", "1.0"},
		{"truncation", nil},
		{"padding", nil},
		{"added_tokens", added},
		{"normalizer", orderedObject{{"type", "NFC"}}},
		{"pre_tokenizer", orderedObject{
			{"type", "Sequence"},
			{"pretokenizers", []any{
				orderedObject{{"type", "Split"}, {"pattern", orderedObject{{"Regex", t.Regex}}}, {"behavior", "Isolated"}, {"invert", false}},
				byteLevelOpts(false),
			}},
		}},
		{"post_processor", byteLevelOpts(false)},
		{"decoder", byteLevelOpts(false)},
		{"model", orderedObject{
			{"type", "BPE"}, {"dropout", nil}, {"unk_token", nil}, {"continuing_subword_prefix", ""},
			{"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
			{"vocab", vocab}, {"merges", merges},
		}},
	}
	return indentJSON(doc)
}

// tokenizerConfigJSON renders tokenizer_config.json. The chat template goes
// here except for Qwen3.5, whose checkpoints ship it as chat_template.jinja
// (so both places a converter must look are exercised).
func tokenizerConfigJSON(s Spec, t *Tokenizer) ([]byte, error) {
	dec := orderedObject{}
	var extra []string
	for i, a := range t.Added {
		dec = append(dec, kv{strconv.Itoa(len(t.Tokens) + i), orderedObject{
			{"content", a}, {"lstrip", false}, {"normalized", false}, {"rstrip", false},
			{"single_word", false}, {"special", t.Special[i]},
		}})
		if t.Special[i] && a != "<|endoftext|>" {
			extra = append(extra, a)
		}
	}
	doc := orderedObject{
		{"add_bos_token", false},
		{"add_prefix_space", false},
		{"added_tokens_decoder", dec},
		{"additional_special_tokens", extra},
		{"bos_token", nil},
	}
	if !s.isQwen35() {
		doc = append(doc, kv{"chat_template", chatTemplate(s)})
	}
	doc = append(doc,
		kv{"clean_up_tokenization_spaces", false},
		kv{"eos_token", "<|im_end|>"},
		kv{"errors", "replace"},
		kv{"model_max_length", s.MaxPositionEmbeddings},
		kv{"pad_token", "<|endoftext|>"},
		kv{"split_special_tokens", false},
		kv{"tokenizer_class", "Qwen2Tokenizer"},
		kv{"unk_token", nil},
	)
	return indentJSON(doc)
}

// chatTemplate is a ChatML template in the style of Qwen's (system, user,
// assistant with tool calls, tool responses, add_generation_prompt; Qwen3
// and Qwen3.5 add the enable_thinking switch, Qwen2.5 a default system
// prompt).
func chatTemplate(s Spec) string {
	sys := `{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
`
	if s.Arch == Qwen2 {
		sys = `{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
`
	}
	gen := `{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
`
	if s.Arch != Qwen2 {
		gen = `{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and not enable_thinking %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
`
	}
	return `{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' + (tool | tojson) }}
    {%- endfor %}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags.<|im_end|>\n' }}
{%- else %}
` + indent(sys) + `{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first %}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content %}
            {{- message.content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {{- '\n<tool_call>\n{"name": "' + tool_call.function.name + '", "arguments": ' + (tool_call.function.arguments | tojson) + '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
` + gen
}

func indent(s string) string {
	var b bytes.Buffer
	for _, line := range bytes.SplitAfter([]byte(s), []byte("\n")) {
		if len(line) > 0 {
			b.WriteString("    ")
			b.Write(line)
		}
	}
	return b.String()
}

func checkTokenizer(s Spec, t *Tokenizer) error {
	if t.Size() != s.TokenizerSize {
		return fmt.Errorf("tinymodel: tokenizer has %d tokens, want %d", t.Size(), s.TokenizerSize)
	}
	return nil
}
