package agent_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
)

func TestCapped(t *testing.T) {
	big := strings.Repeat("x", 5000)
	img := agent.Content{Type: agent.ContentImage, Mime: "image/png", Data: strings.Repeat("A", 3000)}
	tests := []struct {
		name     string
		in       agent.FunctionResult
		limit    int
		cut      bool
		texts    []string // the text of each block, "…" meaning a prefix then the note
		truncate bool
	}{
		{"under the limit", agent.TextResult("small"), 1000, false, []string{"small"}, false},
		{"no limit", agent.TextResult(big), 0, false, []string{big}, false},
		{"one long text", agent.TextResult(big), 1000, true, []string{strings.Repeat("x", 840), "\n[result truncated by the harness: 5000 bytes, the first 840 kept]"}, true},
		{"details alone too large", agent.FunctionResult{Content: []agent.Content{agent.Text("ok")}, Details: map[string]any{"v": big}}, 1000, true, []string{"ok"}, true},
		// Markup in details weighs its own size, not that of six-byte
		// escapes (150 tags: 600 bytes, 2,700 escaped).
		{"markup details under the limit", agent.FunctionResult{Content: []agent.Content{agent.Text("ok")}, Details: map[string]any{"v": strings.Repeat("<br>", 150)}}, 1000, false, []string{"ok"}, false},
		{"a second text block dropped", agent.FunctionResult{Content: []agent.Content{agent.Text("first"), agent.Text(big)}}, 1000, true,
			[]string{"first", strings.Repeat("x", 835), "\n[result truncated by the harness: 5005 bytes, the first 840 kept]"}, true},
		{"an image that does not fit", agent.FunctionResult{Content: []agent.Content{agent.Text("see"), img}}, 1000, true,
			[]string{"see", "\n[result truncated by the harness: 3003 bytes, the first 3 kept]"}, true},
		{"cut between characters", agent.TextResult("a" + strings.Repeat("é", 1000)), 1000, true,
			[]string{"a" + strings.Repeat("é", 419), "\n[result truncated by the harness: 2001 bytes, the first 839 kept]"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.IsError = true
			got, cut := tt.in.Capped(tt.limit)
			if cut != tt.cut || !got.IsError {
				t.Fatalf("cut %v, is_error %v", cut, got.IsError)
			}
			var texts []string
			for _, c := range got.Content {
				texts = append(texts, c.Text)
			}
			if strings.Join(texts, "|") != strings.Join(tt.texts, "|") {
				t.Fatalf("content %.200q, want %.200q", texts, tt.texts)
			}
			d, ok := got.Details.(agent.TruncatedDetails)
			if ok != tt.truncate || (ok && (!d.Truncated || d.Limit != tt.limit || d.Bytes != tt.in.Size())) {
				t.Fatalf("details %+v", got.Details)
			}
			if tt.limit > 0 && got.Size() > tt.limit {
				t.Fatalf("%d bytes over %d", got.Size(), tt.limit)
			}
		})
	}
}

// FuzzCapped: a capped result fits its limit (when the limit leaves room
// for the note) and keeps valid text valid.
func FuzzCapped(f *testing.F) {
	f.Add("hello", "world", 4, 200)
	f.Add(strings.Repeat("é", 500), "", 0, 300)
	f.Fuzz(func(t *testing.T, a, b string, data, limit int) {
		r := agent.FunctionResult{Content: []agent.Content{agent.Text(a), {Type: agent.ContentImage, Data: strings.Repeat("A", max(min(data, 1<<16), 0))}, agent.Text(b)}}
		got, cut := r.Capped(limit)
		if !cut {
			if limit > 0 && r.Size() > limit {
				t.Fatalf("not cut at %d bytes over %d", r.Size(), limit)
			}
			return
		}
		if limit >= 400 && got.Size() > limit {
			t.Fatalf("%d bytes over %d", got.Size(), limit)
		}
		for _, c := range got.Content {
			if utf8.ValidString(a+b) && !utf8.ValidString(c.Text) {
				t.Fatalf("invalid text %q", c.Text)
			}
		}
	})
}
