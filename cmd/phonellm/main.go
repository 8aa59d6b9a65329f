// Command phonellm takes a fine-tuned open-weights model from training to a fleet of phones: merge a LoRA
// adapter, convert to GGUF, quantize, check the phone fit, publish to the Hugging Face Hub, ship to replicas and
// serve an OpenAI-compatible API. Run `phonellm help` for the commands and `phonellm help environment` for the
// environment variables.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], ui.System())
	stop()
	os.Exit(code)
}
