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
