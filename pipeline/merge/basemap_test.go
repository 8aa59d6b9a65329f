package merge

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/phonellm/phonellm/internal/tinymodel"
	"github.com/phonellm/phonellm/pipeline/safetensors"
)

// mappedKB returns the resident size of the mapping that starts at data[0] (/proc/self/smaps).
func mappedKB(t *testing.T, data []byte) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps")
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&data[0])))
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 0 && !strings.HasSuffix(f[0], ":") { // a mapping's header line
			in = strings.HasPrefix(line, start)
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("mapping at %s not found", start)
	return 0
}

// TestBaseMaps checks the shared map: the hash is the file's sha256, and however the two readers move, the
// resident part of the map stays within the bound (2·keep, the margins and one hasher chunk).
func TestBaseMaps(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("resident pages are read from /proc/self/smaps")
	}
	const keep = 4 << 20
	dir := t.TempDir()
	const size = 40<<20 + 12345
	plan := []safetensors.WriteInfo{{Name: "w", DType: safetensors.U8, Shape: []int64{size}}}
	path := filepath.Join(dir, "model.safetensors")
	w, err := safetensors.Create(path, plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 13)
	}
	if err := w.WriteTensor("w", body); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(path)
	want := sha256.Sum256(file)
	bound := int64(2*keep+4*dropMargin+hashChunk) >> 10

	for _, order := range []string{"hash first", "merge first", "merge far behind", "interleaved"} {
		t.Run(order, func(t *testing.T) {
			raw, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			maps := mapBase(raw)
			if maps == nil {
				t.Skip("cannot map here")
			}
			defer maps.close()
			bm := maps.file(path)
			bm.keep = keep
			ti, _ := raw.Tensor("w")
			bm.claim()
			touch := func(off, end int64) { // what the merge does with a block: read it, then report it
				b, err := bm.bytes(off, end-off)
				if err != nil {
					t.Fatal(err)
				}
				var s byte
				for i := 0; i < len(b); i += 4096 {
					s += b[i]
				}
				_ = s
				if err := bm.used(context.Background(), off, end); err != nil {
					t.Fatal(err)
				}
			}
			const blk = 1 << 20
			merge := func(from, to int64) {
				for off := from; off < to; off += blk {
					touch(off, min(off+blk, to))
					if kb := mappedKB(t, bm.data); kb > bound {
						t.Fatalf("%s: %d KiB resident after the merge used [%d, %d), bound %d KiB", order, kb, off, min(off+blk, to), bound)
					}
				}
			}
			check := func(n int64, sum string, err error) {
				if err != nil || n != int64(len(file)) || sum != hex.EncodeToString(want[:]) {
					t.Fatalf("%s: hash %d %s %v", order, n, sum, err)
				}
			}
			start, end := ti.Offset, ti.Offset+ti.Size
			switch order {
			case "hash first": // as when the merge has finished (or failed) early
				maps.finish()
				check(bm.hash(context.Background()))
				merge(start, end)
			case "merge first":
				merge(start, end)
				check(bm.hash(context.Background()))
			case "merge far behind":
				merge(start, start+3*blk)
				maps.finish()
				check(bm.hash(context.Background()))
				merge(start+3*blk, end)
			case "interleaved":
				type result struct {
					n   int64
					sum string
					err error
				}
				done := make(chan result, 1)
				go func() {
					n, sum, err := bm.hash(context.Background())
					done <- result{n, sum, err}
				}()
				// The hasher waits for the merge: it cannot finish before the merge gets near the end.
				select {
				case r := <-done:
					t.Fatalf("the hash finished (%v) before the merge read anything", r.err)
				case <-time.After(50 * time.Millisecond):
				}
				var r result
				received := false
				defer func() { // the hasher must stop before the maps go (deferred calls run last first)
					if !received {
						<-done
					}
				}()
				merge(start, end)
				r, received = <-done, true
				check(r.n, r.sum, r.err)
			}
			if kb := mappedKB(t, bm.data); kb > 64 {
				t.Errorf("%s: %d KiB still resident when both readers are done", order, kb)
			}
		})
	}
}

// TestBaseMapFault: a mapped file that shrinks under the merge gives an error, not a crash.
func TestBaseMapFault(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SIGBUS on a truncated map is Linux behaviour")
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := mmapFile(path)
	if err != nil {
		t.Skip("cannot map here")
	}
	defer munmap(data)
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	bm := &baseMap{path: path, data: data}
	var s byte
	err = bm.guard(func() error {
		for i := 0; i < len(data); i += 4096 {
			s += data[i]
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("read past the new end: %v", err)
	}
}

// TestRunShardsOutOfOrder merges into a base whose shard files hold the tensors in the opposite order to the
// output's (the second file's tensors come first), so the hasher, which hashes the files in name order, and
// the merge meet each file at different times: the result must equal the merge of the same base in one file,
// with the provenance hashes of the resharded files.
func TestRunShardsOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	spec := preset(t, "qwen3")
	spec.DType = tinymodel.BF16
	base := genBase(t, filepath.Join(dir, "base"), spec)
	ad := genAdapter(t, filepath.Join(dir, "a"), spec, tinymodel.AdapterSpec{Seed: 3, TargetModules: []string{"q_proj", "down_proj"}})

	resharded := filepath.Join(dir, "resharded")
	if err := os.MkdirAll(resharded, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".safetensors") && e.Name() != safetensors.IndexFileName {
			b, _ := os.ReadFile(filepath.Join(base, e.Name()))
			os.WriteFile(filepath.Join(resharded, e.Name()), b, 0o644)
		}
	}
	ck, err := safetensors.OpenDir(base)
	if err != nil {
		t.Fatal(err)
	}
	var ts []tensor
	for _, ti := range ck.Tensors() {
		v, err := ck.ReadFloat32(ti.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tensor{ti.Name, ti.DType, ti.Shape, v})
	}
	ck.Close()
	half := len(ts) / 2 // ts is sorted by name: the later half goes into the first file
	names := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	writeST(t, filepath.Join(resharded, names[0]), ts[half:])
	writeST(t, filepath.Join(resharded, names[1]), ts[:half])
	wm := map[string]string{}
	for i, x := range ts {
		wm[x.name] = names[0]
		if i < half {
			wm[x.name] = names[1]
		}
	}
	writeJSON(t, filepath.Join(resharded, safetensors.IndexFileName), map[string]any{"metadata": map[string]any{}, "weight_map": wm})

	outs := map[string]string{}
	for _, b := range []string{base, resharded} {
		out := b + "-merged"
		res, err := Run(context.Background(), Options{Base: b, Adapters: []AdapterRef{{Path: ad}}, Out: out}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Artifacts {
			if filepath.Base(a.Path) == safetensors.SingleFileName {
				outs[b] = a.SHA256
			}
		}
		checkBaseHashes(t, out, b)
	}
	if outs[base] == "" || outs[base] != outs[resharded] {
		t.Errorf("merged model.safetensors: %q from one file, %q from the resharded base", outs[base], outs[resharded])
	}
}
