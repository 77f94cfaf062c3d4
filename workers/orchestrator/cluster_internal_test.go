package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"testing"
)

func TestInHomeRegion(t *testing.T) {
	t.Parallel()
	regions := map[string]string{"m-eu": "eu", "m-us": "us", "m-none": ""}
	prefer := inHomeRegion(func(id, key string) (string, bool) {
		if key != metaRegion {
			t.Fatalf("meta key %q", key)
		}
		r, ok := regions[id]
		return r, ok
	})
	tests := []struct {
		member, sid string
		want        bool
	}{
		{"m-eu", "eu.s1", true},
		{"m-us", "eu.s1", false},
		{"m-none", "eu.s1", false},
		{"m-gone", "eu.s1", false},
		{"m-eu", "s1", false}, // a plain session prefers nobody
		{"m-none", "s1", false},
	}
	for _, tt := range tests {
		if got := prefer(tt.member, "session", tt.sid); got != tt.want {
			t.Errorf("member %s, session %s: preferred %v, want %v", tt.member, tt.sid, got, tt.want)
		}
	}
}

func TestDrainMemberHandsOffWhenMarkFails(t *testing.T) {
	t.Parallel()
	errMark, errHandOff := errors.New("mark failed"), errors.New("hand-off failed")
	tests := []struct {
		name          string
		mark, handOff error
		want          []error // errors.Is targets; none: nil
	}{
		{name: "both succeed"},
		{name: "mark fails, hand-off still runs", mark: errMark},
		{name: "hand-off fails", handOff: errHandOff, want: []error{errHandOff}},
		{name: "both fail", mark: errMark, handOff: errHandOff, want: []error{errHandOff, errMark}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			handedOff := false
			drain := drainMember(slog.New(slog.DiscardHandler),
				func(context.Context) error { return tt.mark },
				func(context.Context) error { handedOff = true; return tt.handOff })
			err := drain(t.Context())
			if !handedOff {
				t.Fatal("grains not handed off")
			}
			if len(tt.want) == 0 && err != nil {
				t.Fatalf("drain: %v", err)
			}
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Errorf("drain error %v does not wrap %v", err, w)
				}
			}
		})
	}
}
