package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func msgs(n, from int) []Message {
	out := make([]Message, n)
	for i := range out {
		out[i] = UserText(fmt.Sprintf("m%d", from+i), 1)
	}
	return out
}

func texts(ms []Message) string {
	s := ""
	for _, m := range ms {
		s += m.Content[0].Text + " "
	}
	return s
}

func TestTranscriptsResolve(t *testing.T) {
	t.Parallel()
	kept := NewTranscripts(4, time.Minute)
	if kept.Keep(&TranscriptRef{ID: "t1"}, msgs(3, 0)) != "t1" {
		t.Fatal("whole transcript not kept")
	}
	tests := []struct {
		name    string
		req     ProviderRequest
		want    string // texts of the resolved messages
		wantErr error
	}{
		{name: "no reference", req: ProviderRequest{Messages: msgs(1, 0)}, want: "m0 "},
		{name: "whole", req: ProviderRequest{Messages: msgs(2, 5), Transcript: &TranscriptRef{ID: "t9"}}, want: "m5 m6 "},
		{name: "continuation", req: ProviderRequest{Transcript: &TranscriptRef{ID: "t1", Base: 3, More: msgs(2, 3)}}, want: "m0 m1 m2 m3 m4 "},
		{name: "continuation of a shorter base", req: ProviderRequest{Transcript: &TranscriptRef{ID: "t1", Base: 2, More: msgs(1, 2)}}, want: "m0 m1 m2 "},
		{name: "base with nothing more", req: ProviderRequest{Transcript: &TranscriptRef{ID: "t1", Base: 3}}, want: "m0 m1 m2 "},
		{name: "unknown id", req: ProviderRequest{Transcript: &TranscriptRef{ID: "t2", Base: 1, More: msgs(1, 1)}}, wantErr: ErrTranscriptNotKept},
		{name: "base past what is kept", req: ProviderRequest{Transcript: &TranscriptRef{ID: "t1", Base: 9, More: msgs(1, 9)}}, wantErr: ErrTranscriptNotKept},
		{name: "bad id", req: ProviderRequest{Transcript: &TranscriptRef{ID: "t.1", Base: 1}}, wantErr: ErrInvalidMessage},
		{name: "empty id", req: ProviderRequest{Messages: msgs(1, 0), Transcript: &TranscriptRef{}}, wantErr: ErrInvalidMessage},
		{name: "negative base", req: ProviderRequest{Transcript: &TranscriptRef{ID: "t1", Base: -1}}, wantErr: ErrInvalidMessage},
		{name: "more without base", req: ProviderRequest{Transcript: &TranscriptRef{ID: "t1", More: msgs(1, 0)}}, wantErr: ErrInvalidMessage},
		{name: "continuation with messages", req: ProviderRequest{Messages: msgs(1, 0), Transcript: &TranscriptRef{ID: "t1", Base: 1}}, wantErr: ErrInvalidMessage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			got, err := kept.Resolve(req.Transcript, req.Messages)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := texts(got); got != tc.want {
				t.Fatalf("messages %q, want %q", got, tc.want)
			}
		})
	}
}

