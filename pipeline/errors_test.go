package pipeline

import (
	"errors"
	"fmt"
	"testing"
)

type fmtErr struct{}

func (fmtErr) Error() string    { return "bad bytes" }
func (fmtErr) InputError() bool { return true }

type maybeRemote struct{ remote bool }

func (e maybeRemote) Error() string     { return "hub" }
func (e maybeRemote) RemoteError() bool { return e.remote }

func TestClassify(t *testing.T) {
	wrapped := fmt.Errorf("quantize: tensor %q: %w", "x", fmtErr{})
	if !IsInputError(wrapped) || IsRemoteError(wrapped) || IsCheckFailed(wrapped) {
		t.Fatalf("wrapped input error misclassified")
	}
	if IsRemoteError(maybeRemote{false}) || !IsRemoteError(fmt.Errorf("x: %w", maybeRemote{true})) {
		t.Fatalf("per-value classification ignored")
	}
	plain := errors.New("disk full")
	if IsInputError(plain) || IsRemoteError(plain) || IsCheckFailed(plain) {
		t.Fatalf("plain error classified")
	}
	for _, c := range []struct {
		err              error
		in, remote, chck bool
	}{
		{InputError(plain), true, false, false},
		{RemoteError(plain), false, true, false},
		{fmt.Errorf("gate: %w", CheckFailed(plain)), false, false, true},
	} {
		if IsInputError(c.err) != c.in || IsRemoteError(c.err) != c.remote || IsCheckFailed(c.err) != c.chck {
			t.Errorf("%v: got input=%v remote=%v check=%v", c.err, IsInputError(c.err), IsRemoteError(c.err), IsCheckFailed(c.err))
		}
		if !errors.Is(c.err, plain) {
			t.Errorf("%v does not unwrap to its cause", c.err)
		}
	}
	if InputError(nil) != nil || RemoteError(nil) != nil || CheckFailed(nil) != nil {
		t.Fatalf("nil must stay nil")
	}
}
