package local

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/phonellm/phonellm/pipeline/deploy"
)

// ListenFD is the file descriptor at which a gateway process — and a supervisor started by Deploy — finds
// the gateway's listening socket: the first of exec.Cmd.ExtraFiles.
const ListenFD = 3

// ListenFDEnv is set (to "3") in the environment of a supervisor that Deploy started with the gateway's bound
// socket at [ListenFD]. `phonellm fleet supervise` reads it and passes the socket in
// SuperviseOptions.Listener; the supervisor removes it from its children's environment.
const ListenFDEnv = "PHONELLM_GATEWAY_LISTEN_FD"

// listenGateway binds the gateway's loopback port; a port in use is a *deploy.PortInUseError.
func listenGateway(port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, &deploy.PortInUseError{Port: port, Err: err}
		}
		return nil, fmt.Errorf("local: gateway: listen on 127.0.0.1:%d: %w", port, err)
	}
	return ln, nil
}

// listenerFile returns a duplicate of a TCP listener's socket, to hand to a child process.
func listenerFile(ln net.Listener) (*os.File, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("local: gateway socket %s is not TCP", ln.Addr())
	}
	f, err := tl.File()
	if err != nil {
		return nil, fmt.Errorf("local: gateway socket: %w", err)
	}
	return f, nil
}

func listenerPort(ln net.Listener) int {
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// InheritedListener returns the TCP listening socket at file descriptor fd ([ListenFD]), handed over by the
// process that started this one. The descriptor itself is closed (the listener holds a duplicate), so it
// does not leak into this process's own children.
func InheritedListener(fd int) (net.Listener, error) {
	if fd < 3 {
		return nil, fmt.Errorf("local: file descriptor %d is a standard stream, not an inherited socket", fd)
	}
	f := os.NewFile(uintptr(fd), "inherited-listener")
	if f == nil {
		return nil, fmt.Errorf("local: file descriptor %d is not open", fd)
	}
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("local: file descriptor %d is not a listening socket: %w", fd, err)
	}
	if _, ok := ln.Addr().(*net.TCPAddr); !ok {
		ln.Close()
		return nil, fmt.Errorf("local: file descriptor %d is a %s socket, want TCP", fd, ln.Addr().Network())
	}
	return ln, nil
}
