package tokenizer

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
)

func runVocab(t testing.TB) *Tokenizer {
	var merges [][2]string
	for s := "a"; len(s) < 64; s += s {
		merges = append(merges, [2]string{s, s})
	}
	return mustNew(t, synthVocab(merges, []string{"<|im_start|>", "<|im_end|>", "<think>", "[PAD9]", "<0x41>"},
		[]Type{Control, Control, UserDefined, Unused, Byte}))
}

func TestLimits(t *testing.T) {
	tk := runVocab(t)
	ctx := context.Background()
	_, err := tk.Encode(ctx, strings.Repeat("x", 101), Options{MaxInputBytes: 100})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitInputBytes || le.Max != 100 || le.Count != 101 || !pipeline.IsInputError(err) {
		t.Fatalf("101 bytes with MaxInputBytes 100: %v", err)
	}
	if ids, err := tk.Encode(ctx, strings.Repeat("x", 100), Options{MaxInputBytes: 100}); err != nil || len(ids) != 100 {
		t.Fatalf("100 bytes with MaxInputBytes 100: %d ids, %v", len(ids), err)
	}
	// "x y" makes 3 tokens without merges.
	if _, err := tk.Encode(ctx, "x y", Options{MaxTokens: 3}); err != nil {
		t.Fatalf("3 tokens with MaxTokens 3: %v", err)
	}
	for _, c := range []struct {
		text string
		o    Options
	}{
		{"x y", Options{MaxTokens: 2}},
		{"<|im_start|><|im_start|><|im_start|>", Options{MaxTokens: 2, ParseSpecial: true}},
		{strings.Repeat("b", 1000), Options{MaxTokens: 999}},
	} {
		_, err := tk.Encode(ctx, c.text, c.o)
		if !errors.As(err, &le) || le.Limit != LimitTokens || le.Max != c.o.MaxTokens || le.Count <= c.o.MaxTokens {
			t.Errorf("Encode(%.20q, %+v): %v; want a token LimitError", c.text, c.o, err)
		}
	}
}

