package bench

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// Child is one measured run of a command in a process of its own.
type Child struct {
	// Stdout is what the command printed on stdout.
	Stdout []byte
	// Seconds is the wall time from start to exit.
	Seconds float64
	// PeakRSS is the child's peak resident set in bytes (getrusage ru_maxrss); 0 where the system does not say.
	PeakRSS int64
	// CPUSeconds is the child's user plus system CPU time (getrusage).
	CPUSeconds float64
}

// RunChild runs argv (argv[0] is the program) with env in a child process and measures it, so that a peak
// RSS is the measured work's alone — `phonellm bench quantize` runs each quantization this way. The child is
// killed when ctx ends; its stderr goes to stderr (discarded when nil).
func RunChild(ctx context.Context, argv, env []string, stderr io.Writer) (Child, error) {
	if len(argv) == 0 {
		return Child{}, errors.New("bench: empty command")
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = env
	c.Stderr = stderr
	start := time.Now()
	out, err := c.Output()
	res := Child{Stdout: out, Seconds: time.Since(start).Seconds()}
	if c.ProcessState != nil {
		res.CPUSeconds = (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
		if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok && ru != nil {
			res.PeakRSS = int64(ru.Maxrss) * 1024 // kilobytes on Linux
		}
	}
	return res, err
}
