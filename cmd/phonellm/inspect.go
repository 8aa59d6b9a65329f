package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline/checkpoint"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/spf13/cobra"
)

type inspectKV struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type inspectTensor struct {
	Name  string  `json:"name"`
	Type  string  `json:"type"`
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
}

type inspectResult struct {
	Path         string          `json:"path"`
	Format       string          `json:"format"` // "gguf" or "hf"
	Architecture string          `json:"architecture"`
	Version      uint32          `json:"gguf_version,omitempty"`
	FileType     string          `json:"file_type,omitempty"`
	Config       map[string]any  `json:"config,omitempty"`
	KVs          []inspectKV     `json:"kv,omitempty"`
	Tensors      []inspectTensor `json:"tensors"`
	DTypes       map[string]int  `json:"dtypes"`
	TotalBytes   int64           `json:"total_bytes"`
	Parameters   int64           `json:"parameters"`
	chatTemplate string          // tokenizer.chat_template, checked for a warning
	// Problems lists why the GGUF would not load (package modelcheck); inspect then exits 3 after showing it.
	Problems []string `json:"problems,omitempty"`
	checkErr error
}

func newInspectCmd(a *app) *cobra.Command {
	var showTensors bool
	cmd := &cobra.Command{
		Use:   "inspect FILE.gguf|CHECKPOINT_DIR",
		Short: "Show a GGUF file or a Hugging Face checkpoint (metadata, tensors, types, sizes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := inspect(args[0])
			if err != nil {
				return err
			}
			if err := engine.CheckChatTemplate(res.chatTemplate); err != nil {
				a.io.Warnf("%s: requests will fail: %v", res.Path, err)
			}
			if err := a.io.Result(res, func(w io.Writer) { printInspect(w, res, showTensors || a.io.Verbose) }); err != nil {
				return err
			}
			return res.checkErr
		},
	}
	cmd.Flags().BoolVar(&showTensors, "tensors", true, "list every tensor")
	return cmd
}

func inspect(path string) (*inspectResult, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return inspectHF(path)
	}
	return inspectGGUF(path)
}

func inspectGGUF(path string) (*inspectResult, error) {
	f, err := gguf.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res := &inspectResult{Path: path, Format: "gguf", Architecture: f.Architecture(), Version: f.Version,
		DTypes: map[string]int{}, TotalBytes: f.Size}
	if ft, ok := f.Uint("general.file_type"); ok {
		res.FileType = gguf.FileType(ft).String()
	}
	res.chatTemplate = f.String("tokenizer.chat_template")
	for _, kv := range f.KVs {
		v := jsonSafe(kv.Value.V)
		if arr, ok := v.(gguf.Array); ok {
			if arr.Len() > 16 {
				v = fmt.Sprintf("[%s × %d]", arr.Elem, arr.Len())
			} else {
				v = jsonSafe(arr.Values)
			}
		}
		res.KVs = append(res.KVs, inspectKV{Key: kv.Key, Type: kv.Value.Type.String(), Value: v})
	}
	for _, t := range f.Tensors {
		shape := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int64(d)
		}
		res.Tensors = append(res.Tensors, inspectTensor{Name: t.Name, Type: t.Type.String(), Shape: shape, Bytes: int64(t.Size())})
		res.DTypes[t.Type.String()]++
		res.Parameters += int64(t.NumElements())
	}
	if err := modelcheck.CheckFile(f, modelcheck.Options{}); err != nil {
		res.checkErr = err
		var me *modelcheck.Error
		if !asErr(err, &me) {
			return nil, err
		}
		for _, p := range me.Problems {
			res.Problems = append(res.Problems, p.String())
		}
	}
	return res, nil
}

// jsonSafe replaces NaN and infinite floats (which a hostile file may hold and JSON cannot) by their names.
func jsonSafe(v any) any {
	name := func(f float64) (string, bool) {
		switch {
		case math.IsNaN(f):
			return "NaN", true
		case math.IsInf(f, 1):
			return "+Inf", true
		case math.IsInf(f, -1):
			return "-Inf", true
		}
		return "", false
	}
	switch x := v.(type) {
	case float32:
		if s, ok := name(float64(x)); ok {
			return s
		}
	case float64:
		if s, ok := name(x); ok {
			return s
		}
	case []float32:
		out := make([]any, len(x))
		for i, f := range x {
			out[i] = jsonSafe(f)
		}
		return out
	case []float64:
		out := make([]any, len(x))
		for i, f := range x {
			out[i] = jsonSafe(f)
		}
		return out
	}
	return v
}

func inspectHF(dir string) (*inspectResult, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	res := &inspectResult{Path: dir, Format: "hf", Config: ck.Config, Architecture: ck.Architecture(),
		DTypes: map[string]int{}}
	for _, t := range ck.Tensors() {
		b := ck.Bytes(t.Name)
		res.Tensors = append(res.Tensors, inspectTensor{Name: t.Name, Type: string(t.DType), Shape: t.Shape, Bytes: b})
		res.DTypes[string(t.DType)]++
		res.TotalBytes += b
		res.Parameters += t.NumElements()
	}
	return res, nil
}

func printInspect(w io.Writer, r *inspectResult, tensors bool) {
	fmt.Fprintf(w, "%s (%s)\n", r.Path, r.Format)
	fmt.Fprintf(w, "architecture: %s\n", r.Architecture)
	if r.FileType != "" {
		fmt.Fprintf(w, "file type:    %s\n", r.FileType)
	}
	fmt.Fprintf(w, "parameters:   %s\n", humanCount(r.Parameters))
	fmt.Fprintf(w, "size:         %s\n", ui.HumanBytes(r.TotalBytes))
	types := make([]string, 0, len(r.DTypes))
	for k, n := range r.DTypes {
		types = append(types, fmt.Sprintf("%s×%d", k, n))
	}
	sort.Strings(types)
	fmt.Fprintf(w, "tensors:      %d (%s)\n", len(r.Tensors), strings.Join(types, ", "))
	if r.Format == "hf" {
		keys := make([]string, 0, len(r.Config))
		for k := range r.Config {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "\nconfig:")
		for _, k := range keys {
			b, _ := json.Marshal(r.Config[k])
			s := string(b)
			if len(s) > 100 {
				s = s[:97] + "..."
			}
			fmt.Fprintf(w, "  %s = %s\n", k, s)
		}
	}
	if len(r.KVs) > 0 {
		fmt.Fprintln(w, "\nmetadata:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, kv := range r.KVs {
			s := fmt.Sprint(kv.Value)
			if str, ok := kv.Value.(string); ok {
				s = fmt.Sprintf("%q", str)
			}
			if len(s) > 100 {
				s = s[:97] + "..."
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", kv.Key, kv.Type, s)
		}
		tw.Flush()
	}
	if tensors {
		fmt.Fprintln(w, "\ntensors:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, t := range r.Tensors {
			fmt.Fprintf(tw, "  %s\t%s\t%v\t%s\n", t.Name, t.Type, t.Shape, ui.HumanBytes(t.Bytes))
		}
		tw.Flush()
	}
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