// TestHugeWordRefusedEarly: a word whose length alone exceeds MaxTokens × the longest token is refused
// before its merges (issue 14: four chats each carrying one 15 MiB word took 4.4 GB).
func TestHugeWordRefusedEarly(t *testing.T) {
	tk := runVocab(t)
	word := strings.Repeat("b", 16<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := tk.Encode(context.Background(), word, Options{MaxTokens: 4096})
	runtime.ReadMemStats(&after)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitTokens {
		t.Fatalf("16 MiB word with MaxTokens 4096: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("refusing it allocated %d KB", grew>>10)
	}
}

// TestHugeWordMemory tokenizes a 1 MiB single word without limits and bounds what it allocates: the merge
// queue path uses about 12 bytes per byte of the word (4 for the symbols, 8 for the queue when every pair
// has a merge), plus the output (4 bytes a token, twice that while the slice grows).
func TestHugeWordMemory(t *testing.T) {
	tk := runVocab(t)
	const n = 1 << 20
	for _, word := range []string{strings.Repeat("a", n), strings.Repeat("ab", n/2)} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ids, err := tk.Encode(context.Background(), word, Options{})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		grew := after.TotalAlloc - before.TotalAlloc
		t.Logf("%.2q… (%d bytes): %d tokens, %.1f bytes allocated per input byte", word[:4], n, len(ids), float64(grew)/n)
		if grew > uint64(15*n+12*len(ids)) {
			t.Errorf("%d bytes allocated for a %d-byte word (%.1f per byte)", grew, n, float64(grew)/n)
		}
		if dec, _ := tk.Decode(ids); dec != word {
			t.Fatal("the word does not decode to itself")
		}
	}
}

func TestCancel(t *testing.T) {
	tk := runVocab(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, s := range []string{"x", strings.Repeat("a", 1<<20), strings.Repeat("a b ", 1<<18)} {
		if _, err := tk.Encode(ctx, s, Options{}); !errors.Is(err, context.Canceled) {
			t.Errorf("Encode with a cancelled context: %v", err)
		}
	}
	// A context that ends during a long word stops its merges.
	sc := &scratch{}
	ctx2, cancel2 := context.WithCancel(context.Background())
	calls := 0
	stop := &stopAfter{Context: ctx2, n: 3, calls: &calls, cancel: cancel2}
	if _, err := tk.bpeLarge(stop, strings.Repeat("a", 1<<20), sc, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("bpeLarge with a context cancelled midway: %v", err)
	}
	if calls < 3 {
		t.Errorf("the context was checked %d times", calls)
	}
}

// stopAfter is a context whose Err starts failing after n calls.
type stopAfter struct {
	context.Context
	n      int
	calls  *int
	cancel context.CancelFunc
}

func (s *stopAfter) Err() error {
	if *s.calls++; *s.calls >= s.n {
		s.cancel()
	}
	return s.Context.Err()
}

func TestSpecialParsing(t *testing.T) {
	tk := runVocab(t)
	ctx := context.Background()
	text := "<|im_start|>x<think>y"
	on, _ := tk.Encode(ctx, text, Options{ParseSpecial: true})
	off, _ := tk.Encode(ctx, text, Options{})
	start, think := tk.tokenID("<|im_start|>"), tk.tokenID("<think>")
	if len(on) != 4 || on[0] != start || on[2] != think {
		t.Errorf("ParseSpecial: %v", on)
	}
	// Without ParseSpecial control tokens are text; user-defined ones are still matched.
	if len(off) != 12+1+1+1 || off[0] == start || off[13] != think {
		t.Errorf("without ParseSpecial: %v", off)
	}
	// Unused and byte-typed tokens are never matched in text.
	if ids, _ := tk.Encode(ctx, "[PAD9]<0x41>", Options{ParseSpecial: true}); len(ids) != 12 {
		t.Errorf("[PAD9]<0x41> = %v", ids)
	}
}

func TestAddSpecial(t *testing.T) {
	v := synthVocab(nil, []string{"<s>", "</s>"}, []Type{Control, Control})
	v.BOS, v.EOS = len(v.Tokens)-2, len(v.Tokens)-1
	tk := mustNew(t, v)
	ctx := context.Background()
	if ids, _ := tk.Encode(ctx, "x", Options{AddSpecial: true}); len(ids) != 1 {
		t.Errorf("add_bos false: %v", ids)
	}
	v.AddBOS, v.AddEOS = true, true
	tk = mustNew(t, v)
	ids, _ := tk.Encode(ctx, "x", Options{AddSpecial: true})
	if !slices.Equal(ids, []int32{int32(v.BOS), tk.byteID['x'], int32(v.EOS)}) {
		t.Errorf("add_bos and add_eos: %v", ids)
	}
	if _, err := tk.Encode(ctx, "x", Options{AddSpecial: true, MaxTokens: 2}); err == nil {
		t.Error("BOS + 1 + EOS fit in MaxTokens 2")
	}
}

func TestDecodeAndPiece(t *testing.T) {
	tk := runVocab(t)
	ctx := context.Background()
	text := "<|im_start|>héllo 世界 😀\n<think>aaaa</think>"
	ids, err := tk.Encode(ctx, text, Options{ParseSpecial: true})
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := tk.Decode(ids); err != nil || dec != text {
		t.Fatalf("Decode = %q, %v", dec, err)
	}
	// Pieces: control tokens show nothing, the rest concatenates to the text; byte tokens split characters.
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(tk.Piece(id))
	}
	if want := strings.TrimPrefix(text, "<|im_start|>"); b.String() != want {
		t.Errorf("pieces = %q, want %q", b.String(), want)
	}
	if p := tk.Piece(tk.byteID[0xE4]); p != "\xe4" {
		t.Errorf("piece of byte 0xE4 = %q", p)
	}
	if tk.Piece(tk.tokenID("[PAD9]")) != "" || tk.Piece(-1) != "" || tk.Piece(int32(tk.Len())) != "" {
		t.Error("unused or out-of-range tokens have pieces")
	}
	if p := tk.Piece(tk.tokenID("<0x41>")); p != "A" {
		t.Errorf("byte token <0x41> = %q", p)
	}
	if _, err := tk.Decode([]int32{0, int32(tk.Len())}); err == nil {
		t.Error("Decode accepted an id outside the vocabulary")
	}
}

// TestNormalization: Qwen's pre-tokenizers come with NFC (their tokenizer.json's normalizer); the
// DeepSeek-R1-Distill-Qwen one is taken as llama.cpp takes it, without normalization.
func TestNormalization(t *testing.T) {
	for pre, want := range map[string]int{"qwen2": 2, "qwen35": 2, "deepseek-r1-qwen": 3} {
		v := synthVocab(nil, nil, nil)
		v.Pre = pre
		ids, err := mustNew(t, v).Encode(context.Background(), "e\u0301", Options{})
		if err != nil || len(ids) != want {
			t.Errorf("%s: e+U+0301 = %v, %v; want %d byte tokens", pre, ids, err, want)
		}
	}
}