// A continuation kept and continued again grows one transcript; a
// retried continuation from an older base does not disturb what a reader
// of the longer one holds.
func TestTranscriptsGrow(t *testing.T) {
	t.Parallel()
	kept := NewTranscripts(0, 0)
	kept.Keep(&TranscriptRef{ID: "g"}, msgs(2, 0))
	var long []Message
	for n := 2; n < 10; n += 2 {
		ref := &TranscriptRef{ID: "g", Base: n, More: msgs(2, n)}
		all, err := kept.Resolve(ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		if kept.Keep(ref, all) != "g" {
			t.Fatal("not kept")
		}
		long = all
	}
	if got := texts(long); got != "m0 m1 m2 m3 m4 m5 m6 m7 m8 m9 " {
		t.Fatalf("grown to %q", got)
	}
	retry, err := kept.Resolve(&TranscriptRef{ID: "g", Base: 4, More: []Message{UserText("other", 1)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := texts(retry); got != "m0 m1 m2 m3 other " {
		t.Fatalf("retry resolved to %q", got)
	}
	if got := texts(long); got != "m0 m1 m2 m3 m4 m5 m6 m7 m8 m9 " {
		t.Fatalf("a retry changed an earlier request's messages: %q", got)
	}
}

func TestTranscriptsBounds(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	kept := NewTranscripts(2, time.Minute)
	kept.now = func() time.Time { return now }
	for _, id := range []string{"a", "b", "c"} {
		kept.Keep(&TranscriptRef{ID: id}, msgs(1, 0))
	}
	if kept.Len() != 2 {
		t.Fatalf("%d kept, want 2", kept.Len())
	}
	cont := func(id string) error {
		_, err := kept.Resolve(&TranscriptRef{ID: id, Base: 1}, nil)
		return err
	}
	if err := cont("a"); !errors.Is(err, ErrTranscriptNotKept) {
		t.Fatalf("least recently used not evicted: %v", err)
	}
	if err := cont("c"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if err := cont("c"); !errors.Is(err, ErrTranscriptNotKept) {
		t.Fatalf("idle transcript served: %v", err)
	}
	kept.Keep(&TranscriptRef{ID: "d"}, msgs(1, 0))
	if kept.Len() != 1 {
		t.Fatalf("idle transcripts not dropped: %d kept", kept.Len())
	}
	for _, req := range []ProviderRequest{
		{Messages: msgs(1, 0)},
		{Transcript: &TranscriptRef{ID: "y"}},
		{Messages: msgs(1, 0), Transcript: &TranscriptRef{ID: "bad id"}},
	} {
		if id := kept.Keep(req.Transcript, req.Messages); id != "" {
			t.Fatalf("kept %+v as %q", req, id)
		}
	}
}

// Resolve never panics, and what it answers is base kept messages
// followed by more.
func FuzzTranscriptsResolve(f *testing.F) {
	f.Add("t1", 3, 2, 5, 0)
	f.Add("t1", 0, 1, 0, 1)
	f.Add("bad id", -1, 0, 2, 0)
	f.Add("t2", 7, 0, 3, 2)
	f.Fuzz(func(t *testing.T, id string, base, more, keep, given int) {
		if more < 0 || more > 64 || keep < 0 || keep > 64 || given < 0 || given > 4 {
			return
		}
		kept := NewTranscripts(4, time.Minute)
		kept.Keep(&TranscriptRef{ID: "t1"}, msgs(keep, 0))
		ref := &TranscriptRef{ID: id, Base: base, More: msgs(more, base)}
		got, err := kept.Resolve(ref, msgs(given, 0))
		if err != nil {
			return
		}
		switch {
		case base == 0 && len(got) != given:
			t.Fatalf("whole request resolved to %d messages, given %d", len(got), given)
		case base > 0 && len(got) != base+more:
			t.Fatalf("continuation resolved to %d messages, want %d", len(got), base+more)
		case base > 0 && texts(got[base:]) != texts(ref.More):
			t.Fatalf("continuation's tail %q, want %q", texts(got[base:]), texts(ref.More))
		}
	})
}

// The kept transcripts are bounded in bytes together: the least recently
// used go first, growth by continuation counts, and a transcript larger
// than the bound alone is not kept (its sender sends it whole).
func TestTranscriptsByteBound(t *testing.T) {
	t.Parallel()
	big := func(kib int) []Message {
		return []Message{UserText(string(make([]byte, kib<<10)), 1)}
	}
	kept := NewTranscripts(0, time.Minute, WithMaxKeptBytes(10<<10))
	if kept.Keep(&TranscriptRef{ID: "a"}, big(4)) != "a" || kept.Keep(&TranscriptRef{ID: "b"}, big(4)) != "b" {
		t.Fatal("transcripts under the bound not kept")
	}
	if got := kept.Bytes(); got < 8<<10 || got > 9<<10 {
		t.Fatalf("kept bytes %d, want about 8 KiB", got)
	}
	// Growing b past the bound drops a, the least recently used.
	all, err := kept.Resolve(&TranscriptRef{ID: "b", Base: 1, More: big(3)}, nil)
	if err != nil || len(all) != 2 {
		t.Fatalf("continuation of b: %d messages, %v", len(all), err)
	}
	if kept.Keep(&TranscriptRef{ID: "b"}, all) != "b" {
		t.Fatal("b not kept after it grew")
	}
	if _, err := kept.Resolve(&TranscriptRef{ID: "a", Base: 1, More: big(0)}, nil); !errors.Is(err, ErrTranscriptNotKept) {
		t.Fatalf("a should have been dropped for b's growth: %v", err)
	}
	if got := kept.Bytes(); got < 7<<10 || got > 8<<10 {
		t.Fatalf("kept bytes %d after the drop, want about 7 KiB (b alone)", got)
	}
	// Too large alone: not kept, and nothing else is lost for it.
	if id := kept.Keep(&TranscriptRef{ID: "huge"}, big(11)); id != "" {
		t.Fatalf("a transcript over the bound was kept as %q", id)
	}
	if kept.Len() != 1 || kept.Bytes() < 7<<10 {
		t.Fatalf("after an oversized keep: %d kept, %d bytes (want b alone)", kept.Len(), kept.Bytes())
	}
}
