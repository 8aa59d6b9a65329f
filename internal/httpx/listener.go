package httpx

import (
	"net"
	"sync"
	"sync/atomic"
)

// LimitListener returns a listener that keeps at most n accepted connections open at once: Accept waits
// (further clients stay in the kernel's accept queue) until one of them is closed. Without it, enough idle
// or slow connections exhaust the process's file descriptors ("accept4: too many open files"), and then
// the model file, the logs and every new client fail together. n <= 0 means no limit.
func LimitListener(l net.Listener, n int) *Limited {
	ll := &Limited{Listener: l, done: make(chan struct{})}
	if n > 0 {
		ll.sem = make(chan struct{}, n)
	}
	return ll
}

// Limited is a listener made by LimitListener.
type Limited struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	open      atomic.Int64
}

// Accept waits for a free place, then for a connection.
func (l *Limited) Accept() (net.Conn, error) {
	if l.sem != nil {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			// Closed while waiting: return the listener's own error.
			c, err := l.Listener.Accept()
			if err == nil {
				_ = c.Close()
				err = net.ErrClosed
			}
			return nil, err
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	l.open.Add(1)
	return &limitedConn{Conn: c, l: l}, nil
}

// Open returns the number of accepted connections not yet closed.
func (l *Limited) Open() int { return int(l.open.Load()) }

// Close closes the listener and wakes a waiting Accept.
func (l *Limited) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

func (l *Limited) release() {
	if l.sem != nil {
		<-l.sem
	}
}

type limitedConn struct {
	net.Conn
	l    *Limited
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.release()
	})
	return err
}
