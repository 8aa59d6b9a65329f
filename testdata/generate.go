//go:build ignore

// Command generate writes the tiny test checkpoints of internal/tinymodel
// into testdata/tiny/<preset>/ (and a LoRA adapter for each into
// testdata/tiny/<preset>-lora/). The files total tens of MB, so they are
// not committed: tests generate what they need into temporary directories
// with tinymodel.Generate; this command is for looking at them by hand or
// feeding them to external tools.
//
//	go run testdata/generate.go [-out testdata/tiny] [-dtype F32|BF16] [-preset name] [-adapters]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/tinymodel"
)

func main() {
	out := flag.String("out", filepath.Join("testdata", "tiny"), "output directory")
	dtype := flag.String("dtype", tinymodel.F32, "weight dtype: F32 or BF16")
	only := flag.String("preset", "", "generate only this preset")
	adapters := flag.Bool("adapters", true, "also write a LoRA adapter per preset")
	flag.Parse()
	if err := run(*out, *dtype, *only, *adapters); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

func run(out, dtype, only string, adapters bool) error {
	found := false
	for _, p := range tinymodel.Presets() {
		if only != "" && p.Name != only {
			continue
		}
		found = true
		p.DType = dtype
		dir := filepath.Join(out, p.Name)
		if err := tinymodel.Generate(dir, p); err != nil {
			return err
		}
		n, err := p.NumParams()
		if err != nil {
			return err
		}
		fmt.Printf("%-10s %9d params  %s\n", p.Name, n, dir)
		if adapters {
			adir := filepath.Join(out, p.Name+"-lora")
			if err := tinymodel.GenerateAdapter(adir, p, tinymodel.AdapterSpec{Seed: p.Seed}); err != nil {
				return err
			}
			fmt.Printf("%-10s adapter          %s\n", p.Name, adir)
		}
	}
	if !found {
		return fmt.Errorf("no preset %q", only)
	}
	return nil
}
