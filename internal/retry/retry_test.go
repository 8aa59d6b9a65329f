package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func noSleep(slept *[]time.Duration) func(context.Context, time.Duration) error {
	return func(ctx context.Context, d time.Duration) error {
		*slept = append(*slept, d)
		return ctx.Err()
	}
}

func TestDoRetriesOnlyTransient(t *testing.T) {
	var slept []time.Duration
	p := Policy{Attempts: 4, Base: 10 * time.Millisecond, Max: time.Second, Sleep: noSleep(&slept)}
	calls := 0
	err := p.Do(context.Background(), func(int) error {
		calls++
		if calls < 3 {
			return Transient(errors.New("503"))
		}
		return nil
	})
	if err != nil || calls != 3 || len(slept) != 2 {
		t.Fatalf("err=%v calls=%d slept=%v", err, calls, slept)
	}

	calls = 0
	permanent := errors.New("400 bad request")
	err = p.Do(context.Background(), func(int) error { calls++; return permanent })
	if !errors.Is(err, permanent) || calls != 1 {
		t.Fatalf("permanent error retried: err=%v calls=%d", err, calls)
	}
}

func TestDoBoundedAndHonoursAfter(t *testing.T) {
	var slept []time.Duration
	p := Policy{Attempts: 3, Base: 10 * time.Millisecond, Max: 500 * time.Millisecond, Sleep: noSleep(&slept)}
	calls := 0
	base := errors.New("429")
	err := p.Do(context.Background(), func(int) error { calls++; return After(base, 300*time.Millisecond) })
	if calls != 3 || !errors.Is(err, base) {
		t.Fatalf("calls=%d err=%v", calls, err)
	}
	for _, d := range slept {
		if d != 300*time.Millisecond {
			t.Fatalf("Retry-After not honoured: slept %v", slept)
		}
	}
	// Server delay above Max is capped.
	slept = nil
	_ = p.Do(context.Background(), func(int) error { return After(base, time.Hour) })
	for _, d := range slept {
		if d != 500*time.Millisecond {
			t.Fatalf("delay not capped: %v", slept)
		}
	}
}

func TestDoStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Policy{Attempts: 10, Base: time.Hour, Max: time.Hour}.Do(ctx, func(int) error {
		calls++
		cancel()
		return Transient(errors.New("x"))
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("err=%v calls=%d", err, calls)
	}
}

func TestDelayJitterBounds(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: time.Second}
	for attempt := 1; attempt <= 8; attempt++ {
		want := 100 * time.Millisecond << (attempt - 1)
		if want > time.Second {
			want = time.Second
		}
		for range 50 {
			d := p.Delay(attempt)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}

func TestServerDelay(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{http.Header{"Retry-After": {now.Add(3 * time.Second).Format(http.TimeFormat)}}, 3 * time.Second, true},
		{http.Header{"Retry-After": {"99999999999"}}, 24 * time.Hour, true},
		{http.Header{"Ratelimit": {`"api";r=0;t=166`}}, 167 * time.Second, true},
		{http.Header{"Ratelimit": {`"api";r=5;t=166`}}, 0, false},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{}, 0, false},
	}
	for i, c := range cases {
		got, ok := ServerDelay(c.h, now)
		if got != c.want || ok != c.ok {
			t.Errorf("case %d %v: got %v,%v want %v,%v", i, c.h, got, ok, c.want, c.ok)
		}
	}
}

func TestStatusRetryable(t *testing.T) {
	for _, c := range []int{408, 429, 500, 502, 503, 504} {
		if !StatusRetryable(c) {
			t.Errorf("%d should be retryable", c)
		}
	}
	for _, c := range []int{200, 400, 401, 403, 404, 409, 412, 422} {
		if StatusRetryable(c) {
			t.Errorf("%d should not be retryable", c)
		}
	}
}

func FuzzServerDelay(f *testing.F) {
	f.Add("7", `"api";r=0;t=166`)
	f.Add("Wed, 21 Oct 2015 07:28:00 GMT", "")
	f.Fuzz(func(t *testing.T, ra, rl string) {
		d, ok := ServerDelay(http.Header{"Retry-After": {ra}, "Ratelimit": {rl}}, time.Unix(0, 0))
		if d < 0 || d > 24*time.Hour || (!ok && d != 0) {
			t.Fatal(fmt.Sprint(d, ok))
		}
	})
}
