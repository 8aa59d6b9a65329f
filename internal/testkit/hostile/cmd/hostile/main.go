// Command hostile writes the hostile corpus (package internal/testkit/hostile) to a folder, for looking at the
// mutants by hand or feeding them to another tool:
//
//	go run ./internal/testkit/hostile/cmd/hostile -o /tmp/corpus [-sample 150]
//
// Each mutant becomes <name>.gguf or a checkpoint folder; MANIFEST lists names and expected outcomes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/phonellm/phonellm/internal/testkit/hostile"
)

func main() {
	out := flag.String("o", "", "output folder (created; must not exist)")
	sample := flag.Int("sample", 0, "write only a spread sample of this many mutants (0: all)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "hostile: -o FOLDER is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *out, *sample); err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out string, sample int) error {
	if err := os.Mkdir(out, 0o755); err != nil {
		return err
	}
	all, err := hostile.Corpus(ctx, filepath.Join(out, ".bases"))
	if err != nil {
		return err
	}
	if sample > 0 {
		all = hostile.Sample(all, sample)
	}
	if err := hostile.WriteAll(all, out); err != nil {
		return err
	}
	fmt.Printf("%d mutants in %s\n", len(all), out)
	return nil
}
